"""Sandbox benchmark: the persistent channel against its baselines, measured in one run.

    python benchmarks/sandbox.py [--calls 2000] [--envs 32] [--episodes 4]

Figures (all printed with the ratio against the baseline measured in the same run):

* per-call latency p50/p99 of a stateful tool call over the persistent attach channel;
* baseline 1: a fresh ``docker exec`` per call into the same warm container (it only runs
  ``cat``, so it is a lower bound on any process-per-call design); target >= 100x slower than us;
* baseline 2 (floor): a raw line echo (``cat``) over the same kind of attach channel into a container
  of the same image; target: the tool call within 2x of it;
* episode reset latency (new database in the warm container); target < 20 ms;
* container start latency (create + start + attach + server hello);
* episodes/s of ``--envs`` concurrent stateful backends driving a fixed scripted episode (the
  fixture ledger program's "oracle" sequence), against the in-process backend on the same episodes.

Needs Docker and the sandbox image (``bash scripts/docker_setup.sh``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "docker"))

import ledger_program as lp  # noqa: E402

from sopgym.sandboxes.base import StatefulProgram  # noqa: E402
from sopgym.sandboxes.docker import DockerStatefulBackend, image_tag  # noqa: E402
from sopgym.sandboxes.docker.channel import Channel  # noqa: E402
from sopgym.sandboxes.docker.hardening import ContainerHardening  # noqa: E402
from sopgym.sandboxes.docker.pool import ContainerPool, connect, destroy, start_container  # noqa: E402
from sopgym.sandboxes.inprocess import InProcessBackend  # noqa: E402

LEDGER = StatefulProgram("ledger_program")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def echo_channel(client, policy: ContainerHardening):
    """A container of the same image running ``cat`` as main process, attached the same way."""
    opts = policy.container_options(image=image_tag(), name=f"sopgym-bench-echo-{uuid.uuid4().hex[:8]}",
                                    role="bench", session="bench", command=["cat"])
    from sopgym.sandboxes.docker.pool import _host_config_kwargs

    host_config = client.api.create_host_config(**_host_config_kwargs(opts.pop("host_config")))
    stdin_once = opts.pop("stdin_once")
    name = opts.pop("name")
    config = client.api.create_container_config(host_config=host_config, **opts)
    config["StdinOnce"] = stdin_once
    cid = client.api.create_container_from_config(config, name)["Id"]
    sock = client.api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
    client.api.start(cid)
    return cid, Channel(sock, name)


def episode(backend, slot: int) -> None:
    """A fixed scripted ("oracle") episode of the ledger program: 8 calls and a snapshot."""
    backend.start_episode(LEDGER, lp.initial_state())
    backend.call("get_account", {"account": "A0"})
    backend.call("get_account", {"account": "A1"})
    backend.call("transfer", {"source": "A0", "target": "A1", "amount": 30})
    backend.call("transfer", {"source": "A1", "target": "A2", "amount": 500})  # business error
    backend.call("add_token", {"account": "A2", "token": f"slot-{slot}"})
    backend.call("list_tokens", {})
    backend.call("stats", {})
    backend.call("get_account", {"account": "A2"})
    backend.snapshot()


def episodes_per_s(make_backend, num_envs: int, num_episodes: int) -> float:
    backends = [make_backend() for _ in range(num_envs)]
    for i, b in enumerate(backends):  # warm: containers started, program loaded
        episode(b, i)
    barrier = threading.Barrier(num_envs + 1)

    def run(i: int) -> None:
        barrier.wait()
        for _ in range(num_episodes):
            episode(backends[i], i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(num_envs)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    for b in backends:
        b.close()
    return num_envs * num_episodes / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--exec-calls", type=int, default=100)
    parser.add_argument("--envs", type=int, default=32)
    parser.add_argument("--episodes", type=int, default=4)
    args = parser.parse_args()

    client = connect()
    policy = ContainerHardening()
    pool = ContainerPool(client, image_tag(), policy, "stateful")
    try:
        backend = DockerStatefulBackend(pool=pool)
        backend.start_episode(LEDGER, lp.initial_state())
        box = backend._box
        call = timed(lambda: backend.call("get_account", {"account": "A1"}), args.calls)

        cid, echo = echo_channel(client, policy)
        payload = {"name": "get_account", "args": {"account": "A1"}}
        try:
            # cat echoes our request line back: a same-size round trip with no work on the far side.
            def echo_once():
                echo._next_id = 0
                echo.request("echo", 5.0, **payload)

            echo_t = timed(echo_once, args.calls)
        finally:
            echo.close()
            destroy(client, cid)

        def fresh_exec():
            exec_id = client.api.exec_create(box.id, ["cat"], stdin=False, stdout=True, stderr=True)
            client.api.exec_start(exec_id)

        exec_t = timed(fresh_exec, args.exec_calls)
        reset = timed(lambda: backend.start_episode(LEDGER, lp.initial_state()), 200)
        backend.close()
        starts = []
        for _ in range(8):
            t = time.perf_counter()
            c = start_container(client, image_tag(), policy, "bench")
            starts.append(time.perf_counter() - t)
            c.channel.close()
            destroy(client, c.id)

        docker_eps = episodes_per_s(lambda: DockerStatefulBackend(pool=pool), args.envs, args.episodes)
        local_eps = episodes_per_s(InProcessBackend, args.envs, args.episodes * 4)
    finally:
        pool.close()

    ms = 1e3
    p50, p99 = statistics.median(call) * ms, pct(call, 0.99) * ms
    e50, e99 = statistics.median(echo_t) * ms, pct(echo_t, 0.99) * ms
    x50, x99 = statistics.median(exec_t) * ms, pct(exec_t, 0.99) * ms
    print(f"tool call over persistent channel  p50 {p50:.3f} ms  p99 {p99:.3f} ms  (n={len(call)})")
    print(f"raw echo over same channel (floor) p50 {e50:.3f} ms  p99 {e99:.3f} ms  -> call/echo p50 ratio {p50 / e50:.2f}x (target <= 2x)")
    print(f"fresh docker exec per call         p50 {x50:.3f} ms  p99 {x99:.3f} ms  -> exec/call p50 ratio {x50 / p50:.0f}x (target >= 100x)")
    print(f"episode reset (warm container)     p50 {statistics.median(reset) * ms:.3f} ms  p99 {pct(reset, 0.99) * ms:.3f} ms (target < 20 ms)")
    print(f"container start (create..hello)    p50 {statistics.median(starts) * ms:.0f} ms  max {max(starts) * ms:.0f} ms (n={len(starts)})")
    print(f"{args.envs} concurrent envs, scripted episodes: docker {docker_eps:.0f} episodes/s, in-process {local_eps:.0f} "
          f"episodes/s -> docker/in-process {docker_eps / local_eps:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
