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
"""

from __future__ import annotations

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
