"""Copying curves of a config's SFT warm start: teacher-forced accuracy on held-out oracle episodes every N steps.

Runs the SFT of ``sopgym train`` (the same demonstrations, seeds, tokenizer, model and ``train_sft``,
the short-context curriculum stage included) without RL, and every ``--every`` optimiser steps
measures on ``--tasks`` validation oracle episodes, with the oracle's replies as the teacher
(``probe_policy.teacher_forced``): the share of policy tokens the argmax predicts, the same for
tokens holding a digit (copied identifiers, dates, counts), digits after the first turn (copies
from tool results and the answer's count), whole first turns and whole episodes. Each figure is
given for the whole episode and for the episode without its system turn (what the short-context
stage trains on). Used to choose the CPU demo's recipe (docs/measurements.md, "The CPU demo").

    python scripts/sft_curves.py --config configs/demo-cpu.yaml --every 100 \\
        model.scratch_num_layers=3 sft.short_context_steps=800 sft.short_context_batch_episodes=8
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_policy import teacher_forced  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/demo-cpu.yaml")
    p.add_argument("--every", type=int, default=100, help="optimiser steps between measurements")
    p.add_argument("--tasks", type=int, default=32, help="validation tasks measured")
    p.add_argument("overrides", nargs="*", help="key=value config overrides")
    args = p.parse_args()

    from sopgym.episodes.factory import EnvFactory
    from sopgym.trainers import attention, sft
    from sopgym.trainers.config import load_config
    from sopgym.trainers.distributed import DataParallel
    from sopgym.trainers.modeling import DTYPES, load_model, load_tokenizer
    from sopgym.trainers.optimise import sft_settings
    from sopgym.trainers.rollout import EnvPool, group_spec_list

    cfg = load_config(args.config, args.overrides)
    torch.manual_seed(cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    env_kwargs = {"max_turns": cfg.env.max_turns, "max_tool_output_chars": cfg.env.max_tool_output_chars,
                  **cfg.env.env_kwargs, "max_context": None}
    pool = EnvPool(EnvFactory(env_kwargs))
    try:  # the seeds of loop.setup, then the held-out tasks of its evaluation
        train = sft.collect_trajectories(
            pool, sft.demonstration_specs(cfg.env.env_ids, cfg.env.train_split, cfg.seed, cfg.sft.num_episodes), sft.default_oracle)
        val = sft.collect_trajectories(pool, group_spec_list(cfg.env.env_ids, cfg.env.val_split, 0, args.tasks, 1), sft.default_oracle)
    finally:
        pool.close()
    tokenizer = load_tokenizer(cfg.model, None, sft.trajectory_texts(train))
    episodes, _ = sft.select_demonstrations(tokenizer, train, cfg.sft.num_episodes, cfg.env.max_context, cfg.sft.only_successful)
    short = sft.short_context_episodes(tokenizer, train, episodes) if cfg.sft.short_context_steps else None
    val_short = [sft.without_system_messages(t) for t in val]
    backend = attention.select_backend(cfg.model.attention, "cpu", DTYPES[cfg.model.dtype])
    lm = load_model(cfg.model, tokenizer, backend, torch.device("cpu"), seed=cfg.seed)
    print(f"{len(episodes)} demonstrations, {sum(p.numel() for p in lm.parameters()):,} parameters, "
          f"{cfg.sft.short_context_steps} short-context steps", flush=True)
    started = time.perf_counter()

    def measure(label: str) -> None:
        lm.eval()
        whole, cut = teacher_forced(lm, tokenizer, val), teacher_forced(lm, tokenizer, val_short)
        lm.train()
        show = ("policy_token_accuracy", "digit_token_accuracy", "later_digit_accuracy", "first_turn_exact", "episode_exact")
        print(f"{label} ({time.perf_counter() - started:.0f} s) | whole: " + " ".join(f"{whole[k]:.3f}" for k in show)
              + " | without system turn: " + " ".join(f"{cut[k]:.3f}" for k in show), flush=True)

    print("columns: policy tokens, digits, digits after the first turn, first turn exact, episode exact")
    measure("step 0")

    def on_step(i: int, stats: dict[str, float]) -> None:
        if (i + 1) % args.every == 0:
            stage = " (copy)" if stats["copy_stage"] else (" (short context)" if stats["short_context"] else "")
            measure(f"step {i + 1}{stage} loss {stats['loss']:.3f}")

    sft.train_sft(DataParallel().wrap(lm), episodes, cfg.sft, settings=sft_settings(cfg), backend=backend, generator=generator,
                  tokenizer=tokenizer, on_step=on_step, short_episodes=short)
    measure("end")


if __name__ == "__main__":
    main()
