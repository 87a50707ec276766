"""One optimiser step over a set of episodes: pack, micro-batch, accumulate exactly, clip, step.

Shape legend: B = rows of a micro-batch, T = tokens per row.

Gradient accumulation is exact: aggregation weights are computed over all episodes of the optimiser
step before packing (losses.aggregation_weights), so the sum over micro-batches of
``sum(weight * loss)`` equals the one-big-batch loss, whatever the packing or micro-batch split.
The same holds over ranks of a data-parallel learner (``dp``, sopgym/trainers/distributed.py): each rank
gets a share of the step's episodes, the weights use counts summed over ranks, FSDP sums the ranks'
gradients, and every rank runs as many micro-batches as the busiest one (idle passes otherwise).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from . import attention, packing
from .config import OptimConfig, SFTConfig, TrainConfig
from .distributed import DataParallel, idle_batch, split_by_tokens
from .episodes import Episode
from .losses import (
    LossParams,
    Segments,
    aggregation_counts,
    aggregation_weights,
    behaviour_weights,
    mismatch_sums,
    policy_loss,
)
from .modeling import token_logprobs

ONE_PROCESS = DataParallel()


class NonFiniteLossError(FloatingPointError):
    """A loss or gradient norm was NaN/inf; raised before the optimiser step touches the weights."""


@dataclass
class StepSettings:
    """What one optimiser step needs; built from the config by ``config.step_settings`` (one place)."""

    loss: str = "ppo_clip"
    aggregation: str = "token"
    aggregation_length: int | None = None
    """The constant of ``fixed_length`` aggregation (Dr. GRPO)."""
    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    temperature: float = 1.0
    row_tokens: int = 2048
    rows_per_micro_batch: int = 4
    grad_clip: float = 1.0
    packed: bool = True
    """False packs one episode per row (the padded baseline, for benchmarks and equivalence tests)."""
    context_loss_weight: float = 0.0
    """SFT only: weight of a next-token loss on the non-policy tokens (prompt, tool results), each part
    averaged over its own global token count. Never used by the RL losses."""
    behaviour_logp: str = "trainer"
    """Where the losses' ``old_logp`` come from: ``trainer`` (the training forward of the sampled
    tokens before any update) or ``sampler`` (the log-probs recorded while sampling)."""
    old_logp_from_forward: bool = False
    """Set by ``rl_update`` for a single on-policy update with ``behaviour_logp="trainer"``: the update's
    own forward is the trainer's pre-update forward, so ``old_logp`` is its detached output (no second pass)."""
    is_mode: str = "none"
    """Behaviour correction for the sampler/trainer mismatch: ``none``, ``truncate`` (TIS) or ``mask`` (MIS)."""
    is_level: str = "token"
    is_cap: float = 2.0
    is_band: tuple[float, float] = (0.5, 2.0)


@dataclass(frozen=True)
class AdamWSettings:
    """AdamW's hyper-parameters, from ``optim`` (RL) or ``sft`` (SFT): ``build_optimizer``'s input."""

    lr: float
    betas: tuple[float, float]
    weight_decay: float

    @classmethod
    def from_config(cls, section: OptimConfig | SFTConfig) -> AdamWSettings:
        """From a section with ``lr``, ``beta1``, ``beta2`` and ``weight_decay`` (``optim`` or ``sft``)."""
        return cls(float(section.lr), (float(section.beta1), float(section.beta2)), float(section.weight_decay))


class WarmUp:
    """Linear learning-rate warm-up over ``steps`` optimiser steps, then constant (RL's schedule; picklable)."""

    def __init__(self, steps: int):
        self.steps = steps

    def __call__(self, s: int) -> float:
        return min(1.0, (s + 1) / self.steps) if self.steps else 1.0


class WarmUpDecay:
    """SFT's schedule: linear warm-up over ``warmup_steps``, times a linear decay to 20% of the peak over
    ``total`` steps (decaying to zero wasted the second half of short CPU runs)."""

    def __init__(self, warmup_steps: int, total: int):
        self.warmup_steps, self.total = warmup_steps, total

    def __call__(self, s: int) -> float:
        return min(1.0, (s + 1) / max(1, self.warmup_steps)) * (1.0 - 0.8 * s / max(1, self.total))


