"""Choose a stateful backend / code runner by name. The env's ``sandbox=`` kwarg lands here."""

from __future__ import annotations

from typing import Any

from .base import CodeRunner, SandboxUnavailable, StatefulBackend

__all__ = ["SANDBOX_KINDS", "make_stateful_backend", "make_code_runner"]

SANDBOX_KINDS = ("inprocess", "docker")


def make_stateful_backend(kind: str = "inprocess", **options: Any) -> StatefulBackend:
    """Args: kind: ``"inprocess"`` (embedded default) or ``"docker"``; options go to the backend.

    Raises:
        ValueError: unknown kind.
        SandboxUnavailable: Docker was asked for and is not reachable (or its SDK is missing).
    """
    if kind == "inprocess":
        from .inprocess import InProcessBackend

        if options:
            raise ValueError(f"the in-process backend takes no options, got {sorted(options)}")
        return InProcessBackend()
    if kind == "docker":
        try:
            from .docker import DockerStatefulBackend
        except ImportError as exc:  # the docker SDK is an optional extra
            raise SandboxUnavailable(
                f"sandbox='docker' needs the docker SDK: pip install 'sopgym[docker]' ({exc})"
            ) from exc
        return DockerStatefulBackend(**options)
    raise ValueError(f"sandbox must be one of {SANDBOX_KINDS}, got {kind!r}")


def make_code_runner(kind: str = "docker", **options: Any) -> CodeRunner:
    """The verifiable tier's runner: ``"docker"`` (default) or ``"inprocess"`` (explicit fallback for
    trusted code only: it runs the code on this host as this user, where it can import sopgym and
    regenerate a task's answer; see :mod:`.local_runner`)."""
    if kind == "docker":
        try:
            from .docker import DockerCodeRunner
        except ImportError as exc:
            raise SandboxUnavailable(f"the Docker code runner needs the docker SDK: pip install 'sopgym[docker]' ({exc})") from exc
        return DockerCodeRunner(**options)
    if kind == "inprocess":
        from .local_runner import LocalCodeRunner

        return LocalCodeRunner(**options)
    raise ValueError(f"code runner must be one of {SANDBOX_KINDS}, got {kind!r}")
