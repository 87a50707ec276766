"""Typed infrastructure failures of the Docker sandboxes (all :class:`~sopgym.sandboxes.base.SandboxError`).

The :class:`~sopgym.sandboxes.toolbox.ToolBox` turns any of them into ``Outcome.SANDBOX_ERROR``, so
training can exclude the episode instead of blaming the policy.
"""

from __future__ import annotations

from ..base import SandboxError, SandboxTimeout, SandboxUnavailable

__all__ = ["DaemonUnreachable", "ImageMissing", "ContainerLost", "ChannelTimeout", "ProgramError"]


class DaemonUnreachable(SandboxUnavailable):
    """The Docker daemon did not answer (not running, wrong socket, no permission). ``reason``: the
    daemon's answer, without the message's hint."""

    reason: str = ""


class ImageMissing(SandboxUnavailable):
    """The sandbox image with the content hash this code needs is not built on this daemon."""


class ContainerLost(SandboxError):
    """The container or its channel died (killed from outside, OOM-killed server, daemon restart)."""


class ChannelTimeout(SandboxTimeout):
    """The server in the container did not answer in time (hung, paused, overloaded)."""


class ProgramError(SandboxError):
    """The stateful program failed outside a tool (bad SCHEMA, a result that is not JSON)."""
