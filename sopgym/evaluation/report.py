"""A leaderboard (Markdown and CSV) and plots from ``sopgym eval`` results (``sopgym report RESULTS...``:
:mod:`sopgym.cli.report`).

Each results file is one run (one model or policy over one or more envs). The report puts them side
by side:

* ``leaderboard.md``: first the settings and software in which the runs differ (:func:`compare_runs`,
  on the identity ``--resume`` checks: :mod:`.identity`); then task success with its 95% interval,
  models x envs plus the suite mean and its infrastructure-failure rate, ranked by the suite mean, or,
  when the runs' env sets differ or a run did not measure an env, by the mean over the envs every
  run has and measured (a column and a note say so); a cell all of whose episodes were
  infrastructure failures reads "not measured". For SOP-Bench envs the strict (evaluator) and
  ``sopbench-compat`` success side by side; then one row per model and env with field accuracy,
  invalid-action rate, mean turns, tokens per episode, latency per turn and the share of turns cut
  by ``max_tokens``.
* ``leaderboard.csv``: the same rows, one per (model, env), plus a ``suite`` row per model.
* ``task_success.png`` and ``pass_at_k.png``: :mod:`.report_plots`. Plots need matplotlib
  (``pip install 'sopgym[report]'``); without it the tables are still written and the command says
  what is missing.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .escaping import csv_cell, markdown_cell
from .identity import comparable_identity, envs_count, identity_diff, settings_diff
from .metrics import NOT_MEASURED, measured

__all__ = ["load_results", "build_report", "leaderboard_rows", "compare_runs", "Comparison"]

CSV_COLUMNS = (
    "model", "env", "episodes", "task_success_rate", "ci95_low", "ci95_high", "sopbench_compat_task_success_rate",
    "field_accuracy", "execution_completion_rate", "invalid_action_rate", "mean_turns", "infrastructure_failure_rate",
    "prompt_tokens_per_episode", "completion_tokens_per_episode", "latency_s_per_turn", "max_tokens_cut_rate",
    "cost_usd", "measured",
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


def _curve(where: str, curve: dict[str, Any], check: Any) -> dict[str, Any]:
    """``curve`` (k as digits -> value), each value passed to ``check(where, value)``."""
    for k, value in curve.items():
        if not k.isdigit():
            raise ValueError(f"{where} keys must be k as digits, got {k[:20]!r}")
        check(f"{where}[{k!r}]", value)
    return curve


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
        bands = _object(f"{where}.ci95.pass_at_k_curve", _object(f"{where}.ci95", metrics.get("ci95")).get("pass_at_k_curve"))
        for k, band in _curve(f"{where}.ci95.pass_at_k_curve", bands, lambda where, v: None).items():
            if not (isinstance(band, list) and len(band) == 2):
                raise ValueError(f"{where}.ci95.pass_at_k_curve[{k!r}] must be [low, high], got {_shown(band)}")
            for i, bound in enumerate(band):
                _number(f"{where}.ci95.pass_at_k_curve[{k!r}][{i}]", bound)
    else:
        compat = _object(f"{where}.sopbench_compat", metrics.get("sopbench_compat"))
        _number(f"{where}.sopbench_compat.task_success_rate", compat.get("task_success_rate"))
    _curve(f"{where}.pass_at_k_curve", _object(f"{where}.pass_at_k_curve", metrics.get("pass_at_k_curve")), _number)
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
                "infrastructure_failure_rate": m.get("infrastructure_failure_rate"), "measured": measured(m),
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
            "infrastructure_failure_rate": suite.get("infrastructure_failure_rate"), "measured": measured(suite),
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
    if not row["measured"]:
        return NOT_MEASURED
    if row["ci95_low"] is None:
        return _f(row["task_success_rate"])
    return f"{_f(row['task_success_rate'])} [{_f(row['ci95_low'])}, {_f(row['ci95_high'])}]"


@dataclass
class Comparison:
    """How the runs of a report compare: what they rank on and how their settings differ.

    ``ranked_envs`` is None when every run has the same envs and measured each of them: the runs rank
    on their suite means. Otherwise they rank on the mean over ``ranked_envs`` (the envs every run has
    and measured; each env weighs the same, as in the suite mean), shown in its own column, and
    ``notes`` say so; no envs at all: not ranked. ``differences`` are the settings and software
    versions that differ from the first run's (:mod:`.identity`).
    """

    envs: list[str]
    ranked_envs: list[str] | None
    notes: list[str] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    scores: dict[str, float | None] = field(default_factory=dict)


def _env_lists(runs: Sequence[dict[str, Any]]) -> tuple[list[str], list[str], list[str]]:
    """Every env (in order of appearance), the envs every run has, and those every run measured."""
    envs: list[str] = []
    for run in runs:
        envs.extend(e for e in run["envs"] if e not in envs)
    common = [e for e in envs if all(e in run["envs"] for run in runs)]
    return envs, common, [e for e in common if all(measured(run["envs"][e]) for run in runs)]


def _ranking_notes(names: Sequence[str], runs: Sequence[dict[str, Any]], common: list[str], ranked: list[str]) -> list[str]:
    sets_differ = any(set(run["envs"]) != set(runs[0]["envs"]) for run in runs)
    why = []
    if sets_differ:
        why.append("the runs' env sets differ (" + "; ".join(
            f"{markdown_cell(n)}: {envs_count(len(r['envs']))}" for n, r in zip(names, runs)) + ")")
    unmeasured = [f"{markdown_cell(e)} for {markdown_cell(n)}" for e in common for n, r in zip(names, runs)
                  if not measured(r["envs"][e])]
    if unmeasured:
        why.append("not measured (every episode an infrastructure failure): " + ", ".join(unmeasured))
    if not ranked:
        return ["**Not ranked**: no env that every run has and measured; " + "; ".join(why) + "."]
    return [f"**Ranked on the {envs_count(len(ranked))} every run has and measured** ("
            + ", ".join(map(markdown_cell, ranked)) + "), in the last column: " + "; ".join(why)
            + ". The suite column is each run's mean over its own envs, not comparable across rows; the ranked "
            "mean has no interval (a results file holds intervals over its own envs only)."]


def _env_set_diff(first: list[str], other: list[str], labels: tuple[str, str]) -> list[str]:
    added, missing = [e for e in other if e not in first], [e for e in first if e not in other]
    return ([f"envs: {labels[1]} has {', '.join(added)}, which {labels[0]} has not"] if added else []) + (
        [f"envs: {labels[1]} lacks {', '.join(missing)}"] if missing else [])


def _differences(names: Sequence[str], runs: Sequence[dict[str, Any]], common: list[str]) -> list[str]:
    """Per run after the first: its settings and software versions that differ from the first run's."""
    configs = [r.get("config") or {} for r in runs]
    reference = comparable_identity(configs[0].get("identity"), common)
    out = []
    for name, run, config in zip(names[1:], runs[1:], configs[1:]):
        labels = (names[0], name)
        identity = comparable_identity(config.get("identity"), common)
        if reference is None or identity is None:
            lines = ["settings: not recorded in " + (names[0] if reference is None else name) + "'s results"]
        else:
            lines = settings_diff(reference, identity, labels)
        lines += _env_set_diff(list(runs[0]["envs"]), list(run["envs"]), labels)
        lines += identity_diff(configs[0].get("software") or {}, config.get("software") or {}, labels, "software.")
        out += [f"{markdown_cell(name)} vs {markdown_cell(names[0])}: {markdown_cell(line)}" for line in lines]
    return out


