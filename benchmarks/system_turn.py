"""What ``model.system_turn: drop`` saves: the same episodes with the system turn (baseline) and without.

For oracle episodes of one authored domain, tokenised with the CPU demo's tokenizer settings (offline
BPE, digits split) and trained on by the CPU demo's model (``configs/demo-cpu.yaml``'s ``model``),
the script prints, keep vs drop, as ratios against keep measured in the same run:

* tokens per episode and the share of them that are the system turn;
* an optimiser step's forward + backward (SFT loss, exact accumulation) over the same episodes, in
  seconds per episode (the cost of an SFT or RL update);
* the first turn's generation for a batch of prompts (KV-cached sampler, fixed number of new tokens),
  in seconds per batch (the cost of a rollout's first round; the sampler's kept prefix is dropped
  before each call, as an optimiser step drops it, so its shared-prefix prefill runs in both).

Timings alternate keep and drop within each repeat (a change of machine load hits both) and keep the
best of the repeats.

    python benchmarks/system_turn.py                   # WarehouseReceiving, 64 episodes, CPU
    python benchmarks/system_turn.py --quick           # a smoke run
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oracle_data import oracle_data  # noqa: E402

DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo-cpu.yaml"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--domain", default="sopgym/WarehouseReceiving-v0")
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--config", default=str(DEMO), help="the run config whose model, tokenizer and SFT batch are used")
    p.add_argument("--prompts", type=int, default=32, help="first-turn prompts per generate call")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.episodes, args.prompts, args.new_tokens, args.repeats = 16, 8, 8, 1

    from sopgym.policy.hf import HFPolicy
    from sopgym.trainers.modeling import LogProbModel, load_model
    from sopgym.trainers.optimise import StepSettings, accumulate_gradients
    from sopgym.trainers.sft import as_shown, episode_from_messages

    run, tok, trajectories = oracle_data(args.domain, args.episodes, args.config)
    cfg, batch_episodes = run.model, run.sft.batch_episodes
    lm = load_model(cfg, tok, "sdpa_varlen", torch.device("cpu"), seed=0)
    model = LogProbModel(lm)
    episodes, prompts = {}, {}
    for view in ("keep", "drop"):
        shown = as_shown(trajectories, view)
        episodes[view] = [episode_from_messages(tok, t["messages"], t["tools"]) for t in shown]
        prompts[view] = [ep.ids[: ep.loss_mask.index(1)] for ep in episodes[view]][: args.prompts]
    keep_len = [len(ep.ids) for ep in episodes["keep"]]
    drop_len = [len(ep.ids) for ep in episodes["drop"]]
    mean_keep, mean_drop = sum(keep_len) / len(keep_len), sum(drop_len) / len(drop_len)
    print(f"{args.domain}, {len(keep_len)} oracle episodes, vocab {len(tok)}, digits split: {cfg.bpe_split_digits}; "
          f"{args.config}'s model ({cfg.scratch_num_layers} layers, hidden {cfg.scratch_hidden_size}), sdpa_varlen, "
          f"{torch.get_num_threads()} threads")
    print(f"tokens per episode: keep {mean_keep:,.0f} (baseline), drop {mean_drop:,.0f} ({mean_drop / mean_keep:.3f}x; "
          f"the system turn is {1 - mean_drop / mean_keep:.1%} of an episode)")

    settings = StepSettings(loss="sft", row_tokens=max(keep_len) + 8, rows_per_micro_batch=1, packed=True)

    def update_seconds(view: str) -> float:
        eps = episodes[view]
        t0 = time.perf_counter()
        for start in range(0, len(eps), batch_episodes):
            model.zero_grad(set_to_none=True)
            accumulate_gradients(model, None, eps[start : start + batch_episodes], settings, "sdpa_varlen")
        return (time.perf_counter() - t0) / len(eps)

    policy = HFPolicy(lm, tok)

    def generate_seconds(view: str) -> float:
        policy.close()  # drops the kept prefix, as an optimiser step does: every rollout starts without it
        t0 = time.perf_counter()
        with torch.no_grad():
            policy.generate(prompts[view], args.new_tokens, temperature=1.0, generator=torch.Generator().manual_seed(0))
        return time.perf_counter() - t0

    for name, measure in (("update (forward + backward) per episode", update_seconds),
                          (f"first turn, {len(prompts['keep'])} prompts x {args.new_tokens} new tokens", generate_seconds)):
        measure("keep")  # warm-up
        best = {"keep": float("inf"), "drop": float("inf")}
        for _ in range(args.repeats):
            for view in best:
                best[view] = min(best[view], measure(view))
        print(f"{name}: keep {best['keep'] * 1e3:,.1f} ms (baseline), drop {best['drop'] * 1e3:,.1f} ms "
              f"({best['keep'] / best['drop']:.2f}x faster)")


if __name__ == "__main__":
    main()
