"""The signs and token mass of the trained advantages, logged every RL step (rollout_metrics.advantage_metrics)."""

from __future__ import annotations

import pytest

from sopgym.trainers.episodes import Episode
from sopgym.trainers.rollout_metrics import assign_advantages


def _episode(group_id: int, reward: float, policy_tokens: int) -> Episode:
    return Episode(task_id=f"t{group_id}", group_id=group_id, seed=group_id, env_id="e", reward=reward,
                   loss_mask=[1] * policy_tokens + [0] * 3)


def test_a_short_success_among_long_failures_has_less_positive_token_mass_than_positive_episodes():
    """One success (10 tokens) and three failures (30 tokens each) under Dr. GRPO: advantages +0.75 and
    -0.25; 1 of 4 episodes positive, positive mass 7.5 of 7.5 + 22.5, net per token (7.5 - 22.5) / 100."""
    episodes = [_episode(0, 1.0, 10)] + [_episode(0, 0.0, 30) for _ in range(3)]
    _, stats = assign_advantages(episodes, "dr_grpo")
    assert stats["advantage/positive_fraction"] == pytest.approx(0.25)
    assert stats["advantage/negative_fraction"] == pytest.approx(0.75)
    assert stats["advantage/positive_token_mass"] == pytest.approx(7.5 / 30.0)
    assert stats["advantage/token_mean"] == pytest.approx(-15.0 / 100.0)


def test_groups_the_filter_drops_do_not_count():
    """A group of equal rewards is dropped by the zero-variance filter; its zero advantages are not counted."""
    episodes = [_episode(0, 1.0, 10), _episode(0, 0.0, 10)] + [_episode(1, 0.0, 10) for _ in range(2)]
    trainable, stats = assign_advantages(episodes, "dr_grpo", filter_zero_variance=True)
    assert len(trainable) == 2
    assert stats["advantage/positive_fraction"] == pytest.approx(0.5)
    assert stats["advantage/negative_fraction"] == pytest.approx(0.5)
