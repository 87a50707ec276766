"""Advantage estimators and losses against hand-computed values."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sopgym.trainers.advantages import ADVANTAGES, dr_grpo, grpo, normalise_components, passk, rloo, zero_variance
from sopgym.trainers.episodes import Episode
from sopgym.trainers.losses import (
    KL_ESTIMATORS,
    LOSSES,
    SEQUENCE_LOSSES,
    LossParams,
    Segments,
    aggregation_weights,
    behaviour_weights,
    cispo,
    is_reinforce,
    k3_kl,
    mismatch_sums,
    policy_loss,
    ppo_clip,
)
from sopgym.trainers.rollout_metrics import assign_advantages

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
    for name in [n for n in LOSSES if n not in SEQUENCE_LOSSES]:
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


def test_dr_grpo_fixed_length_aggregation_is_token_sum_over_a_constant():
    """Dr. GRPO: each episode's token sum divided by a fixed constant L, averaged over the G episodes."""
    assert aggregation_weights([2, 3, 0], "fixed_length", fixed_length=10) == [1 / 30] * 3
    with pytest.raises(ValueError, match="constant"):
        aggregation_weights([2], "fixed_length")
    loss_T = T([1.0, 2.0, 3.0, 4.0, 5.0], dtype=torch.float64)  # episode A: 2 tokens, episode B: 3 tokens
    w = aggregation_weights([2, 3], "fixed_length", fixed_length=8)
    weight_T = T([w[0]] * 2 + [w[1]] * 3, dtype=torch.float64)
    assert float((weight_T * loss_T).sum()) == pytest.approx(((1 + 2) / 8 + (3 + 4 + 5) / 8) / 2)
    # unlike the token and sequence means, doubling an episode's length doubles its weight: no length bias
    long_w = aggregation_weights([2, 4], "fixed_length", fixed_length=8)
    assert long_w[0] == long_w[1]


def test_clip_fraction_counts_only_tokens_where_clipping_is_active_for_the_advantage_sign():
    """PPO: ratio 1.5 with A>0 and 0.5 with A<0 are clipped; ratio 1.5 with A<0 and 0.5 with A>0 are
    outside the band but keep their full gradient (the unclipped branch is the minimum)."""
    logp = T([math.log(1.5), math.log(1.5), math.log(0.5), math.log(0.5)], dtype=torch.float64, requires_grad=True)
    adv = T([1.0, -1.0, -1.0, 1.0], dtype=torch.float64)
    ones = torch.ones(4, dtype=torch.float64)
    loss, stats = policy_loss("ppo_clip", logp, torch.zeros(4, dtype=torch.float64), adv, ones, ones, LossParams())
    assert stats["clip_sum"] == 2
    loss.backward()
    assert logp.grad[0] == 0 and logp.grad[2] == 0 and logp.grad[1] != 0 and logp.grad[3] != 0  # active = no gradient
    _, cispo_stats = policy_loss("cispo", logp.detach(), torch.zeros(4, dtype=torch.float64), adv, ones, ones, LossParams())
    assert cispo_stats["clip_sum"] == 4  # CISPO's weight is clipped whatever the sign
    _, is_stats = policy_loss("is_reinforce", logp.detach(), torch.zeros(4, dtype=torch.float64), adv, ones, ones, LossParams())
    assert is_stats["clip_sum"] == 0


def _categorical():
    g = torch.Generator().manual_seed(3)
    theta = torch.randn(5, generator=g, dtype=torch.float64, requires_grad=True)
    ref = torch.softmax(torch.randn(5, generator=g, dtype=torch.float64), -1)
    return theta, ref


def _expected_loss_gradient(name):
    """E_{x~pi}[grad k(x)]: the estimator used as a per-token loss on tokens sampled from pi (pi is
    not differentiated through the sampling), computed exactly over the 5 outcomes."""
    theta, ref = _categorical()
    logpi = torch.log_softmax(theta, -1)
    loss = (logpi.exp().detach() * KL_ESTIMATORS[name](logpi, ref.log())).sum()
    (grad,) = torch.autograd.grad(loss, theta)
    return grad


def _divergence_gradient(forward: bool):
    theta, ref = _categorical()
    pi = torch.softmax(theta, -1)
    kl = (pi * (pi.log() - ref.log())).sum() if forward else (ref * (ref.log() - pi.log())).sum()
    (grad,) = torch.autograd.grad(kl, theta)
    return grad


