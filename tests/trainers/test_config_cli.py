"""Config validation (every field's type and range, one line per problem, exit code 2, before anything
runs), YAML + overrides, the shipped configs, and the config's names against the registries."""

import copy
import dataclasses
from pathlib import Path

import pytest
import torch

from sopgym.cli.train import main
from sopgym.trainers.config import ConfigError, TrainConfig, apply_overrides, config_from_dict, load_config

from . import fake_env  # noqa: F401  (registers sopgym-test/Fake-v0)

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))
BASE = {"env": {"env_ids": ["sopgym/WarehouseReceiving-v0"]}, "model": {"tokenizer": "bpe"}}
GOOD = "env:\n  env_ids: [sopgym-test/Fake-v0]\nmodel:\n  tokenizer: bpe\ndevice: cpu\nsteps: 3\n"


def test_overrides_are_parsed_as_yaml_and_floats_coerced():
    raw = apply_overrides({"env": {"env_ids": ["x"]}, "model": {"tokenizer": "bpe"}}, ["optim.lr=1e-3", "rollout.group_size=8", "algo.loss=cispo"])
    cfg = config_from_dict(raw)
    assert cfg.optim.lr == 1e-3 and cfg.rollout.group_size == 8 and cfg.algo.loss == "cispo"
    assert isinstance(config_from_dict(apply_overrides(dict(BASE), ["optim.lr=1"])).optim.lr, float)


# (what the user wrote, a fragment of the one line that must name the problem)
BAD = [
    ("env.env_ids=sopgym/WarehouseReceiving-v0", "env.env_ids: expected a list of strings, got the string"),
    ("device=banana", "device: expected auto, cpu, mps, cuda or cuda:N, got 'banana'"),
    ("rollout.group_size=2.5", "rollout.group_size: expected an integer, got 2.5"),
    ("rollout.temperature=.nan", "rollout.temperature: expected a finite number, got nan"),
    ("model.tokenizer=5", "model.tokenizer: expected a string, got 5"),
    ("rollout.max_new_tokens=1e12", "rollout.max_new_tokens: expected an integer, got '1e12'"),
    ("model.scratch_num_layers=0", "model.scratch_num_layers: expected a value >= 1"),
    ("rollout.group_size=1", "rollout.group_size: expected a value >= 2"),
    ("env.max_turns=true", "env.max_turns: expected an integer, got True"),
    ("optim.lr=-1", "optim.lr: expected a value > 0.0"),
    ("optim.lr=fast", "optim.lr: expected a number, got 'fast'"),
    ("optim.beta2=1.0", "optim.beta2: expected a value >= 0.0 and < 1.0"),
    ("rollout.top_p=0", "rollout.top_p: expected a value > 0.0"),
    ("eval_num_tasks=-3", "eval_num_tasks: expected a value >= 0"),
    ("seed=-1", "seed: expected a value >= 0"),
    ("algo.clip_low=1.5", "algo.clip_low: expected a value >= 0.0 and <= 1.0"),
    ("algo.kl_estimator=k4", "algo.kl_estimator: expected one of k1, k2, k3, got 'k4'"),
    ("algo.advantage=ppo", "algo.advantage: expected one of"),
    ("algo.aggregation=batch", "algo.aggregation: expected one of"),
    ("model.attention=flex2", "model.attention: expected one of"),
    ("alarms.truncation_rate=2", "alarms.truncation_rate: expected a value >= 0.0 and <= 1.0"),
    ("env.env_ids=[sopgym/SopBenchX-v0]", "refusing to train on SOP-Bench"),
    ("env.env_ids=[]", "env.env_ids: expected at least one environment id"),
    ("optim.row_tokens=64", "optim.row_tokens: expected >= env.max_context + rollout.max_new_tokens"),
    ("rollout.max_new_tokens=5000", "rollout.max_new_tokens: expected <= env.max_context"),
    ("algo.loss=rloo", "algo.aggregation: loss 'rloo' is a sequence-level objective"),
    ("model.attention=flash_varlen", "which need model.dtype bfloat16 or float16"),
    ("model.master_dtype=bfloat16", "model.master_dtype: expected model.dtype (float32) or a wider float, got bfloat16"),
    ("model.dtype=bfloat16 model.master_dtype=float16", "model.master_dtype: expected model.dtype (bfloat16) or a wider float"),
    ("model.dtype=float16 model.master_dtype=float32", "model.master_dtype: float16 compute over float32 master weights needs loss scaling"),
    ("model.master_dtype=double", "model.master_dtype: expected one of float32, bfloat16, float16, float64, got 'double'"),
    ("sft.from_checkpoint=./no/such/sft", "sft.from_checkpoint: expected an SFT checkpoint folder (<run_dir>/sft), './no/such/sft' is none"),
    ("algo.is_correction=truncate algo.behaviour_logp=sampler", "algo.is_correction: 'truncate' corrects sampler vs trainer"),
    ("sft.num_episodes=0 sft.short_context_steps=5", "sft.short_context_steps: 5 steps need demonstrations, got sft.num_episodes 0"),
    ("sft.num_episodes=0 sft.copy_steps=5", "sft.copy_steps: 5 steps of copy pretraining come before SFT on demonstrations"),
    ("sft.epochs=2 sft.whole_steps=5", "sft.whole_steps: expected sft.epochs 1 (whole_steps replaces the epochs), got epochs 2"),
    ("model.system_turn=hide", "model.system_turn: expected one of keep, drop, got 'hide'"),
    ("model.system_turn=drop env.env_ids=[sopgym/WarehouseReceiving-v0,sopgym/DangerousGoodsClassification-v0]",
     "model.system_turn: 'drop' needs one env id (the system turn is what tells domains apart), got 2"),
    ("bogus=1", "bogus: unknown key"),
    ("algo.kl_estimater=k2", "algo.kl_estimater: unknown key (did you mean 'kl_estimator'?)"),
    ("env=5", "env: expected a section (a mapping), got 5"),
    ("steps.x=1", "override 'steps.x=1': steps is not a section"),
    ("steps", "override 'steps': expected key=value"),
    ("env.env_ids=[sopgym/NoSuchDomain-v0]", "env.env_ids: 'sopgym/NoSuchDomain-v0' is not a registered environment"),
    ("model.tokenizer=some/path model.bpe_split_digits=true", "model.bpe_split_digits: true needs model.tokenizer 'bpe', got 'some/path'"),
    ("model.name_or_path=./no/such/model", "model.name_or_path: './no/such/model' looks like a local path but does not exist"),
]
if not torch.cuda.is_available():
    BAD.append(("device=cuda", "device: 'cuda' requested but torch sees no CUDA device"))


