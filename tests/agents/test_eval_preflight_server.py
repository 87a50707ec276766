"""`sopgym eval --policy openai`'s pre-flight against real HTTP servers on loopback (no mock): a model
server that does not answer refuses the run before any episode and leaves nothing behind; its problem
is named with the envs' in one refusal; a listing without the model asked for is a warning. The envs'
backends: tests/test_eval_preflight.py."""

from __future__ import annotations

import json
import time

import pytest

from sopgym import cli
from sopgym.agents.local_server import free_port

from .fault_server import USAGE, FaultServer
from .needs import require
from .test_openai_faults import SUBMIT_OK, WR

require("openai")


@pytest.fixture
def no_episodes(monkeypatch):
    import sopgym.bench.suite

    def refuse(*args, **kwargs):
        raise AssertionError("episodes ran although the pre-flight should have refused the run")

    monkeypatch.setattr(sopgym.bench.suite, "run_suite", refuse)


def _down() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there


def test_a_model_server_that_does_not_answer_refuses_the_run_before_anything_is_written(tmp_path, monkeypatch,
                                                                                      no_episodes, capsys):
    monkeypatch.chdir(tmp_path)  # a model run without --out would write sopgym-runs/<time>/ here
    code = cli.main(["eval", "--env", WR, "--policy", "openai", "--base-url", _down(), "--model", "m", "--episodes", "2",
                     "--quiet", "--server-wait", "0.5"])
    err = capsys.readouterr().err
    assert code == 1 and "sopgym eval: cannot start: model server:" in err and "did not answer GET /models" in err
    assert list(tmp_path.iterdir()) == []


def test_the_model_server_and_the_envs_backends_are_named_in_one_refusal_without_waiting(tmp_path, monkeypatch,
                                                                                       no_episodes, capsys):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    started = time.monotonic()
    code = cli.main(["eval", "--env", "sopgym/AdTrafficSpoofing-v0", "--policy", "openai", "--base-url", _down(),
                     "--model", "m", "--episodes", "1", "--quiet", "--server-wait", "60", "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 1 and "cannot start: Docker:" in err and "cannot start: model server:" in err, err
    assert time.monotonic() - started < 30  # one quick probe, not --server-wait, for a run that will not start


def test_a_server_listing_without_the_model_asked_for_is_a_warning_and_the_run_goes_on(tmp_path, capsys):
    with FaultServer() as server:
        server.default = ("reply", SUBMIT_OK, "stop", USAGE)
        out = tmp_path / "r.json"
        code = cli.main(["eval", "--env", WR, "--policy", "openai", "--base-url", server.base_url, "--model", "other",
                         "--episodes", "1", "--quiet", "--n-bootstrap", "0", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "warning: model server" in err and "does not list --model 'other'" in err and "it lists m" in err
    assert json.loads(out.read_text())["run"]["status"] == "finished"


def test_a_model_run_s_baselines_write_their_results_beside_the_model_s(tmp_path):
    with FaultServer() as server:
        server.default = ("reply", SUBMIT_OK, "stop", USAGE)
        out = tmp_path / "r.json"
        code = cli.main(["eval", "--env", WR, "--policy", "openai", "--base-url", server.base_url, "--model", "m",
                         "--baselines", "majority", "--episodes", "2", "--quiet", "--n-bootstrap", "0", "--out", str(out)])
        asked = len(server.requests)
    assert code == 0
    model, baseline = json.loads(out.read_text()), json.loads((tmp_path / "r.majority.json").read_text())
    assert model["config"]["identity"]["policy"] == "openai" and baseline["config"]["identity"]["policy"] == "majority"
    assert baseline["config"]["identity"]["plan"] == model["config"]["identity"]["plan"]
    assert baseline["config"]["identity"]["model"] is None and asked == 2  # the baseline asked the model nothing
