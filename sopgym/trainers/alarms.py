"""Training alarms: each one is raised by the condition its name states, and shows up three ways.

A fired alarm is a logged warning, an MLflow tag ``alarm/<name>`` (the message of its latest firing)
and a metric ``alarms/<name>`` (1 when it fired at that step, 0 when it was checked and stayed
silent), so a dashboard, a tag search and a log reader all see it.

* ``truncated_episodes`` (every RL step): more than ``alarms.truncation_rate`` (5%) of the step's
  episodes were truncated by any cause: the turn cap, the context budget, a wall-time budget over
  the tools (``turn_time``, ``episode_time``), the sandbox, or a turn cut by ``max_new_tokens``. Truncated episodes end without the policy's answer, so their reward says
  more about the budget than about the policy.
* ``zero_variance`` (every RL step): some reward component, or the outcome (the reward without its
  shaping, what ``algo.filter_zero_variance`` reads), has the same value for every member in more than
  ``alarms.zero_variance_share`` of the step's groups. Under a group baseline such a component teaches
  nothing in those groups.
* ``reward_up_heldout_down`` (every held-out evaluation, the last one included): across the last
  ``alarms.divergence_window`` evaluations the training reward rose while held-out task success fell
  (least-squares slopes of opposite sign): the policy is exploiting the training reward.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from .config import AlarmsConfig
from .episodes import Episode

log = logging.getLogger("sopgym.trainers")

TRUNCATED = "truncated_episodes"
ZERO_VARIANCE = "zero_variance"
DIVERGENCE = "reward_up_heldout_down"
ALARMS = (TRUNCATED, ZERO_VARIANCE, DIVERGENCE)


@dataclass(frozen=True)
class AlarmCheck:
    name: str
    fired: bool
    message: str = ""


def truncation_check(episodes: list[Episode], max_rate: float) -> AlarmCheck:
    """Share of episodes truncated by any cause (a truncation cause, or a turn cut by ``max_new_tokens``)."""
    if not episodes:
        return AlarmCheck(TRUNCATED, False)
    truncated = [ep for ep in episodes if ep.truncation_cause is not None or ep.token_cap_hits > 0]
    rate = len(truncated) / len(episodes)
    if rate <= max_rate:
        return AlarmCheck(TRUNCATED, False)
    causes: dict[str, int] = {}
    for ep in truncated:
        for cause in filter(None, (ep.truncation_cause, "max_new_tokens" if ep.token_cap_hits else None)):
            causes[cause] = causes.get(cause, 0) + 1
    detail = ", ".join(f"{cause} {n}" for cause, n in sorted(causes.items()))
    return AlarmCheck(TRUNCATED, True, f"{rate:.1%} of episodes truncated (> {max_rate:.1%}): {detail}")


def zero_variance_check(zero_variance_stats: dict[str, float], max_share: float) -> AlarmCheck:
    """From ``assign_advantages``' statistics: the components (and the outcome) with zero variance in
    more than ``max_share`` of the groups."""
    over = {}
    for key, share in zero_variance_stats.items():
        if key == "rollout/zero_variance_group_fraction":
            name = "outcome"
        elif key.startswith("rollout/zero_variance_fraction/"):
            name = key.rsplit("/", 1)[1]
        else:
            continue
        if share > max_share:
            over[name] = share
    if not over:
        return AlarmCheck(ZERO_VARIANCE, False)
    detail = ", ".join(f"{name} in {share:.0%}" for name, share in sorted(over.items()))
    return AlarmCheck(ZERO_VARIANCE, True, f"zero variance in more than {max_share:.0%} of groups: {detail}")


def _slope(values: list[float]) -> float:
    n = len(values)
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    return sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values)) / sum((i - mean_x) ** 2 for i in range(n))


def evaluation_points(history: list[dict[str, float]], val_curve: list[tuple[int, float, float]]) -> list[tuple[int, float, float]]:
    """``(step, training reward, held-out success)`` per evaluation. The training reward of an
    evaluation after step s is the mean rollout reward of the steps since the previous evaluation;
    for the evaluation before RL it is the first step's (its rollouts come from the policy evaluated).
    Evaluations without a training reward yet are left out."""
    rewards = {int(h["step"]): h["rollout/reward/mean"] for h in history}
    points, previous = [], None
    for step, success, _ in val_curve:
        window = [0] if step == 0 else list(range(previous if previous is not None else 0, step))
        values = [rewards[s] for s in window if s in rewards]
        if values:
            points.append((step, sum(values) / len(values), success))
        previous = step
    return points


def divergence_check(points: list[tuple[int, float, float]], window: int) -> AlarmCheck:
    """Training reward rising and held-out success falling across the last ``window`` evaluations."""
    if len(points) < window:
        return AlarmCheck(DIVERGENCE, False)
    last = points[-window:]
    reward_slope, success_slope = _slope([p[1] for p in last]), _slope([p[2] for p in last])
    if reward_slope > 0 and success_slope < 0:
        return AlarmCheck(
            DIVERGENCE, True,
            f"over the evaluations at steps {[p[0] for p in last]} training reward rose "
            f"{last[0][1]:.3f} -> {last[-1][1]:.3f} while held-out success fell {last[0][2]:.3f} -> {last[-1][2]:.3f}",
        )
    return AlarmCheck(DIVERGENCE, False)


class Alarms:
    """Raises the alarms of a run: warning, MLflow tag and metric for each check.

    Args:
        cfg: the thresholds.
        tracker: a ``tracking.Tracker`` (its ``set_tag``).
    """

    def __init__(self, cfg: AlarmsConfig, tracker: Any):
        self.cfg = cfg
        self.tracker = tracker
        self.fired: list[tuple[int, str, str]] = []
        """``(step, name, message)`` of every firing of this process."""

    def _raise(self, check: AlarmCheck, step: int) -> dict[str, float]:
        if check.fired:
            log.warning("alarm %s at step %d: %s", check.name, step, check.message)
            self.tracker.set_tag(f"alarm/{check.name}", f"step {step}: {check.message}")
            self.fired.append((step, check.name, check.message))
        return {f"alarms/{check.name}": float(check.fired)}

    def after_rollouts(self, step: int, episodes: list[Episode], zero_variance_stats: dict[str, float]) -> dict[str, float]:
        """The per-step alarms; returns their metrics for the step's row."""
        out = self._raise(truncation_check(episodes, self.cfg.truncation_rate), step)
        out.update(self._raise(zero_variance_check(zero_variance_stats, self.cfg.zero_variance_share), step))
        return out

    def after_evaluation(self, step: int, history: list[dict[str, float]], val_curve: list[tuple[int, float, float]]) -> dict[str, float]:
        """The divergence alarm at an evaluation (``val_curve`` already holds it); returns its metric."""
        points = evaluation_points(history, val_curve)
        return self._raise(divergence_check(points, self.cfg.divergence_window), step)
