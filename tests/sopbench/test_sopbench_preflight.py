"""`sopgym eval` on SOP-Bench envs: the tools runner is checked before the first episode (the envs'
backends in general: tests/test_eval_preflight.py). Fixture domains with tools.py (tests/sopbench/fixtures)."""

from __future__ import annotations

import pytest

from sopgym import cli

WITH_TOOLS = ["sopbench/cells-v0", "sopbench/helpdesk-v0", "sopbench/intake-v0"]


@pytest.mark.parametrize("env_id", WITH_TOOLS)
def test_docker_unreachable_refuses_the_docker_tools_runner_with_the_runner_fix(env_id, fixture_report, monkeypatch,
                                                                               tmp_path, capsys):
    import sopgym.evaluation.suite

    def refuse(*args, **kwargs):
        raise AssertionError("episodes ran although the pre-flight should have refused the run")

    monkeypatch.setattr(sopgym.evaluation.suite, "run_suite", refuse)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    assert cli.main(["eval", "--env", env_id, "--policy", "groundtruth-replay", "--episodes", "1", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "cannot start: Docker:" in err and f"{env_id} (its tools" in err
    assert "--env-arg tools_runner=subprocess --env-arg trust_tools_code=true" in err


@pytest.mark.parametrize("env_id", WITH_TOOLS)
def test_the_runner_fix_the_refusal_names_runs_without_docker(env_id, fixture_report, monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    assert cli.main(["eval", "--env", env_id, "--policy", "groundtruth-replay", "--episodes", "1", "--quiet",
                     "--n-bootstrap", "0", "--env-arg", "tools_runner=subprocess", "--env-arg", "trust_tools_code=true"]) == 0
