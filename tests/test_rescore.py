"""`sopgym rescore TRAJECTORIES`: a run's recorded episodes scored again by the evaluator, written as the
results `sopgym eval` writes (a model run's usage and cached turns: tests/agents/test_response_cache.py)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import gymnasium
import pytest

from sopgym import cli
from sopgym.bench.suite import registered_env_ids
from sopgym.envs.registration import registered_env_ids as pack_env_ids

WR = "sopgym/WarehouseReceiving-v0"
TRUSTED = ["--env-arg", "code_runner=inprocess"]  # scripted policies' code only
pytestmark = pytest.mark.filterwarnings("ignore::sopgym.envs.env_kwargs.InProcessCodeRunnerWarning")


def _oracle_can_answer(env_id: str) -> bool:
    """False for an env whose tool calls nothing here can answer: a SOP-Bench folder without tools.py and
    without a recording (the real checkout is data only), where every call is an infrastructure failure
    and the oracle scores 0 by design (the pre-flight's warning-only need, tests/test_eval_preflight.py)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gymnasium.make(env_id, code_runner="inprocess")
    try:
        return not any(need.warning_only for need in env.unwrapped.backend_needs())
    finally:
        env.close()


# Fixed at collection: tests elsewhere register SOP-Bench fixture domains and probe packs during the session.
ENV_IDS = registered_env_ids()
AUTHORED_ENV_IDS = pack_env_ids("sopgym")
ORACLE_ENV_IDS = [env_id for env_id in ENV_IDS if _oracle_can_answer(env_id)]


def _eval(tmp_path: Path, name: str, *args: str) -> tuple[dict, Path]:
    out = tmp_path / f"{name}.json"
    assert cli.main(["eval", *args, *TRUSTED, "--quiet", "--out", str(out)]) == 0
    return json.loads(out.read_text()), tmp_path / f"{name}.trajectories.jsonl"


def _rescore(trajectories: Path, *args: str) -> int:
    return cli.main(["rescore", str(trajectories), "--quiet", *args])


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path: Path, lines: list[dict]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.fixture(scope="module")
def random_run(tmp_path_factory):
    """A random-policy run over every registered env, 3 tasks x 2 samples, k=2 (every metric moves)."""
    folder = tmp_path_factory.mktemp("random")
    return _eval(folder, "r", "--env", *ENV_IDS, "--policy", "random", "--episodes", "3",
                 "--samples-per-task", "2", "--k", "2", "--seed", "5")


def test_a_runs_trajectories_rescored_give_the_runs_metrics(random_run, tmp_path):
    results, trajectories = random_run
    out = tmp_path / "again.json"
    assert _rescore(trajectories, "--k", "2", "--out", str(out)) == 0
    again = json.loads(out.read_text())
    assert set(again["envs"]) == set(ENV_IDS)
    assert again["envs"] == results["envs"] and again["suite"] == results["suite"]
    assert again["format"] == results["format"] and again["run"] == results["run"]
    assert again["config"]["identity"] == results["config"]["identity"]


def test_the_default_out_is_beside_the_trajectories_and_report_reads_it(random_run, tmp_path):
    results, trajectories = random_run
    copy = tmp_path / "r.trajectories.jsonl"
    copy.write_bytes(trajectories.read_bytes())
    assert _rescore(copy, "--k", "2") == 0
    assert (tmp_path / "r.rescored.json").exists()
    assert cli.main(["report", str(tmp_path / "r.rescored.json"), "--out", str(tmp_path / "report"), "--no-plots"]) == 0
    assert "random" in (tmp_path / "report" / "leaderboard.md").read_text()


def test_every_authored_env_is_one_whose_oracle_can_answer():
    assert AUTHORED_ENV_IDS and set(AUTHORED_ENV_IDS) <= set(ORACLE_ENV_IDS)


@pytest.mark.parametrize("env_id", ORACLE_ENV_IDS)
def test_a_changed_recorded_answer_gives_the_changed_score(env_id, tmp_path):
    results, trajectories = _eval(tmp_path, "o", "--env", env_id, "--policy", "oracle", "--episodes", "2",
                                  "--n-bootstrap", "0")
    assert results["envs"][env_id]["task_success_rate"] == 1.0
    lines = _lines(trajectories)
    episode = next(line for line in lines if line["type"] == "episode" and line["episode_index"] == 1)
    episode["answer"] = {**episode["answer"], "not_a_field": 1}  # no longer well formed; the recorded reward says 1.0
    _write(trajectories, lines)
    out = tmp_path / "changed.json"
    assert _rescore(trajectories, "--n-bootstrap", "0", "--out", str(out)) == 0
    metrics = json.loads(out.read_text())["envs"][env_id]
    assert metrics["task_success_rate"] == 0.5 and metrics["execution_completion_rate"] == 0.5


def test_a_wrong_recorded_answer_made_right_scores_as_right(tmp_path):
    results, trajectories = _eval(tmp_path, "m", "--env", WR, "--policy", "majority", "--episodes", "6",
                                  "--n-bootstrap", "0")
    lines = _lines(trajectories)
    wrong = [line for line in lines if line["type"] == "episode" and line["answer"] != line["expected"]]
    assert wrong
    for line in wrong:
        line["answer"] = dict(line["expected"])
    _write(trajectories, lines)
    out = tmp_path / "fixed.json"
    assert _rescore(trajectories, "--n-bootstrap", "0", "--out", str(out)) == 0
    assert results["envs"][WR]["task_success_rate"] < 1.0 == json.loads(out.read_text())["envs"][WR]["task_success_rate"]


@pytest.fixture
def oracle_run(tmp_path) -> Path:
    return _eval(tmp_path, "o", "--env", WR, "--policy", "oracle", "--episodes", "3", "--n-bootstrap", "0")[1]


def _episode_line(lines: list[dict], index: int = 1) -> int:
    return next(n for n, line in enumerate(lines) if line["type"] == "episode" and line["episode_index"] == index)


def _set(key, value):
    def damage(lines):
        number = _episode_line(lines)
        lines[number][key] = value
        return number + 1
    return damage


def _drop(key):
    def damage(lines):
        number = _episode_line(lines)
        del lines[number][key]
        return number + 1
    return damage


def _plan(value):
    def damage(lines):
        lines[0]["identity"]["plan"] = value
        return 1
    return damage


def _seed(lines):
    number = next(n for n, line in enumerate(lines) if line["type"] == "reset" and line["episode_index"] == 1)
    lines[number]["seed"] = 12345
    return _episode_line(lines) + 1


DAMAGES = {
    "record-missing-expected": _drop("expected"),
    "fields-not-a-list": _set("fields", "disposition"),
    "extra-not-an-object": _set("extra", [1]),
    "env-not-the-plans": _set("env_id", "sopgym/PatientIntake-v0"),
    "episode-index-outside-the-plan": _set("episode_index", 99),
    "seed-not-the-plans": _seed,
    "plan-not-an-object": _plan([1, 2]),
    "plan-without-env-ids": _plan({"split": "test"}),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_trajectory_is_one_line_naming_the_file_and_the_line(oracle_run, damage, capsys):
    lines = _lines(oracle_run)
    number = DAMAGES[damage](lines)
    _write(oracle_run, lines)
    assert _rescore(oracle_run) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err[:2000]
    assert f"{oracle_run}:{number}:" in err


@pytest.mark.parametrize("text, number", [("{not json", 3), ("[1, 2]", 2), ('{"type": "run", "format": 1}', 4)])
def test_an_unreadable_line_is_one_line_naming_the_file_and_the_line(oracle_run, capsys, text, number):
    lines = oracle_run.read_text().splitlines(keepends=True)
    lines[number - 1] = text + "\n"
    oracle_run.write_text("".join(lines))
    assert _rescore(oracle_run) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{oracle_run}:{number}:" in err, err[:2000]


def test_a_file_without_a_run_line_or_episodes_is_refused(tmp_path, capsys):
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps({"type": "reset", "episode_index": 0}) + "\n")
    assert _rescore(bare) == 2
    assert f"{bare}:1: expected a 'run' line" in capsys.readouterr().err
    missing = tmp_path / "missing.jsonl"
    assert _rescore(missing) == 2
    assert f"cannot read {missing}" in capsys.readouterr().err


def test_rescore_never_writes_over_the_trajectory_file(oracle_run, capsys):
    before = oracle_run.read_bytes()
    assert _rescore(oracle_run, "--out", str(oracle_run)) == 2
    assert "trajectory file" in capsys.readouterr().err and oracle_run.read_bytes() == before


def test_a_run_that_did_not_finish_is_rescored_and_labelled(oracle_run, tmp_path):
    lines = _lines(oracle_run)
    cut = _episode_line(lines, 1) + 1
    _write(oracle_run, lines[:cut] + lines[cut:cut + 2])  # episodes 0 and 1, and the start of episode 2
    out = tmp_path / "part.json"
    assert _rescore(oracle_run, "--out", str(out)) == 0
    results = json.loads(out.read_text())
    assert results["run"] == {"status": "incomplete", "episodes_finished": 2, "episodes_planned": 3,
                              "trajectories": str(oracle_run)}
    assert results["envs"][WR]["episodes"] == 2 and results["config"]["rescored"]["unfinished_tail_bytes"] > 0
