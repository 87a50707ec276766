"""The local Hugging Face chat model on a tiny model built here (no download): the prompt is the chat
template's, replies respect max_tokens and say when they were cut, a prompt the context cannot hold
ends its episode as the policy's, and tools go through the template only when it renders them."""

from __future__ import annotations

import functools

import gymnasium as gym
import pytest

from .needs import require

require("torch", "transformers")

import torch  # noqa: E402

import sopgym  # noqa: E402,F401 - registers the envs
from sopgym.agents.chat import ChatAgent, ChatRequest, RequestFailed  # noqa: E402
from sopgym.agents.hf_local import HFChatConfig, HFChatModel, template_renders_tools  # noqa: E402
from sopgym.episodes.pools import EnvPool  # noqa: E402
from sopgym.episodes.runner import run_episodes  # noqa: E402
from sopgym.episodes.specs import task_specs  # noqa: E402

WR = "sopgym/WarehouseReceiving-v0"


@functools.lru_cache(maxsize=1)
def tiny():
    from transformers import LlamaConfig, LlamaForCausalLM

    from sopgym.trainers.tokenizer import build_bpe_tokenizer

    env = gym.make(WR, split="test")
    _, info = env.reset(seed=0, options={"task_index": 0})
    env.close()
    texts = [m["content"] for m in info["messages"]] + [str(info["tools"])]
    tok = build_bpe_tokenizer(texts * 3, vocab_size=600)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return LlamaForCausalLM(config), tok


def chat_model(**kwargs) -> HFChatModel:
    model, tok = tiny()
    return HFChatModel(HFChatConfig("tiny", **{"max_tokens": 8, **kwargs}), model, tok)


def run(agent, max_turns=2):
    pool = EnvPool(lambda env_id: gym.make(env_id, split="test", max_turns=max_turns))
    try:
        return run_episodes(task_specs(WR, "test", 2), agent, pool, concurrency=2)
    finally:
        pool.close()


def test_a_template_that_renders_tools_is_detected():
    assert template_renders_tools(tiny()[1]) is True


def test_a_template_that_ignores_tools_is_detected():
    _, tok = tiny()
    original = tok.chat_template
    try:
        tok.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        assert template_renders_tools(tok) is False
        with pytest.raises(ValueError, match="ignores tools="):
            HFChatModel(HFChatConfig("tiny"), tiny()[0], tok).prompt_ids(ChatRequest([{"role": "user", "content": "u"}],
                                                                                        tools=[{"type": "function", "function": {"name": "f"}}]))
    finally:
        tok.chat_template = original


def test_the_prompt_is_the_chat_template_with_the_tools_and_the_generation_prompt():
    model = chat_model()
    env = gym.make(WR, split="test")
    _, info = env.reset(seed=0, options={"task_index": 0})
    env.close()
    ids = model.prompt_ids(ChatRequest(info["messages"], info["tools"]))
    text = model.tokenizer.apply_chat_template(info["messages"], tools=info["tools"], tokenize=False, add_generation_prompt=True)
    assert model.tokenizer.decode(ids) == text and "submit_answer" in text


def test_replies_respect_max_tokens_and_report_the_cut():
    results = run(ChatAgent(chat_model(max_tokens=8), tools_mode="native", history="text"))
    turns = [t for r in results for t in r.extra["turns"]]
    assert turns and all(t["completion_tokens"] <= 8 for t in turns)
    assert all((t["finish_reason"] == "length") == (t["completion_tokens"] == 8) for t in turns)
    assert all(t["prompt_tokens"] > 500 for t in turns)  # the SOP and the tools are in the prompt


def test_a_prompt_the_context_cannot_hold_ends_the_episode_as_the_policy_s():
    results = run(ChatAgent(chat_model(max_context=200), tools_mode="native", history="text"))
    for r in results:
        assert r.record["truncation_cause"] == "context_budget" and r.record["infrastructure_failure"] is False
        assert r.extra["failed_request"]["cause"] == "context_budget"


def test_greedy_batched_replies_equal_one_at_a_time():
    model = chat_model(max_tokens=6)
    env = gym.make(WR, split="test")
    requests = []
    for index in range(3):
        _, info = env.reset(seed=0, options={"task_index": index})
        requests.append(ChatRequest(info["messages"], info["tools"]))
    env.close()
    together = model.complete_batch(requests)
    alone = [model.complete_batch([r])[0] for r in requests]
    assert not any(isinstance(a, RequestFailed) for a in together)
    assert [a.message for a in together] == [a.message for a in alone]


def test_the_results_say_how_the_tools_reached_the_model():
    described = ChatAgent(chat_model(), tools_mode="native", history="text").describe()
    assert (described["policy"], described["tools_via"], described["template_renders_tools"]) == ("hf", "chat_template", True)
    assert ChatAgent(chat_model(), tools_mode="prompt").describe()["tools_via"] == "system_message"


def test_a_cached_rerun_generates_nothing_and_a_changed_setting_misses(tmp_path, monkeypatch):
    from sopgym.agents.response_cache import CachedChatModel, ResponseCache

    local = chat_model()
    calls = []
    generate = local.sampler.generate
    monkeypatch.setattr(local.sampler, "generate", lambda *a, **k: calls.append(len(a[0])) or generate(*a, **k))
    cached = CachedChatModel(local, ResponseCache(tmp_path))
    first = run(ChatAgent(cached, tools_mode="native", history="text"))
    generated = len(calls)
    again = run(ChatAgent(cached, tools_mode="native", history="text"))
    assert generated > 0 and len(calls) == generated  # not one generate call the second time
    assert [r.record for r in first] == [r.record for r in again]
    assert all(t["cached"] for r in again for t in r.extra["turns"])
    request = ChatRequest([{"role": "user", "content": "hi"}])
    keys = {str(m.cache_key(request)) for m in (local, chat_model(temperature=0.5), chat_model(max_tokens=9),
                                                 chat_model(top_p=0.9))}
    assert len(keys) == 4
    assert chat_model(device="cpu").cache_key(request) == local.cache_key(request)  # nor does naming the device
