"""ToolBox: validates a call against its spec and dispatches it to the tier that answers it.

The env holds one ToolBox per episode-slot. ``start_episode`` loads a task's replay records and
stateful initial state; ``call`` returns a :class:`ToolResult` for every input, never raising for
anything the policy did. Infrastructure failures of a backend (:class:`SandboxError`) become
``Outcome.SANDBOX_ERROR`` results so the env can mark them as not the policy's fault.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .base import (
    ERROR_KEY,
    CodeRunner,
    Outcome,
    SandboxEpisode,
    SandboxError,
    StatefulBackend,
    Tier,
    ToolResult,
    ToolSpec,
    canonical_args,
)
from .schema import SchemaError, validate

__all__ = ["ToolBox"]


class ToolBox:
    """Answers the calls of one episode at a time.

    Args:
        specs: the domain's tools (the submit tool is the env's business, not a ToolBox tool).
        stateful: backend for stateful tools; required when any spec has tier ``stateful``.
        verifiable: the verifiable tier's handler, ``(code_runner, name, args, episode, deadline) -> ToolResult``
            (a domain pack's ``verifiable``); ``deadline`` is a :func:`time.monotonic` value or None,
            passed on to the code runner.
        code_runner: a :class:`CodeRunner`, or a zero-argument factory of one. A factory is called on the
            first verifiable call (an episode whose agent never runs code starts no runner); a runner
            that cannot start raises :class:`SandboxError`, reported as ``SANDBOX_ERROR``. The tool box
            closes the runner it holds.
    """

    def __init__(
        self,
        specs: Sequence[ToolSpec],
        stateful: StatefulBackend | None = None,
        verifiable: Callable[..., ToolResult] | None = None,
        code_runner: CodeRunner | Callable[[], CodeRunner] | None = None,
    ) -> None:
        self.specs = {spec.name: spec for spec in specs}
        if len(self.specs) != len(specs):
            raise ValueError("duplicate tool names in specs")
        if stateful is None and any(s.tier is Tier.STATEFUL for s in specs):
            raise ValueError("stateful tools need a stateful backend")
        self.stateful = stateful
        self.verifiable = verifiable
        self._code_runner: CodeRunner | None = code_runner if isinstance(code_runner, CodeRunner) else None
        self._make_code_runner: Callable[[], CodeRunner] | None = (
            None if isinstance(code_runner, CodeRunner) else code_runner)
        self._episode: SandboxEpisode | None = None

    def start_episode(self, episode: SandboxEpisode) -> None:
        self._episode = episode
        if self.stateful is not None and episode.program is not None:
            self.stateful.start_episode(episode.program, episode.initial_state or {})

    def validate(self, name: str, arguments: Any) -> tuple[ToolSpec | None, dict | ToolResult]:
        """Look up and validate without running. Returns (spec, coerced args) or (spec, error)."""
        spec = self.specs.get(name)
        if spec is None:
            known = ", ".join(sorted(self.specs))
            return None, ToolResult(Outcome.UNKNOWN_TOOL, error=f"unknown tool {name!r}; expected one of: {known}")
        try:
            return spec, validate(arguments, spec.parameters)
        except SchemaError as exc:
            return spec, ToolResult(Outcome.BAD_ARGUMENTS, error=f"invalid arguments for {name}: {exc}")

    def call(self, name: str, arguments: Any, *, time_left_s: float | None = None) -> ToolResult:
        """Answer one call.

        Args:
            name, arguments: the call as the agent made it (validated here).
            time_left_s: the caller's budget for this call, in seconds, or None. The agent's code (the
                verifiable tier) is stopped when it runs out, whatever its own deadline, container start
                included; the replay and stateful tiers are not interrupted (they answer in milliseconds).
        """
        assert self._episode is not None, "ToolBox.call before start_episode"
        deadline = None if time_left_s is None else time.monotonic() + time_left_s
        spec, args = self.validate(name, arguments)
        if isinstance(args, ToolResult):
            return args
        assert spec is not None
        try:
            if spec.tier is Tier.REPLAY:
                return self._replay(spec, args)
            if spec.tier is Tier.STATEFUL:
                assert self.stateful is not None  # __init__ refuses stateful tools without a backend
                return self.stateful.call(name, args)
            runner = self._code_runner
            if runner is None and self._make_code_runner is not None and self.verifiable is not None:
                runner = self._code_runner = self._make_code_runner()
            if self.verifiable is None or runner is None:
                return ToolResult(Outcome.SANDBOX_ERROR, error=f"no runner configured for verifiable tool {name!r}")
            return self.verifiable(runner, name, args, self._episode, deadline)
        except SandboxError as exc:
            return ToolResult(Outcome.SANDBOX_ERROR, error=f"sandbox failure: {exc}")

    def _replay(self, spec: ToolSpec, args: Mapping[str, Any]) -> ToolResult:
        assert self._episode is not None  # call() checked it
        records = self._episode.replay.get(spec.name, {})
        key = canonical_args(args)
        if key not in records:
            return ToolResult(Outcome.TOOL_ERROR, error=spec.not_found_message(args))
        response = records[key]
        if isinstance(response, Mapping) and set(response) == {ERROR_KEY}:
            return ToolResult(Outcome.TOOL_ERROR, error=str(response[ERROR_KEY]))
        return ToolResult(Outcome.OK, content=response)

    def snapshot(self) -> dict[str, Any]:
        if self.stateful is None or self._episode is None or self._episode.program is None:
            return {}
        return self.stateful.snapshot()

    def close(self) -> None:
        if self.stateful is not None:
            self.stateful.close()
        if self._code_runner is not None:
            self._code_runner.close()
            self._code_runner = None
        self._episode = None
