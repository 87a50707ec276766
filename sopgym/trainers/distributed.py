"""Data parallelism for the learner: torchrun processes, FSDP2-sharded parameters, episodes split by tokens.

One process (the default) needs none of this: ``DataParallel()`` answers every collective with its own
input, and the loop runs exactly as before. Under ``torchrun --nproc-per-node N`` (``WORLD_SIZE`` > 1)
``DataParallel.from_environment`` joins the process group (NCCL on CUDA, gloo on CPU) and:

* **Rank 0 owns everything outside the optimiser step**: the envs, the rollout engine (which samples
  with its own full copy of the weights, updated after every step), evaluation, MLflow and the
  checkpoint's metadata. Every rank seeds identically, so rank 0 draws the same episodes as a
  one-process run would.
* **Episodes are split by tokens, not counts.** Rank 0 packs an optimiser step's episodes into rows
  exactly as one process would (``split_by_tokens``), hands whole rows to ranks, heaviest first to the
  rank with the fewest tokens, and scatters them. Each rank packs its share again for its micro-batches.
* **The gradient is the one-process gradient.** The loss weights that depend on the whole step (the
  token count of ``token`` aggregation, the episode counts of the others) are computed from counts
  summed over ranks (``sum_counts``), and FSDP sums gradients over ranks instead of averaging them,
  so the summed per-rank losses are the one-process loss of the whole batch.
* **FSDP needs every rank in every collective.** Each forward/backward all-gathers parameters and
  reduce-scatters gradients, so every rank runs the same number of micro-batches: a rank with fewer
  rows runs idle passes (``idle_pass``, a two-token forward whose loss is multiplied by zero).
* The model is sharded per transformer block (the classes its ``_no_split_modules`` names) and at the
  root, a ``LogProbModel`` whose forward includes the output head (modeling.py).

A rank that raises writes its traceback to ``<run_dir>/failures/rank<k>.txt`` and exits; the others
fail in their next collective (gloo notices the closed connection; NCCL after ``distributed.timeout_s``
or torchrun's SIGTERM), and rank 0 ends the MLflow run as FAILED naming the rank that raised first
(loop.py).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch

from . import packing
from .modeling import LogProbModel, Precision, causal_lm


def world_size_from_environment() -> int:
    """``WORLD_SIZE`` as torchrun sets it (1 when not launched by torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


@dataclass
class DataParallel:
    """This process's place in a data-parallel learner, and the few collectives the trainer uses.

    The default is one process: ``rank`` 0 of ``world_size`` 1, no process group, every collective
    the identity.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    owns_group: bool = False
    """This object initialised the process group (and destroys it in ``close``)."""

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_environment(cls, device: torch.device, timeout_s: float) -> DataParallel:
        """One process, or this process's rank of a torchrun launch (``WORLD_SIZE`` > 1), joining the
        process group: NCCL on CUDA, gloo otherwise.

        Args:
            device: where this rank computes (``device_for_rank`` of the config's device).
            timeout_s: how long a collective waits for the other ranks before failing.
        """
        world = world_size_from_environment()
        if world <= 1:
            return cls()
        import torch.distributed as dist

        rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        owns = not dist.is_initialized()
        if owns:
            backend = "nccl" if device.type == "cuda" else "gloo"
            kwargs: dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
            dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s), **kwargs)
        return cls(rank=rank, world_size=world, local_rank=local_rank, owns_group=owns)

    def close(self) -> None:
        if self.owns_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self.owns_group = False

    # ---- collectives (the identity in one process) ----------------------------------------------
    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (pickled)."""
        if not self.enabled:
            return obj
        import torch.distributed as dist

        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def scatter(self, per_rank: Sequence[Any] | None) -> Any:
        """Rank 0's ``per_rank[k]`` on rank k (``per_rank`` is read on rank 0 only)."""
        if not self.enabled:
            assert per_rank is not None and len(per_rank) == 1
            return per_rank[0]
        import torch.distributed as dist

        if self.is_main:
            assert per_rank is not None and len(per_rank) == self.world_size, "one item per rank"
        out: list[Any] = [None]
        dist.scatter_object_list(out, list(per_rank) if self.is_main and per_rank is not None else None, src=0)
        return out[0]

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` in rank order on rank 0 (None elsewhere)."""
        if not self.enabled:
            return [obj]
        import torch.distributed as dist

        out = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def reduce_stats(self, stats: dict[str, float]) -> dict[str, float]:
        """Sums over ranks, except keys ending in ``_max`` (maxima); keys missing on a rank count as absent.

        Summed in rank order on every rank, so every rank gets the same floats.
        """
        if not self.enabled:
            return stats
        import torch.distributed as dist

        every: list[Any] = [None] * self.world_size
        dist.all_gather_object(every, stats)
        out: dict[str, float] = {}
        for part in every:
            for k, v in part.items():
                out[k] = (max(out[k], v) if k.endswith("_max") else out[k] + v) if k in out else v
        return out

    def sum_counts(self, counts: dict[str, int]) -> dict[str, int]:
        """Integer counts summed over ranks (an all-reduce; exact). Every rank passes the same keys."""
        if not self.enabled:
            return counts
        import torch.distributed as dist

        keys = sorted(counts)
        t = torch.tensor([counts[k] for k in keys], dtype=torch.long, device=self._collective_device())
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return dict(zip(keys, t.tolist()))

    def max_int(self, value: int) -> int:
        if not self.enabled:
            return value
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.long, device=self._collective_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def any(self, flag: bool) -> bool:
        """True on every rank when it is True on one (e.g. a SIGTERM that reached one rank)."""
        return bool(self.max_int(int(flag)))

    def barrier(self) -> None:
        if self.enabled:
            import torch.distributed as dist

            dist.barrier()

    def _collective_device(self) -> torch.device:
        import torch.distributed as dist

        return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")

    # ---- the model ------------------------------------------------------------------------------------
    def wrap(self, lm, precision: Precision | None = None) -> LogProbModel:
        """The trained module around the causal LM ``lm``: FSDP2-sharded per transformer block and at
        the root when distributed, plain otherwise.

        Mixed ``precision`` (parameters in ``master``, compute in ``compute``): in one process the
        module's forward runs under autocast; distributed, FSDP2's ``MixedPrecisionPolicy`` gathers the
        parameters cast to ``compute`` and reduce-scatters the gradients in ``master``, so the shards,
        their gradients and the optimiser's state stay in ``master``.

        Gradients are summed over ranks, not averaged (the loss weights already hold the global
        counts), with SUM-only collectives (gloo has no pre-multiplied sum). A parameter that a rank's
        backward did not reach (the output head when a micro-batch selects no position) contributes
        zeros, so every rank's reduce-scatter has the same shape.

        Raises:
            ValueError: the model names no transformer block class in ``_no_split_modules``.
        """
        precision = precision or Precision()
        if not self.enabled:
            return LogProbModel(lm, precision.autocast_dtype)
        from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

        model = LogProbModel(lm)
        policy = MixedPrecisionPolicy()  # no casts: the fp32 path stays bit-identical to one process
        if precision.mixed:
            policy = MixedPrecisionPolicy(param_dtype=precision.compute, reduce_dtype=precision.master)
        blocks = transformer_blocks(lm)
        for i, block in enumerate(blocks):
            # The last block's parameters are needed again at once by the backward: keep them gathered.
            fully_shard(block, reshard_after_forward=i < len(blocks) - 1, mp_policy=policy)
        root = fully_shard(model, mp_policy=policy)  # the model itself, now of an FSDPModule class
        for module in model.modules():
            if (isinstance(module, FSDPModule) and hasattr(module, "set_gradient_divide_factor")
                    and hasattr(module, "set_force_sum_reduction_for_comms")):
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)
        root.set_reduce_scatter_unused_params(True)
        return model

    def full_state_dict(self, model) -> dict[str, torch.Tensor] | None:
        """The causal LM's full (unsharded) state dict on rank 0, None elsewhere. A collective.

        In one process these are the model's own tensors (no copy); distributed, CPU copies gathered
        from the shards.
        """
        if not self.enabled:
            return causal_lm(model).state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        # full_state_dict=True: plain tensors (get_model_state_dict is typed for every kind of state value)
        state = cast("dict[str, torch.Tensor]",
                     get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)))
        if not self.is_main:
            return None
        prefix = "lm." if isinstance(model, LogProbModel) else ""
        return {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in state.items()}


def transformer_blocks(lm) -> list[torch.nn.Module]:
    """The modules of ``lm`` whose class its ``_no_split_modules`` names (the decoder layers), in order.

    Raises:
        ValueError: none found (the model cannot be sharded per block).
    """
    names = set(getattr(lm, "_no_split_modules", None) or ())
    blocks = [m for m in lm.modules() if type(m).__name__ in names]
    if not blocks:
        raise ValueError(
            f"FSDP shards per transformer block: expected {type(lm).__name__}._no_split_modules to name the block "
            f"class, got {sorted(names) or 'nothing'} matching no submodule"
        )
    return blocks


def device_for_rank(requested: torch.device, local_rank: int, world_size: int) -> torch.device:
    """Rank ``local_rank``'s device: under torchrun a CUDA run uses ``cuda:LOCAL_RANK`` (one GPU per
    process); ``cpu`` stays ``cpu``.

    Raises:
        ValueError: a fixed ``cuda:N`` device with more than one process (each rank needs its own GPU).
    """
    if world_size <= 1 or requested.type != "cuda":
        return requested
    if requested.index is not None:
        raise ValueError(
            f"device: expected 'cuda' or 'auto' under torchrun (rank k uses cuda:LOCAL_RANK), got {str(requested)!r}"
        )
    if local_rank >= torch.cuda.device_count():
        raise ValueError(f"device: LOCAL_RANK {local_rank} needs a GPU of its own, this host has {torch.cuda.device_count()}")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def split_by_tokens(lengths: list[int], num_ranks: int, row_tokens: int, packed: bool = True) -> list[list[int]]:
    """Episode indices per rank, balanced by token count.

    The episodes are packed into rows as one process would pack them (first-fit-decreasing into rows
    of ``row_tokens``, or one per row when not ``packed``); rows go, heaviest first, to the rank with
    the fewest tokens so far (the lowest rank on ties). A rank may get no row.

    Returns:
        ``num_ranks`` lists of indices into ``lengths``, each in its rows' order.
    """
    rows = packing.first_fit_decreasing(lengths, row_tokens) if packed else packing.one_per_row(lengths)
    load = [0] * num_ranks
    out: list[list[int]] = [[] for _ in range(num_ranks)]
    for row in sorted(rows, key=lambda r: (-sum(lengths[i] for i in r), r[0])):
        k = min(range(num_ranks), key=lambda j: (load[j], j))
        out[k].extend(row)
        load[k] += sum(lengths[i] for i in row)
    return out


def idle_batch() -> packing.PackedBatch:
    """A two-token batch for a rank's idle pass (no field: nothing of it enters a loss or a statistic)."""
    return packing.collate([packing.Sequence(ids=[0, 0])], [[0]])
