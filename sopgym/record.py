"""The episode record: what an env emits as ``info["episode"]`` when an episode ends. The one definition.

:class:`EpisodeRecord` declares its keys; :func:`episode_record` is the one constructor every producer
calls (:class:`~sopgym.envs.SOPEnv` and its subclasses, and the remote env's record of an episode lost
with its server, ``sopgym/integrations/remote_env.py``), so each record holds the same keys in the
same order and trajectory files stay byte-identical. A record stays a plain dict: JSON-able as it is,
written as the ``episode`` line of a trajectory file (``sopgym/trajectory.py``), read back as it was.

The evaluator (``sopgym/evaluation/metrics.py``) needs only :data:`REQUIRED_KEYS`, the keys
:class:`EpisodeRecord` requires; the others are optional to it (a hand-written JSONL record may omit
them) though every producer writes them, but for ``infrastructure_error``, which only a record of an
infrastructure failure seen from outside the env carries.

Standard library and :mod:`sopgym.status` only, beside it at the top of the package: the envs write
records and may import nothing above them, and the evaluator reads them without the envs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from sopgym.status import INVALID_ACTION_VALUES

__all__ = ["RecordField", "EpisodeRecord", "REQUIRED_KEYS", "RECORD_KEYS", "episode_record"]


class RecordField(TypedDict):
    """One output field of the answer, as the evaluator validates and normalises it."""

    name: str
    type: str
    enum: list[Any] | None
    nullable: bool


class _Scored(TypedDict):
    """The keys the evaluator cannot score a record without."""

    task_id: str
    answer: dict[str, Any] | None  # the submitted answer, None when nothing was submitted
    expected: dict[str, Any]
    fields: list[RecordField]
    turns: int
    terminated: bool
    truncated: bool


class EpisodeRecord(_Scored, total=False):
    """An episode record. Required: what the evaluator scores (:data:`REQUIRED_KEYS`); the rest is
    written by every producer (:func:`episode_record`) but may be absent from a hand-written record."""

    env_id: str
    domain: str
    split: str
    difficulty: Any
    final_state: dict[str, Any] | None  # the stateful tools' state at the end; None without them
    expected_state: Mapping[str, Any] | None
    statuses: list[str]  # one per turn (sopgym/status.py)
    num_tool_calls: int  # calls that reached a tool
    num_tool_calls_ok: int
    num_invalid_actions: int
    truncation_cause: str | None
    infrastructure_failure: bool
    reward: float  # the env's reward; the evaluator never reads it
    reward_components: dict[str, float]
    infrastructure_error: str  # only in a record of an infrastructure failure seen from outside the env


#: The keys the evaluator requires, in the order of a record.
REQUIRED_KEYS: tuple[str, ...] = tuple(k for k in _Scored.__annotations__)
#: Every key :class:`EpisodeRecord` declares.
RECORD_KEYS: frozenset[str] = EpisodeRecord.__required_keys__ | EpisodeRecord.__optional_keys__


def episode_record(*, env_id: str, domain: str, task_id: str, split: str, difficulty: Any, answer: dict[str, Any] | None,
                   expected: Mapping[str, Any], fields: Iterable[RecordField], final_state: dict[str, Any] | None,
                   expected_state: Mapping[str, Any] | None, turns: int, statuses: Iterable[str], num_tool_calls: int,
                   num_tool_calls_ok: int, terminated: bool, truncated: bool, truncation_cause: str | None,
                   infrastructure_failure: bool, reward: float, reward_components: Mapping[str, float],
                   infrastructure_error: str | None = None) -> EpisodeRecord:
    """The record of one finished episode, its keys in the one order every producer writes.

    ``num_invalid_actions`` is counted from ``statuses``; ``infrastructure_error`` is written only
    when given. ``expected``, ``fields``, ``statuses`` and ``reward_components`` are copied.
    """
    statuses = list(statuses)
    record: EpisodeRecord = {
        "env_id": env_id,
        "domain": domain,
        "task_id": task_id,
        "split": split,
        "difficulty": difficulty,
        "answer": answer,
        "expected": dict(expected),
        "fields": list(fields),
        "final_state": final_state,
        "expected_state": expected_state,
        "turns": turns,
        "statuses": statuses,
        "num_tool_calls": num_tool_calls,
        "num_tool_calls_ok": num_tool_calls_ok,
        "num_invalid_actions": sum(s in INVALID_ACTION_VALUES for s in statuses),
        "terminated": terminated,
        "truncated": truncated,
        "truncation_cause": truncation_cause,
        "infrastructure_failure": infrastructure_failure,
        "reward": reward,
        "reward_components": dict(reward_components),
    }
    if infrastructure_error is not None:
        record["infrastructure_error"] = infrastructure_error
    return record
