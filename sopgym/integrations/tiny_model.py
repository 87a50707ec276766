"""A tiny causal LM and its tokenizer, built offline from the envs' own text: the model of the CPU launch recipes.

The libraries' CPU recipes and the documented examples need a model that loads from a local folder
without a hub download and steps in seconds on CPU. This builds one: a byte-level BPE tokenizer
trained on the envs' prompts and oracle episodes (so SOPs, tool calls and tool results tokenise
compactly) with a chat template, and a randomly initialised Qwen2 model of a few thousand
parameters per layer, both saved with ``save_pretrained`` so that ``from_pretrained(folder)`` (TRL's
``model="folder"``, verl's ``actor_rollout_ref.model.path``, SkyRL's ``trainer.policy.model.path``)
loads them. Untrained it writes no tool call, so every episode of a GRPO group scores the same and
the libraries' updates are zero: :func:`warm_start` first trains it with sopgym's own SFT
(:func:`sopgym.trainers.sft.train_sft`) on the oracle's episodes of TRAIN-split tasks, after which
its replies are calls of the right tool, some well formed (the groups' rewards differ, so GRPO updates it).

Chat templates: ``sopgym`` (ChatML with the tool block in the system turn, what sopgym's trainer
uses) or ``trl-qwen2.5`` (TRL's own copy of Qwen2.5's template, which TRL recognises and parses
tool calls for, needed by ``environment_factory``; read from the installed ``trl``).

Command line::

    python -m sopgym.integrations.tiny_model OUT_DIR --env sopgym/WarehouseReceiving-v0 [--chat-template trl-qwen2.5]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

__all__ = ["CHAT_TEMPLATES", "WARM_START_KEYS", "build_tiny_model", "warm_start", "main"]

CHAT_TEMPLATES = ("sopgym", "trl-qwen2.5")


def _chat_template(name: str) -> str | None:
    if name == "sopgym":
        return None  # build_bpe_tokenizer's own
    if name == "trl-qwen2.5":
        from importlib.resources import files

        return (files("trl") / "chat_templates" / "qwen2_5.jinja").read_text()
    raise ValueError(f"chat_template must be one of {CHAT_TEMPLATES}, got {name!r}")


def _texts(env_ids: Sequence[str], num_tasks: int) -> list[str]:
    """The prompts of ``num_tasks`` train tasks per env and the oracle's episodes of them."""
    import gymnasium as gym

    import sopgym  # noqa: F401  (registers the ids)
    from sopgym.envs.policies import make_policy
    from sopgym.episodes.runner import run_episode

    from ._common import task_rows

    texts = []
    for env_id in env_ids:
        env = gym.make(env_id)
        try:
            for row in task_rows(env_id, "train", num_tasks):
                result = run_episode(env, make_policy("oracle"), seed=row["seed"],
                                     options={"split": row["split"], "task_index": row["task_index"]})
                texts += [str(m.get("content") or "") for m in result.messages]
                texts += [t.action for t in result.turns if isinstance(t.action, str)]
        finally:
            env.close()
    return texts


def build_tiny_model(out_dir: str | Path, env_ids: Sequence[str], *, chat_template: str = "sopgym", num_tasks: int = 4,
                     vocab_size: int = 1200, hidden_size: int = 32, num_layers: int = 1, max_positions: int = 16384,
                     seed: int = 0) -> Path:
    """Build and save a tiny Qwen2 model and its tokenizer in ``out_dir``; returns the folder.

    Args:
        out_dir: where ``config.json``, the weights and the tokenizer files go.
        env_ids: the envs whose text trains the tokenizer.
        chat_template: ``sopgym`` or ``trl-qwen2.5`` (see the module doc).
        num_tasks: train tasks per env whose prompts and oracle episodes are the tokenizer's corpus.
        vocab_size, hidden_size, num_layers, max_positions: the model's size (attention: 2 heads, 1 KV head).
        seed: the weights' initialisation seed.

    Raises:
        ValueError: an unknown chat template or no env id.
    """
    if not env_ids:
        raise ValueError("expected at least one env id, got none")
    template = _chat_template(chat_template)
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from sopgym.trainers.tokenizer import build_bpe_tokenizer

    tok = build_bpe_tokenizer(_texts(env_ids, num_tasks) * 2, vocab_size=vocab_size)
    if template is not None:
        tok.chat_template = template
    tok.padding_side = "left"
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=num_layers, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=max_positions, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id, bos_token_id=None, tie_word_embeddings=True)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


#: The settings of :func:`warm_start` (a launch recipe's ``warm_start`` section), with their defaults.
WARM_START_KEYS = {"demonstrations": 32, "short_context_steps": 200, "steps": 75, "batch_episodes": 2,
                   "short_context_batch_episodes": 8, "learning_rate": 1.0e-2, "seed": 0}


