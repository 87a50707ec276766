"""Gradient accumulation invariance (fp64), masking, every parameter changes, non-finite loss raises,
behaviour log-probs from the trainer forward and the sampler/trainer mismatch."""

import math

import pytest
import torch

from sopgym.trainers import packing
from sopgym.trainers.modeling import token_logprobs
from sopgym.trainers.optimise import (
    NonFiniteLossError,
    StepSettings,
    accumulate_gradients,
    optimiser_step,
    to_sequences,
)

from .helpers import oracle_episode, tiny_model, tiny_tokenizer


def _eps(tok, n=6):
    eps = [oracle_episode(tok, seed=s, group_id=s // 2, advantage=0.3 * (s - 2.5)) for s in range(n)]
    for ep in eps:  # behaviour log-probs near the model's so ratios are not all clipped
        ep.old_logp = [x * 0.01 for x in ep.old_logp]
    return eps


@pytest.mark.parametrize(
    "loss, aggregation",
    [(loss, agg) for loss in ("ppo_clip", "cispo", "is_reinforce") for agg in ("token", "sequence", "fixed_length")]
    + [("rloo", "sequence")],
)
def test_gradient_accumulation_equals_one_big_batch_fp64(aggregation, loss):
    tok = tiny_tokenizer()
    eps = _eps(tok)
    grads = []
    for rows_per_micro, packed in ((100, True), (1, True), (1, False)):
        model = tiny_model(tok, dtype=torch.float64)
        s = StepSettings(loss=loss, aggregation=aggregation, row_tokens=4096, rows_per_micro_batch=rows_per_micro,
                         packed=packed, aggregation_length=96, is_mode="truncate", is_cap=1.5)
        accumulate_gradients(model, None, eps, s, "sdpa")
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for other in grads[1:]:
        for name, g in grads[0].items():
            assert torch.allclose(g, other[name], atol=1e-12, rtol=1e-9), name


def test_loss_mask_gives_exactly_zero_gradient_to_non_policy_tokens():
    tok = tiny_tokenizer()
    eps = _eps(tok, 3)
    model = tiny_model(tok)
    seqs = to_sequences(eps, "token")
    batch = packing.collate(seqs, packing.first_fit_decreasing([len(e.ids) for e in eps], 4096))
    logp_BT, _ = token_logprobs(model, batch, "sdpa")
    logp_BT.retain_grad()
    from sopgym.trainers.losses import LossParams, policy_loss

    f = {k: v.float() for k, v in batch.fields_BT.items()}
    # on-policy ratios (so no token is clipped) and garbage where masked, which must not leak
    f["old_logp"] = torch.where(f["mask"] == 1, logp_BT.detach(), float("nan"))
    loss, _ = policy_loss("ppo_clip", logp_BT, f["old_logp"], f["adv"], f["weight"], f["mask"], LossParams())
    loss.backward()
    masked = f["mask"] == 0
    assert torch.all(logp_BT.grad[masked] == 0)
    assert torch.all(logp_BT.grad[~masked] != 0)
    # masked = prompt, tool outputs, scaffolding: the policy tokens are exactly the assistant turns
    for ep in eps:
        policy_text = tok.decode([t for t, m in zip(ep.ids, ep.loss_mask) if m])
        expected = "".join(m["content"] + "<|im_end|>" for m in ep.messages if m["role"] == "assistant")
        assert policy_text == expected


def test_every_parameter_changes_after_a_few_steps():
    tok = tiny_tokenizer()
    eps = _eps(tok)
    model = tiny_model(tok)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    for _ in range(3):
        optimiser_step(model, None, opt, sched, eps, StepSettings(row_tokens=4096), "sdpa")
    unchanged = [n for n, p in model.named_parameters() if torch.equal(p.detach(), before[n])]
    assert unchanged == []


def test_non_finite_loss_raises_before_the_optimiser_step():
    tok = tiny_tokenizer()
    eps = _eps(tok, 2)
    eps[0].advantage = float("inf")
    model = tiny_model(tok)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    with pytest.raises(NonFiniteLossError):
        optimiser_step(model, None, opt, sched, eps, StepSettings(row_tokens=4096, loss="is_reinforce"), "sdpa")
    assert all(torch.equal(p.detach(), before[n]) for n, p in model.named_parameters())


def _nll_by_hand(model, eps):
    policy, context = [], []
    with torch.no_grad():
        for ep in eps:
            logits = model(input_ids=torch.tensor([ep.ids])).logits[0]
            lp = torch.log_softmax(logits[:-1].double(), -1).gather(-1, torch.tensor(ep.ids[1:])[:, None])[:, 0]
            for logp, m in zip(lp.tolist(), ep.loss_mask[1:]):
                (policy if m else context).append(-logp)
    return sum(policy) / len(policy), sum(context) / len(context)


@pytest.mark.parametrize("weight", [0.0, 0.5])
def test_sft_context_loss_is_policy_mean_plus_weighted_context_mean(weight):
    tok = tiny_tokenizer()
    eps = _eps(tok, n=3)
    model = tiny_model(tok, dtype=torch.float64)
    s = StepSettings(row_tokens=4096, rows_per_micro_batch=1, context_loss_weight=weight)
    stats = accumulate_gradients(model, None, eps, s, "sdpa", loss_name="sft")
    policy, context = _nll_by_hand(model, eps)
    assert stats["loss"] == pytest.approx(policy + weight * context, rel=1e-9)


def test_context_loss_never_reaches_the_rl_loss():
    tok = tiny_tokenizer()
    eps = _eps(tok, n=3)
    losses = []
    for weight in (0.0, 1.0):
        s = StepSettings(row_tokens=4096, context_loss_weight=weight)
        losses.append(accumulate_gradients(tiny_model(tok, dtype=torch.float64), None, eps, s, "sdpa")["loss"])
    assert losses[0] == losses[1]


def _trainer_logps(model, eps):
    """Each episode alone, full forward: the trainer's log-prob of every policy token."""
    out = []
    with torch.no_grad():
        for ep in eps:
            logits = model(input_ids=torch.tensor([ep.ids])).logits[0].double()
            lp = torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(ep.ids[1:])[:, None])[:, 0]
            out.append([0.0] + [v if m else 0.0 for v, m in zip(lp.tolist(), ep.loss_mask[1:])])
    return out


def _sgd(model, lr=1e-3):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)


