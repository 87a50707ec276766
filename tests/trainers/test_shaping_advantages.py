"""The invalid-reply penalty keeps its scale under GRPO: group advantages divide by the spread of the task's
outcome (the reward without its shaping), and the zero-variance filter reads the outcome.

Groups of four episodes of one real task (``WarehouseReceiving``, ``reward: binary``,
``invalid_action_penalty: 0.05``, as many turns as the oracle takes), their replies scripted in token
space and collected by the trainer's own rollout agent.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

from sopgym.episodes.pools import EnvPool
from sopgym.episodes.specs import EpisodeSpec
from sopgym.trainers.advantages import EPS
from sopgym.trainers.rollout import RolloutSettings, collect
from sopgym.trainers.rollout_metrics import assign_advantages

from .scripted import ENV, OPTIONS, ScriptedTokens, oracle_replies, tokenizer

PENALTY = 0.05


def _group(scripts: list[list[str]]):
    """One episode per script, all of the same task (one group)."""
    tok = tokenizer()
    turns = len(oracle_replies())
    pool = EnvPool(lambda env_id: gym.make(ENV, reward="binary", invalid_action_penalty=PENALTY, max_turns=turns))
    try:
        return [
            collect(pool, [EpisodeSpec(ENV, 0, OPTIONS, group_id=0, sample=j)], ScriptedTokens(tok, replies), tok,
                    RolloutSettings(max_new_tokens=512, max_context=100_000, temperature=1.0))[0]
            for j, replies in enumerate(scripts)
        ]
    finally:
        pool.close()


def _failing(invalid: bool) -> list[str]:
    """Replies that never answer (the first call again and again), the first one invalid if asked."""
    turns = len(oracle_replies())
    return (["hello"] if invalid else []) + [oracle_replies()[0]] * (turns - invalid)


def _failures_one_invalid():
    return _group([_failing(True)] + [_failing(False)] * 3)


def test_episodes_split_their_return_into_outcome_and_shaping():
    episodes = _failures_one_invalid()
    assert [ep.reward for ep in episodes] == pytest.approx([-PENALTY, 0, 0, 0])
    assert [ep.shaping for ep in episodes] == pytest.approx([-PENALTY, 0, 0, 0])
    assert [ep.outcome for ep in episodes] == pytest.approx([0, 0, 0, 0])
    assert not any(ep.success for ep in episodes)


def test_a_group_of_failures_where_one_reply_was_invalid_keeps_the_penalty_scale():
    """GRPO used to divide these returns by their own std and give +-1.5 (the scale of a success)."""
    episodes = _failures_one_invalid()
    trainable, stats = assign_advantages(episodes, "grpo")
    assert [ep.advantage for ep in episodes] == pytest.approx([-0.75 * PENALTY, 0.25 * PENALTY, 0.25 * PENALTY, 0.25 * PENALTY])
    assert len(trainable) == 4 and stats["rollout/zero_variance_group_fraction"] == 1.0


def test_the_zero_variance_filter_drops_a_group_that_varies_only_through_the_penalty():
    trainable, stats = assign_advantages(_failures_one_invalid(), "grpo", filter_zero_variance=True)
    assert trainable == [] and stats["rollout/zero_variance_group_fraction"] == 1.0


def test_with_a_success_in_the_group_the_penalty_is_scaled_with_the_outcome():
    """GRPO's std is the outcomes' (one success in four: 0.5): the success keeps its usual advantage, the
    invalid reply costs penalty / std more than the other failures."""
    episodes = _group([oracle_replies(), _failing(True), _failing(False), _failing(False)])
    assert [ep.outcome for ep in episodes] == pytest.approx([1, 0, 0, 0])
    trainable, stats = assign_advantages(episodes, "grpo", filter_zero_variance=True)
    mean, std = (1 - PENALTY) / 4, 0.5 + EPS
    assert [ep.advantage for ep in episodes] == pytest.approx([(1 - mean) / std, (-PENALTY - mean) / std, -mean / std, -mean / std])
    assert len(trainable) == 4 and stats["rollout/zero_variance_group_fraction"] == 0.0
