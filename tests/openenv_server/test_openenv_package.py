"""sopgym as an OpenEnv env package (issue 25): ``deploy/openenv`` passes ``openenv validate``, its runtime
probe and import-path app work against the real server, and the typed client plays episodes. Every
server listens on 127.0.0.1 only."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from server_helpers import HEADERS, HOST, SKIP_REASON, TOKEN, free_port

pytest.importorskip("openenv", reason=SKIP_REASON)
pytest.importorskip("websockets", reason=SKIP_REASON)

import httpx  # noqa: E402  (openenv's dependency)
import yaml  # noqa: E402
from openenv.core.env_server.mcp_types import ListToolsObservation  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

import sopgym  # noqa: E402
from sopgym.envs.policies import make_policy  # noqa: E402
from sopgym.envs.registration import registered_env_ids  # noqa: E402
from sopgym.integrations.openenv_client import SopgymEnvClient  # noqa: E402
from sopgym.integrations.openenv_models import SopgymAction, SopgymObservation, SopgymState, SopgymToolObservation  # noqa: E402

PACKAGE = Path(__file__).resolve().parents[2] / "deploy" / "openenv"
AUTHORED = registered_env_ids("sopgym")
STATEFUL = "sopgym/CustomerServiceTroubleshooting-v0"


def _validate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "openenv.cli", "validate", str(PACKAGE), *args],
                          capture_output=True, text=True, timeout=600)


# --------------------------------------------------------------------------------------------------
# The package
# --------------------------------------------------------------------------------------------------
def test_openenv_validate_passes_the_package_at_the_static_level():
    out = _validate("--level", "static", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["verdict"] == "pass"
    assert [(r["check_id"], r["status"]) for r in report["results"]] == [("static.manifest", "pass")]


def test_openenv_validate_with_its_defaults_fails_nothing():
    """The default (semantic) level: the manifest and the runtime plan parse, nothing fails; the runtime
    checks are skipped because every request needs the token and openenv 0.10 cannot deliver one."""
    out = _validate("--json")
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    statuses = {r["check_id"]: (r["status"], r["evidence"]) for r in report["results"]}
    assert report["verdict"] == "warn" and statuses["static.manifest"][0] == "pass"
    assert statuses["runtime.startup"] == ("skip", ["credential_delivery is deferred for this release"])
    assert not [c for c, (status, _) in statuses.items() if status in ("fail", "error")]


def test_the_manifest_names_this_version_and_the_servers_app():
    manifest = yaml.safe_load((PACKAGE / "openenv.yaml").read_text(encoding="utf-8"))
    assert manifest["version"] == sopgym.__version__
    assert manifest["app"] == "sopgym.cli.serve:app"
    assert manifest["validation"]["capabilities"]["task_api"] is True


def test_the_images_command_is_a_valid_serve_command():
    """The Dockerfile's CMD, with its ENV defaults, parses as `sopgym serve` arguments."""
    from sopgym.cli.serve import build_parser

    lines = (PACKAGE / "Dockerfile").read_text(encoding="utf-8").splitlines()
    command = json.loads(next(line for line in lines if line.startswith("CMD "))[4:])
    assert command[:2] == ["sh", "-c"]
    env_id = next(line for line in lines if "SOPGYM_ENV=" in line).split("SOPGYM_ENV=")[1].split()[0]
    words = shlex.split(command[2].replace('"$SOPGYM_ENV"', env_id).replace("$SOPGYM_SERVE_ARGS", ""))
    assert words[:3] == ["exec", "sopgym", "serve"]
    args = build_parser().parse_args(words[3:])
    assert (args.env, args.host, args.port) == (env_id, "0.0.0.0", 8000) and env_id in AUTHORED


