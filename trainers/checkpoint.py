"""Checkpoints for exact resume: model, optimiser, scheduler, every RNG, the task cursor and the MLflow run id.

Written atomically (temporary file, then rename) so a kill during the save leaves the previous one.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

FILENAME = "checkpoint.pt"


def rng_state(generator: torch.Generator) -> dict[str, Any]:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "sampling": generator.get_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any], generator: torch.Generator) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
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
    path = Path(run_dir) / FILENAME
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)
