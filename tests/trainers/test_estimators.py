"""Advantage estimators and losses against hand-computed values."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sopgym.trainers.advantages import ADVANTAGES, dr_grpo, grpo, normalise_components, passk, rloo, zero_variance
from sopgym.trainers.episodes import Episode
from sopgym.trainers.losses import (
    LOSSES,
    LossParams,
    aggregation_weights,
    cispo,
    is_reinforce,
    k3_kl,
    policy_loss,
    ppo_clip,
)
from sopgym.trainers.rollout_metrics import assign_advantages, divergence_warning

T = torch.tensor


def test_grpo_hand_values():
    adv = grpo(T([1.0, 0.0, 0.0, 1.0], dtype=torch.float64))
    # mean 0.5, unbiased std sqrt(1/3)
    expected = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    assert torch.allclose(adv, T([expected, -expected, -expected, expected], dtype=torch.float64))


def test_dr_grpo_and_rloo_hand_values():
    assert torch.equal(dr_grpo(T([1.0, 0.0, 0.0, 1.0])), T([0.5, -0.5, -0.5, 0.5]))
    assert torch.allclose(rloo(T([1.0, 0.0, 0.0])), T([1.0, -0.5, -0.5]))
    assert torch.allclose(rloo(T([3.0, 1.0])), T([2.0, -2.0]))


def test_passk_hand_values():
    # 4 samples, 1 correct, k=2: pass@2 = 1 - C(3,2)/C(4,2) = 0.5.
    # correct: 1 - 0.5; incorrect: P(one other drawn from {1,0,0} is correct) - 0.5 = 1/3 - 1/2.
    adv = passk(T([1.0, 0.0, 0.0, 0.0], dtype=torch.float64), k=2)
    assert torch.allclose(adv, T([0.5, -1 / 6, -1 / 6, -1 / 6], dtype=torch.float64))
    # k=1 is r - mean
    r = T([0.2, 0.9, 0.4], dtype=torch.float64)
    assert torch.allclose(passk(r, k=1), r - r.mean())
    # all correct: nobody raises best-of-k
    assert torch.equal(passk(T([1.0, 1.0, 1.0]), k=2), torch.zeros(3))


@settings(max_examples=30, deadline=None)
@given(value=st.floats(-5, 5), n=st.integers(1, 8), name=st.sampled_from(sorted(ADVANTAGES)))
def test_equal_rewards_give_zero_advantages(value, n, name):
    adv = ADVANTAGES[name](torch.full((n,), value, dtype=torch.float64), k=2)
    assert torch.allclose(adv, torch.zeros(n, dtype=torch.float64), atol=1e-9)


def test_component_normalisation_and_zero_variance():
    comps = T([[1.0, 10.0], [0.0, 10.0], [1.0, 30.0]], dtype=torch.float64)
    out = normalise_components(comps)
    col0 = (comps[:, 0] - comps[:, 0].mean()) / (comps[:, 0].std() + 1e-6)
    col1 = (comps[:, 1] - comps[:, 1].mean()) / (comps[:, 1].std() + 1e-6)
    assert torch.allclose(out, col0 + col1)
    assert zero_variance(T([2.0, 2.0])) and not zero_variance(T([2.0, 2.5]))


def _ep(group, reward, infra=False, comps=None):
    return Episode("t", group, 0, "e", reward=reward, infrastructure_failure=infra, reward_components=comps or {})


def test_infrastructure_failures_are_excluded_from_groups():
    eps = [_ep(0, 1.0), _ep(0, 0.0), _ep(0, 0.0, infra=True), _ep(1, 1.0), _ep(1, 1.0)]
    trainable, stats = assign_advantages(eps, "dr_grpo", filter_zero_variance=True)
    assert eps[2] not in trainable  # infra failure never trained on
    assert eps[0].advantage == 0.5 and eps[1].advantage == -0.5  # baseline over the two valid members
    assert eps[3] not in trainable and eps[4] not in trainable  # zero-variance group filtered
    assert stats["rollout/zero_variance_group_fraction"] == 0.5
    trainable, _ = assign_advantages(eps, "dr_grpo", filter_zero_variance=False)
    assert len(trainable) == 4


def test_ppo_clip_hand_values():
    logp = T([math.log(1.5), math.log(1.5), math.log(0.5)], dtype=torch.float64)
    old = torch.zeros(3, dtype=torch.float64)
    adv = T([1.0, -1.0, -1.0], dtype=torch.float64)
    out = ppo_clip(logp, old, adv, LossParams(0.2, 0.2))
    # ratio 1.5, A=+1 -> -min(1.5, 1.2) ; A=-1 -> -min(-1.5, -1.2) ; ratio .5, A=-1 -> -min(-.5, -.8)
    assert torch.allclose(out, T([-1.2, 1.5, 0.8], dtype=torch.float64))


def test_cispo_hand_values_and_gradient():
    logp = T([math.log(1.5), math.log(0.5)], dtype=torch.float64, requires_grad=True)
    adv = T([2.0, 1.0], dtype=torch.float64)
    out = cispo(logp, torch.zeros(2, dtype=torch.float64), adv, LossParams(0.2, 0.3))
    assert torch.allclose(out, -T([1.3 * 2.0 * math.log(1.5), 0.8 * 1.0 * math.log(0.5)], dtype=torch.float64))
    out.sum().backward()  # clipped tokens still get a gradient: -clip(r) * A
    assert torch.allclose(logp.grad, T([-1.3 * 2.0, -0.8], dtype=torch.float64))


def test_is_reinforce_hand_values():
    logp = T([math.log(2.0)], dtype=torch.float64)
    assert torch.allclose(is_reinforce(logp, torch.zeros(1, dtype=torch.float64), T([3.0], dtype=torch.float64), LossParams()), T([-6.0], dtype=torch.float64))


def test_ratio_one_reduces_ppo_and_cispo_to_reinforce():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(10, generator=g, dtype=torch.float64) - 2
    adv = torch.randn(10, generator=g, dtype=torch.float64)
    grads, values = {}, {}
    for name in LOSSES:
        logp = base.clone().requires_grad_(True)
        out = LOSSES[name](logp, base.clone(), adv, LossParams(0.2, 0.2))
        out.sum().backward()
        grads[name], values[name] = logp.grad.clone(), out.detach()
    assert torch.allclose(values["ppo_clip"], values["is_reinforce"])
    assert torch.allclose(grads["ppo_clip"], -adv) and torch.allclose(grads["is_reinforce"], -adv)
    assert torch.allclose(grads["cispo"], -adv)


def test_aggregation_weights():
    assert aggregation_weights([2, 3], "token") == [0.2, 0.2]
    assert aggregation_weights([2, 3, 0], "sequence") == [0.25, 1 / 6, 0.0]
    with pytest.raises(ValueError):
        aggregation_weights([1], "batch")


def test_k3_kl():
    assert torch.equal(k3_kl(T([-1.0]), T([-1.0])), T([0.0]))
    d = -0.5  # ref - logp
    assert torch.allclose(k3_kl(T([-1.0]), T([-1.5])), T([math.exp(d) - d - 1]))


def test_policy_loss_masks_non_finite_values_with_zero_gradient():
    logp = T([-1.0, -2.0, -0.5], dtype=torch.float64, requires_grad=True)
    old = T([-1.0, float("nan"), -0.5], dtype=torch.float64)
    adv = T([1.0, float("inf"), 2.0], dtype=torch.float64)
    mask = T([1.0, 0.0, 1.0], dtype=torch.float64)
    loss, stats = policy_loss("ppo_clip", logp, old, adv, torch.full((3,), 0.5, dtype=torch.float64), mask, LossParams())
    loss.backward()
    assert torch.isfinite(loss) and float(loss.detach()) == pytest.approx(-0.5 * (1.0 + 2.0))
    assert logp.grad[1] == 0.0 and torch.all(logp.grad[[0, 2]] != 0)
    assert stats["num_valid"] == 2


def test_divergence_warning():
    assert divergence_warning([0, 0, 0, 1, 1, 1], [0.5, 0.4], window=3)
    assert not divergence_warning([0, 0, 0, 1, 1, 1], [0.4, 0.5], window=3)
    assert not divergence_warning([1, 1, 1, 0, 0, 0], [0.5, 0.4], window=3)
