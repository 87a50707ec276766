"""The wall-time budgets over the tools (``max_turn_seconds``, ``max_episode_seconds``;
sopgym/envs/budgets.py): a reply's or an episode's tools cannot hold ``env.step`` past them, the rest
of the reply is not run, the episode is truncated with the budget's own cause, and the evaluator and
the trainer count it like the other truncations. No measured time reaches ``info``.

The env's bookkeeping is checked over every registered env with a fake clock and tools that take a
fixed time on it; the real cut of the agent's code with the in-process runner here (the Docker runner
in tests/docker/test_docker_budgets.py)."""

from __future__ import annotations

import pytest
from budget_helpers import (
    CODE_TOOLS,
    check_endless_reply_ends_within_the_turn_budget,
    check_endless_turns_end_within_the_episode_budget,
)
from hostile_actions import make_env_without_docker

from sopgym.envs import budgets
from sopgym.envs.policies import format_call
from sopgym.evaluation import evaluate_records, score_record
from sopgym.sandboxes import Outcome, ToolResult
from sopgym.status import TRUNCATION, TRUNCATION_CAUSES, Status
from sopgym.trainers.alarms import truncation_check
from sopgym.trainers.episodes import Episode
from sopgym.trainers.rollout_metrics import rollout_metrics


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class SlowTools:
    """Stands in for the episode's tool box: every call takes ``seconds`` on the fake clock."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        self.clock, self.seconds = clock, seconds
        self.time_left: list[float | None] = []

    def __call__(self, name, arguments, *, time_left_s=None):
        self.time_left.append(time_left_s)
        self.clock.now += self.seconds
        return ToolResult(Outcome.OK, content=f"{name} answered")


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(budgets, "clock", fake)
    return fake


def _slow_env(env_id, clock, seconds, **kwargs):
    env = make_env_without_docker(env_id, **kwargs)
    _, info = env.reset(seed=0)
    tools = SlowTools(clock, seconds)
    env.unwrapped._toolbox.call = tools
    tool = next(t["function"]["name"] for t in info["tools"] if t["function"]["name"] != "submit_answer")
    return env, tools, tool


def _reply(tool, num_calls):
    return "".join(format_call(tool, {}) for _ in range(num_calls))


def test_each_budget_has_its_own_truncation_status():
    assert TRUNCATION_CAUSES["turn_time"] is Status.TRUNCATED_TURN_TIME
    assert TRUNCATION_CAUSES["episode_time"] is Status.TRUNCATED_EPISODE_TIME
    assert {Status.TRUNCATED_TURN_TIME, Status.TRUNCATED_EPISODE_TIME} <= TRUNCATION


def test_a_spent_turn_budget_runs_no_more_of_the_reply_and_truncates(env_id, clock):
    env, tools, tool = _slow_env(env_id, clock, 1.0, max_turn_seconds=2.5, max_episode_seconds=None)
    try:
        _, reward, terminated, truncated, info = env.step(_reply(tool, 15) + format_call("submit_answer", {}))
    finally:
        env.close()
    assert tools.time_left == [2.5, 1.5, 0.5]  # each call was given what was left; the 4th never ran
    assert (terminated, truncated) == (False, True)
    assert info["status"] == "TRUNCATED_TURN_TIME" and info["truncation_cause"] == "turn_time"
    assert [c["status"] for c in info["calls"]] == ["OK"] * 3 + ["ERROR_TIMEOUT"] * 13  # the submit was not run either
    results = [m["content"] for m in info["messages"] if m["role"] == "tool"]
    assert len(results) == 16 and all(r.startswith("Not run: the turn's wall-time budget over the tools (2.5 s") for r in results[3:])
    assert "max_turn_seconds" in info["status_message"]
    record = info["episode"]
    assert record["truncation_cause"] == "turn_time" and record["answer"] is None and record["num_tool_calls"] == 3
    assert score_record(record).truncation_cause == "turn_time"
    assert evaluate_records([record], n_bootstrap=0)["truncation_rate_by_cause"] == {"turn_time": 1.0}


def test_a_spent_episode_budget_truncates_with_its_cause(env_id, clock):
    env, tools, tool = _slow_env(env_id, clock, 1.0, max_turn_seconds=None, max_episode_seconds=2.5, max_turns=10)
    try:
        for turn in (1, 2):
            *_, truncated, info = env.step(_reply(tool, 1))
            assert not truncated and info["truncation_cause"] is None, turn
        _, _, terminated, truncated, info = env.step(_reply(tool, 2))
    finally:
        env.close()
    assert tools.time_left == [2.5, 1.5, 0.5]
    assert (terminated, truncated) == (False, True) and info["turn"] == 3
    assert info["status"] == "TRUNCATED_EPISODE_TIME" and info["truncation_cause"] == "episode_time"
    assert info["calls"][-1]["status"] == "ERROR_TIMEOUT"
    assert "max_episode_seconds" in info["messages"][-1]["content"]
    record = info["episode"]
    assert record["truncation_cause"] == "episode_time"
    assert evaluate_records([record], n_bootstrap=0)["counts"]["truncated_by_cause"] == {"episode_time": 1}


def test_the_smaller_budget_left_binds(clock):
    env, tools, tool = _slow_env("sopgym/OrderFulfilment-v0", clock, 1.0, max_turn_seconds=10, max_episode_seconds=3.5, max_turns=10)
    try:
        env.step(_reply(tool, 2))
        *_, info = env.step(_reply(tool, 4))
    finally:
        env.close()
    assert tools.time_left == [3.5, 2.5, 1.5, 0.5]
    assert info["truncation_cause"] == "episode_time"


def _episode_infos(env_id, clock, seconds, replies, **kwargs):
    env, _, tool = _slow_env(env_id, clock, seconds, **kwargs)
    _, first = env.reset(seed=3)
    env.unwrapped._toolbox.call = SlowTools(clock, seconds)
    infos = [first]
    try:
        for n in replies:
            *_, terminated, truncated, info = env.step(_reply(tool, n))
            infos.append(info)
            if terminated or truncated:
                break
    finally:
        env.close()
    return infos


def test_info_is_the_same_however_long_the_tools_took(env_id, clock):
    """Gymnasium's determinism: the same seeded episode gives the same ``info`` at 0.1 s or 0.7 s a call
    (under the budgets), and when a budget is spent at the same call after 1.0 s or 1.2 s a call (no
    measured time in a message)."""
    fast = _episode_infos(env_id, clock, 0.1, [2, 2], max_turn_seconds=1.5, max_turns=3)
    slow = _episode_infos(env_id, clock, 0.7, [2, 2], max_turn_seconds=1.5, max_turns=3)
    assert fast == slow and fast[-1]["truncation_cause"] is None
    cut = _episode_infos(env_id, clock, 1.0, [4], max_turn_seconds=2.5)
    cut_later = _episode_infos(env_id, clock, 1.2, [4], max_turn_seconds=2.5)
    assert cut == cut_later and cut[-1]["truncation_cause"] == "turn_time"


def test_default_budgets_are_set(env_id):
    env = make_env_without_docker(env_id)
    try:
        assert (env.unwrapped.wall_time.turn_s, env.unwrapped.wall_time.episode_s) == (60.0, 300.0)
    finally:
        env.close()


@pytest.mark.parametrize("env_id,tool,language", CODE_TOOLS)
def test_endless_code_in_one_reply_ends_within_the_turn_budget_inprocess(env_id, tool, language):
    env = make_env_without_docker(env_id, max_turn_seconds=2.0)
    check_endless_reply_ends_within_the_turn_budget(env, tool, language, 2.0)


@pytest.mark.parametrize("env_id,tool,language", CODE_TOOLS)
def test_endless_code_over_turns_ends_within_the_episode_budget_inprocess(env_id, tool, language):
    env = make_env_without_docker(env_id, max_turn_seconds=None, max_episode_seconds=3.0, max_turns=10)
    check_endless_turns_end_within_the_episode_budget(env, tool, language, 3.0)


def test_code_that_ends_in_time_is_not_cut():
    env_id, tool, language = next(c for c in CODE_TOOLS if c[2] == "python")
    env = make_env_without_docker(env_id, max_turn_seconds=20.0)
    try:
        env.reset(seed=0)
        *_, truncated, info = env.step(format_call(tool, {"code": "print(6 * 7)"}) * 3)
    finally:
        env.close()
    assert not truncated and [c["status"] for c in info["calls"]] == ["OK"] * 3


def test_the_trainer_counts_time_truncations_like_the_others():
    episodes = [Episode("t", 0, 0, "e") for _ in range(8)] + [
        Episode("t", 0, 0, "e", truncation_cause="turn_time"), Episode("t", 0, 0, "e", truncation_cause="episode_time")]
    metrics = rollout_metrics(episodes)
    assert metrics["rollout/truncation_rate/turn_time"] == metrics["rollout/truncation_rate/episode_time"] == 0.1
    assert metrics["rollout/truncation_rate/any"] == 0.2
    check = truncation_check(episodes, 0.05)
    assert check.fired and "episode_time 1" in check.message and "turn_time 1" in check.message
