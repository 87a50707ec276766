"""The OpenAI-compatible client under injected faults (429, 5xx, 4xx refusals, context-length errors,
hangs, abandoned streams, a late or refusing server), against a tiny local HTTP server. The same
client against a real server (``transformers serve``) is tests/agents/test_real_model.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import gymnasium as gym
import pytest

import sopgym  # noqa: F401 - registers the envs
from sopgym.agents.chat import ChatAgent, ChatRequest, Completion, RequestFailed, ServerRefused
from sopgym.agents.local_server import free_port
from sopgym.agents.openai_chat import OpenAIChatConfig, OpenAIChatModel
from sopgym.episodes.pools import EnvPool
from sopgym.episodes.runner import run_episodes
from sopgym.episodes.specs import task_specs
from sopgym.evaluation import evaluate_records

from .fault_server import USAGE, FaultServer
from .needs import require

require("openai")

WR = "sopgym/WarehouseReceiving-v0"
VALID = {"disposition": "ACCEPT", "reason_code": "NONE", "accepted_pallets": 1}
SUBMIT_OK = {"role": "assistant", "content": "<tool_call>" + json.dumps({"name": "submit_answer", "arguments": VALID})
             + "</tool_call>"}
CHAT = [{"role": "user", "content": "hi"}]
VLLM_TOOLS_400 = ('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')


def model(server: FaultServer, **kwargs) -> OpenAIChatModel:
    settings = {"initial_backoff_s": 0.01, "max_backoff_s": 0.05, "server_wait_s": 5.0, "request_timeout_s": 10.0,
                **kwargs}
    return OpenAIChatModel(OpenAIChatConfig(server.base_url, "m", **settings))


def run_wr(agent, episodes: int, concurrency: int = 1):
    pool = EnvPool(lambda env_id: gym.make(env_id, split="test"))
    try:
        return run_episodes(task_specs(WR, "test", episodes), agent, pool, concurrency=concurrency)
    finally:
        pool.close()


def sopgym_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "sopgym", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


@pytest.fixture
def server():
    with FaultServer() as s:
        s.default = ("reply", SUBMIT_OK, "stop", USAGE)
        yield s


def test_429_and_5xx_are_retried_until_the_answer(server):
    server.script = [("status", 429, {"error": {"message": "slow down"}}, {}), ("status", 503, {"error": {"message": "busy"}}, {})]
    (answer,) = model(server).complete_batch([ChatRequest(CHAT)])
    assert isinstance(answer, Completion) and answer.attempts == 3 and len(server.requests) == 3
    assert answer.message["content"] == SUBMIT_OK["content"]


def test_retry_after_is_honoured(server):
    server.script = [("status", 429, {"error": {"message": "slow down"}}, {"Retry-After": "1"})]
    model(server).complete_batch([ChatRequest(CHAT)])
    first, second = server.requests
    assert second["arrived"] - first["ended"] >= 0.9  # the backoff alone would wait at most 0.05 s


def test_a_request_that_keeps_failing_fails_only_its_episode_as_infrastructure(server):
    server.script = [("status", 500, {"error": {"message": "boom"}}, {})] * 3  # max_retries=2: three attempts, all 500
    results = run_wr(ChatAgent(model(server, max_retries=2)), episodes=2)
    first, second = results
    assert first.record["infrastructure_failure"] is True and first.record["truncation_cause"] == "inference"
    assert first.extra["failed_request"]["cause"] == "inference" and "HTTP 500" in first.extra["failed_request"]["message"]
    assert second.record["infrastructure_failure"] is False and second.score.completed
    metrics = evaluate_records([r.record for r in results], n_bootstrap=0)
    assert metrics["infrastructure_failure_rate"] == 0.5 and metrics["execution_completion_rate"] == 0.5


def test_a_context_length_error_ends_the_episode_as_the_policy_s(server):
    message = "This model's maximum context length is 2048 tokens. However, you requested 4096 tokens."
    server.script = [("status", 400, {"object": "error", "message": message, "type": "BadRequestError", "code": 400}, {})]
    (result,) = run_wr(ChatAgent(model(server)), episodes=1)
    assert result.record["truncation_cause"] == "context_budget" and result.record["infrastructure_failure"] is False
    assert len(server.requests) == 1  # not retried


def test_a_refusal_raises_with_the_server_message_and_is_not_retried(server):
    server.script = [("status", 400, {"object": "error", "message": VLLM_TOOLS_400, "type": "BadRequestError"}, {})]
    with pytest.raises(ServerRefused, match="--enable-auto-tool-choice") as info:
        model(server).complete_batch([ChatRequest(CHAT)])
    assert info.value.status_code == 400 and len(server.requests) == 1


def test_a_refusal_stops_sopgym_eval_and_resume_finishes_the_run(server, tmp_path):
    traj, out = tmp_path / "t.jsonl", tmp_path / "r.json"
    server.script = [("reply", SUBMIT_OK, "stop", USAGE),
                     ("status", 400, {"object": "error", "message": VLLM_TOOLS_400, "type": "BadRequestError"}, {})]
    args = ["eval", "--env", WR, "--policy", "openai", "--base-url", server.base_url, "--model", "m", "--episodes", "3",
            "--quiet", "--trajectories", str(traj), "--out", str(out)]
    first = sopgym_cli(*args)
    assert first.returncode == 1 and VLLM_TOOLS_400 in first.stderr and "--resume" in first.stderr
    stopped = json.loads(out.read_text())  # the results of the finished episode, marked as a stopped run
    assert stopped["run"]["status"] == "stopped" and stopped["run"]["episodes_finished"] == 1
    assert sum(json.loads(line)["type"] == "episode" for line in traj.read_text().splitlines()) == 1
    posts = len(server.requests)
    second = sopgym_cli(*args, "--resume")
    assert second.returncode == 0, second.stderr
    assert "1 episodes finished, 2 to run" in second.stderr
    assert len(server.requests) - posts == 2  # only the two missing episodes were asked for
    results = json.loads(out.read_text())
    assert results["envs"][WR]["episodes"] == 3 and results["config"]["resumed_episodes"] == 1


def test_an_abandoned_stream_is_closed_before_its_retry_is_sent(server):
    server.script = [("trickle", 5.0)]
    client = model(server, request_timeout_s=0.5, initial_backoff_s=0.3, max_backoff_s=0.3)
    (answer,) = client.complete_batch([ChatRequest(CHAT)])
    assert isinstance(answer, Completion) and answer.attempts == 2
    first, second = server.requests
    assert first["closed_early"] and first["ended"] <= second["arrived"]
    assert server.max_in_flight == 1


def test_a_hanging_request_times_out_and_is_retried(server):
    server.script = [("hang", 3.0)]
    started = time.monotonic()
    (answer,) = model(server, request_timeout_s=0.5, stream=False).complete_batch([ChatRequest(CHAT)])
    assert isinstance(answer, Completion) and answer.attempts == 2
    assert time.monotonic() - started < 3.0  # the second attempt did not wait for the first


def test_requests_that_time_out_every_time_end_as_infrastructure_failures(server):
    server.default = ("hang", 2.0)
    (answer,) = model(server, request_timeout_s=0.3, stream=False, max_retries=1).complete_batch([ChatRequest(CHAT)])
    assert isinstance(answer, RequestFailed) and answer.cause == "inference" and "timed out" in answer.message


def test_the_client_waits_for_a_server_that_starts_late():
    port = free_port()
    config = OpenAIChatConfig(f"http://127.0.0.1:{port}/v1", "m", server_wait_s=20.0, initial_backoff_s=0.01)
    client = OpenAIChatModel(config)
    holder = {}

    def start_later():
        time.sleep(1.5)
        holder["server"] = FaultServer(port).__enter__()
        holder["server"].default = ("reply", SUBMIT_OK, "stop", USAGE)

    thread = threading.Thread(target=start_later)
    thread.start()
    try:
        (answer,) = client.complete_batch([ChatRequest(CHAT)])
        assert isinstance(answer, Completion)
    finally:
        thread.join()
        holder["server"].__exit__()


def test_a_server_that_never_answers_stops_the_run_naming_the_wait():
    client = OpenAIChatModel(OpenAIChatConfig(f"http://127.0.0.1:{free_port()}/v1", "m", server_wait_s=1.0))
    with pytest.raises(ServerRefused, match="did not answer GET /models within 1 s"):
        client.wait_until_ready()


def test_a_refused_key_stops_at_once_naming_the_variable(server):
    server.models_status = 401
    started = time.monotonic()
    with pytest.raises(ServerRefused, match=r"API key from \$OPENAI_API_KEY"):
        model(server, server_wait_s=30.0).wait_until_ready()
    assert time.monotonic() - started < 10


def test_the_api_key_comes_from_the_environment_and_is_never_written(server, tmp_path):
    secret = "sk-test-4c1d2e3f-never-write-me"
    traj, out = tmp_path / "t.jsonl", tmp_path / "r.json"
    done = sopgym_cli("eval", "--env", WR, "--policy", "openai", "--base-url", server.base_url, "--model", "m",
                      "--api-key-env", "SOPGYM_TEST_KEY", "--episodes", "1", "--quiet", "--trajectories", str(traj),
                      "--out", str(out), env={"SOPGYM_TEST_KEY": secret})
    assert done.returncode == 0, done.stderr
    headers = {key.lower(): value for key, value in server.requests[-1]["headers"].items()}
    assert headers["authorization"] == f"Bearer {secret}"
    for path in (traj, out):
        assert secret not in path.read_text()
    server_config = json.loads(out.read_text())["config"]["agent"]["server"]
    assert server_config["api_key_env"] == "SOPGYM_TEST_KEY" and server_config["api_key_set"] is True


def test_concurrency_bounds_the_requests_in_flight(server):
    server.default = ("reply", SUBMIT_OK, "stop", USAGE, 0.3)
    results = run_wr(ChatAgent(model(server, max_concurrency=2)), episodes=6, concurrency=4)
    assert all(r.score.completed for r in results)
    assert server.max_in_flight == 2


def test_sampling_settings_reach_the_request_and_seeds_differ_between_samples(server):
    client = model(server, stop=("</tool_call>",), tool_choice="auto", chat_template_kwargs={"enable_thinking": False},
                   extra_body={"top_k": 5}, max_tokens=33, temperature=0.7, top_p=0.9)
    pool = EnvPool(lambda env_id: gym.make(env_id, split="test"))
    run_episodes(task_specs(WR, "test", 1, samples_per_task=2), ChatAgent(client, seed=3), pool)
    pool.close()
    first, second = (r["body"] for r in server.requests)
    for body in (first, second):
        assert (body["stop"], body["tool_choice"], body["chat_template_kwargs"], body["top_k"]) == (
            ["</tool_call>"], "auto", {"enable_thinking": False}, 5)
        assert (body["max_tokens"], body["temperature"], body["top_p"]) == (33, 0.7, 0.9)
        assert body["tools"][-1]["function"]["name"] == "submit_answer"
    assert isinstance(first["seed"], int) and first["seed"] != second["seed"]


def test_native_tool_calls_are_run_and_sent_back_in_native_form(server):
    call = {"id": "call_x", "type": "function",
            "function": {"name": "get_shipment", "arguments": json.dumps({"shipment_id": "SHP-123456"})}}
    server.script = [("reply", {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls", USAGE)]
    (result,) = run_wr(ChatAgent(model(server)), episodes=1)
    first_turn = result.turns[0]
    assert isinstance(first_turn.action, dict) and first_turn.calls[0]["name"] == "get_shipment"
    assert first_turn.turn_status in ("OK", "ERROR_TOOL")  # a well-formed call, whatever the tool said
    history = server.requests[1]["body"]["messages"]
    assistant = next(m for m in history if m["role"] == "assistant")
    assert assistant["tool_calls"][0]["function"]["name"] == "get_shipment" and not assistant.get("content")
    tool = next(m for m in history if m["role"] == "tool")
    assert tool["tool_call_id"] == assistant["tool_calls"][0]["id"]


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "get_shipment", "arguments": {"shipment_id": "SHP-1"}}</tool_call>',
    '{"name": "get_shipment", "arguments": {"shipment_id": "SHP-1"}}',
])
def test_tool_calls_written_as_text_are_run(server, text):
    server.script = [("reply", {"role": "assistant", "content": text}, "stop", USAGE)]
    (result,) = run_wr(ChatAgent(model(server), tools_mode="prompt"), episodes=1)
    assert result.turns[0].calls[0]["name"] == "get_shipment"
    history = server.requests[1]["body"]
    assert "tools" not in history and "<tools>" in history["messages"][0]["content"]
    assert history["messages"][2] == {"role": "assistant", "content": text}
    assert history["messages"][3]["role"] == "user" and history["messages"][3]["content"].startswith("<tool_response>")


def test_turns_cut_by_max_tokens_are_visible_per_turn_and_in_the_totals(server):
    server.script = [("reply", {"role": "assistant", "content": "I will look"}, "length", USAGE)]
    (result,) = run_wr(ChatAgent(model(server)), episodes=1)
    assert result.extra["turns"][0]["finish_reason"] == "length"
    assert result.extra["model"]["max_tokens_cuts"] == 1
    assert result.extra["model"]["prompt_tokens"] == USAGE["prompt_tokens"] * len(result.turns)


def test_a_base_url_without_a_host_is_refused_when_configured():
    # http://:8000/v1 has a netloc but no host: it passed the check and public() (the URL as stored in the
    # results) then raised TypeError on None + str (found by mypy).
    with pytest.raises(ValueError, match="base_url must be an http"):
        OpenAIChatConfig("http://:8000/v1", "m")


def test_the_stored_base_url_keeps_the_brackets_of_an_ipv6_host():
    # public() rebuilt the netloc from parsed.hostname, which drops the brackets: http://::1:8000/v1 is
    # not a URL of the same server.
    stored = OpenAIChatConfig("http://user:secret@[::1]:8000/v1?key=x", "m").public()["base_url"]
    assert stored == "http://[::1]:8000/v1"
