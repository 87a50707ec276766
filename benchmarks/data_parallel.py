"""The data-parallel learner: N torchrun processes against one process, same config, same run length.

Runs ``sopgym train`` twice on the CPU demo's recipe (configs/demo-cpu.yaml, cut to a few steps and a
small SFT warm start): once as one process (the baseline), once under ``torchrun --nproc-per-node N``
(FSDP2 over gloo on CPU, NCCL on CUDA). Prints, per RL step and as medians over the steps after the
first, the optimisation time (the part the ranks share), the rollout time (rank 0 alone) and the
whole step, each with the ratio N-process / one-process; the per-rank training tokens/s; and whether
the two runs agree: the same episodes (every ``rollout/*`` metric equal at every step) and the
largest difference between their final parameters.

    python benchmarks/data_parallel.py                       # 2 processes, 4 RL steps, CPU
    python benchmarks/data_parallel.py --nproc 2 --steps 4 --sft 64 --device cpu

One process uses torch's default CPU threads; torchrun gives each rank one (OMP_NUM_THREADS=1), so
on CPU both runs use the same cores. On a shared or saturated host, read the ratios, not the seconds.
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


def run(cmd: list[str], timeout: float) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd[:6])} ... exited {done.returncode}:\n{done.stderr[-4000:]}")
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(REPO / "configs" / "demo-cpu.yaml"))
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--sft", type=int, default=64, help="SFT demonstrations (the warm start before RL)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("overrides", nargs="*", help="more key=value config overrides for both runs")
    args = p.parse_args()
    out = Path(tempfile.mkdtemp(prefix="sopgym_dp_"))
    common = [f"steps={args.steps}", f"sft.num_episodes={args.sft}", "eval_num_tasks=0", "checkpoint_every=0",
              "progress=false", "plot=false", "tracking.enabled=false", f"device={args.device}", *args.overrides]
    train = ["-m", "sopgym", "train", "--config", args.config]
    one_s = run([sys.executable, *train, *common, f"run_dir={out / 'one'}"], args.timeout)
    dp_s = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.nproc),
                *train, *common, f"run_dir={out / 'dp'}"], args.timeout)

    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    one = torch.load(out / "one" / "checkpoint.pt", weights_only=True)
    dcp_to_torch_save(str(out / "dp" / "checkpoint"), str(out / "dp.pt"))
    dp_model = {k.removeprefix("lm."): v for k, v in torch.load(out / "dp.pt", weights_only=False)["model"].items()}
    dp_history = torch.load(out / "dp" / "checkpoint" / "meta.pt", weights_only=True)["history"]

    print(f"== data-parallel learner: {args.nproc} torchrun processes vs 1 process (baseline), {args.device}, "
          f"{args.steps} RL steps of {Path(args.config).name}, SFT on {args.sft} demonstrations")
    print(f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; torch {torch.__version__}; "
          f"1 process: {torch.get_num_threads()} threads, each rank: 1 thread")
    print(f"{'step':>4} {'optim 1p s':>10} {'optim Np s':>10} {'ratio':>6} {'rollout 1p s':>12} {'rollout Np s':>12} "
          f"{'step ratio':>10}  per-rank train tokens/s")
    ratios = {"optim": [], "rollout": [], "step": []}
    for h1, hn in zip(one["history"], dp_history):
        o1, on = h1["perf/optimisation_seconds"], hn["perf/optimisation_seconds"]
        r1, rn = h1["perf/rollout_seconds"], hn["perf/rollout_seconds"]
        ranks = " ".join(f"{hn[k]:.0f}" for k in sorted(hn) if k.startswith("perf/rank"))
        print(f"{h1['step']:>4} {o1:>10.2f} {on:>10.2f} {on / o1:>5.2f}x {r1:>12.2f} {rn:>12.2f} {(on + rn) / (o1 + r1):>9.2f}x  {ranks}")
        if h1["step"] > 0:  # the first step pays one-time costs (allocations, gloo connections)
            ratios["optim"].append(on / o1)
            ratios["rollout"].append(rn / r1)
            ratios["step"].append((on + rn) / (o1 + r1))
    for name, values in ratios.items():
        if values:
            print(f"median {name} time, {args.nproc} processes / 1 process: {statistics.median(values):.2f}x")
    same = all({k: v for k, v in a.items() if k.startswith("rollout/")} == {k: b[k] for k in a if k.startswith("rollout/")}
               for a, b in zip(one["history"], dp_history))
    diff = max(float((one["model"][k] - dp_model[k]).abs().max()) for k in one["model"])
    print(f"same episodes at every step: {same}; max |parameter difference| after the run: {diff:.3g}")
    print(f"whole runs (start-up, SFT and RL): 1 process {one_s:.0f} s, {args.nproc} processes {dp_s:.0f} s")


if __name__ == "__main__":
    main()
