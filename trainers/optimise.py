"""One optimiser step over a set of episodes: pack, micro-batch, accumulate exactly, clip, step.

Shape legend: B = rows of a micro-batch, T = tokens per row.

Gradient accumulation is exact: aggregation weights are computed over all episodes of the optimiser
step before packing (losses.aggregation_weights), so the sum over micro-batches of
``sum(weight * loss)`` equals the one-big-batch loss, whatever the packing or micro-batch split.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from . import attention, packing
from .episodes import Episode
from .losses import LossParams, aggregation_weights, policy_loss
from .modeling import token_logprobs


class NonFiniteLossError(FloatingPointError):
    """A loss or gradient norm was NaN/inf; raised before the optimiser step touches the weights."""


@dataclass
class StepSettings:
    loss: str = "ppo_clip"
    aggregation: str = "token"
    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = 0.0
    temperature: float = 1.0
    row_tokens: int = 2048
    rows_per_micro_batch: int = 4
    grad_clip: float = 1.0
    packed: bool = True
    """False packs one episode per row (the padded baseline, for benchmarks and equivalence tests)."""
    context_loss_weight: float = 0.0
    """SFT only: weight of a next-token loss on the non-policy tokens (prompt, tool results), each part
    averaged over its own global token count. Never used by the RL losses."""


def to_sequences(episodes: list[Episode], aggregation: str, context_loss_weight: float = 0.0) -> list[packing.Sequence]:
    """Per-token fields of each episode, with the aggregation weight of the whole set.

    With ``context_loss_weight`` > 0 a ``ctx`` field weights the non-policy targets (token 1 onwards)
    by ``context_loss_weight / (their count over all episodes)``.
    """
    weights = aggregation_weights([sum(ep.loss_mask[1:]) for ep in episodes], aggregation)
    seqs = [
        packing.Sequence(
            ids=ep.ids,
            fields={
                "mask": [float(m) for m in ep.loss_mask],
                "old_logp": ep.old_logp,
                "adv": [ep.advantage] * len(ep.ids),
                "weight": [w] * len(ep.ids),
            },
        )
        for ep, w in zip(episodes, weights)
    ]
    if context_loss_weight > 0:
        num_ctx = sum(len(ep.loss_mask) - 1 - sum(ep.loss_mask[1:]) for ep in episodes)
        w_ctx = context_loss_weight / max(1, num_ctx)
        for seq, ep in zip(seqs, episodes):
            seq.fields["ctx"] = [0.0] + [w_ctx * (1 - m) for m in ep.loss_mask[1:]]
    return seqs


def accumulate_gradients(
    model, ref_model, episodes: list[Episode], s: StepSettings, backend: str, loss_name: str | None = None
) -> dict[str, float]:
    """Forward/backward over all micro-batches (gradients accumulate in ``.grad``); returns statistics.

    ``loss_name="sft"`` uses the negative log-likelihood of the masked tokens instead of a policy loss.
    """
    device = next(model.parameters()).device
    sft = (loss_name or s.loss) == "sft"
    seqs = to_sequences(episodes, s.aggregation, s.context_loss_weight if sft else 0.0)
    lengths = [len(q.ids) for q in seqs]
    rows = packing.first_fit_decreasing(lengths, s.row_tokens) if s.packed else packing.one_per_row(lengths)
    params = LossParams(s.clip_low, s.clip_high)
    totals = {"loss": 0.0, "num_valid": 0, "clip_sum": 0.0, "ratio_sum": 0.0, "kl_sum": 0.0, "entropy_sum": 0.0}
    num_positions = 0
    for micro_rows in packing.split_rows(rows, s.rows_per_micro_batch):
        batch = packing.collate(seqs, micro_rows)
        num_positions += attention.computed_positions(batch, backend)
        policy_BT = batch.fields_BT["mask"] > 0
        select_BT = policy_BT  # the output head runs on policy tokens only (and SFT context targets)
        if "ctx" in batch.fields_BT:
            select_BT = policy_BT | (batch.fields_BT["ctx"] > 0)
        logp_BT, entropy_BT = token_logprobs(
            model, batch, backend, s.temperature, with_entropy=True, select_BT=select_BT, entropy_select_BT=policy_BT
        )
        f = {k: v.to(device=device, dtype=logp_BT.dtype) for k, v in batch.fields_BT.items()}
        mask_BT = f["mask"]
        if sft:
            valid_BT = mask_BT.bool()
            loss = -torch.where(valid_BT, logp_BT * f["weight"], torch.zeros_like(logp_BT)).sum()
            if "ctx" in f:
                loss = loss - (logp_BT * f["ctx"]).sum()
            stats = {"num_valid": int(valid_BT.sum()), "clip_sum": 0.0, "ratio_sum": 0.0, "kl_sum": 0.0}
        else:
            ref_logp_BT = None
            if ref_model is not None and s.kl_coef > 0:
                with torch.no_grad():
                    ref_logp_BT, _ = token_logprobs(ref_model, batch, backend, s.temperature, select_BT=select_BT)
            loss, stats = policy_loss(
                s.loss, logp_BT, f["old_logp"], f["adv"], f["weight"], mask_BT, params, ref_logp_BT, s.kl_coef
            )
        if not torch.isfinite(loss):
            raise NonFiniteLossError(f"non-finite loss {float(loss)}")
        loss.backward()
        totals["loss"] += float(loss.detach())
        for k in ("num_valid", "clip_sum", "ratio_sum", "kl_sum"):
            totals[k] += stats[k]
        totals["entropy_sum"] += float(torch.where(mask_BT.bool(), entropy_BT, 0.0).sum())
    n = max(1, totals["num_valid"])
    return {
        "loss": totals["loss"],
        "clip_fraction": totals["clip_sum"] / n,
        "ratio_mean": totals["ratio_sum"] / n,
        "kl": totals["kl_sum"] / n,
        "entropy": totals["entropy_sum"] / n,
        "num_valid_tokens": totals["num_valid"],
        "num_tokens": sum(lengths),
        "packing_efficiency": sum(lengths) / max(1, num_positions),
    }


def optimiser_step(model, ref_model, optimizer, scheduler, episodes, s: StepSettings, backend: str, loss_name=None):
    """zero_grad, accumulate, clip, check finiteness, step. Returns statistics incl. grad norm and lr."""
    t0 = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    stats = accumulate_gradients(model, ref_model, episodes, s, backend, loss_name)
    params = [p for p in model.parameters() if p.requires_grad]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, s.grad_clip if s.grad_clip > 0 else math.inf)
    if not torch.isfinite(grad_norm):
        optimizer.zero_grad(set_to_none=True)
        raise NonFiniteLossError(f"non-finite gradient norm {float(grad_norm)}")
    stats["lr"] = optimizer.param_groups[0]["lr"]
    optimizer.step()
    scheduler.step()
    stats["grad_norm"] = float(grad_norm)
    stats["seconds"] = time.perf_counter() - t0
    stats["tokens_per_s"] = stats["num_tokens"] / max(stats["seconds"], 1e-9)
    return stats
