"""SOP-Bench live tool calls: the warm tools worker against a process per call, measured in one run.

    python benchmarks/sopbench_tools.py [--calls 300] [--cold-calls 30] [--episodes 100] [--runners docker,subprocess]

Domain: the ``helpdesk`` fixture (tests/sopbench/fixtures; our own code in SOP-Bench's layout: each
call reads the domain's CSV with pandas, as upstream's tools do). Calls cycle through
``open_session``, ``get_account`` and ``decide``. Per runner (``docker``: the sandbox, the default;
``subprocess``: a local process):

* warm: :class:`~sopgym.sopbench.runners.DockerToolRunner` / ``SubprocessToolRunner``, calls in one
  episode: p50/p99 latency per call;
* cold (baseline, what the Docker runner did before the worker): one process per call that imports
  pandas and ``tools.py``, writes the domain's files and makes the call (``run_python`` in the same
  sandbox image for ``docker``; ``python -I -c`` for ``subprocess``): p50/p99, and the ratio cold/warm;
* episode switch: ``new_episode()`` then the first call (a fresh fork, the folder restored, a new manager);
* worker start: the first call of a new runner (container from the pool, pandas and tools.py imported).

Needs Docker and the sandbox image for ``docker`` (``bash scripts/docker_setup.sh``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sopgym.sopbench import register, tool_server  # noqa: E402
from sopgym.sopbench.runners import DockerToolRunner, SubprocessToolRunner, domain_files  # noqa: E402

FIXTURES = REPO / "tests" / "sopbench" / "fixtures"
CALLS = [
    ("open_session", {"account_id": "ACC-1"}),
    ("get_account", {"account_id": "ACC-2", "session_token": "TOK-2b"}),
    ("decide", {"plan": "gold", "priority_score": 9}),
]
#: One process per call: files written, pandas and tools.py imported, one call (the old Docker path).
ONESHOT = Path(tool_server.__file__).read_text(encoding="utf-8") + '''
def _oneshot():
    import tempfile
    payload = json.loads(sys.stdin.read())
    folder = os.path.join(tempfile.mkdtemp(dir=os.getcwd()), payload["domain"])
    os.mkdir(folder)
    for name, data in payload["files"].items():
        with open(os.path.join(folder, name), "wb") as fh:
            fh.write(base64.b64decode(data))
    answer = call_tool(load_manager(folder), payload["tool_names"], payload["name"], payload["args"])
    sys.stdout.write(MARKER + json.dumps(answer) + "\\n")


_oneshot()
'''


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed(fn, n: int) -> list[float]:
    out = []
    for i in range(n):
        started = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - started)
    return out


def answer_of(stdout: str) -> dict:
    lines = [ln for ln in stdout.splitlines() if ln.startswith(tool_server.MARKER)]
    assert lines, f"no answer in {stdout[-500:]!r}"
    return json.loads(lines[-1][len(tool_server.MARKER):])


def cold_caller(kind: str, domain):
    payload = {"domain": domain.path.name, "files": domain_files(domain), "tool_names": domain.tool_names}

    if kind == "docker":
        from sopgym.sandboxes.docker import DockerCodeRunner

        runner = DockerCodeRunner(output_cap_bytes=8 * 1024 * 1024)

        def call(i: int) -> dict:
            name, args = CALLS[i % len(CALLS)]
            result = runner.run_python(ONESHOT, timeout_s=120, stdin=json.dumps({**payload, "name": name, "args": args}))
            return answer_of(result.stdout)

        return call, runner.close
    workdir = tempfile.mkdtemp(prefix="sopgym-bench-cold-")

    def call(i: int) -> dict:
        name, args = CALLS[i % len(CALLS)]
        proc = subprocess.run([sys.executable, "-I", "-c", ONESHOT], input=json.dumps({**payload, "name": name, "args": args}),
                              capture_output=True, text=True, cwd=workdir, timeout=120, check=True)
        return answer_of(proc.stdout)

    return call, lambda: None


def make_warm(kind: str, domain):
    return DockerToolRunner(domain, timeout_s=120) if kind == "docker" else SubprocessToolRunner(domain, timeout_s=120)


def measure(kind: str, domain, args) -> dict:
    expected = [a["text"] for a in make_runner_answers(kind, domain)]
    cold, close_cold = cold_caller(kind, domain)
    try:
        cold_answers = [cold(i)["text"] for i in range(len(CALLS))]
        assert cold_answers == expected, f"{kind}: cold and warm answers differ: {cold_answers} vs {expected}"
        cold_t = timed(cold, args.cold_calls)
    finally:
        close_cold()

    starts = []
    for _ in range(3):
        runner = make_warm(kind, domain)
        started = time.perf_counter()
        runner.call(*CALLS[0])
        starts.append(time.perf_counter() - started)
        runner.close()

    runner = make_warm(kind, domain)
    try:
        runner.call(*CALLS[0])
        warm_t = timed(lambda i: runner.call(*CALLS[i % len(CALLS)]), args.calls)

        def switch(i: int) -> None:
            runner.new_episode()
            runner.call(*CALLS[i % len(CALLS)])

        switch_t = timed(switch, args.episodes)
        assert runner.num_workers_started == 1, "the warm worker was replaced during the measurement"
        pandas_version = runner.pandas_version
    finally:
        runner.close()
    return {"cold": cold_t, "warm": warm_t, "switch": switch_t, "start": starts, "pandas": pandas_version}


def make_runner_answers(kind: str, domain) -> list[dict]:
    runner = make_warm(kind, domain)
    try:
        return runner.call_many(CALLS)
    finally:
        runner.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="warm calls")
    parser.add_argument("--cold-calls", type=int, default=30, help="cold calls (each a process start)")
    parser.add_argument("--episodes", type=int, default=100, help="episode switches")
    parser.add_argument("--runners", default="docker,subprocess")
    args = parser.parse_args()
    kinds = [k for k in args.runners.split(",") if k]
    unknown = set(kinds) - {"docker", "subprocess"}
    if unknown:
        parser.error(f"--runners takes docker and/or subprocess, got {sorted(unknown)}")

    with tempfile.TemporaryDirectory() as recordings:
        domain = register(FIXTURES, recordings_dir=recordings).domains["helpdesk"]
    ms = 1e3
    print(f"== SOP-Bench live tool calls: fixture domain helpdesk, {args.calls} warm calls, {args.cold_calls} cold "
          f"calls, {args.episodes} episode switches per runner")
    print(f"{'runner':<11} {'pandas':<7} {'cold p50 ms':>11} {'cold p99 ms':>11} {'warm p50 ms':>11} {'warm p99 ms':>11} "
          f"{'cold/warm p50':>13} {'switch p50 ms':>13} {'switch p99 ms':>13} {'start p50 ms':>12}")
    for kind in kinds:
        m = measure(kind, domain, args)
        c50, w50 = statistics.median(m["cold"]), statistics.median(m["warm"])
        print(f"{kind:<11} {m['pandas']:<7} {c50 * ms:>11.1f} {pct(m['cold'], 0.99) * ms:>11.1f} {w50 * ms:>11.3f} "
              f"{pct(m['warm'], 0.99) * ms:>11.3f} {c50 / w50:>12.0f}x {statistics.median(m['switch']) * ms:>13.2f} "
              f"{pct(m['switch'], 0.99) * ms:>13.2f} {statistics.median(m['start']) * ms:>12.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
