"""One answer to "how many invalid actions, was it truncated and why, was it the infrastructure, did it
succeed": the env's record, the evaluator's score of it and the trainer's episode agree, on episodes
that end every way an episode can end, and every record a runner writes is accepted by the evaluator.

The same scripted replies run through the message-level runner (a scripted agent) and through the
trainer's token-level agent (a scripted sampler that "samples" the replies' token ids).
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import sopgym  # noqa: F401  (registers the envs)
from sopgym.envs import budgets
from sopgym.episodes.pools import EnvPool
from sopgym.episodes.runner import run_episodes
from sopgym.episodes.specs import EndEpisode, EpisodeSpec
from sopgym.evaluation import evaluate_records
from sopgym.sandboxes import SandboxError, ToolBox
from sopgym.trainers.rollout import RolloutSettings, collect

from .scripted import ENV, OPTIONS, ScriptedTokens, oracle_replies, tokenizer


class ScriptedAgent:
    """Message-level: the scripted replies in order (an :class:`EndEpisode` ends the episode)."""

    def __init__(self, replies):
        self.replies = list(replies)

    def start(self, slot, spec, observation, info):
        pass

    def act(self, slots, observations, infos):
        return [self.replies.pop(0)]

    def observe(self, slot, turn, info, result):
        pass


def _first_call() -> str:
    return oracle_replies()[0]


UNKNOWN_TOOL = '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>'
NOT_FOUND = '<tool_call>{"name": "get_shipment", "arguments": {"shipment_id": "SHP-999999"}}</tool_call>'

# name: (env kwargs, replies, expected invalid actions, tool failures, truncation cause, infrastructure, success)
SCENARIOS = {
    "submitted": ({}, "oracle", 0, 0, None, False, True),
    "max_turns_last_turn_invalid": ({"max_turns": 2}, ["hello", "hello"], 2, 0, "max_turns", False, False),
    "max_turns_last_turn_ok": ({"max_turns": 2}, "first_call_twice", 0, 0, "max_turns", False, False),
    "parse_unknown_tool_and_tool_error": (
        {"max_turns": 3}, ["<tool_call>{bad json</tool_call>", UNKNOWN_TOOL, NOT_FOUND], 2, 1, "max_turns", False, False),
    "env_context_budget": ({"max_context": "tight"}, ["hello"], 1, 0, "context_budget", False, False),
    "sandbox_failure": ({}, "first_call", 0, 0, "sandbox", True, False),
    # every replayed call takes 1 s on a fake clock: the second call spends the budget (a third is not run)
    "turn_wall_time": ({"max_turn_seconds": 1.5}, "first_call_thrice_in_one_reply", 0, 1, "turn_time", False, False),
    "episode_wall_time": ({"max_episode_seconds": 1.5, "max_turns": 4}, "first_call_twice", 0, 0, "episode_time", False, False),
}


def _make_env(kwargs):
    kwargs = dict(kwargs)
    if kwargs.get("max_context") == "tight":
        probe = gym.make(ENV)
        _, info = probe.reset(seed=0, options=OPTIONS)
        probe.close()
        kwargs["max_context"] = sum(len(m["content"]) for m in info["messages"]) + 3
    return gym.make(ENV, **kwargs)


def _replies(spec):
    if isinstance(spec, list):
        return spec
    return {"oracle": oracle_replies(), "first_call_twice": [_first_call()] * 2, "first_call": [_first_call()],
            "first_call_thrice_in_one_reply": [_first_call() * 3]}[spec]


@pytest.fixture
def scenario(request, monkeypatch):
    kwargs, replies, *expected = SCENARIOS[request.param]
    if request.param == "sandbox_failure":
        def broken(self, spec, args):
            raise SandboxError("injected: the replay store is unreachable")
        monkeypatch.setattr(ToolBox, "_replay", broken)
    if request.param.endswith("wall_time"):
        now = [0.0]
        replay = ToolBox._replay

        def slow(self, spec, args):
            now[0] += 1.0
            return replay(self, spec, args)
        monkeypatch.setattr(budgets, "clock", lambda: now[0])
        monkeypatch.setattr(ToolBox, "_replay", slow)
    return kwargs, _replies(replies), expected


def _check(record, score, expected, trainer_episode=None):
    invalid, tool_failures, cause, infra, success = expected
    assert record["num_invalid_actions"] == score.invalid_actions == invalid
    assert record["truncation_cause"] == score.truncation_cause == cause
    assert record["infrastructure_failure"] == score.infrastructure_failure == infra
    assert score.success == success
    assert evaluate_records([record], n_bootstrap=0)["episodes"] == 1  # accepted by the evaluator
    if trainer_episode is not None:
        ep = trainer_episode
        assert ep.invalid_actions == invalid
        assert ep.tool_failures == tool_failures
        assert ep.truncation_cause == cause
        assert ep.infrastructure_failure == infra
        assert ep.success == success
        assert ep.episode_info == record


@pytest.mark.parametrize("scenario", sorted(SCENARIOS), indirect=True)
def test_env_record_evaluator_and_trainer_count_alike(scenario):
    kwargs, replies, expected = scenario
    spec = EpisodeSpec(ENV, 0, OPTIONS)
    pool = EnvPool(lambda env_id: _make_env(kwargs))
    try:
        (message_level,) = run_episodes([spec], ScriptedAgent(replies), pool)
        tok = tokenizer()
        (episode,) = collect(pool, [spec], ScriptedTokens(tok, replies), tok,
                             RolloutSettings(max_new_tokens=512, max_context=100_000, temperature=1.0))
    finally:
        pool.close()
    _check(message_level.record, message_level.score, expected)
    _check(episode.episode_info, message_level.score, expected, episode)


def test_trainer_context_budget_ends_through_the_env_and_counts_alike():
    tok = tokenizer()
    spec = EpisodeSpec(ENV, 0, OPTIONS)
    pool = EnvPool(lambda env_id: gym.make(ENV))
    try:
        _, info = pool.reset([(0, spec)])[0]
        from sopgym.trainers.episodes import Episode, EpisodeBuilder

        prompt = Episode("t", 0, 0, ENV, messages=list(info["messages"]), tools=info["tools"])
        EpisodeBuilder(tok, prompt)
        (episode,) = collect(pool, [spec], ScriptedTokens(tok, [_first_call()]), tok,
                             RolloutSettings(max_new_tokens=512, max_context=len(prompt.ids) + 4, temperature=1.0))
    finally:
        pool.close()
    record = episode.episode_info
    assert record["truncation_cause"] == "context_budget" and record["turns"] == 1
    assert episode.token_cap_hits == 1
    from sopgym.evaluation import score_record

    _check(record, score_record(record), (1, 0, "context_budget", False, False), episode)


@pytest.mark.parametrize("cause,infra", [("stopped", False), ("inference", True), ("env_lost", True), ("context_budget", False)])
def test_an_agent_ending_an_episode_gets_a_record_the_evaluator_scores(cause, infra):
    pool = EnvPool(lambda env_id: gym.make(ENV))
    try:
        (result,) = run_episodes([EpisodeSpec(ENV, 0, OPTIONS)], ScriptedAgent([_first_call(), EndEpisode(cause, "why")]), pool)
    finally:
        pool.close()
    assert result.ended_by == EndEpisode(cause, "why")
    assert result.final_info["status_message"] == "why"
    assert result.record["turns"] == 1 and result.record["answer"] is None
    _check(result.record, result.score, (0, 0, cause, infra, False))
    excluded = evaluate_records([result.record], n_bootstrap=0)
    assert excluded["infrastructure_failure_rate"] == (1.0 if infra else 0.0)
