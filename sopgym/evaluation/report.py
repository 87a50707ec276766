"""A leaderboard (Markdown and CSV) and plots from ``sopgym eval`` results (``sopgym report RESULTS...``:
:mod:`sopgym.cli.report`).

Each results file is one run (one model or policy over one or more envs). The report puts them side
by side:

* ``leaderboard.md``: task success with its 95% interval, models x envs plus the suite mean; for
  SOP-Bench envs the strict (evaluator) and ``sopbench-compat`` success side by side; then one row per
  model and env with field accuracy, invalid-action rate, mean turns, tokens per episode, latency per
  turn and the share of turns cut by ``max_tokens``.
* ``leaderboard.csv``: the same rows, one per (model, env), plus a ``suite`` row per model.
* ``task_success.png``: bars per env and model with the intervals; ``pass_at_k.png``: pass@k over k
  (the mean over envs) per model. Plots need matplotlib (``pip install 'sopgym[report]'``); without
  it the tables are still written and the command says what is missing.

Models are named by the model the results name (or the policy), with the file's name added when two
files would otherwise share a name.

What a results file holds is data: model names and env ids are escaped in Markdown cells (a ``|`` or
a line break cannot add a column or a row) and neutralised in CSV cells (a name starting with ``=``
is not a formula): :mod:`sopgym.evaluation.escaping`. Every value the report reads is checked first
(:func:`load_results`), so a malformed file is one ``ValueError`` naming the file and what is wrong.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .escaping import csv_cell, markdown_cell

__all__ = ["load_results", "build_report", "leaderboard_rows"]

CSV_COLUMNS = (
    "model", "env", "episodes", "task_success_rate", "ci95_low", "ci95_high", "sopbench_compat_task_success_rate",
    "field_accuracy", "execution_completion_rate", "invalid_action_rate", "mean_turns", "infrastructure_failure_rate",
    "prompt_tokens_per_episode", "completion_tokens_per_episode", "latency_s_per_turn", "max_tokens_cut_rate",
    "cost_usd",
)


#: Metrics the report reads, per env and for the suite: each a finite number or null.
_NUMBERS = ("episodes", "task_success_rate", "field_accuracy", "execution_completion_rate", "invalid_action_rate",
            "mean_turns", "infrastructure_failure_rate")
_USAGE_NUMBERS = ("prompt_tokens_per_episode", "completion_tokens_per_episode", "max_tokens_cut_rate", "cost_usd")


def _shown(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"int of {len(str(abs(value))) if abs(value) < 10**4000 else 'over 4000'} digits"
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError, RecursionError):
        text = "..."
    return f"{type(value).__name__} {text[:40]}"


def _number(where: str, value: Any) -> None:
    ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                           and (isinstance(value, int) and abs(value) < 10**30 or isinstance(value, float) and math.isfinite(value)))
    if not ok:
        raise ValueError(f"{where} must be a finite number or null, got {_shown(value)}")


def _object(where: str, value: Any, optional: bool = True) -> dict[str, Any]:
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object{' or null' if optional else ''}, got {_shown(value)}")
    return value


def _check_metrics(where: str, metrics: Any, suite: bool) -> None:
    metrics = _object(where, metrics, optional=False)
    for key in _NUMBERS:
        _number(f"{where}.{key}", metrics.get(key))
    ci = _object(f"{where}.ci95", metrics.get("ci95")).get("task_success_rate")
    if ci is not None and not (isinstance(ci, list) and len(ci) == 2):
        raise ValueError(f"{where}.ci95.task_success_rate must be [low, high] or null, got {_shown(ci)}")
    for i, bound in enumerate(ci or ()):
        _number(f"{where}.ci95.task_success_rate[{i}]", bound)
    if suite:
        _number(f"{where}.sopbench_compat_task_success_rate", metrics.get("sopbench_compat_task_success_rate"))
    else:
        compat = _object(f"{where}.sopbench_compat", metrics.get("sopbench_compat"))
        _number(f"{where}.sopbench_compat.task_success_rate", compat.get("task_success_rate"))
        curve = _object(f"{where}.pass_at_k_curve", metrics.get("pass_at_k_curve"))
        for k, value in curve.items():
            if not k.isdigit():
                raise ValueError(f"{where}.pass_at_k_curve keys must be k as digits, got {k[:20]!r}")
            _number(f"{where}.pass_at_k_curve[{k!r}]", value)
    usage = _object(f"{where}.usage", metrics.get("usage"))
    for key in _USAGE_NUMBERS:
        _number(f"{where}.usage.{key}", usage.get(key))
    _number(f"{where}.usage.latency_s_per_turn.mean", _object(f"{where}.usage.latency_s_per_turn", usage.get("latency_s_per_turn")).get("mean"))


def load_results(path: str | os.PathLike) -> dict[str, Any]:
    """A results file of ``sopgym eval``, every value the report reads checked.

    Raises:
        ValueError: the file is not UTF-8 JSON, not a results file of this format, or a value the
            report reads has the wrong type (one line naming the file, where the value is and what
            was expected vs found).
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: expected a results JSON file of `sopgym eval --out`, got invalid JSON ({exc})") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: expected a UTF-8 results JSON file, got undecodable bytes ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise ValueError(f"{path}: expected a results JSON file, got JSON nested too deeply to read") from None
    except ValueError as exc:  # an integer past Python's int-string limit
        raise ValueError(f"{path}: cannot read the results file: {str(exc).split(';')[0]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("envs"), dict) or not isinstance(data.get("suite"), dict):
        found = sorted(data)[:8] if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{path}: expected a results file of `sopgym eval --out` (keys format, config, envs, suite), "
                         f"got {found}")
    try:
        config = _object("config", data.get("config"))
        _object("config.agent", config.get("agent"))
        _object("config.identity", config.get("identity"))
        for env_id, metrics in data["envs"].items():
            _check_metrics(f"envs[{env_id[:80]!r}]", metrics, suite=False)
        _check_metrics("suite", data["suite"], suite=True)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return data


