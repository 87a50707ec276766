"""The `sopgym` command, end to end in subprocesses, and its extension hooks in process."""

import dataclasses
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from sopgym import cli
from sopgym.episodes.progress import ProgressBar
from sopgym.sop_tasks.registry import get_pack

REPO = Path(__file__).resolve().parents[1]
WR = "sopgym/WarehouseReceiving-v0"
RESULT_KEYS = {
    "episodes", "task_success_rate", "field_accuracy", "execution_completion_rate",
    "conditional_task_success_rate", "tool_call_accuracy", "invalid_action_rate", "mean_turns", "truncation_rate",
    "pass_at_k", "pass_hat_k",
}


def sopgym(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "sopgym", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env={**os.environ, "COLUMNS": "200"})


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("oracle")
    out = sopgym("eval", "--env", WR, "--policy", "oracle", "--episodes", "40", "--samples-per-task", "2", "--k", "2",
                 "--seed", "0", "--split", "test", "--out", str(folder / "results.json"),
                 "--trajectories", str(folder / "traj.jsonl"))
    assert out.returncode == 0, out.stderr
    return out, folder


def env_results(path, env_id=WR):
    return json.loads(Path(path).read_text())["envs"][env_id]


def test_eval_writes_results_with_the_required_keys(oracle_run):
    _, folder = oracle_run
    whole = json.loads((folder / "results.json").read_text())
    results = whole["envs"][WR]
    assert RESULT_KEYS <= set(results)
    assert (whole["config"]["identity"]["policy"], results["episodes"], results["num_tasks"]) == ("oracle", 80, 40)
    assert set(results["ci95"]) == {"task_success_rate", "field_accuracy", "execution_completion_rate", "pass_at_k",
                                    "pass_hat_k"}


def test_eval_oracle_succeeds_on_every_test_task(oracle_run):
    _, folder = oracle_run
    results = env_results(folder / "results.json")
    assert (results["task_success_rate"], results["pass_at_k"], results["pass_hat_k"]) == (1.0, 1.0, 1.0)
    assert results["truncation_rate"] == 0.0 and results["invalid_action_rate"] == 0.0


def test_eval_prints_a_results_table_and_a_progress_bar(oracle_run):
    out, _ = oracle_run
    assert "task success rate" in out.stdout and "pass@2" in out.stdout and "pass^2" in out.stdout
    assert "80/80 episodes" in out.stderr


