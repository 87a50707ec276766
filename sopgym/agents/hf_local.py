"""A local Hugging Face causal LM as a chat model, sampled by the batched sampler the trainer uses too.

Each round of the runner renders every running episode's chat with the tokenizer's chat template
(``add_generation_prompt=True``), as the trainer's episodes do, and samples all of them in one
``HFPolicy.generate`` call (:mod:`sopgym.policy.hf`: KV-cached, left-padded or bucketed by
length, stops at the end-of-turn token). The reply is the decoded text without its end-of-turn token.

Tools: when the chat template renders ``tools=`` (Qwen2.5, Llama 3.1, ...) they are passed to it
(``tools_via="chat_template"``); when it ignores them (SmolLM2's template does) the agent must write
them into the system message (``--tools prompt``); :attr:`HFChatModel.template_renders_tools` says
which (found by rendering a chat with and without a probe tool), and the results store it.

Honest simplifications: every reply in a round gets the round's wall time as its latency; sampling
(``temperature > 0``) draws from one generator per round, seeded by the first request's seed, so a
sampled run repeats only with the same concurrency; stop strings are not supported (the sampler stops
on token ids).

``model`` may be a hub id, a local folder, or a ``.gguf`` file (de-quantized on load, see
:mod:`.gguf`). Nothing here is imported by ``import sopgym``: torch and transformers load only when
an :class:`HFChatModel` is made.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .chat import ChatRequest, Completion, RequestFailed

__all__ = ["HFChatConfig", "HFChatModel", "template_renders_tools"]

_DTYPES = ("auto", "float32", "bfloat16", "float16")
_PROBE_TOOL = {"type": "function", "function": {"name": "sopgym_probe_tool", "description": "probe",
                                                "parameters": {"type": "object", "properties": {}}}}


@dataclass(frozen=True)
class HFChatConfig:
    """Settings of :class:`HFChatModel`.

    Args:
        model: a hub id, a local folder or a ``.gguf`` file.
        device: ``auto`` (CUDA when available), ``cpu``, ``cuda``, ``cuda:1``...
        dtype: ``auto`` (the checkpoint's; GGUF de-quantizes to float32), ``float32``, ``bfloat16``, ``float16``.
        temperature: 0 is greedy.
        top_p: nucleus mass.
        max_tokens: new tokens per turn; a turn cut by it reports ``finish_reason="length"``.
        max_context: prompt plus reply tokens at most (None: the model's ``max_position_embeddings``);
            a prompt that leaves no room ends its episode as ``context_budget``.
        chat_template_kwargs: passed to ``apply_chat_template`` (e.g. ``{"enable_thinking": False}``).
        threads: ``torch.set_num_threads`` (None: torch's default). On a loaded machine one thread
            can be several times faster than two.
    """

    model: str
    device: str = "auto"
    dtype: str = "auto"
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512
    max_context: int | None = None
    chat_template_kwargs: Mapping[str, Any] | None = None
    threads: int | None = None

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("model must be a hub id, a folder or a .gguf file, got an empty string")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {_DTYPES}, got {self.dtype!r}")
        if not isinstance(self.temperature, (int, float)) or isinstance(self.temperature, bool) or not 0 <= self.temperature <= 2:
            raise ValueError(f"temperature must be a number in [0, 2], got {self.temperature!r}")
        if not isinstance(self.top_p, (int, float)) or isinstance(self.top_p, bool) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be a number in (0, 1], got {self.top_p!r}")
        for name, low in (("max_tokens", 1), ("max_context", 2), ("threads", 1)):
            value = getattr(self, name)
            if (value is not None or name == "max_tokens") and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.chat_template_kwargs is not None and not isinstance(self.chat_template_kwargs, Mapping):
            raise ValueError(f"chat_template_kwargs must be a JSON object, got {type(self.chat_template_kwargs).__name__}")


def template_renders_tools(tokenizer: Any, **template_kwargs: Any) -> bool:
    """Whether the tokenizer's chat template shows ``tools=`` to the model (a chat rendered with a
    probe tool differs from the same chat without it)."""
    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    plain = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True, **template_kwargs)
    try:
        with_tool = tokenizer.apply_chat_template(chat, tools=[_PROBE_TOOL], tokenize=False, add_generation_prompt=True,
                                                  **template_kwargs)
    except Exception:  # noqa: BLE001 - a template that fails on tools does not support them
        return False
    return with_tool != plain and "sopgym_probe_tool" in with_tool


def _resolve_device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class HFChatModel:
    """A :class:`~.chat.ChatModel` sampling a local model with ``HFPolicy`` (sopgym/policy/hf.py).

    Args:
        config: the settings.
        model, tokenizer: an already loaded model and tokenizer (then ``config.model`` only names
            them in the results; ``device`` and ``dtype`` are left as they are).

    Raises:
        ImportError: torch or transformers missing (``pip install 'sopgym[hf]'``).
    """

    def __init__(self, config: HFChatConfig, model: Any = None, tokenizer: Any = None):
        import torch

        from sopgym.policy.hf import HFPolicy

        self.config = config
        if config.threads is not None:
            torch.set_num_threads(config.threads)
        if model is None or tokenizer is None:
            model, tokenizer = self._load(config)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.model, self.tokenizer = model, tokenizer
        self.sampler = HFPolicy(model, tokenizer)
        self._template_kwargs = dict(config.chat_template_kwargs or {})
        self.template_renders_tools = template_renders_tools(tokenizer, **self._template_kwargs)
        limit = config.max_context or getattr(model.config, "max_position_embeddings", None)
        if not limit:
            raise ValueError(f"{config.model}: the model config has no max_position_embeddings; set max_context")
        self.max_context = int(limit)

    @staticmethod
    def _load(config: HFChatConfig) -> tuple[Any, Any]:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from .gguf import load_gguf, split_gguf

        dtype = None if config.dtype == "auto" else getattr(torch, config.dtype)
        if split_gguf(config.model) is not None:
            model, tokenizer = load_gguf(config.model, dtype=dtype)
        else:
            tokenizer = AutoTokenizer.from_pretrained(config.model)
            model = AutoModelForCausalLM.from_pretrained(config.model, **({"dtype": dtype} if dtype is not None else {}))
        model.to(_resolve_device(config.device))
        model.eval()
        return model, tokenizer

    def prompt_ids(self, request: ChatRequest) -> list[int]:
        """The chat template of the request's messages (and tools), with the generation prompt, as ids.

        Raises:
            ValueError: the request carries tools but the template does not render them.
        """
        if request.tools and not self.template_renders_tools:
            raise ValueError(f"the chat template of {self.config.model} ignores tools=: write the tools into the "
                             "system message instead (--tools prompt)")
        text = self.tokenizer.apply_chat_template(request.messages, tools=request.tools or None, tokenize=False,
                                                  add_generation_prompt=True, **self._template_kwargs)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def cache_key(self, request: ChatRequest) -> dict[str, Any]:
        """What makes this request's answer (the response cache's key, :mod:`.response_cache`): the model,
        dtype, sampling, context limit and template settings, the messages, tools and seed (not the
        device or the thread count)."""
        settings = {key: value for key, value in asdict(self.config).items() if key not in ("device", "threads")}
        settings["max_context"] = self.max_context
        settings["dtype"] = str(next(self.model.parameters()).dtype).replace("torch.", "")
        return {"policy": "hf", "settings": settings, "messages": request.messages, "tools": request.tools,
                "seed": request.seed}

    def complete_batch(self, requests: Sequence[ChatRequest]) -> list[Completion | RequestFailed]:
        """One batched generation for every request that fits the context."""
        import torch

        prompts = [self.prompt_ids(r) for r in requests]
        out: list[Completion | RequestFailed | None] = [None] * len(requests)
        live = []
        for i, ids in enumerate(prompts):
            room = self.max_context - len(ids)
            if room < 1:
                out[i] = RequestFailed("context_budget", f"the prompt has {len(ids)} tokens; the model's context holds "
                                                         f"{self.max_context}", 1, 0.0)
            else:
                live.append((i, min(self.config.max_tokens, room)))
        if live:
            seed = next((s for i, _ in live if (s := requests[i].seed) is not None), 0)
            generator = torch.Generator().manual_seed(seed) if self.config.temperature > 0 else None
            started = time.monotonic()
            samples = self.sampler.generate([prompts[i] for i, _ in live], [cap for _, cap in live],
                                            temperature=self.config.temperature, top_p=self.config.top_p,
                                            generator=generator)
            latency = time.monotonic() - started
            for (i, _), sample in zip(live, samples):
                ids = list(sample.ids)
                if ids and not sample.hit_cap:
                    ids = ids[:-1]  # the end-of-turn token
                text = self.tokenizer.decode(ids, skip_special_tokens=False)
                out[i] = Completion({"role": "assistant", "content": text}, "length" if sample.hit_cap else "stop",
                                    len(prompts[i]), len(sample.ids), latency, 1)
        return [o for o in out if o is not None]  # every slot is filled

    def describe(self) -> dict[str, Any]:
        import torch
        import transformers

        first = next(self.model.parameters())
        return {"policy": "hf", "model": self.config.model, "settings": asdict(self.config),
                "device": str(first.device), "dtype": str(first.dtype).replace("torch.", ""),
                "max_context": self.max_context, "template_renders_tools": self.template_renders_tools,
                "native_tools_via": "chat_template",
                "transformers": transformers.__version__, "torch": torch.__version__}

    def close(self) -> None:
        pass
