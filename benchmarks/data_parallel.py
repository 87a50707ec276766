"""The data-parallel learner: N torchrun processes against one process, same config, same run length.

Runs ``sopgym train`` twice on the CPU demo's recipe (configs/demo-cpu.yaml, cut to a few steps and a
small SFT warm start): once as one process (the baseline), once under ``torchrun --nproc-per-node N``
(FSDP2 over gloo on CPU, NCCL on CUDA). Prints, per RL step and as medians over the steps after the
first, the optimisation time (the part the ranks share), the rollout time (rank 0 alone) and the
whole step, each with the ratio N-process / one-process; the per-rank training tokens/s; and whether
the two runs agree: the same episodes (every ``rollout/*`` metric equal at every step) and the
largest difference between their final parameters.

    python benchmarks/data_parallel.py                       # 2 processes, 3 RL steps, CPU, 2 pairs of runs
    python benchmarks/data_parallel.py --nproc 2 --steps 3 --sft 16 --repeats 2 rollout.max_new_tokens=32

The runs alternate (1 process, N processes, 1 process, ...) so that both meet the same load on a
shared host, and each step's ratio compares the two runs of a pair. One process uses torch's default
CPU threads; torchrun gives each rank one (OMP_NUM_THREADS=1), so on CPU both use the same cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def run(cmd: list[str], log: Path, timeout: float) -> float:
    """Run ``cmd`` with its output in ``log``; its wall time in seconds."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    t0 = time.perf_counter()
    with open(log, "w") as out:
        done = subprocess.run(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd[:6])} ... exited {done.returncode}:\n{log.read_text()[-4000:]}")
    return time.perf_counter() - t0


def load_run(run_dir: Path, sharded: bool) -> tuple[list[dict[str, float]], dict[str, torch.Tensor]]:
    """A finished run's history and final parameters (a sharded checkpoint consolidated offline)."""
    if not sharded:
        ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
        return ckpt["history"], ckpt["model"]
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(str(run_dir / "checkpoint"), str(run_dir / "consolidated.pt"))
    model = torch.load(run_dir / "consolidated.pt", weights_only=False)["model"]
    history = torch.load(run_dir / "checkpoint" / "meta.pt", weights_only=True)["history"]
    return history, {k.removeprefix("lm."): v for k, v in model.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(REPO / "configs" / "demo-cpu.yaml"))
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--sft", type=int, default=16, help="SFT demonstrations (the warm start before RL)")
    p.add_argument("--repeats", type=int, default=2, help="pairs of runs, alternating 1 process / N processes")
    p.add_argument("--device", default="cpu")
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("overrides", nargs="*", help="more key=value config overrides for both runs")
    args = p.parse_args()
    out = Path(tempfile.mkdtemp(prefix="sopgym_dp_"))
    common = [f"steps={args.steps}", f"sft.num_episodes={args.sft}", "eval_num_tasks=0", "checkpoint_every=0",
              "progress=false", "plot=false", "tracking.enabled=false", f"device={args.device}", *args.overrides]
    train = ["-m", "sopgym", "train", "--config", args.config]
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.nproc)]
    print(f"runs and their logs in {out}", flush=True)
    print(f"== data-parallel learner: {args.nproc} torchrun processes vs 1 process (baseline), {args.device}, "
          f"{args.steps} RL steps of {Path(args.config).name} (SFT on {args.sft} demonstrations"
          f"{', ' + ' '.join(args.overrides) if args.overrides else ''}), {args.repeats} alternating pairs of runs")
    print(f"host: {os.cpu_count()} CPUs; torch {torch.__version__}; 1 process: {torch.get_num_threads()} threads, "
          f"each rank: {os.environ.get('OMP_NUM_THREADS', '1 (torchrun sets OMP_NUM_THREADS=1)')} thread(s)")
    print(f"{'pair':>4} {'step':>4} {'optim 1p s':>10} {'optim Np s':>10} {'ratio':>6} {'rollout 1p s':>12} "
          f"{'rollout Np s':>12} {'step ratio':>10} {'load':>5}  per-rank train tokens/s")
    ratios: dict[str, list[float]] = {"optimisation": [], "rollout": [], "step": []}
    same, diffs, walls = [], [], []
    for r in range(args.repeats):
        load = os.getloadavg()[0]
        one_s = run([sys.executable, *train, *common, f"run_dir={out / f'one{r}'}"], out / f"one{r}.log", args.timeout)
        dp_s = run([*launch, *train, *common, f"run_dir={out / f'dp{r}'}"], out / f"dp{r}.log", args.timeout)
        walls.append((one_s, dp_s))
        one_history, one_model = load_run(out / f"one{r}", sharded=False)
        dp_history, dp_model = load_run(out / f"dp{r}", sharded=True)
        for h1, hn in zip(one_history, dp_history):
            o1, on = h1["perf/optimisation_seconds"], hn["perf/optimisation_seconds"]
            r1, rn = h1["perf/rollout_seconds"], hn["perf/rollout_seconds"]
            ranks = " ".join(f"{hn[k]:.0f}" for k in sorted(hn) if k.startswith("perf/rank"))
            print(f"{r:>4} {h1['step']:>4} {o1:>10.2f} {on:>10.2f} {on / o1:>5.2f}x {r1:>12.2f} {rn:>12.2f} "
                  f"{(on + rn) / (o1 + r1):>9.2f}x {load:>5.1f}  {ranks}", flush=True)
            if h1["step"] > 0:  # the first step pays one-time costs (allocations, gloo connections)
                ratios["optimisation"].append(on / o1)
                ratios["rollout"].append(rn / r1)
                ratios["step"].append((on + rn) / (o1 + r1))
        same.append(all({k: v for k, v in a.items() if k.startswith("rollout/")} == {k: b[k] for k in a if k.startswith("rollout/")}
                        for a, b in zip(one_history, dp_history)))
        diffs.append(max(float((one_model[k] - dp_model[k]).abs().max()) for k in one_model))
    for name, values in ratios.items():
        if values:
            print(f"median {name} time, {args.nproc} processes / 1 process (steps after the first): {statistics.median(values):.2f}x")
    print(f"same episodes at every step: {', '.join(map(str, same))}; max |parameter difference| after each pair: "
          f"{', '.join(f'{d:.3g}' for d in diffs)}")
    print("whole runs (start-up, SFT and RL), 1 process / N processes: " + ", ".join(f"{a:.0f} s / {b:.0f} s" for a, b in walls))


if __name__ == "__main__":
    main()
