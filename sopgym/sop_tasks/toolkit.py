"""What a pack's ``tools.py`` is written with: one way to declare each kind of tool.

* :func:`lookup`: a read-only tool answered from the task's replay records (replay tier);
* :func:`stateful`: a tool answered by the pack's stateful program (``state.py``);
* :func:`sql_tool` and :func:`python_tool`: the verifiable tier, the agent's own SQL or Python run by
  the episode's code runner; :class:`CodeTools` is the pack's ``verifiable`` handler for them.

Every tool takes its arguments as ``{name: property schema}``: all required, no others
(:func:`object_schema`), which is also what the validator enforces. A pack never writes a JSON
Schema object or a ``ToolSpec`` by hand.

The verifiable tier turns a run into a tool result in one place (:func:`exec_tool_result`), so every
SQL and Python tool reports a timeout, a failure and a cut-off output in the same words.

Example (a lookup and a SQL tool)::

    RUN_SQL = sql_tool("Run one read-only SQLite query against the case's logs; rows as JSON lists.")
    TOOLS = (
        lookup("get_case", "Case by id: publisher id, window.", {"case_id": {"type": "string"}},
               not_found="case {case_id} not found"),
        RUN_SQL.spec,
    )
    VERIFIABLE = CodeTools(RUN_SQL)   # DomainPack(verifiable=VERIFIABLE, program=...)
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sopgym.sandboxes import CodeRunner, ExecResult, Outcome, SandboxEpisode, Tier, ToolResult, ToolSpec

__all__ = [
    "object_schema",
    "lookup",
    "stateful",
    "CodeTool",
    "sql_tool",
    "python_tool",
    "CodeTools",
    "exec_tool_result",
]

#: language -> (argument name, what the messages call the agent's code)
_LANGUAGES = {"sql": ("query", "query"), "python": ("code", "program")}


def object_schema(properties: Mapping[str, Any], *, required: Sequence[str] | None = None) -> dict[str, Any]:
    """A tool's argument schema: an object with these properties, all required unless ``required``
    says otherwise, and no other fields.

    >>> object_schema({"claim_id": {"type": "string"}})["required"]
    ['claim_id']
    """
    props = dict(properties)
    return {"type": "object", "properties": props, "required": list(required) if required is not None else list(props),
            "additionalProperties": False}


def lookup(name: str, description: str, params: Mapping[str, Any], *, not_found: str | None = None,
           distractor: bool = False) -> ToolSpec:
    """A read-only tool answered from the task's replay records (the generator records them).

    Args:
        name: the function name the agent calls.
        description: what the tool returns, shown to the agent.
        params: ``{argument: property schema}``; every argument is required.
        not_found: the error for arguments the generator did not record, formatted with each
            argument by name (``"shipment {shipment_id} not found"``) or all of them as ``{args}``;
            None keeps :class:`ToolSpec`'s generic message.
        distractor: True for a tool the SOP never needs.

    Returns:
        The replay-tier :class:`ToolSpec`.
    """
    message = ToolSpec.not_found if not_found is None else not_found  # the dataclass field's default
    return ToolSpec(name, description, object_schema(params), distractor=distractor, not_found=message)


def stateful(name: str, description: str, params: Mapping[str, Any], *, writes: bool = False,
             distractor: bool = False) -> ToolSpec:
    """A tool answered by the pack's stateful program (``state.py`` defines a function of this name).

    Args:
        name: the function name the agent calls (a key of the program's ``TOOLS``).
        description: what the tool does, shown to the agent.
        params: ``{argument: property schema}``; every argument is required.
        writes: True when the tool changes the state.
        distractor: True for a tool the SOP never needs.

    Returns:
        The stateful-tier :class:`ToolSpec`.
    """
    return ToolSpec(name, description, object_schema(params), tier=Tier.STATEFUL, writes=writes, distractor=distractor)


@dataclass(frozen=True)
class CodeTool:
    """A verifiable-tier tool: one argument holding the agent's SQL query or Python program.

    Build it with :func:`sql_tool` or :func:`python_tool`.

    Args:
        name: the function name the agent calls.
        description: shown to the agent.
        language: ``"sql"`` (a read-only query on a fresh database of the task's state, rows printed
            as a JSON list of lists) or ``"python"`` (a program; its stdout is the result).
        timeout_s: wall-clock deadline of one run.
        max_chars: longest query or program accepted.
        error_lines: how many of stderr's last lines a failure reports. SQL reports 1, the
            exception: the traceback above it is the sandbox's own code, whose paths differ between
            runners. Python reports 5, the end of the traceback through the agent's program.
    """

    name: str
    description: str
    language: str
    timeout_s: float
    max_chars: int
    error_lines: int

    def __post_init__(self) -> None:
        if self.language not in _LANGUAGES:
            raise ValueError(f"code tool {self.name!r}: language must be one of {sorted(_LANGUAGES)}, got {self.language!r}")
        if self.timeout_s <= 0 or self.max_chars < 1 or self.error_lines < 1:
            raise ValueError(f"code tool {self.name!r}: timeout_s, max_chars and error_lines must be positive, got "
                             f"{self.timeout_s}, {self.max_chars}, {self.error_lines}")

    @property
    def argument(self) -> str:
        """The argument that carries the code: ``query`` for SQL, ``code`` for Python."""
        return _LANGUAGES[self.language][0]

    @property
    def spec(self) -> ToolSpec:
        params = {self.argument: {"type": "string", "minLength": 1, "maxLength": self.max_chars}}
        return ToolSpec(self.name, self.description, object_schema(params), tier=Tier.VERIFIABLE)

    def run(self, code_runner: CodeRunner, args: Mapping[str, Any], episode: SandboxEpisode,
            deadline: float | None = None) -> ToolResult:
        """Run the agent's code (validated arguments) and convert the outcome.

        Args:
            deadline: the caller's budget (a :func:`time.monotonic` value): the run stops at the
                earlier of it and its own ``timeout_s``.

        Raises:
            SandboxError: from the runner, on an infrastructure failure (the tool box reports it
                as ``SANDBOX_ERROR``).
        """
        code = args[self.argument]
        if self.language == "sql":
            assert episode.program is not None, f"{self.name}: a SQL tool needs the pack's stateful program"
            result = code_runner.run_sql(code, program=episode.program, initial_state=episode.initial_state or {},
                                         timeout_s=self.timeout_s, deadline=deadline)
        else:
            result = code_runner.run_python(code, timeout_s=self.timeout_s, deadline=deadline)
        # Stopped by the caller's deadline rather than its own: the message quotes no time (the caller's
        # budget is the caller's to name; a measured figure would differ run to run).
        by_caller = result.timed_out and deadline is not None and time.monotonic() >= deadline
        return exec_tool_result(result, subject=_LANGUAGES[self.language][1], timeout_s=None if by_caller else self.timeout_s,
                                error_lines=self.error_lines)


def sql_tool(description: str, *, name: str = "run_sql", timeout_s: float = 5.0, max_chars: int = 6000) -> CodeTool:
    """A tool that runs one read-only SQLite query (argument ``query``) on a fresh database built from
    the task's initial state by the pack's stateful program; its result is the rows as a JSON list of lists."""
    return CodeTool(name, description, "sql", timeout_s, max_chars, error_lines=1)


def python_tool(description: str, *, name: str = "run_python", timeout_s: float = 10.0,
                max_chars: int = 20000) -> CodeTool:
    """A tool that runs a Python 3 program (argument ``code``); its result is the program's stdout."""
    return CodeTool(name, description, "python", timeout_s, max_chars, error_lines=5)


class CodeTools:
    """A pack's ``verifiable`` handler: ``(code_runner, name, args, episode) -> ToolResult``.

    Args:
        tools: the pack's code tools (their ``spec`` goes into the pack's tools).

    Raises:
        ValueError: two tools share a name.
    """

    def __init__(self, *tools: CodeTool) -> None:
        self.tools = {tool.name: tool for tool in tools}
        if len(self.tools) != len(tools):
            raise ValueError(f"code tool names must be unique, got {[t.name for t in tools]}")

    def __call__(self, code_runner: CodeRunner, name: str, args: Mapping[str, Any], episode: SandboxEpisode,
                 deadline: float | None = None) -> ToolResult:
        tool = self.tools.get(name)
        if tool is None:
            expected = ", ".join(sorted(self.tools))
            return ToolResult(Outcome.UNKNOWN_TOOL, error=f"unknown verifiable tool {name!r}; expected one of: {expected}")
        return tool.run(code_runner, args, episode, deadline)


def exec_tool_result(result: ExecResult, *, subject: str, timeout_s: float | None, error_lines: int) -> ToolResult:
    """The tool result of one run of the agent's code: the verifiable tier's only conversion.

    Args:
        result: what the code runner returned.
        subject: what the messages call the code (``query``, ``program``).
        timeout_s: the deadline the run had (quoted in the timeout message); None when the caller's
            budget stopped it first.
        error_lines: how many of stderr's last non-blank lines a failure reports.

    Returns:
        ``TIMEOUT`` when the run hit its deadline; ``TOOL_ERROR`` with the exit code and the end of
        stderr when it exited non-zero; otherwise ``OK`` with stdout (a note when it is empty, and
        a note when the output cap cut it).
    """
    if result.timed_out:
        if timeout_s is None:
            return ToolResult(Outcome.TIMEOUT, error=f"{subject} was stopped: the wall time left for tools ran out")
        return ToolResult(Outcome.TIMEOUT, error=f"{subject} ran past the {timeout_s:g} s limit and was stopped")
    if result.exit_code != 0:
        lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
        detail = "\n".join(lines[-error_lines:]) if lines else "(nothing on stderr)"
        return ToolResult(Outcome.TOOL_ERROR, error=f"{subject} failed (exit code {result.exit_code}):\n{detail}")
    text = result.stdout or "(no output: print the values you need)"
    if result.truncated:
        text += "\n[output truncated at the size cap: return less output]"
    return ToolResult(Outcome.OK, content=text)
