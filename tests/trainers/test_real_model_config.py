"""The real-model configs' loading path (AutoModelForCausalLM / AutoTokenizer from a directory), on a tiny saved model."""

from pathlib import Path

import torch

from sopgym.trainers.config import load_config
from sopgym.trainers.loop import train
from sopgym.trainers.modeling import load_model, load_tokenizer

from . import fake_env
from .helpers import tiny_model, tiny_tokenizer

QWEN_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "qwen2.5-0.5b-grpo.yaml"


def test_qwen_config_loads_and_trains_a_saved_tiny_model(tmp_path):
    tok = tiny_tokenizer()
    model_dir = tmp_path / "tiny-model"
    tiny_model(tok).save_pretrained(str(model_dir))
    tok.save_pretrained(str(model_dir))
    cfg = load_config(QWEN_CONFIG, [
        f"model.name_or_path={model_dir}", "model.dtype=float32", "device=cpu", "env.env_ids=[sopgym-test/Fake-v0]",
        "env.max_context=512", "optim.row_tokens=1024", "rollout.batch_size=2", "rollout.group_size=2",
        "rollout.max_new_tokens=8", "algo.num_minibatches=2", "steps=1", "eval_num_tasks=1", "tracking.enabled=false",
        "progress=false", "plot=false", f"run_dir={tmp_path / 'run'}",
    ])
    assert cfg.model.gradient_checkpointing  # the shipped config's memory setting is exercised too
    loaded_tok = load_tokenizer(cfg.model)
    assert loaded_tok.chat_template and loaded_tok.eos_token == "<|im_end|>"
    model = load_model(cfg.model, loaded_tok, "sdpa", torch.device("cpu"))
    assert model.config._attn_implementation == "sdpa" and model.is_gradient_checkpointing
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = train(cfg, make_env=lambda env_id: fake_env.FakeSopEnv(max_turns=2, shaped=True))
    assert len(result.history) == 1 and "val/task_success_rate" in result.val_after
    after = result.model.state_dict()
    assert set(after) == set(before) and any(not torch.equal(before[k], after[k]) for k in before)
