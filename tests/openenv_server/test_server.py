"""``sopgym serve``: OpenEnv's own clients drive it (sessions, MCP, task API); sessions are isolated and
bounded; bad requests say what was expected and what came. Every server listens on 127.0.0.1 only."""

from __future__ import annotations

import json
import re
import threading

import gymnasium as gym
import pytest
from server_helpers import HEADERS, SKIP_REASON, env_kwargs, start_cli_server

pytest.importorskip("openenv", reason=SKIP_REASON)
pytest.importorskip("websockets", reason=SKIP_REASON)

import httpx  # noqa: E402  (openenv's dependency)
from openenv.core.env_server.mcp_types import CallToolAction  # noqa: E402
from openenv.core.generic_client import GenericEnvClient  # noqa: E402
from openenv.core.mcp_client import MCPToolClient  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from sopgym.envs.policies import make_policy  # noqa: E402
from sopgym.envs.registration import registered_env_ids  # noqa: E402
from sopgym.evaluation import score_record  # noqa: E402
from sopgym.integrations.protocol import BAD_REQUEST, task_api_name  # noqa: E402

ENV_IDS = registered_env_ids()
AUTHORED = registered_env_ids("sopgym")
STATEFUL = "sopgym/CustomerServiceTroubleshooting-v0"


def gym_step(result) -> dict:
    """The exact gymnasium return value a sopgym observation carries."""
    observation = result.observation
    return json.loads(observation["gym_step"] if isinstance(observation, dict) else observation.gym_step)


def oracle_episode(client, split: str, index: int):
    """Run the oracle through an OpenEnv client's reset/step; returns the last StepResult and info."""
    result = client.reset(split=split, index=index)
    step = gym_step(result)
    observation, info = step["observation"], step["info"]
    policy = make_policy("oracle")
    policy.reset(info)
    while not result.done:
        result = client.step({"type": "reply", "reply": policy.act(observation, info)})
        step = gym_step(result)
        observation, info = step["observation"], step["info"]
    return result, info


def parse_call(reply: str) -> tuple[str, dict]:
    call = json.loads(re.fullmatch(r"<tool_call>(.*)</tool_call>", reply, re.DOTALL).group(1))
    return call["name"], call["arguments"]


# --------------------------------------------------------------------------------------------------
# OpenEnv's own clients
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", AUTHORED)
def test_openenv_env_client_runs_oracle_episodes_to_reward_one(server, env_id):
    with GenericEnvClient(base_url=server(env_id, send_ground_truth=True).url, headers=HEADERS).sync() as client:
        for index in range(2):
            result, info = oracle_episode(client, "test", index)
            assert (result.reward, result.done, result.observation["terminated"]) == (1.0, True, True)
            assert score_record(info["episode"]).success
            state = client.state()
            assert (state["done"], state["total_reward"], state["task_id"]) == (True, 1.0, info["task_id"])
            assert state["episode"]["reward"] == 1.0


@pytest.mark.parametrize("env_id", AUTHORED)
def test_openenv_mcp_tool_client_runs_oracle_episodes_one_tool_call_per_turn(server, env_id):
    """MCPToolClient (production mode): the session's reset, tool discovery and every call over MCP
    tools/call; the submission through its step(CallToolAction), which returns the reward."""
    with MCPToolClient(base_url=server(env_id).url, headers=HEADERS).sync() as client:
        result = client.reset(split="test", index=0)
        info = gym_step(result)["info"]
        assert [t.name for t in client.list_tools()] == [t["function"]["name"] for t in info["tools"]]
        policy = make_policy("oracle")
        policy.reset(info)
        observation, messages, calls = result.observation.text, [], 0
        while True:
            name, arguments = parse_call(policy.act(observation, {**info, "messages": messages}))
            calls += 1
            if name == "submit_answer":
                final = client.step(CallToolAction(tool_name=name, arguments=arguments))
                break
            text = client.call_tool(name, **arguments)
            assert isinstance(text, str)
            messages = [{"role": "tool", "content": text}]
        assert (final.reward, final.done, final.observation.result) == (1.0, True, "Answer submitted.")
        assert client.state().step_count == calls


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_listed_tools_are_the_env_schemas_exactly(server, env_id):
    """list_tools (step action and MCP tools/list) gives the schemas the local env's reset info gives."""
    local = gym.make(env_id, **env_kwargs(env_id))
    expected = [{"name": t["function"]["name"], "description": t["function"]["description"],
                 "input_schema": t["function"]["parameters"]} for t in local.reset(seed=0)[1]["tools"]]
    local.close()
    url = server(env_id).url
    with GenericEnvClient(base_url=url, headers=HEADERS).sync() as client:
        listed = client.step({"type": "list_tools"}).observation["tools"]
    assert listed == expected
    rpc = httpx.post(url + "/mcp", json={"jsonrpc": "2.0", "method": "tools/list", "params": {}, "id": 1}, headers=HEADERS, timeout=30).json()
    assert [{"name": t["name"], "description": t["description"], "input_schema": t["inputSchema"]} for t in rpc["result"]["tools"]] == expected