def compare_runs(names: Sequence[str], runs: Sequence[dict[str, Any]]) -> Comparison:
    """The :class:`Comparison` of the runs ``names`` (their results ``runs``), with each run's ranking
    score (its suite mean, or its mean over the ranked envs; None: not measured or not ranked)."""
    envs, common, ranked = _env_lists(runs)
    same = all(set(run["envs"]) == set(envs) for run in runs) and ranked == envs
    comparison = Comparison(envs, None if same else ranked, differences=_differences(names, runs, common))
    if not same:
        comparison.notes = _ranking_notes(names, runs, common, ranked)
    for name, run in zip(names, runs):
        if same:
            comparison.scores[name] = run["suite"].get("task_success_rate") if measured(run["suite"]) else None
        else:
            rates = [run["envs"][e].get("task_success_rate") for e in ranked]
            comparison.scores[name] = float(sum(rates) / len(rates)) if rates and None not in rates else None
    return comparison


def _ranks(names: Sequence[str], scores: dict[str, float | None]) -> list[tuple[str, str]]:
    """``(rank, name)`` best first (ties share a rank; unranked runs last, in their order, rank ``-``)."""
    scored = [(n, s) for n in names if (s := scores[n]) is not None]
    ranked = [n for n, _ in sorted(scored, key=lambda pair: -pair[1])]
    out, previous, rank = [], None, 0
    for position, name in enumerate(ranked, start=1):
        if scores[name] != previous:
            rank, previous = position, scores[name]
        out.append((str(rank), name))
    return out + [("-", n) for n in names if scores[n] is None]


def _linked(text: str, viewer: str | None, name: str, env: str | None = None) -> str:
    """A headline cell as a link to its episodes in the viewer (``sopgym report --viewer``), else as it is."""
    if viewer is None:
        return text
    from .viewer import viewer_link

    return f"[{text}]({viewer_link(viewer, run=name, env=env)})"


def _headline(names: Sequence[str], rows: list[dict[str, Any]], comparison: Comparison, viewer: str | None = None) -> list[str]:
    by_key = {(r["model"], r["env"]): r for r in rows}
    envs, ranked = comparison.envs, comparison.ranked_envs
    extra = [f"ranked mean ({envs_count(len(ranked))})"] if ranked else []
    out = ["| rank | model | " + " | ".join(map(markdown_cell, envs)) + " | suite | infra. failures |"
           + "".join(f" {c} |" for c in extra),
           "|---" * (len(envs) + 4 + len(extra)) + "|"]
    for rank, name in _ranks(names, comparison.scores):
        suite = by_key[(name, "suite")]
        cells = [_linked(_with_ci(by_key[(name, e)]), viewer, name, e) if (name, e) in by_key else "" for e in envs]
        line = (f"| {rank} | {markdown_cell(name)} | " + " | ".join(cells) + f" | {_linked(_with_ci(suite), viewer, name)} | "
                f"{_f(suite['infrastructure_failure_rate'])} |")
        if extra:
            line += f" {_f(comparison.scores[name]) if comparison.scores[name] is not None else NOT_MEASURED} |"
        out.append(line)
    return out


