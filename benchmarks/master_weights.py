"""What one AdamW step keeps of its update: bfloat16 weights (baseline) vs float32 master weights, both computing in bfloat16.

The CPU demo's model (``configs/demo-cpu.yaml``'s ``model``, weights initialised with std 0.02, the
norm gains at 1.0) in the bf16 config (``model.dtype: bfloat16``) takes one SFT optimiser step on oracle
episodes of an authored domain, with ``model.master_dtype`` bfloat16 (the parameters themselves in
bf16, as every bf16 config trained before master weights) and float32 (the default). For each
learning rate it prints, for the weight matrices and for the norm gains:

* the share of elements the step changed;
* the share of the intended update that landed: ``sum |w_after - w_before|`` over
  ``sum lr * |g| / (|g| + eps)`` (AdamW's first update, from the step's own gradients);

and the float32 masters' shares as ratios against the bf16 baseline measured in the same run.

    python benchmarks/master_weights.py            # WarehouseReceiving, 16 episodes, lr 1e-6, 2e-6, 1e-5
    python benchmarks/master_weights.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oracle_data import oracle_data  # noqa: E402

DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo-cpu.yaml"
ADAM_EPS = 1e-8


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--domain", default="sopgym/WarehouseReceiving-v0")
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--config", default=str(DEMO), help="the run config whose model and tokenizer settings are used")
    p.add_argument("--lr", type=float, nargs="+", default=[1e-6, 2e-6, 1e-5])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.episodes, args.lr = 4, [1e-6]

    from sopgym.trainers.distributed import DataParallel
    from sopgym.trainers.modeling import Precision, load_model
    from sopgym.trainers.optimise import StepSettings, optimiser_step
    from sopgym.trainers.sft import as_shown, episode_from_messages

    run, tok, trajectories = oracle_data(args.domain, args.episodes, args.config)
    episodes = [episode_from_messages(tok, t["messages"], t["tools"]) for t in as_shown(trajectories, run.model.system_turn)]
    settings = StepSettings(loss="sft", row_tokens=max(len(ep.ids) for ep in episodes) + 8, rows_per_micro_batch=1)
    print(f"{args.domain}, {len(episodes)} oracle episodes; {args.config}'s model ({run.model.scratch_num_layers} layers, "
          f"hidden {run.model.scratch_hidden_size}) with model.dtype bfloat16, one AdamW step (betas 0.9, 0.95)")

    def one_step(master: str, lr: float) -> dict[str, tuple[float, float]]:
        cfg = dataclasses.replace(run.model, dtype="bfloat16", master_dtype=master)
        lm = load_model(cfg, tok, "sdpa_varlen", torch.device("cpu"), seed=0)
        model = DataParallel().wrap(lm, Precision.from_config(cfg))
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
        before = {n: q.detach().double().clone() for n, q in model.named_parameters()}
        optimiser_step(model, None, optimizer, scheduler, episodes, settings, "sdpa_varlen")
        out = {}
        for group, keep in (("matrices", lambda q: q.dim() == 2), ("norm gains", lambda q: q.dim() == 1)):
            changed = total = landed = intended = 0.0
            for n, q in model.named_parameters():
                if not keep(q):
                    continue
                delta = (q.detach().double() - before[n]).abs()
                g = q.grad.double().abs()
                changed += float((delta > 0).sum())
                total += delta.numel()
                landed += float(delta.sum())
                intended += float((lr * g / (g + ADAM_EPS)).sum())
            out[group] = (changed / total, landed / intended)
        return out

    for lr in args.lr:
        base, masters = one_step("bfloat16", lr), one_step("float32", lr)
        for group in ("matrices", "norm gains"):
            (c0, k0), (c1, k1) = base[group], masters[group]
            ratio = f"{k1 / k0:.1f}x" if k0 > 0 else "inf (the baseline kept none)"
            print(f"lr {lr:.0e} {group}: bf16 weights (baseline) changed {c0:.1%} of elements, kept {k0:.1%} of the update; "
                  f"fp32 masters changed {c1:.1%}, kept {k1:.1%} ({ratio} of the baseline's update)")


if __name__ == "__main__":
    main()
