"""An offline byte-level BPE tokenizer with a ChatML chat template that supports tools (the CPU demo).

The template follows the Qwen2.5 layout (tools listed in the system turn, Hermes ``<tool_call>`` replies,
tool results as ``tool`` turns) so that the same episodes render the same way for a real Qwen model.
"""

from __future__ import annotations

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOOL_TAGS = ["<tool_call>", "</tool_call>"]

CHAT_TEMPLATE = (
    "{% macro tool_block() %}{{ '# Tools\\n<tools>\\n' }}{% for tool in tools %}{{ tool | tojson }}{{ '\\n' }}"
    "{% endfor %}{{ '</tools>' }}{% endmacro %}"
    "{% for message in messages %}"
    "{% if loop.first and message['role'] == 'system' %}"
    "{{ '<|im_start|>system\\n' + message['content'] }}{% if tools %}{{ '\\n\\n' }}{{ tool_block() }}{% endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{% else %}"
    "{% if loop.first and tools %}{{ '<|im_start|>system\\n' }}{{ tool_block() }}{{ '<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build_bpe_tokenizer(
    texts: list[str], vocab_size: int = 2048, atomic_tool_tags: bool = True, split_digits: bool = False
):
    """Train a byte-level BPE on ``texts`` and wrap it as a ``PreTrainedTokenizerFast`` with ChatML.

    Needs no files or network. ``<|im_end|>`` is the end-of-turn (eos) token, ``<|endoftext|>`` pads.
    With ``atomic_tool_tags`` (as in Qwen2.5's tokenizer) ``<tool_call>`` and ``</tool_call>`` are single
    tokens: split into ``<``, ``tool``, ``_``, ``call``, a tiny model trained from scratch kept
    continuing ``<tool_`` with the more frequent ``door`` of ``dock_door`` and never produced a valid call.

    With ``split_digits`` every digit is its own pre-token (as in the Llama and Qwen2 tokenizers), so no
    merge spans two digits: an identifier such as ``SHP-326044`` is six digit tokens wherever it appears,
    and a model copies it digit by digit from a ten-token alphabet instead of from hundreds of
    multi-digit pieces that each occur rarely.

    Args:
        texts: the training texts (message contents, tool schemas).
        vocab_size: the vocabulary size including special tokens.
        atomic_tool_tags: make ``<tool_call>`` and ``</tool_call>`` single tokens.
        split_digits: isolate every digit before the byte-level pre-tokenizer.

    Returns:
        A ``PreTrainedTokenizerFast`` with the ChatML tool template.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if split_digits:
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS + (TOOL_TAGS if atomic_tool_tags else []),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast
