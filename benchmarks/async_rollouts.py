"""Asynchronous rollouts against synchronous ones: seconds per RL step of the same config in one run.

The learner trains in this process; the rollout engine samples in a Ray actor
(``rollout.engine.backend: ray``; ``--engine inprocess``: a copy in this process, for the GPU check) with
its own copy of the weights; the envs run in this process
(in async mode, in the rollout producer's thread). Each env step first waits ``--tool-latency-ms``
(5 ms by default), then steps the authored domain. The in-process pool steps a round's episodes one
after another, so a round of 32 episodes waits 160 ms: about one round of concurrent tool calls to a
service on the same network. Both processes get ``--threads`` torch threads (1 each by default: one core each
on a 2-core machine).

Modes, measured alternately (sync, async K=1, async K=2, then again for ``--repeats``):

* ``sync``: rollouts, then the update, then the weights to the actor (the baseline);
* ``async K``: the producer draws step b's batch with the weights of step b-K while the learner
  trains (sopgym/trainers/rollout_stream.py).

Printed per mode: seconds per RL step (median over the steps after the first, each step from the
end of the one before), the ratio against sync, the staleness histogram of the trained episodes,
the dropped share, the learner's and the engine's idle seconds per step; and the bound the machine
allows, ``(rollout + update) / max(rollout, update)`` from sync's own per-step figures. The model is
a small Llama from scratch with an offline BPE (no download), untrained: its replies are rarely valid
calls, so episodes run to ``--max-turns`` and each env step is the env's answer to a reply.

    python benchmarks/async_rollouts.py                 # the table in docs/benchmarks.md
    python benchmarks/async_rollouts.py --quick         # a smoke run
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ENV_ID = "sopgym/WarehouseReceiving-v0"


def latency_env(latency_s: float, env_kwargs: dict):
    """``env_id -> env``: the authored domain, every step after ``latency_s`` of waiting."""
    import gymnasium

    class ToolLatency(gymnasium.Wrapper):
        def step(self, action):
            time.sleep(latency_s)
            return self.env.step(action)

    return lambda env_id: ToolLatency(gymnasium.make(env_id, **env_kwargs))


def config(args, run_dir: Path, mode: str, k: int):
    from sopgym.trainers.config import load_config

    return load_config(None, [
        f"env.env_ids=[{ENV_ID}]", f"env.max_turns={args.max_turns}", "env.max_context=2048", "model.tokenizer=bpe",
        "model.bpe_vocab_size=1024", f"model.scratch_hidden_size={args.hidden}", f"model.scratch_num_layers={args.layers}",
        f"model.scratch_intermediate_size={2 * args.hidden}", "model.system_turn=drop", "model.attention=sdpa_varlen",
        "optim.row_tokens=4096", "optim.lr=1e-4", f"rollout.batch_size={args.batch_size}", f"rollout.group_size={args.group_size}",
        f"rollout.max_new_tokens={args.max_new_tokens}", f"rollout.engine.backend={args.engine}", f"rollout.mode={mode}",
        f"rollout.max_staleness={k}", "algo.filter_zero_variance=false", f"algo.ppo_epochs={args.ppo_epochs}", "sft.num_episodes=0", f"steps={args.steps}",
        "eval_num_tasks=0", "progress=false", "plot=false", "tracking.enabled=false", "checkpoint_every=0",
        f"run_dir={run_dir}", f"device={args.device}",
    ])


def measure(args, mode: str, k: int, work: Path, tag: str) -> dict:
    """One run; its per-step seconds (from the end of the step before) and what the history says."""
    from sopgym.trainers import loop

    stamps: list[float] = []
    real = loop.rl_step

    def timed(run):
        out = real(run)
        stamps.append(time.perf_counter())
        return out

    loop.rl_step = timed
    try:
        result = loop.train(config(args, work / tag, mode, k), make_env=latency_env(args.tool_latency_ms / 1000, {}))
    finally:
        loop.rl_step = real
    history = result.history[1:]  # the first step has no step before it to overlap with
    ages: dict[int, float] = {}
    for h in history:
        for a in range(k + 1):
            ages[a] = ages.get(a, 0.0) + h.get(f"async/staleness/{a}", 0.0)
    return {
        "step_s": statistics.median(b - a for a, b in zip(stamps, stamps[1:])),
        "rollout_s": statistics.median(h["perf/rollout_seconds"] for h in history),
        "update_s": statistics.median(h["perf/optimisation_seconds"] for h in history),
        "learner_idle_s": statistics.median(h["perf/learner_idle_seconds"] for h in history),
        "engine_idle_s": statistics.median(h["perf/engine_idle_seconds"] for h in history),
        "dropped": sum(h["async/dropped_episodes"] for h in history),
        "used": sum(h["async/used_episodes"] for h in history),
        "ages": ages,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--ppo-epochs", type=int, default=2, help="optimiser passes over each batch (the update's share of a step)")
    p.add_argument("--tool-latency-ms", type=float, default=5.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--engine", choices=("ray", "inprocess"), default="ray",
                   help="ray: the engine in a Ray actor; inprocess: a copy of the weights in this process, sampled "
                        "from the producer thread (the GPU check: the device machines have no Ray)")
    p.add_argument("--device", default="cpu", help="the learner's (and an in-process engine's) device")
    p.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes, 3 steps, one repeat")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.repeats, args.batch_size, args.group_size = 3, 1, 2, 2
        args.max_turns, args.max_new_tokens, args.hidden, args.layers = 2, 8, 32, 1
    torch.set_num_threads(args.threads)
    import sopgym  # noqa: F401  (registers the envs)

    modes = [("sync", 0), ("async", 1), ("async", 2)]
    runs: dict[tuple[str, int], list[dict]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for mode, k in modes:
                runs[(mode, k)].append(measure(args, mode, k, Path(tmp), f"{mode}{k}-{r}"))
    print(f"== async rollouts: {ENV_ID}, {args.batch_size}x{args.group_size} episodes a step, {args.max_turns} turns of "
          f"<= {args.max_new_tokens} tokens, tool latency {args.tool_latency_ms:g} ms a step, Llama {args.hidden}x{args.layers} "
          f"from scratch on {args.device}, {args.ppo_epochs} optimiser pass(es) a step, engine {'in a Ray actor' if args.engine == 'ray' else 'in process'}, {args.threads} torch thread(s) each; {args.steps} steps x {args.repeats} "
          f"repeats; baseline: sync")
    base = statistics.median(m["step_s"] for m in runs[("sync", 0)])
    rollout = statistics.median(m["rollout_s"] for m in runs[("sync", 0)])
    update = statistics.median(m["update_s"] for m in runs[("sync", 0)])
    print(f"sync per step: rollout {rollout:.2f} s, update {update:.2f} s; bound (rollout + update) / max = "
          f"{(rollout + update) / max(rollout, update):.2f}x")
    print(f"{'mode':<10} {'s/step':>7} {'ratio':>6} {'learner idle':>13} {'engine idle':>12} {'dropped':>8}  staleness of trained episodes")
    for mode, k in modes:
        ms = runs[(mode, k)]
        step_s = statistics.median(m["step_s"] for m in ms)
        used, dropped = sum(m["used"] for m in ms), sum(m["dropped"] for m in ms)
        ages = {a: sum(m["ages"].get(a, 0.0) for m in ms) for a in range(k + 1)}
        name = "sync" if mode == "sync" else f"async K={k}"
        hist = " ".join(f"{a}:{int(n)}" for a, n in ages.items())
        print(f"{name:<10} {step_s:>7.2f} {base / step_s:>5.2f}x {statistics.median(m['learner_idle_s'] for m in ms):>12.2f}s "
              f"{statistics.median(m['engine_idle_s'] for m in ms):>11.2f}s {dropped / max(1.0, used + dropped):>7.1%}  {hist}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