def test_call_tool_step_is_one_turn_with_sopgym_statuses(server):
    """OpenEnv's CallToolAction payload: one call, one turn; arguments reach sopgym's own validation."""
    with GenericEnvClient(base_url=server(STATEFUL).url, headers=HEADERS).sync() as client:
        client.reset(split="test", index=0)
        result = client.step({"type": "call_tool", "tool_name": "authenticate", "arguments": {"customer_id": "bad"}})
        obs = result.observation
        assert (obs["tool_name"], obs["status"], obs["error"], result.done) == ("authenticate", "ERROR_BAD_ARGUMENTS", None, False)
        assert "customer_id" in obs["result"]
        result = client.step({"type": "call_tool", "tool_name": "no_such_tool", "arguments": {}})
        assert result.observation["status"] == "ERROR_UNKNOWN_TOOL"
        assert gym_step(result)["info"]["turn"] == 2


# --------------------------------------------------------------------------------------------------
# Sessions
# --------------------------------------------------------------------------------------------------
def test_concurrent_sessions_do_not_see_each_others_state(server):
    """Two sessions on the same stateful task, stepped in parallel threads: each ends with the state and
    record a lone local env gives, and a ticket one opens does not exist in the other."""
    url = server(STATEFUL, max_sessions=4, send_ground_truth=True).url
    local = gym.make(STATEFUL)
    from sopgym.episodes.runner import run_episode

    expected = run_episode(local, make_policy("oracle"), options={"split": "test", "task_index": 5}).record
    local.close()
    records, barrier, errors = {}, threading.Barrier(2), []

    def run(name):
        try:
            with GenericEnvClient(base_url=url, headers=HEADERS).sync() as client:
                barrier.wait(timeout=30)
                records[name] = oracle_episode(client, "test", 5)[1]["episode"]
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert records["a"] == expected and records["b"] == expected

    with GenericEnvClient(base_url=url, headers=HEADERS).sync() as a, GenericEnvClient(base_url=url, headers=HEADERS).sync() as b:
        a.reset(split="test", index=5)
        b.reset(split="test", index=5)
        token_a = json.loads(a.step({"type": "call_tool", "tool_name": "authenticate", "arguments": _credentials(a)}).observation["result"])
        token_b = json.loads(b.step({"type": "call_tool", "tool_name": "authenticate", "arguments": _credentials(b)}).observation["result"])
        service = _first_service(a, token_a["session_token"])
        _first_service(b, token_b["session_token"])
        opened = a.step({"type": "call_tool", "tool_name": "open_ticket", "arguments": {
            "session_token": token_a["session_token"], "service_id": service, "category": "BILLING"}}).observation
        ticket = json.loads(opened["result"])["ticket_id"]
        seen_a = a.step({"type": "call_tool", "tool_name": "get_ticket", "arguments": {"session_token": token_a["session_token"], "ticket_id": ticket}})
        seen_b = b.step({"type": "call_tool", "tool_name": "get_ticket", "arguments": {"session_token": token_b["session_token"], "ticket_id": ticket}})
    assert seen_a.observation["status"] == "OK"
    assert seen_b.observation["status"] == "ERROR_TOOL", seen_b.observation["result"]


def _credentials(client) -> dict:
    inputs = client.state()["task_id"]
    from sopgym.sop_tasks.registry import get_pack

    task = get_pack("sopgym/CustomerServiceTroubleshooting").task_from_id(inputs)
    return {"customer_id": task.inputs["customer_id"], "verification_code": task.inputs["verification_code"]}


