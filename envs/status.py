"""How a step ended. Policy mistakes are statuses, never exceptions."""

from __future__ import annotations

import enum

__all__ = ["Status", "INVALID_ACTION", "INFRASTRUCTURE", "TRUNCATION", "worst"]


class Status(str, enum.Enum):
    OK = "OK"  # every call ran and returned a result
    SUBMITTED = "SUBMITTED"  # a valid submit_answer ended the episode
    NO_TOOL_CALL = "NO_TOOL_CALL"  # the reply had no tool call
    ERROR_PARSE = "ERROR_PARSE"  # a tool call block was not valid JSON / not {name, arguments}
    ERROR_UNKNOWN_TOOL = "ERROR_UNKNOWN_TOOL"
    ERROR_BAD_ARGUMENTS = "ERROR_BAD_ARGUMENTS"  # arguments failed the tool's JSON Schema
    ERROR_TOOL = "ERROR_TOOL"  # the tool ran and reported an error (not found, business rule)
    ERROR_TIMEOUT = "ERROR_TIMEOUT"  # the agent's code ran past its deadline
    ERROR_SANDBOX = "ERROR_SANDBOX"  # infrastructure failure: not the policy's fault
    TRUNCATED_MAX_TURNS = "TRUNCATED_MAX_TURNS"
    TRUNCATED_BUDGET = "TRUNCATED_BUDGET"  # the episode's context budget ran out

    def __str__(self) -> str:
        return self.value


INVALID_ACTION = frozenset({Status.NO_TOOL_CALL, Status.ERROR_PARSE, Status.ERROR_UNKNOWN_TOOL, Status.ERROR_BAD_ARGUMENTS})
INFRASTRUCTURE = frozenset({Status.ERROR_SANDBOX})
TRUNCATION = frozenset({Status.TRUNCATED_MAX_TURNS, Status.TRUNCATED_BUDGET})

# When a reply has several calls, the step's status is the most severe of theirs.
_SEVERITY = [
    Status.ERROR_SANDBOX, Status.ERROR_PARSE, Status.ERROR_UNKNOWN_TOOL, Status.ERROR_BAD_ARGUMENTS,
    Status.ERROR_TIMEOUT, Status.ERROR_TOOL, Status.NO_TOOL_CALL, Status.SUBMITTED, Status.OK,
]
_RANK = {s: i for i, s in enumerate(_SEVERITY)}


def worst(statuses: list[Status]) -> Status:
    if len(statuses) == 1:
        return statuses[0]
    return min(statuses, key=_RANK.__getitem__) if statuses else Status.NO_TOOL_CALL
