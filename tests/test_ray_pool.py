"""Env workers on Ray (``RayEnvPool``): the same episodes as the in-process pool, and a worker that dies
mid-step costs only its own episodes, each ended with an evaluator-valid infrastructure-failure record.

Ray runs once for the session (``ray_session`` in conftest.py); without ray installed these tests skip
with the reason, except under ``SOPGYM_REQUIRE_RAY=1`` (CI), where they fail.
"""

from __future__ import annotations

import pytest
from ray_helpers import Killer, arm, dying_factory, make_env, result_view, rewriting_factory, stalling_factory

import sopgym  # noqa: F401  (registers the envs)
from sopgym.envs.policies import make_policy
from sopgym.envs.registration import registered_env_ids
from sopgym.episodes.pools import EnvPool
from sopgym.episodes.ray_pool import RayEnvPool, WorkerLost
from sopgym.episodes.runner import PolicyAgent, builtin_policy_agent, make_env_pool, run_episodes
from sopgym.episodes.specs import EpisodeSpec, task_specs
from sopgym.evaluation import evaluate_records

WR = "sopgym/WarehouseReceiving-v0"


def in_process(specs, agent, **kwargs):
    pool = EnvPool(make_env)
    try:
        return run_episodes(specs, agent, pool, **kwargs)
    finally:
        pool.close()


@pytest.fixture(scope="module")
def ray_pool(ray_session):
    """Two workers shared by the equality tests (their envs are reused across tests, as in a run)."""
    pool = RayEnvPool(make_env, num_workers=2)
    yield pool
    pool.close()


@pytest.mark.parametrize("policy", ["random", "oracle"])
@pytest.mark.parametrize("env_id", registered_env_ids("sopgym"))
def test_ray_workers_give_the_in_process_episodes(ray_pool, env_id, policy):
    specs = task_specs(env_id, "test", 3, samples_per_task=2, seed=7)
    expected = in_process(specs, builtin_policy_agent(policy), concurrency=4)
    got = run_episodes(specs, builtin_policy_agent(policy), ray_pool, concurrency=4)
    assert [result_view(r) for r in got] == [result_view(r) for r in expected]


@pytest.mark.parametrize("how", ["copy", "in_place"])
def test_an_env_that_rewrites_an_earlier_message_reaches_the_driver_as_it_is(ray_session, how):
    """Workers ship only the new messages of a step; a changed history must ship whole."""
    specs = task_specs(WR, "test", 3, seed=2)
    local, local_agent = EnvPool(rewriting_factory(how)), SeeingAgent()
    remote, remote_agent = RayEnvPool(rewriting_factory(how), num_workers=2), SeeingAgent()
    try:
        expected = run_episodes(specs, local_agent, local)
        got = run_episodes(specs, remote_agent, remote)
    finally:
        local.close()
        remote.close()
    assert any("(edited" in m[0]["content"] for m in local_agent.seen)  # the env did rewrite its history
    assert remote_agent.seen == local_agent.seen
    # (not reset_info: in-process, an in-place edit also reaches the reset info already handed out)
    assert [(r.record, r.turns, r.final_info) for r in got] == [(r.record, r.turns, r.final_info) for r in expected]


class SeeingAgent(PolicyAgent):
    """The oracle, keeping a copy of every ``info["messages"]`` it is shown."""

    def __init__(self):
        super().__init__(lambda spec: make_policy("oracle"))
        self.seen = []

    def act(self, slots, observations, infos):
        self.seen.extend([dict(m) for m in info["messages"]] for info in infos)
        return super().act(slots, observations, infos)


