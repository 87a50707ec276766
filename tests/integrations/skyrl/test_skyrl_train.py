"""SkyRL's trainer launch (``sopgym.integrations.skyrl_train``, ``configs/integrations/skyrl-gpu.*``) against
the pinned skyrl 0.3.0 (``tox -e skyrl``, Python 3.12).

SkyRL's trainer itself does not run here (its inference engines are vLLM/SGLang, its workers FSDP on
GPUs); what can be checked on CPU is checked with SkyRL's own code: the recipe's overrides are a valid
config of that SkyRL (its parser and ``validate_cfg``), the length pre-flight measures the prompt SkyRL
sends, and the envs are registered in the process that builds SkyRL's generator.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from ..extras import assert_extra_complete
from ..helpers import ENV_KWARGS, import_or_skip

import_or_skip("skyrl.train.generators.skyrl_gym_generator", "skyrl")

import skyrl_gym  # noqa: E402
from skyrl.train.config import SkyRLTrainConfig  # noqa: E402
from skyrl.train.entrypoints.main_base import validate_cfg  # noqa: E402
from skyrl_gym.envs.registration import registry  # noqa: E402

from sopgym.integrations.lengths import first_prompt_lengths  # noqa: E402
from sopgym.integrations.skyrl import skyrl_rows  # noqa: E402
from sopgym.integrations.skyrl_train import env_rows, preflight, run_experiment  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
OVERRIDES = ROOT / "configs" / "integrations" / "skyrl-gpu.overrides"
ENV = "sopgym/WarehouseReceiving-v0"


def recipe_overrides() -> list[str]:
    lines = [line.strip() for line in OVERRIDES.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


@functools.cache
def tokenizer():
    from sopgym.integrations.tiny_model import _texts
    from sopgym.trainers.tokenizer import build_bpe_tokenizer

    return build_bpe_tokenizer(_texts([ENV], 2) * 2, vocab_size=1000)


def write_rows(folder: Path) -> Path:
    import pandas as pd

    path = folder / "train.parquet"
    pd.DataFrame(skyrl_rows(ENV, "train", 4, env_kwargs=ENV_KWARGS)).to_parquet(path)
    return path


def config(path: Path, *extra: str) -> SkyRLTrainConfig:
    return SkyRLTrainConfig.from_cli_overrides([*recipe_overrides(), f"data.train_data=['{path}']",
                                                f"data.val_data=['{path}']", *extra])


def test_the_skyrl_train_extra_holds_what_the_trainer_entrypoint_imports():
    assert_extra_complete("skyrl-train", "import sopgym.integrations.skyrl_train; "
                                         "import skyrl.train.entrypoints.main_base; import pyarrow.parquet")


def test_the_recipes_overrides_are_a_valid_config_of_the_pinned_skyrl(tmp_path):
    cfg = config(write_rows(tmp_path), "trainer.policy.model.path=/nonexistent")
    validate_cfg(cfg)
    assert (cfg.generator.max_turns, cfg.generator.batched, cfg.trainer.max_prompt_length) == (32, False, 4096)


def test_the_rows_name_their_env_and_its_kwargs(tmp_path):
    assert env_rows([str(write_rows(tmp_path))]) == [{"env_class": ENV, "env_kwargs": ENV_KWARGS}] * 4


def test_the_preflight_returns_the_first_prompt_skyrl_sends(tmp_path):
    cfg = config(write_rows(tmp_path))
    longest = preflight(cfg, tokenizer(), num_tasks=4)
    assert longest == {ENV: max(first_prompt_lengths(ENV, tokenizer(), "skyrl", num_tasks=4, env_kwargs=ENV_KWARGS))}


@pytest.mark.parametrize("setting", ["trainer.max_prompt_length", "generator.max_input_length"])
def test_the_preflight_refuses_a_cap_below_the_first_prompt_with_the_value_to_set(tmp_path, setting):
    cfg = config(write_rows(tmp_path), f"{setting}=64")
    with pytest.raises(ValueError, match=rf"{setting}=64 is shorter than the first prompt of \['{ENV}'\].*set {setting}=\d+"):
        preflight(cfg, tokenizer(), num_tasks=4)


def test_the_experiment_finds_the_envs_registered_in_its_process(tmp_path):
    seen = {}

    class Experiment:  # stands in for BasePPOExp, which needs GPUs: records what its generator would find
        def __init__(self, cfg):
            seen["cfg"] = cfg
            seen["entry_point"] = registry.get(ENV).entry_point

        def run(self):
            env = skyrl_gym.make(ENV, env_config={}, extras=skyrl_rows(ENV, "train", 1, env_kwargs=ENV_KWARGS)[0])
            seen["chat"] = env.init(skyrl_rows(ENV, "train", 1, env_kwargs=ENV_KWARGS)[0]["prompt"])[0]
            env.close()

    registry.pop(ENV, None)
    cfg = config(write_rows(tmp_path))
    run_experiment(cfg, [ENV], experiment=Experiment)
    assert seen["cfg"] is cfg and seen["entry_point"] == "sopgym.integrations.skyrl:SopgymTextEnv"
    assert seen["chat"][0]["role"] == "system"
