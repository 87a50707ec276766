"""`sopgym eval` on SOP-Bench envs: the tools runner is checked before the first episode (the envs'
backends in general: tests/test_eval_preflight.py). Fixture domains with tools.py (tests/sopbench/fixtures)."""

from __future__ import annotations

import pytest

from sopgym import cli

WITH_TOOLS = ["sopbench/cells-v0", "sopbench/helpdesk-v0", "sopbench/intake-v0"]


@pytest.mark.parametrize("env_id", WITH_TOOLS)
def test_docker_unreachable_refuses_the_docker_tools_runner_with_the_runner_fix(env_id, fixture_report, monkeypatch,
                                                                               tmp_path, capsys):
    import sopgym.bench.suite

    def refuse(*args, **kwargs):
        raise AssertionError("episodes ran although the pre-flight should have refused the run")

    monkeypatch.setattr(sopgym.bench.suite, "run_suite", refuse)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    assert cli.main(["eval", "--env", env_id, "--policy", "groundtruth-replay", "--episodes", "1", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "cannot start: Docker:" in err and f"{env_id} (its tools.py" in err
    assert "--env-arg tools_runner=subprocess --env-arg trust_tools_code=true" in err


@pytest.mark.parametrize("env_id", WITH_TOOLS)
def test_the_runner_fix_the_refusal_names_runs_without_docker(env_id, fixture_report, monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    assert cli.main(["eval", "--env", env_id, "--policy", "groundtruth-replay", "--episodes", "1", "--quiet",
                     "--n-bootstrap", "0", "--env-arg", "tools_runner=subprocess", "--env-arg", "trust_tools_code=true"]) == 0


def test_a_data_only_folder_is_warned_about_and_the_run_goes_on(real_report, capsys):
    """No runner can answer a data-only folder's calls (no tools.py): its run is a warning, not a refusal."""
    from .helpers import REAL_DOMAINS, sopbench_dir

    name = REAL_DOMAINS[0]
    if (sopbench_dir() / name / "tools.py").exists():
        pytest.skip("this checkout has tools.py files: the data-only case does not apply")
    env_id = f"sopbench/{name}-v0"
    assert cli.main(["eval", "--env", env_id, "--policy", "groundtruth-replay", "--episodes", "1", "--quiet",
                     "--n-bootstrap", "0", "--env-arg", "tools_runner=subprocess", "--env-arg", "trust_tools_code=true"]) == 0
    err = capsys.readouterr().err
    assert "warning: tools.py: tools.py missing" in err and f"{env_id} (its tools: a data-only folder)" in err
