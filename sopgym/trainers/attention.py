"""One attention entry point for packed rows: flash-attention varlen on CUDA, else SDPA/eager with a block mask.

Shape legend: B = rows, T = tokens per row, N = real (non-padding) tokens of the micro-batch,
S1 = segments + 1 (cu_seqlens), H = heads, D = head dim.

Packed rows need every episode isolated. In the installed transformers, reset ``position_ids`` alone
do NOT isolate episodes under SDPA or eager attention (only the flash-attention path derives
``cu_seqlens`` from them). So:

* ``flash_varlen`` (CUDA + ``flash_attn`` importable): the real tokens of all rows are concatenated into
  one sequence of N tokens (padding is dropped, not computed) and ``cu_seq_lens_q/k`` +
  ``max_length_q/k`` are passed explicitly; the model must be loaded with
  ``attn_implementation="flash_attention_2"``.
* ``torch_varlen`` (CUDA, fp16/bf16, no ``flash_attn`` needed): the same flattened input, through
  PyTorch's own flash varlen kernel (``torch.nn.attention.varlen.varlen_attn``), registered in
  transformers like ``sdpa_varlen``.
* ``sdpa_varlen``: the same flattened input and ``cu_seqlens``, with an attention function registered
  in transformers that runs SDPA's fused causal kernel once per episode. Cost grows with the sum of
  squared episode lengths, not the squared row length, and no padding is computed. Without
  ``cu_seq_lens_q`` (generation) it is plain SDPA with transformers' usual masks.
* ``sdpa``: a 4-D boolean mask ``[B, 1, T, T]``, True where query i may attend key j (same episode, j <= i).
  transformers passes a 4-D mask through unchanged.
* ``eager``: the same mask as an additive float mask (0 / dtype min): eager attention adds it to scores.
* Rows holding a single episode need no mask at all (causal attention with trailing padding).
"""

from __future__ import annotations

import importlib.util

import torch
import torch.nn.functional as F

from .packing import PackedBatch

SDPA_VARLEN = "sopgym_sdpa_varlen"
"""The transformers ``attn_implementation`` name of the per-episode SDPA function (registered on import)."""
TORCH_VARLEN = "sopgym_torch_varlen"
"""The transformers ``attn_implementation`` name of PyTorch's flash varlen kernel (registered on import)."""
BACKENDS = ("flash_varlen", "torch_varlen", "sdpa_varlen", "sdpa", "eager")
"""Every backend the trainer offers (``model.attention`` also accepts ``auto``)."""
CUDA_BACKENDS = ("flash_varlen", "torch_varlen")
"""Flash kernels: CUDA and half-precision weights only."""
VARLEN_BACKENDS = ("flash_varlen", "torch_varlen", "sdpa_varlen")
HALF_DTYPES = (torch.float16, torch.bfloat16)
HF_IMPLEMENTATION = {
    "flash_varlen": "flash_attention_2",
    "torch_varlen": TORCH_VARLEN,
    "sdpa_varlen": SDPA_VARLEN,
    "sdpa": "sdpa",
    "eager": "eager",
}


def sdpa_varlen_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, cu_seq_lens_q=None, **kwargs):
    """A transformers attention function: causal SDPA per segment of ``cu_seq_lens_q``.

    ``query`` is ``[1, H, N, D]``, ``key``/``value`` ``[1, Hkv, N, D]``; returns ``[1, N, H, D]`` as
    transformers expects. Without ``cu_seq_lens_q`` (generation, unpacked calls) it defers to
    transformers' own SDPA function, masks included.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if cu_seq_lens_q is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    if query.shape[0] != 1:
        raise ValueError(f"sdpa_varlen expects one flattened row, got a batch of {query.shape[0]}")
    groups = query.shape[1] // key.shape[1]
    if groups > 1:  # repeat KV heads: on CPU SDPA's enable_gqa path measured several times slower
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    bounds = cu_seq_lens_q.tolist()
    dropout_p = dropout if module.training else 0.0
    outs = [
        F.scaled_dot_product_attention(
            query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], is_causal=True, scale=scaling, dropout_p=dropout_p
        )
        for a, b in zip(bounds[:-1], bounds[1:])
        if b > a
    ]
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous(), None


def torch_varlen_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, cu_seq_lens_q=None, max_length_q=None, **kwargs):
    """A transformers attention function over PyTorch's flash varlen kernel (CUDA, fp16/bf16).

    ``query`` is ``[1, H, N, D]``, ``key``/``value`` ``[1, Hkv, N, D]``; returns ``[1, N, H, D]``.
    Without ``cu_seq_lens_q`` (generation) it defers to transformers' SDPA function, masks included.
    """
    from torch.nn.attention.varlen import varlen_attn
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if cu_seq_lens_q is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    if query.shape[0] != 1:
        raise ValueError(f"torch_varlen expects one flattened row, got a batch of {query.shape[0]}")
    if module.training and dropout > 0:
        raise ValueError("torch_varlen does not implement attention dropout; use sdpa_varlen")
    # Under autocast (float32 master weights, bfloat16 compute) the rotary embedding leaves the query
    # and key in float32 while the value is bfloat16; the kernel takes one half-precision dtype.
    dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else value.dtype
    q_NHD, k_NHD, v_NHD = (x[0].transpose(0, 1).to(dtype).contiguous() for x in (query, key, value))
    cu_S1 = cu_seq_lens_q.to(torch.int32)
    max_len = int(max_length_q) if max_length_q is not None else int((cu_S1[1:] - cu_S1[:-1]).max())
    out_NHD = varlen_attn(
        q_NHD, k_NHD, v_NHD, cu_S1, cu_S1, max_len, max_len, scale=scaling, window_size=(-1, 0),
        enable_gqa=q_NHD.shape[1] != k_NHD.shape[1],
    )
    assert isinstance(out_NHD, torch.Tensor)  # a tuple only with return_aux
    return out_NHD[None], None


def _varlen_mask(*args, **kwargs):
    """Mask builder for the varlen attention functions.

    Packed training (no padding mask, queries = keys: the segments isolate the episodes) needs none.
    Everything else gets SDPA's mask, in particular every decode step with a KV cache: a static cache
    returns all of its pre-allocated slots, and without a mask a decode step would attend to the
    unwritten (zero) ones.
    """
    from transformers.masking_utils import sdpa_mask

    q_length, kv_length = kwargs.get("q_length"), kwargs.get("kv_length")
    if kwargs.get("attention_mask") is None and q_length is not None and q_length == kv_length:
        return None
    return sdpa_mask(*args, **kwargs)


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(SDPA_VARLEN, sdpa_varlen_attention)
    AttentionMaskInterface.register(SDPA_VARLEN, _varlen_mask)
    AttentionInterface.register(TORCH_VARLEN, torch_varlen_attention)
    AttentionMaskInterface.register(TORCH_VARLEN, _varlen_mask)


_register()


def flash_attn_available() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


def torch_varlen_available(device: torch.device | str) -> bool:
    """PyTorch's flash varlen kernel: the function exists in this torch and the CUDA device runs flash (sm80+)."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError:
        return False
    return torch.backends.cuda.is_flash_attention_available() and torch.cuda.get_device_capability(device) >= (8, 0)


