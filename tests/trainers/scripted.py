"""Scripted replies on a real authored domain (``WarehouseReceiving``, one test task): the oracle's
replies, a small BPE over them, and a sampler that "samples" scripted replies in token space."""

from __future__ import annotations

import functools

import gymnasium as gym

import sopgym  # noqa: F401  (registers the envs)
from sopgym.envs.policies import make_policy
from sopgym.episodes.runner import run_episode
from sopgym.policy.hf import Sample
from sopgym.trainers.tokenizer import build_bpe_tokenizer

ENV = "sopgym/WarehouseReceiving-v0"
OPTIONS = {"split": "test", "task_index": 0}


@functools.lru_cache(maxsize=1)
def oracle_replies() -> list[str]:
    env = gym.make(ENV)
    try:
        return [turn.action for turn in run_episode(env, make_policy("oracle"), seed=0, options=OPTIONS).turns]
    finally:
        env.close()


@functools.lru_cache(maxsize=1)
def tokenizer():
    env = gym.make(ENV)
    _, info = env.reset(seed=0, options=OPTIONS)
    env.close()
    texts = [m["content"] for m in info["messages"]] + oracle_replies() + ["hello", "<tool_call>{bad json</tool_call>"]
    return build_bpe_tokenizer(texts * 2, vocab_size=600)


class ScriptedTokens:
    """Token-level ``policy.generate``: "samples" the next scripted reply's ids (plus end of turn), cut at the cap."""

    def __init__(self, tok, replies):
        self.tok, self.replies = tok, list(replies)

    def generate(self, prompts, caps, **_):
        assert len(prompts) == 1
        ids = self.tok(self.replies.pop(0), add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
        cut = ids[: caps[0]]
        return [Sample(cut, [-0.5] * len(cut), len(ids) > caps[0])]