@pytest.mark.parametrize("minibatches", [1, 2], ids=["one_update_own_forward", "two_updates_recomputed"])
def test_behaviour_logprobs_are_the_trainers_and_an_injected_mismatch_is_measured(minibatches):
    """The sampler's log-probs are off by +0.1 on every policy token (as a cached bf16 decode can be):
    the update's ratios are taken against the trainer's forward (first ratio exactly 1, nothing
    clipped), the sampler's stay in sampler_logp, and the mismatch metrics report 0.1 and the
    KL(sampler || trainer) of that shift."""
    from sopgym.trainers.optimise import rl_update

    tok = tiny_tokenizer()
    eps = _eps(tok, n=4)
    model = tiny_model(tok, dtype=torch.float64)
    trainer = _trainer_logps(model, eps)
    for ep, lp in zip(eps, trainer):
        ep.sampler_logp = [v + 0.1 if m else 0.0 for v, m in zip(lp, ep.loss_mask)]
        ep.old_logp = list(ep.sampler_logp)
    opt, sched = _sgd(model)
    s = StepSettings(row_tokens=4096, rows_per_micro_batch=2)
    stats, mismatch = rl_update(model, None, opt, sched, eps, s, "sdpa", num_minibatches=minibatches)
    assert stats[0]["ratio_mean"] == pytest.approx(1.0, abs=1e-12) and stats[0]["clip_fraction"] == 0.0
    assert mismatch["mismatch/logp_abs_diff_mean"] == pytest.approx(0.1, abs=1e-9)
    assert mismatch["mismatch/logp_abs_diff_max"] == pytest.approx(0.1, abs=1e-9)
    assert mismatch["mismatch/kl_sampler_trainer"] == pytest.approx(math.exp(-0.1) - 1 + 0.1, abs=1e-9)
    if minibatches > 1:  # recomputed and written back; the sampler's are kept apart
        for ep, lp in zip(eps, trainer):
            assert max(abs(a - b) for a, b, m in zip(ep.old_logp, lp, ep.loss_mask) if m) < 1e-9
            assert all(abs(a - b - 0.1) < 1e-12 for a, b, m in zip(ep.sampler_logp, lp, ep.loss_mask) if m)


def test_sampler_behaviour_logprobs_keep_the_mismatch_in_the_ratio():
    """The negative control: with behaviour_logp=sampler the same injected shift is the first ratio."""
    from sopgym.trainers.optimise import rl_update

    tok = tiny_tokenizer()
    eps = _eps(tok, n=4)
    model = tiny_model(tok, dtype=torch.float64)
    for ep, lp in zip(eps, _trainer_logps(model, eps)):
        ep.sampler_logp = [v + 0.1 if m else 0.0 for v, m in zip(lp, ep.loss_mask)]
        ep.old_logp = list(ep.sampler_logp)
    opt, sched = _sgd(model)
    stats, _ = rl_update(model, None, opt, sched, eps, StepSettings(row_tokens=4096, behaviour_logp="sampler"), "sdpa")
    assert stats[0]["ratio_mean"] == pytest.approx(math.exp(-0.1), abs=1e-9)


