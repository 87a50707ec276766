"""Authored-domain benchmark: task generation speed and memory of many concurrent envs.

    python benchmarks/domains.py [--tasks 2000] [--envs 1024] [--repeats 1] [--only gen|mem]

**Task generation** (tasks/s per authored domain): ``pack.task("train", i)`` for ``i`` in
``range(--tasks)`` (seeded RNG from the task identity, the domain's generator, the ``Task``
record). Baseline, measured in the same run on the very same tasks: ``json.loads`` of each task
already serialised as one JSON line (``json.dumps(task.to_json())``, serialisation not timed).
That is the cost of the alternative to generating, a stored task file read back line by line,
and it scales with the task's size, so the ratio ``generation time / load time`` says how much
our generators cost over merely decoding the same data. Tasks are generated and loaded in
interleaved chunks of 100 (so machine noise hits both alike and no more than 100 tasks are held);
with ``--repeats N`` the best of N is kept for each.

**Memory** of ``--envs`` concurrent envs: in a fresh subprocess per measurement, import
everything an env needs, read the baseline ``VmRSS`` from ``/proc/self/status``, then create the
envs round-robin over the group's domains with ``gymnasium.make(env_id, sandbox="inprocess",
code_runner="inprocess")``, ``reset`` each on its own train task, step each once with its oracle's
first call, keep them all alive and read ``VmRSS`` again. Every first call must run (status ``OK``,
or ``ERROR_TOOL`` when the SOP expects the tool's own error, e.g. no dock appointment); any other
status (bad arguments, sandbox error, ...) is printed as a warning. Groups:

* ``suite``: every authored domain;
* ``replay``: domains whose tools are all replay-tier;
* ``stateful``: domains with a stateful program (one in-process SQLite database per env);
* ``verifiable``: domains with a verifiable tier (their task database is also held in-process;
  the agent's SQL/Python runs in a child process per call that exits afterwards, so it is not
  in this RSS; with ``code_runner="docker"`` it runs in containers).

Target (issue 4): under 500 MB RSS for the replay and the in-process stateful groups.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

GROUPS = ("suite", "replay", "stateful", "verifiable")
TARGET_MB = {"replay": 500.0, "stateful": 500.0}
CHUNK = 100


def proc_status_kb(key: str) -> int:
    """A ``kB`` line of /proc/self/status (``VmRSS``, ``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {key!r} line (expected Linux)")


def authored_packs() -> list:
    import sopgym  # noqa: F401  (registers the envs)
    from sopgym.sop_tasks.registry import all_packs

    return sorted(all_packs("sopgym"), key=lambda p: p.name)


def group_of(pack) -> str:
    """The tier group of a pack: verifiable > stateful > replay."""
    if pack.verifiable is not None:
        return "verifiable"
    if pack.program is not None:
        return "stateful"
    return "replay"


def packs_in(group: str) -> list:
    packs = authored_packs()
    return packs if group == "suite" else [p for p in packs if group_of(p) == group]


# -- task generation ------------------------------------------------------------------------------
def time_generation(pack, n: int, repeats: int) -> dict:
    """Best-of-``repeats`` seconds to generate ``n`` train tasks and to json.loads the same tasks."""
    clock = time.perf_counter
    best_gen, best_load, total_bytes = float("inf"), float("inf"), 0
    for _ in range(repeats):
        gen_s = load_s = 0.0
        total_bytes = 0
        for start in range(0, n, CHUNK):
            indices = range(start, min(n, start + CHUNK))
            t0 = clock()
            tasks = [pack.task("train", i) for i in indices]
            gen_s += clock() - t0
            lines = [json.dumps(t.to_json(), ensure_ascii=False) for t in tasks]
            total_bytes += sum(len(line.encode()) for line in lines)
            t0 = clock()
            loaded = [json.loads(line) for line in lines]
            load_s += clock() - t0
            assert len(loaded) == len(tasks)
        best_gen, best_load = min(best_gen, gen_s), min(best_load, load_s)
    return {"gen_s": best_gen, "load_s": best_load, "mean_kb": total_bytes / n / 1024}


def report_generation(n: int, repeats: int) -> None:
    print(
        f"== task generation: {n} train tasks per domain, best of {repeats}; "
        "baseline: json.loads of the same tasks stored as JSON lines (same run)"
    )
    print(f"{'domain':32s} {'tier':10s} {'tasks/s':>9s} {'baseline/s':>11s} {'gen/baseline time':>18s} {'task KB':>8s}")
    total_gen = total_load = 0.0
    for pack in authored_packs():
        r = time_generation(pack, n, repeats)
        total_gen += r["gen_s"]
        total_load += r["load_s"]
        print(
            f"{pack.name:32s} {group_of(pack):10s} {n / r['gen_s']:9.0f} {n / r['load_s']:11.0f} "
            f"{r['gen_s'] / r['load_s']:17.2f}x {r['mean_kb']:8.1f}"
        )
    count = len(authored_packs())
    print(
        f"{'all domains':32s} {'':10s} {count * n / total_gen:9.0f} {count * n / total_load:11.0f} "
        f"{total_gen / total_load:17.2f}x {'':>8s}"
    )


# -- memory ---------------------------------------------------------------------------------------
def measure_memory(group: str, n_envs: int) -> dict:
    """Runs in its own process: RSS before and after ``n_envs`` live envs of ``group``."""
    import gc

    import gymnasium as gym

    from sopgym.envs.policies import make_policy
    from sopgym.sandboxes import inprocess, local_runner  # noqa: F401  (imported before the baseline)

    packs = packs_in(group)
    if not packs:
        return {"group": group, "domains": 0}
    gc.collect()
    base_kb = proc_status_kb("VmRSS")
    envs, failed, tool_errors = [], 0, 0
    t0 = time.perf_counter()
    for i in range(n_envs):
        pack = packs[i % len(packs)]
        env = gym.make(pack.env_id, sandbox="inprocess", code_runner="inprocess")
        obs, info = env.reset(seed=i, options={"split": "train", "task_index": i // len(packs)})
        policy = make_policy("oracle")
        policy.reset(info)
        obs, _, _, _, info = env.step(policy.act(obs, info))
        statuses = [c["status"] for c in info["calls"]]
        failed += any(s not in ("OK", "ERROR_TOOL") for s in statuses)
        tool_errors += "ERROR_TOOL" in statuses
        envs.append(env)
    build_s = time.perf_counter() - t0
    del obs, info, policy
    gc.collect()
    rss_kb, hwm_kb = proc_status_kb("VmRSS"), proc_status_kb("VmHWM")
    for env in envs:
        env.close()
    return {
        "group": group,
        "domains": len(packs),
        "envs": n_envs,
        "base_kb": base_kb,
        "rss_kb": rss_kb,
        "hwm_kb": hwm_kb,
        "failed_first_calls": failed,
        "tool_error_first_calls": tool_errors,
        "build_s": build_s,
    }


def report_memory(n_envs: int) -> None:
    print(
        f"== memory: {n_envs} concurrent envs per group (reset + one oracle step each), "
        "sandbox=inprocess, code_runner=inprocess, one subprocess per group"
    )
    print(
        f"{'group':11s} {'domains':>7s} {'envs':>5s} {'baseline MB':>12s} {'RSS MB':>8s} {'delta MB':>9s} "
        f"{'KB/env':>7s} {'peak MB':>8s} {'setup s':>8s} {'SOP tool errors':>15s}  target"
    )
    for group in GROUPS:
        out = subprocess.run(
            [sys.executable, __file__, "--child-memory", group, "--envs", str(n_envs)],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            print(f"{group:11s} measurement failed (exit {out.returncode}): {out.stderr.strip()[-2000:]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        if not r["domains"]:
            print(f"{group:11s} {0:7d} (no authored domain in this group)")
            continue
        if r["failed_first_calls"]:
            print(
                f"{group:11s} WARNING: {r['failed_first_calls']} envs' first oracle call did not run (status not OK/ERROR_TOOL)"
            )
        rss_mb, base_mb = r["rss_kb"] / 1024, r["base_kb"] / 1024
        delta_kb = r["rss_kb"] - r["base_kb"]
        target = TARGET_MB.get(group)
        verdict = f"< {target:.0f} MB: {'met' if rss_mb < target else 'MISSED'}" if target else "-"
        print(
            f"{group:11s} {r['domains']:7d} {r['envs']:5d} {base_mb:12.1f} {rss_mb:8.1f} {delta_kb / 1024:9.1f} "
            f"{delta_kb / r['envs']:7.1f} {r['hwm_kb'] / 1024:8.1f} {r['build_s']:8.1f} {r['tool_error_first_calls']:15d}  {verdict}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000, help="train tasks generated per domain (default 2000)")
    parser.add_argument("--envs", type=int, default=1024, help="concurrent envs per memory group (default 1024)")
    parser.add_argument("--repeats", type=int, default=1, help="generation timing: best of N (default 1)")
    parser.add_argument("--only", choices=("gen", "mem"), help="run only one of the two benchmarks")
    parser.add_argument("--child-memory", choices=GROUPS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tasks < 1 or args.envs < 1 or args.repeats < 1:
        parser.error(f"--tasks, --envs and --repeats must be >= 1, got {args.tasks}, {args.envs}, {args.repeats}")
    if args.child_memory:
        print(json.dumps(measure_memory(args.child_memory, args.envs)))
        return 0
    print(f"python {sys.version.split()[0]}, {len(authored_packs())} authored domains")
    if args.only in (None, "gen"):
        report_generation(args.tasks, args.repeats)
    if args.only in (None, "mem"):
        report_memory(args.envs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
