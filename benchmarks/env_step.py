"""Microseconds per env ``step`` on the replay tier, against baselines measured in the same run.

What is timed: ``env.step(action)`` for every step of oracle episodes (a Hermes JSON tool call parsed,
validated against its schema, answered from the replay records, rendered and recorded in
``info``), with actions precomputed so the policy is not timed. Baselines:

* ``noop``: a gymnasium env whose ``step`` returns constants (the floor of the API itself);
* ``gem``: GEM's simplest env (``game:GuessTheNumber-v0-easy``: parse a boxed guess, compare, reply),
  when ``gem-llm`` is installed (``pip install 'sopgym[bench]'``).

Usage: python benchmarks/env_step.py [--env sopgym/WarehouseReceiving-v0] [--episodes 400] [--repeats 3]
Prints median and p99 per step, reset latency, and ratios to the floor.
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym

import sopgym  # noqa: F401  (registers envs)
from sopgym.envs.policies import make_policy


class NoopEnv(gym.Env):
    observation_space = gym.spaces.Discrete(1)
    action_space = gym.spaces.Discrete(1)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        return 0, 0.0, False, False, {}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def oracle_actions(env_id: str, episodes: int) -> list[tuple[dict, list[str]]]:
    env = gym.make(env_id)
    out = []
    for i in range(episodes):
        options = {"split": "test", "task_index": i % 200}
        obs, info = env.reset(options=options)
        policy = make_policy("oracle")
        policy.reset(info)
        actions, done = [], False
        while not done:
            action = policy.act(obs, info)
            actions.append(action)
            obs, _, term, trunc, info = env.step(action)
            done = term or trunc
        out.append((options, actions))
    env.close()
    return out


def time_env(env, episodes) -> tuple[list[float], list[float]]:
    steps_us, resets_us = [], []
    clock = time.perf_counter_ns
    for options, actions in episodes:
        t0 = clock()
        env.reset(options=options)
        resets_us.append((clock() - t0) / 1e3)
        for action in actions:
            t0 = clock()
            env.step(action)
            steps_us.append((clock() - t0) / 1e3)
    return steps_us, resets_us


def time_noop(n: int) -> list[float]:
    env = NoopEnv()
    env.reset(seed=0)
    clock = time.perf_counter_ns
    out = []
    for _ in range(n):
        t0 = clock()
        env.step(0)
        out.append((clock() - t0) / 1e3)
    return out


def time_gem(n: int) -> list[float] | None:
    try:
        import gem  # type: ignore
    except ImportError:
        return None
    env = gem.make("game:GuessTheNumber-v0-easy")
    env.reset(seed=0)
    clock = time.perf_counter_ns
    out = []
    for i in range(n):
        t0 = clock()
        _, _, term, trunc, _ = env.step(f"\\boxed{{{i % 10 + 1}}}")
        out.append((clock() - t0) / 1e3)
        if term or trunc:
            env.reset()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="sopgym/WarehouseReceiving-v0")
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    episodes = oracle_actions(args.env, args.episodes)
    raw, wrapped = gym.make(args.env).unwrapped, gym.make(args.env)
    rows = {}
    for _ in range(args.repeats):  # interleave, keep every sample: the machine is noisy
        for name, env in (("sopgym (unwrapped)", raw), ("sopgym (gym.make)", wrapped)):
            steps, resets = time_env(env, episodes)
            rows.setdefault(name, ([], []))
            rows[name][0].extend(steps)
            rows[name][1].extend(resets)
        rows.setdefault("noop floor", ([], []))[0].extend(time_noop(len(steps)))
        gem_steps = time_gem(2000)
        if gem_steps is not None:
            rows.setdefault("gem GuessTheNumber-easy", ([], []))[0].extend(gem_steps)

    floor = statistics.median(rows["noop floor"][0])
    print(f"env={args.env} episodes={args.episodes} repeats={args.repeats} steps/episode={len(rows['sopgym (unwrapped)'][0]) / args.episodes / args.repeats:.2f}")
    print(f"{'what':24s} {'median us':>10s} {'p99 us':>10s} {'x floor':>9s} {'reset median us':>16s}")
    for name, (steps, resets) in rows.items():
        med = statistics.median(steps)
        reset = f"{statistics.median(resets):16.1f}" if resets else f"{'-':>16s}"
        print(f"{name:24s} {med:10.2f} {percentile(steps, 0.99):10.2f} {med / floor:9.1f} {reset}")
    if "gem GuessTheNumber-easy" not in rows:
        print("gem-llm not installed: GEM baseline not measured (pip install 'sopgym[bench]')")


if __name__ == "__main__":
    main()
