"""Suite runs of `sopgym eval` (several envs, globs, one results file, resume), `sopgym report` and
`sopgym show --html`, with scripted policies (model runs: tests/agents)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sopgym import cli
from sopgym.bench.suite import expand_env_patterns, registered_env_ids, software_info
from sopgym.episodes.progress import ProgressBar
from sopgym.evaluation import evaluate_records, load_records

WR, OF = "sopgym/WarehouseReceiving-v0", "sopgym/OrderFulfilment-v0"
REPO = Path(__file__).resolve().parents[1]


def run(*args) -> int:
    return cli.main(["eval", *args, "--quiet"])


@pytest.fixture(scope="module")
def random_suite(tmp_path_factory):
    folder = tmp_path_factory.mktemp("suite")
    code = run("--env", WR, "sopgym/Order*", "--policy", "random", "--episodes", "4", "--samples-per-task", "3",
               "--k", "2", "--n-bootstrap", "300", "--out", str(folder / "r.json"), "--trajectories", str(folder / "t.jsonl"))
    assert code == 0
    return folder


def test_globs_expand_to_the_registered_task_envs_in_order_each_once():
    from sopgym.sop_tasks.registry import all_packs

    authored = sorted(p.env_id for p in all_packs() if p.env_id.startswith("sopgym/"))
    assert expand_env_patterns(["sopgym/*"]) == authored  # not ids of other kinds (sopgym/Remote-v0)
    assert set(authored) <= set(registered_env_ids())
    assert expand_env_patterns([OF, "sopgym/*"])[0] == OF and len(expand_env_patterns([OF, "sopgym/*"])) == len(authored)


@pytest.mark.parametrize("pattern,message", [("sopgym/Nope*", "matches no registered env"),
                                             ("sopgym/Nope-v0", "unknown env id")])
def test_unknown_envs_and_empty_globs_are_refused_naming_the_registered(pattern, message, capsys):
    assert run("--env", pattern) == 2
    err = capsys.readouterr().err
    assert message in err and WR in err


def test_each_env_gets_the_evaluator_s_metrics_of_its_own_episodes(random_suite):
    results = json.loads((random_suite / "r.json").read_text())
    assert list(results["envs"]) == [WR, OF]
    records = load_records(random_suite / "t.jsonl")
    for env_id, metrics in results["envs"].items():
        alone = evaluate_records([r for r in records if r["env_id"] == env_id], k=2, n_bootstrap=300, seed=0)
        assert {k: metrics[k] for k in alone} == alone


def test_the_suite_is_the_mean_over_envs_with_an_interval_around_it(random_suite):
    results = json.loads((random_suite / "r.json").read_text())
    suite, envs = results["suite"], results["envs"].values()
    for name in ("task_success_rate", "field_accuracy", "invalid_action_rate", "mean_turns"):
        assert suite[name] == pytest.approx(np.mean([m[name] for m in envs]))
    low, high = suite["ci95"]["field_accuracy"]
    assert low <= suite["field_accuracy"] <= high and low < high


def test_pass_at_k_curve_covers_every_k_the_samples_allow(random_suite):
    metrics = json.loads((random_suite / "r.json").read_text())["envs"][WR]
    assert list(metrics["pass_at_k_curve"]) == ["1", "2", "3"]
    assert metrics["pass_at_k_curve"]["2"] == pytest.approx(metrics["pass_at_k"])
    assert metrics["pass_at_k_curve"]["1"] == pytest.approx(metrics["task_success_rate"])


def test_results_store_the_configuration_and_software(random_suite):
    config = json.loads((random_suite / "r.json").read_text())["config"]
    assert config["identity"]["plan"] == {"env_ids": [WR, OF], "split": "test", "num_tasks": {WR: 4, OF: 4},
                                          "samples_per_task": 3, "seed": 0}
    assert config["software"]["sopgym"] and config["software"]["packages"]["numpy"] == np.__version__
    assert config["arguments"]["policy"] == "random"


def test_software_info_names_the_checkout_s_commit():
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    assert software_info()["git_commit"] == head.stdout.strip()


def _episode_lines(path: Path) -> list[dict]:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return [x for x in lines if x["type"] != "run"]


@pytest.mark.parametrize("cut", ["mid_line", "mid_episode", "between_episodes"])
def test_a_resumed_run_equals_the_uninterrupted_one(random_suite, tmp_path, cut):
    full = (random_suite / "t.jsonl").read_text()
    lines = full.splitlines(keepends=True)
    episode_ends = [i for i, x in enumerate(lines) if '"type": "episode"' in x]
    keep = episode_ends[7] + 1  # 8 finished episodes
    partial = "".join(lines[:keep])
    if cut == "mid_line":
        partial += lines[keep][:40]
    elif cut == "mid_episode":
        partial += "".join(lines[keep:keep + 2])
    (tmp_path / "t.jsonl").write_text(partial)
    code = run("--env", WR, "sopgym/Order*", "--policy", "random", "--episodes", "4", "--samples-per-task", "3",
               "--k", "2", "--n-bootstrap", "300", "--out", str(tmp_path / "r.json"), "--trajectories",
               str(tmp_path / "t.jsonl"), "--resume")
    assert code == 0
    assert _episode_lines(tmp_path / "t.jsonl") == _episode_lines(random_suite / "t.jsonl")
    resumed, whole = (json.loads((p / "r.json").read_text()) for p in (tmp_path, random_suite))
    assert resumed["envs"] == whole["envs"] and resumed["suite"] == whole["suite"]
    assert resumed["config"]["resumed_episodes"] == 8


def test_resume_refuses_a_file_of_another_run_naming_the_difference(random_suite, tmp_path, capsys):
    (tmp_path / "t.jsonl").write_text((random_suite / "t.jsonl").read_text())
    code = run("--env", WR, "sopgym/Order*", "--policy", "random", "--episodes", "4", "--samples-per-task", "3",
               "--k", "2", "--seed", "5", "--trajectories", str(tmp_path / "t.jsonl"), "--resume")
    assert code == 2
    assert "plan.seed: file 0, now 5" in capsys.readouterr().err


def test_resume_refuses_a_file_without_a_run_line(tmp_path, capsys):
    import gymnasium as gym

    from sopgym.envs import RecordTrajectory
    from sopgym.envs.policies import make_policy

    env = RecordTrajectory(gym.make(WR, split="test"), tmp_path / "t.jsonl")
    policy = make_policy("oracle")
    obs, info = env.reset(seed=0)
    policy.reset(info)
    done = False
    while not done:
        obs, _, terminated, truncated, info = env.step(policy.act(obs, info))
        done = terminated or truncated
    env.close()
    assert run("--env", WR, "--episodes", "2", "--trajectories", str(tmp_path / "t.jsonl"), "--resume") == 2
    assert "no 'run' line" in capsys.readouterr().err


@pytest.mark.parametrize("args,message", [
    (["--policy", "openai", "--base-url", "http://x/v1", "--model", "m", "--device", "cpu"],
     "--device is an option of --policy hf, not of 'openai'"),  # a built-in policy ignores them: test_eval_preflight.py
    (["--policy", "openai", "--model", "m"], "--policy openai needs --base-url"),
    (["--policy", "hf"], "--policy hf needs --model"),
    (["--policy", "hf", "--model", "m", "--base-url", "http://127.0.0.1:1/v1"], "--base-url is an option of --policy openai"),
    (["--policy", "openai", "--base-url", "http://x/v1", "--model", "m", "--price-prompt", "1"], "give both --price-prompt"),
    (["--prompt-style", "upstream"], "--prompt-style applies to SOP-Bench envs"),
    (["--resume"], "--resume continues the run in --trajectories"),
])
def test_eval_refuses_options_that_do_not_fit(args, message, capsys):
    assert run("--env", WR, "--episodes", "1", *args) == 2
    assert message in capsys.readouterr().err


def test_progress_bar_of_a_resumed_run_counts_only_new_work_in_its_rate():
    import io

    bar = ProgressBar(10, stream=io.StringIO(), initial=6)
    bar._start -= 10.0  # 10 s ago
    bar.update(2)
    assert "8/10 episodes" in bar.line() and "12.0/min" in bar.line()


# --------------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def report(random_suite, tmp_path_factory):
    folder = tmp_path_factory.mktemp("report")
    assert run("--env", WR, "--policy", "oracle", "--episodes", "4", "--samples-per-task", "3", "--n-bootstrap", "300",
               "--out", str(folder / "oracle.json")) == 0
    code = cli.main(["report", str(random_suite / "r.json"), str(folder / "oracle.json"), "--out", str(folder / "out")])
    assert code == 0
    return folder / "out"


def test_report_leaderboard_has_a_row_per_model_and_env_and_the_suite(report):
    rows = list(csv.DictReader((report / "leaderboard.csv").open()))
    assert [(r["model"], r["env"]) for r in rows] == [("random", WR), ("random", OF), ("random", "suite"),
                                                      ("oracle", WR), ("oracle", "suite")]
    oracle = next(r for r in rows if r["model"] == "oracle" and r["env"] == WR)
    assert float(oracle["task_success_rate"]) == 1.0 and float(oracle["ci95_low"]) == 1.0


def test_report_markdown_shows_success_with_intervals_models_by_envs(report):
    text = (report / "leaderboard.md").read_text()
    header = next(line for line in text.splitlines() if line.startswith("| rank | model |"))
    assert header == f"| rank | model | {WR} | {OF} | suite | infra. failures | ranked mean (1 env) |"
    assert "| 1 | oracle | 1.000 [1.000, 1.000] |  | 1.000 [1.000, 1.000] | 0.000 | 1.000 |" in text


def test_report_plots_are_png_images(report):
    for name in ("task_success.png", "pass_at_k.png"):
        data = (report / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000


def test_report_refuses_a_file_that_is_not_results(tmp_path, capsys):
    (tmp_path / "x.json").write_text('{"task_success_rate": 1}')
    assert cli.main(["report", str(tmp_path / "x.json"), "--out", str(tmp_path / "o")]) == 2
    assert "expected a results file of `sopgym eval --out`" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# show --html
# --------------------------------------------------------------------------------------------------
def _viewer_data(page: Path) -> dict:
    text = page.read_text()
    start = text.index('<script type="application/json" id="sopgym-data">') + len('<script type="application/json" id="sopgym-data">')
    return json.loads(text[start:text.index("</script>", start)])


def test_show_html_is_one_self_contained_viewer_of_every_episode(random_suite, tmp_path):
    page = tmp_path / "p.html"
    assert cli.main(["show", str(random_suite / "t.jsonl"), "--html", str(page)]) == 0
    text = page.read_text()
    assert len(_viewer_data(page)["episodes"]) == 24
    assert "default-src 'none'" in text and "src=" not in text and "<link" not in text


def test_show_html_keeps_what_the_model_wrote_as_data(tmp_path):
    line = {"type": "step", "episode_index": 0, "turn": 1, "observation": "", "action": "<script>alert(1)</script>",
            "calls": [], "tool_results": [], "reward": 0.0, "status": "NO_TOOL_CALL", "terminated": False, "truncated": False}
    (tmp_path / "t.jsonl").write_text(json.dumps(line) + "\n")
    assert cli.main(["show", str(tmp_path / "t.jsonl"), "--html", str(tmp_path / "p.html")]) == 0
    assert "<script>alert" not in (tmp_path / "p.html").read_text()
    assert _viewer_data(tmp_path / "p.html")["episodes"][0]["steps"][0]["reply"] == "<script>alert(1)</script>"


def test_show_text_gives_the_verdict_per_field_and_the_reward_components(random_suite, capsys):
    assert cli.main(["show", str(random_suite / "t.jsonl"), "--episode", "0"]) == 0
    out = capsys.readouterr().out
    assert "fields: disposition" in out and "reward components: field/disposition" in out and f"env: {WR}" in out
    assert "system:\n    You are an operations agent" in out  # the SOP the agent was given


def test_lazy_report_command_is_listed_in_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "report" in capsys.readouterr().out


def test_report_runs_as_a_command():
    out = subprocess.run([sys.executable, "-m", "sopgym", "report", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--no-plots" in out.stdout


def test_eval_refuses_to_write_results_over_a_suite_trajectory_file(random_suite, tmp_path, capsys):
    (tmp_path / "t.jsonl").write_text((random_suite / "t.jsonl").read_text())
    assert run("--env", WR, "--episodes", "1", "--out", str(tmp_path / "t.jsonl")) == 2
    assert "is a trajectory file" in capsys.readouterr().err


def test_progress_bar_writes_a_line_a_minute_to_a_log():
    import io

    stream = io.StringIO()
    bar = ProgressBar(10, stream=stream, log_interval=60.0)
    bar.update()
    assert stream.getvalue() == ""
    bar._start -= 61.0
    bar.update()
    assert stream.getvalue().count("\n") == 1 and "2/10 episodes" in stream.getvalue()
    bar.update()
    assert stream.getvalue().count("\n") == 1  # not again within the minute