def select_backend(requested: str, device: torch.device | str, dtype: torch.dtype = torch.float32) -> str:
    """Resolve ``auto`` and check that a requested backend can run here.

    ``auto``: on CUDA with half-precision weights, flash-attention varlen when ``flash_attn`` imports,
    else PyTorch's own flash varlen kernel (``torch_varlen``); everywhere else (CPU, fp32 weights)
    ``sdpa_varlen``. It never picks a flash kernel for fp32 weights and never a backend that builds a
    dense ``[B, 1, T, T]`` mask (``sdpa``, ``eager``: on request only, the references the others are
    tested against).

    Raises:
        ValueError: a backend requested where it cannot run (the message says what it needs).
    """
    is_cuda = torch.device(device).type == "cuda"
    half = dtype in HALF_DTYPES
    if requested == "auto":
        if is_cuda and half and flash_attn_available():
            return "flash_varlen"
        if is_cuda and half and torch_varlen_available(device):
            return "torch_varlen"
        return "sdpa_varlen"
    if requested not in BACKENDS:
        raise ValueError(f"model.attention must be one of {('auto', *BACKENDS)}, got {requested!r}")
    if requested in CUDA_BACKENDS and not half:
        raise ValueError(f"attention {requested!r} needs float16 or bfloat16 weights, got {dtype}")
    if requested == "flash_varlen" and not (is_cuda and flash_attn_available()):
        raise ValueError(f"attention 'flash_varlen' needs a CUDA device and the flash_attn package, got device {device}")
    if requested == "torch_varlen" and not torch_varlen_available(device):
        raise ValueError(f"attention 'torch_varlen' needs a CUDA device with flash support (sm80+), got device {device}")
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


def computed_positions(batch: PackedBatch, backend: str) -> int:
    """Positions the model computes for ``batch``: real tokens only on varlen backends, rows x width otherwise."""
    return batch.num_tokens if backend in VARLEN_BACKENDS else batch.segment_ids_BT.numel()


def model_inputs(batch: PackedBatch, backend: str, dtype: torch.dtype, device: torch.device | str) -> dict:
    """Keyword arguments for ``model(**inputs)`` that isolate the packed episodes.

    Varlen backends get ``[1, N]`` inputs (real tokens only); ``to_rows`` puts their outputs back in
    the ``[B, T]`` layout of ``batch``.
    """
    input_ids_BT = batch.input_ids_BT.to(device)
    position_ids_BT = batch.position_ids_BT.to(device)
    if backend in VARLEN_BACKENDS:
        real_BT = batch.segment_ids_BT.to(device) >= 0
        lens = [n for row in batch.seq_lens for n in row]
        cu_seqlens_S1 = torch.zeros(len(lens) + 1, dtype=torch.int32, device=device)
        cu_seqlens_S1[1:] = torch.cumsum(torch.tensor(lens, dtype=torch.int32, device=device), 0)
        return {
            "input_ids": input_ids_BT[real_BT][None],
            "position_ids": position_ids_BT[real_BT][None],
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


def to_rows(out: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
    """Model outputs ``[1, N, X]`` (varlen backends: real tokens only) or ``[B, T, X]`` -> ``[B, T, X]``.

    Padding positions of a varlen output are zeros (they were never computed).
    """
    num_B, num_T = batch.input_ids_BT.shape
    if out.shape[0] == num_B and out.shape[1] == num_T:
        return out
    real_N = (batch.segment_ids_BT >= 0).reshape(-1).to(out.device)
    if out.shape[1] != int(real_N.sum()):
        raise ValueError(f"expected {int(real_N.sum())} or {num_B}x{num_T} output positions, got {tuple(out.shape[:2])}")
    full = out.new_zeros(num_B * num_T, out.shape[-1])
    full[real_N] = out[0]
    return full.reshape(num_B, num_T, -1)
