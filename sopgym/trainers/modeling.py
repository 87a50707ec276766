"""Model and tokenizer loading, and per-token log-probs of packed batches.

Shape legend: B = rows, T = tokens per row, V = vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from . import attention
from .packing import PackedBatch

if TYPE_CHECKING:  # for annotations only: config.py imports this module (runtime_problems), not the reverse
    from .config import ModelConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


@dataclass(frozen=True)
class Precision:
    """How the trained model computes: parameters, their gradients and the optimiser's state in
    ``master``; forward and backward passes in ``compute``.

    When they differ (mixed precision: float32 masters, bfloat16 compute), one process runs every
    forward of the trainer (``LogProbModel``) and of its sampler (``HFPolicy``) under
    ``torch.autocast(compute)``; a data-parallel learner casts the gathered parameters to ``compute``
    with FSDP2's ``MixedPrecisionPolicy`` and reduces gradients in ``master`` (distributed.py). Either
    way the optimiser steps float32 weights, so an update far below bfloat16's spacing still lands.
    """

    master: torch.dtype = torch.float32
    compute: torch.dtype = torch.float32

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> Precision:
        return cls(master=DTYPES[cfg.resolved_master_dtype], compute=DTYPES[cfg.dtype])

    @property
    def mixed(self) -> bool:
        return self.master != self.compute

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The dtype to autocast to in one process (None: parameters already compute in ``compute``)."""
        return self.compute if self.mixed else None


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_tokenizer(cfg: ModelConfig, run_dir: str | Path | None = None, texts: list[str] | None = None,
                   saved: str | Path | None = None):
    """The tokenizer: from ``cfg.tokenizer`` / ``cfg.name_or_path``, or a BPE trained on ``texts``.

    A trained BPE is saved to ``<run_dir>/tokenizer`` and reloaded from there on resume, so a resumed
    run sees the identical vocabulary. ``saved``: the tokenizer folder of an SFT checkpoint, loaded
    instead (a BPE is saved to ``<run_dir>/tokenizer`` too).
    """
    from transformers import AutoTokenizer

    if saved is not None:
        tok = AutoTokenizer.from_pretrained(str(saved))
        if cfg.tokenizer == "bpe" and run_dir is not None:
            tok.save_pretrained(str(Path(run_dir) / "tokenizer"))
        return tok
    if cfg.tokenizer == "bpe":
        from .tokenizer import build_bpe_tokenizer

        saved = Path(run_dir) / "tokenizer" if run_dir else None
        if saved is not None and (saved / "tokenizer.json").exists():
            return AutoTokenizer.from_pretrained(str(saved))
        if not texts:
            raise ValueError("model.tokenizer='bpe' needs texts to train on")
        tok = build_bpe_tokenizer(texts, cfg.bpe_vocab_size, split_digits=cfg.bpe_split_digits)
        if saved is not None:
            tok.save_pretrained(str(saved))
        return tok
    tok = AutoTokenizer.from_pretrained(cfg.tokenizer or cfg.name_or_path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(cfg: ModelConfig, tokenizer, backend: str, device: torch.device, seed: int = 0):
    """``AutoModelForCausalLM.from_pretrained`` for ``name_or_path``, else a small Llama from scratch.

    Its parameters are in the master dtype (``Precision.from_config(cfg).master``). The attention
    implementation follows ``backend`` (see attention.py).
    """
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    dtype = Precision.from_config(cfg).master
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
            num_key_value_heads=cfg.scratch_num_kv_heads,
            max_position_embeddings=8192,
            tie_word_embeddings=True,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            # PreTrainedConfig takes it from **kwargs at run time; LlamaConfig's typed signature omits it
            attn_implementation=impl,  # type: ignore[call-arg]
        )
        # transformers wraps PreTrainedModel.to in a decorator whose type wants the module first
        model = LlamaForCausalLM(config).to(dtype)  # type: ignore[arg-type]
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.config.use_cache = False
    return model.to(device)  # type: ignore[arg-type]  # as above: transformers' typing of .to


