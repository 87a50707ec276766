"""A tiny causal LM and its tokenizer, built offline from the envs' own text: the model of the CPU launch recipes.

The libraries' CPU recipes and the documented examples need a model that loads from a local folder
without a hub download and steps in seconds on CPU. This builds one: a byte-level BPE tokenizer
trained on the envs' prompts and oracle episodes (so SOPs, tool calls and tool results tokenise
compactly) with a chat template, and a randomly initialised Qwen2 model of a few thousand
parameters per layer, both saved with ``save_pretrained`` so that ``from_pretrained(folder)`` (TRL's
``model="folder"``, verl's ``actor_rollout_ref.model.path``, SkyRL's ``trainer.policy.model.path``)
loads them. It learns nothing useful by itself; it makes the libraries' own loops run end to end.

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

__all__ = ["CHAT_TEMPLATES", "build_tiny_model", "main"]

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
