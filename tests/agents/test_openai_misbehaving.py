"""The OpenAI-compatible client against servers that misbehave on purpose (a real HTTP server on
loopback, tests/agents/fault_server.py; no mock of openai or its HTTP library): deadlines that hold
whatever the server sends, a malformed answer as one failed attempt, the reply byte cap, usage
counts checked before they are summed."""

from __future__ import annotations

import json
import logging
import time

import pytest

from sopgym.agents.chat import ChatAgent, ChatRequest, Completion, RequestFailed, ServerRefused

from .fault_server import USAGE, FaultServer
from .needs import require
from .test_openai_faults import CHAT, SUBMIT_OK, model, run_wr

require("openai")

DEADLINE_S = 1.0


@pytest.fixture
def server():
    with FaultServer() as s:
        s.default = ("reply", SUBMIT_OK, "stop", USAGE)
        yield s


def chunk(delta, finish=None, **extra) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [choice],
                       **extra})


def body(message, finish="stop", **extra) -> str:
    return json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                       "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": USAGE, **extra})


GOOD_STREAM = [chunk({"role": "assistant", "content": SUBMIT_OK["content"]}), chunk({}, "stop"), "[DONE]"]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_shipment", "arguments": '{"shipment_id": "S"}'}}
HUGE = "9" * 5000


# --------------------------------------------------------------------------------------------------
# A request deadline that is a deadline
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("behaviour, stream", [
    (("keepalive", 20.0), True),      # `: keepalive` comments every 0.5 s, never an event
    (("noise", 20.0), True),          # a byte every 0.05 s that never forms an event
    (("drip", 20.0), False),          # a whole body dripped a byte at a time (--no-stream)
    (("drip_headers", 20.0), True),   # the status line and headers dripped a byte at a time
    (("trickle", 20.0), True),        # empty deltas every 0.1 s
], ids=["sse-keepalive", "bytes-never-an-event", "dripped-body", "dripped-headers", "empty-deltas"])
def test_an_attempt_ends_by_its_deadline_whatever_the_server_sends(server, behaviour, stream):
    server.default = behaviour
    client = model(server, request_timeout_s=DEADLINE_S, stream=stream, max_retries=1)
    started = time.monotonic()
    (answer,) = client.complete_batch([ChatRequest(CHAT)])
    elapsed = time.monotonic() - started
    assert isinstance(answer, RequestFailed) and answer.cause == "inference" and "deadline" in answer.message
    assert answer.attempts == 2 and len(server.requests) == 2
    assert elapsed < 2 * DEADLINE_S + 1.5, f"two attempts of {DEADLINE_S} s took {elapsed:.1f} s"
    first, second = server.requests
    assert first["closed_early"] and first["ended"] <= second["arrived"]  # the retry came after the hang-up


def test_a_deadline_failure_ends_only_its_episode_and_the_run_goes_on(server):
    server.script = [("keepalive", 20.0)] * 2  # both attempts of the first episode's first turn
    results = run_wr(ChatAgent(model(server, request_timeout_s=DEADLINE_S, max_retries=1)), episodes=2)
    first, second = results
    assert first.record["infrastructure_failure"] is True and first.record["truncation_cause"] == "inference"
    assert "deadline" in first.extra["failed_request"]["message"]
    assert second.score.completed


def test_a_dripped_models_listing_does_not_hold_the_start_up_wait_past_server_wait(server):
    server.models_drip_s = 20.0
    client = model(server, server_wait_s=1.5)
    started = time.monotonic()
    with pytest.raises(ServerRefused, match="did not answer GET /models within 1.5 s"):
        client.wait_until_ready()
    assert time.monotonic() - started < 1.5 + 1.0


def test_a_dripped_models_listing_does_not_hold_the_wait_after_a_timeout(server):
    server.script = [("keepalive", 20.0)]
    client = model(server, request_timeout_s=DEADLINE_S, server_wait_s=1.5)
    client.wait_until_ready()
    server.models_drip_s = 20.0  # from now on the health check after the timeout drips
    started = time.monotonic()
    (answer,) = client.complete_batch([ChatRequest(CHAT)])
    assert isinstance(answer, RequestFailed) and "did not answer again within 1.5 s" in answer.message
    assert time.monotonic() - started < DEADLINE_S + 1.5 + 1.0