def _first_service(client, token: str) -> str:
    account = client.step({"type": "call_tool", "tool_name": "get_account", "arguments": {"session_token": token}}).observation
    return json.loads(account["result"])["services"][0]["service_id"]


def test_session_count_is_bounded(server):
    url = server(STATEFUL, max_sessions=2).url
    with GenericEnvClient(base_url=url, headers=HEADERS).sync() as a, GenericEnvClient(base_url=url, headers=HEADERS).sync() as b:
        a.reset(seed=0)
        b.reset(seed=0)
        with pytest.raises(Exception, match=r"CAPACITY_REACHED|at capacity: 2/2"):
            with GenericEnvClient(base_url=url, headers=HEADERS).sync() as c:
                c.reset(seed=0)
    with GenericEnvClient(base_url=url, headers=HEADERS).sync() as c:  # the slots are free again
        assert c.reset(seed=0).observation["status"] == "OK"


# --------------------------------------------------------------------------------------------------
# Bad requests: the message names what was expected and what came
# --------------------------------------------------------------------------------------------------
def _ws_frames(url: str, *frames: dict) -> list[dict]:
    """Send raw frames on one session and collect the answers."""
    with connect(url.replace("http://", "ws://") + "/ws", proxy=None, additional_headers=HEADERS) as ws:
        answers = []
        for frame in frames:
            ws.send(json.dumps(frame))
            answers.append(json.loads(ws.recv(timeout=30)))
        return answers


RESET = {"type": "reset", "data": {"seed": 0}}
BAD_FRAMES = {
    "step before reset": ([{"type": "step", "data": {"type": "reply", "reply": "hi"}}], ["no episode is running", "send reset first"]),
    "unknown reset key": ([{"type": "reset", "data": {"sed": 1}}], ["reset takes", "'seed'", "got unknown ['sed']"]),
    "split twice": ([{"type": "reset", "data": {"split": "test", "options": {"split": "val"}}}], ["both split= and options['split']"]),
    "unknown split": ([{"type": "reset", "data": {"split": "dev"}}], ["must be one of", "'test'", "'dev'"]),
    "index out of range": ([{"type": "reset", "data": {"split": "test", "index": 10**6}}], ["[0, 200)", "1000000"]),
    "negative seed": ([{"type": "reset", "data": {"seed": -3}}], ["non-negative integer", "-3"]),
    "unknown action type": ([RESET, {"type": "step", "data": {"type": "submit"}}], ["'reply'", "'call_tool'", '"input": "submit"']),
    "reply without reply": ([RESET, {"type": "step", "data": {"type": "reply"}}], ["takes ['reply']", "got []"]),
    "stray key": ([RESET, {"type": "step", "data": {"type": "reply", "reply": "x", "tool_name": "a"}}], ["takes ['reply']", "got ['reply', 'tool_name']"]),
    "bad end cause": ([RESET, {"type": "step", "data": {"type": "end_episode", "cause": "bored"}}], ["cause must be one of", "'bored'"]),
}


@pytest.mark.parametrize("case", sorted(BAD_FRAMES))
def test_bad_session_request_says_expected_and_actual(server, case):
    frames, needles = BAD_FRAMES[case]
    answer = _ws_frames(server(STATEFUL).url, *frames)[-1]
    assert answer["type"] == "error"
    text = answer["data"]["message"] + " " + json.dumps(answer["data"].get("errors", []), default=str)
    for needle in needles:
        assert needle in text, text


def test_a_session_survives_its_bad_requests(server):
    answers = _ws_frames(server(STATEFUL).url, {"type": "step", "data": {"type": "reply"}}, {"type": "reset", "data": {"bogus": 1}}, RESET)
    assert [a["type"] for a in answers] == ["error", "error", "observation"]


