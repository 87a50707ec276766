"""The plots of ``sopgym report`` (:mod:`.report`): task success per env and pass@k over k.

* ``task_success.png``: per env, then the suite, a bar per run with its 95% interval. A bar of 0 is
  drawn as a thick line on the axis in the run's colour (a bar of height 0 is otherwise invisible),
  an interval of zero width (``[0, 0]``, ``[1, 1]``) as a black diamond (its error bar would be a
  line hidden by the bar's edge or the axis), and a cell all of whose episodes were infrastructure
  failures as the words "not measured" (no bar: nothing was measured). When the runs rank on the
  envs they all measured (:class:`~.report.Comparison`), a last group shows that mean (no interval).
  The legend sits outside the axes, so it covers no bar.
* ``pass_at_k.png``: per run, pass@k over k with its 95% band (the suite's stratified bootstrap,
  ``suite.ci95.pass_at_k_curve``), the mean over envs. A run with one sample per task has only
  pass@1 (its task success, already plotted): it is left out and a note says so; when no run has
  more, the plot is not drawn. When the runs rank on the envs they all measured, the curves are the
  mean of those envs' curves, without a band (a results file holds bands over its own envs only).

The figure functions return matplotlib figures (tests read their artists: the zero marks carry
``gid="zero-bar"``, the diamonds ``"point-interval"``, the words ``"not-measured"``, the bands ``"band"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .identity import envs_count
from .metrics import NOT_MEASURED

__all__ = ["success_figure", "passk_figure", "write_plots", "passk_curve"]


def _plot_text(text: str) -> str:
    """A name as matplotlib draws it literally: ``$`` would start math text, a leading ``_`` hides a legend entry."""
    text = text.replace("$", r"\$")
    return " " + text if text.startswith("_") else text


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _colors(plt: Any) -> list[Any]:
    """The colour of the i-th run (the same in both plots)."""
    return plt.rcParams["axes.prop_cycle"].by_key()["color"]


def _legend_outside(ax: Any, extra: Sequence[Any] = ()) -> None:
    handles, labels = ax.get_legend_handles_labels()
    handles += list(extra)
    labels += [h.get_label() for h in extra]
    ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _groups(rows: list[dict[str, Any]], ranked_envs: list[str] | None,
            scores: dict[str, float | None] | None) -> tuple[list[str], list[str], dict[tuple[str, str], dict[str, Any]]]:
    """The x groups (envs, ``suite``, the ranked mean when there is one), their labels, rows by (run, group)."""
    envs: list[str] = []
    for r in rows:
        if r["env"] != "suite" and r["env"] not in envs:
            envs.append(r["env"])
    by_key = {(r["model"], r["env"]): r for r in rows}
    groups, labels = [*envs, "suite"], [e.split("/")[-1] for e in envs] + ["suite (own envs)" if ranked_envs is not None else "suite"]
    if ranked_envs and scores is not None:
        groups.append("ranked")
        labels.append(f"ranked mean ({envs_count(len(ranked_envs))})")
        for name, score in scores.items():
            by_key[(name, "ranked")] = {"task_success_rate": score, "ci95_low": None, "ci95_high": None,
                                        "measured": score is not None}
    return groups, labels, by_key


def _bar(ax: Any, x: float, width: float, row: dict[str, Any], color: Any, label: str | None) -> bool:
    """One run's bar in one group, with its interval, its zero mark and its point-interval mark; False
    when there is no bar (not measured: the words instead)."""
    if not row["measured"]:
        ax.text(x, 0.02, NOT_MEASURED, rotation=90, ha="center", va="bottom", fontsize=7, color=color, gid="not-measured")
        return False
    value, low, high = row["task_success_rate"], row["ci95_low"], row["ci95_high"]
    errors = None if low is None else [[value - low], [high - value]]
    bars = ax.bar([x], [value], width=width, color=color, label=label, yerr=errors, capsize=3)
    ax.bar_label(bars, fmt="%.2f", fontsize=6, padding=3)
    if value == 0:
        ax.hlines(0, x - width / 2, x + width / 2, colors=[color], linewidth=3, gid="zero-bar", zorder=3)
    if low is not None and low == high:
        ax.plot([x], [low], marker="D", markersize=4, color="black", linestyle="none", gid="point-interval", zorder=4)
    return True


def success_figure(names: Sequence[str], rows: list[dict[str, Any]], ranked_envs: list[str] | None = None,
                   scores: dict[str, float | None] | None = None) -> Any:
    """The task-success bars (see the module docstring) of :func:`~.report.leaderboard_rows`' ``rows``."""
    plt = _pyplot()
    from matplotlib.lines import Line2D

    groups, labels, by_key = _groups(rows, ranked_envs, scores)
    width = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(groups) * max(1, len(names)) ** 0.5 + 4), 4.5))
    colors = _colors(plt)
    for i, name in enumerate(names):
        color = colors[i % len(colors)]
        label: str | None = _plot_text(name)
        for j, group in enumerate(groups):
            row = by_key.get((name, group))
            if row is None or (row["measured"] and row["task_success_rate"] is None):
                continue
            if _bar(ax, j + (i - (len(names) - 1) / 2) * width, width, row, color, label):
                label = None
        if label is not None:  # no bar of this run at all: still named in the legend
            ax.bar([0], [0], width=0, color=color, label=label)
    ax.axvline(groups.index("suite") - 0.5, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlim(-0.5, len(groups) - 0.5)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([_plot_text(g) for g in labels], rotation=45, ha="right", fontsize=8)
    ax.set_ylim(-0.04, 1.1)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_ylabel("task success rate (95% CI)")
    ax.set_title("Task success per env")
    drawn = {artist.get_gid() for artist in ax.get_children()}
    marks = [Line2D([], [], color="grey", linewidth=3, label="a bar of 0", gid="zero-bar"),
             Line2D([], [], marker="D", markersize=4, color="black", linestyle="none", label="an interval of zero width",
                    gid="point-interval")]
    _legend_outside(ax, [mark for mark in marks if mark.get_gid() in drawn])
    fig.tight_layout()
    return fig


def passk_curve(run: dict[str, Any], envs: Sequence[str] | None = None) -> tuple[list[int], list[float], list[list[float]] | None]:
    """A run's pass@k curve: ``(ks, values, bands or None)``. Without ``envs``, the suite's own (with its
    band) when the results hold it; else per k the mean over ``envs`` (default: the run's) of their
    curves, k up to the fewest samples of any of them, without a band."""
    suite = run["suite"].get("pass_at_k_curve")
    if envs is None and suite:
        ks = sorted(int(k) for k in suite)
        bands = (run["suite"].get("ci95") or {}).get("pass_at_k_curve") or {}
        return ks, [suite[str(k)] for k in ks], [bands[str(k)] for k in ks] if all(str(k) in bands for k in ks) else None
    curves = [run["envs"][e].get("pass_at_k_curve") or {} for e in (envs if envs is not None else run["envs"])]
    ks = sorted(set.intersection(*(set(int(k) for k in c) for c in curves))) if curves else []
    return ks, [sum(c[str(k)] for c in curves) / len(curves) for k in ks], None


def passk_figure(names: Sequence[str], runs: Sequence[dict[str, Any]], ranked_envs: list[str] | None = None) -> tuple[Any, list[str]]:
    """The pass@k plot (see the module docstring) and notes on what it leaves out; ``(None, notes)``
    when no run has more than one sample per task."""
    if ranked_envs is not None and not ranked_envs:
        return None, ["pass@k: no env that every run has and measured, so pass_at_k.png not written"]
    curves = {name: passk_curve(run, ranked_envs) for name, run in zip(names, runs)}
    single = [name for name, (ks, _, _) in curves.items() if len(ks) <= 1]
    notes = []
    if single:
        notes.append("pass@k: " + ", ".join(single) + (" has" if len(single) == 1 else " have")
                     + " one sample per task (k = 1 only: pass@1 is the task success rate), so no curve")
    if len(single) == len(names):
        return None, [notes[0] + "; pass_at_k.png not written"]
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(8, 4))
    colors = _colors(plt)
    for i, (name, (ks, values, bands)) in enumerate(curves.items()):
        if name in single:
            continue
        ax.plot(ks, values, marker="o", label=_plot_text(name), color=colors[i % len(colors)])
        if bands is not None:
            ax.fill_between(ks, [b[0] for b in bands], [b[1] for b in bands], color=colors[i % len(colors)], alpha=0.2,
                            linewidth=0, gid="band")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("k")
    where = f"ranked mean ({envs_count(len(ranked_envs))}), no band" if ranked_envs else "mean over envs, 95% band"
    ax.set_ylabel(f"pass@k ({where})")
    ax.set_ylim(-0.04, 1.05)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_title("pass@k over k" + (f"\nno curve (one sample per task): {_plot_text(', '.join(single))}" if single else ""),
                 fontsize=10)
    _legend_outside(ax)
    fig.tight_layout()
    if ranked_envs is not None:
        notes.append(f"pass@k: curves over the {envs_count(len(ranked_envs))} every run has and measured, without bands "
                     "(a results file holds bands over its own envs only)")
    return fig, notes


def write_plots(out: Path, names: Sequence[str], runs: Sequence[dict[str, Any]], rows: list[dict[str, Any]],
                ranked_envs: list[str] | None = None, scores: dict[str, float | None] | None = None) -> tuple[list[Path], list[str]]:
    """Write ``task_success.png`` and (when some run has k > 1) ``pass_at_k.png`` into ``out``.

    Returns:
        ``(paths written, notes on what was left out)``.
    """
    plt = _pyplot()
    written = []
    fig = success_figure(names, rows, ranked_envs, scores)
    written.append(out / "task_success.png")
    fig.savefig(written[-1], dpi=120, bbox_inches="tight")
    plt.close(fig)
    fig, notes = passk_figure(names, runs, ranked_envs)
    if fig is not None:
        written.append(out / "pass_at_k.png")
        fig.savefig(written[-1], dpi=120, bbox_inches="tight")
        plt.close(fig)
    return written, notes
