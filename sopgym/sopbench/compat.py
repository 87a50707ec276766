"""``sopbench-compat``: upstream's lenient answer rule, for comparing with published numbers only.

**Never a reward, never the primary metric.** Upstream counts a value as correct when both sides
are null-like (none, null, na, n/a, nan, unknown, empty), or when, after lower-casing, stripping and
mapping ``_``/``-`` to spaces, they are equal **or either is a substring of the other**. So the
one-character answer ``d`` matches every label containing a "d" (``Account Closure`` no,
``Temporary Suspension`` no, but ``Resolved``, ``Returned to Vendor``, ``fulfill_immediately``...):
see docs/sopbench.md for the measured effect. Our reward and evaluator use
:mod:`sopgym.scoring` (strict normalised exact match).

Also here: :func:`parse_upstream_output`, upstream's fallback chain for turning free text into an
answer (``<final_output>{json}</final_output>``, wrapper tags, any tag, bare JSON, a Python dict,
short plain text), so text answers from ``prompt_style="upstream"`` runs can be scored the same way.
The "fields found in tool results" step of upstream's chain is not reproduced (it reads the
transcript, not the answer).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["NAME", "compat_value_equal", "compat_correct", "parse_upstream_output", "compat_task_success"]

NAME = "sopbench-compat"
_NULL_LIKE = {"none", "null", "na", "n/a", "nan", "unknown", ""}


def _norm(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value).strip().lower().replace("_", " ").replace("-", " ").strip()


def compat_value_equal(answer: Any, expected: Any) -> bool:
    """Upstream's per-value rule (null-likes equal; separators mapped; two-way substring)."""
    a, e = _norm(answer), _norm(expected)
    if a in _NULL_LIKE and e in _NULL_LIKE:
        return True
    if a in _NULL_LIKE or e in _NULL_LIKE:
        return False
    return a == e or a in e or e in a


def compat_correct(answer: Any, expected: Mapping[str, Any]) -> bool:
    """Task correctness under the compat rule. Single field: ``answer`` may be the bare value.
    Multi-field: every expected key must be present in ``answer`` and match."""
    if len(expected) == 1:
        (key, want), = expected.items()
        got = answer.get(key) if isinstance(answer, Mapping) else answer
        if isinstance(answer, Mapping) and key not in answer:
            return False
        return compat_value_equal(got, want)
    if not isinstance(answer, Mapping):
        return False
    return all(k in answer and compat_value_equal(answer[k], v) for k, v in expected.items())


_WRAPPERS = ("final_response", "final_decision", "response", "output")


def parse_upstream_output(text: str, fields: Sequence[str]) -> Any:
    """Free text -> answer (a dict for multi-field tasks, a value for one field), upstream's way."""
    text = text or ""
    m = re.search(r"<final_output>(.*?)</final_output>", text, re.DOTALL)
    if m:
        try:
            return json.loads(m.group(1).strip())
        except json.JSONDecodeError:
            pass
    for tag in _WRAPPERS:
        m = re.search(rf"<{tag}>(.*?)</{tag}>", text, re.DOTALL)
        if m:
            return _structured(m.group(1).strip(), fields)
    tags = re.findall(r"<(\w+)>(.*?)</\1>", text, re.DOTALL)
    if tags:
        if len(fields) == 1:
            return tags[-1][1].strip()
        return {k: v.strip() for k, v in tags}
    structured = _structured(text.strip(), fields, plain=False)
    if structured is not None:
        return structured
    stripped = text.strip()
    return "unknown" if len(stripped) > 100 else stripped


def _structured(text: str, fields: Sequence[str], plain: bool = True) -> Any:
    for loader in (json.loads, ast.literal_eval):
        try:
            value = loader(text)
        except (ValueError, SyntaxError, json.JSONDecodeError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return text if plain else None


def compat_task_success(episode: Mapping[str, Any]) -> bool:
    """Compat correctness of a finished episode record (its submitted ``answer`` vs ``expected``)."""
    answer = episode.get("answer")
    return answer is not None and compat_correct(answer, episode["expected"])