@pytest.mark.parametrize("method,path,body,needles", [
    ("post", "/step", {"action": {"type": "reply", "reply": "hi"}}, ["no episode is running", "WebSocket /ws"]),
    ("post", "/{name}/num_tasks", {"split": "dev"}, ["split must be one of", "'dev'"]),
    ("post", "/{name}/task", {"split": "test", "index": 200}, ["must be in [0, 200)", "200"]),
    ("post", "/{name}/task_range", {"split": "train", "start": 0}, ["unlimited", "stop=None"]),
])
def test_bad_http_request_is_a_400_that_says_expected_and_actual(server, method, path, body, needles):
    url = server(STATEFUL).url + path.format(name=task_api_name(STATEFUL))
    response = httpx.request(method, url, json=body, headers=HEADERS, timeout=30)
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert detail.startswith(BAD_REQUEST)
    for needle in needles:
        assert needle in detail, detail


# --------------------------------------------------------------------------------------------------
# Task API
# --------------------------------------------------------------------------------------------------
def test_task_api_lists_splits_and_tasks_that_reset_selects(server):
    srv = server(STATEFUL)
    base = f"{srv.url}/{task_api_name(STATEFUL)}"
    assert httpx.get(srv.url + "/list_environments", headers=HEADERS, timeout=30).json() == [task_api_name(STATEFUL)]
    splits = httpx.get(base + "/splits", headers=HEADERS, timeout=30).json()
    assert splits == [{"name": "train", "type": "train", "num_tasks": None}, {"name": "val", "type": "validation", "num_tasks": 200},
                      {"name": "test", "type": "test", "num_tasks": 200}]
    assert httpx.post(base + "/num_tasks", json={"split": "test"}, headers=HEADERS, timeout=30).json() == {"num_tasks": 200}
    tasks = httpx.post(base + "/tasks", json={"split": "test"}, headers=HEADERS, timeout=30).json()["tasks"]
    assert [t["index"] for t in tasks] == list(range(200))
    assert len(httpx.post(base + "/tasks", json={"split": "train"}, headers=HEADERS, timeout=30).json()["tasks"]) == 100  # a preview
    task = httpx.post(base + "/task", json={"split": "test", "index": 7}, headers=HEADERS, timeout=30).json()["task"]
    assert task == {"id": "CustomerServiceTroubleshooting/test/7", "split": "test", "index": 7}
    assert httpx.post(base + "/task_range", json={"split": "test", "start": 5, "stop": 8}, headers=HEADERS, timeout=30).json()["tasks"] == tasks[5:8]
    with GenericEnvClient(base_url=srv.url, headers=HEADERS).sync() as client:
        assert gym_step(client.reset(split="test", index=7))["info"]["task_id"] == task["id"]


# --------------------------------------------------------------------------------------------------
# What a model may see, and the command
# --------------------------------------------------------------------------------------------------
def test_model_facing_fields_hold_no_bookkeeping(server):
    """text, messages and tool_schemas are the chat; difficulty and the expected answer (sent when the server
    is asked to) are only in gym_step."""
    with GenericEnvClient(base_url=server(STATEFUL, send_ground_truth=True).url, headers=HEADERS).sync() as client:
        reset = client.reset(split="test", index=0)
        result, info = oracle_episode(client, "test", 0)
    for obs in (reset.observation, result.observation):
        shown = json.dumps({k: obs[k] for k in ("text", "messages", "tool_schemas")})
        assert "difficulty" not in shown and "expected" not in shown
    assert reset.observation["messages"] == gym_step(reset)["info"]["messages"]
    assert "difficulty" in gym_step(reset)["info"] and "expected" in info["episode"]


def test_sopgym_serve_command_serves_an_openenv_client():
    proc, url = start_cli_server(STATEFUL, "--max-sessions", "2", "--idle-timeout", "30")
    try:
        with GenericEnvClient(base_url=url, headers=HEADERS).sync() as client:
            result, _ = oracle_episode(client, "test", 3)
        assert result.reward == 1.0
        assert httpx.get(url + "/metadata", headers=HEADERS, timeout=30).json()["name"] == STATEFUL
    finally:
        proc.terminate()
        proc.wait(30)
    assert "sopgym serve: sopgym/CustomerServiceTroubleshooting-v0 at http://127.0.0.1:" in proc.stderr.read()


def test_sopgym_serve_refuses_an_unknown_env(capsys):
    from sopgym.cli import main

    assert main(["serve", "--env", "sopgym/Nope-v0", "--port", "8123"]) == 2
    assert "unknown env id 'sopgym/Nope-v0'" in capsys.readouterr().err
