"""The in-process env pool: envs owned by slot and stepped in this process.

The runner talks to a pool only through ``reset``/``step``/``end`` over lists of slots (and ``close``),
so a pool whose envs live elsewhere stands in for this one: :class:`~sopgym.episodes.ray_pool.RayEnvPool`
(env workers as Ray actors); :func:`~sopgym.episodes.runner.make_env_pool` builds either.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .specs import EndEpisode, EpisodeSpec

__all__ = ["EnvPool", "StepOutput"]


StepOutput = tuple[str, float, bool, bool, dict[str, Any]]


class EnvPool:
    """In-process envs, one per (env id, slot), reused across batches and runs.

    The runner only calls :meth:`reset`, :meth:`step` and :meth:`end` with lists of slots; another
    pool (envs in worker processes or on other hosts) implements the same three methods and
    :meth:`close`, stepping its slots in parallel.

    Args:
        make_env: ``env_id -> env`` (e.g. ``gymnasium.make`` with the run's env kwargs).
        owns_envs: close the envs in :meth:`close` (False for an env the caller keeps).
    """

    def __init__(self, make_env: Callable[[str], Any], *, owns_envs: bool = True):
        self.make_env = make_env
        self.owns_envs = owns_envs
        self._envs: dict[tuple[str, int], Any] = {}
        self._slots: dict[int, Any] = {}

    @classmethod
    def of(cls, env: Any) -> EnvPool:
        """A pool over one env the caller owns (for runs with one slot)."""
        return cls(lambda env_id: env, owns_envs=False)

    def env(self, env_id: str, slot: int) -> Any:
        key = (env_id, slot)
        if key not in self._envs:
            self._envs[key] = self.make_env(env_id)
        return self._envs[key]

    def reset(self, jobs: Sequence[tuple[int, EpisodeSpec]]) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for slot, spec in jobs:
            env = self.env(spec.env_id, slot)
            self._slots[slot] = env
            options = dict(spec.options) if spec.options is not None else None
            out.append(env.reset(seed=spec.seed, options=options))
        return out

    def step(self, jobs: Sequence[tuple[int, Any]]) -> list[StepOutput]:
        return [self._slots[slot].step(action) for slot, action in jobs]

    def end(self, jobs: Sequence[tuple[int, EndEpisode]]) -> list[StepOutput]:
        out = []
        for slot, end in jobs:
            env = self._slots[slot]
            end_episode = getattr(env.unwrapped, "end_episode", None)
            if end_episode is None:
                raise TypeError(
                    f"{type(env.unwrapped).__name__} has no end_episode(cause): an agent returned "
                    f"EndEpisode({end.cause!r}) but this env cannot end an episode early"
                )
            out.append(end_episode(end.cause, end.message))
        return out

    def close(self) -> None:
        if self.owns_envs:
            for env in self._envs.values():
                env.close()
        self._envs.clear()
        self._slots.clear()
