"""The token ids that end an assistant turn, as a tokenizer, its chat template and a model declare them.

The sampler stops a row at them (sopgym/policy/hf.py) and the token bookkeeping of episodes strips the
one that ended a sampled turn (sopgym/trainers/episodes.py). Imports no torch; transformers only to
read a generation config saved next to a tokenizer.
"""

from __future__ import annotations

import weakref

__all__ = ["end_of_turn_ids"]

_MARK = "\u2063sopgym-end-of-turn-probe\u2063"


_TOKENIZER_ENDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def end_of_turn_ids(tokenizer, model=None) -> frozenset[int]:
    """Every token id that ends an assistant turn: the tokenizer's eos, the model's generation-config
    and config eos ids (an int or a list, e.g. Qwen2.5-Instruct's ``<|im_end|>`` and ``<|endoftext|>``),
    and the special token the chat template writes right after an assistant message's content.

    Args:
        tokenizer: a Hugging Face tokenizer (its chat template, if any, is probed).
        model: its ``generation_config`` and ``config`` eos ids are added. Without it, the generation
            config saved next to the tokenizer (a local directory or the Hugging Face cache, never
            the network) stands in, so an ``EpisodeBuilder`` knows the sampler's ends.

    Returns:
        The set of ids (empty only when nothing declares an end).
    """
    if model is None:
        try:
            cached = _TOKENIZER_ENDS.get(tokenizer)
        except TypeError:  # not weak-referenceable
            cached = None
        if cached is None:
            cached = _end_of_turn_ids(tokenizer, _saved_generation_config(tokenizer))
            try:
                _TOKENIZER_ENDS[tokenizer] = cached
            except TypeError:
                pass
        return cached
    return _end_of_turn_ids(tokenizer, model)


def _saved_generation_config(tokenizer):
    """A stand-in ``model`` holding the generation config saved with the tokenizer, or None."""
    name = getattr(tokenizer, "name_or_path", None)
    if not name:
        return None
    try:
        from transformers import GenerationConfig

        config = GenerationConfig.from_pretrained(name, local_files_only=True)
    except (OSError, ValueError, ImportError):
        return None
    return type("SavedGenerationConfig", (), {"generation_config": config})()


def _end_of_turn_ids(tokenizer, model) -> frozenset[int]:
    ids: set[int] = set()

    def add(value) -> None:
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple, set)):
            ids.update(v for v in value if isinstance(v, int))

    add(tokenizer.eos_token_id)
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        if source is not None:
            add(getattr(source, "eos_token_id", None))
    if getattr(tokenizer, "chat_template", None):
        special = set(getattr(tokenizer, "all_special_ids", []) or []) | set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
        for chat in (
            [{"role": "user", "content": "u"}, {"role": "assistant", "content": _MARK}],
            [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": _MARK}],
        ):
            try:
                text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=False)
            except Exception:  # noqa: BLE001  (templates raise their own errors on chats they refuse)
                continue
            if _MARK not in text:
                continue
            after = tokenizer(text.split(_MARK, 1)[1], add_special_tokens=False)["input_ids"]
            if after and after[0] in special:
                ids.add(after[0])
            break
    return frozenset(ids)
