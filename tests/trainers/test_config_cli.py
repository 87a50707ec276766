"""Config validation, YAML + overrides, shipped configs, loading a real-model config from save_pretrained."""

from pathlib import Path

import pytest

from sopgym.trainers.config import apply_overrides, config_from_dict, load_config
from sopgym.trainers.train_command import main

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))
BASE = {"env": {"env_ids": ["sopgym/WarehouseReceiving-v0"]}, "model": {"tokenizer": "bpe"}}


def test_overrides_are_parsed_as_yaml_and_floats_coerced():
    raw = apply_overrides({"env": {"env_ids": ["x"]}, "model": {"tokenizer": "bpe"}}, ["optim.lr=1e-3", "rollout.group_size=8", "algo.loss=cispo"])
    cfg = config_from_dict(raw)
    assert cfg.optim.lr == 1e-3 and cfg.rollout.group_size == 8 and cfg.algo.loss == "cispo"


@pytest.mark.parametrize(
    "override, match",
    [
        ("algo.advantage=ppo", "algo.advantage"),
        ("algo.loss=dpo", "algo.loss"),
        ("algo.aggregation=batch", "aggregation"),
        ("rollout.temperature=0", "temperature"),
        ("rollout.top_p=1.5", "top_p"),
        ("model.attention=flex2", "attention"),
        ("env.env_ids=[sopgym/SopBenchX-v0]", "SOP-Bench"),
        ("optim.row_tokens=64", "row_tokens"),
        ("algo.passk_k=9", "passk_k"),
        ("bogus=1", "unknown config keys"),
        ("algo.bogus=1", "unknown keys in algo"),
    ],
)
def test_bad_configs_raise_value_error(override, match):
    import copy

    with pytest.raises(ValueError, match=match):
        config_from_dict(apply_overrides(copy.deepcopy(BASE), [override, "algo.advantage=passk"] if "passk_k" in override else [override]))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configs_are_valid(path):
    cfg = load_config(path)
    assert cfg.env.env_ids and all("sopbench" not in e.lower() for e in cfg.env.env_ids)


def test_cli_print_config(capsys):
    assert main(["train", "--config", str(CONFIGS[0]), "--print-config", "steps=3"]) == 0
    assert "steps: 3" in capsys.readouterr().out
    assert main(["--config", str(CONFIGS[0]), "--print-config", "algo.loss=nope"]) == 2
