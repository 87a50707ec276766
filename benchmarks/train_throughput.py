"""Trainer throughput: packing efficiency, packed vs padded training tokens/s, batched vs sequential rollout.

Every figure is printed with its baseline measured in the same run, as a ratio:

* packing efficiency: non-padding share of positions, FFD-packed rows vs one episode per row padded
  to the longest episode of its micro-batch (the usual padded batching);
* training throughput: forward + backward (policy-gradient loss, exact accumulation) over the same
  episodes, packed vs padded, in tokens/s. Packed runs two ways: FFD rows with SDPA and a block mask
  (attention over the whole row), and ``sdpa_varlen`` (padding dropped, causal SDPA per episode, the
  CPU analogue of flash-attention varlen) with the same token budget per micro-batch as the baseline;
* rollout: one batched, KV-cached ``generate`` for N prompts (32 by default: 8 GRPO groups of 4)
  vs N calls of one prompt each, in new tokens/s; with ``--compare-with`` also the sampler of
  another checkout, timed alternately with this one on the same model and prompts.

Episodes are oracle trajectories of authored domains (their real length distribution), tokenised
with an offline BPE; the model is a small Llama from scratch (no download).

    python benchmarks/train_throughput.py                    # all authored domains, CPU
    python benchmarks/train_throughput.py --quick            # a smoke run
    python benchmarks/train_throughput.py --only rollout     # the sampler alone (CPU, or --device cuda)
    python benchmarks/train_throughput.py --only rollout --compare-with ../old-checkout   # before/after a change
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

import torch


def build_episodes(env_ids, per_domain, vocab):
    import gymnasium

    from sopgym.trainers.rollout import EnvPool, group_spec_list
    from sopgym.trainers.sft import collect_trajectories, default_oracle, episode_from_messages, trajectory_texts
    from sopgym.trainers.tokenizer import build_bpe_tokenizer

    pool = EnvPool(lambda e: gymnasium.make(e))
    trajectories = []
    for env_id in env_ids:
        trajectories += collect_trajectories(pool, group_spec_list([env_id], "train", 0, per_domain, 1), default_oracle)
    tok = build_bpe_tokenizer(trajectory_texts(trajectories), vocab)
    rng = random.Random(0)
    episodes = [
        episode_from_messages(tok, t["messages"], t["tools"], task_id=t["task_id"], group_id=i) for i, t in enumerate(trajectories)
    ]
    for ep in episodes:
        ep.advantage = rng.uniform(-1, 1)
    rng.shuffle(episodes)
    return tok, episodes


def model_for(tok, hidden, layers, attn="sdpa"):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=65536, attn_implementation=attn,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
    )
    return LlamaForCausalLM(cfg)


def train_throughput(model, episodes, settings, backend, repeats):
    from sopgym.trainers.optimise import accumulate_gradients

    times, stats = [], None
    for _ in range(repeats):
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        stats = accumulate_gradients(model, None, episodes, settings, backend)
        times.append(time.perf_counter() - t0)
    return stats["num_tokens"] / statistics.median(times), stats["packing_efficiency"]


def main(argv=None):
    import sopgym

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--domains", nargs="*", default=None, help="env ids (default: every registered sopgym/* domain)")
    p.add_argument("--per-domain", type=int, default=4)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--row-tokens", type=int, nargs="*", default=None, help="packed row lengths (default: the longest episode)")
    p.add_argument("--rows-per-micro", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--rollout-prompts", type=int, default=32)
    p.add_argument("--rollout-tokens", type=int, default=32)
    p.add_argument("--rollout-domain", default="WarehouseReceiving", help="domain whose prompts the rollout part uses")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", choices=("all", "train", "rollout"), default="all")
    p.add_argument("--device", default="cpu", help="cpu or cuda (the rollout part)")
    p.add_argument("--compare-with", default=None, metavar="CHECKOUT",
                   help="also time the sampler (sopgym/policy/hf.py) of another checkout, alternating with this one")
    args = p.parse_args(argv)
    if args.quick:
        args.per_domain, args.repeats, args.rollout_prompts, args.rollout_tokens = 2, 1, 4, 8
    env_ids = args.domains or [e for e in sopgym.registered_env_ids() if e.startswith("sopgym/")]

    tok, episodes = build_episodes(env_ids, args.per_domain, args.vocab)
    lengths = [len(ep.ids) for ep in episodes]
    longest = max(lengths)
    print(f"episodes: {len(episodes)} from {len(env_ids)} domains; tokens min/median/max "
          f"{min(lengths)}/{int(statistics.median(lengths))}/{longest}; torch threads {torch.get_num_threads()}")
    model = model_for(tok, args.hidden, args.layers)
    if args.only != "rollout":
        train_part(args, tok, episodes, model, longest)
    if args.only != "train":
        rollout_part(args, tok, episodes, model.to(args.device))


def train_part(args, tok, episodes, model, longest):
    from sopgym.trainers.optimise import StepSettings

    # ---- training throughput: padded baseline vs packed rows ----
    base = StepSettings(row_tokens=longest, rows_per_micro_batch=args.rows_per_micro, packed=False)
    pad_tps, pad_eff = train_throughput(model, episodes, base, "sdpa", args.repeats)
    print(f"padded   (1 episode/row, {args.rows_per_micro} rows/micro-batch): efficiency {pad_eff:.3f}  {pad_tps:,.0f} tokens/s  (baseline)")
    for row in args.row_tokens or [longest]:
        s = StepSettings(row_tokens=row, rows_per_micro_batch=max(1, args.rows_per_micro * longest // row), packed=True)
        tps, eff = train_throughput(model, episodes, s, "sdpa", args.repeats)
        print(f"packed   (FFD rows of {row} tokens, SDPA block mask): efficiency {eff:.3f} ({eff / pad_eff:.2f}x)  "
              f"{tps:,.0f} tokens/s ({tps / pad_tps:.2f}x)")
    # varlen: one FFD row per micro-batch holding the baseline's token budget (rows_per_micro x longest)
    from sopgym.trainers.attention import SDPA_VARLEN

    varlen_model = model_for(tok, args.hidden, args.layers, attn=SDPA_VARLEN)
    budget = args.rows_per_micro * longest
    s = StepSettings(row_tokens=budget, rows_per_micro_batch=1, packed=True)
    tps, eff = train_throughput(varlen_model, episodes, s, "sdpa_varlen", args.repeats)
    print(f"packed   (sdpa_varlen, FFD rows of {budget} tokens, padding dropped): efficiency {eff:.3f} "
          f"({eff / pad_eff:.2f}x)  {tps:,.0f} tokens/s ({tps / pad_tps:.2f}x)")



def _sampler_class(checkout: str | None):
    """``HFPolicy`` of this tree, or of another checkout's sampler (``--compare-with``: the sampler before a
    change, loaded side by side so both run in the same process and load). Its file is
    ``sopgym/policy/hf.py``, or where it lived before: ``sopgym/trainers/policy/hf.py``, ``trainers/policy/hf.py``
    (a folder holding only that file will do); its imports of the end-of-turn ids and ``Sample`` resolve
    to this tree's ``sopgym/policy/``."""
    if checkout is None:
        from sopgym.policy.hf import HFPolicy

        return HFPolicy
    import importlib.util
    from pathlib import Path

    layouts = (("sopgym", "policy", "hf.py"), ("sopgym", "trainers", "policy", "hf.py"), ("trainers", "policy", "hf.py"))
    path = next((p for p in (Path(checkout).joinpath(*parts) for parts in layouts) if p.exists()), None)
    if path is None:
        raise SystemExit(f"--compare-with {checkout}: expected one of {[str(Path(*parts)) for parts in layouts]} in it")
    source = path.read_text(encoding="utf-8")
    # before the sampler moved below the trainer (sopgym/policy/), its end-of-turn ids came from the trainer's episodes
    source = source.replace("from ..episodes import end_of_turn_ids", "from .end_of_turn import end_of_turn_ids")
    name = "sopgym.policy.sampler_before"
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader=None, origin=str(path)))
    module.__package__ = "sopgym.policy"  # its relative imports resolve to this tree's package
    sys.modules[name] = module  # dataclasses look their module up
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module.HFPolicy