@pytest.fixture
def no_training(monkeypatch):
    import sopgym.trainers.loop as loop

    def refuse(*args, **kwargs):
        raise AssertionError("train() ran although the config is invalid")

    monkeypatch.setattr(loop, "train", refuse)


@pytest.mark.parametrize("overrides, expected", BAD, ids=[b[0] for b in BAD])
def test_bad_configs_exit_2_with_one_line_per_problem_before_anything_runs(tmp_path, capsys, no_training, overrides, expected):
    path = tmp_path / "c.yaml"
    path.write_text(GOOD)
    assert main(["--config", str(path), *overrides.split()]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert "Traceback" not in err and lines and all(line.startswith("sopgym train: ") for line in lines), err
    assert any(expected in line for line in lines), err


@pytest.mark.parametrize(
    "text, expected",
    [
        ("- a\n- b\n", "expected a mapping of sections, got a list"),
        ("env: [unclosed\n", "invalid YAML at line"),
        ("", "env: expected a section, got none"),
        (None, "cannot read it"),
    ],
    ids=["list", "bad_yaml", "empty", "missing_file"],
)
def test_unreadable_config_files_exit_2_with_one_line(tmp_path, capsys, no_training, text, expected):
    path = tmp_path / "c.yaml"
    if text is not None:
        path.write_text(text)
    assert main(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and expected in err


def test_every_problem_is_reported_at_once(tmp_path, capsys, no_training):
    path = tmp_path / "c.yaml"
    path.write_text(GOOD)
    bad = ["device=banana", "rollout.group_size=2.5", "rollout.temperature=.nan", "model.tokenizer=5", "steps=-1"]
    assert main(["--config", str(path), *bad]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == len(bad)


def test_config_error_is_a_value_error_with_its_problems():
    with pytest.raises(ValueError) as info:
        config_from_dict(apply_overrides(dict(BASE), ["rollout.group_size=0", "optim.lr=0"]))
    assert isinstance(info.value, ConfigError) and len(info.value.problems) == 2


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configs_are_valid(path):
    cfg = load_config(path)
    assert cfg.env.env_ids and all("sopbench" not in e.lower() for e in cfg.env.env_ids)


def test_cli_print_config(capsys):
    assert main(["train", "--config", str(CONFIGS[0]), "--print-config", "steps=3"]) == 0
    assert "steps: 3" in capsys.readouterr().out
    assert main(["--config", str(CONFIGS[0]), "--print-config", "algo.loss=nope"]) == 2


def test_config_names_equal_the_registries():
    """The config's choices are the registries' keys: a new estimator cannot be added to one and not the other."""
    from sopgym.trainers import advantages, attention, config, episodes, losses

    assert set(config.ADVANTAGES) == set(advantages.ADVANTAGES)
    assert set(config.LOSSES) == set(losses.LOSSES)
    assert set(config.SEQUENCE_LOSSES) == set(losses.SEQUENCE_LOSSES)
    assert set(config.AGGREGATIONS) == set(losses.AGGREGATIONS)
    assert set(config.KL_ESTIMATORS) == set(losses.KL_ESTIMATORS)
    assert set(config.ATTENTION) == {"auto", *attention.BACKENDS}
    assert set(config.FLASH_ATTENTION) == set(attention.CUDA_BACKENDS)
    assert set(config.SYSTEM_TURNS) == set(episodes.SYSTEM_TURNS)


def test_step_settings_come_from_the_config_in_one_place():
    from sopgym.trainers.optimise import StepSettings, sft_settings, step_settings

    cfg = config_from_dict(apply_overrides(dict(BASE), [
        "algo.loss=cispo", "algo.aggregation=fixed_length", "algo.kl_coef=0.1", "algo.kl_estimator=k2",
        "algo.is_correction=mask", "algo.is_level=geometric", "algo.is_low=0.8", "algo.is_high=1.25",
        "rollout.temperature=0.7", "optim.row_tokens=9000", "optim.rows_per_micro_batch=3", "optim.grad_clip=0.5",
        "env.max_turns=5", "rollout.max_new_tokens=100", "sft.context_loss_weight=0.5",
    ]))
    s = step_settings(cfg)
    assert isinstance(s, StepSettings)
    assert (s.loss, s.aggregation, s.aggregation_length, s.kl_coef, s.kl_estimator) == ("cispo", "fixed_length", 500, 0.1, "k2")
    assert (s.is_mode, s.is_level, s.is_band, s.temperature) == ("mask", "geometric", (0.8, 1.25), 0.7)
    assert (s.row_tokens, s.rows_per_micro_batch, s.grad_clip, s.context_loss_weight) == (9000, 3, 0.5, 0.0)
    sft = sft_settings(cfg)
    assert (sft.loss, sft.temperature, sft.aggregation, sft.context_loss_weight) == ("sft", 1.0, "token", 0.5)


def test_bf16_compute_keeps_fp32_master_weights_and_accepts_the_flash_path():
    cfg = config_from_dict(apply_overrides(copy.deepcopy(BASE), ["model.dtype=bfloat16", "model.attention=flash_varlen"]))
    assert cfg.model.resolved_master_dtype == "float32"
    pure = config_from_dict(apply_overrides(copy.deepcopy(BASE), ["model.dtype=bfloat16", "model.master_dtype=bfloat16"]))
    assert pure.model.resolved_master_dtype == "bfloat16"
    assert config_from_dict(copy.deepcopy(BASE)).model.resolved_master_dtype == "float32"
    for path in CONFIGS:  # every shipped config trains fp32 masters (its precision is documented in it)
        assert load_config(path).model.resolved_master_dtype == "float32", path.name


def _leaf_fields(cls, prefix=""):
    """``(dotted name, type)`` of every field of ``cls`` and of the sections inside it."""
    from sopgym.trainers import config

    for name, hint in config._fields(cls).items():
        base = config._strip(hint)
        if dataclasses.is_dataclass(base):
            yield f"{prefix}{name}", base
            yield from _leaf_fields(base, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", base


# a value of the wrong type for each kind of field, and the words its problem must start with
# (values a lax validator would coerce: 2.0 to 2, True to 1.0, 1 to True)
WRONG = {int: (2.0, "expected an integer, got 2.0"), float: (True, "expected a number, got True"),
         bool: (1, "expected true or false, got 1"), str: (5, "expected a string, got 5"),
         list: (5, "expected a list of strings, got 5"), dict: ([1], "expected a mapping"),
         "literal": ("zzz", "expected one of "), "section": (5, "expected a section (a mapping), got 5")}


def _wrong_value(base):
    import typing

    if dataclasses.is_dataclass(base):
        return WRONG["section"]
    if typing.get_origin(base) is typing.Literal:
        return WRONG["literal"]
    return WRONG[typing.get_origin(base) or base]


@pytest.mark.parametrize("name, base", list(_leaf_fields(TrainConfig)), ids=[n for n, _ in _leaf_fields(TrainConfig)])
def test_every_field_refuses_a_value_of_another_type_naming_itself(name, base):
    """Every field, those added later included, is strictly typed (a 2.5 is no integer, a 1 no boolean)
    and its problem names it by its dotted name with what it expects and what it got."""
    value, words = _wrong_value(base)
    raw = apply_overrides(copy.deepcopy(BASE), [])
    node = raw
    *sections, leaf = name.split(".")
    for part in sections:
        node = node.setdefault(part, {})
    node[leaf] = value
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw)
    assert any(line.startswith(f"{name}: {words}") for line in info.value.problems), info.value.problems
