"""Running a built-in policy through the public episode API, for tests: specs, a pool, the one loop."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sopgym.episodes import EnvFactory, EnvPool, EpisodeResult, builtin_policy_agent, run_episodes, task_specs


def policy_records(env_id: str, policy: str, num_tasks: int, samples_per_task: int = 1, seed: int = 0,
                   split: str = "test", env_kwargs: Mapping[str, Any] | None = None,
                   on_result: Callable[[EpisodeResult], None] | None = None) -> list[dict[str, Any]]:
    """The records of ``policy`` on tasks ``0 .. num_tasks-1`` of ``split``, ``samples_per_task`` each
    (task-major), the envs made with ``env_kwargs`` in this process, one episode at a time (so
    ``on_result`` sees them in that order too)."""
    pool = EnvPool(EnvFactory(env_kwargs, split=split))
    try:
        results = run_episodes(task_specs(env_id, split, num_tasks, samples_per_task, seed),
                               builtin_policy_agent(policy), pool, concurrency=1, on_result=on_result)
    finally:
        pool.close()
    return [r.record for r in results]