def warm_start(model_dir: str | Path, out_dir: str | Path, env_ids: Sequence[str], *, env_kwargs=None,
               **settings) -> dict:
    """Supervised warm start of a model folder on the oracle's episodes of TRAIN-split tasks, saved in ``out_dir``.

    The demonstrations are sopgym's (:func:`~sopgym.trainers.sft.collect_trajectories` of the oracle on
    :func:`~sopgym.trainers.sft.demonstration_specs`: train-split tasks with seeds of their own, never a
    rollout's) rendered through the folder's chat template with the env's tool schemas, the prompt the
    adapters give the model; :func:`~sopgym.trainers.sft.train_sft` trains on their assistant tokens:
    ``short_context_steps`` steps of ``short_context_batch_episodes`` demonstrations without the system
    turn (the SOP and the schemas: cheap steps that teach the calls), then ``steps`` steps of
    ``batch_episodes`` whole ones (the prompt as the libraries send it), AdamW at ``learning_rate``
    decaying to a fifth. ``out_dir`` gets the model, the tokenizer and ``warm_start.json`` (the settings,
    the demonstrations used, the first and last losses, the seconds taken).

    Args:
        model_dir: a folder ``from_pretrained`` loads (e.g. :func:`build_tiny_model`'s).
        out_dir: where the warm-started model goes.
        env_ids: the envs whose demonstrations train it.
        env_kwargs: ``gymnasium.make`` keyword arguments of the envs.
        **settings: :data:`WARM_START_KEYS`.

    Raises:
        ValueError: an unknown setting, or no demonstration fits (see ``select_demonstrations``).
    """
    unknown = set(settings) - set(WARM_START_KEYS)
    if unknown:
        raise ValueError(f"unknown warm_start settings {sorted(unknown)}; expected some of {sorted(WARM_START_KEYS)}")
    opts = {**WARM_START_KEYS, **settings}
    import json
    import time

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sopgym.episodes.pools import EnvPool
    from sopgym.trainers import attention
    from sopgym.trainers.config import SFTConfig
    from sopgym.trainers.optimise import StepSettings
    from sopgym.trainers.sft import (
        collect_trajectories,
        default_oracle,
        demonstration_specs,
        select_demonstrations,
        short_context_episodes,
        train_sft,
    )

    from ._common import make_env

    start = time.perf_counter()
    backend = "sdpa_varlen"  # sopgym's packed attention on CPU (attention.select_backend's choice there)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                 attn_implementation=attention.HF_IMPLEMENTATION[backend])
    pool = EnvPool(lambda env_id: make_env(env_id, env_kwargs))
    try:
        specs = demonstration_specs(list(env_ids), "train", int(opts["seed"]), int(opts["demonstrations"]))
        trajectories = collect_trajectories(pool, specs, default_oracle)
    finally:
        pool.close()
    max_context = int(model.config.max_position_embeddings)
    episodes, stats = select_demonstrations(tok, trajectories, int(opts["demonstrations"]), max_context)
    short = short_context_episodes(tok, trajectories, episodes)
    sft = SFTConfig(num_episodes=int(opts["demonstrations"]), lr=float(opts["learning_rate"]),
                    batch_episodes=int(opts["batch_episodes"]), whole_steps=int(opts["steps"]),
                    short_context_steps=int(opts["short_context_steps"]),
                    short_context_batch_episodes=int(opts["short_context_batch_episodes"]))
    step = StepSettings(loss="sft", temperature=1.0, aggregation="token", row_tokens=max(len(ep.ids) for ep in episodes))
    history = train_sft(model, episodes, sft, settings=step, backend=backend,
                        generator=torch.Generator().manual_seed(int(opts["seed"])), tokenizer=tok, short_episodes=short)
    model.config._attn_implementation = "sdpa"  # the libraries load it with transformers' own attention
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    whole = [h["loss"] for h in history if not h["short_context"]]
    summary = {"from": str(model_dir), "env_ids": list(env_ids), "settings": opts,
               "demonstrations_used": int(stats["sft/demos_used"]), "first_loss": history[0]["loss"],
               "last_short_context_loss": next((h["loss"] for h in reversed(history) if h["short_context"]), None),
               "first_whole_loss": whole[0] if whole else None, "last_loss": history[-1]["loss"],
               "seconds": time.perf_counter() - start}
    (out / "warm_start.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sopgym.integrations.tiny_model", description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--env", action="append", required=True, help="an env id (repeatable)")
    parser.add_argument("--chat-template", default="sopgym", choices=CHAT_TEMPLATES)
    parser.add_argument("--num-tasks", type=int, default=4)
    args = parser.parse_args(argv)
    print(build_tiny_model(args.out_dir, args.env, chat_template=args.chat_template, num_tasks=args.num_tasks))


if __name__ == "__main__":
    main()
