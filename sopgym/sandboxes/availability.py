"""Whether a backend can be used now, asked before any episode starts (the pre-flight of
:mod:`sopgym.bench.preflight`).

An env lists what its episodes will need as :class:`BackendNeed` values (``env.unwrapped.backend_needs()``):
which backend, what in the env uses it, a check that says why it cannot be used now (None when it can),
and the env kwargs that avoid it. Checks are plain functions and cheap: :func:`docker_problem` pings the
daemon and looks the sandbox image up; it starts no container.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BackendNeed", "Fix", "docker_problem"]


@dataclass(frozen=True)
class Fix:
    """Env kwargs that avoid a backend, and what choosing them costs.

    Args:
        env_kwargs: the ``gymnasium.make`` kwargs, e.g. ``{"code_runner": "inprocess"}``.
        cost: what they change, e.g. "runs the agent's code on this host as your user: trusted code only".
    """

    env_kwargs: Mapping[str, Any]
    cost: str


@dataclass(frozen=True)
class BackendNeed:
    """One backend an env's episodes need.

    Args:
        backend: its name, the key checks are shared by (one check per backend per pre-flight), e.g. "docker".
        user: what in the env uses it, e.g. "its code runner (run_python, run_sql)".
        check: why the backend cannot be used now, or None when it can. Called once per pre-flight.
        fixes: env kwargs that do without it.
        warning_only: the need cannot be met by any setting here (a data-only checkout): episodes run and
            the calls it would answer are infrastructure failures; the pre-flight warns instead of refusing.
    """

    backend: str
    user: str
    check: Callable[[], str | None]
    fixes: tuple[Fix, ...] = field(default=())
    warning_only: bool = False


def docker_problem(base_url: str | None = None) -> str | None:
    """Why the Docker sandboxes cannot be used now (None when they can): the docker SDK missing, the
    daemon not answering a ping, or the sandbox image of this code's content hash not built on it."""
    try:
        from .docker.errors import DaemonUnreachable
        from .docker.image import image_exists, image_tag
        from .docker.pool import connect
    except ImportError as exc:
        return f"the docker SDK is missing ({exc}): pip install 'sopgym[docker]'"
    try:
        client = connect(base_url, timeout=5.0)
    except DaemonUnreachable as exc:
        return f"{exc.reason} (start it: bash scripts/docker_setup.sh)" if exc.reason else str(exc)
    tag = image_tag()
    if not image_exists(tag, client):
        return (f"the sandbox image {tag} is not built on the Docker daemon (expected the tag of this code's content "
                "hash): run `sopgym sandbox build` or `bash scripts/docker_setup.sh`")
    return None