def test_an_env_error_in_a_worker_is_raised_with_its_type_and_the_worker_carries_on(ray_pool):
    bad = [EpisodeSpec(WR, 0, {"split": "no_such_split"})]
    with pytest.raises(ValueError) as local:
        in_process(bad, builtin_policy_agent("oracle"))
    with pytest.raises(ValueError) as remote:
        run_episodes(bad, builtin_policy_agent("oracle"), ray_pool)
    assert str(local.value).splitlines()[-1] in str(remote.value)
    assert ray_pool.workers_lost == 0
    specs = task_specs(WR, "test", 2, seed=1)
    assert [r.record for r in run_episodes(specs, builtin_policy_agent("oracle"), ray_pool)] == \
        [r.record for r in in_process(specs, builtin_policy_agent("oracle"))]


class ArmingAgent(PolicyAgent):
    """The oracle, arming worker ``worker``'s stall before round ``at_round`` is stepped."""

    def __init__(self, pool, folder, worker=1, at_round=2):
        super().__init__(lambda spec: make_policy("oracle"))
        self.pool, self.folder, self.worker, self.at_round, self.rounds = pool, folder, worker, at_round, 0

    def act(self, slots, observations, infos):
        self.rounds += 1
        if self.rounds == self.at_round:
            arm(self.folder, self.pool.worker_info()[self.worker]["pid"])
        return super().act(slots, observations, infos)


@pytest.fixture
def stalling_pool(ray_session, tmp_path):
    pool = RayEnvPool(stalling_factory(str(tmp_path)), num_workers=2)
    yield pool, str(tmp_path)
    pool.close()


@pytest.mark.parametrize("how", ["ray.kill", "SIGKILL"])
def test_a_worker_killed_mid_step_ends_only_its_episodes_as_infrastructure_failures(stalling_pool, how):
    pool, folder = stalling_pool
    specs = task_specs(WR, "test", 4, seed=3)  # slots 0..3: slots 1 and 3 live on worker 1
    expected = in_process(specs, builtin_policy_agent("oracle"))
    old_pid = pool.worker_info()[1]["pid"]
    killer = Killer(folder, pool, worker=1, how=how)
    killer.start()
    got = run_episodes(specs, ArmingAgent(pool, folder), pool)
    killer.join(5)
    assert killer.killed_pid == old_pid  # it stalled inside env.step and was killed there

    for i in (0, 2):  # worker 0's episodes are untouched
        assert result_view(got[i]) == result_view(expected[i])
    for i in (1, 3):
        record, score = got[i].record, got[i].score
        assert record["infrastructure_failure"] and score.infrastructure_failure
        assert record["truncation_cause"] == score.truncation_cause == "env_lost"
        assert got[i].final_info["status"] == "ERROR_ENV_LOST"
        assert record["task_id"] == expected[i].record["task_id"]
        assert "was lost" in got[i].final_info["status_message"]
        assert len(got[i].turns) == 2  # one played turn, then the step that was lost
    metrics = evaluate_records([r.record for r in got], n_bootstrap=0)
    assert metrics["infrastructure_failure_rate"] == 0.5
    assert metrics["task_success_rate_excluding_infrastructure"] == 1.0
    assert (pool.workers_lost, pool.episodes_lost) == (1, 2)
    assert pool.worker_info()[1]["pid"] != old_pid


def test_the_replacement_worker_serves_the_next_batch_like_the_in_process_pool(stalling_pool):
    pool, folder = stalling_pool
    specs = task_specs(WR, "test", 4, seed=3)
    killer = Killer(folder, pool, worker=1, how="SIGKILL")
    killer.start()
    run_episodes(specs, ArmingAgent(pool, folder), pool)
    killer.join(5)
    assert pool.workers_lost == 1
    again = run_episodes(specs, builtin_policy_agent("random"), pool, concurrency=3)
    assert [result_view(r) for r in again] == [result_view(r) for r in in_process(specs, builtin_policy_agent("random"), concurrency=3)]
    assert pool.workers_lost == 1


