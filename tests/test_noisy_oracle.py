"""The noisy oracle (``sopgym.envs.policies.NoisyOraclePolicy``): imperfect SFT demonstrations with a
seeded misconception, on every authored domain."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from sopgym.envs.policies import _answer_class, _train_classes, confusion_map, make_policy
from sopgym.episodes.runner import run_episode
from sopgym.sop_tasks.registry import get_pack
from sopgym.trainers.config import ConfigError, load_config
from sopgym.trainers.sft import default_oracle, demonstrator

EPISODES = 24


def pack_of(env_id):
    return get_pack(env_id.rsplit("-v", 1)[0])


def make(env_id):
    return gym.make(env_id, code_runner="inprocess") if pack_of(env_id).verifiable is not None else gym.make(env_id)


def submitted(result) -> dict:
    last = result.turns[-1].action
    return json.loads(last.removeprefix("<tool_call>").removesuffix("</tool_call>"))["arguments"]


def episodes(env_id, policy_factory, count=EPISODES):
    env = make(env_id)
    try:
        return [run_episode(env, policy_factory(), seed=seed) for seed in range(count)]
    finally:
        env.close()


def noisy(seed=3, task_share=1.0, confusion=0.6):
    return lambda: make_policy("noisy-oracle", seed=seed, task_share=task_share, confusion=confusion)


def test_the_confusion_map_holds_the_task_share_and_maps_each_class_to_another(authored_env_id):
    key = pack_of(authored_env_id).key
    counted = dict(_train_classes(key, 500))
    for share in (0.25, 0.5, 1.0):
        mapping = confusion_map(key, 7, share)
        held = sum(counted[c] for c in mapping) / sum(counted.values())
        assert held >= share, f"{key}: confused classes hold {held:.3f} of the train tasks, expected at least {share}"
        assert all(target != cls and target in counted for cls, target in mapping.items()), mapping
    assert confusion_map(key, 7, 0.0) == {}


@pytest.mark.parametrize("seed", range(6))
def test_the_confused_classes_are_mapped_onto_each_other_one_to_one(authored_env_id, seed):
    key = pack_of(authored_env_id).key
    for share in (0.01, 0.5, 1.0):
        mapping = confusion_map(key, seed, share)
        assert len(mapping) >= 2, f"{key}: expected at least 2 confused classes, got {mapping}"
        assert sorted(mapping.values(), key=repr) == sorted(mapping, key=repr), (
            f"{key}: expected the targets to be the confused classes, each once, got {mapping}")


def test_the_same_seed_gives_the_same_demonstrations(authored_env_id):
    first = [r.turns[-1].action for r in episodes(authored_env_id, noisy(), 8)]
    again = [r.turns[-1].action for r in episodes(authored_env_id, noisy(), 8)]
    assert first == again


def test_only_the_categorical_fields_of_the_answer_change(authored_env_id):
    pack = pack_of(authored_env_id)
    categorical = {f.name for f in pack.output_fields if f.enum is not None}
    oracle, bad = episodes(authored_env_id, default_oracle), episodes(authored_env_id, noisy(confusion=1.0))
    changed = 0
    for right, wrong in zip(oracle, bad):
        assert [t.action for t in right.turns[:-1]] == [t.action for t in wrong.turns[:-1]], "tool calls differ"
        a, b = submitted(right), submitted(wrong)
        assert {k for k in a if a[k] != b.get(k)} <= categorical, f"expected only {sorted(categorical)} to change: {a} vs {b}"
        changed += a != b
    assert changed == EPISODES, f"with task_share 1 and confusion 1 every answer is confused: expected {EPISODES}, got {changed}"


def test_unconfused_classes_are_answered_as_the_oracle_answers(authored_env_id):
    pack = pack_of(authored_env_id)
    oracle, bad = episodes(authored_env_id, default_oracle), episodes(authored_env_id, noisy(task_share=0.5, confusion=1.0))
    mapping = confusion_map(pack.key, 3, 0.5)
    for right, wrong in zip(oracle, bad):
        answer = submitted(right)
        assert right.success
        if _answer_class(pack, answer) in mapping:
            assert not wrong.success and _answer_class(pack, submitted(wrong)) == mapping[_answer_class(pack, answer)]
        else:
            assert submitted(wrong) == answer and wrong.success


def test_the_wrong_share_of_a_confused_class_is_the_confusion():
    env_id, count = "sopgym/WarehouseReceiving-v0", 300
    failures = sum(not r.success for r in episodes(env_id, noisy(task_share=1.0, confusion=0.6), count))
    # Binomial(300, 0.6): mean 180, sd 8.5; a 4-sd band.
    assert 146 <= failures <= 214, f"expected about 0.6 of {count} demonstrations wrong, got {failures}"


def test_a_noisy_demonstrator_needs_its_wrong_answers_kept(tmp_path):
    with pytest.raises(ConfigError, match="expected sft.only_successful false, got true"):
        load_config("configs/demo-cpu.yaml", ["sft.only_successful=true"])


def test_the_demonstrator_is_the_oracle_unless_noise_is_configured():
    cfg = load_config("configs/demo-cpu.yaml", ["seed=5"])
    assert demonstrator(load_config("configs/demo-cpu.yaml", ["sft.noise_task_share=0.0"]).sft, 5) is default_oracle
    policy = demonstrator(cfg.sft, cfg.seed)()
    assert (policy.name, policy.seed, policy.task_share, policy.confusion) == ("noisy-oracle", 5, 0.75, 0.6)
