"""Metrics from finished episodes, recomputed from what was submitted and what was expected.

The input is episode records: the ``info["episode"]`` dicts the env emits at the end of an
episode, live or read back from a :class:`~sopgym.envs.wrappers.RecordTrajectory` JSONL file. The
evaluator does not trust the record's ``reward`` or ``reward_components``: correctness is
recomputed from ``answer``, ``expected`` and ``fields`` with :func:`sopgym.scoring.field_scores`
(the only code shared with the reward) and from ``final_state`` against ``expected_state``.

This module imports nothing from ``sopgym.envs``: statuses are read as their string values, counted
with the status classes of :mod:`sopgym.status` (the one definition the env and the trainer use too).

Definitions (see docs/evaluation.md), all over every episode unless said otherwise:

* ``task_success_rate``: the answer is well formed, every field is right and every expected-state
  key equals the final state's value;
* ``field_accuracy``: mean over episodes of the fraction of fields right (a missing or malformed
  answer scores 0 on every field); ``field_accuracy_per_field`` per field name;
* ``execution_completion_rate``: the episode ended by a valid submission (well formed, every value
  legal for its field), without truncation and without infrastructure failure;
* ``conditional_task_success_rate``: successes among completed episodes (None when none completed);
* ``tool_call_accuracy``: tool calls that validated and executed / tool calls (``submit_answer``
  excluded; None when no tool was called);
* ``invalid_action_rate``: invalid turns (no call, unreadable call, unknown tool, bad arguments) / turns;
* ``mean_turns``; ``truncation_rate`` and ``truncation_rate_by_cause``; ``infrastructure_failure_rate``;
* ``pass_at_k`` and ``pass_hat_k``: unbiased estimators per task (grouped by ``task_id``), averaged.

Intervals (``ci95``) resample tasks, so correlated samples of one task move together.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from sopgym.record import REQUIRED_KEYS
from sopgym.scoring import INVALID, field_scores, normalize_value, validate_answer
from sopgym.status import INFRASTRUCTURE_VALUES, INVALID_ACTION_VALUES

from .passk import bootstrap_ci, pass_at_k, pass_hat_k

__all__ = ["EpisodeScore", "score_record", "evaluate_records", "state_keys_ok", "HEADLINE_METRICS", "measured",
           "NOT_MEASURED"]

#: Rates that get a bootstrap interval.
HEADLINE_METRICS = ("task_success_rate", "field_accuracy", "execution_completion_rate", "pass_at_k", "pass_hat_k")

#: What a table shows for a rate that was never measured (:func:`measured`), never ``0.000 [0.000, 0.000]``.
NOT_MEASURED = "not measured"

@dataclass(frozen=True)
class EpisodeScore:
    """The evaluator's judgement of one episode."""

    task_id: str
    domain: str | None
    fields: dict[str, bool]
    well_formed: bool
    state_ok: bool
    success: bool
    completed: bool
    truncated: bool
    truncation_cause: str | None
    infrastructure_failure: bool
    turns: int
    invalid_actions: int
    tool_calls: int
    tool_calls_ok: int

    @property
    def field_fraction(self) -> float:
        return sum(self.fields.values()) / len(self.fields)


