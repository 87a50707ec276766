"""Policy-gradient losses: small pure functions in a registry, plus aggregation weights.

Shape legend: B = packed rows, T = tokens per row (any shape works: all functions are elementwise).

Each loss maps per-token ``logp`` (current policy, with grad), ``old_logp`` (behaviour log-probs
recorded at sampling time) and ``adv`` (the episode's advantage on each of its tokens) to a per-token
loss. Aggregation is a per-token weight computed once per optimiser step over the *global* batch
(``token``: ``1 / num_valid_tokens``; ``sequence``: ``1 / (len(episode) * num_episodes)``), so that
summing ``weight * loss`` over any split into micro-batches gives exactly the one-big-batch gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LossParams:
    clip_low: float = 0.2
    clip_high: float = 0.2


def ppo_clip(logp_BT, old_logp_BT, adv_BT, p: LossParams) -> torch.Tensor:
    """PPO-clip: ``-min(r A, clip(r, 1-eps_low, 1+eps_high) A)`` with ``r = exp(logp - old_logp)``."""
    ratio_BT = torch.exp(logp_BT - old_logp_BT)
    clipped_BT = torch.clamp(ratio_BT, 1.0 - p.clip_low, 1.0 + p.clip_high)
    return -torch.minimum(ratio_BT * adv_BT, clipped_BT * adv_BT)


def cispo(logp_BT, old_logp_BT, adv_BT, p: LossParams) -> torch.Tensor:
    """CISPO: ``-sg(clip(r, 1-eps_low, 1+eps_high)) A logp``: every token keeps a gradient, the IS weight is clipped."""
    ratio_BT = torch.exp(logp_BT - old_logp_BT).detach()
    weight_BT = torch.clamp(ratio_BT, 1.0 - p.clip_low, 1.0 + p.clip_high)
    return -weight_BT * adv_BT * logp_BT


def is_reinforce(logp_BT, old_logp_BT, adv_BT, p: LossParams) -> torch.Tensor:
    """Importance-sampled REINFORCE: ``-r A`` (gradient ``-r A grad logp``), unclipped."""
    return -torch.exp(logp_BT - old_logp_BT) * adv_BT


LOSSES: dict[str, Callable[..., torch.Tensor]] = {
    "ppo_clip": ppo_clip,
    "cispo": cispo,
    "is_reinforce": is_reinforce,
}


def k3_kl(logp_BT: torch.Tensor, ref_logp_BT: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(policy || reference): ``exp(d) - d - 1`` with ``d = ref - logp`` (>= 0)."""
    d_BT = ref_logp_BT - logp_BT
    return torch.exp(d_BT) - d_BT - 1.0


def aggregation_weights(mask_lengths: list[int], aggregation: str) -> list[float]:
    """Per-episode per-token weight so that ``sum(weight * loss * mask)`` is the global mean.

    Args:
        mask_lengths: number of loss tokens in each episode of the optimiser step (all micro-batches).
        aggregation: ``token`` (mean over all valid tokens) or ``sequence`` (mean over episodes of
            each episode's token mean; episodes without valid tokens do not count).
    """
    if aggregation == "token":
        total = sum(mask_lengths)
        return [1.0 / total if total else 0.0 for _ in mask_lengths]
    if aggregation == "sequence":
        num_seq = sum(1 for n in mask_lengths if n > 0)
        return [1.0 / (n * num_seq) if n > 0 else 0.0 for n in mask_lengths]
    raise ValueError(f"unknown aggregation {aggregation!r}")


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
) -> tuple[torch.Tensor, dict[str, float]]:
    """Weighted sum of the per-token loss (plus optional KL penalty) over valid tokens, and statistics.

    ``mask_BT`` is applied with ``torch.where`` so masked tokens get exactly zero gradient even when
    their per-token loss is not finite (e.g. padding).
    """
    valid_BT = mask_BT.bool()
    # Neutral values at masked positions: torch.where passes 0 * d(term) back to the unselected branch,
    # which is NaN if the term there is not finite, so masked inputs must be finite before the loss.
    old_logp_BT = torch.where(valid_BT, old_logp_BT, logp_BT.detach())
    adv_BT = torch.where(valid_BT, adv_BT, torch.zeros_like(adv_BT))
    weight_BT = torch.where(valid_BT, weight_BT, torch.zeros_like(weight_BT))
    term_BT = LOSSES[name](logp_BT, old_logp_BT, adv_BT, params)
    kl_BT = None
    if ref_logp_BT is not None and kl_coef > 0:
        ref_logp_BT = torch.where(valid_BT, ref_logp_BT, logp_BT.detach())
        kl_BT = k3_kl(logp_BT, ref_logp_BT)
        term_BT = term_BT + kl_coef * kl_BT
    loss = torch.where(valid_BT, term_BT * weight_BT, torch.zeros_like(term_BT)).sum()
    with torch.no_grad():
        num_valid = int(valid_BT.sum())
        ratio_BT = torch.exp(logp_BT - old_logp_BT)
        outside_BT = (ratio_BT < 1.0 - params.clip_low) | (ratio_BT > 1.0 + params.clip_high)
        stats = {
            "num_valid": num_valid,
            "clip_sum": float((outside_BT & valid_BT).sum()),
            "ratio_sum": float(torch.where(valid_BT, ratio_BT, 0.0).sum()),
            "kl_sum": float(torch.where(valid_BT, kl_BT, 0.0).sum()) if kl_BT is not None else 0.0,
        }
    return loss, stats
