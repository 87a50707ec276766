"""Gradient accumulation invariance (fp64), masking, every parameter changes, non-finite loss raises."""

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


@pytest.mark.parametrize("aggregation", ["token", "sequence"])
@pytest.mark.parametrize("loss", ["ppo_clip", "cispo", "is_reinforce"])
def test_gradient_accumulation_equals_one_big_batch_fp64(aggregation, loss):
    tok = tiny_tokenizer()
    eps = _eps(tok)
    grads = []
    for rows_per_micro, packed in ((100, True), (1, True), (1, False)):
        model = tiny_model(tok, dtype=torch.float64)
        s = StepSettings(loss=loss, aggregation=aggregation, row_tokens=4096, rows_per_micro_batch=rows_per_micro, packed=packed)
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
