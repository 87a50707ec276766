"""Answer validation and normalisation: the only code the reward and the evaluator share.

Strict by design. A field is right when the submitted value, after validation against the field's
type and allowed values, normalises to the same value as the expected one:

* strings: Unicode NFC, case-folded, trimmed, inner whitespace collapsed to one space;
* numbers: compared as numbers (``3 == 3.0``; a float within 1e-9 relative), booleans as booleans
  (a boolean is never a number). An integer beyond float range (``10**309``) is a legal integer,
  compared exactly: it is never converted to float, so it cannot raise ``OverflowError`` (and it
  equals no finite float);
* null: only JSON ``null`` is null. The strings "null", "None", "N/A" are strings, and equal null
  only if the expected value is that same string.

No substring matching, no synonyms, no separator mapping (that is the SOP-Bench compatibility
scorer's job, which is never a reward).

Nothing here raises on a submitted value, whatever its type or size. A field description that is
itself malformed (an unknown type, an ``enum`` that is not a list), as a hand-edited record may
hold, raises ``ValueError`` naming it.
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


def _allowed_texts(enum: Any) -> frozenset:
    """The normal forms of an enum's string values (cached for the usual hashable enum)."""
    kind = type(enum)
    if kind is not tuple and kind is not list:
        raise ValueError(f"a field's enum must be a list of allowed values or null, got {kind.__name__}")
    try:
        return _normalized_enum(enum if kind is tuple else tuple(enum))
    except TypeError:  # an unhashable allowed value, as a hand-edited record may hold
        return frozenset(normalize_text(e) for e in enum if isinstance(e, str))


def _as_float(value: int | float) -> float | None:
    """``float(value)``, or None for an integer beyond float range."""
    try:
        return float(value)
    except OverflowError:
        return None


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
        if enum is not None and norm not in _allowed_texts(enum):
            return INVALID
        return norm
    if typ in ("integer", "number"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return INVALID
        if isinstance(value, float) and not (math.isfinite(value) and (typ == "number" or value.is_integer())):
            return INVALID
        enum = _field_attr(field, "enum")
        if enum is not None:
            if type(enum) is not tuple and type(enum) is not list:
                raise ValueError(f"a field's enum must be a list of allowed values or null, got {type(enum).__name__}")
            if not any(not isinstance(e, bool) and isinstance(e, (int, float)) and _num_eq(value, e) for e in enum):
                return INVALID
        try:
            return float(value)
        except OverflowError:  # an integer beyond float range stays exact
            return value
    if typ == "boolean":
        return value if isinstance(value, bool) else INVALID
    shown = typ if isinstance(typ, str) else type(typ).__name__
    raise ValueError(f"unknown field type {shown[:60]!r}; expected string, integer, number or boolean")


def _num_eq(a: int | float, b: int | float) -> bool:
    """Numbers equal within 1e-9 relative; exact for an integer beyond float range (never raises)."""
    fa, fb = _as_float(a), _as_float(b)
    if fa is None or fb is None:
        return a == b  # int == int exactly; a huge int never equals a finite float
    return math.isclose(fa, fb, rel_tol=1e-9, abs_tol=1e-12)


def values_equal(submitted: Any, expected: Any, field: Any) -> bool:
    """True when ``submitted`` is a legal value of ``field`` and normalises to ``expected``."""
    got = normalize_value(submitted, field)
    if got is INVALID:
        return False
    want = normalize_value(expected, field)
    if want is INVALID:  # a label outside the field's own schema can never be matched
        return False
    if type(got) is float and type(want) is float:
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)
    if type(got) is int or type(want) is int:  # an integer beyond float range (normal forms are float otherwise)
        return _num_eq(got, want) if type(got) in (int, float) and type(want) in (int, float) else False
    return got == want and (got is None) == (want is None)


def _short_keys(value: Any) -> str:
    if not isinstance(value, Mapping):
        return f"a {type(value).__name__}"
    return "fields " + repr([str(k)[:40] for k in list(value)[:20]])


def _names(fields: Iterable[Any]) -> list[str]:
    names = [_field_attr(f, "name") for f in fields]
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise ValueError(f"field names must be strings, got {', '.join(type(n).__name__ for n in bad)}")
    return names


def validate_answer(answer: Any, fields: Iterable[Any]) -> str | None:
    """Why ``answer`` is not a well-formed answer (None when it is).

    Well-formed: a dict with exactly the fields' names as keys. Values are judged per field.

    Raises:
        ValueError: a field name that is not a string.
    """
    return _why_malformed(answer, _names(fields))


def _why_malformed(answer: Any, names: list[str]) -> str | None:
    if not isinstance(answer, Mapping):
        return f"expected an object with fields {names}, got {type(answer).__name__}"
    missing = [n for n in names if n not in answer]
    extra = [k for k in answer if k not in names]
    if missing or extra:
        return f"expected exactly the fields {names}; missing {missing}, unexpected {extra}"
    return None


def field_scores(answer: Any, expected: Mapping[str, Any], fields: Iterable[Any]) -> dict[str, bool]:
    """Per-field correctness. A malformed answer (see :func:`validate_answer`) scores False everywhere.

    Raises:
        ValueError: a malformed field description or an expected answer without every field (a
            hand-edited record); never for anything about ``answer``.
    """
    fields = list(fields)
    names = _names(fields)
    if not isinstance(expected, Mapping):
        raise ValueError(f"the expected answer must be an object with fields {names}, got {_short_keys(expected)}")
    for name in names:
        if name not in expected:
            raise ValueError(f"the expected answer must have every field {names}, got {_short_keys(expected)}")
    if _why_malformed(answer, names) is not None:
        return {name: False for name in names}
    return {name: values_equal(answer[name], expected[name], f) for name, f in zip(names, fields)}