def test_a_stopped_run_ends_requests_in_flight_at_once(server):
    server.default = ("keepalive", 20.0)
    client = model(server, request_timeout_s=30.0)
    client.wait_until_ready()
    future = client._pool.submit(client._complete, ChatRequest(CHAT))
    time.sleep(0.5)
    started = time.monotonic()
    client.close()
    with pytest.raises(Exception, match="the run stopped"):
        future.result(timeout=5)
    assert time.monotonic() - started < 1.0


# --------------------------------------------------------------------------------------------------
# One bad answer is one failed attempt
# --------------------------------------------------------------------------------------------------
MALFORMED = {
    "body-choices-empty": (("body", json.dumps({"id": "c", "object": "chat.completion", "choices": []})), False,
                           "no choice"),
    "body-invalid-json": (("body", '{"id": "c", "choices": [{"index": 0, "message": {"content": "x"'), False,
                          "not valid JSON"),
    "body-html": (("body", "<html><body>502 Bad Gateway</body></html>"), False, "not valid JSON"),
    "body-nested-200000-deep": (("body", "[" * 200_000 + "]" * 200_000), False, "nested too deep"),
    "body-function-as-string": (("body", body({"role": "assistant", "content": None,
                                              "tool_calls": [{"id": "a", "type": "function", "function": "submit_answer"}]})),
                                False, "function is str"),
    "body-choice-index-3": (("body", body(SUBMIT_OK).replace('"index": 0', '"index": 3')), False, "index is 3"),
    "body-5000-digit-choice-index": (("body", body(SUBMIT_OK).replace('"index": 0', f'"index": {HUGE}')), False,
                                     "an integer of 5000 digits"),
    "body-error-object": (("body", json.dumps({"error": {"message": "model crashed"}})), False, "model crashed"),
    "stream-invalid-json-chunk": (("sse", [chunk({"content": "x"}), '{"choices": [{"index": 0, "delta": {"content": "y"'
                                           , "[DONE]"]), True, "not valid JSON"),
    "stream-choices-empty-only": (("sse", [json.dumps({"choices": []}), "[DONE]"]), True, "carried no choice"),
    "stream-function-as-string": (("sse", [chunk({"tool_calls": [{"index": 0, "id": "a", "function": "submit_answer"}]}),
                                           chunk({}, "tool_calls"), "[DONE]"]), True, "function is str"),
    "stream-tool-call-index-7": (("sse", [chunk({"tool_calls": [{"index": 7, "id": "a", "function": CALL["function"]}]}),
                                          chunk({}, "tool_calls"), "[DONE]"]), True, "index is 7"),
    "stream-choice-index-3": (("sse", [chunk({"content": "x"}).replace('"index": 0', '"index": 3'), "[DONE]"]), True,
                              "index is 3"),
    "stream-5000-digit-tool-call-index": (("sse", [chunk({"tool_calls": [{"index": 0, "function": CALL["function"]}]})
                                                   .replace('"index": 0, "function"', f'"index": {HUGE}, "function"'),
                                                   "[DONE]"]), True, "an integer of 5000 digits"),
    "stream-delta-a-string": (("sse", [chunk("hello"), "[DONE]"]), True, "delta is str"),
    "stream-error-event": (("sse", [chunk({"content": "x"}), json.dumps({"error": {"message": "engine died"}})]), True,
                           "engine died"),
    "stream-cut-short": (("sse", [chunk({"role": "assistant", "content": "I will"})]), True, "cut short"),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_a_malformed_answer_is_a_failed_attempt_retried_then_an_inference_failure(server, name):
    behaviour, stream, reason = MALFORMED[name]
    server.default = behaviour
    (answer,) = model(server, stream=stream, max_retries=2).complete_batch([ChatRequest(CHAT)])
    assert isinstance(answer, RequestFailed) and answer.cause == "inference"
    assert answer.attempts == 3 and len(server.requests) == 3
    assert "malformed answer" in answer.message and reason in answer.message


@pytest.mark.parametrize("name", ["body-choices-empty", "stream-tool-call-index-7", "body-nested-200000-deep"])
def test_a_good_answer_after_a_malformed_one_is_used(server, name):
    behaviour, stream, _ = MALFORMED[name]
    server.script = [behaviour]
    (answer,) = model(server, stream=stream).complete_batch([ChatRequest(CHAT)])
    assert isinstance(answer, Completion) and answer.attempts == 2
    assert answer.message["content"] == SUBMIT_OK["content"]


TOLERATED = {
    # events without an answer in them are skipped, an empty delta is empty
    "ping-events": [json.dumps({"type": "ping"}), *GOOD_STREAM[:1], json.dumps({"type": "ping"}), *GOOD_STREAM[1:]],
    "delta-null": [GOOD_STREAM[0], chunk(None), chunk(None, "stop"), "[DONE]"],
    "5000-digit-created": [GOOD_STREAM[0].replace('"created": 0', f'"created": {HUGE}'), *GOOD_STREAM[1:]],
    "usage-only-chunk-and-null-usage": [chunk({"role": "assistant", "content": SUBMIT_OK["content"]}, usage=None),
                                        chunk({}, "stop"), json.dumps({"choices": [], "usage": USAGE}), "[DONE]"],
}


@pytest.mark.parametrize("name", TOLERATED)
def test_stream_events_that_carry_no_answer_do_not_fail_the_attempt(server, name):
    server.script = [("sse", TOLERATED[name])]
    (answer,) = model(server, max_retries=0).complete_batch([ChatRequest(CHAT)])
    assert isinstance(answer, Completion), answer
    assert answer.message["content"] == SUBMIT_OK["content"] and answer.finish_reason == "stop"


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_tool_calls_are_read_in_both_forms(server, stream):
    if stream:
        parts = [chunk({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                              "function": {"name": "get_shipment", "arguments": ""}}]}),
                 chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"shipment_id": '}}]}),
                 chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"S"}'}}]}),
                 chunk({"tool_calls": [{"index": 1, "id": "call_2", "function": {"name": "submit_answer", "arguments": "{}"}}]}),
                 chunk({}, "tool_calls"), "[DONE]"]
        server.script = [("sse", parts)]
    else:
        second = {"id": "call_2", "type": "function", "function": {"name": "submit_answer", "arguments": "{}"}}
        server.script = [("body", body({"role": "assistant", "content": None, "tool_calls": [CALL, second]}, "tool_calls"))]
    (answer,) = model(server, stream=stream).complete_batch([ChatRequest(CHAT)])
    assert answer.message["tool_calls"] == [
        CALL, {"id": "call_2", "type": "function", "function": {"name": "submit_answer", "arguments": "{}"}}]
    assert answer.finish_reason == "tool_calls"


