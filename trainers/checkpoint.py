"""Checkpoints for exact resume: model, optimiser, scheduler, every RNG, the task cursor and the MLflow run id.

Written atomically (temporary file, then rename) so a kill during the save leaves the previous one.
Everything is stored as tensors and plain Python values (the NumPy RNG state as a tensor and ints),
so a checkpoint loads with ``torch.load(weights_only=True)``: loading one runs no pickled code.
"""

from __future__ import annotations

import logging
import os
import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .config import RUN_LENGTH_KEYS, differing_keys

FILENAME = "checkpoint.pt"
log = logging.getLogger("sopgym.trainers")


def rng_state(generator: torch.Generator) -> dict[str, Any]:
    name, keys, pos, has_gauss, cached = np.random.get_state()
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