def _model_name(results: dict[str, Any]) -> str:
    agent = (results.get("config") or {}).get("agent") or {}
    model = agent.get("model")
    if model:
        name = str(model).rstrip("/")
        return os.path.basename(name) if os.path.sep in name else name
    return str(agent.get("policy") or (results.get("config") or {}).get("identity", {}).get("policy") or "?")


def _unfinished(results: dict[str, Any]) -> str:
    """`` (stopped: 3/10 episodes)`` for the results of a run that did not finish (written as it went),
    else empty: a leaderboard never shows part of a run as the whole."""
    run = results.get("run")
    if not isinstance(run, dict) or run.get("status") in (None, "finished"):
        return ""
    return f" ({run.get('status')}: {run.get('episodes_finished')}/{run.get('episodes_planned')} episodes)"


def _names(paths: Sequence[str | os.PathLike], runs: Sequence[dict[str, Any]]) -> list[str]:
    names = [_model_name(r) for r in runs]
    return [(f"{n} ({Path(p).stem})" if names.count(n) > 1 else n) + _unfinished(r)
            for n, p, r in zip(names, paths, runs)]


def _usage(metrics: dict[str, Any], key: str) -> Any:
    usage = metrics.get("usage") or {}
    if key == "latency_s_per_turn":
        return (usage.get("latency_s_per_turn") or {}).get("mean")
    return usage.get(key)


