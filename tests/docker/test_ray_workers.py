"""Docker-sandboxed envs on Ray workers: the same episodes as in-process, the containers live in the
workers' processes, and they go away with the workers (closed, or killed mid-step)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from docker_helpers import STATEFUL_ENV

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the Ray test helpers
from ray_helpers import Killer, arm, result_view, stalling_factory  # noqa: E402

from sopgym.episodes.pools import EnvPool  # noqa: E402
from sopgym.episodes.ray_pool import RayEnvPool  # noqa: E402
from sopgym.episodes.runner import PolicyAgent, builtin_policy_agent, run_episodes  # noqa: E402
from sopgym.episodes.specs import task_specs  # noqa: E402

pytestmark = pytest.mark.docker

ENV_ID, ENV_KWARGS = STATEFUL_ENV


def containers_of(client, pids) -> list[str]:
    """Names of sopgym containers (any state, any session) whose owner process is one of ``pids``."""
    from sopgym.sandboxes.docker import hardening

    pids = {str(p) for p in pids}
    found = client.api.containers(all=True, filters={"label": [hardening.MANAGED]})
    return [c["Names"][0].lstrip("/") for c in found if (c.get("Labels") or {}).get(hardening.OWNER_PID) in pids]


def wait_gone(client, pids, timeout=60.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := containers_of(client, pids)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def in_process(specs, agent, tmp_path):
    pool = EnvPool(stalling_factory(str(tmp_path), **ENV_KWARGS))
    try:
        return run_episodes(specs, agent, pool)
    finally:
        pool.close()


@pytest.mark.parametrize("policy", ["oracle", "random"])
def test_docker_envs_on_ray_workers_give_the_in_process_episodes_and_close_their_containers(
        docker_client, ray_session, tmp_path, policy):
    specs = task_specs(ENV_ID, "test", 3, samples_per_task=2, seed=11)
    expected = in_process(specs, builtin_policy_agent(policy), tmp_path)
    pool = RayEnvPool(stalling_factory(str(tmp_path), **ENV_KWARGS), num_workers=2)
    try:
        got = run_episodes(specs, builtin_policy_agent(policy), pool)
        pids = [w["pid"] for w in pool.worker_info()]
        assert len(containers_of(docker_client, pids)) >= 2  # the sandboxes run in the workers' processes
    finally:
        pool.close()
    assert [result_view(r) for r in got] == [result_view(r) for r in expected]
    assert wait_gone(docker_client, pids) == []


class ArmingAgent(PolicyAgent):
    def __init__(self, pool, folder):
        from sopgym.envs.policies import make_policy

        super().__init__(lambda spec: make_policy("oracle"))
        self.pool, self.folder, self.rounds = pool, folder, 0

    def act(self, slots, observations, infos):
        self.rounds += 1
        if self.rounds == 2:
            arm(self.folder, self.pool.worker_info()[1]["pid"])
        return super().act(slots, observations, infos)


def test_a_docker_worker_killed_mid_step_loses_its_episodes_and_its_containers(docker_client, ray_session, tmp_path):
    specs = task_specs(ENV_ID, "test", 4, seed=5)
    expected = in_process(specs, builtin_policy_agent("oracle"), tmp_path)
    pool = RayEnvPool(stalling_factory(str(tmp_path), **ENV_KWARGS), num_workers=2)
    try:
        dead = pool.worker_info()[1]["pid"]
        killer = Killer(str(tmp_path), pool, worker=1, how="SIGKILL")
        killer.start()
        got = run_episodes(specs, ArmingAgent(pool, str(tmp_path)), pool)
        killer.join(5)
        assert killer.killed_pid == dead
        assert [result_view(got[i]) for i in (0, 2)] == [result_view(expected[i]) for i in (0, 2)]
        assert all(got[i].record["truncation_cause"] == "env_lost" and got[i].score.infrastructure_failure for i in (1, 3))
        assert wait_gone(docker_client, [dead]) == []  # the dead worker's containers removed themselves
    finally:
        pool.close()
