"""The offline BPE's digit option: no merge spans two digits, so identifiers are digit sequences."""

import functools

import pytest

from sopgym.episodes.factory import EnvFactory
from sopgym.trainers.episodes import template_ids
from sopgym.trainers.rollout import EnvPool, group_spec_list
from sopgym.trainers.sft import collect_trajectories, default_oracle, episode_from_messages, trajectory_texts
from sopgym.trainers.tokenizer import build_bpe_tokenizer


@functools.lru_cache(maxsize=1)
def _trajectories():
    pool = EnvPool(EnvFactory({"max_context": None}))
    try:
        return collect_trajectories(pool, group_spec_list(["sopgym/WarehouseReceiving-v0"], "train", 0, 40, 1), default_oracle)
    finally:
        pool.close()


@functools.lru_cache(maxsize=2)
def _tokenizer(split_digits: bool):
    return build_bpe_tokenizer(trajectory_texts(_trajectories()), 1024, split_digits=split_digits)


def _digits_in(tok, token_id: int) -> int:
    return sum(c.isdigit() for c in tok.decode([token_id]))


def test_split_digits_vocabulary_has_no_multi_digit_token():
    tok = _tokenizer(True)
    multi = [tok.decode([i]) for i in range(len(tok)) if _digits_in(tok, i) > 1]
    assert multi == [], f"expected no token with two digits, got {multi[:10]}"


def test_default_vocabulary_merges_digits():
    """The negative control: on the same texts the default pre-tokenizer learns multi-digit tokens."""
    tok = _tokenizer(False)
    assert any(_digits_in(tok, i) > 1 for i in range(len(tok)))


@pytest.mark.parametrize("text", ["SHP-326044", '{"dock_door": "D11", "date": "2026-05-02"}', " 2026-05-02T16:02"])
def test_split_digits_identifiers_are_one_token_per_digit_and_round_trip(text):
    tok = _tokenizer(True)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    digit_tokens = [tok.decode([i]) for i in ids if _digits_in(tok, i)]
    assert digit_tokens == [c for c in text if c.isdigit()]


def test_split_digits_episodes_are_prefix_consistent():
    """Episodes built turn by turn equal the chat template of the whole conversation with digit splitting."""
    tok = _tokenizer(True)
    for traj in _trajectories()[:3]:
        ep = episode_from_messages(tok, traj["messages"], traj["tools"])
        assert ep.ids == template_ids(tok, ep.messages, ep.tools)
