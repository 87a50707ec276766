"""Run built-in policies on an env and collect episode records; read records back from JSONL.

This is the only module of the evaluation package that touches envs (it has to run them); the
metrics never import them.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from .progress import ProgressBar

__all__ = ["run_episodes", "load_records", "episode_seed"]


def episode_seed(seed: int, task_index: int, sample: int) -> int:
    """The seed of one episode: a hash of (run seed, task index, sample), independent of run order."""
    return int(np.random.SeedSequence([seed, task_index, sample]).generate_state(1)[0])


def _make_policy(name: str, seed: int):
    from sopgym.envs.policies import POLICIES, make_policy

    if name not in POLICIES:
        raise ValueError(f"policy must be one of {sorted(POLICIES)}, got {name!r}")
    accepts_seed = "seed" in inspect.signature(POLICIES[name]).parameters
    return make_policy(name, seed=seed) if accepts_seed else make_policy(name)


def run_episodes(
    env_id: str,
    policy_name: str,
    episodes: int,
    samples_per_task: int = 1,
    seed: int = 0,
    split: str = "test",
    env_kwargs: Mapping[str, Any] | None = None,
    trajectories_path: str | os.PathLike | None = None,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Run ``policy_name`` on tasks ``0 .. episodes-1`` of ``split``, each ``samples_per_task`` times.

    Every episode gets its own seed (:func:`episode_seed`), used for ``reset`` and, for stochastic
    policies (those taking a ``seed``), for the policy, so samples of one task differ and the run
    is reproducible.

    Args:
        env_id: a registered id, e.g. ``sopgym/WarehouseReceiving-v0``.
        policy_name: ``oracle``, ``random`` or ``majority`` (see :mod:`sopgym.envs.policies`).
        episodes: number of tasks (task indices ``0 .. episodes-1``).
        samples_per_task: episodes per task (the ``n`` of pass@k).
        seed: the run's seed.
        split: ``train``, ``val`` or ``test``.
        env_kwargs: passed to ``gymnasium.make`` (e.g. ``{"reward": "binary", "sandbox": "docker"}``).
        trajectories_path: when given, every step and episode is written there as JSONL
            (:class:`~sopgym.envs.wrappers.RecordTrajectory`).
        progress: draw a progress bar on stderr.

    Returns:
        The ``info["episode"]`` records, task-major (all samples of task 0, then task 1, ...).

    Raises:
        ValueError: on a bad count, an unknown policy, or more tasks than the split holds.
    """
    from sopgym.envs.wrappers import RecordTrajectory

    if episodes < 1 or samples_per_task < 1:
        raise ValueError(f"episodes and samples_per_task must be >= 1, got {episodes} and {samples_per_task}")
    _make_policy(policy_name, 0)  # fail on an unknown policy before building the env
    kwargs = {**dict(env_kwargs or {}), "split": split}
    env = gym.make(env_id, **kwargs)
    try:
        size = env.unwrapped.pack.num_tasks(split)
        if size is not None and episodes > size:
            raise ValueError(f"split {split!r} of {env_id} has {size} tasks; got episodes={episodes}")
        if trajectories_path is not None:
            env = RecordTrajectory(env, trajectories_path)
        records: list[dict[str, Any]] = []
        bar = ProgressBar(episodes * samples_per_task) if progress else None
        for task_index in range(episodes):
            for sample in range(samples_per_task):
                ep_seed = episode_seed(seed, task_index, sample)
                policy = _make_policy(policy_name, ep_seed)
                observation, info = env.reset(seed=ep_seed, options={"split": split, "task_index": task_index})
                policy.reset(info)
                done = False
                while not done:
                    observation, _, terminated, truncated, info = env.step(policy.act(observation, info))
                    done = terminated or truncated
                records.append(info["episode"])
                if bar is not None:
                    bar.update()
        if bar is not None:
            bar.close()
        return records
    finally:
        env.close()


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """(line number, decoded value) for each non-blank line of a JSONL file.

    Raises:
        ValueError: on a line that is not valid JSON, naming the file and line.
    """
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: expected a JSON object per line, got invalid JSON ({exc})") from None


def load_records(jsonl_path: str | os.PathLike) -> list[dict[str, Any]]:
    """Episode records from a JSONL file.

    Reads :class:`~sopgym.envs.wrappers.RecordTrajectory` output (keeps ``type == "episode"`` lines,
    dropping their ``type`` and ``episode_index``) or a file of bare records (lines without ``type``).

    Raises:
        ValueError: on a line that is not a JSON object, naming the file and line.
    """
    records = []
    for number, obj in iter_jsonl(jsonl_path):
        if not isinstance(obj, dict):
            raise ValueError(f"{jsonl_path}:{number}: expected a JSON object, got {type(obj).__name__}")
        kind = obj.pop("type", None)
        if kind == "episode":
            obj.pop("episode_index", None)
            records.append(obj)
        elif kind is None:
            records.append(obj)
    return records
