"""`sopgym report` compares like with like (issue 24): the runs' settings that differ are printed above
the tables, runs over different env sets rank on the envs they all have and measured (and say so),
an env whose episodes were all infrastructure failures reads "not measured", and the plots show what
is there: zero bars and zero-width intervals marked, legends outside the axes, pass@k bands, no
pass@k plot of k = 1 alone. Runs are real `sopgym eval` runs of scripted policies."""

from __future__ import annotations

import json
import re

import pytest

from sopgym import cli
from sopgym.bench.eval_command import format_results, format_suite
from sopgym.bench.suite import read_trajectory_run, suite_results, write_results
from sopgym.evaluation.report import leaderboard_rows, load_results

WR, OF, PI = "sopgym/WarehouseReceiving-v0", "sopgym/OrderFulfilment-v0", "sopgym/PatientIntake-v0"


def _eval(folder, name, *args) -> str:
    path = folder / f"{name}.json"
    assert cli.main(["eval", *args, "--n-bootstrap", "200", "--quiet", "--out", str(path)]) == 0
    return str(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("runs")
    return {
        "oracle": _eval(folder, "oracle", "--env", WR, "--policy", "oracle", "--episodes", "4"),
        "oracle-t2": _eval(folder, "oracle-t2", "--env", WR, "--policy", "oracle", "--episodes", "4",
                           "--env-arg", "max_turns=2"),
        "random": _eval(folder, "random", "--env", WR, PI, "--policy", "random", "--episodes", "6",
                        "--samples-per-task", "3"),
        "both": _eval(folder, "both", "--env", WR, OF, "--policy", "oracle", "--episodes", "3"),
    }


@pytest.fixture(scope="module")
def infra(runs, tmp_path_factory):
    """The oracle over WR and OF, every OF episode an infrastructure failure as the env records one
    (a sandbox that failed: the last turn ERROR_SANDBOX, truncated, ``infrastructure_failure``)."""
    results = json.loads(open(runs["both"]).read())
    _, finished, _, _ = read_trajectory_run(runs["both"].replace(".json", ".trajectories.jsonl"))
    outcomes = [finished[i] for i in sorted(finished)]
    for o in outcomes:
        if o.env_id == OF:
            o.record.update(answer=None, infrastructure_failure=True, truncated=True, terminated=False,
                            truncation_cause="sandbox", statuses=[*o.record["statuses"][:-1], "ERROR_SANDBOX"])
    path = tmp_path_factory.mktemp("infra") / "infra.json"
    write_results(path, suite_results(results["config"], outcomes, n_bootstrap=200))
    return str(path)


def _report(tmp_path, *paths, plots=False):
    out = tmp_path / "out"
    assert cli.main(["report", *paths, "--out", str(out), *([] if plots else ["--no-plots"])]) == 0
    return out


def _headline(text: str) -> list[list[str]]:
    lines = [line for line in text.splitlines() if line.startswith("| rank |")]
    start = text.splitlines().index(lines[0])
    table = []
    for line in text.splitlines()[start:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip("|").split("|")])
    return [table[0], *table[2:]]


def test_runs_over_different_env_sets_rank_on_the_envs_they_share_and_say_so(runs, tmp_path):
    text = (_report(tmp_path, runs["random"], runs["oracle"]) / "leaderboard.md").read_text()
    header, *rows = _headline(text)
    assert header[-1] == "ranked mean (1 env)"
    assert "**Ranked on the 1 env every run has and measured** (sopgym/WarehouseReceiving-v0)" in text
    random = load_results(runs["random"])
    by_model = {row[1]: row for row in rows}
    assert by_model["random"][-1] == f"{random['envs'][WR]['task_success_rate']:.3f}"  # WR alone, not its 2-env suite
    assert random["suite"]["task_success_rate"] != random["envs"][WR]["task_success_rate"]
    assert [row[:2] for row in rows] == [["1", "oracle"], ["2", "random"]]


def test_a_max_turns_difference_is_printed_above_the_tables(runs, tmp_path, capsys):
    text = (_report(tmp_path, runs["oracle"], runs["oracle-t2"]) / "leaderboard.md").read_text()
    above = text[:text.index("| rank |")]
    assert 'env\\_kwargs.max\\_turns: oracle (oracle) "\\<absent\\>", oracle (oracle-t2) 2' in above
    assert "env\\_kwargs.max\\_turns" in capsys.readouterr().out.split("| rank |")[0]


def test_runs_of_the_same_settings_print_no_differences(runs, tmp_path):
    text = (_report(tmp_path, runs["oracle"], runs["oracle"]) / "leaderboard.md").read_text()
    assert "The runs differ" not in text and "Rows are ranked by the suite mean." in text


def test_an_env_all_of_whose_episodes_failed_for_the_infrastructure_reads_not_measured(infra, tmp_path):
    header, row = _headline((_report(tmp_path, infra) / "leaderboard.md").read_text())
    cells = dict(zip(header, row))
    assert cells[OF] == "not measured" and cells[WR] == "1.000 [1.000, 1.000]"
    suite_table = format_suite(load_results(infra))
    line = next(line for line in suite_table.splitlines() if line.startswith(OF))
    assert "not measured" in line and "0.000" not in line.split("not measured")[0]


