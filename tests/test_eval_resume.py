"""What a `sopgym eval` run leaves behind as it goes, and `--resume` on files that are damaged: each
damage is one line on stderr naming the file and the line, never a traceback (model runs stopped or
killed mid-way: tests/agents/test_openai_misbehaving.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sopgym import cli

WR = "sopgym/WarehouseReceiving-v0"
PLAN = ["--env", WR, "--policy", "oracle", "--episodes", "3", "--n-bootstrap", "0"]


def run(*args) -> int:
    return cli.main(["eval", *args, "--quiet"])


@pytest.fixture
def finished(tmp_path) -> Path:
    """A finished run's trajectory file."""
    assert run(*PLAN, "--trajectories", str(tmp_path / "t.jsonl")) == 0
    return tmp_path / "t.jsonl"


def _damage(path: Path, line_number: int, text: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[line_number - 1] = text + "\n"
    path.write_text("".join(lines))


def _first_step_line(path: Path) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), start=1) if '"type": "step"' in line)


DAMAGE = {
    "nested-200000-deep": lambda path, n: "[" * 200_000 + "]" * 200_000,
    "5000-digit-integer": lambda path, n: json.dumps({"type": "step", "episode_index": 0, "turn": 1}).replace(
        '"turn": 1', '"turn": ' + "7" * 5000),
    "5000-digit-episode-index": lambda path, n: json.dumps({"type": "step", "episode_index": 0}).replace(
        '"episode_index": 0', '"episode_index": ' + "7" * 5000),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_resume_on_a_damaged_line_is_one_error_line_naming_the_file_and_the_line(finished, damage, capsys):
    number = _first_step_line(finished)
    _damage(finished, number, DAMAGE[damage](finished, number))
    assert run(*PLAN, "--trajectories", str(finished), "--resume") == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err[:2000]
    assert f"{finished}:{number}:" in err


@pytest.mark.parametrize("identity", [[1, 2], "a text", 5, None])
def test_resume_on_a_run_line_whose_identity_is_not_an_object_names_the_file_and_line_1(finished, identity, capsys):
    lines = finished.read_text().splitlines(keepends=True)
    run_line = json.loads(lines[0])
    run_line["identity"] = identity
    lines[0] = json.dumps(run_line) + "\n"
    finished.write_text("".join(lines))
    assert run(*PLAN, "--trajectories", str(finished), "--resume") == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"{finished}:1:" in err and "identity" in err and "expected an object" in err


@pytest.mark.parametrize("field, value", [("extra", [1, 2]), ("env_id", ["a"]), ("episode_index", -3),
                                          ("episode_index", 10**6)])
def test_resume_on_an_episode_line_with_a_field_of_the_wrong_kind_names_the_file_and_line(finished, field, value, capsys):
    lines = finished.read_text().splitlines(keepends=True)
    number = next(n for n, line in enumerate(lines, start=1) if '"type": "episode"' in line)
    episode = json.loads(lines[number - 1])
    episode[field] = value
    lines[number - 1] = json.dumps(episode) + "\n"
    finished.write_text("".join(lines))
    assert run(*PLAN, "--trajectories", str(finished), "--resume") == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err[:2000]
    assert f"{finished}:{number}:" in err and field in err


def test_a_run_with_out_writes_its_trajectory_beside_the_results_and_resumes_from_them(tmp_path):
    out = tmp_path / "r.json"
    assert run(*PLAN, "--out", str(out)) == 0
    beside = tmp_path / "r.trajectories.jsonl"
    assert sum('"type": "episode"' in line for line in beside.read_text().splitlines()) == 3
    results = json.loads(out.read_text())
    assert results["run"]["status"] == "finished" and results["run"]["trajectories"] == str(beside)
    assert run(*PLAN, "--out", str(out), "--resume") == 0  # nothing left to run; the results are rewritten
    assert json.loads(out.read_text())["config"]["resumed_episodes"] == 3


def test_the_results_file_is_written_as_episodes_finish(tmp_path, monkeypatch):
    """Each write of the results file is a whole, valid JSON document (written to a temporary file
    and renamed), holding the episodes finished so far."""
    from sopgym.bench import suite
    from sopgym.cli import evaluate

    seen = []
    write = suite.write_results

    def spy(path, results):
        write(path, results)
        seen.append(json.loads(Path(path).read_text()))

    monkeypatch.setattr(suite, "write_results", spy)
    monkeypatch.setattr(evaluate, "RESULTS_EVERY_S", 0.0)
    assert run(*PLAN, "--out", str(tmp_path / "r.json")) == 0
    finished = [s["run"]["episodes_finished"] for s in seen]
    assert finished == sorted(finished) and finished[0] < 3 and finished[-1] == 3
    assert [s["run"]["status"] for s in seen][-1] == "finished"
    assert all(s["run"]["status"] == "running" for s in seen[:-1])
    assert not list(tmp_path.glob("*.tmp*"))  # no temporary file left behind


def test_a_report_labels_the_results_of_a_run_that_did_not_finish(tmp_path):
    import csv

    out = tmp_path / "r.json"
    assert run(*PLAN, "--out", str(out)) == 0
    results = json.loads(out.read_text())
    results["run"].update(status="stopped", episodes_finished=2)
    out.write_text(json.dumps(results))
    assert cli.main(["report", str(out), "--out", str(tmp_path / "report"), "--no-plots"]) == 0
    models = {row["model"] for row in csv.DictReader((tmp_path / "report" / "leaderboard.csv").open())}
    assert models == {"oracle (stopped: 2/3 episodes)"}
    assert "oracle (stopped: 2/3 episodes)" in (tmp_path / "report" / "leaderboard.md").read_text()