# --------------------------------------------------------------------------------------------------
# Bounds on what a server can make us store
# --------------------------------------------------------------------------------------------------
BIG = 60 << 20


def test_a_60_mib_streamed_reply_is_cut_at_the_byte_cap_and_labelled(server):
    server.script = [("big", BIG)]
    started = time.monotonic()
    (answer,) = model(server).complete_batch([ChatRequest(CHAT)])
    assert time.monotonic() - started < 10
    assert isinstance(answer, Completion) and answer.truncated == "max_reply_bytes"
    assert len(answer.message["content"].encode()) == 1 << 20 and answer.finish_reason is None
    server.wait_idle()
    assert server.requests[0]["closed_early"]  # reading stopped at the cap: the rest was never sent


def test_a_60_mib_body_fails_its_attempts_without_being_read_whole(server):
    server.default = ("big", BIG)
    (answer,) = model(server, stream=False, max_reply_bytes=64 << 10, max_retries=1).complete_batch([ChatRequest(CHAT)])
    assert isinstance(answer, RequestFailed) and "passed" in answer.message and "--no-stream" in answer.message
    server.wait_idle()
    assert all(r["closed_early"] for r in server.requests)


def test_a_body_over_the_cap_but_within_the_wire_limit_is_cut_and_labelled(server):
    server.script = [("big", 256 << 10)]
    (answer,) = model(server, stream=False, max_reply_bytes=64 << 10).complete_batch([ChatRequest(CHAT)])
    assert answer.truncated == "max_reply_bytes" and len(answer.message["content"]) == 64 << 10