def test_eval_majority_scores_the_share_of_test_tasks_with_the_most_common_train_answer(tmp_path):
    out = sopgym("eval", "--env", WR, "--policy", "majority", "--episodes", "200", "--quiet", "--n-bootstrap", "200",
                 "--out", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    results = env_results(tmp_path / "r.json")
    # Independent reference: the most common train answer, matched exactly against every test label.
    pack = get_pack("WarehouseReceiving")
    counts = Counter(json.dumps(pack.task("train", i).answer, sort_keys=True) for i in range(500))
    majority = json.loads(counts.most_common(1)[0][0])
    share = sum(pack.task("test", i).answer == majority for i in range(200)) / 200
    assert results["task_success_rate"] == pytest.approx(share)
    assert 0.0 < results["task_success_rate"] < 0.5  # a floor far below the oracle on a balanced split
    assert results["tool_call_accuracy"] is None and results["mean_turns"] == 1.0
    assert out.stderr == ""  # --quiet: no progress bar


def test_show_prints_an_episode_from_the_written_trajectories(oracle_run):
    _, folder = oracle_run
    out = sopgym("show", str(folder / "traj.jsonl"), "--episode", "3")
    assert out.returncode == 0, out.stderr
    assert "== episode 3 | WarehouseReceiving/test/1 ==" in out.stdout
    assert "call get_shipment(" in out.stdout and "submit_answer" in out.stdout
    assert "evaluator: success=True" in out.stdout


def test_show_defaults_to_the_first_episode_and_says_how_many_there_are(oracle_run):
    _, folder = oracle_run
    out = sopgym("show", str(folder / "traj.jsonl"))
    assert "== episode 0 |" in out.stdout and "80 episodes in this file" in out.stdout


def test_show_rejects_a_missing_episode_listing_the_range(oracle_run):
    _, folder = oracle_run
    out = sopgym("show", str(folder / "traj.jsonl"), "--episode", "999")
    assert out.returncode == 2
    assert "no episode 999" in out.stderr and "0..79" in out.stderr


def test_list_shows_each_env_with_task_counts():
    out = sopgym("list")
    assert out.returncode == 0, out.stderr
    pack = get_pack("WarehouseReceiving")
    line = next(x for x in out.stdout.splitlines() if x.startswith(WR))
    assert line.split()[1:5] == ["unlimited", "200", "200", str(len(pack.tools))]
    assert ", ".join(f.name for f in pack.output_fields) in line
    assert "Apache-2.0" in line and line.rstrip().endswith("yes")


def test_list_json_describes_each_env(capsys):
    assert cli.main(["list", "--json"]) == 0
    rows = {r["env_id"]: r for r in json.loads(capsys.readouterr().out)}
    wr = rows[WR]
    assert wr["tasks"] == {"train": None, "val": 200, "test": 200}
    pack = get_pack("WarehouseReceiving")
    assert (wr["num_tools"], wr["output_fields"], wr["training_allowed"]) == (len(pack.tools), pack.field_names, True)


def test_eval_refuses_k_above_samples_per_task(capsys):
    assert cli.main(["eval", "--env", WR, "--samples-per-task", "2", "--k", "3"]) == 2
    assert "--k (3) must be <= --samples-per-task (2)" in capsys.readouterr().err


def test_eval_names_the_registered_envs_for_an_unknown_id(capsys):
    assert cli.main(["eval", "--env", "sopgym/Nope-v0"]) == 2
    err = capsys.readouterr().err
    assert "unknown env id 'sopgym/Nope-v0'" in err and WR in err


def test_eval_accepts_module_prefixed_env_ids(tmp_path):
    out = tmp_path / "r.json"
    assert cli.main(["eval", "--env", f"sopgym:{WR}", "--episodes", "2", "--quiet", "--out", str(out)]) == 0
    assert env_results(out, f"sopgym:{WR}")["task_success_rate"] == 1.0


def test_eval_reports_too_many_episodes_for_the_split(capsys):
    assert cli.main(["eval", "--env", WR, "--episodes", "500", "--quiet"]) == 2
    assert "has 200 tasks; got episodes=500" in capsys.readouterr().err


def test_eval_passes_reward_and_sandbox_to_the_env(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert cli.main(["eval", "--env", WR, "--episodes", "3", "--reward", "binary", "--sandbox", "inprocess",
                     "--quiet", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["config"]["identity"]["env_kwargs"] == {"reward": "binary", "sandbox": "inprocess"}


def test_eval_env_args_reach_the_env_and_truncations_are_reported_by_cause(tmp_path):
    out = tmp_path / "r.json"
    assert cli.main(["eval", "--env", WR, "--episodes", "4", "--env-arg", "max_turns=1", "--quiet", "--out", str(out)]) == 0
    whole = json.loads(out.read_text())
    results = whole["envs"][WR]
    assert whole["config"]["identity"]["env_kwargs"] == {"max_turns": 1}
    assert results["truncation_rate_by_cause"] == {"max_turns": 1.0} and results["execution_completion_rate"] == 0.0


@pytest.mark.parametrize("item", ["max_turns", "=3", "not an id=3"])
def test_eval_rejects_malformed_env_args(capsys, item):
    assert cli.main(["eval", "--env", WR, "--env-arg", item, "--quiet"]) == 2
    assert "--env-arg expects KEY=VALUE" in capsys.readouterr().err


def test_eval_reports_an_env_kwarg_the_env_does_not_take(capsys):
    assert cli.main(["eval", "--env", WR, "--episodes", "1", "--env-arg", "colour=3", "--quiet"]) == 2
    assert "colour" in capsys.readouterr().err


def test_no_command_prints_help_and_fails(capsys):
    assert cli.main([]) == 2
    assert "COMMAND" in capsys.readouterr().err


@pytest.mark.parametrize("name,hint", [("train", "pip install 'sopgym[train]'"), ("sandbox", "pip install 'sopgym[docker]'")])
def test_lazy_command_with_a_missing_module_explains_what_to_install(monkeypatch, capsys, name, hint):
    def needs():
        import sopgym._no_such_module_for_tests  # noqa: F401

    monkeypatch.setitem(cli.COMMANDS, name, dataclasses.replace(cli.COMMANDS[name], needs=needs))
    assert cli.main([name, "--anything"]) == 1
    err = capsys.readouterr().err
    assert hint in err and "sopgym._no_such_module_for_tests" in err


def test_main_kind_lazy_command_receives_the_remaining_arguments(monkeypatch, tmp_path):
    (tmp_path / "fake_train_cli.py").write_text("seen = []\ndef main(argv):\n    seen.append(argv)\n    return 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import fake_train_cli

    monkeypatch.setitem(cli.COMMANDS, "train", dataclasses.replace(cli.COMMANDS["train"], main=fake_train_cli.main))
    assert cli.main(["train", "--config", "x.yaml", "--help"]) == 7
    assert sys.modules["fake_train_cli"].seen == [["--config", "x.yaml", "--help"]]


def test_parser_kind_lazy_command_registers_its_own_parser(monkeypatch, tmp_path):
    (tmp_path / "fake_sandbox_cli.py").write_text(
        "import argparse\n"
        "def main(argv):\n"
        "    p = argparse.ArgumentParser(prog='sopgym sandbox')\n"
        "    p.add_argument('--n', type=int)\n"
        "    return p.parse_args(argv).n\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import fake_sandbox_cli

    monkeypatch.setitem(cli.COMMANDS, "sandbox", dataclasses.replace(cli.COMMANDS["sandbox"], main=fake_sandbox_cli.main))
    assert cli.main(["sandbox", "--n", "5"]) == 5


@pytest.mark.parametrize("name", ["train", "sandbox", "sopbench"])
def test_lazy_commands_are_listed_in_help(capsys, name):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert name in capsys.readouterr().out


def test_sopbench_hook_hands_over_to_the_adapter_parser(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["sopbench", "--help"])
    assert exit_info.value.code == 0
    assert "register" in capsys.readouterr().out


def test_lazy_modules_are_not_imported_for_other_commands():
    code = ("import sys; from sopgym.cli import main; main(['list']); "
            "print([m for m in ('sopgym.sandboxes.docker', 'sopgym.trainers.config', 'sopgym.sopbench', 'sopgym.evaluation.report', "
            "'sopgym.authoring.quality', 'sopgym.integrations.openenv_server') "
            "if m in sys.modules])")
    # Without SOPBENCH_DIR (CI sets it): a registered SOP-Bench checkout loads the adapter at import by request.
    env = {k: v for k, v in os.environ.items() if k != "SOPBENCH_DIR"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "[]"


def test_progress_bar_writes_one_final_line_when_not_a_terminal():
    import io

    stream = io.StringIO()
    bar = ProgressBar(4, stream=stream)
    for _ in range(4):
        bar.update()
    bar.close()
    assert stream.getvalue().count("\n") == 1 and "4/4 episodes" in stream.getvalue()


# -- Bad input never costs a user their work (issue 12) -----------------------------------------------
@pytest.fixture
def no_episodes(monkeypatch):
    """Fails the test if `sopgym eval` gets as far as running episodes."""
    import sopgym.bench.suite

    def refuse(*args, **kwargs):
        raise AssertionError("episodes ran before the arguments were checked")

    monkeypatch.setattr(sopgym.bench.suite, "run_suite", refuse)


def _traj_line():
    return json.dumps({"type": "reset", "episode_index": 0, "task_id": "t", "seed": 0, "options": None, "observation": "x"}) + "\n"


@pytest.mark.parametrize("case", ["missing folder", "out is a folder", "trajectories under a file", "same path twice",
                                  "same file by another name", "out is a trajectory file"])
def test_eval_refuses_bad_output_paths_before_running_any_episode(capsys, tmp_path, no_episodes, case):
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "old.jsonl").write_text(_traj_line())
    args = {
        "missing folder": ["--out", str(tmp_path / "nonexistent" / "x.json")],
        "out is a folder": ["--out", str(tmp_path)],
        "trajectories under a file": ["--trajectories", str(tmp_path / "a_file" / "t.jsonl")],
        "same path twice": ["--out", str(tmp_path / "t.jsonl"), "--trajectories", str(tmp_path / "t.jsonl")],
        "same file by another name": ["--out", str(tmp_path / "." / "t.jsonl"), "--trajectories", str(tmp_path / "t.jsonl")],
        "out is a trajectory file": ["--out", str(tmp_path / "old.jsonl")],
    }[case]
    assert cli.main(["eval", "--env", WR, "--episodes", "200", "--quiet", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sopgym eval: ") and len(err.strip().splitlines()) == 1, err
    assert (tmp_path / "old.jsonl").read_text() == _traj_line() and not (tmp_path / "t.jsonl").exists()


@pytest.mark.parametrize("argv,words", [
    (["--n-bootstrap", "-1"], ["--n-bootstrap", "expected an integer >= 0"]),
    (["--seed", "-5"], ["--seed", "expected an integer >= 0"]),
    (["--episodes", "0"], ["--episodes", "expected an integer >= 1"]),
    (["--episodes", "many"], ["--episodes", "expected an integer >= 1"]),
])
def test_eval_refuses_bad_counts_before_running_any_episode(capsys, no_episodes, argv, words):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["eval", "--env", WR, "--quiet", *argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and all(w in err for w in words), err


@pytest.mark.parametrize("item,words", [
    ("max_turns=1.5", ["max_turns", "integer >= 1", "1.5"]),
    ("max_turns=true", ["max_turns", "integer >= 1", "bool"]),
    ("turn_cost=NaN", ["turn_cost", "finite number >= 0", "nan"]),
    ("max_context=-1", ["max_context", "integer >= 1"]),
])
def test_eval_refuses_invalid_env_kwargs_before_running_any_episode(capsys, tmp_path, item, words):
    traj = tmp_path / "t.jsonl"
    assert cli.main(["eval", "--env", WR, "--episodes", "3", "--quiet", "--env-arg", item, "--trajectories", str(traj)]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert not traj.exists() or traj.read_text() == ""


def test_eval_results_and_trajectories_are_both_kept(tmp_path):
    out, traj = tmp_path / "r.json", tmp_path / "deep" / "t.jsonl"
    assert cli.main(["eval", "--env", WR, "--episodes", "2", "--quiet", "--out", str(out), "--trajectories", str(traj)]) == 0
    assert env_results(out)["episodes"] == 2 and len(traj.read_text().splitlines()) > 2


# `sopgym show` on odd files: one line naming the file and line, exit code 2.
ODD_LINES = {
    "invalid JSON": "{not json",
    "not an object": "[1, 2]",
    "episode_index a string": json.dumps({"type": "reset", "episode_index": "0", "observation": "x"}),
    "episode_index a list": json.dumps({"type": "reset", "episode_index": [0], "observation": "x"}),
    "episode_index negative": json.dumps({"type": "reset", "episode_index": -1, "observation": "x"}),
    "type a number": json.dumps({"type": 3, "episode_index": 0}),
    "observation a number": json.dumps({"type": "reset", "episode_index": 0, "observation": 5}),
    "calls not a list": json.dumps({"type": "step", "episode_index": 0, "calls": 5}),
    "a call not an object": json.dumps({"type": "step", "episode_index": 0, "calls": ["get_shipment"]}),
    "tool content a number": json.dumps({"type": "step", "episode_index": 0, "tool_results": [{"content": 3}]}),
    "reward a string": json.dumps({"type": "step", "episode_index": 0, "reward": "1.0"}),
    "truncated a string": json.dumps({"type": "episode", "episode_index": 0, "truncated": "no"}),
    "nested 100,000 deep": '{"type": "step", "episode_index": 0, "action": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "integer of 5,000 digits": '{"type": "step", "episode_index": 0, "reward": ' + "7" * 5_000 + "}",
}


@pytest.mark.parametrize("label", sorted(ODD_LINES))
def test_show_on_an_odd_line_is_one_line_naming_it(capsys, tmp_path, label):
    path = tmp_path / "odd.jsonl"
    path.write_text(_traj_line() + "\n" + ODD_LINES[label] + "\n")
    assert cli.main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{path}:3:" in err, err


def test_show_prints_records_it_cannot_score_and_values_it_cannot_print(capsys, tmp_path):
    path = tmp_path / "odd.jsonl"
    lines = [
        {"type": "reset", "episode_index": 0, "task_id": ["not", "a", "string"], "observation": "inputs"},
        {"type": "step", "episode_index": 0, "turn": 10**4000, "action": {"deep": [[[[["x"]]]]]}, "reward": 1e400,
         "calls": [{"name": 5, "arguments": {"n": 10**300}, "status": None}], "tool_results": [{"name": None, "content": None}]},
        {"type": "episode", "episode_index": 0, "task_id": "t/test/0", "answer": {"x": 10**400, "y": "A"}, "expected": {"x": 1, "y": "A"},
         "fields": [{"name": "x", "type": "integer", "enum": [1, 2]}, {"name": "y", "type": "string", "enum": [{"a": 1}, "A"]}],
         "turns": 1, "truncated": False, "terminated": True, "statuses": ["SUBMITTED"]},
        {"type": "episode", "episode_index": 1, "truncated": True},  # a record missing most keys
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert cli.main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "== episode 0 |" in out and "fields: x WRONG  y right" in out
    assert cli.main(["show", str(path), "--episode", "1"]) == 0
    assert "evaluator: cannot score this record" in capsys.readouterr().out


def test_show_refuses_a_negative_max_chars(capsys, oracle_run):
    _, folder = oracle_run
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["show", str(folder / "traj.jsonl"), "--max-chars", "-5"])
    assert exit_info.value.code == 2 and "expected an integer >= 0" in capsys.readouterr().err


def test_show_prints_an_episode_of_hostile_actions(capsys, tmp_path):
    import gymnasium as gym

    from sopgym.envs.wrappers import RecordTrajectory

    deep = []
    for _ in range(5000):
        deep = [deep]
    path = tmp_path / "t.jsonl"
    env = RecordTrajectory(gym.make(WR, max_turns=3), path)
    env.reset(seed=0)
    for action in ({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"n": 10**5000}}}]},
                   {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": deep}}]},
                   "<tool_call>" * 10_000):
        env.step(action)
    env.close()
    assert cli.main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "<integer of about 5001 digits>" in out and "truncated (max_turns)" in out
