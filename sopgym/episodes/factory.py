"""The one env factory: ``env_id -> gymnasium.make(env_id, **kwargs)``, picklable.

Every run makes its envs through an :class:`EnvFactory` handed to its env pool: ``sopgym eval``
(the run's env kwargs, the SOP-Bench-only ones for ``sopbench/*`` ids, and the split), the trainer
(the config's env kwargs and its token counter as ``length_fn``) and the integrations' envs made in this process. It is a plain picklable object (no closure), so it
travels to Ray env workers (:mod:`.ray_pool`) as it is, and registers sopgym's ids where it is called,
in a worker too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["EnvFactory"]


class EnvFactory:
    """``env_id -> gymnasium.make(env_id, **kwargs)`` with sopgym's ids registered.

    Args:
        kwargs: the kwargs every env is made with (copied).
        namespace_kwargs: kwargs added for the ids of one namespace, e.g. ``{"sopbench": {...}}`` for
            ``sopbench/*`` ids (with or without a ``module:`` prefix); they override ``kwargs``.
        split: when given, every env is made with ``split=split`` (overriding both).

    The kwargs of an env are ``{**kwargs, **namespace_kwargs[its namespace], "split": split}``.
    """

    def __init__(self, kwargs: Mapping[str, Any] | None = None, *,
                 namespace_kwargs: Mapping[str, Mapping[str, Any]] | None = None, split: str | None = None):
        self.kwargs = dict(kwargs or {})
        self.namespace_kwargs = {str(name): dict(extra) for name, extra in (namespace_kwargs or {}).items()}
        self.split = split

    def kwargs_for(self, env_id: str) -> dict[str, Any]:
        """The kwargs ``env_id`` is made with."""
        bare = env_id.split(":")[-1]
        out = dict(self.kwargs)
        for name, extra in self.namespace_kwargs.items():
            if bare.startswith(name + "/"):
                out.update(extra)
        if self.split is not None:
            out["split"] = self.split
        return out

    def __call__(self, env_id: str) -> Any:
        import gymnasium as gym

        import sopgym  # noqa: F401  (registers the envs, in a worker too)

        return gym.make(env_id, **self.kwargs_for(env_id))

    def __repr__(self) -> str:
        return f"EnvFactory({self.kwargs!r}, namespace_kwargs={self.namespace_kwargs!r}, split={self.split!r})"