def test_a_worker_that_dies_on_every_start_ends_the_call_instead_of_looping(ray_session):
    pool = RayEnvPool(dying_factory, num_workers=1, max_replacements=1)
    try:
        with pytest.raises(WorkerLost, match="max_replacements=1"):
            pool.reset([(0, EpisodeSpec(WR, 0, {"split": "test"}))])
        assert pool.workers_lost == 2
    finally:
        pool.close()


def test_a_worker_no_node_can_place_fails_with_what_it_asked_for_instead_of_hanging(ray_session):
    pool = RayEnvPool(make_env, num_workers=1, resources={"no_such_host": 1}, start_timeout_s=5)
    try:
        with pytest.raises(WorkerLost, match="did not start within 5 s; it needs .*'no_such_host': 1"):
            pool.start()
    finally:
        pool.close()


def test_make_env_pool_is_in_process_by_default_and_refuses_an_unknown_backend():
    assert type(make_env_pool(make_env)) is EnvPool
    assert type(make_env_pool(make_env, "ray", num_workers=3)) is RayEnvPool  # no Ray started until used
    with pytest.raises(ValueError, match="must be one of"):
        make_env_pool(make_env, "dask")


@pytest.mark.parametrize("kwargs", [{"num_workers": 0}, {"num_workers": 1.5}, {"cpus_per_worker": -1}, {"max_replacements": -1},
                                    {"start_timeout_s": 0}])
def test_bad_worker_settings_are_refused(kwargs):
    with pytest.raises(ValueError, match="must be"):
        RayEnvPool(make_env, **kwargs)



def test_sopgym_eval_on_ray_workers_writes_the_in_process_results(ray_session, tmp_path):
    import json

    from sopgym import cli

    common = ["eval", "--env", WR, "--policy", "random", "--episodes", "6", "--samples-per-task", "2", "--k", "2",
              "--n-bootstrap", "50", "--quiet"]
    assert cli.main([*common, "--out", str(tmp_path / "local.json"), "--trajectories", str(tmp_path / "local.jsonl")]) == 0
    assert cli.main([*common, "--workers", "2", "--concurrency", "5", "--out", str(tmp_path / "ray.json"),
                     "--trajectories", str(tmp_path / "ray.jsonl")]) == 0
    ray, local = (json.loads((tmp_path / name).read_text()) for name in ("ray.json", "local.json"))
    assert (ray["envs"], ray["suite"]) == (local["envs"], local["suite"])
    assert ray["config"]["identity"] == local["config"]["identity"]
    assert by_episode(tmp_path / "ray.jsonl") == by_episode(tmp_path / "local.jsonl")


def by_episode(path) -> dict[int, list[str]]:
    """A trajectory file's lines per episode (episodes are written as they finish, so with more than
    one running at once the file's order of episodes differs)."""
    import json

    out: dict[int, list[str]] = {}
    for line in path.read_text().splitlines():
        if json.loads(line)["type"] != "run":  # the run line says which run (the same settings: tested above)
            out.setdefault(json.loads(line)["episode_index"], []).append(line)
    return out


def test_sopgym_eval_refuses_a_ray_address_without_workers(capsys):
    from sopgym import cli

    assert cli.main(["eval", "--env", WR, "--ray-address", "auto"]) == 2
    assert "--ray-address 'auto' needs --workers N" in capsys.readouterr().err


@pytest.mark.slow
def test_the_env_worker_benchmark_runs_and_its_ray_runs_give_the_in_process_records(ray_session):
    import re
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "env_workers.py"
    out = subprocess.run([sys.executable, str(script), "--envs", "4", "--episodes", "8", "--repeats", "1", "--workers", "2",
                          "--cases", "inprocess"], capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, f"benchmarks/env_workers.py exited {out.returncode}, expected 0:\n{out.stderr[-3000:]}"
    assert "every Ray run gave the in-process records: yes" in out.stdout
    assert re.search(r"^inprocess\s+ray x2\s+\d+\s+\d+\s+\d+\.\d+x$", out.stdout, re.M), out.stdout
