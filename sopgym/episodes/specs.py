"""What to run: one episode's spec, the tasks of a run, and the answer an agent gives to end an episode.

Every kind of run (benchmarks, ``sopgym eval``, the trainer's rollouts) names its episodes with
:class:`EpisodeSpec`; runs over the same tasks draw them with :func:`task_specs`, whose seeds
(:func:`episode_seed`) do not depend on run order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["EpisodeSpec", "EndEpisode", "episode_seed", "task_specs"]


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to run.

    Args:
        env_id: a registered id, e.g. ``sopgym/WarehouseReceiving-v0``.
        seed: the ``reset`` seed (None: unseeded).
        options: ``reset`` options (``split``, ``task_index`` or ``task_id``).
        group_id: episodes of one group share a task (GRPO groups, samples of pass@k).
        sample: the episode's index within its group.
    """

    env_id: str
    seed: int | None = None
    options: Mapping[str, Any] | None = None
    group_id: int = 0
    sample: int = 0


@dataclass(frozen=True)
class EndEpisode:
    """An agent's answer for an episode it ends without another turn (see ``SOPEnv.end_episode``).

    Args:
        cause: ``context_budget`` (no room for another turn), ``stopped`` (the agent stopped replying)
            or ``inference`` (the model server failed: an infrastructure failure, not the policy's).
            (``env_lost`` is the pools' own: a remote pool ends an episode whose worker died with it.)
        message: why, kept in the last step's ``status_message``.
    """

    cause: str = "stopped"
    message: str = ""


def episode_seed(seed: int, task_index: int, sample: int) -> int:
    """The seed of one episode: a hash of (run seed, task index, sample), independent of run order."""
    return int(np.random.SeedSequence([seed, task_index, sample]).generate_state(1)[0])


def task_specs(env_id: str, split: str, num_tasks: int, samples_per_task: int = 1, seed: int = 0,
               first_task: int = 0) -> list[EpisodeSpec]:
    """Tasks ``first_task .. first_task+num_tasks-1`` of ``split``, each ``samples_per_task`` times.

    Every benchmark run (scripted policies, hosted or local models) uses these, so their figures
    compare on the same tasks; each episode's seed is :func:`episode_seed`.
    """
    if num_tasks < 1 or samples_per_task < 1:
        raise ValueError(f"num_tasks and samples_per_task must be >= 1, got {num_tasks} and {samples_per_task}")
    return [
        EpisodeSpec(env_id, episode_seed(seed, t, s), {"split": split, "task_index": t}, group_id=t, sample=s)
        for t in range(first_task, first_task + num_tasks)
        for s in range(samples_per_task)
    ]
