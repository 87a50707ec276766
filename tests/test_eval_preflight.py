"""`sopgym eval`'s pre-flight (sopgym/bench/preflight.py): a run whose backends cannot run is
refused before its first episode, naming the fix that really avoids the backend; a turn limit the
oracle cannot meet is a warning with the oracle's measured needs; a built-in policy takes a model run's
command line (model options ignored, with a note). The model server's pre-flight: tests/agents/."""

from __future__ import annotations

import json

import pytest

from sopgym import cli
from sopgym.sop_tasks.registry import all_packs

AUTHORED = [p for p in all_packs() if p.env_id.startswith("sopgym/")]
CODE_RUNNER_ENVS = [p.env_id for p in AUTHORED if p.verifiable is not None]
STATEFUL_ENVS = [p.env_id for p in AUTHORED if p.program is not None]
WR = "sopgym/WarehouseReceiving-v0"


@pytest.fixture
def no_episodes(monkeypatch):
    """Fails the test if `sopgym eval` gets as far as running episodes."""
    import sopgym.bench.suite

    def refuse(*args, **kwargs):
        raise AssertionError("episodes ran although the pre-flight should have refused the run")

    monkeypatch.setattr(sopgym.bench.suite, "run_suite", refuse)


@pytest.fixture
def no_docker(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")


def test_the_code_runner_envs_are_the_ones_the_checks_cover():
    assert CODE_RUNNER_ENVS and STATEFUL_ENVS  # else the parametrised tests below check nothing


@pytest.mark.parametrize("env_id", CODE_RUNNER_ENVS)
def test_docker_unreachable_refuses_a_code_runner_env_with_the_code_runner_fix(env_id, no_docker, no_episodes, capsys,
                                                                              tmp_path):
    out = tmp_path / "r.json"
    assert cli.main(["eval", "--env", env_id, "--policy", "oracle", "--episodes", "2", "--quiet", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "sopgym eval: cannot start: Docker:" in err and "did not answer a ping" in err
    assert f"{env_id} (its code runner for run_" in err
    assert "--env-arg code_runner=inprocess" in err and "sandbox" not in err  # sandbox=inprocess changes nothing there
    assert not out.exists() and not (tmp_path / "r.trajectories.jsonl").exists()


@pytest.mark.parametrize("env_id", STATEFUL_ENVS)
def test_docker_unreachable_refuses_sandbox_docker_with_the_sandbox_fix(env_id, no_docker, no_episodes, capsys):
    assert cli.main(["eval", "--env", env_id, "--policy", "oracle", "--episodes", "1", "--quiet", "--sandbox", "docker",
                     "--env-arg", "code_runner=inprocess"]) == 1
    err = capsys.readouterr().err
    assert f"{env_id} (its stateful tools, sandbox='docker')" in err and "--env-arg sandbox=inprocess" in err


def test_one_refusal_per_problem_naming_every_env_it_stops(no_docker, no_episodes, capsys):
    assert cli.main(["eval", "--env", "sopgym/*", "--policy", "oracle", "--episodes", "1", "--quiet"]) == 1
    err = capsys.readouterr().err.splitlines()
    refusals = [n for n, line in enumerate(err) if line.startswith("sopgym eval: cannot start:")]
    assert len(refusals) == 1, err  # Docker is one problem, however many envs it stops
    needed_by = err[refusals[0] + 1]
    assert needed_by.startswith("  needed by: ") and all(env_id in needed_by for env_id in CODE_RUNNER_ENVS), needed_by


def test_the_fix_the_refusal_names_runs(no_docker, tmp_path, capsys):
    """--env-arg code_runner=inprocess, as the refusal says, runs every code-runner env without Docker."""
    out = tmp_path / "r.json"
    assert cli.main(["eval", "--env", *CODE_RUNNER_ENVS, "--policy", "oracle", "--episodes", "2", "--quiet",
                     "--n-bootstrap", "0", "--env-arg", "code_runner=inprocess", "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    assert all(m["task_success_rate"] == 1.0 for m in results["envs"].values())


@pytest.mark.parametrize("env_id", [p.env_id for p in AUTHORED])
def test_a_turn_limit_the_oracle_cannot_meet_is_warned_with_its_measured_needs(env_id, capsys):
    assert cli.main(["eval", "--env", env_id, "--policy", "majority", "--episodes", "3", "--quiet", "--n-bootstrap", "0",
                     "--env-arg", "max_turns=2", "--env-arg", "code_runner=inprocess"]) == 0
    err = capsys.readouterr().err
    line = next((x for x in err.splitlines() if x.startswith(f"sopgym eval: warning: {env_id}: max_turns=2")), None)
    assert line is not None, err
    assert "leaves the oracle unable to finish" in line and "the reference solution takes" in line


def test_a_lowered_turn_limit_the_oracle_still_meets_is_not_warned(capsys):
    """The warning comes from the oracle's measured turns, not from any lowering of max_turns: the
    WarehouseReceiving oracle takes at most 6 turns, so 8 (below the default 9) leaves it every task."""
    assert cli.main(["eval", "--env", WR, "--policy", "oracle", "--episodes", "20", "--quiet", "--n-bootstrap", "0",
                     "--env-arg", "max_turns=8"]) == 0
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("policy", ["oracle", "random", "majority", "inputs-only"])
def test_a_baseline_takes_the_model_run_s_command_line_and_says_what_it_ignores(policy, tmp_path, capsys):
    out = tmp_path / "r.json"
    model_options = ["--base-url", "http://127.0.0.1:1/v1", "--model", "m", "--temperature", "0.7", "--max-tokens", "64",
                     "--tools", "prompt", "--device", "cpu"]
    assert cli.main(["eval", "--env", WR, "--policy", policy, "--episodes", "2", "--quiet", "--n-bootstrap", "0",
                     "--out", str(out), *model_options]) == 0
    err = capsys.readouterr().err
    assert f"note: --policy {policy} is a built-in policy: ignoring the model options --model, --base-url, " \
           "--temperature, --max-tokens, --tools, --device" in err
    identity = json.loads(out.read_text())["config"]["identity"]
    assert identity["policy"] == policy and identity["model"] is None


def test_envs_on_a_ray_cluster_are_warned_about_not_refused_for_this_host_s_backends(no_docker, monkeypatch, capsys):
    """The cluster's hosts, not this one, run the envs: what this host lacks is a warning there."""
    import sopgym.episodes.runner as runner

    monkeypatch.setattr(runner, "make_env_pool", lambda make_env, kind, **kwargs: runner.EnvPool(make_env))  # no cluster here
    code = cli.main(["eval", "--env", CODE_RUNNER_ENVS[0], "--policy", "majority", "--episodes", "1", "--quiet",
                     "--n-bootstrap", "0", "--workers", "1", "--ray-address", "ray://cluster:10001"])
    err = capsys.readouterr().err
    assert code == 0 and "cannot start" not in err
    assert "warning: Docker:" in err and "checked on this host only; the envs run on the Ray cluster at ray://cluster:10001" in err


def test_baselines_run_on_the_same_tasks_and_env_kwargs_into_files_beside_the_results(tmp_path):
    out = tmp_path / "r.json"
    assert cli.main(["eval", "--env", WR, "--policy", "random", "--baselines", "oracle,majority", "--episodes", "3",
                     "--quiet", "--n-bootstrap", "0", "--env-arg", "max_turns=8", "--out", str(out)]) == 0
    runs = {name: json.loads((tmp_path / f"r{suffix}.json").read_text())
            for name, suffix in (("random", ""), ("oracle", ".oracle"), ("majority", ".majority"))}
    for name, results in runs.items():
        identity = results["config"]["identity"]
        assert identity["policy"] == name and identity["model"] is None
        assert identity["plan"] == runs["random"]["config"]["identity"]["plan"]
        assert identity["env_kwargs"] == {"max_turns": 8}
    assert runs["oracle"]["envs"][WR]["task_success_rate"] == 1.0
    assert (tmp_path / "r.oracle.trajectories.jsonl").exists() and (tmp_path / "r.majority.trajectories.jsonl").exists()