def test_the_headline_and_the_suite_table_have_an_infrastructure_failure_column(infra, tmp_path):
    header, row = _headline((_report(tmp_path, infra) / "leaderboard.md").read_text())
    assert dict(zip(header, row))["infra. failures"] == "0.500"  # the suite: OF's 1.0 and WR's 0.0
    head, _, *lines = format_suite(load_results(infra)).splitlines()
    column = head.index("infra.")
    assert [line[column:column + 5] for line in lines] == ["0.000", "1.000", "0.500"]


def test_a_run_that_measured_an_env_another_did_not_ranks_without_it(infra, runs, tmp_path):
    text = (_report(tmp_path, infra, runs["both"]) / "leaderboard.md").read_text()
    assert "**Ranked on the 1 env every run has and measured** (sopgym/WarehouseReceiving-v0)" in text
    assert "not measured (every episode an infrastructure failure): sopgym/OrderFulfilment-v0 for oracle (infra)" in text


# -- plots ---------------------------------------------------------------------------------------------
matplotlib = pytest.importorskip("matplotlib")


def _figures(paths):
    from sopgym.evaluation.report import _names, compare_runs
    from sopgym.evaluation.report_plots import passk_figure, success_figure

    data = [load_results(p) for p in paths]
    names = _names(paths, data)
    comparison = compare_runs(names, data)
    rows = leaderboard_rows(names, data)
    return (success_figure(names, rows, comparison.ranked_envs, comparison.scores),
            passk_figure(names, data, comparison.ranked_envs), names, data)


def _gid(fig, gid):
    return [a for a in fig.axes[0].get_children() if a.get_gid() == gid]


def test_pass_at_k_is_not_plotted_with_one_sample_per_task_and_a_note_says_so(runs, tmp_path, capsys):
    out = _report(tmp_path, runs["oracle"], plots=True)
    assert (out / "task_success.png").exists() and not (out / "pass_at_k.png").exists()
    assert "note: pass@k: oracle has one sample per task (k = 1 only" in capsys.readouterr().out


def test_a_zero_bar_and_a_zero_width_interval_are_marked(runs):
    fig, _, _, (results,) = _figures([runs["oracle-t2"]])
    assert results["envs"][WR]["task_success_rate"] == 0.0 and results["envs"][WR]["ci95"]["task_success_rate"] == [0.0, 0.0]
    zero_marks, diamonds = _gid(fig, "zero-bar"), _gid(fig, "point-interval")
    assert len(zero_marks) == 2 and len(diamonds) == 2  # WR and the suite
    bars = [p for p in fig.axes[0].patches if p.get_height() == 0 and p.get_width() > 0]
    for mark, bar in zip(zero_marks, bars):
        (x0, y0), (x1, y1) = mark.get_segments()[0]
        assert (y0, y1) == (0, 0) and (x0, x1) == pytest.approx((bar.get_x(), bar.get_x() + bar.get_width()))
        assert mark.get_linewidth()[0] >= 2 and fig.axes[0].get_ylim()[0] < 0  # drawn above the axis, not on it
    assert [d.get_ydata()[0] for d in diamonds] == [0.0, 0.0]


def test_a_cell_that_was_not_measured_is_said_on_the_plot_with_no_bar(infra):
    fig, *_ = _figures([infra])
    words = _gid(fig, "not-measured")
    assert [w.get_text() for w in words] == ["not measured"] and round(words[0].get_position()[0]) == 1  # OF's group


@pytest.mark.parametrize("which", ["task_success", "pass_at_k"])
def test_the_legend_lies_outside_the_axes(runs, which):
    success, (passk, _), *_ = _figures([runs["random"], runs["both"]])
    fig = success if which == "task_success" else passk
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend, axes = fig.axes[0].get_legend().get_window_extent(renderer), fig.axes[0].get_window_extent(renderer)
    assert legend.x0 >= axes.x1, (legend, axes)


def test_pass_at_k_curves_have_their_bands(runs):
    _, (fig, notes), names, data = _figures([runs["random"]])
    (band,) = _gid(fig, "band")
    intervals = data[0]["suite"]["ci95"]["pass_at_k_curve"]
    assert sorted(intervals) == ["1", "2", "3"] and notes == []
    ys = band.get_paths()[0].vertices[:, 1]
    assert min(ys) == pytest.approx(min(b[0] for b in intervals.values()))
    assert max(ys) == pytest.approx(max(b[1] for b in intervals.values()))
    assert all(low <= data[0]["suite"]["pass_at_k_curve"][k] <= high for k, (low, high) in intervals.items())


def _block(metrics) -> dict[str, str]:
    """format_results' table as {metric: value}, without the head line and the header rows."""
    return {cells[0]: cells[1] for line in format_results(metrics).splitlines()[3:]
            for cells in [re.split(r"\s{2,}", line.strip())]}


def test_an_env_block_all_of_whose_episodes_failed_for_the_infrastructure_reads_not_measured(infra):
    """sopgym eval's per-env table: the policy's scores read "not measured", never 0.000; the counts of
    how the episodes ended (turns, truncations, infrastructure failures) are printed as measured."""
    rows = _block(load_results(infra)["envs"][OF])
    scores = ["task success rate", "field accuracy (mean)", "execution completion rate", "tool-call accuracy",
              "invalid-action rate", "pass@1", "pass^1"]
    assert [rows[name] for name in scores] == ["not measured"] * len(scores)
    assert rows["infrastructure failure rate"] == "1.000" and rows["truncation rate"] == "1.000"
    assert rows["truncated: sandbox"] == "1.000"
    assert _block(load_results(infra)["envs"][WR])["task success rate"] == "1.000"