def test_kl_estimators_expected_gradients_on_a_categorical():
    """k1 as a loss has zero expected gradient, k2 follows KL(pi || ref), k3 follows KL(ref || pi)."""
    forward, reverse = _divergence_gradient(True), _divergence_gradient(False)
    assert not torch.allclose(forward, reverse, atol=1e-3)  # the two divergences differ here
    assert torch.allclose(_expected_loss_gradient("k1"), torch.zeros(5, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(_expected_loss_gradient("k2"), forward, atol=1e-12)
    assert torch.allclose(_expected_loss_gradient("k3"), reverse, atol=1e-12)


def test_kl_values_and_clamps():
    theta, ref = _categorical()
    logpi = torch.log_softmax(theta.detach(), -1)
    pi = logpi.exp()
    exact = float((pi * (logpi - ref.log())).sum())  # KL(pi || ref)
    # k1 and k3 are unbiased estimates of KL(pi || ref) under pi; k2 is not
    assert float((pi * KL_ESTIMATORS["k1"](logpi, ref.log())).sum()) == pytest.approx(exact, abs=1e-12)
    assert float((pi * KL_ESTIMATORS["k3"](logpi, ref.log())).sum()) == pytest.approx(exact, abs=1e-12)
    # far-off tokens: log-ratio clamped to [-20, 20] and k3 to [-10, 10] (as verl), so nothing overflows
    far = KL_ESTIMATORS["k3"](T([-200.0, 0.0]), T([0.0, -200.0]))
    assert torch.isfinite(far).all() and float(far.max()) == 10.0
    assert float(KL_ESTIMATORS["k1"](T([0.0]), T([-100.0]))) == 20.0


def test_rloo_is_reinforce_on_the_summed_log_prob_of_each_episode():
    """Two episodes packed in one row (3 and 2 tokens): loss = mean_e(-A_e exp(S_e)), S_e the episode's
    summed log-ratio; each token's gradient is -A_e exp(S_e) / G (on-policy: -A_e / G)."""
    segments = Segments(T([[0, 0, 0, 1, 1, -1]]))
    logp = T([[-1.0, -2.0, -0.5, -0.3, -0.7, 0.0]], dtype=torch.float64, requires_grad=True)
    old = T([[-1.1, -2.0, -0.4, -0.3, -0.9, 0.0]], dtype=torch.float64)
    adv = T([[2.0, 2.0, 2.0, -1.0, -1.0, 0.0]], dtype=torch.float64)
    mask = T([[1.0, 1.0, 1.0, 1.0, 1.0, 0.0]], dtype=torch.float64)
    w = aggregation_weights([3, 2], "sequence")
    weight = T([[w[0]] * 3 + [w[1]] * 2 + [0.0]], dtype=torch.float64)
    loss, _ = policy_loss("rloo", logp, old, adv, weight, mask, LossParams(), segments=segments)
    s_a, s_b = 0.1 + 0.0 - 0.1, 0.0 + 0.2
    assert float(loss) == pytest.approx((-2.0 * math.exp(s_a) + 1.0 * math.exp(s_b)) / 2, abs=1e-12)
    loss.backward()
    expected = T([[-2.0 * math.exp(s_a) / 2] * 3 + [1.0 * math.exp(s_b) / 2] * 2 + [0.0]], dtype=torch.float64)
    assert torch.allclose(logp.grad, expected, atol=1e-12)


def test_behaviour_weights_hand_values():
    """rho = pi_trainer / pi_sampler per token: [2, 1, 0.25] in episode 0, [1.5] in episode 1."""
    old = torch.log(T([[0.5, 0.9, 0.2, 0.6]], dtype=torch.float64))
    sampler = torch.log(T([[0.25, 0.9, 0.8, 0.4]], dtype=torch.float64))
    mask = T([[1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    seg = Segments(T([[0, 0, 0, 1]]))

    def w(mode, level="token"):
        return behaviour_weights(old, sampler, mask, mode, level, cap=1.6, band=(0.5, 1.6), segments=seg)[0].tolist()

    assert w("none") == [1.0, 1.0, 1.0, 1.0]
    assert w("truncate") == pytest.approx([1.6, 1.0, 0.25, 1.5])  # TIS: min(rho, C)
    assert w("mask") == [0.0, 1.0, 0.0, 1.0]  # MIS: tokens outside [0.5, 1.6] dropped
    assert w("truncate", "sequence") == pytest.approx([0.5, 0.5, 0.5, 1.5])  # product 2 * 1 * 0.25
    assert w("mask", "sequence") == [1.0, 1.0, 1.0, 1.0]  # 0.5 and 1.5 are inside the band
    geo = (2 * 1 * 0.25) ** (1 / 3)
    assert w("truncate", "geometric") == pytest.approx([geo, geo, geo, 1.5])
    assert w("mask", "geometric") == [1.0, 1.0, 1.0, 1.0]


def test_mismatch_sums_hand_values():
    old = T([[-1.0, -2.0, -3.0]], dtype=torch.float64)
    sampler = T([[-1.1, -1.8, 5.0]], dtype=torch.float64)
    out = mismatch_sums(old, sampler, T([[1.0, 1.0, 0.0]]))
    assert out["abs_sum"] == pytest.approx(0.3) and out["abs_max"] == pytest.approx(0.2) and out["num"] == 2
    assert out["kl_sum"] == pytest.approx((math.exp(0.1) - 1 - 0.1) + (math.exp(-0.2) - 1 + 0.2))


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