def _wide(x: torch.Tensor) -> torch.Tensor:
    """Upcast half precision to float32; keep float64 as is (exactness tests run in fp64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


LOGIT_CHUNK_ELEMENTS = 1 << 26
"""Logits computed at once on the training path, positions x vocabulary (256 MB in fp32): above it the
output head, log-softmax and entropy run in chunks of positions, each recomputed in the backward pass
(activation checkpointing), so a 150k vocabulary never holds ``[N, V]`` logits and their softmax."""


def _head_logprobs(head, hidden_NH, target_N, temperature: float, entropy_keep_N: torch.Tensor | None):
    """Log-prob of each target under ``softmax(head(hidden) / temperature)``, and the (detached)
    entropy of the rows ``entropy_keep_N`` selects (None: no entropy)."""
    logprobs_NV = torch.log_softmax(_wide(head(hidden_NH)) / temperature, dim=-1)
    logp_N = logprobs_NV.gather(-1, target_N.unsqueeze(-1)).squeeze(-1)
    if entropy_keep_N is None:
        return logp_N, None
    with torch.no_grad():
        kept_KV = logprobs_NV[entropy_keep_N]
        entropy_K = -(kept_KV.exp() * kept_KV).sum(-1)
    return logp_N, entropy_K


def chunked_head_logprobs(
    head, hidden_NH: torch.Tensor, target_N: torch.Tensor, temperature: float,
    entropy_keep_N: torch.Tensor | None = None, chunk_elements: int = LOGIT_CHUNK_ELEMENTS,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``_head_logprobs`` over chunks of positions so that at most ``chunk_elements`` logits exist at once.

    With gradients each chunk is checkpointed (its logits are recomputed in the backward pass instead
    of kept). Values and gradients equal the one-shot computation (tested).

    Returns:
        ``logp_N`` and the entropy of the rows ``entropy_keep_N`` selects (None without it).
    """
    num_N = hidden_NH.shape[0]
    rows = max(1, chunk_elements // max(1, head.weight.shape[0]))
    if num_N <= rows:
        return _head_logprobs(head, hidden_NH, target_N, temperature, entropy_keep_N)
    from torch.utils.checkpoint import checkpoint

    logps, entropies = [], []
    for a in range(0, num_N, rows):
        h_NH, t_N = hidden_NH[a : a + rows], target_N[a : a + rows]
        keep_N = entropy_keep_N[a : a + rows] if entropy_keep_N is not None else None
        if torch.is_grad_enabled() and h_NH.requires_grad:
            logp_N, entropy_K = checkpoint(_head_logprobs, head, h_NH, t_N, temperature, keep_N, use_reentrant=False)
        else:
            logp_N, entropy_K = _head_logprobs(head, h_NH, t_N, temperature, keep_N)
        logps.append(logp_N)
        entropies.append(entropy_K)
    return torch.cat(logps), (torch.cat(entropies).detach() if entropy_keep_N is not None else None)


class LogProbModel(torch.nn.Module):
    """The trained module: a causal LM whose ``forward`` maps a packed batch to the log-prob of every
    target token, the output head included.

    Everything the optimiser step computes with the model goes through this ``forward``. Under FSDP
    (sopgym/trainers/distributed.py) it is the root module, so its hooks gather the parameters the
    transformer blocks do not own (embeddings, final norm, output head) before the head runs and
    reduce their gradients after it; calling ``lm.base_model`` and the head directly would skip them.

    Args:
        lm: a Hugging Face causal LM (``AutoModelForCausalLM``), kept as ``self.lm``.
        autocast_dtype: run the forward (and so its backward) under ``torch.autocast`` to this dtype
            (``Precision.autocast_dtype``: bfloat16 compute over float32 parameters in one process);
            None: in the parameters' dtype (FSDP2 casts them itself under torchrun).
    """

    def __init__(self, lm, autocast_dtype: torch.dtype | None = None):
        super().__init__()
        self.lm = lm
        self.autocast_dtype = autocast_dtype

    def forward(
        self,
        batch: PackedBatch,
        backend: str,
        temperature: float = 1.0,
        with_entropy: bool = False,
        select_BT: torch.Tensor | None = None,
        entropy_select_BT: torch.Tensor | None = None,
        chunk_elements: int = LOGIT_CHUNK_ELEMENTS,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """See ``token_logprobs``."""
        device = next(self.lm.parameters()).device
        with torch.autocast(device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None):
            return self._forward(batch, backend, temperature, with_entropy, select_BT, entropy_select_BT, chunk_elements)

    def _forward(self, batch, backend, temperature, with_entropy, select_BT, entropy_select_BT, chunk_elements):
        lm = self.lm
        param = next(lm.parameters())
        device, dtype = param.device, param.dtype
        inputs = attention.model_inputs(batch, backend, dtype, device)
        target_BT = batch.target_ids_BT.to(device)
        num_B, num_T = target_BT.shape
        select_N = (select_BT.to(device) if select_BT is not None else torch.ones_like(target_BT, dtype=torch.bool)).reshape(-1)
        keep_N = None
        if with_entropy:
            keep_N = entropy_select_BT.to(device).reshape(-1)[select_N] if entropy_select_BT is not None else torch.ones_like(select_N[select_N])
        if select_BT is None:
            logits = lm(**inputs, use_cache=False).logits
            logits_NV = attention.to_rows(logits, batch).reshape(num_B * num_T, -1)
            logprobs_NV = torch.log_softmax(_wide(logits_NV) / temperature, dim=-1)
            logp_N = logprobs_NV.gather(-1, target_BT.reshape(-1).unsqueeze(-1)).squeeze(-1)
            entropy_K = None
            if with_entropy:
                with torch.no_grad():
                    entropy_K = -(logprobs_NV[keep_N].exp() * logprobs_NV[keep_N]).sum(-1)
        else:
            hidden = lm.base_model(**inputs, use_cache=False).last_hidden_state
            hidden_BTH = attention.to_rows(hidden, batch)
            logp_N, entropy_K = chunked_head_logprobs(
                lm.get_output_embeddings(), hidden_BTH.reshape(num_B * num_T, -1)[select_N],
                target_BT.reshape(-1)[select_N], temperature, keep_N, chunk_elements,
            )
        # Scattered into fresh [B, T] tensors (not views: FSDP hooks the outputs of its root module).
        rows_N = select_N.nonzero().squeeze(-1)
        logp_BT = logp_N.new_zeros(num_B, num_T).index_put((rows_N // num_T, rows_N % num_T), logp_N)
        entropy_BT = None
        if with_entropy:
            assert entropy_K is not None  # computed for keep_N
            rows_K = rows_N[keep_N]
            entropy_BT = entropy_K.new_zeros(num_B, num_T).index_put((rows_K // num_T, rows_K % num_T), entropy_K)
        return logp_BT, entropy_BT


def logprob_model(model) -> LogProbModel:
    """``model`` itself when it is a ``LogProbModel`` (FSDP-sharded or not), else one around the causal LM."""
    return model if isinstance(model, LogProbModel) else LogProbModel(model)


def causal_lm(model):
    """The Hugging Face causal LM of ``model`` (a ``LogProbModel`` or the LM itself)."""
    return model.lm if isinstance(model, LogProbModel) else model


def token_logprobs(
    model,
    batch: PackedBatch,
    backend: str,
    temperature: float = 1.0,
    with_entropy: bool = False,
    select_BT: torch.Tensor | None = None,
    entropy_select_BT: torch.Tensor | None = None,
    chunk_elements: int = LOGIT_CHUNK_ELEMENTS,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of every target token under ``model`` at ``temperature``: ``logp_BT`` (and ``entropy_BT``).

    Position p holds log p(target_ids[p] | tokens <= p of its episode). With ``select_BT`` (bool), the
    output head runs only on the selected positions (the policy tokens: a few percent of an episode),
    in chunks of at most ``chunk_elements`` logits (see ``chunked_head_logprobs``); other positions hold
    0. Without it every position is computed by the model's own forward (a reference path).
    (Models with a final logit soft-cap are not special-cased on the selected path.)
    ``entropy_select_BT`` (a subset of ``select_BT``) limits the entropy to those positions.

    Args:
        model: a ``LogProbModel`` (the trainer's, maybe FSDP-sharded) or a causal LM, which is wrapped
            in one for the call. Either way the computation, output head included, is that module's
            ``forward``.
    """
    return logprob_model(model)(
        batch, backend, temperature, with_entropy, select_BT, entropy_select_BT, chunk_elements
    )
