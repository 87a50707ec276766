"""Tiny models and tokenizers built without any download."""

from __future__ import annotations

import functools

import torch

from sopgym.trainers.episodes import Episode, EpisodeBuilder
from sopgym.trainers.tokenizer import build_bpe_tokenizer

from . import fake_env


@functools.lru_cache(maxsize=1)
def tiny_tokenizer():
    texts = []
    for seed in range(20):
        env = fake_env.FakeSopEnv()
        _, info = env.reset(seed=seed)
        texts.extend(m["content"] for m in info["messages"])
        texts.append(fake_env.oracle_reply(info["messages"]))
        texts.append(fake_env.oracle_reply(info["messages"] + [{"role": "tool", "content": "red"}]))
    texts.append(str(fake_env.TOOLS))
    # Split tool tags: the learning test was tuned on this tokenizer (see docs/trainer.md).
    return build_bpe_tokenizer(texts * 3, vocab_size=400, atomic_tool_tags=False)


def tiny_model(tokenizer, dtype=torch.float32, attn="sdpa", seed=0, hidden=64, layers=2):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, attn_implementation=attn,
    )
    return LlamaForCausalLM(config).to(dtype)


def oracle_episode(tokenizer, seed: int, group_id: int = 0, advantage: float = 0.0) -> Episode:
    """A finished fake-env episode whose assistant turns are the oracle's (as if sampled)."""
    env = fake_env.FakeSopEnv()
    _, info = env.reset(seed=seed)
    ep = Episode(task_id=info["task_id"], group_id=group_id, seed=seed, env_id="fake", messages=list(info["messages"]), tools=info["tools"])
    b = EpisodeBuilder(tokenizer, ep)
    seen = len(info["messages"])
    while True:
        text = fake_env.oracle_reply(ep.messages)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        g = torch.Generator().manual_seed(seed * 7 + len(ep.ids))
        b.add_assistant(ids, (-torch.rand(len(ids), generator=g, dtype=torch.float64)).tolist())
        _, r, term, trunc, info = env.step(b.ep.messages[-1]["content"])
        ep.reward += r
        if term or trunc:
            b.close()
            break
        b.add_env_messages(info["messages"][seen + 1 :])
        seen = len(info["messages"])
    ep.advantage = advantage
    return ep


def fake_env_config(tok_dir: str, run_dir, *overrides: str):
    """A tiny from-scratch model training on the fake env (a few seconds a step on CPU); ``overrides``
    are ``key=value`` strings applied after these defaults."""
    from sopgym.trainers.config import load_config

    return load_config(None, [
        "env.env_ids=[sopgym-test/Fake-v0]", f"model.tokenizer={tok_dir}", "model.scratch_hidden_size=32",
        "model.scratch_num_layers=1", "model.scratch_intermediate_size=64", "env.max_context=512",
        "optim.row_tokens=1024", "rollout.max_new_tokens=24", "rollout.batch_size=2", "rollout.group_size=3",
        "optim.lr=1e-2", "eval_num_tasks=0", "progress=false", "plot=false", "tracking.enabled=false",
        f"run_dir={run_dir}", "device=cpu", *overrides,
    ])



def load_benchmark(name: str):
    """The module of ``benchmarks/<name>.py`` (benchmarks are scripts, not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
