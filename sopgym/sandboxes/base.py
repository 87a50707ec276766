"""The tool-backend contract shared by every tier.

A *backend* answers tool calls for one episode at a time. It knows tool specs and per-episode
state; it knows nothing about chats, rewards or gymnasium (see docs/architecture.md).

Three tiers:

* ``replay``     read-only tools; responses were recorded per task, keyed by the tool name and the
                 canonical form of the validated arguments (:func:`canonical_args`).
* ``stateful``   tools that read and write a per-episode SQLite database built from the task's
                 initial state by a *stateful program* (see :class:`StatefulProgram`).
* ``verifiable`` the agent's own code or SQL, executed in an isolated sandbox.

Outcomes of a call are values (:class:`ToolResult`), never exceptions: a policy mistake
(unknown tool, bad arguments, a tool's own business error) is an outcome the env turns into an
observation. Only infrastructure failures are typed exceptions (:class:`SandboxError`) raised by
backends; :class:`~sopgym.sandboxes.toolbox.ToolBox` converts them to ``SANDBOX_ERROR`` outcomes.
"""

from __future__ import annotations

import enum
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Tier",
    "ToolSpec",
    "Outcome",
    "ToolResult",
    "SandboxEpisode",
    "StatefulProgram",
    "StatefulBackend",
    "ExecResult",
    "CodeRunner",
    "SandboxError",
    "SandboxUnavailable",
    "SandboxTimeout",
    "SandboxMisuse",
    "ERROR_KEY",
    "canonical_args",
    "render_result",
    "run_time",
]

_RESULT_ENCODER = json.JSONEncoder(ensure_ascii=False)
_CANONICAL_ENCODER = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))

#: A recorded replay response that is an error is stored as ``{ERROR_KEY: "message"}``.
ERROR_KEY = "$error"


class Tier(str, enum.Enum):
    REPLAY = "replay"
    STATEFUL = "stateful"
    VERIFIABLE = "verifiable"


@dataclass(frozen=True)
class ToolSpec:
    """One tool as the agent sees it, plus how it is answered.

    Args:
        name: function name the agent calls.
        description: what the tool does, shown to the agent.
        parameters: JSON Schema (``type: object``) of the arguments.
        tier: which backend answers it.
        distractor: True when the SOP never needs this tool (domain quality checks use it).
        writes: True for stateful tools that change state.
        not_found: replay tier only: the error text for arguments that were not recorded, formatted
            with the canonical arguments as ``{args}`` and each argument by name.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    tier: Tier = Tier.REPLAY
    distractor: bool = False
    writes: bool = False
    not_found: str = "no record matches {args}"

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"tool name must be an identifier, got {self.name!r}")
        if self.parameters.get("type") != "object":
            raise ValueError(
                f"tool {self.name!r}: parameters must be a JSON Schema with type 'object', "
                f"got type {self.parameters.get('type')!r}"
            )
        object.__setattr__(self, "tier", Tier(self.tier))

    def openai_schema(self) -> dict[str, Any]:
        """The OpenAI function-calling form of this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": json.loads(json.dumps(self.parameters)),
            },
        }

    def not_found_message(self, args: Mapping[str, Any]) -> str:
        canon = canonical_args(args)
        try:
            return self.not_found.format(args=canon, **args)
        except (KeyError, IndexError, ValueError):
            return self.not_found.replace("{args}", canon)


class Outcome(str, enum.Enum):
    """How one tool call ended. Everything but ``SANDBOX_ERROR`` is the policy's doing."""

    OK = "ok"
    TOOL_ERROR = "tool_error"  # the tool ran and reported an error (not found, business rule)
    BAD_ARGUMENTS = "bad_arguments"  # arguments failed JSON Schema validation
    UNKNOWN_TOOL = "unknown_tool"
    TIMEOUT = "timeout"  # the agent's code ran past its deadline (verifiable tier)
    SANDBOX_ERROR = "sandbox_error"  # infrastructure failure: not the policy's fault


@dataclass(frozen=True)
class ToolResult:
    outcome: Outcome
    content: Any = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK

    @property
    def is_infrastructure_failure(self) -> bool:
        return self.outcome is Outcome.SANDBOX_ERROR

    def render(self) -> str:
        return render_result(self)


def render_result(result: ToolResult) -> str:
    """Text the agent sees: JSON of the result, or ``Error: <message>``."""
    if result.ok:
        if isinstance(result.content, str):
            return result.content
        return _RESULT_ENCODER.encode(result.content)
    return f"Error: {result.error}"


def canonical_args(args: Mapping[str, Any]) -> str:
    """Canonical JSON of validated arguments: the replay key. Sorted keys, no spaces."""
    return _CANONICAL_ENCODER.encode(args)


