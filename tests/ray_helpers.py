"""Helpers of the Ray env-worker tests: comparing runs, and killing a worker in the middle of a step.

This module is pickled by value into the Ray workers (the ``ray_session`` fixture registers it), so
the env wrapper below runs there without the tests folder on the workers' path.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym


def make_env(env_id: str):
    """Every authored env with in-process backends (the verifiable ones' code runner too)."""
    import sopgym  # noqa: F401  (registers the envs in a worker)

    if "AdTraffic" in env_id or "DrivingVideo" in env_id:
        return gym.make(env_id, code_runner="inprocess")
    return gym.make(env_id)


def result_view(result) -> dict[str, Any]:
    """Everything of an ``EpisodeResult`` that a pool could change: the record, every turn, the reset
    and final ``info``, the return."""
    return {
        "index": result.index, "spec": result.spec, "reset_observation": result.reset_observation,
        "reset_info": result.reset_info, "turns": result.turns, "record": result.record,
        "final_info": result.final_info, "total_reward": result.total_reward, "ended_by": result.ended_by,
    }


class StallOnTrigger(gym.Wrapper):
    """Stalls inside ``step`` (after writing ``<dir>/stalled``) when ``<dir>/trigger`` holds this
    process's pid, so a test can kill the worker while it is in the middle of a step."""

    def __init__(self, env: gym.Env, folder: str):
        super().__init__(env)
        self.folder = folder

    def step(self, action):
        trigger = Path(self.folder) / "trigger"
        if trigger.exists() and trigger.read_text() == str(os.getpid()):
            (Path(self.folder) / "stalled").write_text(str(os.getpid()))
            time.sleep(600)  # the test kills this process long before
        return self.env.step(action)


def stalling_factory(folder: str, **kwargs: Any):
    """``env_id -> StallOnTrigger(gym.make(env_id, **kwargs), folder)``."""

    def make(env_id: str):
        import sopgym  # noqa: F401  (registers the envs in the worker)

        return StallOnTrigger(gym.make(env_id, **kwargs), folder)

    return make


def arm(folder: str, pid: int) -> None:
    """Make the worker with ``pid`` stall in its next step."""
    (Path(folder) / "trigger").write_text(str(pid))


class Killer(threading.Thread):
    """Waits for a worker to stall mid-step, then kills it: ``ray.kill`` of its actor handle, or
    SIGKILL of its process (as the kernel's OOM killer or a lost host would)."""

    def __init__(self, folder: str, pool, worker: int, how: str, timeout: float = 300.0):
        super().__init__(daemon=True)
        self.folder, self.pool, self.worker, self.how, self.timeout = folder, pool, worker, how, timeout
        self.killed_pid: int | None = None

    def run(self) -> None:
        stalled = Path(self.folder) / "stalled"
        deadline = time.monotonic() + self.timeout
        while not stalled.exists():
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        pid = int(stalled.read_text())
        (Path(self.folder) / "trigger").unlink()
        if self.how == "ray.kill":
            import ray

            ray.kill(self.pool.worker_handles[self.worker], no_restart=True)
        elif self.how == "SIGKILL":
            os.kill(pid, signal.SIGKILL)
        else:
            raise AssertionError(f"unknown way to kill: {self.how!r}")
        self.killed_pid = pid


class DieOnReset(gym.Wrapper):
    """Its worker process exits in every ``reset``."""

    def reset(self, **kwargs):
        os._exit(1)


def dying_factory(env_id: str):
    return DieOnReset(make_env(env_id))


class RewriteFirstMessage(gym.Wrapper):
    """At the second step, changes the first message of ``info["messages"]``: ``copy`` in a new list
    (the next step shows the original again), ``in_place`` in the env's own dict (every later step
    shows the change). An env that rewrites its history must still reach the driver as it is."""

    def __init__(self, env: gym.Env, how: str):
        super().__init__(env)
        self.how, self.steps = how, 0

    def reset(self, **kwargs):
        self.steps = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps == 2:
            first = info["messages"][0]
            if self.how == "in_place":
                first["content"] += " (edited in place)"
            else:
                info = {**info, "messages": [{**first, "content": first["content"] + " (edited)"}, *info["messages"][1:]]}
        return observation, reward, terminated, truncated, info


def rewriting_factory(how: str):
    def make(env_id: str):
        return RewriteFirstMessage(make_env(env_id), how)

    return make
