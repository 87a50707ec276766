"""Held-out metrics that show what RL does (issue 22): each rate with its 95% interval, bootstrapped
over tasks by the evaluator's own code (``sopgym.evaluation.evaluate_records``, ``passk.bootstrap_ci``).

- :func:`greedy_metrics`: greedy task success and field accuracy with intervals, accuracy per field,
  and success per outcome class (:func:`outcome_class`: the expected answer's categorical fields,
  e.g. ``QUARANTINE/WEIGHT_VARIANCE``), so a class the policy never solves is visible.
- :func:`sampled_metrics`: ``k`` sampled episodes per task at the rollout temperature: pass@1 (the
  mean success of a sample) and pass@k (the unbiased estimator) with intervals: pass@k is the ceiling
  that sharpening the policy (RL on a verifiable reward) can reach from here.
- :func:`paired_difference`: after minus before on the same tasks, with the paired bootstrap interval
  (tasks resampled together), so a gain is judged against the noise of the tasks both saw.

Keys are MLflow metric names (``val/...``: letters, digits, ``_ - . /`` and spaces only).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sopgym.evaluation.metrics import evaluate_records, score_record
from sopgym.evaluation.passk import bootstrap_ci

__all__ = ["outcome_class", "greedy_metrics", "sampled_metrics", "paired_difference"]

_NOT_A_METRIC_CHARACTER = re.compile(r"[^A-Za-z0-9_\-. /]")


def _name(text: str) -> str:
    return _NOT_A_METRIC_CHARACTER.sub("_", text)


def outcome_class(record: Mapping[str, Any]) -> str:
    """The expected answer's values of its categorical fields (those with an ``enum``), joined by
    ``/`` in the fields' order (``"all"`` when the task has none): the label's decision and reason."""
    expected = record.get("expected") or {}
    values = [str(expected.get(f["name"])) for f in record.get("fields", []) if f.get("enum")]
    return "/".join(values) or "all"


def _with_interval(out: dict[str, float], key: str, value: float, interval: Sequence[float] | None) -> None:
    out[key] = float(value)
    if interval is not None:
        out[f"{key}/ci_low"], out[f"{key}/ci_high"] = float(interval[0]), float(interval[1])


def greedy_metrics(records: Iterable[Mapping[str, Any]], *, n_bootstrap: int = 1000, seed: int = 0,
                   prefix: str = "val/") -> dict[str, float]:
    """One greedy episode per task: success and field accuracy with intervals, accuracy per field,
    success and task count per outcome class."""
    records = list(records)
    result = evaluate_records(records, k=1, n_bootstrap=n_bootstrap, seed=seed)
    ci = result["ci95"]
    out: dict[str, float] = {}
    _with_interval(out, f"{prefix}task_success_rate", result["task_success_rate"], ci.get("task_success_rate"))
    _with_interval(out, f"{prefix}field_accuracy", result["field_accuracy"], ci.get("field_accuracy"))
    for field, value in result["field_accuracy_per_field"].items():
        out[f"{prefix}field_accuracy/{_name(field)}"] = float(value)
    classes: dict[str, list[bool]] = {}
    for i, record in enumerate(records):
        classes.setdefault(outcome_class(record), []).append(score_record(record, where=f"record {i}").success)
    for name, successes in sorted(classes.items()):
        out[f"{prefix}class/{_name(name)}/task_success_rate"] = sum(successes) / len(successes)
        out[f"{prefix}class/{_name(name)}/episodes"] = float(len(successes))
    out[f"{prefix}classes_never_solved"] = float(sum(not any(s) for s in classes.values()))
    return out


def sampled_metrics(records: Iterable[Mapping[str, Any]], k: int, *, n_bootstrap: int = 1000, seed: int = 0,
                    prefix: str = "val/sampled/") -> dict[str, float]:
    """``k`` or more sampled episodes per task: pass@1 and pass@k with intervals (bootstrap over tasks).

    Raises:
        ValueError: a task with fewer than ``k`` episodes (the evaluator's message).
    """
    records = list(records)
    one = evaluate_records(records, k=1, n_bootstrap=n_bootstrap, seed=seed)
    many = evaluate_records(records, k=k, n_bootstrap=n_bootstrap, seed=seed)
    out: dict[str, float] = {}
    _with_interval(out, f"{prefix}pass_at_1", one["pass_at_k"], one["ci95"].get("pass_at_k"))
    _with_interval(out, f"{prefix}pass_at_{k}", many["pass_at_k"], many["ci95"].get("pass_at_k"))
    out[f"{prefix}samples_per_task"] = float(many["min_samples_per_task"])
    return out


def paired_difference(before: Iterable[Mapping[str, Any]], after: Iterable[Mapping[str, Any]], *,
                      n_bootstrap: int = 1000, seed: int = 0, confidence: float = 0.95) -> dict[str, float]:
    """Task success after minus before, over the same tasks (one or more episodes per task on each
    side; a task's success is the mean of its episodes'), with the paired percentile bootstrap interval
    of the mean difference (tasks resampled, both sides together).

    Returns:
        ``{"difference", "ci_low", "ci_high", "tasks"}``.

    Raises:
        ValueError: the two sides are not over the same tasks (the tasks only one side has, named).
    """
    sides = []
    for which, records in (("before", before), ("after", after)):
        by_task: dict[str, list[bool]] = {}
        for i, record in enumerate(records):
            score = score_record(record, where=f"{which} record {i}")
            by_task.setdefault(score.task_id, []).append(score.success)
        sides.append({task: sum(v) / len(v) for task, v in by_task.items()})
    first, second = sides
    if set(first) != set(second) or not first:
        only_before, only_after = sorted(set(first) - set(second)), sorted(set(second) - set(first))
        raise ValueError(f"a paired difference needs the same tasks before and after; expected equal task sets, got "
                         f"{len(first)} and {len(second)} tasks (only before: {only_before[:5]}, only after: "
                         f"{only_after[:5]})")
    tasks = sorted(first)
    diffs = [second[t] - first[t] for t in tasks]
    low, high = bootstrap_ci(diffs, n_bootstrap=max(1, n_bootstrap), seed=seed, confidence=confidence)
    return {"difference": sum(diffs) / len(diffs), "ci_low": low, "ci_high": high, "tasks": float(len(tasks))}