@dataclass(frozen=True)
class StatefulProgram:
    """Where a domain's stateful tools live.

    ``module`` is a dotted module name of a **standard-library-only** Python module (it also runs
    inside the Docker sandbox, where sopgym is not installed) that defines:

    * ``SCHEMA``: SQL DDL creating the tables;
    * ``TOOLS``: ``dict[str, Callable[[sqlite3.Connection, dict], Any]]``; a tool returns a
      JSON-able value or raises any ``Exception`` whose message is the agent-visible error;
    * ``snapshot(db) -> dict``: the JSON-able final state the reward reads.

    The initial state of an episode is ``{table: [row dict, ...]}`` inserted after ``SCHEMA``.
    """

    module: str


@dataclass(frozen=True)
class SandboxEpisode:
    """Everything a backend needs to answer one episode's calls (no chat, no answer)."""

    key: str  # task id, used in logs and labels only
    replay: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    program: StatefulProgram | None = None
    initial_state: Mapping[str, list] | None = None


class SandboxError(RuntimeError):
    """Infrastructure failure (daemon gone, container killed, channel hung). Never the policy's fault."""


class SandboxUnavailable(SandboxError):
    """The requested sandbox cannot be used here (for example Docker is not reachable)."""


class SandboxTimeout(SandboxError):
    """The sandbox itself did not answer in time (distinct from the agent's code timing out)."""


class SandboxMisuse(RuntimeError):
    """The caller drove a sandbox in a way it does not support: from two threads at once, or from a
    forked process with a container its parent holds.

    A programming error of the caller, neither the policy's nor the infrastructure's: it is raised
    (out of ``env.step``), never turned into a ``SANDBOX_ERROR`` outcome, and the sandbox in use is
    left untouched. Deliberately not a :class:`SandboxError`.
    """


class StatefulBackend(ABC):
    """Per-episode state for stateful tools. One instance serves one env, one episode at a time.

    Implementations: :class:`~sopgym.sandboxes.inprocess.InProcessBackend` (embedded default) and
    the Docker backend. Both must give identical results on the same episode and calls.
    """

    @abstractmethod
    def start_episode(self, program: StatefulProgram, initial_state: Mapping[str, list]) -> None:
        """Discard any previous state and load the task's initial state."""

    @abstractmethod
    def call(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        """Run one stateful tool on validated arguments. Raises SandboxError on infra failure."""

    @abstractmethod
    def snapshot(self) -> dict[str, Any]:
        """The program's ``snapshot(db)`` of the current state."""

    @abstractmethod
    def close(self) -> None:
        """Release everything. Safe to call twice and before any episode."""


@dataclass(frozen=True)
class ExecResult:
    """Result of running agent-produced code or SQL (verifiable tier). Output is capped in size."""

    exit_code: int | None  # None when killed at the deadline
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False  # stdout or stderr hit the size cap

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ExecResult:
        """From the child-runner's result dict (the Docker server and the local runner share it)."""
        return cls(exit_code=d["exit_code"], stdout=d["stdout"], stderr=d["stderr"], timed_out=d["timed_out"], truncated=d["truncated"])

    @classmethod
    def not_started(cls) -> ExecResult:
        """A run that did not start: its caller's deadline had passed (see :func:`run_time`)."""
        return cls(exit_code=None, stdout="", stderr="", timed_out=True)


def run_time(timeout_s: float, deadline: float | None) -> float | None:
    """The seconds a run may take when it starts now: its own ``timeout_s``, cut to what is left
    before the caller's ``deadline`` (a :func:`time.monotonic` value, or None for none). None when
    nothing is left: the run must not start (:meth:`ExecResult.not_started`).

    Raises:
        ValueError: ``timeout_s`` is not positive.
    """
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    if deadline is None:
        return timeout_s
    left = deadline - time.monotonic()
    return min(timeout_s, left) if left > 0 else None


class CodeRunner(ABC):
    """Executes code/SQL the agent produced, isolated, with a wall-clock deadline.

    The Docker runner is the real sandbox; an in-process runner with resource limits is an explicit,
    documented fallback. Raises SandboxError only for infrastructure failures: the agent's code
    crashing or timing out is an ExecResult.

    Each run ends by ``timeout_s`` after it starts, and by ``deadline`` (a :func:`time.monotonic`
    value: the caller's own budget, e.g. the env's wall time left for tools) when that comes first;
    a runner that must first start a container cuts the run by what the start took
    (:func:`run_time`). A run whose deadline has passed before it starts is not started
    (:meth:`ExecResult.not_started`).
    """

    @abstractmethod
    def run_python(self, code: str, *, timeout_s: float = 5.0, stdin: str = "", deadline: float | None = None) -> ExecResult: ...

    @abstractmethod
    def run_sql(
        self,
        query: str,
        *,
        program: StatefulProgram,
        initial_state: Mapping[str, list],
        timeout_s: float = 5.0,
        deadline: float | None = None,
    ) -> ExecResult:
        """Run a read-only query against a fresh database built from ``program`` and state.

        stdout is the JSON list of result rows (lists), so results compare exactly.
        """

    @abstractmethod
    def close(self) -> None: ...
