"""Group advantage estimators: small pure functions in a registry.

Shape legend: G = members of one group (episodes of the same task, infrastructure failures already
removed), C = reward components.

Each estimator maps the rewards of one group ``rewards_G`` to advantages ``adv_G``; the trainer
broadcasts an episode's advantage to all of its policy tokens. ``outcome_G`` (the rewards without
their shaping) is passed when a group holds shaping; only ``grpo`` reads it (its std division).
"""

from __future__ import annotations

from collections.abc import Callable
from math import comb

import torch

EPS = 1e-6


def grpo(rewards_G: torch.Tensor, outcome_G: torch.Tensor | None = None, **_: object) -> torch.Tensor:
    """GRPO: ``(r - mean) / (std + eps)`` with the unbiased group std (0 for a single member).

    With ``outcome_G`` (each member's reward without its shaping, ``Episode.outcome``) the std is the
    outcomes', and a group whose outcomes are all equal is only centred (``r - mean``). Dividing by
    the std of the returns would blow a shaping penalty up to the scale of a task success: in a group
    of four failures where one reply was invalid (penalty 0.05) every advantage would be about +-1.5,
    the same as in a group with one success. This way the penalty keeps its own scale.
    """
    if rewards_G.numel() < 2:
        return torch.zeros_like(rewards_G)
    centred_G = rewards_G - rewards_G.mean()
    if outcome_G is None:
        return centred_G / (rewards_G.std(unbiased=True) + EPS)
    if zero_variance(outcome_G):
        return centred_G
    return centred_G / (outcome_G.std(unbiased=True) + EPS)


def dr_grpo(rewards_G: torch.Tensor, **_: object) -> torch.Tensor:
    """Dr. GRPO: ``r - mean``; no std division, which removes the difficulty bias of GRPO."""
    return rewards_G - rewards_G.mean()


def rloo(rewards_G: torch.Tensor, **_: object) -> torch.Tensor:
    """RLOO: ``r_i - mean_{j != i} r_j`` (a baseline independent of the sample itself)."""
    num_G = rewards_G.numel()
    if num_G < 2:
        return torch.zeros_like(rewards_G)
    others_mean_G = (rewards_G.sum() - rewards_G) / (num_G - 1)
    return rewards_G - others_mean_G


def _expected_max(sorted_values: list[float], k: int) -> float:
    """E[max of a uniformly random k-subset] of ``sorted_values`` (ascending), by order statistics."""
    n = len(sorted_values)
    if k <= 0:
        return float("-inf")
    total = comb(n, k)
    # The j-th smallest (0-based) is the max of C(j, k-1) of the subsets.
    return sum(v * comb(j, k - 1) for j, v in enumerate(sorted_values)) / total


def passk(rewards_G: torch.Tensor, k: int = 2, **_: object) -> torch.Tensor:
    """Pass@k-style group advantage.

    ``A_i = E[max reward of a random k-subset containing i] - E[max reward of a random k-subset]``,
    i.e. how much sample ``i`` raises the group's expected best-of-k. With binary rewards a correct
    sample gets ``1 - pass@k`` and an incorrect one gets ``pass@(k-1) of the others - pass@k`` (<= 0).
    k=1 reduces to ``r - mean``.
    """
    values = [float(v) for v in rewards_G.tolist()]
    num_G = len(values)
    k = min(k, num_G)
    if num_G < 2:
        return torch.zeros_like(rewards_G)
    baseline = _expected_max(sorted(values), k)
    out = []
    for i, r_i in enumerate(values):
        others = sorted(values[:i] + values[i + 1 :])
        if k == 1:
            with_i = r_i
        else:
            m = len(others)
            total = comb(m, k - 1)
            with_i = sum(max(r_i, v) * comb(j, k - 2) for j, v in enumerate(others)) / total
        out.append(with_i - baseline)
    return torch.tensor(out, dtype=rewards_G.dtype)


ADVANTAGES: dict[str, Callable[..., torch.Tensor]] = {
    "grpo": grpo,
    "dr_grpo": dr_grpo,
    "rloo": rloo,
    "passk": passk,
}


def normalise_components(components_GC: torch.Tensor) -> torch.Tensor:
    """Per-component group normalisation, summed: ``sum_c (x_c - mean_c) / (std_c + eps)``.

    Used (``algo.component_norm``) so that a component with a large scale does not drown the others.
    """
    if components_GC.shape[0] < 2:
        return torch.zeros(components_GC.shape[0], dtype=components_GC.dtype)
    centred_GC = components_GC - components_GC.mean(0, keepdim=True)
    return (centred_GC / (components_GC.std(0, unbiased=True, keepdim=True) + EPS)).sum(1)


def zero_variance(values_G: torch.Tensor) -> bool:
    """True when all members of a group have the same value (no learning signal under a group baseline)."""
    return values_G.numel() < 2 or bool((values_G.max() - values_G.min()).abs() <= 1e-12)
