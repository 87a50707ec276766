"""An honest text space: any Unicode string up to a maximum length.

gymnasium's ``Text`` only contains strings over a small charset (alphanumerics by default), so
tool outputs with punctuation, JSON or non-Latin text would be "outside" it. ``UnicodeText``
contains every ``str`` of length in ``[min_length, max_length]`` (surrogates included: Python
strings may hold them). ``AssistantAction`` also contains an OpenAI-style assistant message dict.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.spaces import Space

__all__ = ["UnicodeText", "AssistantAction"]

# Sampling draws from printable ASCII, JSON punctuation, whitespace, Latin-1, Greek, CJK and emoji,
# so samples exercise parsers without being mostly unassigned code points.
_SAMPLE_RANGES = ((0x20, 0x7E), (0x09, 0x0A), (0xA0, 0xFF), (0x391, 0x3C9), (0x4E00, 0x4E40), (0x1F600, 0x1F640))


class UnicodeText(Space[str]):
    """Any ``str`` with ``min_length <= len <= max_length`` (length in code points)."""

    def __init__(self, max_length: int = 1_000_000, *, min_length: int = 0, seed: int | np.random.Generator | None = None):
        if not 0 <= min_length <= max_length:
            raise ValueError(f"expected 0 <= min_length <= max_length, got {min_length}, {max_length}")
        self.min_length = int(min_length)
        self.max_length = int(max_length)
        super().__init__(dtype=str, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None, sample_max_length: int = 64) -> str:
        """A random string. Lengths are capped at ``sample_max_length`` so samples stay cheap."""
        if mask is not None or probability is not None:
            raise ValueError("UnicodeText.sample takes no mask or probability")
        hi = min(self.max_length, max(self.min_length, sample_max_length))
        length = int(self.np_random.integers(self.min_length, hi + 1))
        ranges = self.np_random.integers(0, len(_SAMPLE_RANGES), size=length)
        chars = [chr(int(self.np_random.integers(_SAMPLE_RANGES[r][0], _SAMPLE_RANGES[r][1] + 1))) for r in ranges]
        return "".join(chars)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText(min_length={self.min_length}, max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, UnicodeText) and (other.min_length, other.max_length) == (self.min_length, self.max_length)

    def to_jsonable(self, sample_n: Any) -> list[str]:
        return list(sample_n)

    def from_jsonable(self, sample_n: list[str]) -> list[str]:
        return list(sample_n)


class AssistantAction(UnicodeText):
    """The assistant's reply: a string, or an OpenAI-style assistant message dict.

    Samples are strings (random text); the dict form is accepted by ``contains`` so that
    ``{"role": "assistant", "content": ..., "tool_calls": [...]}`` is an honest member.
    """

    def contains(self, x: Any) -> bool:
        """Never raises: a dict's role and content are type-checked before they are compared."""
        if isinstance(x, dict):
            role, content = x.get("role", "assistant"), x.get("content")
            return type(role) is str and role == "assistant" and (content is None or super().contains(content))
        return super().contains(x)

    def __repr__(self) -> str:
        return f"AssistantAction(max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, AssistantAction) and other.max_length == self.max_length