def build_optimizer(
    model: torch.nn.Module, hp: AdamWSettings, schedule: Callable[[int], float]
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """The one optimiser builder (SFT, RL, and RL's resume): AdamW over ``model``'s parameters with
    ``hp``, and ``schedule`` (a multiplier of ``hp.lr`` per step) as its learning-rate schedule."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=hp.lr, betas=hp.betas, weight_decay=hp.weight_decay)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)


def apply_settings(optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LambdaLR, hp: AdamWSettings) -> None:
    """``hp`` over a restored optimiser's and schedule's (``build_optimizer``'s, after loading a checkpoint):
    a saved optimiser holds the learning rate, betas and weight decay it was made with, so a resume
    allowed to change ``optim.lr`` (``allow_config_change``) would otherwise go on at the old one."""
    scheduler.base_lrs = [hp.lr for _ in optimizer.param_groups]
    for group, lr_lambda in zip(optimizer.param_groups, scheduler.lr_lambdas):
        group.update(initial_lr=hp.lr, lr=hp.lr * lr_lambda(scheduler.last_epoch), betas=hp.betas, weight_decay=hp.weight_decay)


def step_settings(cfg: TrainConfig) -> StepSettings:
    """The RL optimiser step's settings, from the config: the one place they are mapped."""
    a = cfg.algo
    return StepSettings(
        loss=a.loss, aggregation=a.aggregation,
        aggregation_length=a.aggregation_length or cfg.env.max_turns * cfg.rollout.max_new_tokens,
        clip_low=a.clip_low, clip_high=a.clip_high, kl_coef=a.kl_coef, kl_estimator=a.kl_estimator,
        temperature=cfg.rollout.temperature, row_tokens=cfg.optim.row_tokens,
        rows_per_micro_batch=cfg.optim.rows_per_micro_batch, grad_clip=cfg.optim.grad_clip,
        behaviour_logp=a.behaviour_logp, is_mode=a.is_correction, is_level=a.is_level, is_cap=a.is_cap,
        is_band=(a.is_low, a.is_high),
    )


def sft_settings(cfg: TrainConfig) -> StepSettings:
    """The SFT step's settings: token-mean NLL at temperature 1, packed like RL."""
    return dataclasses.replace(
        step_settings(cfg), loss="sft", temperature=1.0, aggregation="token", context_loss_weight=cfg.sft.context_loss_weight
    )


def to_sequences(
    episodes: list[Episode], aggregation: str, context_loss_weight: float = 0.0, aggregation_length: int | None = None,
    counts: dict[str, int] | None = None,
) -> list[packing.Sequence]:
    """Per-token fields of each episode, with the aggregation weight of the whole set.

    With ``context_loss_weight`` > 0 a ``ctx`` field weights the non-policy targets (token 1 onwards)
    by ``context_loss_weight / (their count over all episodes)``.

    Args:
        counts: ``step_counts`` of the whole optimiser step when ``episodes`` is one rank's share of
            it (default: those of ``episodes``).
    """
    counts = counts if counts is not None else step_counts(episodes)
    weights = aggregation_weights([sum(ep.loss_mask[1:]) for ep in episodes], aggregation, aggregation_length, counts)
    seqs = [
        packing.Sequence(
            ids=ep.ids,
            fields={
                "mask": [float(m) for m in ep.loss_mask],
                "old_logp": ep.old_logp,
                "sampler_logp": ep.sampler_logp if len(ep.sampler_logp) == len(ep.ids) else ep.old_logp,
                "adv": [ep.advantage] * len(ep.ids),
                "weight": [w] * len(ep.ids),
            },
        )
        for ep, w in zip(episodes, weights)
    ]
    if context_loss_weight > 0:
        w_ctx = context_loss_weight / max(1, counts["ctx"])
        for seq, ep in zip(seqs, episodes):
            seq.fields["ctx"] = [0.0] + [w_ctx * (1 - m) for m in ep.loss_mask[1:]]
    return seqs


def step_counts(episodes: list[Episode]) -> dict[str, int]:
    """The counts the loss weights depend on (``losses.aggregation_counts``, and ``ctx``: the
    non-policy targets of SFT's context loss)."""
    counts = aggregation_counts([sum(ep.loss_mask[1:]) for ep in episodes])
    counts["ctx"] = sum(len(ep.loss_mask) - 1 - sum(ep.loss_mask[1:]) for ep in episodes)
    return counts


def scatter_episodes(groups: list[list[Episode]] | None, s: StepSettings, dp: DataParallel) -> list[list[Episode]]:
    """Each group (an optimiser step's episodes, read on rank 0) split over the ranks by tokens
    (``distributed.split_by_tokens``): this rank's share of every group. One process: the groups as they are."""
    if not dp.enabled:
        assert groups is not None, "one process is rank 0, which reads the groups"
        return groups
    per_rank: list[list[list[Episode]]] | None = None
    if dp.is_main:
        assert groups is not None, "rank 0 reads the groups"
        per_rank = [[[] for _ in groups] for _ in range(dp.world_size)]
        for g, group in enumerate(groups):
            shares = split_by_tokens([len(ep.ids) for ep in group], dp.world_size, s.row_tokens, s.packed)
            for k, idx in enumerate(shares):
                per_rank[k][g] = [group[i] for i in idx]
    return dp.scatter(per_rank)


def _micro_batches(
    seqs: list[packing.Sequence], s: StepSettings, dp: DataParallel, model, ref_model, backend: str, backward: bool
) -> Iterator[packing.PackedBatch]:
    """This rank's micro-batches, collated. Data-parallel, every rank runs as many as the rank with the
    most; a rank out of micro-batches runs an idle pass in place of each missing one."""
    micro = packing.split_rows(_rows(seqs, s), s.rows_per_micro_batch) if seqs else []
    for j in range(dp.max_int(len(micro))):
        if j < len(micro):
            yield packing.collate(seqs, micro[j])
        else:
            _idle_pass(model, ref_model, s, backend, backward=backward)


def _idle_pass(model, ref_model, s: StepSettings, backend: str, backward: bool) -> None:
    """What a rank with no micro-batch left runs so that FSDP's collectives line up with the others':
    the same modules in the same order (policy forward, reference forward, backward) on a two-token
    batch, with a loss multiplied by zero (every gradient it adds is exactly 0)."""
    batch = idle_batch()
    select_BT = torch.ones_like(batch.target_ids_BT, dtype=torch.bool)
    with torch.set_grad_enabled(backward):
        logp_BT, _ = token_logprobs(model, batch, backend, s.temperature, with_entropy=backward, select_BT=select_BT)
    if backward and ref_model is not None and s.kl_coef > 0:
        with torch.no_grad():
            token_logprobs(ref_model, batch, backend, s.temperature, select_BT=select_BT)
    if backward:
        (logp_BT.sum() * 0.0).backward()


def _rows(seqs: list[packing.Sequence], s: StepSettings) -> list[list[int]]:
    lengths = [len(q.ids) for q in seqs]
    return packing.first_fit_decreasing(lengths, s.row_tokens) if s.packed else packing.one_per_row(lengths)


def _add(totals: dict[str, float], stats: dict[str, float]) -> None:
    for k, v in stats.items():
        totals[k] = max(totals.get(k, 0.0), v) if k.endswith("_max") else totals.get(k, 0.0) + v


def mismatch_metrics(sums: dict[str, float]) -> dict[str, float]:
    """``mismatch/*`` metrics from summed ``losses.mismatch_sums``: how far the sampler's log-probs are
    from the trainer's forward of the same tokens."""
    n = max(1.0, sums.get("mismatch_num", 0.0))
    return {
        "mismatch/logp_abs_diff_mean": sums.get("mismatch_abs_sum", 0.0) / n,
        "mismatch/logp_abs_diff_max": sums.get("mismatch_abs_max", 0.0),
        "mismatch/kl_sampler_trainer": sums.get("mismatch_kl_sum", 0.0) / n,
    }


@torch.no_grad()
def recompute_behaviour_logprobs(
    model, episodes: list[Episode], s: StepSettings, backend: str, write: bool = True, dp: DataParallel = ONE_PROCESS
) -> dict[str, float]:
    """The training forward (packed, same attention path, train mode) of every episode's sampled tokens
    before any update: writes them to ``ep.old_logp`` when ``write`` (``ep.sampler_logp`` keeps the
    sampler's), and returns the mismatch sums against the sampler's (see ``mismatch_metrics``), summed
    over ranks (each rank passes its own episodes)."""
    device = next(model.parameters()).device
    seqs = to_sequences(episodes, "token")
    model.train()
    totals: dict[str, float] = {}
    for batch in _micro_batches(seqs, s, dp, model, None, backend, backward=False):
        mask_BT = batch.fields_BT["mask"] > 0
        logp_BT, _ = token_logprobs(model, batch, backend, s.temperature, select_BT=mask_BT)
        sampler_BT = batch.fields_BT["sampler_logp"].to(device=device, dtype=logp_BT.dtype)
        _add(totals, {f"mismatch_{k}": v for k, v in mismatch_sums(logp_BT, sampler_BT, mask_BT.to(device)).items()})
        if not write:
            continue
        logp_BT = logp_BT.double().cpu()
        for b, (row, lens) in enumerate(zip(batch.seq_index, batch.seq_lens)):
            start = 0
            for i, n in zip(row, lens):
                ep = episodes[i]
                # position start + j holds the log-prob of token j + 1 of the episode
                values = logp_BT[b, start : start + n - 1].tolist()
                ep.old_logp = [ep.old_logp[0]] + [v if policy else old for v, policy, old in zip(values, ep.loss_mask[1:], ep.old_logp[1:])]
                start += n
    return dp.reduce_stats(totals)


def accumulate_gradients(
    model, ref_model, episodes: list[Episode], s: StepSettings, backend: str, loss_name: str | None = None,
    dp: DataParallel = ONE_PROCESS,
) -> dict[str, float]:
    """Forward/backward over all micro-batches (gradients accumulate in ``.grad``); returns statistics.

    ``loss_name="sft"`` uses the negative log-likelihood of the masked tokens instead of a policy loss.
    The ``mismatch_*`` sums compare this forward (before the step's update) with the sampler's log-probs.
    Data-parallel (``dp``), ``episodes`` is this rank's share of the step: the loss weights and the
    statistics are those of the whole step (counts and sums over ranks); ``rank_num_tokens`` is this rank's.
    """
    device = next(model.parameters()).device
    sft = (loss_name or s.loss) == "sft"
    counts = dp.sum_counts(step_counts(episodes))
    seqs = to_sequences(episodes, s.aggregation, s.context_loss_weight if sft else 0.0, s.aggregation_length, counts)
    lengths = [len(q.ids) for q in seqs]
    params = LossParams(s.clip_low, s.clip_high)
    totals: dict[str, float] = {"loss": 0.0, "num_valid": 0, "clip_sum": 0.0, "ratio_sum": 0.0, "kl_sum": 0.0, "entropy_sum": 0.0}
    num_positions = 0
    for batch in _micro_batches(seqs, s, dp, model, ref_model, backend, backward=True):
        num_positions += attention.computed_positions(batch, backend)
        policy_BT = batch.fields_BT["mask"] > 0
        select_BT = policy_BT  # the output head runs on policy tokens only (and SFT context targets)
        if "ctx" in batch.fields_BT:
            select_BT = policy_BT | (batch.fields_BT["ctx"] > 0)
        logp_BT, entropy_BT = token_logprobs(
            model, batch, backend, s.temperature, with_entropy=True, select_BT=select_BT, entropy_select_BT=policy_BT
        )
        assert entropy_BT is not None  # with_entropy
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
            old_logp_BT = torch.where(mask_BT.bool(), logp_BT.detach(), 0.0) if s.old_logp_from_forward else f["old_logp"]
            segments = Segments(batch.segment_ids_BT.to(device))
            is_weight_BT = behaviour_weights(
                old_logp_BT, f["sampler_logp"], mask_BT, s.is_mode, s.is_level, s.is_cap, s.is_band, segments
            ) if s.is_mode != "none" else None
            loss, stats = policy_loss(
                s.loss, logp_BT, old_logp_BT, f["adv"], f["weight"], mask_BT, params, ref_logp_BT, s.kl_coef,
                s.kl_estimator, is_weight_BT, segments,
            )
            if is_weight_BT is not None:
                stats["is_weight_sum"] = float(torch.where(mask_BT.bool(), is_weight_BT, 0.0).sum())
                stats["is_changed_sum"] = float((mask_BT.bool() & (is_weight_BT != 1.0)).sum())
            with torch.no_grad():
                stats.update({f"mismatch_{k}": v for k, v in mismatch_sums(logp_BT.detach(), f["sampler_logp"], mask_BT).items()})
        if not torch.isfinite(loss):
            raise NonFiniteLossError(f"non-finite loss {float(loss)}")
        loss.backward()
        totals["loss"] += float(loss.detach())
        _add(totals, stats)
        totals["entropy_sum"] += float(torch.where(mask_BT.bool(), entropy_BT, 0.0).sum())
    totals["num_tokens"], totals["num_positions"] = sum(lengths), num_positions
    totals = dp.reduce_stats(totals)
    n = max(1, totals["num_valid"])
    out = {
        "loss": totals["loss"],
        "clip_fraction": totals["clip_sum"] / n,
        "ratio_mean": totals["ratio_sum"] / n,
        "kl": totals["kl_sum"] / n,
        "entropy": totals["entropy_sum"] / n,
        "num_valid_tokens": totals["num_valid"],
        "num_tokens": totals["num_tokens"],
        "rank_num_tokens": sum(lengths),
        "packing_efficiency": totals["num_tokens"] / max(1, totals["num_positions"]),
        **{k: v for k, v in totals.items() if k.startswith("mismatch_")},
    }
    if "is_weight_sum" in totals:
        out["is_weight_mean"] = totals["is_weight_sum"] / n
        out["is_changed_fraction"] = totals["is_changed_sum"] / n
    return out


def optimiser_step(
    model, ref_model, optimizer, scheduler, episodes, s: StepSettings, backend: str, loss_name=None,
    dp: DataParallel = ONE_PROCESS,
):
    """zero_grad, accumulate, clip, check finiteness, step. Returns statistics incl. grad norm and lr.

    Data-parallel (``dp``), ``episodes`` is this rank's share of the step (``scatter_episodes``); the
    gradient norm is that of the whole, gathered over the shards. ``tokens_per_s`` counts the whole
    step's tokens, ``rank_tokens_per_s`` this rank's.
    """
    t0 = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    stats = accumulate_gradients(model, ref_model, episodes, s, backend, loss_name, dp)
    params = [p for p in model.parameters() if p.requires_grad]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, s.grad_clip if s.grad_clip > 0 else math.inf)
    if hasattr(grad_norm, "full_tensor"):  # a DTensor: the norm over FSDP shards
        grad_norm = grad_norm.full_tensor()
    if not torch.isfinite(grad_norm):
        optimizer.zero_grad(set_to_none=True)
        raise NonFiniteLossError(f"non-finite gradient norm {float(grad_norm)}")
    stats["lr"] = optimizer.param_groups[0]["lr"]
    optimizer.step()
    scheduler.step()
    stats["grad_norm"] = float(grad_norm)
    stats["seconds"] = time.perf_counter() - t0
    stats["tokens_per_s"] = stats["num_tokens"] / max(stats["seconds"], 1e-9)
    stats["rank_tokens_per_s"] = stats["rank_num_tokens"] / max(stats["seconds"], 1e-9)
    return stats


def rl_update(
    model, ref_model, optimizer, scheduler, episodes: list[Episode] | None, s: StepSettings, backend: str,
    ppo_epochs: int = 1, num_minibatches: int = 1, dp: DataParallel = ONE_PROCESS,
) -> tuple[list[dict[str, float]], dict[str, float]]:
    """The optimisation of one RL step: ``ppo_epochs x num_minibatches`` optimiser steps.

    Behaviour log-probs: with one update per step, its own forward is the trainer's pre-update
    forward (so ``old_logp`` is that forward, detached, and the first ratio is exactly 1). With more,
    a separate no-grad forward of every episode runs first (``recompute_behaviour_logprobs``). Either
    way the sampler/trainer mismatch of the step is measured on that pre-update forward.

    Args:
        episodes: the step's episodes (read on rank 0 only when data-parallel: each minibatch is
            split over the ranks by tokens once, and every epoch reuses the split).

    Returns:
        The statistics of each optimiser step, and the step's ``mismatch/*`` metrics.
    """
    minibatches = None
    if dp.is_main:
        assert episodes is not None, "rank 0 holds the step's episodes"
        chunk = (len(episodes) + num_minibatches - 1) // num_minibatches
        minibatches = [episodes[mb : mb + chunk] for mb in range(0, len(episodes), chunk)]
    minibatches = scatter_episodes(minibatches, s, dp)
    single = ppo_epochs == 1 and num_minibatches == 1
    if single:
        s = dataclasses.replace(s, old_logp_from_forward=s.behaviour_logp == "trainer")
        mismatch: dict[str, float] = {}
    else:
        mine = [ep for mb in minibatches for ep in mb]
        mismatch = recompute_behaviour_logprobs(model, mine, s, backend, write=s.behaviour_logp == "trainer", dp=dp)
    model.train()
    stats = []
    for _ in range(ppo_epochs):
        for mb in minibatches:
            stats.append(optimiser_step(model, ref_model, optimizer, scheduler, mb, s, backend, dp=dp))
    if single:
        mismatch = {k: v for k, v in stats[0].items() if k.startswith("mismatch_")}
    return stats, mismatch_metrics(mismatch)
