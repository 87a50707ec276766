"""Mixed precision: float32 master weights and AdamW state under bfloat16 compute (``model.dtype: bfloat16``).

One AdamW step at lr 1e-6 must move every parameter tensor, norm gains included, by the update AdamW
computes (``lr * g / (|g| + eps)`` on its first step), which bfloat16 weights cannot hold (their spacing
near 1.0 is 2**-7); the forward must still compute in bfloat16, and the sampler must compute as the
trainer does, so that its log-probs stay those of the trained model. The same checks run on CUDA in
scripts/gpu_check_trainer.sh (the ``gpu`` tests). The data-parallel path (FSDP2's
``MixedPrecisionPolicy``) is tested in test_distributed.py.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from sopgym.trainers.distributed import DataParallel
from sopgym.trainers.loop import build_engine, train
from sopgym.trainers.modeling import Precision, load_model, load_tokenizer
from sopgym.trainers.optimise import mismatch_metrics, optimiser_step, recompute_behaviour_logprobs, step_settings
from sopgym.trainers.rollout import EnvPool, RolloutSettings, collect, group_spec_list

from . import fake_env
from .helpers import fake_env_config, load_benchmark, oracle_episode

ADAM_EPS = 1e-8
BF16 = ("model.dtype=bfloat16",)


def _one_step(cfg, device: str, backend: str):
    """One optimiser step of the trainer's model for ``cfg`` on oracle episodes with advantages of
    both signs; returns ``{name: (before, after, grad)}`` and the dtypes the first attention
    projection computed in."""
    tok = load_tokenizer(cfg.model)
    lm = load_model(cfg.model, tok, backend, torch.device(device), seed=cfg.seed)
    model = DataParallel().wrap(lm, Precision.from_config(cfg.model))
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr, betas=(cfg.optim.beta1, cfg.optim.beta2),
                                  weight_decay=cfg.optim.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    episodes = [oracle_episode(tok, seed, group_id=seed // 2, advantage=0.7 * (-1) ** seed) for seed in range(6)]
    computed = []
    hook = lm.model.layers[0].self_attn.q_proj.register_forward_hook(lambda m, i, out: computed.append(out.dtype))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimiser_step(model, None, optimizer, scheduler, episodes, step_settings(cfg), backend)
    hook.remove()
    return {n: (before[n], p.detach(), p.grad) for n, p in model.named_parameters()}, set(computed), optimizer


def _check_intended_update(moved, lr: float) -> None:
    """Every element moved by AdamW's first update (``-lr * g / (|g| + eps)``, the gradients as clipped)
    within the rounding of a float32 weight, and every tensor has elements that move by about lr."""
    for name, (before, after, grad) in moved.items():
        assert after.dtype == torch.float32 and grad.dtype == torch.float32, name
        delta = after.double() - before.double()
        g = grad.double()
        intended = -lr * g / (g.abs() + ADAM_EPS)
        top = torch.maximum(before.abs(), after.abs()).float()
        ulp = (torch.nextafter(top, torch.full_like(top, float("inf"))) - top).double()
        error = (delta - intended).abs()
        assert bool((error <= ulp + 1e-3 * lr).all()), f"{name}: off by up to {float((error / lr).max()):.3f} lr"
        assert float(intended.abs().max()) > 0.5 * lr, f"{name}: no element was meant to move (vacuous)"
        assert float((delta.abs() >= 0.5 * lr).double().mean()) > 0.25, f"{name} barely moved"


@pytest.mark.parametrize("lr", [1e-6, 2e-6, 1e-5])
def test_one_adamw_step_in_the_bf16_config_moves_every_parameter_by_the_intended_amount(tok_dir, tmp_path, lr):
    cfg = fake_env_config(tok_dir, tmp_path, *BF16, f"optim.lr={lr}")
    moved, computed, optimizer = _one_step(cfg, "cpu", "sdpa_varlen")
    assert computed == {torch.bfloat16}  # the forward computes in bf16 over the fp32 masters
    assert any("norm" in name for name in moved)  # the norm gains are among the tensors checked
    _check_intended_update(moved, lr)
    states = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.numel() > 1]
    assert states and all(v.dtype == torch.float32 for v in states)  # AdamW's moments in fp32 too


def test_bf16_master_weights_lose_the_update(tok_dir, tmp_path):
    """The negative control: pure bf16 weights (``model.master_dtype: bfloat16``, what every bf16
    config trained with before) keep none of a 1e-6 update of the norm gains and few of the matrices'."""
    cfg = fake_env_config(tok_dir, tmp_path, *BF16, "model.master_dtype=bfloat16", "optim.lr=1e-6")
    moved, _, _ = _one_step(cfg, "cpu", "sdpa_varlen")
    norms = [n for n in moved if "norm" in n]
    assert norms and all(torch.equal(moved[n][0], moved[n][1]) for n in norms)
    matrices = [n for n in moved if moved[n][0].dim() == 2]
    kept = sum(int((moved[n][0] != moved[n][1]).sum()) for n in matrices) / sum(moved[n][0].numel() for n in matrices)
    assert kept < 0.1


