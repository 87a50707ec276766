"""The library parts of ``sopgym eval`` (the command is :mod:`sopgym.cli.evaluate`): the text tables
it prints (:func:`format_results` per env, :func:`format_suite` for a suite) and the rules its output
paths follow (:func:`check_output_paths`, :func:`trajectories_beside`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from .tables import table as _table

__all__ = ["format_results", "format_suite", "check_output_paths", "trajectories_beside"]


# --------------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------------
def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


# What format_results prints as counted even when no episode measured the policy: how episodes ended.
_COUNTS = frozenset({"mean_turns", "truncation_rate", "truncation_rate_by_cause", "infrastructure_failure_rate"})


def format_results(results: dict[str, Any], env_id: str | None = None, policy: str | None = None,
                   split: str | None = None) -> str:
    """One env's metrics as the table ``sopgym eval`` prints. When every episode was an infrastructure
    failure the policy's scores read "not measured" (their zeros say nothing of the policy); the
    counts of turns, truncations and failures stay."""
    from sopgym.evaluation.metrics import NOT_MEASURED, measured

    scored = measured(results)
    ci = results.get("ci95", {})
    k = results.get("k", 1)
    names = [
        ("task_success_rate", "task success rate"),
        ("field_accuracy", "field accuracy (mean)"),
        *((f"field_accuracy_per_field/{f}", f"  field {f}") for f in results.get("field_accuracy_per_field", {})),
        ("execution_completion_rate", "execution completion rate"),
        ("conditional_task_success_rate", "conditional success rate"),
        ("tool_call_accuracy", "tool-call accuracy"),
        ("invalid_action_rate", "invalid-action rate"),
        ("mean_turns", "mean turns"),
        ("truncation_rate", "truncation rate"),
        *((f"truncation_rate_by_cause/{c}", f"  truncated: {c}") for c in results.get("truncation_rate_by_cause", {})),
        ("infrastructure_failure_rate", "infrastructure failure rate"),
        ("pass_at_k", f"pass@{k}"),
        ("pass_hat_k", f"pass^{k}"),
    ]
    rows = []
    for key, label in names:
        if "/" in key:
            group, sub = key.split("/", 1)
            value = results[group][sub]
        else:
            value = results.get(key)
        interval = ci.get(key)
        if not scored and key.split("/", 1)[0] not in _COUNTS:
            rows.append([label, NOT_MEASURED, ""])
            continue
        rows.append([label, _fmt(value), f"[{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""])
    compat = results.get("sopbench_compat")
    if compat:
        interval = compat.get("ci95")
        rows.append([f"task success ({compat['rule']})", _fmt(compat["task_success_rate"]) if scored else NOT_MEASURED,
                     f"[{interval[0]:.3f}, {interval[1]:.3f}]" if interval and scored else ""])
    usage = results.get("usage")
    if usage:
        latency = usage["latency_s_per_turn"]
        rows += [
            ["prompt tokens / episode", _fmt(usage["prompt_tokens_per_episode"]), ""],
            ["completion tokens / episode", _fmt(usage["completion_tokens_per_episode"]), ""],
            ["latency / turn (s)", _fmt(latency["mean"]), f"p50 {_fmt(latency['p50'])}  p95 {_fmt(latency['p95'])}"],
            ["turns cut by max_tokens", _fmt(usage["max_tokens_cut_rate"]), f"{usage['max_tokens_cuts']} of {usage['turns']}"],
            ["failed requests (infrastructure)", str(usage["failed_requests"]["inference"]), ""],
        ]
        if usage.get("reply_byte_cuts"):
            rows.append(["turns cut by --max-reply-bytes", str(usage["reply_byte_cuts"]), f"of {usage['turns']}"])
        if usage.get("cached_turns"):
            rows.append(["turns answered from --cache", str(usage["cached_turns"]), f"of {usage['turns']} (no request sent)"])
        if usage.get("usage_dropped_turns"):
            rows.append(["turns with token counts dropped", str(usage["usage_dropped_turns"]), "(not sane integers)"])
        if "cost_usd" in usage:
            rows.append(["cost (USD)", _fmt(usage["cost_usd"]), ""])
    samples = (f"{results['min_samples_per_task']}" if results["min_samples_per_task"] == results["max_samples_per_task"]
               else f"{results['min_samples_per_task']}-{results['max_samples_per_task']}")
    head = (f"{env_id or results.get('env_id', '?')} | policy {policy or results.get('policy', '?')} | "
            f"split {split or results.get('split', '?')} | {results['num_tasks']} tasks x {samples} samples = "
            f"{results['episodes']} episodes")
    return head + "\n" + _table(["metric", "value", "95% CI"], rows)


def format_suite(results: dict[str, Any]) -> str:
    """The suite's summary: one line per env and the mean with its interval; the share of episodes
    that failed for the infrastructure, and "not measured" for a line all of whose episodes did."""
    from sopgym.evaluation.metrics import NOT_MEASURED, measured

    def line(label: str, m: dict[str, Any], compat: Any) -> list[str]:
        ci = m.get("ci95", {}).get("task_success_rate")
        if not measured(m):
            return [label, NOT_MEASURED, "", "", "", _fmt(m["mean_turns"]), _fmt(m["infrastructure_failure_rate"]), ""]
        return [label, _fmt(m["task_success_rate"]), f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "", _fmt(m["field_accuracy"]),
                _fmt(m["invalid_action_rate"]), _fmt(m["mean_turns"]), _fmt(m["infrastructure_failure_rate"]),
                _fmt(compat) if compat is not None else ""]

    rows = [line(env_id, m, m.get("sopbench_compat", {}).get("task_success_rate")) for env_id, m in results["envs"].items()]
    suite = results["suite"]
    rows.append(line(f"suite mean ({suite['envs']} envs)", suite, suite.get("sopbench_compat_task_success_rate")))
    return _table(["env", "success", "95% CI", "field acc.", "invalid", "turns", "infra.", "compat"], rows)


def _is_trajectory_file(path: str) -> bool:
    """True when ``path`` is an existing file whose first line is a trajectory line (run/reset/step/episode)."""
    if not os.path.isfile(path):
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.readline(1 << 20)
        line = json.loads(first)
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(line, dict) and (line.get("type") == "run" or (
        line.get("type") in ("reset", "step", "episode") and "episode_index" in line))


def check_output_paths(out: str | None, trajectories: str | None) -> str | None:
    """Why the output paths of ``sopgym eval`` cannot be written (None when they can), checked before any
    episode runs, so a run is never lost to a typo in a path.

    The results file must be a file (not a folder) in an existing folder; the trajectory file's folder is
    created if missing, but no part of it may be a file; the two must be different files (the results
    would overwrite the trajectories).
    """
    paths = [(flag, path) for flag, path in (("--out", out), ("--trajectories", trajectories)) if path]
    for flag, path in paths:
        if os.path.isdir(path) or path.endswith(("/", os.sep)):
            return f"{flag} {path!r} is a folder; expected a file path"
        parent = os.path.dirname(os.path.abspath(path))
        if flag == "--out" and not os.path.isdir(parent):
            return f"{flag} {path!r}: folder {parent!r} does not exist; create it or choose another path"
        existing = parent
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            return f"{flag} {path!r}: {existing!r} is a file, not a folder"
        if not os.access(existing, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
            return f"{flag} {path!r} is not writable"
    if out and _is_trajectory_file(out):
        return (f"--out {out!r} is a trajectory file (its first line is a trajectory line): refusing to overwrite it "
                "with results; choose another path")
    if out and trajectories:
        same = os.path.realpath(out) == os.path.realpath(trajectories) or (
            os.path.exists(out) and os.path.exists(trajectories) and os.path.samefile(out, trajectories))
        if same:
            return (f"--out and --trajectories name the same file {out!r}: the results would overwrite the "
                    "trajectories; give two paths")
    return None


def trajectories_beside(out: str) -> str:
    """The trajectory file of a run whose results go to ``out`` (when ``--trajectories`` is not given):
    ``results.json`` -> ``results.trajectories.jsonl``."""
    stem = out[: -len(".json")] if out.endswith(".json") else out
    return stem + ".trajectories.jsonl"