def test_the_runtime_probe_ends_its_episode_on_the_server(server):
    """What `openenv validate` would send at its runtime level (runtime.json), sent to the real server
    with the token: the reset is accepted and the actions end the episode."""
    plan = json.loads((PACKAGE / "runtime.json").read_text(encoding="utf-8"))
    reset = {**plan["reset"]["options"], "seed": plan["reset"]["seed"], "episode_id": plan["reset"]["episode_id"]}
    with connect(server(STATEFUL).url.replace("http://", "ws://") + "/ws", proxy=None, additional_headers=HEADERS) as ws:
        ws.send(json.dumps({"type": "reset", "data": reset}))
        assert json.loads(ws.recv(timeout=60))["type"] == "observation"
        for action in plan["actions"]:
            ws.send(json.dumps({"type": "step", "data": action}))
            answer = json.loads(ws.recv(timeout=60))
            assert answer["type"] == "observation", answer
        assert answer["data"]["done"] is True
        ws.send(json.dumps({"type": "state"}))
        state = json.loads(ws.recv(timeout=60))["data"]
    assert (state["episode_id"], state["status"]) == (plan["reset"]["episode_id"], "TRUNCATED_STOPPED")


def test_the_import_path_app_serves_with_the_environments_settings():
    """`uvicorn sopgym.cli.serve:app` (the manifest's app) with SOPGYM_ENV, SOPGYM_SERVE_ARGS
    and SOPGYM_SERVE_TOKEN: the env, the limits and the token are those."""
    port = free_port()
    env = dict(os.environ, SOPGYM_ENV=STATEFUL, SOPGYM_SERVE_ARGS="--max-sessions 1 --send-ground-truth",
               SOPGYM_SERVE_TOKEN=TOKEN, PYTHONPATH=str(Path(sopgym.__file__).resolve().parents[1]))
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "sopgym.cli.serve:app", "--host", HOST,
                             "--port", str(port), "--log-level", "warning"], env=env, stderr=subprocess.PIPE, text=True)
    url = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stderr.read()
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "the app did not answer /health within 120 s"
                time.sleep(0.3)
        assert httpx.get(url + "/state", timeout=30).status_code == 401
        with SopgymEnvClient(url).sync() as client:
            client.reset(split="test", index=0)
            assert client.state().env_id == STATEFUL and client.state().ground_truth is True
            with pytest.raises(Exception, match=r"CAPACITY_REACHED|at capacity: 1/1"):
                with SopgymEnvClient(url).sync() as second:
                    second.reset(seed=0)
    finally:
        proc.terminate()
        proc.wait(30)


# --------------------------------------------------------------------------------------------------
# The typed client
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", AUTHORED)
def test_typed_client_plays_oracle_episodes_to_reward_one(server, env_id):
    """SopgymEnvClient (token from SOPGYM_SERVE_TOKEN): typed observations and state, every reply a
    SopgymAction, the oracle's episode ends with reward 1.0."""
    with SopgymEnvClient(server(env_id, send_ground_truth=True).url).sync() as client:
        result = client.reset(split="test", index=1)
        assert isinstance(result.observation, SopgymObservation) and result.observation.tool_schemas
        step = result.observation.gym_return()
        policy = make_policy("oracle")
        policy.reset(step["info"])
        while not result.done:
            result = client.step(SopgymAction(type="reply", reply=policy.act(step["observation"], step["info"])))
            assert isinstance(result.observation, SopgymObservation)
            step = result.observation.gym_return()
        assert (result.reward, result.observation.terminated) == (1.0, True)
        state = client.state()
        assert isinstance(state, SopgymState)
        assert (state.env_id, state.done, state.total_reward, state.task_id) == (env_id, True, 1.0, step["info"]["task_id"])


def test_typed_client_gets_typed_tool_calls_and_listings(server):
    with SopgymEnvClient(server(STATEFUL).url).sync() as client:
        client.reset(split="test", index=0)
        listed = client.step(SopgymAction(type="list_tools")).observation
        assert isinstance(listed, ListToolsObservation) and listed.tools[0].name == "authenticate"
        called = client.step(SopgymAction(type="call_tool", tool_name="authenticate", arguments={"customer_id": "bad"}))
        assert isinstance(called.observation, SopgymToolObservation)
        assert (called.observation.tool_name, called.observation.status, called.done) == ("authenticate", "ERROR_BAD_ARGUMENTS", False)
        ended = client.step(SopgymAction(type="end_episode", cause="stopped"))
        assert ended.done and ended.observation.status == "TRUNCATED_STOPPED"


def test_typed_client_without_the_token_is_refused(server, monkeypatch):
    monkeypatch.delenv("SOPGYM_SERVE_TOKEN")
    with pytest.raises(Exception, match="401"):
        with SopgymEnvClient(server(STATEFUL).url).sync() as client:
            client.reset(seed=0)
