"""SopBenchToolBox: answers an episode's calls with upstream's exact texts, replayed or live.

Unlike :class:`sopgym.sandboxes.ToolBox` it does **not** validate arguments against the JSON
Schema: upstream passes the agent's arguments straight to the tool, and the agent sees the tool's
own error (often a ``TypeError``). Outcomes for the env's statuses:

* ``ok`` -> ``OK`` (content = the exact ``json.dumps`` text);
* the tool raised ``TypeError`` -> ``BAD_ARGUMENTS``; any other exception -> ``TOOL_ERROR``;
* a name missing from toolspecs -> ``UNKNOWN_TOOL`` (upstream's message; computed here, no code runs);
* a live runner's infrastructure failure, or a replay miss in ``replay`` mode -> ``SANDBOX_ERROR``.

Modes: ``auto`` (replay when the call is recorded, else run live), ``replay`` (never run code),
``live`` (always run; the recording is ignored).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sopgym.sandboxes.base import Outcome, SandboxEpisode, SandboxError, ToolResult, ToolSpec, canonical_args
from sopgym.sandboxes.toolbox import ToolBox

from . import tool_server
from .replay import Recording

if TYPE_CHECKING:
    from .runners import ToolRunner

__all__ = ["SopBenchToolBox", "TOOL_MODES", "to_tool_result"]

TOOL_MODES = ("auto", "replay", "live")


def to_tool_result(response: Mapping[str, Any]) -> ToolResult:
    """A runner/recording response as a ToolResult whose ``render()`` is exactly ``response["text"]``."""
    kind, text = response["kind"], response["text"]
    if kind == "ok":
        return ToolResult(Outcome.OK, content=text)
    message = text[len("Error: "):] if text.startswith("Error: ") else text
    if kind == "unknown_tool":
        return ToolResult(Outcome.UNKNOWN_TOOL, error=message)
    if response.get("exc_type") == "TypeError":
        return ToolResult(Outcome.BAD_ARGUMENTS, error=message)
    return ToolResult(Outcome.TOOL_ERROR, error=message)


class SopBenchToolBox(ToolBox):
    """Args:
    specs: the domain's tools (display only; arguments are not schema-checked).
    tool_names: toolspecs names in file order (upstream's unknown-tool message lists them).
    recording: recorded responses (or None).
    runner_factory: ``() -> ToolRunner``; called at the first live call only. The runner is kept
        for the toolbox's life; each episode starts a fresh tools instance in it (``new_episode``).
    mode: ``auto``, ``replay`` or ``live``.
    """

    def __init__(self, specs: Sequence[ToolSpec], tool_names: Sequence[str], *, recording: Recording | None,
                 runner_factory: Callable[[], Any] | None, mode: str = "auto") -> None:
        super().__init__(specs)
        if mode not in TOOL_MODES:
            raise ValueError(f"tool mode must be one of {TOOL_MODES}, got {mode!r}")
        self.tool_names = list(tool_names)
        self.recording = recording
        self.runner_factory = runner_factory
        self.mode = mode
        self._runner: ToolRunner | None = None
        #: Per episode: how many calls were replayed and how many ran live.
        self.num_replayed = 0
        self.num_live = 0

    def start_episode(self, episode: SandboxEpisode) -> None:
        super().start_episode(episode)
        self.num_replayed = self.num_live = 0
        if self._runner is not None:
            self._runner.new_episode()  # the warm runner stays; the tools instance and its state do not

    def call(self, name: str, arguments: Any, *, time_left_s: float | None = None) -> ToolResult:
        """Answer one call. ``time_left_s`` (the env's wall-time budget) does not interrupt a live
        call: the checkout's tools are not the agent's code, and a request past the runner's own
        deadline is an infrastructure failure; the env charges the call's time after it returns."""
        assert self._episode is not None, "SopBenchToolBox.call before start_episode"
        if name not in self.tool_names:
            return to_tool_result(tool_server.call_tool(None, self.tool_names, name, arguments))
        if self.mode != "live" and self.recording is not None:
            hit = self.recording.get(name, arguments)
            if hit is not None:
                self.num_replayed += 1
                return to_tool_result(hit)
        if self.mode == "replay":
            return ToolResult(
                Outcome.SANDBOX_ERROR,
                error=f"{name}({canonical_args(arguments)}) is not in the recording and tool_mode='replay' runs no code",
            )
        try:
            if self._runner is None:
                if self.runner_factory is None:
                    raise SandboxError("no tools runner configured")
                self._runner = self.runner_factory()
            response = self._runner.call(name, arguments)
        except SandboxError as exc:
            return ToolResult(Outcome.SANDBOX_ERROR, error=f"sandbox failure: {exc}")
        self.num_live += 1
        return to_tool_result(response)

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        super().close()
