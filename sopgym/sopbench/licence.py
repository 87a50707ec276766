"""Does a SOP-Bench domain's ``LICENSE.md`` allow training on it? Decided here, failing closed.

Eight upstream domains carry a ``LICENSE.md`` whose conditions include "No one should take steps to
facilitate training AI models on this data". The text is Markdown written by people, so the
condition may sit in a blockquote, in bold, in a list, in a link, across lines, with typographic
quotes, a non-breaking hyphen ("AI‑models"), a soft hyphen or a zero-width space inside a word. The
text is normalised before it is read (:func:`normalise`):

* Unicode NFKC (compatibility forms: full-width letters, ligatures, non-breaking spaces), then
  accents stripped (NFKD without combining marks) and case folded;
* format characters removed (Unicode category Cf: zero-width space, joiners, soft hyphen, word
  joiner, byte-order mark, bidirectional marks), so they cannot split a word;
* Markdown links reduced to their text and HTML tags dropped;
* then only runs of letters and digits are kept, separated by one space: every other character
  (quote markers ``>``, emphasis ``*`` and ``_``, code ticks, headings, bullets, quotes of every
  kind, hyphens and dashes of every kind, punctuation, line breaks) is a separator.

The verdict (:func:`judge_licence`):

* no ``LICENSE.md`` (or one that mentions none of the words below): training allowed;
* the condition found: not allowed, and no override changes that;
* otherwise, a licence that mentions training, AI, models, machine or deep learning, neural
  networks, LLMs, fine-tuning or data mining in any form, or holds a word that mixes Latin with
  other letters (a homoglyph the normalisation cannot map), is one the matcher cannot settle: **not
  allowed** (fail closed), with the words found as the reason. Only an explicit override
  (``allow_training``, after a person has read the licence) allows it, and the reason says so.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = ["NO_TRAINING_CONDITION", "LicenceVerdict", "judge_licence", "normalise"]

#: The condition in a domain's LICENSE.md that forbids training on it.
NO_TRAINING_CONDITION = "No one should take steps to facilitate training AI models on this data"

_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_TAG = re.compile(r"<[^<>]{0,200}>")
_WORD = re.compile(r"[^\W_]+")
#: Words about training AI, on the normalised text (whole words; ``train`` as a prefix).
_MENTION = re.compile(
    r"\b(?:train\w*|retrain\w*|pre ?train\w*|fine ?tun\w*|ai|a ?i models?|artificial intelligence|models?|"
    r"machine learning|deep learning|ml|llms?|neural|genai|generative|mining)\b"
)
_LATIN = re.compile(r"[a-z]")


def normalise(text: str) -> str:
    """``text`` as lower-case words of letters and digits separated by single spaces (see the module
    docstring for what is folded and dropped)."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    text = _TAG.sub(" ", _LINK.sub(r"\1", text))
    text = "".join(ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch))
    text = unicodedata.normalize("NFKC", text.casefold())
    return " ".join(_WORD.findall(text))


@dataclass(frozen=True)
class LicenceVerdict:
    """Whether training is allowed, and why (shown by ``sopgym list`` and ``sopgym sopbench``)."""

    training_allowed: bool
    reason: str


def judge_licence(text: str, *, allow_training: bool = False) -> LicenceVerdict:
    """Judge a domain's ``LICENSE.md`` text ('' when there is none).

    Args:
        text: the licence file's content.
        allow_training: the explicit override of a licence the matcher cannot settle (never of one
            that states the no-training condition).
    """
    words = f" {normalise(text)} "
    if f" {normalise(NO_TRAINING_CONDITION)} " in words:
        return LicenceVerdict(False, f"LICENSE.md forbids it: {NO_TRAINING_CONDITION!r}")
    found = sorted(set(_MENTION.findall(words)))
    mixed = sorted({w for w in words.split() if _LATIN.search(w) and not w.isascii()})
    if not found and not mixed:
        return LicenceVerdict(True, "LICENSE.md absent" if not text.strip() else "LICENSE.md says nothing about training")
    unsettled = "; ".join(filter(None, (
        f"mentions {', '.join(repr(w) for w in found)}" if found else "",
        f"has words mixing Latin and other letters {', '.join(repr(w) for w in mixed[:5])}" if mixed else "",
    )))
    if allow_training:
        return LicenceVerdict(True, f"allowed by an explicit override (LICENSE.md {unsettled}, without the no-training condition)")
    return LicenceVerdict(False, f"LICENSE.md {unsettled} and the matcher cannot settle whether it allows training "
                                 "(fail closed): read it, and if it allows training, override explicitly "
                                 "(sopgym.sopbench.register(..., allow_training=[name]) or SOPBENCH_ALLOW_TRAINING=name)")