def rollout_part(args, tok, episodes, model):
    # ---- rollout: batched KV-cached generation vs one prompt at a time ----
    model.eval()
    # As in training: groups of `group` episodes share a prompt (same task, same seed); one domain.
    group = 4
    same_domain = [ep for ep in episodes if ep.task_id.startswith(args.rollout_domain)] or episodes
    first_turns = [ep.ids[: ep.loss_mask.index(1)] for ep in same_domain]
    prompts = [p for p in first_turns[: max(1, args.rollout_prompts // group)] for _ in range(group)]
    samplers = {"this tree": _sampler_class(None)(model, tok)}
    if args.compare_with:
        samplers = {"before (--compare-with)": _sampler_class(args.compare_with)(model, tok), **samplers}
    for policy in samplers.values():
        policy.stop_ids = set()  # fixed-length generation so every side produces the same number of tokens

    def timed(policy, batch, bucket):
        policy.bucket_by_length = bucket
        sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)
        sync()
        t0 = time.perf_counter()
        policy.generate(batch, args.rollout_tokens, temperature=1.0, generator=torch.Generator().manual_seed(0))
        sync()
        return time.perf_counter() - t0

    n = len(prompts) * args.rollout_tokens
    mine = samplers["this tree"]
    timed(mine, prompts[:1], False)  # warm-up (allocators, kernels)
    seq_s = sum(timed(mine, [prompt], False) for prompt in prompts)
    print(f"rollout  ({len(prompts)} prompts of {args.rollout_domain}, groups of {group}, {args.rollout_tokens} new tokens each, "
          f"{model.device.type}) one at a time: {n / seq_s:,.1f} new tokens/s (baseline)")
    for bucket in (False, True):
        # the samplers alternate within each repeat, so a change of machine load hits both; best of repeats
        best = {name: float("inf") for name in samplers}
        for _ in range(args.repeats):
            for name, policy in samplers.items():
                best[name] = min(best[name], timed(policy, prompts, bucket))
        label = "batched, equal-length buckets" if bucket else "batched, left-padded"
        for name, secs in best.items():
            versus = f", {best[next(iter(best))] / secs:.2f}x the sampler before" if args.compare_with and name == "this tree" else ""
            print(f"rollout  {label} x{len(prompts)}, {name}: {n / secs:,.1f} new tokens/s ({seq_s / secs:.2f}x one at a time{versus})")


if __name__ == "__main__":
    main()