def test_a_cut_reply_is_labelled_in_the_record_and_bounds_the_next_request(server):
    cap = 256 << 10
    server.script = [("big", BIG)]
    (result,) = run_wr(ChatAgent(model(server, max_reply_bytes=cap)), episodes=1)
    assert result.extra["turns"][0]["truncated"] == "max_reply_bytes"
    assert result.extra["model"]["reply_byte_cuts"] == 1
    assert all(t["truncated"] is None for t in result.extra["turns"][1:])
    next_request = json.dumps(server.requests[1]["body"]).encode()
    assert cap < len(next_request) < cap + (64 << 10)  # the history carries the cut reply, not 60 MiB


BAD_COUNTS = {"NaN": "NaN", "Infinity": "Infinity", "negative": "-5", "fraction": "11.5", "string": '"11"',
              "absurd": "1000000000000", "5000-digit": HUGE, "true": "true"}


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
@pytest.mark.parametrize("bad", BAD_COUNTS)
def test_a_usage_count_that_is_not_a_sane_integer_is_recorded_as_missing_with_a_warning(server, bad, stream, caplog):
    usage = f'{{"prompt_tokens": {BAD_COUNTS[bad]}, "completion_tokens": 7, "total_tokens": 18}}'
    if stream:
        server.script = [("sse", [*GOOD_STREAM[:2], f'{{"choices": [], "usage": {usage}}}', "[DONE]"])]
    else:
        server.script = [("body", body(SUBMIT_OK).replace(json.dumps(USAGE), usage))]
    with caplog.at_level(logging.WARNING, logger="sopgym.agents.openai_chat"):
        (answer,) = model(server, stream=stream).complete_batch([ChatRequest(CHAT)])
    assert isinstance(answer, Completion) and answer.attempts == 1
    assert answer.prompt_tokens is None and answer.completion_tokens == 7
    assert len(answer.usage_warnings) == 1 and "usage.prompt_tokens" in answer.usage_warnings[0]
    assert any("usage.prompt_tokens" in r.getMessage() for r in caplog.records)


def test_dropped_usage_is_never_summed_into_totals_or_cost(server):
    from sopgym.agents.chat import Prices

    nan = body(SUBMIT_OK).replace('"prompt_tokens": 11', '"prompt_tokens": NaN')
    server.script = [("body", nan)]
    (result,) = run_wr(ChatAgent(model(server, stream=False), prices=Prices(1.0, 2.0)), episodes=1)
    turn = result.extra["turns"][0]
    assert turn["prompt_tokens"] is None and "nan" in turn["usage_warnings"][0]
    totals = result.extra["model"]
    assert totals["prompt_tokens"] is None and totals["cost_usd"] is None
    assert totals["completion_tokens"] == USAGE["completion_tokens"] * len(result.extra["turns"])


# --------------------------------------------------------------------------------------------------
# sopgym eval end to end
# --------------------------------------------------------------------------------------------------
def test_sopgym_eval_goes_on_past_malformed_answers_and_records_why(server, tmp_path):
    from .test_openai_faults import WR, sopgym_cli

    traj, out = tmp_path / "t.jsonl", tmp_path / "r.json"
    server.script = [MALFORMED["stream-tool-call-index-7"][0]] * 2  # both attempts of episode 0's first turn
    done = sopgym_cli("eval", "--env", WR, "--policy", "openai", "--base-url", server.base_url, "--model", "m",
                      "--episodes", "2", "--quiet", "--max-retries", "1", "--trajectories", str(traj), "--out", str(out))
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text())
    metrics = results["envs"][WR]
    assert metrics["infrastructure_failure_rate"] == 0.5 and metrics["usage"]["failed_requests"]["inference"] == 1
    episodes = [json.loads(line) for line in traj.read_text().splitlines() if '"type": "episode"' in line]
    failed = next(e for e in episodes if e["episode_index"] == 0)["extra"]["failed_request"]
    assert "malformed answer" in failed["message"] and "index is 7" in failed["message"]


def test_sopgym_eval_ends_its_start_up_wait_by_server_wait(server, tmp_path):
    from .test_openai_faults import WR, sopgym_cli

    server.models_drip_s = 60.0
    started = time.monotonic()
    done = sopgym_cli("eval", "--env", WR, "--policy", "openai", "--base-url", server.base_url, "--model", "m",
                      "--episodes", "1", "--quiet", "--server-wait", "1", "--out", str(tmp_path / "r.json"))
    assert done.returncode == 1 and "did not answer GET /models within 1 s" in done.stderr
    assert time.monotonic() - started < 30  # the process's start-up included; the wait itself is 1 s
    assert server.models_requests >= 1


