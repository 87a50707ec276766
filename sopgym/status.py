"""How a step ended, and the status classes every part of sopgym counts with. The one definition.

Policy mistakes are statuses, never exceptions. The env sets them (``info["status"]`` for the step,
``info["turn_status"]`` for what the reply itself did, ``record["statuses"]`` per turn); the evaluator
and the trainer count with the classes below and nothing else. Standard library only, so the
evaluator can use it without importing the envs.
"""

from __future__ import annotations

import enum

__all__ = [
    "Status", "INVALID_ACTION", "TOOL_FAILURE", "INFRASTRUCTURE", "TRUNCATION",
    "INVALID_ACTION_VALUES", "TOOL_FAILURE_VALUES", "INFRASTRUCTURE_VALUES", "TRUNCATION_CAUSES", "END_CAUSES", "worst",
]


class Status(str, enum.Enum):
    OK = "OK"  # every call ran and returned a result
    SUBMITTED = "SUBMITTED"  # a valid submit_answer ended the episode
    NO_TOOL_CALL = "NO_TOOL_CALL"  # the reply had no tool call
    ERROR_PARSE = "ERROR_PARSE"  # a tool call block was not valid JSON / not {name, arguments}
    ERROR_UNKNOWN_TOOL = "ERROR_UNKNOWN_TOOL"
    ERROR_BAD_ARGUMENTS = "ERROR_BAD_ARGUMENTS"  # arguments failed the tool's JSON Schema
    ERROR_TOOL = "ERROR_TOOL"  # the tool ran and reported an error (not found, business rule)
    ERROR_TIMEOUT = "ERROR_TIMEOUT"  # the agent's code ran past its deadline
    ERROR_SANDBOX = "ERROR_SANDBOX"  # infrastructure failure of the tools: not the policy's fault
    ERROR_INFERENCE = "ERROR_INFERENCE"  # the policy's model server failed (the harness ended the episode)
    ERROR_ENV_LOST = "ERROR_ENV_LOST"  # the process (or host) running the env died mid-episode
    TRUNCATED_MAX_TURNS = "TRUNCATED_MAX_TURNS"
    TRUNCATED_BUDGET = "TRUNCATED_BUDGET"  # the episode's context budget ran out (the env's or the harness's)
    TRUNCATED_STOPPED = "TRUNCATED_STOPPED"  # the harness stopped the episode before a submission
    TRUNCATED_TURN_TIME = "TRUNCATED_TURN_TIME"  # one reply's tools spent the turn's wall-time budget
    TRUNCATED_EPISODE_TIME = "TRUNCATED_EPISODE_TIME"  # the episode's tools spent its wall-time budget

    def __str__(self) -> str:
        return self.value


#: A reply the env could not act on: counted in ``num_invalid_actions`` and the invalid-action rate.
INVALID_ACTION = frozenset({Status.NO_TOOL_CALL, Status.ERROR_PARSE, Status.ERROR_UNKNOWN_TOOL, Status.ERROR_BAD_ARGUMENTS})
#: A well-formed call whose tool said no (or whose code ran too long): the policy's, not invalid.
TOOL_FAILURE = frozenset({Status.ERROR_TOOL, Status.ERROR_TIMEOUT})
#: Not the policy's fault: such episodes are excluded from success rates and from advantages.
INFRASTRUCTURE = frozenset({Status.ERROR_SANDBOX, Status.ERROR_INFERENCE, Status.ERROR_ENV_LOST})
TRUNCATION = frozenset({
    Status.TRUNCATED_MAX_TURNS, Status.TRUNCATED_BUDGET, Status.TRUNCATED_STOPPED,
    Status.TRUNCATED_TURN_TIME, Status.TRUNCATED_EPISODE_TIME,
})

# The same classes as string values, for code that reads statuses back from records (JSON).
INVALID_ACTION_VALUES = frozenset(s.value for s in INVALID_ACTION)
TOOL_FAILURE_VALUES = frozenset(s.value for s in TOOL_FAILURE)
INFRASTRUCTURE_VALUES = frozenset(s.value for s in INFRASTRUCTURE)

#: The causes the env itself truncates an episode with (``truncation_cause``) -> the step status.
#: ``max_turns``: the turn cap; ``context_budget``: the env's ``max_context``; ``turn_time`` and
#: ``episode_time``: the wall-time budgets over the tools (``max_turn_seconds``, ``max_episode_seconds``).
#: An infrastructure failure of the tools truncates with cause ``sandbox`` and keeps ``ERROR_SANDBOX``.
TRUNCATION_CAUSES = {
    "max_turns": Status.TRUNCATED_MAX_TURNS,
    "context_budget": Status.TRUNCATED_BUDGET,
    "turn_time": Status.TRUNCATED_TURN_TIME,
    "episode_time": Status.TRUNCATED_EPISODE_TIME,
}

#: How a harness may end an episode early (``SOPEnv.end_episode(cause)``): cause -> the step status.
#: ``context_budget``: no room left in the harness's own (token) budget for another turn;
#: ``stopped``: the agent or library stopped replying (scored like an unanswered episode);
#: ``inference``: the model server failed after its retries (an infrastructure failure);
#: ``env_lost``: the process or host running the env died (a Ray env worker, an env server),
#: taking the env's state with it: an infrastructure failure. A Ray pool ends the episode on a fresh
#: env of the same spec; ``sopgym/Remote-v0`` builds the record itself when its server is gone.
#: Causes whose status is in :data:`INFRASTRUCTURE` mark the record ``infrastructure_failure``.
END_CAUSES = {
    "context_budget": Status.TRUNCATED_BUDGET,
    "stopped": Status.TRUNCATED_STOPPED,
    "inference": Status.ERROR_INFERENCE,
    "env_lost": Status.ERROR_ENV_LOST,
}

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
