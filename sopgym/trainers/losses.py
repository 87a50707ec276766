"""Policy-gradient losses, KL estimators, behaviour corrections and aggregation: small pure functions in registries.

Shape legend: B = packed rows, T = tokens per row (any shape works: token-level functions are
elementwise; sequence-level ones take a ``Segments`` that sums over each token's episode).

Each loss maps per-token ``logp`` (current policy, with grad), ``old_logp`` (behaviour log-probs:
the trainer's own forward before the update by default, else the sampler's) and ``adv`` (the
episode's advantage on each of its tokens) to a per-token loss. Aggregation is a per-token weight
computed once per optimiser step over the *global* batch, so that summing ``weight * loss`` over any
split into micro-batches gives exactly the one-big-batch gradient:

* ``token``: ``1 / num_valid_tokens`` (every token of the step weighs the same);
* ``sequence``: ``1 / (len(episode) * num_episodes)`` (each episode's token mean, averaged);
* ``fixed_length`` (Dr. GRPO): ``1 / (num_episodes * L)`` with a fixed ``L`` (default: the most
  policy tokens an episode can have): each episode's token *sum* over a constant, so neither long nor
  short answers are favoured by their length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

LOG_RATIO_CLAMP = 20.0
"""Log-ratios are clamped to [-20, 20] before ``exp`` (as verl does), so a far-off token cannot overflow."""
KL_VALUE_CLAMP = 10.0
"""The k3 estimate is clamped to [-10, 10] (as verl does): one token cannot dominate the penalty."""


@dataclass(frozen=True)
class LossParams:
    clip_low: float = 0.2
    clip_high: float = 0.2


class Segments:
    """Sums over each token's episode within a micro-batch (episodes are never split across rows).

    Args:
        segment_ids_BT: the episode index of each position, -1 for padding (``PackedBatch.segment_ids_BT``).
    """

    def __init__(self, segment_ids_BT: torch.Tensor):
        self.seg_N = segment_ids_BT.reshape(-1)
        self.real_N = self.seg_N >= 0
        self.shape = segment_ids_BT.shape
        self.num_S = int(self.seg_N.max()) + 1 if self.seg_N.numel() else 0

    def restricted(self, keep_BT: torch.Tensor) -> Segments:
        """The same episodes, summing only where ``keep_BT`` (e.g. the loss mask): other positions get 0."""
        out = Segments.__new__(Segments)
        out.seg_N = torch.where(keep_BT.reshape(-1).bool(), self.seg_N, -1)
        out.real_N, out.shape, out.num_S = out.seg_N >= 0, self.shape, self.num_S
        return out

    def sum(self, x_BT: torch.Tensor) -> torch.Tensor:
        """Each position gets the sum of ``x`` over its episode (0 on padding); differentiable."""
        x_N = x_BT.reshape(-1)
        sums_S = x_N.new_zeros(self.num_S).index_add(0, self.seg_N[self.real_N], x_N[self.real_N])
        return torch.where(self.real_N, sums_S[self.seg_N.clamp(min=0)], 0.0).reshape(self.shape)


def _log_ratio(logp_BT: torch.Tensor, old_logp_BT: torch.Tensor) -> torch.Tensor:
    return torch.clamp(logp_BT - old_logp_BT, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def ppo_clip(logp_BT, old_logp_BT, adv_BT, p: LossParams, segments: Segments | None = None) -> torch.Tensor:
    """PPO-clip: ``-min(r A, clip(r, 1-eps_low, 1+eps_high) A)`` with ``r = exp(logp - old_logp)``."""
    ratio_BT = torch.exp(_log_ratio(logp_BT, old_logp_BT))
    clipped_BT = torch.clamp(ratio_BT, 1.0 - p.clip_low, 1.0 + p.clip_high)
    return -torch.minimum(ratio_BT * adv_BT, clipped_BT * adv_BT)


def cispo(logp_BT, old_logp_BT, adv_BT, p: LossParams, segments: Segments | None = None) -> torch.Tensor:
    """CISPO: ``-sg(clip(r, 1-eps_low, 1+eps_high)) A logp``: every token keeps a gradient, the IS weight is clipped."""
    ratio_BT = torch.exp(_log_ratio(logp_BT, old_logp_BT)).detach()
    weight_BT = torch.clamp(ratio_BT, 1.0 - p.clip_low, 1.0 + p.clip_high)
    return -weight_BT * adv_BT * logp_BT


def is_reinforce(logp_BT, old_logp_BT, adv_BT, p: LossParams, segments: Segments | None = None) -> torch.Tensor:
    """Importance-sampled REINFORCE: ``-r A`` (gradient ``-r A grad logp``), unclipped."""
    return -torch.exp(_log_ratio(logp_BT, old_logp_BT)) * adv_BT


def rloo(logp_BT, old_logp_BT, adv_BT, p: LossParams, segments: Segments | None = None) -> torch.Tensor:
    """RLOO's objective (Ahmadian et al., 2024): the whole response is one action, REINFORCE on its
    *summed* log-prob. Every token of episode e carries ``-A_e exp(S_e)`` with
    ``S_e = sum_t (logp_t - old_logp_t)``; with ``sequence`` aggregation the loss is the mean over
    episodes of ``-A_e exp(S_e)``, whose gradient on-policy (``S_e = 0``) is
    ``-(1/G) sum_e A_e sum_t grad logp_t``, the paper's estimator. Needs ``segments``.
    """
    assert segments is not None, "rloo is a sequence-level loss: pass the micro-batch's Segments"
    seq_log_ratio_BT = torch.clamp(segments.sum(logp_BT - old_logp_BT), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return -torch.exp(seq_log_ratio_BT) * adv_BT


LOSSES: dict[str, Callable[..., torch.Tensor]] = {
    "ppo_clip": ppo_clip,
    "cispo": cispo,
    "is_reinforce": is_reinforce,
    "rloo": rloo,
}
SEQUENCE_LOSSES = ("rloo",)
"""Losses defined on whole episodes: they need ``sequence`` aggregation."""


def clip_active(name: str, ratio_BT: torch.Tensor, adv_BT: torch.Tensor, p: LossParams) -> torch.Tensor:
    """Where clipping changes the gradient (bool): what ``clip_fraction`` counts.

    PPO-clip: only where the clipped branch is the minimum for the sign of the advantage (ratio above
    ``1 + eps_high`` with A > 0, below ``1 - eps_low`` with A < 0), as TRL and verl report it; a ratio
    outside the band on the other side still gets its full gradient. CISPO: wherever its IS weight is
    clipped (the gradient is scaled, never cut). The REINFORCE losses never clip.
    """
    if name == "ppo_clip":
        return ((adv_BT > 0) & (ratio_BT > 1.0 + p.clip_high)) | ((adv_BT < 0) & (ratio_BT < 1.0 - p.clip_low))
    if name == "cispo":
        return (ratio_BT > 1.0 + p.clip_high) | (ratio_BT < 1.0 - p.clip_low)
    return torch.zeros_like(ratio_BT, dtype=torch.bool)


# ---- KL to the reference model ---------------------------------------------------------------------
# Used as a per-token loss on tokens x sampled from the policy pi (on-policy), the gradient of an
# estimator k(x) is E_{x~pi}[grad k(x)] (the sampling distribution itself is not differentiated).
# Which divergence that gradient follows differs per estimator (tests/trainers/test_estimators.py
# computes all three exactly on a small categorical distribution).


def k1_kl(logp_BT: torch.Tensor, ref_logp_BT: torch.Tensor) -> torch.Tensor:
    """k1 = ``log pi - log ref``: an unbiased estimate of KL(pi || ref), but as a loss its expected
    gradient is ``E_pi[grad log pi] = 0``: it only adds noise. Penalise KL(pi || ref) with k1 in the
    reward, or use k2 as a loss."""
    return torch.clamp(logp_BT - ref_logp_BT, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def k2_kl(logp_BT: torch.Tensor, ref_logp_BT: torch.Tensor) -> torch.Tensor:
    """k2 = ``0.5 (log pi - log ref)^2``: a biased estimate of KL(pi || ref) whose expected gradient as
    a loss, ``E_pi[(log pi - log ref) grad log pi]``, is exactly ``grad KL(pi || ref)``."""
    return 0.5 * k1_kl(logp_BT, ref_logp_BT).square()


def k3_kl(logp_BT: torch.Tensor, ref_logp_BT: torch.Tensor) -> torch.Tensor:
    """k3 = ``exp(d) - d - 1`` with ``d = log ref - log pi`` (>= 0): an unbiased, low-variance estimate
    of KL(pi || ref), but as a loss its expected gradient, ``E_pi[(1 - ref/pi) grad log pi] =
    -sum_x ref(x) grad log pi(x)``, is ``grad KL(ref || pi)``: the *reverse* KL (mass-covering), not the
    KL(pi || ref) it estimates. ``d`` and the value are clamped as verl does."""
    d_BT = torch.clamp(ref_logp_BT - logp_BT, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.clamp(torch.exp(d_BT) - d_BT - 1.0, -KL_VALUE_CLAMP, KL_VALUE_CLAMP)


KL_ESTIMATORS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "k1": k1_kl,
    "k2": k2_kl,
    "k3": k3_kl,
}


# ---- sampler / trainer mismatch ----------------------------------------------------------------------


def behaviour_weights(
    old_logp_BT: torch.Tensor,
    sampler_logp_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    mode: str,
    level: str = "token",
    cap: float = 2.0,
    band: tuple[float, float] = (0.5, 2.0),
    segments: Segments | None = None,
) -> torch.Tensor:
    """Per-token weights that correct for the sampler not being the trainer (detached).

    The behaviour policy of a rollout is the sampler (a KV-cached decode, maybe another engine or
    precision); the losses' ``old_logp`` is the trainer's forward of the same tokens. The ratio
    ``rho = pi_trainer / pi_sampler`` is taken per token (``token``), per episode as the product over
    its tokens (``sequence``) or as their geometric mean (``geometric``), as verl offers.

    Args:
        mode: ``none`` (all ones); ``truncate``: truncated importance sampling, ``min(rho, cap)``;
            ``mask``: masked importance sampling, 1 inside ``band`` and 0 outside (the token, or at
            sequence levels the whole episode, is dropped from the loss; the aggregation's
            denominators stay those of the whole step, so dropping never up-weights what is kept).
        segments: needed for the sequence levels.

    Returns:
        ``weight_BT`` (0 where ``mask_BT`` is 0).
    """
    valid_BT = mask_BT.bool()
    if mode == "none":
        return valid_BT.to(old_logp_BT.dtype)
    log_rho_BT = torch.where(valid_BT, old_logp_BT - sampler_logp_BT, 0.0)
    if level == "sequence":
        assert segments is not None
        log_rho_BT = segments.sum(log_rho_BT)
    elif level == "geometric":
        assert segments is not None
        log_rho_BT = segments.sum(log_rho_BT) / segments.sum(valid_BT.to(log_rho_BT.dtype)).clamp(min=1.0)
    elif level != "token":
        raise ValueError(f"unknown importance-sampling level {level!r}")
    rho_BT = torch.exp(torch.clamp(log_rho_BT, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    if mode == "truncate":
        weight_BT = torch.clamp(rho_BT, max=cap)
    elif mode == "mask":
        weight_BT = ((rho_BT >= band[0]) & (rho_BT <= band[1])).to(rho_BT.dtype)
    else:
        raise ValueError(f"unknown importance-sampling mode {mode!r}")
    return torch.where(valid_BT, weight_BT, 0.0).detach()


def mismatch_sums(old_logp_BT: torch.Tensor, sampler_logp_BT: torch.Tensor, mask_BT: torch.Tensor) -> dict[str, float]:
    """Sums over valid tokens of ``|old - sampler|`` and of the k3 estimate of KL(sampler || trainer)
    (tokens were drawn from the sampler: with ``rho = pi_trainer / pi_sampler``, ``rho - 1 - log rho``),
    and the max ``|old - sampler|``."""
    valid_BT = mask_BT.bool()
    delta_BT = torch.where(valid_BT, old_logp_BT - sampler_logp_BT, 0.0).double()
    kl_BT = torch.exp(delta_BT.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)) - 1.0 - delta_BT
    return {
        "abs_sum": float(delta_BT.abs().sum()),
        "abs_max": float(delta_BT.abs().max()) if delta_BT.numel() else 0.0,
        "kl_sum": float(torch.where(valid_BT, kl_BT, 0.0).sum()),
        "num": float(valid_BT.sum()),
    }


# ---- aggregation ---------------------------------------------------------------------------------------


def aggregation_counts(mask_lengths: list[int]) -> dict[str, int]:
    """What the aggregation weights depend on beyond each episode's own length: the loss tokens, the
    episodes with any, and all episodes. Summed over ranks, they give a data-parallel learner the
    weights of the whole step (sopgym/trainers/distributed.py)."""
    return {"valid": sum(mask_lengths), "nonempty": sum(1 for n in mask_lengths if n > 0), "episodes": len(mask_lengths)}


def aggregation_weights(
    mask_lengths: list[int], aggregation: str, fixed_length: int | None = None, counts: dict[str, int] | None = None
) -> list[float]:
    """Per-episode per-token weight so that ``sum(weight * loss * mask)`` over the step is its loss.

    Args:
        mask_lengths: number of loss tokens in each episode of the optimiser step (all micro-batches).
        aggregation: ``token`` (mean over all valid tokens), ``sequence`` (mean over episodes of each
            episode's token mean; episodes without valid tokens do not count) or ``fixed_length``
            (Dr. GRPO: each episode's token sum divided by ``fixed_length``, averaged over episodes).
        fixed_length: the constant of ``fixed_length``.
        counts: ``aggregation_counts`` of the whole step when ``mask_lengths`` is one rank's share of
            it (default: those of ``mask_lengths``).

    Raises:
        ValueError: an unknown aggregation, or ``fixed_length`` without a positive constant.
    """
    counts = counts if counts is not None else aggregation_counts(mask_lengths)
    if aggregation == "token":
        total = counts["valid"]
        return [1.0 / total if total else 0.0 for _ in mask_lengths]
    if aggregation == "sequence":
        num_seq = counts["nonempty"]
        return [1.0 / (n * num_seq) if n > 0 else 0.0 for n in mask_lengths]
    if aggregation == "fixed_length":
        if not fixed_length or fixed_length < 1:
            raise ValueError(f"aggregation 'fixed_length' needs a constant >= 1, got {fixed_length!r}")
        num_seq = counts["episodes"]
        return [1.0 / (num_seq * fixed_length) for _ in mask_lengths]
    raise ValueError(f"unknown aggregation {aggregation!r}")


AGGREGATIONS = ("token", "sequence", "fixed_length")


def policy_loss(
    name: str,
    logp_BT: torch.Tensor,
    old_logp_BT: torch.Tensor,
    adv_BT: torch.Tensor,
    weight_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    params: LossParams,
    ref_logp_BT: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    is_weight_BT: torch.Tensor | None = None,
    segments: Segments | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Weighted sum of the per-token loss (plus optional KL penalty) over valid tokens, and statistics.

    ``mask_BT`` is applied with ``torch.where`` so masked tokens get exactly zero gradient even when
    their per-token loss is not finite (e.g. padding). ``is_weight_BT`` (behaviour correction)
    multiplies the policy term, not the KL penalty.
    """
    valid_BT = mask_BT.bool()
    # Neutral values at masked positions: torch.where passes 0 * d(term) back to the unselected branch,
    # which is NaN if the term there is not finite, so masked inputs must be finite before the loss.
    old_logp_BT = torch.where(valid_BT, old_logp_BT, logp_BT.detach())
    adv_BT = torch.where(valid_BT, adv_BT, torch.zeros_like(adv_BT))
    weight_BT = torch.where(valid_BT, weight_BT, torch.zeros_like(weight_BT))
    if segments is not None:
        segments = segments.restricted(valid_BT)  # sequence sums run over the loss tokens only
    term_BT = LOSSES[name](logp_BT, old_logp_BT, adv_BT, params, segments=segments)
    if is_weight_BT is not None:
        term_BT = term_BT * torch.where(valid_BT, is_weight_BT, 0.0)
    kl_BT = None
    if ref_logp_BT is not None and kl_coef > 0:
        ref_logp_BT = torch.where(valid_BT, ref_logp_BT, logp_BT.detach())
        kl_BT = KL_ESTIMATORS[kl_estimator](logp_BT, ref_logp_BT)
        term_BT = term_BT + kl_coef * kl_BT
    loss = torch.where(valid_BT, term_BT * weight_BT, torch.zeros_like(term_BT)).sum()
    with torch.no_grad():
        num_valid = int(valid_BT.sum())
        ratio_BT = torch.exp(_log_ratio(logp_BT, old_logp_BT))
        clipped_BT = clip_active(name, ratio_BT, adv_BT, params)
        stats = {
            "num_valid": num_valid,
            "clip_sum": float((clipped_BT & valid_BT).sum()),
            "ratio_sum": float(torch.where(valid_BT, ratio_BT, 0.0).sum()),
            "kl_sum": float(torch.where(valid_BT, kl_BT, 0.0).sum()) if kl_BT is not None else 0.0,
        }
    return loss, stats
