"""The one episode runner: order, concurrency, agents, pools and trajectory files."""

from __future__ import annotations

import gymnasium as gym
import pytest
from episode_helpers import policy_records

import sopgym  # noqa: F401  (registers the envs)
from sopgym.envs.policies import make_policy
from sopgym.envs.registration import registered_env_ids
from sopgym.episodes.pools import EnvPool
from sopgym.episodes.runner import builtin_policy_agent, run_episode, run_episodes, trajectory_lines
from sopgym.episodes.specs import EndEpisode, EpisodeSpec, task_specs
from sopgym.evaluation import evaluate_records, load_records
from sopgym.trajectory import TrajectoryWriter

WR = "sopgym/WarehouseReceiving-v0"


def _make(env_id):
    return gym.make(env_id, code_runner="inprocess") if "AdTraffic" in env_id or "DrivingVideo" in env_id else gym.make(env_id)


@pytest.mark.parametrize("env_id", registered_env_ids("sopgym"))
def test_batched_run_equals_one_episode_at_a_time(env_id):
    specs = task_specs(env_id, "test", 3, samples_per_task=2, seed=5)
    pool = EnvPool(_make)
    try:
        batched = run_episodes(specs, builtin_policy_agent("random"), pool)
        sequential = run_episodes(specs, builtin_policy_agent("random"), pool, concurrency=1)
        refilled = run_episodes(specs, builtin_policy_agent("random"), pool, concurrency=4)
    finally:
        pool.close()
    assert [r.record for r in batched] == [r.record for r in sequential] == [r.record for r in refilled]
    assert [r.index for r in batched] == list(range(len(specs)))


def test_results_come_back_in_spec_order_and_on_result_sees_each_once():
    specs = task_specs(WR, "test", 4, seed=1)
    seen = []
    pool = EnvPool(_make)
    try:
        results = run_episodes(specs, builtin_policy_agent("oracle"), pool, concurrency=3, on_result=seen.append)
    finally:
        pool.close()
    assert [r.spec for r in results] == specs
    assert sorted(r.index for r in seen) == [0, 1, 2, 3]
    assert all(r.success for r in results)


def test_oracle_runs_through_the_synchronous_runner():
    env = gym.make(WR)
    try:
        result = run_episode(env, make_policy("oracle"), seed=0, options={"split": "test", "task_index": 3})
        assert result.success and result.record["terminated"]
        assert result.total_reward == pytest.approx(sum(t.reward for t in result.turns))
        env.reset(seed=0)  # the caller's env stays open
    finally:
        env.close()


class _WrongCount:
    def start(self, *a):
        pass

    def act(self, slots, observations, infos):
        return []

    def observe(self, *a):
        pass


def test_an_agent_answering_the_wrong_number_of_episodes_is_refused():
    pool = EnvPool(_make)
    try:
        with pytest.raises(ValueError, match="answered 0 episodes, expected 1"):
            run_episodes([EpisodeSpec(WR, 0)], _WrongCount(), pool)
    finally:
        pool.close()


class _Stopper(_WrongCount):
    def act(self, slots, observations, infos):
        return [EndEpisode("stopped")] * len(slots)


def test_ending_an_episode_of_an_env_without_end_episode_names_the_problem():
    class Plain(gym.Env):
        observation_space = action_space = gym.spaces.Text(10)

        def reset(self, *, seed=None, options=None):
            return "", {}

    pool = EnvPool(lambda env_id: Plain())
    with pytest.raises(TypeError, match="has no end_episode"):
        run_episodes([EpisodeSpec("plain")], _Stopper(), pool)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_concurrency_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="concurrency must be a positive integer"):
        run_episodes([EpisodeSpec(WR)], _Stopper(), EnvPool(_make), concurrency=bad)


def test_trajectory_file_of_the_runner_reads_back_as_the_same_records(tmp_path):
    path = tmp_path / "t.jsonl"
    writer = TrajectoryWriter(path)
    try:
        records = policy_records(WR, "random", 3, 2, 0, "test", {}, on_result=lambda r: writer.write(trajectory_lines(r)))
    finally:
        writer.close()
    assert load_records(path) == records
    assert evaluate_records(load_records(path), k=2, n_bootstrap=0) == evaluate_records(records, k=2, n_bootstrap=0)


def test_trajectory_lines_follow_the_record_trajectory_format():
    env = gym.make(WR)
    try:
        result = run_episode(env, make_policy("oracle"), seed=0, options={"split": "test", "task_index": 0})
    finally:
        env.close()
    lines = list(trajectory_lines(result, episode_index=7))
    assert [line["type"] for line in lines] == ["reset"] + ["step"] * len(result.turns) + ["episode"]
    assert {line["episode_index"] for line in lines} == {7}
    assert lines[0]["observation"] == result.reset_observation
    assert [line["turn"] for line in lines[1:-1]] == list(range(1, len(result.turns) + 1))