# --------------------------------------------------------------------------------------------------
# Finished work is never lost
# --------------------------------------------------------------------------------------------------
def _episodes_in(path) -> int:
    return sum('"type": "episode"' in line for line in path.read_text().splitlines()) if path.exists() else 0


def test_a_stopped_run_without_trajectories_keeps_its_results_and_trajectory_and_resume_finishes_it(server, tmp_path):
    from .test_openai_faults import VLLM_TOOLS_400, WR, sopgym_cli

    out = tmp_path / "r.json"
    server.script = [("reply", SUBMIT_OK, "stop", USAGE),
                     ("status", 400, {"object": "error", "message": VLLM_TOOLS_400, "type": "BadRequestError"}, {})]
    args = ["eval", "--env", WR, "--policy", "openai", "--base-url", server.base_url, "--model", "m", "--episodes", "3",
            "--quiet", "--max-reply-bytes", "4096", "--out", str(out)]
    first = sopgym_cli(*args)
    assert first.returncode == 1 and "--resume" in first.stderr
    trajectories = tmp_path / "r.trajectories.jsonl"
    assert _episodes_in(trajectories) == 1 and str(trajectories) in first.stderr
    stopped = json.loads(out.read_text())
    assert stopped["run"] == {"status": "stopped", "episodes_finished": 1, "episodes_planned": 3,
                              "trajectories": str(trajectories)}
    assert stopped["envs"][WR]["episodes"] == 1 and stopped["config"]["agent"]["server"]["max_reply_bytes"] == 4096
    posts = len(server.requests)
    second = sopgym_cli(*args, "--resume")
    assert second.returncode == 0, second.stderr
    assert len(server.requests) - posts == 2  # only the missing episodes were asked for
    results = json.loads(out.read_text())
    assert results["run"]["status"] == "finished" and results["envs"][WR]["episodes"] == 3
    assert results["config"]["resumed_episodes"] == 1


def test_a_killed_run_leaves_valid_files_and_resume_finishes_it_as_if_never_killed(server, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from .test_openai_faults import WR, sopgym_cli

    server.default = ("reply", SUBMIT_OK, "stop", USAGE, 0.6)
    out, trajectories = tmp_path / "r.json", tmp_path / "r.trajectories.jsonl"
    args = ["eval", "--env", WR, "--policy", "openai", "--base-url", server.base_url, "--model", "m", "--episodes", "4",
            "--quiet", "--n-bootstrap", "0", "--out", str(out)]
    process = subprocess.Popen([sys.executable, "-m", "sopgym", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 120
        while _episodes_in(trajectories) < 2 and time.monotonic() < end and process.poll() is None:
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait()
    assert 2 <= _episodes_in(trajectories) < 4
    partial = json.loads(out.read_text())  # a whole JSON document, whenever the kill came
    assert partial["run"]["status"] == "running" and 1 <= partial["run"]["episodes_finished"] < 4
    resumed = sopgym_cli(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    results = json.loads(out.read_text())
    assert results["run"]["status"] == "finished" and results["config"]["resumed_episodes"] >= 2
    whole_out = tmp_path / "whole.json"
    whole = sopgym_cli(*args[:-1], str(whole_out))
    assert whole.returncode == 0, whole.stderr
    drop = ("usage",)
    assert ({k: v for k, v in results["envs"][WR].items() if k not in drop}
            == {k: v for k, v in json.loads(whole_out.read_text())["envs"][WR].items() if k not in drop})


def test_a_model_run_without_out_writes_its_run_folder(server, tmp_path):
    import subprocess
    import sys

    from .test_openai_faults import WR

    done = subprocess.run([sys.executable, "-m", "sopgym", "eval", "--env", WR, "--policy", "openai", "--base-url",
                           server.base_url, "--model", "m", "--episodes", "2", "--quiet"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (folder,) = (tmp_path / "sopgym-runs").iterdir()
    assert f"sopgym-runs/{folder.name}/" in done.stderr
    assert json.loads((folder / "results.json").read_text())["run"]["status"] == "finished"
    assert _episodes_in(folder / "trajectories.jsonl") == 2
