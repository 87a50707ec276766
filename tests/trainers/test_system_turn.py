"""``model.system_turn: drop``: the model is shown its episodes from the case on (no SOP, no tool
schemas), in rollouts, evaluations and SFT demonstrations alike, while the env, its record and its
evaluator are those of the episode with the system turn (``keep``)."""

from __future__ import annotations

import gymnasium as gym
import pytest

from sopgym.episodes.pools import EnvPool
from sopgym.episodes.specs import EpisodeSpec
from sopgym.trainers.episodes import template_ids
from sopgym.trainers.rollout import RolloutSettings, collect
from sopgym.trainers.sft import as_shown, episode_from_messages

from .test_episode_counts import ENV, OPTIONS, ScriptedTokens, oracle_replies, tokenizer


class RecordingTokens(ScriptedTokens):
    """The scripted sampler, keeping every prompt it was given."""

    def __init__(self, tok, replies):
        super().__init__(tok, replies)
        self.prompts = []

    def generate(self, prompts, caps, **kwargs):
        self.prompts.extend(list(p) for p in prompts)
        return super().generate(prompts, caps, **kwargs)


def _oracle_episode(system_turn):
    tok = tokenizer()
    sampler = RecordingTokens(tok, oracle_replies())
    pool = EnvPool(lambda env_id: gym.make(ENV))
    try:
        (episode,) = collect(pool, [EpisodeSpec(ENV, 0, OPTIONS)], sampler, tok,
                             RolloutSettings(max_new_tokens=512, max_context=100_000, temperature=1.0,
                                             system_turn=system_turn))
    finally:
        pool.close()
    return tok, sampler, episode


def test_dropped_system_turn_is_never_shown_to_the_sampler():
    tok, sampler, episode = _oracle_episode("drop")
    _, info = gym.make(ENV).reset(seed=0, options=OPTIONS)
    system = next(m["content"] for m in info["messages"] if m["role"] == "system")
    case = next(m["content"] for m in info["messages"] if m["role"] == "user")
    assert all(m["role"] != "system" for m in episode.messages) and episode.tools is None
    assert episode.ids == template_ids(tok, episode.messages, None)
    first_prompt = tok.decode(sampler.prompts[0])
    assert case in first_prompt and system[:200] not in first_prompt, first_prompt[:300]
    assert all(system[:200] not in tok.decode(p) for p in sampler.prompts)


def test_dropped_system_turn_leaves_the_env_and_its_score_alone():
    _, _, kept = _oracle_episode("keep")
    _, _, dropped = _oracle_episode("drop")
    assert kept.success and dropped.success
    assert dropped.episode_info == kept.episode_info
    assert dropped.reward == kept.reward and dropped.reward_components == kept.reward_components
    assert len(dropped.ids) < len(kept.ids) and dropped.num_policy_tokens == kept.num_policy_tokens


def test_demonstrations_are_shown_as_the_rollouts_are():
    tok, _, rollout = _oracle_episode("drop")
    _, info = gym.make(ENV).reset(seed=0, options=OPTIONS)
    # The demonstration as collected (system turn included), then shown to the model without it.
    trajectory = {"messages": list(info["messages"]) + rollout.messages[1:], "tools": info["tools"], "success": True}
    (kept,) = as_shown([trajectory], "keep")
    (shown,) = as_shown([trajectory], "drop")
    assert kept is trajectory
    demo = episode_from_messages(tok, shown["messages"], shown["tools"])
    assert demo.ids == rollout.ids and demo.loss_mask == rollout.loss_mask
    with pytest.raises(ValueError, match="expected 'keep' or 'drop'"):
        as_shown([trajectory], "hide")


def test_system_turn_benchmark_runs_and_prints_its_ratios(capsys):
    """benchmarks/system_turn.py --quick: every figure printed against its baseline (no speed asserted)."""
    from .helpers import load_benchmark

    load_benchmark("system_turn").main(["--quick"])
    out = capsys.readouterr().out
    assert "tokens per episode: keep" in out and "the system turn is" in out, out
    assert out.count("(baseline)") == 3 and out.count("x faster)") == 2, out