def leaderboard_rows(names: Sequence[str], runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (model, env) and a ``suite`` row per model, with :data:`CSV_COLUMNS`."""
    rows = []
    for name, run in zip(names, runs):
        for env_id, m in run["envs"].items():
            ci = (m.get("ci95") or {}).get("task_success_rate") or [None, None]
            rows.append({
                "model": name, "env": env_id, "episodes": m.get("episodes"), "task_success_rate": m.get("task_success_rate"),
                "ci95_low": ci[0], "ci95_high": ci[1],
                "sopbench_compat_task_success_rate": (m.get("sopbench_compat") or {}).get("task_success_rate"),
                "field_accuracy": m.get("field_accuracy"), "execution_completion_rate": m.get("execution_completion_rate"),
                "invalid_action_rate": m.get("invalid_action_rate"), "mean_turns": m.get("mean_turns"),
                "infrastructure_failure_rate": m.get("infrastructure_failure_rate"),
                **{key: _usage(m, key) for key in ("prompt_tokens_per_episode", "completion_tokens_per_episode",
                                                   "latency_s_per_turn", "max_tokens_cut_rate", "cost_usd")},
            })
        suite = run["suite"]
        ci = (suite.get("ci95") or {}).get("task_success_rate") or [None, None]
        rows.append({
            "model": name, "env": "suite", "episodes": suite.get("episodes"), "task_success_rate": suite.get("task_success_rate"),
            "ci95_low": ci[0], "ci95_high": ci[1],
            "sopbench_compat_task_success_rate": suite.get("sopbench_compat_task_success_rate"),
            "field_accuracy": suite.get("field_accuracy"), "execution_completion_rate": suite.get("execution_completion_rate"),
            "invalid_action_rate": suite.get("invalid_action_rate"), "mean_turns": suite.get("mean_turns"),
            "infrastructure_failure_rate": suite.get("infrastructure_failure_rate"),
            **{key: _usage(suite, key) for key in ("prompt_tokens_per_episode", "completion_tokens_per_episode",
                                                   "latency_s_per_turn", "max_tokens_cut_rate", "cost_usd")},
        })
    return rows


def _f(value: Any, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _with_ci(row: dict[str, Any]) -> str:
    if row["ci95_low"] is None:
        return _f(row["task_success_rate"])
    return f"{_f(row['task_success_rate'])} [{_f(row['ci95_low'])}, {_f(row['ci95_high'])}]"


def _markdown(names: Sequence[str], runs: Sequence[dict[str, Any]], rows: list[dict[str, Any]]) -> str:
    envs: list[str] = []
    for run in runs:
        envs.extend(e for e in run["envs"] if e not in envs)
    by_key = {(r["model"], r["env"]): r for r in rows}
    out = ["# Leaderboard", "", "Task success rate (the strict evaluator) with 95% bootstrap intervals over tasks; "
           "the suite column is the mean over envs.", ""]
    out.append("| model | " + " | ".join(map(markdown_cell, envs)) + " | suite |")
    out.append("|---" * (len(envs) + 2) + "|")
    for name in names:
        cells = [_with_ci(by_key[(name, e)]) if (name, e) in by_key else "" for e in envs]
        out.append(f"| {markdown_cell(name)} | " + " | ".join(cells) + f" | {_with_ci(by_key[(name, 'suite')])} |")
    compat = [r for r in rows if r["sopbench_compat_task_success_rate"] is not None and r["env"] != "suite"]
    if compat:
        out += ["", "## SOP-Bench: strict vs sopbench-compat", "",
                "`sopbench-compat` is upstream's lenient rule (substring matches count; see docs/sopbench.md), shown "
                "only to compare with published numbers.", "",
                "| model | env | strict | sopbench-compat | gap |", "|---|---|---|---|---|"]
        for r in compat:
            gap = r["sopbench_compat_task_success_rate"] - r["task_success_rate"]
            out.append(f"| {markdown_cell(r['model'])} | {markdown_cell(r['env'])} | {_with_ci(r)} | "
                       f"{_f(r['sopbench_compat_task_success_rate'])} | {gap:+.3f} |")
    out += ["", "## Details", "",
            "| model | env | episodes | success | field acc. | completion | invalid actions | mean turns | "
            "prompt tok./ep. | completion tok./ep. | latency/turn (s) | cut by max_tokens | infra. failures | cost (USD) |",
            "|---" * 14 + "|"]
    for r in rows:
        out.append(
            f"| {markdown_cell(r['model'])} | {markdown_cell(r['env'])} | {_f(r['episodes'])} | {_with_ci(r)} | {_f(r['field_accuracy'])} | "
            f"{_f(r['execution_completion_rate'])} | {_f(r['invalid_action_rate'])} | {_f(r['mean_turns'], 2)} | "
            f"{_f(r['prompt_tokens_per_episode'], 0)} | {_f(r['completion_tokens_per_episode'], 0)} | "
            f"{_f(r['latency_s_per_turn'], 2)} | {_f(r['max_tokens_cut_rate'])} | {_f(r['infrastructure_failure_rate'])} | "
            f"{_f(r['cost_usd'], 4)} |")
    return "\n".join(out) + "\n"


def _passk_curve(run: dict[str, Any]) -> tuple[list[int], list[float]]:
    """The suite's pass@k curve: per k, the mean over envs (k up to the fewest samples of any env)."""
    curves = [m.get("pass_at_k_curve") or {} for m in run["envs"].values()]
    ks = sorted(set.intersection(*(set(int(k) for k in c) for c in curves))) if curves else []
    return ks, [sum(c[str(k)] for c in curves) / len(curves) for k in ks]


def _plot_text(text: str) -> str:
    """A name as matplotlib draws it literally: ``$`` would start math text, a leading ``_`` hides a legend entry."""
    text = text.replace("$", r"\$")
    return " " + text if text.startswith("_") else text


def _plots(out: Path, names: Sequence[str], runs: Sequence[dict[str, Any]], rows: list[dict[str, Any]]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs: list[str] = []
    for run in runs:
        envs.extend(e for e in run["envs"] if e not in envs)
    envs.append("suite")
    by_key = {(r["model"], r["env"]): r for r in rows}
    width = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(envs) * max(1, len(names)) ** 0.5 + 2), 4.5))
    for i, name in enumerate(names):
        xs, ys, lows, highs = [], [], [], []
        for j, env in enumerate(envs):
            r = by_key.get((name, env))
            if r is None or r["task_success_rate"] is None:
                continue
            xs.append(j + (i - (len(names) - 1) / 2) * width)
            ys.append(r["task_success_rate"])
            lows.append(r["task_success_rate"] - (r["ci95_low"] if r["ci95_low"] is not None else r["task_success_rate"]))
            highs.append((r["ci95_high"] if r["ci95_high"] is not None else r["task_success_rate"]) - r["task_success_rate"])
        bars = ax.bar(xs, ys, width=width, label=_plot_text(name), yerr=[lows, highs], capsize=3)
        ax.bar_label(bars, fmt="%.2f", fontsize=6, padding=2)
    ax.set_xticks(range(len(envs)))
    ax.set_xticklabels([_plot_text(e.split("/")[-1]) for e in envs], rotation=45, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("task success rate (95% CI)")
    ax.set_title("Task success per env")
    ax.legend(fontsize=8)
    fig.tight_layout()
    success = out / "task_success.png"
    fig.savefig(success, dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, run in zip(names, runs):
        ks, values = _passk_curve(run)
        if ks:
            ax.plot(ks, values, marker="o", label=_plot_text(name))
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k (mean over envs)")
    ax.set_ylim(0, 1.05)
    ax.set_title("pass@k over k")
    ax.legend(fontsize=8)
    fig.tight_layout()
    curves = out / "pass_at_k.png"
    fig.savefig(curves, dpi=120)
    plt.close(fig)
    return [success, curves]


def build_report(paths: Sequence[str | os.PathLike], out_dir: str | os.PathLike, *, plots: bool = True) -> dict[str, Any]:
    """Write the leaderboard (and plots) for the results files ``paths`` into ``out_dir``.

    Returns:
        ``{"markdown": path, "csv": path, "plots": [paths], "plots_skipped": reason or None}``.

    Raises:
        ValueError: no files, or a file that is not a results file.
    """
    if not paths:
        raise ValueError("expected at least one results file")
    runs = [load_results(p) for p in paths]
    names = _names(paths, runs)
    rows = leaderboard_rows(names, runs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    markdown = out / "leaderboard.md"
    markdown.write_text(_markdown(names, runs, rows), encoding="utf-8")
    table = out / "leaderboard.csv"
    with open(table, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows({k: ("" if r[k] is None else csv_cell(r[k])) for k in CSV_COLUMNS} for r in rows)
    written: dict[str, Any] = {"markdown": markdown, "csv": table, "plots": [], "plots_skipped": None}
    if plots:
        try:
            written["plots"] = _plots(out, names, runs, rows)
        except ImportError as exc:
            written["plots_skipped"] = f"matplotlib is missing ({exc}): pip install 'sopgym[report]'"
    return written
