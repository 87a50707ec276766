"""What an RL step's groups carry: informative groups, dynamic sampling's stopping rule, per-task success.

A group is *informative* when its members' outcomes (``Episode.outcome``: the reward without its
shaping, what ``algo.filter_zero_variance`` reads) are not all equal, infrastructure failures left
out as in ``rollout_metrics.assign_advantages``: under a group baseline only such a group moves the
policy. Dynamic sampling (DAPO, Yu et al. 2025; ``algo.dynamic_sampling``) keeps drawing task groups
until ``rollout.batch_size`` of them are informative or ``algo.max_extra_draws`` extra groups were
drawn (``missing_groups``), and trains on the informative ones only.

``TaskSuccess`` keeps a running success estimate per task id (an exponential moving average of its
groups' success rates), logged every step as a summary: how many tasks it holds, their mean, and the
share strictly between 0 and 1 (the tasks a group baseline can still learn from).

``Curriculum`` (``algo.curriculum``) draws part of each step's groups again from tasks already
trained on whose estimate is strictly between 0 and 1, the rest fresh from the task cursor (the
exploration share, ``algo.curriculum_explore``); the rule is in its docstring and docs/trainer.md.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict

import torch

from .advantages import zero_variance
from .episodes import Episode


def groups_of(episodes: list[Episode]) -> dict[int, list[Episode]]:
    """The episodes by group id, infrastructure failures left out (they are never trained on)."""
    groups: dict[int, list[Episode]] = defaultdict(list)
    for ep in episodes:
        if not ep.infrastructure_failure:
            groups[ep.group_id].append(ep)
    return groups


def informative_groups(episodes: list[Episode]) -> set[int]:
    """Group ids whose outcomes are not all equal (``advantages.zero_variance`` on ``Episode.outcome``)."""
    return {
        gid for gid, members in groups_of(episodes).items()
        if not zero_variance(torch.tensor([ep.outcome for ep in members], dtype=torch.float64))
    }


def missing_groups(num_informative: int, batch_size: int, extra_drawn: int, max_extra_draws: int) -> int:
    """How many more groups dynamic sampling draws: those still missing to ``batch_size`` informative
    ones, within what is left of ``max_extra_draws`` (0: stop)."""
    return max(0, min(batch_size - num_informative, max_extra_draws - extra_drawn))


def group_metrics(episodes: list[Episode], trainable: list[Episode]) -> dict[str, float]:
    """``rollout/informative_group_fraction`` (of the step's groups) and ``train/trained_episode_fraction``
    (of the step's episodes, infrastructure failures included)."""
    groups = groups_of(episodes)
    return {
        "rollout/informative_group_fraction": len(informative_groups(episodes)) / max(1, len(groups)),
        "train/trained_episode_fraction": len(trainable) / max(1, len(episodes)),
    }


class TaskSuccess:
    """A running success estimate per task id: ``estimate <- (1 - w) * estimate + w * group success``
    (``w`` = ``algo.task_success_ema``); a task's first group sets it. Held in the checkpoint, so a
    resumed run logs what a continuous one does."""

    def __init__(self, weight: float):
        self.weight = weight
        self.estimates: dict[str, float] = {}

    def update(self, episodes: list[Episode]) -> None:
        """Fold in every group of a step (infrastructure failures left out)."""
        for members in groups_of(episodes).values():
            task_id = members[0].task_id
            rate = sum(ep.success for ep in members) / len(members)
            old = self.estimates.get(task_id)
            self.estimates[task_id] = rate if old is None else (1 - self.weight) * old + self.weight * rate

    def metrics(self) -> dict[str, float]:
        """``tasks/tracked``, ``tasks/success_estimate_mean`` and ``tasks/learnable_fraction`` (estimates in (0, 1))."""
        values = list(self.estimates.values())
        n = max(1, len(values))
        return {
            "tasks/tracked": float(len(values)),
            "tasks/success_estimate_mean": sum(values) / n,
            "tasks/learnable_fraction": sum(0.0 < v < 1.0 for v in values) / n,
        }

    def state_dict(self) -> dict[str, float]:
        return dict(self.estimates)

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.estimates = dict(state)


class Curriculum:
    """Which of a draw's groups repeat a training task already seen, and which ones.

    The training split's tasks are unbounded (a task is posed by its reset seed), so a curriculum can
    only prefer among tasks this run has already drawn, and explore with fresh ones. The rule, per
    call of ``choose(num_groups, estimates)``:

    * **Candidates**: the ``pool`` tasks most recently trained on (``record``: a step's training groups
      only, never an evaluation's) whose success estimate ``p`` (``TaskSuccess``) is strictly between
      0 and 1, less the tasks already chosen again in this step. A candidate's weight is the chance that
      a group of ``group_size`` episodes on it is informative, ``1 - p**G - (1 - p)**G``: 0 at 0 and 1,
      largest at 0.5.
    * **How many**: of all the groups the curriculum has been asked for so far, ``floor((1 - explore)
      * drawn)`` are due from the candidates (so the exploration share is exact up to one group, over
      any run); this call takes what is due, or as many candidates as there are.
    * **Which**: that many candidates without replacement, in proportion to their weights (Efraimidis
      and Spirakis' keys ``log(u) / w`` with ``u`` from the curriculum's own ``random.Random``, seeded by
      the run's seed); the rest of the call's groups are fresh tasks from the cursor.

    A repeated task is posed by the spec that first drew it (its env id and reset seed, on the training
    split), so held-out tasks never enter. The seen tasks, the count of groups drawn and the RNG state
    are in ``state_dict`` (the checkpoint), so a resumed run draws what a straight one does.
    """

    STREAM = 0x5EED_C0DE
    """Mixed into the run's seed, so the curriculum's draws are their own stream."""

    def __init__(self, explore: float, pool: int, group_size: int, seed: int):
        self.explore, self.pool, self.group_size = explore, pool, group_size
        self.rng = random.Random(seed * 1_000_003 + self.STREAM)
        self.seen: dict[str, tuple[str, int]] = {}
        """Task id -> (env id, reset seed) of every task trained on, the most recently trained last."""
        self.drawn = 0
        """Groups the curriculum was asked for so far (preferred and fresh)."""
        self.step = {"preferred": 0, "fresh": 0, "pool": 0}
        self._chosen: set[str] = set()

    def weight(self, p: float) -> float:
        """The chance that a group of ``group_size`` on a task of success ``p`` has outcome variance."""
        return 1.0 - p**self.group_size - (1.0 - p) ** self.group_size

    def candidates(self, estimates: dict[str, float]) -> list[tuple[str, float]]:
        """``(task id, weight)`` of the tasks a draw may prefer now, the most recently trained last."""
        recent = list(self.seen)[-self.pool:]
        out = [(t, self.weight(estimates[t])) for t in recent if t not in self._chosen and 0.0 < estimates.get(t, 0.0) < 1.0]
        return [(t, w) for t, w in out if w > 0.0]

    def begin_step(self, estimates: dict[str, float]) -> None:
        """Reset the step's counts; ``sampling/curriculum_pool`` is the candidates' number at its start."""
        self._chosen = set()
        self.step = {"preferred": 0, "fresh": 0, "pool": len(self.candidates(estimates))}

    def choose(self, num_groups: int, estimates: dict[str, float]) -> list[tuple[str, int]]:
        """The ``(env id, seed)`` of the tasks to draw again for this call's groups (at most
        ``num_groups``); the caller draws the rest fresh."""
        due = math.floor((1.0 - self.explore) * (self.drawn + num_groups) + 1e-9)
        due -= math.floor((1.0 - self.explore) * self.drawn + 1e-9)
        self.drawn += num_groups
        pool = self.candidates(estimates)
        keys = [(math.log(1.0 - self.rng.random()) / w, t) for t, w in pool] if due else []
        picked = [t for _, t in sorted(keys, reverse=True)[:due]]
        self._chosen.update(picked)
        self.step["preferred"] += len(picked)
        self.step["fresh"] += num_groups - len(picked)
        return [self.seen[t] for t in picked]

    def record(self, episodes: list[Episode]) -> None:
        """Remember the tasks of a step's training groups (where to pose them again), most recent last."""
        for ep in episodes:
            self.seen.pop(ep.task_id, None)
            self.seen[ep.task_id] = (ep.env_id, ep.seed)

    def metrics(self) -> dict[str, float]:
        """``sampling/curriculum_groups`` (drawn again from the candidates), ``sampling/explore_groups``
        (fresh) and ``sampling/curriculum_pool`` (candidates at the step's start)."""
        return {"sampling/curriculum_groups": float(self.step["preferred"]),
                "sampling/explore_groups": float(self.step["fresh"]),
                "sampling/curriculum_pool": float(self.step["pool"])}

    def state_dict(self) -> dict:
        return {"seen": [[t, env_id, seed] for t, (env_id, seed) in self.seen.items()], "drawn": self.drawn,
                "rng": list(self.rng.getstate()[1])}

    def load_state_dict(self, state: dict) -> None:
        self.seen = {t: (env_id, seed) for t, env_id, seed in state["seen"]}
        self.drawn = state["drawn"]
        self.rng.setstate((3, tuple(state["rng"]), None))
