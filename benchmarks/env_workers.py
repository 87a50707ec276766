"""Env-worker benchmark: episodes/s of a scripted policy at 64 concurrent envs, in-process vs Ray workers.

    python benchmarks/env_workers.py [--envs 64] [--episodes 512] [--workers 2,4] [--repeats 3]
                                     [--policy oracle] [--cases inprocess,docker,latency] [--latency-ms 10]

For each case (one domain, its stateful tools in this process or in Docker containers; ``latency``:
in this process, each step first waiting ``--latency-ms`` without using CPU, as a tool that waits on
a remote service would, a synthetic case that shows how waiting scales), the same
seeded episodes (``task_specs`` of the train split) run through the one episode runner with
``--envs`` episodes at once, on the in-process ``EnvPool`` (the baseline) and on ``RayEnvPool`` with
each ``--workers`` count. Every pool is built and warmed up (envs made, containers started, one full
pass) before timing; then the measurements are interleaved (baseline, ray xN, ..., repeated), so
the host's load drifts alike over all of them. Printed per pool: best and median episodes/s over the
repeats and the ratio of the best against the in-process pool's best in the same run; and whether
every Ray run gave exactly the in-process records (it must).

Ray runs on this machine (``init_ray``: loopback only, no dashboard), one logical CPU per worker,
and is shut down at the end. The Docker case needs Docker and the sandbox image
(``bash scripts/docker_setup.sh``); ``--cases inprocess`` skips it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import gymnasium as gym

import sopgym  # noqa: F401  (registers the envs)
from sopgym.episodes.pools import EnvPool
from sopgym.episodes.ray_pool import RayEnvPool, init_ray
from sopgym.episodes.runner import builtin_policy_agent, run_episodes
from sopgym.episodes.specs import task_specs

ENV_ID = "sopgym/CustomerServiceTroubleshooting-v0"
#: case -> (gymnasium.make kwargs, whether each step also waits --latency-ms)
CASES = {"inprocess": ({"sandbox": "inprocess"}, False), "docker": ({"sandbox": "docker"}, False),
         "latency": ({"sandbox": "inprocess"}, True)}


class Maker:
    """``env_id -> gymnasium.make(env_id, **kwargs)``, each step waiting ``latency_s`` first when > 0;
    picklable for the workers."""

    def __init__(self, latency_s: float = 0.0, **kwargs):
        self.latency_s, self.kwargs = latency_s, kwargs

    def __call__(self, env_id: str):
        from sopgym.envs import registration  # noqa: F401  (importing sopgym registers the envs in a worker)

        env = gym.make(env_id, **self.kwargs)
        return Waiting(env, self.latency_s) if self.latency_s > 0 else env


class Waiting(gym.Wrapper):
    """Every step first waits (sleeps) ``latency_s``: a tool that waits on a remote service or a slow
    sandbox, without using CPU. Synthetic: it shows how waiting scales with workers."""

    def __init__(self, env: gym.Env, latency_s: float):
        super().__init__(env)
        self.latency_s = latency_s

    def step(self, action):
        time.sleep(self.latency_s)
        return self.env.step(action)


def run(pool, specs, policy: str, envs: int) -> tuple[float, list[dict]]:
    """One pass over ``specs``: (seconds, records)."""
    started = time.perf_counter()
    results = run_episodes(specs, builtin_policy_agent(policy), pool, concurrency=envs)
    return time.perf_counter() - started, [r.record for r in results]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=64, help="episodes running at once (the pool's slots)")
    parser.add_argument("--episodes", type=int, default=512, help="episodes per measurement")
    parser.add_argument("--workers", default="2,4", help="Ray worker counts to measure, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--policy", default="oracle")
    parser.add_argument("--cases", default="inprocess,docker", help=f"comma-separated, of {sorted(CASES)}")
    parser.add_argument("--latency-ms", type=float, default=10.0, help="the latency case's wait per step")
    args = parser.parse_args()
    workers = [int(w) for w in args.workers.split(",") if w]
    cases = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"--cases: expected some of {sorted(CASES)}, got {unknown}")

    load = os.getloadavg()
    print(f"== env workers: {ENV_ID}, policy {args.policy}, {args.envs} concurrent envs, {args.episodes} episodes per "
          f"measurement, best and median of {args.repeats}; host: {os.cpu_count()} cores, load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at start")
    started = time.perf_counter()
    init_ray(num_cpus=sum(workers))  # every Ray pool is alive at once (the measurements interleave)
    print(f"ray started in {time.perf_counter() - started:.1f} s")
    specs = task_specs(ENV_ID, "train", args.episodes, seed=0)
    all_identical = True
    try:
        for case in cases:
            kwargs, waits = CASES[case]
            make = Maker(args.latency_ms / 1000 if waits else 0.0, **kwargs)
            pools: dict[str, object] = {"in-process": EnvPool(make)}
            for n in workers:
                pools[f"ray x{n}"] = RayEnvPool(make, num_workers=n)
            try:
                reference = None
                for name, pool in pools.items():  # warm-up: envs, containers, imports, one full pass
                    t = time.perf_counter()
                    _, records = run(pool, specs, args.policy, args.envs)
                    if reference is None:
                        reference = records
                    identical = records == reference
                    all_identical &= identical
                    print(f"[{case}] {name}: warm-up pass {time.perf_counter() - t:.1f} s, records identical to "
                          f"in-process: {'yes' if identical else 'NO'}")
                rates: dict[str, list[float]] = {name: [] for name in pools}
                for _ in range(args.repeats):
                    for name, pool in pools.items():
                        seconds, records = run(pool, specs, args.policy, args.envs)
                        all_identical &= records == reference
                        rates[name].append(args.episodes / seconds)
                base = max(rates["in-process"])
                print(f"{'case':<10} {'pool':<11} {'best eps/s':>11} {'median eps/s':>13} {'best / in-process':>18}")
                for name, values in rates.items():
                    print(f"{case:<10} {name:<11} {max(values):>11.0f} {statistics.median(values):>13.0f} "
                          f"{max(values) / base:>17.2f}x")
            finally:
                for pool in pools.values():
                    pool.close()
    finally:
        import ray

        ray.shutdown()
    load = os.getloadavg()
    print(f"load average at end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print(f"every Ray run gave the in-process records: {'yes' if all_identical else 'NO'}")
    return 0 if all_identical else 1


if __name__ == "__main__":
    sys.exit(main())
