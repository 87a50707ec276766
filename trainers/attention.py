"""One attention entry point for packed rows: flash-attention varlen on CUDA, else SDPA/eager with a block mask.

Shape legend: B = rows, T = tokens per row, N = B * T (flattened), S1 = segments + 1 (cu_seqlens).

Packed rows need every episode isolated. In the installed transformers, reset ``position_ids`` alone
do NOT isolate episodes under SDPA or eager attention (only the flash-attention path derives
``cu_seqlens`` from them). So:

* ``flash_varlen`` (CUDA + ``flash_attn`` importable): rows are flattened into one sequence of N tokens
  and ``cu_seq_lens_q/k`` + ``max_length_q/k`` are passed explicitly; the model must be loaded with
  ``attn_implementation="flash_attention_2"``.
* ``sdpa``: a 4-D boolean mask ``[B, 1, T, T]``, True where query i may attend key j (same episode, j <= i).
  transformers passes a 4-D mask through unchanged.
* ``eager``: the same mask as an additive float mask (0 / dtype min): eager attention adds it to scores.
* Rows holding a single episode need no mask at all (causal attention with trailing padding).
"""

from __future__ import annotations

import importlib.util

import torch

from .packing import PackedBatch

BACKENDS = ("flash_varlen", "sdpa", "eager")
HF_IMPLEMENTATION = {"flash_varlen": "flash_attention_2", "sdpa": "sdpa", "eager": "eager"}


def flash_attn_available() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


def select_backend(requested: str, device: torch.device | str) -> str:
    """Resolve ``auto``: flash varlen when on CUDA and ``flash_attn`` imports, else SDPA.

    Raises:
        ValueError: ``flash_varlen`` requested where it cannot run.
    """
    is_cuda = torch.device(device).type == "cuda"
    if requested == "auto":
        return "flash_varlen" if is_cuda and flash_attn_available() else "sdpa"
    if requested == "flash_varlen" and not (is_cuda and flash_attn_available()):
        raise ValueError("attention 'flash_varlen' needs a CUDA device and the flash_attn package")
    if requested not in BACKENDS:
        raise ValueError(f"unknown attention backend {requested!r}")
    return requested


def block_causal_mask(segment_ids_BT: torch.Tensor) -> torch.Tensor:
    """``[B, 1, T, T]`` bool: query i attends key j iff same segment and j <= i.

    Padding (segment -1) attends to earlier padding only, which keeps every query row non-empty
    (an all-False row would make SDPA return NaN) and never touches real tokens.
    """
    num_T = segment_ids_BT.shape[1]
    same_BTT = segment_ids_BT[:, :, None] == segment_ids_BT[:, None, :]
    causal_TT = torch.ones(num_T, num_T, dtype=torch.bool, device=segment_ids_BT.device).tril()
    return (same_BTT & causal_TT)[:, None, :, :]


def additive_mask(bool_mask_B1TT: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Bool mask -> additive float mask (0 where allowed, the dtype's minimum elsewhere)."""
    zero = torch.zeros((), dtype=dtype, device=bool_mask_B1TT.device)
    return torch.where(bool_mask_B1TT, zero, torch.finfo(dtype).min)


def model_inputs(batch: PackedBatch, backend: str, dtype: torch.dtype, device: torch.device | str) -> dict:
    """Keyword arguments for ``model(**inputs)`` that isolate the packed episodes.

    Returns logits in the same ``[B, T]`` layout for every backend (flash is reshaped back by the caller
    via ``unflatten_logits``).
    """
    input_ids_BT = batch.input_ids_BT.to(device)
    position_ids_BT = batch.position_ids_BT.to(device)
    if backend == "flash_varlen":
        # Flatten rows; padding tail of each row becomes its own segment so lengths add up to N.
        lens: list[int] = []
        width = input_ids_BT.shape[1]
        for row in batch.seq_lens:
            lens.extend(row)
            if width - sum(row) > 0:
                lens.append(width - sum(row))
        cu_seqlens_S1 = torch.zeros(len(lens) + 1, dtype=torch.int32, device=device)
        cu_seqlens_S1[1:] = torch.cumsum(torch.tensor(lens, dtype=torch.int32, device=device), 0)
        return {
            "input_ids": input_ids_BT.reshape(1, -1),
            "position_ids": position_ids_BT.reshape(1, -1),
            "cu_seq_lens_q": cu_seqlens_S1,
            "cu_seq_lens_k": cu_seqlens_S1,
            "max_length_q": max(lens),
            "max_length_k": max(lens),
        }
    if all(len(row) <= 1 for row in batch.seq_lens):
        # One episode per row, padding only at the end: plain causal attention already isolates it (real
        # tokens never look ahead at padding), and lets SDPA use its fused causal kernel instead of a
        # materialised [T, T] mask.
        return {"input_ids": input_ids_BT, "position_ids": position_ids_BT}
    mask_B1TT = block_causal_mask(batch.segment_ids_BT.to(device))
    if backend == "eager":
        mask_B1TT = additive_mask(mask_B1TT, dtype)
    elif backend != "sdpa":
        raise ValueError(f"unknown attention backend {backend!r}")
    return {"input_ids": input_ids_BT, "position_ids": position_ids_BT, "attention_mask": mask_B1TT}


def unflatten_logits(logits: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
    """``[1, N, V]`` (flash path) or ``[B, T, V]`` -> ``[B, T, V]``."""
    num_B, num_T = batch.input_ids_BT.shape
    return logits.reshape(num_B, num_T, -1)