@pytest.mark.parametrize("mode", ["truncate", "mask"])
def test_importance_correction_on_an_injected_mismatch(mode):
    """Every other policy token sampled with a log-prob 0.3 too low (rho = e^0.3 = 1.35 > cap 1.2):
    truncated IS weighs those 1.2 instead of 1.35, masked IS drops them; the loss equals the
    hand-weighted sum (ppo_clip at ratio 1 is -A per token, token-mean aggregation)."""
    from sopgym.trainers.optimise import rl_update

    tok = tiny_tokenizer()
    eps = _eps(tok, n=2)
    model = tiny_model(tok, dtype=torch.float64)
    trainer = _trainer_logps(model, eps)
    for ep, lp in zip(eps, trainer):
        positions = [i for i, m in enumerate(ep.loss_mask) if m]
        shifted = set(positions[::2])
        ep.sampler_logp = [v - 0.3 if i in shifted else v for i, v in enumerate(lp)]
        ep.old_logp = list(ep.sampler_logp)
    num_tokens = sum(sum(ep.loss_mask[1:]) for ep in eps)
    hand, num_changed = 0.0, 0
    for ep, lp in zip(eps, trainer):
        for m, t, sv in zip(ep.loss_mask[1:], lp[1:], ep.sampler_logp[1:]):
            if m:
                rho = math.exp(t - sv)
                w = min(rho, 1.2) if mode == "truncate" else float(0.5 <= rho <= 1.2)
                num_changed += w != 1.0
                hand += -w * ep.advantage / num_tokens
    opt, sched = _sgd(model, lr=0.0)
    s = StepSettings(row_tokens=4096, is_mode=mode, is_cap=1.2, is_band=(0.5, 1.2))
    stats, _ = rl_update(model, None, opt, sched, eps, s, "sdpa")
    assert stats[0]["loss"] == pytest.approx(hand, abs=1e-12)
    assert stats[0]["is_changed_fraction"] == pytest.approx(num_changed / num_tokens) and num_changed > 0


def test_chunked_output_head_equals_one_shot_values_and_gradients():
    """A 150k vocabulary must not hold [N, V] logits: the head runs in checkpointed chunks, same numbers."""
    tok = tiny_tokenizer()
    eps = _eps(tok, n=3)
    seqs = to_sequences(eps, "token")
    batch = packing.collate(seqs, packing.first_fit_decreasing([len(e.ids) for e in eps], 4096))
    select = batch.fields_BT["mask"] > 0
    results = []
    for chunk in (1 << 30, 3 * len(tok)):  # one shot, then chunks of 3 positions
        model = tiny_model(tok, dtype=torch.float64)
        logp, ent = token_logprobs(model, batch, "sdpa", 0.7, with_entropy=True, select_BT=select, chunk_elements=chunk)
        (logp * batch.fields_BT["adv"]).sum().backward()
        results.append((logp.detach(), ent, {n: p.grad.clone() for n, p in model.named_parameters()}))
    assert torch.allclose(results[0][0], results[1][0], atol=1e-12) and torch.allclose(results[0][1], results[1][1], atol=1e-12)
    for name, g in results[0][2].items():
        assert torch.allclose(g, results[1][2][name], atol=1e-12), name


def test_one_optimiser_builder_serves_sft_rl_and_resume():
    """SFT, RL and a resume build their AdamW and schedule in ``optimise.build_optimizer`` alone (the
    package constructs no optimiser anywhere else), and SFT's hyper-parameters come from its section."""
    import pathlib
    import re

    from sopgym.trainers.config import SFTConfig
    from sopgym.trainers.optimise import AdamWSettings, WarmUp, apply_settings, build_optimizer

    root = pathlib.Path(__file__).resolve().parents[2] / "sopgym"
    makers = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if re.search(r"optim\.(AdamW|Adam|SGD)\(", p.read_text()))
    assert makers == ["trainers/optimise.py"], makers
    hp = AdamWSettings.from_config(SFTConfig(lr=3e-4, beta1=0.8, beta2=0.99, weight_decay=0.1))
    assert hp == AdamWSettings(3e-4, (0.8, 0.99), 0.1)
    model = torch.nn.Linear(2, 2)
    opt, sched = build_optimizer(model, hp, WarmUp(4))
    assert opt.param_groups[0]["betas"] == (0.8, 0.99) and opt.param_groups[0]["lr"] == pytest.approx(3e-4 / 4)
    apply_settings(opt, sched, AdamWSettings(1e-3, (0.9, 0.95), 0.0))  # a resume under a changed config
    assert opt.param_groups[0]["betas"] == (0.9, 0.95) and opt.param_groups[0]["lr"] == pytest.approx(1e-3 / 4)