def _canonical(value: Any) -> Any:
    """JSON round trip, so live records (tuples, numpy scalars) compare as their JSONL copies do."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def state_keys_ok(final_state: Any, expected_state: Any) -> dict[str, bool]:
    """Per key of ``expected_state``: whether the final state holds that value (JSON equality).

    A final state that is not a mapping holds no key. ``{}`` when nothing is expected.
    """
    if not isinstance(expected_state, Mapping) or not expected_state:
        return {}
    final = _canonical(final_state) if isinstance(final_state, Mapping) else {}
    expected = _canonical(expected_state)
    order = json.loads(json.dumps(dict.fromkeys(expected_state)))  # the keys as JSON writes them, in their order
    return {key: key in final and final[key] == expected[key] for key in order}


def _state_matches(final_state: Any, expected_state: Any) -> bool:
    if not expected_state:
        return True
    if not isinstance(final_state, Mapping) or not isinstance(expected_state, Mapping):
        return False
    return all(state_keys_ok(final_state, expected_state).values())


def _int(record: Mapping[str, Any], key: str, default: int | None, where: str) -> int:
    value = record.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{where}: {key!r} must be a non-negative integer, got {value!r}")
    return int(value)


def score_record(record: Mapping[str, Any], where: str = "record") -> EpisodeScore:
    """Judge one episode record from its answer, expected answer, fields and states.

    Args:
        record: an ``info["episode"]`` dict (extra keys are ignored; ``reward`` is never read).
        where: how to name the record in error messages.

    Raises:
        ValueError: when a required key is missing or a count has the wrong type.
    """
    if not isinstance(record, Mapping):
        raise ValueError(f"{where}: expected an episode record (a dict), got {type(record).__name__}")
    missing = [key for key in REQUIRED_KEYS if key not in record]
    if missing:
        raise ValueError(f"{where}: episode record is missing keys {missing}; expected at least {list(REQUIRED_KEYS)} "
                         f"(sopgym/record.py, EpisodeRecord), got keys {list(record)}")
    fields = list(record["fields"])
    if not fields or not all(isinstance(f, Mapping) and "name" in f for f in fields):
        raise ValueError(f"{where}: 'fields' must be a non-empty list of {{name, type, enum, nullable}} dicts, got {fields!r}")
    if not isinstance(record["expected"], Mapping):
        raise ValueError(f"{where}: 'expected' must be a dict, got {type(record['expected']).__name__}")

    answer = record["answer"]
    well_formed = answer is not None and validate_answer(answer, fields) is None
    scores = field_scores(answer, record["expected"], fields) if answer is not None else {f["name"]: False for f in fields}
    legal = well_formed and all(normalize_value(answer[f["name"]], f) is not INVALID for f in fields)
    state_ok = _state_matches(record.get("final_state"), record.get("expected_state"))

    statuses = record.get("statuses")
    if statuses is not None:
        invalid = sum(s in INVALID_ACTION_VALUES for s in statuses)
    else:
        invalid = _int(record, "num_invalid_actions", None, where)
    infra = bool(record.get("infrastructure_failure", False)) or (statuses is not None and any(s in INFRASTRUCTURE_VALUES for s in statuses))
    truncated = bool(record["truncated"])
    cause = record.get("truncation_cause")
    if truncated and not cause:
        cause = "unknown"
    calls = _int(record, "num_tool_calls", 0, where)
    calls_ok = _int(record, "num_tool_calls_ok", 0, where)
    if calls_ok > calls:
        raise ValueError(f"{where}: num_tool_calls_ok ({calls_ok}) exceeds num_tool_calls ({calls})")
    success = well_formed and all(scores.values()) and state_ok
    completed = legal and bool(record["terminated"]) and not truncated and not infra
    return EpisodeScore(
        task_id=str(record["task_id"]),
        domain=record.get("domain"),
        fields=scores,
        well_formed=well_formed,
        state_ok=state_ok,
        success=success,
        completed=completed,
        truncated=truncated,
        truncation_cause=cause if truncated else None,
        infrastructure_failure=infra,
        turns=_int(record, "turns", None, where),
        invalid_actions=invalid,
        tool_calls=calls,
        tool_calls_ok=calls_ok,
    )


def _ratio(top: float, bottom: float) -> float | None:
    return float(top) / float(bottom) if bottom else None


def measured(metrics: Mapping[str, Any]) -> bool:
    """False when every episode behind ``metrics`` (an env's or a suite's, as :func:`evaluate_records`
    or a results file gives them) was an infrastructure failure: its rates then say nothing of the
    policy (a failed sandbox, a lost server), and tables show :data:`NOT_MEASURED`. A suite's
    infrastructure-failure rate is the mean over its envs, so it is 1 only when no env was measured."""
    return metrics.get("infrastructure_failure_rate") != 1.0


def evaluate_records(
    records: Iterable[Mapping[str, Any]],
    k: int = 1,
    n_bootstrap: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """Compute the evaluation metrics of a set of episodes.

    Args:
        records: episode records (``info["episode"]`` dicts, live or from JSONL).
        k: the ``k`` of pass@k and pass^k; every task needs at least ``k`` episodes.
        n_bootstrap: bootstrap resamples over tasks for ``ci95`` (0 turns intervals off).
        seed: seeds the bootstrap; the same records and seed give the same intervals.
        confidence: coverage of the intervals (reported under ``ci95`` whatever its value).

    Returns:
        A JSON-serialisable dict: ``episodes``, ``num_tasks``, ``min_samples_per_task``,
        ``max_samples_per_task``, ``k``, the metrics listed in the module docstring, ``ci95``
        (``{metric: [low, high]}`` for :data:`HEADLINE_METRICS`), ``counts`` and ``bootstrap``.

    Raises:
        ValueError: on no records, a malformed record, or a task with fewer than ``k`` episodes.

    Example:
        >>> rec = {"task_id": "t", "answer": {"x": "A"}, "expected": {"x": "a"}, "turns": 1,
        ...        "statuses": ["SUBMITTED"], "fields": [{"name": "x", "type": "string"}],
        ...        "terminated": True, "truncated": False}
        >>> evaluate_records([rec], n_bootstrap=0)["task_success_rate"]
        1.0
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if n_bootstrap < 0:
        raise ValueError(f"n_bootstrap must be >= 0, got {n_bootstrap}")
    scores = [score_record(r, where=f"record {i}") for i, r in enumerate(records)]
    if not scores:
        raise ValueError("expected at least one episode record, got none")
    num = len(scores)

    by_task: dict[str, list[EpisodeScore]] = {}
    for s in scores:
        by_task.setdefault(s.task_id, []).append(s)
    too_few = {t: len(v) for t, v in by_task.items() if len(v) < k}
    if too_few:
        example = next(iter(too_few.items()))
        raise ValueError(
            f"pass@k with k={k} needs at least {k} episodes per task; {len(too_few)} task(s) have fewer "
            f"(e.g. {example[0]!r} has {example[1]}). Run more samples per task or lower k."
        )

    successes = sum(s.success for s in scores)
    completed = sum(s.completed for s in scores)
    completed_successes = sum(s.success and s.completed for s in scores)
    infra = sum(s.infrastructure_failure for s in scores)
    scored = [s for s in scores if not s.infrastructure_failure]
    truncated = sum(s.truncated for s in scores)
    causes = Counter(s.truncation_cause for s in scores if s.truncated)
    turns = sum(s.turns for s in scores)
    invalid = sum(s.invalid_actions for s in scores)
    calls = sum(s.tool_calls for s in scores)
    calls_ok = sum(s.tool_calls_ok for s in scores)

    multi_domain = len({s.domain for s in scores}) > 1
    per_field: dict[str, list[bool]] = {}
    for s in scores:
        for name, ok in s.fields.items():
            per_field.setdefault(f"{s.domain}/{name}" if multi_domain else name, []).append(ok)

    task_counts = [(len(v), sum(s.success for s in v)) for v in by_task.values()]
    pass_k_per_task = np.array([pass_at_k(n, c, k) for n, c in task_counts])
    pass_hat_per_task = np.array([pass_hat_k(n, c, k) for n, c in task_counts])

    result: dict[str, Any] = {
        "episodes": num,
        "num_tasks": len(by_task),
        "min_samples_per_task": min(n for n, _ in task_counts),
        "max_samples_per_task": max(n for n, _ in task_counts),
        "k": k,
        "task_success_rate": successes / num,
        "task_success_rate_excluding_infrastructure": _ratio(sum(s.success for s in scored), len(scored)),
        "field_accuracy": float(np.mean([s.field_fraction for s in scores])),
        "field_accuracy_per_field": {name: sum(v) / len(v) for name, v in per_field.items()},
        "execution_completion_rate": completed / num,
        "conditional_task_success_rate": _ratio(completed_successes, completed),
        "tool_call_accuracy": _ratio(calls_ok, calls),
        "invalid_action_rate": _ratio(invalid, turns),
        "mean_turns": turns / num,
        "truncation_rate": truncated / num,
        "truncation_rate_by_cause": {cause: n / num for cause, n in sorted(causes.items())},
        "infrastructure_failure_rate": infra / num,
        "pass_at_k": float(pass_k_per_task.mean()),
        "pass_hat_k": float(pass_hat_per_task.mean()),
        "counts": {
            "successes": successes,
            "completed": completed,
            "truncated": truncated,
            "truncated_by_cause": dict(sorted(causes.items())),
            "infrastructure_failures": infra,
            "turns": turns,
            "invalid_actions": invalid,
            "tool_calls": calls,
            "tool_calls_ok": calls_ok,
        },
        "ci95": {},
        "bootstrap": {"n_bootstrap": n_bootstrap, "seed": seed, "confidence": confidence, "unit": "task"},
    }
    if n_bootstrap:
        groups = list(by_task.values())
        episodes_per_task = [len(g) for g in groups]
        per_task_sums: dict[str, list[float]] = {
            "task_success_rate": [sum(s.success for s in g) for g in groups],
            "field_accuracy": [sum(s.field_fraction for s in g) for g in groups],
            "execution_completion_rate": [sum(s.completed for s in g) for g in groups],
        }
        for offset, (name, sums) in enumerate(per_task_sums.items()):
            low, high = bootstrap_ci(sums, episodes_per_task, n_bootstrap=n_bootstrap, seed=seed + offset, confidence=confidence)
            result["ci95"][name] = [low, high]
        for offset, (name, values) in enumerate((("pass_at_k", pass_k_per_task), ("pass_hat_k", pass_hat_per_task)), start=3):
            low, high = bootstrap_ci(values, n_bootstrap=n_bootstrap, seed=seed + offset, confidence=confidence)
            result["ci95"][name] = [low, high]
    return result