def _markdown(names: Sequence[str], rows: list[dict[str, Any]], comparison: Comparison, viewer: str | None = None) -> str:
    out = ["# Leaderboard", ""]
    if comparison.differences:
        out += ["## The runs differ", "", "Settings and software that differ from the first run's; figures of runs "
                "that differ in settings are not like for like:", ""]
        out += [f"- {line}" for line in comparison.differences] + [""]
    out += ["Task success rate (the strict evaluator) with 95% bootstrap intervals over tasks; the suite column is "
            "the mean over envs; infra. failures: the share of episodes that failed for the infrastructure (a cell "
            f"all of whose episodes did reads \"{NOT_MEASURED}\")."
            + (" Rows are ranked by the suite mean." if comparison.ranked_envs is None else ""), ""]
    out += [*comparison.notes, ""] if comparison.notes else []
    if viewer is not None:
        out += [f"Each cell links to its episodes in [{viewer}]({viewer}) (search, filters, runs side by side).", ""]
    out += _headline(names, rows, comparison, viewer)
    compat = [r for r in rows if r["sopbench_compat_task_success_rate"] is not None and r["env"] != "suite"]
    if compat:
        out += ["", "## SOP-Bench: strict vs sopbench-compat", "",
                "`sopbench-compat` is upstream's lenient rule (substring matches count; see docs/sopbench.md), shown "
                "only to compare with published numbers.", "",
                "| model | env | strict | sopbench-compat | gap |", "|---|---|---|---|---|"]
        for r in compat:
            gap = r["sopbench_compat_task_success_rate"] - r["task_success_rate"]
            out.append(f"| {markdown_cell(r['model'])} | {markdown_cell(r['env'])} | {_with_ci(r)} | "
                       f"{_f(r['sopbench_compat_task_success_rate']) if r['measured'] else NOT_MEASURED} | "
                       f"{f'{gap:+.3f}' if r['measured'] else ''} |")
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


def _trajectories(path: str | os.PathLike, results: dict[str, Any]) -> Path:
    """The trajectory file of a results file: its ``run.trajectories``, as written (relative to where the
    run was started) or beside the results file."""
    given = (results.get("run") or {}).get("trajectories") if isinstance(results.get("run"), dict) else None
    if not isinstance(given, str) or not given:
        raise ValueError(f"{path}: --viewer needs the run's trajectory file, and run.trajectories names none")
    for candidate in (Path(given), Path(path).parent / given, Path(path).parent / Path(given).name):
        if candidate.is_file():
            return candidate
    raise ValueError(f"{path}: its trajectory file {given!r} is neither where it was written nor beside the results file")


def build_report(paths: Sequence[str | os.PathLike], out_dir: str | os.PathLike, *, plots: bool = True,
                 viewer: bool = False) -> dict[str, Any]:
    """Write the leaderboard (and plots) for the results files ``paths`` into ``out_dir``.

    Args:
        viewer: also write ``viewer.html`` (:mod:`.viewer`: every episode of the runs' trajectory files)
            and make each headline cell a link to its episodes there.

    Returns:
        ``{"markdown": path, "csv": path, "plots": [paths], "plots_skipped": reason or None,
        "notes": [what a plot left out, and why], "viewer": path or None}``.

    Raises:
        ValueError: no files, or a file that is not a results file; with ``viewer``, a trajectory file
            that cannot be found or read.
    """
    if not paths:
        raise ValueError("expected at least one results file")
    runs = [load_results(p) for p in paths]
    names = _names(paths, runs)
    rows = leaderboard_rows(names, runs)
    comparison = compare_runs(names, runs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    page = None
    if viewer:
        from .viewer import write_viewer

        page = out / "viewer.html"
        write_viewer([_trajectories(p, r) for p, r in zip(paths, runs)], page, names=names)
    markdown = out / "leaderboard.md"
    markdown.write_text(_markdown(names, rows, comparison, page.name if page else None), encoding="utf-8")
    table = out / "leaderboard.csv"
    with open(table, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows({k: ("" if r[k] is None else csv_cell(r[k])) for k in CSV_COLUMNS} for r in rows)
    written: dict[str, Any] = {"markdown": markdown, "csv": table, "plots": [], "plots_skipped": None, "notes": [],
                               "viewer": page}
    if plots:
        try:
            from .report_plots import write_plots

            written["plots"], written["notes"] = write_plots(out, names, runs, rows, comparison.ranked_envs,
                                                                     comparison.scores)
        except ImportError as exc:
            written["plots_skipped"] = f"matplotlib is missing ({exc}): pip install 'sopgym[report]'"
    return written