def test_a_bf16_run_trains_fp32_masters_and_checkpoints_them(tok_dir, tmp_path):
    """End to end (``train``): one RL step at lr 1e-6 in the bf16 config moves every parameter tensor of
    the model by about lr, and the checkpoint holds fp32 weights and AdamW state."""
    cfg = fake_env_config(tok_dir, tmp_path, *BF16, "optim.lr=1e-6", "steps=1", "rollout.batch_size=4")
    initial = load_model(cfg.model, load_tokenizer(cfg.model), "sdpa_varlen", torch.device("cpu"), seed=cfg.seed).state_dict()
    result = train(cfg, make_env=lambda env_id: fake_env.FakeSopEnv(max_turns=2, shaped=True))
    assert result.history[0]["train/trained_episodes"] > 0
    saved = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    for name, value in saved["model"].items():
        assert value.dtype == torch.float32, name
        moved = (value.double() - initial[name].double()).abs()
        assert float((moved >= 0.5e-6).double().mean()) > 0.25, f"{name} barely moved"
    moments = [v for s in saved["optimizer"]["state"].values() for k, v in s.items() if k != "step"]
    assert moments and all(v.dtype == torch.float32 for v in moments)


def _sampled_and_recomputed(cfg, device: str, backend: str, trainer_dtype: str | None = None):
    """Episodes sampled by the run's rollout engine for ``cfg`` (one process: the trained model itself),
    then the trainer's forward of their tokens (under ``model.dtype=trainer_dtype`` when given):
    the ``mismatch/*`` metrics and the number of policy tokens."""
    tok = load_tokenizer(cfg.model)
    lm = load_model(cfg.model, tok, backend, torch.device(device), seed=cfg.seed)
    engine = build_engine(cfg, lm, tok, shared=True)
    pool = EnvPool(lambda env_id: fake_env.FakeSopEnv(max_turns=2, shaped=True))
    try:
        episodes = collect(pool, group_spec_list(["fake"], "train", 0, 4, 2), engine, tok,
                           RolloutSettings(max_new_tokens=24, max_context=512, temperature=1.0),
                           generator=torch.Generator().manual_seed(0))
    finally:
        pool.close()
    model_cfg = cfg.model if trainer_dtype is None else dataclasses.replace(cfg.model, dtype=trainer_dtype)
    model = DataParallel().wrap(lm, Precision.from_config(model_cfg))
    sums = recompute_behaviour_logprobs(model, episodes, step_settings(cfg), backend, write=False)
    return mismatch_metrics(sums), sum(ep.num_policy_tokens for ep in episodes)


def test_the_sampler_computes_as_the_trainer_under_bf16(tok_dir, tmp_path):
    """The one-process sampler is the trained model under the trainer's autocast: its log-probs equal
    the trainer's bf16 forward of the same tokens far more closely than an fp32 forward of them."""
    cfg = fake_env_config(tok_dir, tmp_path, *BF16)
    same, num_tokens = _sampled_and_recomputed(cfg, "cpu", "sdpa_varlen")
    other, _ = _sampled_and_recomputed(cfg, "cpu", "sdpa_varlen", trainer_dtype="float32")
    assert num_tokens > 100
    assert same["mismatch/logp_abs_diff_max"] < 1e-4
    assert other["mismatch/logp_abs_diff_mean"] > 100 * same["mismatch/logp_abs_diff_mean"]  # bf16 compute is real


# ---- on CUDA (scripts/gpu_check_trainer.sh) --------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("lr", [1e-6, 1e-5])
def test_cuda_bf16_step_with_the_auto_backend_moves_every_parameter_by_the_intended_amount(tok_dir, tmp_path, lr):
    """On CUDA the bf16 config picks a flash kernel (``attention: auto``) over fp32 master weights."""
    from sopgym.trainers import attention

    cfg = fake_env_config(tok_dir, tmp_path, *BF16, f"optim.lr={lr}", "device=cuda")
    backend = attention.select_backend(cfg.model.attention, "cuda", Precision.from_config(cfg.model).compute)
    assert backend in attention.CUDA_BACKENDS, backend
    moved, computed, _ = _one_step(cfg, "cuda", backend)
    assert computed == {torch.bfloat16}
    _check_intended_update({n: tuple(t.cpu() for t in v) for n, v in moved.items()}, lr)


@pytest.mark.gpu
def test_cuda_sampler_computes_as_the_trainer_under_bf16(tok_dir, tmp_path):
    from sopgym.trainers import attention

    cfg = fake_env_config(tok_dir, tmp_path, *BF16, "device=cuda")
    backend = attention.select_backend(cfg.model.attention, "cuda", torch.bfloat16)
    same, num_tokens = _sampled_and_recomputed(cfg, "cuda", backend)
    other, _ = _sampled_and_recomputed(cfg, "cuda", backend, trainer_dtype="float32")
    assert num_tokens > 100
    # GPU kernels differ between the KV-cached sampler and the packed forward more than CPU ones do
    assert same["mismatch/logp_abs_diff_mean"] < 0.5 * other["mismatch/logp_abs_diff_mean"], (same, other)


def test_master_weights_benchmark_runs_and_prints_its_ratios(capsys):
    """benchmarks/master_weights.py --quick: the bf16-weights baseline and the fp32 masters, for the
    matrices and the norm gains, each kept share against the baseline's."""
    load_benchmark("master_weights").main(["--quick"])
    out = capsys.readouterr().out
    assert out.count("bf16 weights (baseline)") == 2 and out.count("fp32 masters changed") == 2, out
    assert "lr 1e-06 norm gains: bf16 weights (baseline) changed 0.0% of elements" in out, out
