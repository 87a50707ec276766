"""Answer validation and normalisation: the only code the reward and the evaluator share.

Strict by design. A field is right when the submitted value, after validation against the field's
type and allowed values, normalises to the same value as the expected one:

* strings: Unicode NFC, case-folded, trimmed, inner whitespace collapsed to one space;
* numbers: compared as numbers (``3 == 3.0``; a float within 1e-9 relative), booleans as booleans
  (a boolean is never a number);
* null: only JSON ``null`` is null. The strings "null", "None", "N/A" are strings, and equal null
  only if the expected value is that same string.

No substring matching, no synonyms, no separator mapping (that is the SOP-Bench compatibility
scorer's job, which is never a reward).
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

__all__ = ["normalize_text", "normalize_value", "values_equal", "validate_answer", "field_scores", "INVALID"]


class _Invalid:
    def __repr__(self) -> str:
        return "INVALID"


#: The normal form of a value that is not a legal value of its field.
INVALID = _Invalid()


def normalize_text(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).casefold().split())


@lru_cache(maxsize=1024)
def _normalized_enum(enum: tuple) -> frozenset:
    return frozenset(normalize_text(e) for e in enum if isinstance(e, str))


def _field_attr(field: Any, name: str, default: Any = None) -> Any:
    if isinstance(field, Mapping):
        return field.get(name, default)
    return getattr(field, name, default)


def normalize_value(value: Any, field: Any) -> Any:
    """Normal form of ``value`` for ``field`` (an OutputField or a dict with type/enum/nullable)."""
    if value is None:
        return None if _field_attr(field, "nullable", False) else INVALID
    typ = _field_attr(field, "type", "string")
    if typ == "string":
        if not isinstance(value, str):
            return INVALID
        norm = normalize_text(value)
        enum = _field_attr(field, "enum")
        if enum is not None and norm not in _normalized_enum(tuple(enum)):
            return INVALID
        return norm
    if typ in ("integer", "number"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return INVALID
        if typ == "integer" and isinstance(value, float) and not value.is_integer():
            return INVALID
        enum = _field_attr(field, "enum")
        if enum is not None and not any(not isinstance(e, bool) and isinstance(e, (int, float)) and _num_eq(value, e) for e in enum):
            return INVALID
        return float(value)
    if typ == "boolean":
        return value if isinstance(value, bool) else INVALID
    raise ValueError(f"unknown field type {typ!r}; expected string, integer, number or boolean")


def _num_eq(a: float, b: float) -> bool:
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)


def values_equal(submitted: Any, expected: Any, field: Any) -> bool:
    """True when ``submitted`` is a legal value of ``field`` and normalises to ``expected``."""
    got = normalize_value(submitted, field)
    if got is INVALID:
        return False
    want = normalize_value(expected, field)
    if want is INVALID:  # a label outside the field's own schema can never be matched
        return False
    if isinstance(got, float) and isinstance(want, float):
        return _num_eq(got, want)
    return got == want and (got is None) == (want is None)


def validate_answer(answer: Any, fields: Iterable[Any]) -> str | None:
    """Why ``answer`` is not a well-formed answer (None when it is).

    Well-formed: a dict with exactly the fields' names as keys. Values are judged per field.
    """
    names = [_field_attr(f, "name") for f in fields]
    if not isinstance(answer, Mapping):
        return f"expected an object with fields {names}, got {type(answer).__name__}"
    missing = [n for n in names if n not in answer]
    extra = [k for k in answer if k not in names]
    if missing or extra:
        return f"expected exactly the fields {names}; missing {missing}, unexpected {extra}"
    return None


def field_scores(answer: Any, expected: Mapping[str, Any], fields: Iterable[Any]) -> dict[str, bool]:
    """Per-field correctness. A malformed answer (see :func:`validate_answer`) scores False everywhere."""
    fields = list(fields)
    if validate_answer(answer, fields) is not None:
        return {_field_attr(f, "name"): False for f in fields}
    return {
        _field_attr(f, "name"): values_equal(answer[_field_attr(f, "name")], expected[_field_attr(f, "name")], f)
        for f in fields
    }
