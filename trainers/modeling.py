"""Model and tokenizer loading, and per-token log-probs of packed batches.

Shape legend: B = rows, T = tokens per row, V = vocabulary.
"""

from __future__ import annotations

from pathlib import Path

import torch

from . import attention
from .config import ModelConfig
from .packing import PackedBatch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_tokenizer(cfg: ModelConfig, run_dir: str | Path | None = None, texts: list[str] | None = None):
    """The tokenizer: from ``cfg.tokenizer`` / ``cfg.name_or_path``, or a BPE trained on ``texts``.

    A trained BPE is saved to ``<run_dir>/tokenizer`` and reloaded from there on resume, so a resumed
    run sees the identical vocabulary.
    """
    from transformers import AutoTokenizer

    if cfg.tokenizer == "bpe":
        from .tokenizer import build_bpe_tokenizer

        saved = Path(run_dir) / "tokenizer" if run_dir else None
        if saved is not None and (saved / "tokenizer.json").exists():
            return AutoTokenizer.from_pretrained(str(saved))
        if not texts:
            raise ValueError("model.tokenizer='bpe' needs texts to train on")
        tok = build_bpe_tokenizer(texts, cfg.bpe_vocab_size)
        if saved is not None:
            tok.save_pretrained(str(saved))
        return tok
    tok = AutoTokenizer.from_pretrained(cfg.tokenizer or cfg.name_or_path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(cfg: ModelConfig, tokenizer, backend: str, device: torch.device, seed: int = 0):
    """``AutoModelForCausalLM.from_pretrained`` for ``name_or_path``, else a small Llama from scratch.

    The attention implementation follows ``backend`` (see attention.py).
    """
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    dtype = DTYPES[cfg.dtype]
    impl = attention.HF_IMPLEMENTATION[backend]
    if cfg.name_or_path:
        model = AutoModelForCausalLM.from_pretrained(cfg.name_or_path, dtype=dtype, attn_implementation=impl)
    else:
        torch.manual_seed(seed)
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=cfg.scratch_hidden_size,
            intermediate_size=cfg.scratch_intermediate_size,
            num_hidden_layers=cfg.scratch_num_layers,
            num_attention_heads=cfg.scratch_num_heads,
            num_key_value_heads=cfg.scratch_num_heads,
            max_position_embeddings=8192,
            tie_word_embeddings=True,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            attn_implementation=impl,
        )
        model = LlamaForCausalLM(config).to(dtype)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.config.use_cache = False
    return model.to(device)


def _wide(x: torch.Tensor) -> torch.Tensor:
    """Upcast half precision to float32; keep float64 as is (exactness tests run in fp64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def token_logprobs(
    model,
    batch: PackedBatch,
    backend: str,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of every target token under ``model`` at ``temperature``: ``logp_BT`` (and ``entropy_BT``).

    Position p holds log p(target_ids[p] | tokens <= p of its episode); padding and episode-final
    positions hold garbage that callers mask out.
    """
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    inputs = attention.model_inputs(batch, backend, dtype, device)
    logits = model(**inputs, use_cache=False).logits
    logits_BTV = _wide(attention.unflatten_logits(logits, batch)) / temperature
    logprobs_BTV = torch.log_softmax(logits_BTV, dim=-1)
    target_BT = batch.target_ids_BT.to(device)
    logp_BT = logprobs_BTV.gather(-1, target_BT.unsqueeze(-1)).squeeze(-1)
    entropy_BT = None
    if with_entropy:
        with torch.no_grad():
            entropy_BT = -(logprobs_BTV.exp() * logprobs_BTV).sum(-1)
    return logp_BT, entropy_BT
