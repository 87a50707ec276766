"""Checkpoints for exact resume: model, optimiser, scheduler, every RNG, the task cursor and the MLflow run id.

One process writes ``<run_dir>/checkpoint.pt``. A data-parallel learner (torchrun, sopgym/trainers/distributed.py)
writes ``<run_dir>/checkpoint/``: the FSDP-sharded model, reference model and optimiser state with
``torch.distributed.checkpoint`` (each rank writes its own shards), every rank's RNG states in
``rng/rank<k>.pt``, and rank 0's metadata (step, cursor, scheduler, history, config, world size,
MLflow run id) in ``meta.pt``. It resumes on the same number of processes only.

Written atomically (a temporary file or folder, then rename) so a kill during the save leaves the
previous one. Everything is stored as tensors and plain Python values (the NumPy RNG state as a
tensor and ints), so a checkpoint loads with ``torch.load(weights_only=True)``: loading one runs no
pickled code.
"""

from __future__ import annotations

import logging
import os
import pickle
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .config import RUN_LENGTH_KEYS, ConfigError, differing_keys

FILENAME = "checkpoint.pt"
SHARDED_DIRNAME = "checkpoint"
"""The folder of a data-parallel checkpoint (``<run_dir>/checkpoint/``)."""
SFT_DIRNAME = "sft"
"""The folder of the SFT-only checkpoint (``<run_dir>/sft/``): the weights after SFT, before any RL."""
SFT_COMPUTE_KEYS = ("attention", "dtype", "master_dtype", "gradient_checkpointing")
"""``model`` keys a run starting from an SFT checkpoint may set otherwise: how it computes, not what
it computes with."""
log = logging.getLogger("sopgym.trainers")


def rng_state(generator: torch.Generator) -> dict[str, Any]:
    legacy = np.random.get_state()
    assert isinstance(legacy, tuple), "numpy's global generator is not MT19937"  # its state is a dict then
    name, keys, pos, has_gauss, cached = legacy
    state = {
        "python": random.getstate(),
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
        "sampling": generator.get_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any], generator: torch.Generator) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.int64).astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    generator.set_state(state["sampling"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(
    run_dir: str | Path,
    *,
    model,
    optimizer,
    scheduler,
    generator: torch.Generator,
    step: int,
    cursor: int,
    run_id: str | None,
    history: list[dict[str, float]],
    config: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> Path:
    """Save everything needed to continue at ``step`` (the next RL step to run)."""
    path = Path(run_dir) / FILENAME
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": rng_state(generator),
        "step": step,
        "cursor": cursor,
        "mlflow_run_id": run_id,
        "history": history,
        "config": config,
        **(extra or {}),
    }
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)
    return path


def load(run_dir: str | Path) -> dict[str, Any] | None:
    """The checkpoint of ``run_dir`` (None when there is none), loaded with ``weights_only=True``.

    A checkpoint written before this format (NumPy arrays pickled) needs the unrestricted unpickler:
    it is loaded that way with a warning, since it comes from this run directory.
    """
    path = Path(run_dir) / FILENAME
    if not path.exists():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        log.warning("checkpoint %s needs the unrestricted unpickler (an older format): %s", path, str(exc).splitlines()[0])
        return torch.load(path, map_location="cpu", weights_only=False)


def config_changes(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The dotted config keys that differ between a checkpoint's config and ``current``, except the
    run-length keys (``config.RUN_LENGTH_KEYS``) a resumed run may change."""
    return [k for k in differing_keys(saved, current) if k not in RUN_LENGTH_KEYS]


# ---- data-parallel (sharded) checkpoints ----------------------------------------------------------


def _sharded_state(model, optimizer, ref_model) -> dict[str, Any]:
    """The ranks' shards of everything torch.distributed.checkpoint saves (a collective)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    state = {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, optimizer)}
    if ref_model is not None:
        state["ref_model"] = get_model_state_dict(ref_model)
    return state


def save_sharded(run_dir: str | Path, dp, *, model, optimizer, ref_model, generator: torch.Generator,
                 meta: dict[str, Any] | None) -> Path:
    """Save a data-parallel checkpoint; every rank calls it (collectives).

    Args:
        dp: the ``DataParallel`` of this process.
        meta: rank 0's metadata (``step``, ``cursor``, ``scheduler``, ``history``, ``config``, ...);
            ignored on the other ranks.

    Returns:
        The checkpoint folder.
    """
    import torch.distributed.checkpoint as dcp

    final = Path(run_dir) / SHARDED_DIRNAME
    tmp, old = final.with_name(final.name + ".tmp"), final.with_name(final.name + ".old")
    if dp.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "rng").mkdir(parents=True)
    dp.barrier()
    dcp.save(_sharded_state(model, optimizer, ref_model), checkpoint_id=str(tmp))
    torch.save(rng_state(generator), tmp / "rng" / f"rank{dp.rank}.pt")
    if dp.is_main:
        assert meta is not None, "rank 0 saves the metadata"
        torch.save({**meta, "world_size": dp.world_size}, tmp / "meta.pt")
    dp.barrier()
    if dp.is_main:  # the previous checkpoint stays until the new one is complete
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    dp.barrier()
    return final


def _sharded_dir(run_dir: str | Path) -> Path | None:
    """The complete sharded checkpoint of ``run_dir``: ``checkpoint/``, or ``checkpoint.old/`` when a
    save was cut between its renames; None without one."""
    for name in (SHARDED_DIRNAME, SHARDED_DIRNAME + ".old"):
        path = Path(run_dir) / name
        if (path / "meta.pt").exists():
            return path
    return None


def load_meta(run_dir: str | Path, world_size: int) -> dict[str, Any] | None:
    """The checkpoint a run of ``world_size`` processes resumes from: ``load``'s payload for one
    process, the sharded checkpoint's metadata (``sharded: True``) for several; None without one.

    Raises:
        ConfigError: the run directory holds a checkpoint written by another number of processes.
    """
    sharded = _sharded_dir(run_dir)
    single = Path(run_dir) / FILENAME
    if world_size == 1:
        if sharded is not None and not single.exists():
            written = torch.load(sharded / "meta.pt", map_location="cpu", weights_only=True)["world_size"]
            raise ConfigError([_world_size_problem(run_dir, written, world_size)])
        return load(run_dir)
    if sharded is None:
        if single.exists():
            raise ConfigError([_world_size_problem(run_dir, 1, world_size)])
        return None
    meta = torch.load(sharded / "meta.pt", map_location="cpu", weights_only=True)
    if meta["world_size"] != world_size:
        raise ConfigError([_world_size_problem(run_dir, meta["world_size"], world_size)])
    return {**meta, "sharded": True}


def _world_size_problem(run_dir, written: int, running: int) -> str:
    return (
        f"resume: the checkpoint in {str(run_dir)!r} was written by {written} process(es), expected {running} "
        f"(this run's world size); resume with --nproc-per-node {written} or use another run_dir"
    )


def load_sharded(run_dir: str | Path, dp, *, model, optimizer, ref_model, generator: torch.Generator) -> None:
    """Load the sharded checkpoint of ``run_dir`` into the (already sharded) model, reference model and
    optimiser, and this rank's RNG states; every rank calls it (collectives)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    path = _sharded_dir(run_dir)
    assert path is not None, "load_meta found the checkpoint"
    state = _sharded_state(model, optimizer, ref_model)
    dcp.load(state, checkpoint_id=str(path))
    set_model_state_dict(model, state["model"])
    set_optimizer_state_dict(model, optimizer, state["optimizer"])
    if ref_model is not None:
        set_model_state_dict(ref_model, state["ref_model"])
    restore_rng(torch.load(path / "rng" / f"rank{dp.rank}.pt", map_location="cpu", weights_only=True), generator)


# ---- the SFT-only checkpoint ------------------------------------------------------------------------


def save_sft(run_dir: str | Path, *, model_state: dict[str, torch.Tensor], tokenizer, generator: torch.Generator,
             config: dict[str, Any], demonstrations: dict[str, float]) -> Path:
    """Write ``<run_dir>/sft/``: ``checkpoint.pt`` (the full model state after SFT, every RNG state,
    the config and the demonstrations' statistics) and ``tokenizer/``, so that runs with other RL
    settings can start from the same weights and random state (``sft.from_checkpoint``).

    Written to a temporary folder, then renamed. Returns the folder.
    """
    final = Path(run_dir) / SFT_DIRNAME
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save({"model": model_state, "rng": rng_state(generator), "config": config, "demonstrations": demonstrations},
               tmp / FILENAME)
    tokenizer.save_pretrained(str(tmp / "tokenizer"))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final


def load_sft(path: str | Path, config: dict[str, Any]) -> dict[str, Any]:
    """The SFT checkpoint in folder ``path`` (``save_sft``'s payload; ``tokenizer`` is its folder).

    Raises:
        ConfigError: no checkpoint there, or ``config``'s ``model`` section differs from the
            checkpoint's in more than ``SFT_COMPUTE_KEYS``.
    """
    folder = Path(path)
    if not (folder / FILENAME).exists():
        raise ConfigError([f"sft.from_checkpoint: expected an SFT checkpoint folder (<run_dir>/{SFT_DIRNAME}) holding "
                           f"{FILENAME}, got {str(path)!r}"])
    payload = torch.load(folder / FILENAME, map_location="cpu", weights_only=True)
    changed = [f"model.{k}" for k in differing_keys(payload["config"]["model"], config["model"]) if k not in SFT_COMPUTE_KEYS]
    if changed:
        raise ConfigError([f"sft.from_checkpoint: the config's model differs from the checkpoint's in {', '.join(changed)} "
                           f"(only model.{', model.'.join(SFT_COMPUTE_KEYS)} may differ)"])
    return {**payload, "tokenizer": folder / "tokenizer"}
