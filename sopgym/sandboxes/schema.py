"""JSON Schema validation with light coercion, standard library only.

Supports the subset tool specs use: ``type`` (one or a list), ``properties``, ``required``,
``additionalProperties``, ``enum``, ``const``, ``minimum``/``maximum``, ``minLength``/``maxLength``,
``pattern``, ``items``, ``minItems``/``maxItems``, ``default`` (not applied), ``description``.

Coercion is deliberately narrow and never loses information: an integral float or a decimal
string becomes an ``integer``; a numeric string becomes a ``number``; ``"true"``/``"false"``
become a ``boolean``. Nothing is coerced *to* a string. Error messages say what was expected and
what was given, with the path of the offending value.

Numbers of any size are handled without raising: a decimal string of more than
:data:`MAX_INT_DIGITS` digits is not coerced to an integer (a clear schema error: Python refuses to
convert such strings, and the env refuses such integers in a reply for the same reason), and
integers beyond float range are compared exactly, never converted to float.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["SchemaError", "validate", "check_schema", "MAX_INT_DIGITS"]

#: Most digits an integer may have where text becomes an integer (a reply's JSON, a quoted integer
#: argument). 640 is the smallest limit ``sys.set_int_max_str_digits`` accepts, so every accepted
#: integer can be written back as text in any interpreter (records, logs, JSONL) without raising.
MAX_INT_DIGITS = 640

_INT_RE = re.compile(r"^[+-]?\d+$")
_NUM_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")


_PATTERNS: dict[str, re.Pattern] = {}


def _compiled(pattern: str) -> re.Pattern:
    compiled = _PATTERNS.get(pattern)
    if compiled is None:
        compiled = _PATTERNS[pattern] = re.compile(pattern)
    return compiled


class SchemaError(ValueError):
    """Arguments do not match the schema. ``str(err)`` is the agent-visible message."""


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _short(value: Any) -> str:
    """A short repr for messages; never raises (a huge integer or a very long string is described)."""
    if isinstance(value, str) and len(value) > 60:
        return repr(value[:57]) + f"... ({len(value)} characters)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 190:
        return f"<integer of about {int(value.bit_length() * 0.30103) + 1} digits>"
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        return f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def _digit_count(text: str) -> int:
    return len(text) - (text[:1] in "+-")


def _hint(value: Any) -> str:
    if isinstance(value, str) and _INT_RE.match(value.strip()) and _digit_count(value.strip()) > MAX_INT_DIGITS:
        return f" (an integer may have at most {MAX_INT_DIGITS} digits)"
    return ""


def _as_boolean(value: Any) -> tuple[bool, Any]:
    if isinstance(value, bool):
        return True, value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return True, value.strip().lower() == "true"
    return False, value


def _as_integer(value: Any) -> tuple[bool, Any]:
    if isinstance(value, bool):
        return False, value
    if isinstance(value, int):
        return True, value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return True, int(value)
    if isinstance(value, str) and _INT_RE.match(value.strip()) and _digit_count(value.strip()) <= MAX_INT_DIGITS:
        return True, int(value.strip())
    return False, value


def _as_number(value: Any) -> tuple[bool, Any]:
    if isinstance(value, bool):
        return False, value
    if isinstance(value, int):
        return True, value
    if isinstance(value, float):
        return math.isfinite(value), value
    if isinstance(value, str) and _NUM_RE.match(value.strip()):
        number = float(value.strip())
        if not math.isfinite(number):
            return False, value
        return True, int(number) if _INT_RE.match(value.strip()) else number
    return False, value


#: JSON type -> ``value -> (matched, the value read as that type)``. Nothing is coerced to a string,
#: an array or an object.
_COERCIONS = {
    "null": lambda value: (value is None, value),
    "boolean": _as_boolean,
    "integer": _as_integer,
    "number": _as_number,
    "string": lambda value: (isinstance(value, str), value),
    "array": lambda value: (isinstance(value, (list, tuple)), value),
    "object": lambda value: (isinstance(value, dict), value),
}


def _coerce(value: Any, typ: str) -> tuple[bool, Any]:
    """Try to read ``value`` as JSON type ``typ``. Returns (matched, value)."""
    coercion = _COERCIONS.get(typ)
    if coercion is None:
        raise ValueError(f"unsupported JSON Schema type {typ!r}; expected one of {_TYPES}")
    return coercion(value)


def _typed(value: Any, types: str | list[str], where: str) -> Any:
    """``value`` read as the schema's ``type`` (one or a list), or a SchemaError."""
    if isinstance(types, str):
        ok, value = _coerce(value, types)
        if not ok:
            raise SchemaError(f"{where}: expected {types}, got {_type_name(value)} {_short(value)}{_hint(value)}")
        return value
    # Exact matches first, so that a string stays a string when both are allowed.
    actual = _type_name(value)
    for typ in sorted(types, key=lambda t: t != actual):
        ok, coerced = _coerce(value, typ)
        if ok:
            return coerced
    raise SchemaError(f"{where}: expected {' or '.join(types)}, got {actual} {_short(value)}{_hint(value)}")


def _check_string(value: str, schema: Mapping[str, Any], where: str) -> None:
    if "minLength" in schema and len(value) < schema["minLength"]:
        raise SchemaError(f"{where}: expected at least {schema['minLength']} characters, got {len(value)}")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        raise SchemaError(f"{where}: expected at most {schema['maxLength']} characters, got {len(value)}")
    if "pattern" in schema and not _compiled(schema["pattern"]).search(value):
        raise SchemaError(f"{where}: expected a string matching /{schema['pattern']}/, got {_short(value)}")


def _check_number(value: int | float, schema: Mapping[str, Any], where: str) -> None:
    if "minimum" in schema and value < schema["minimum"]:
        raise SchemaError(f"{where}: expected a value >= {schema['minimum']}, got {_short(value)}")
    if "maximum" in schema and value > schema["maximum"]:
        raise SchemaError(f"{where}: expected a value <= {schema['maximum']}, got {_short(value)}")


def _validate_array(value: list | tuple, schema: Mapping[str, Any], where: str) -> list:
    if "minItems" in schema and len(value) < schema["minItems"]:
        raise SchemaError(f"{where}: expected at least {schema['minItems']} items, got {len(value)}")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        raise SchemaError(f"{where}: expected at most {schema['maxItems']} items, got {len(value)}")
    item_schema = schema.get("items")
    return [_validate(item, item_schema, f"{where}[{i}]") if item_schema else item for i, item in enumerate(value)]


def _validate_object(value: dict, schema: Mapping[str, Any], path: str, where: str) -> dict:
    props: Mapping[str, Any] = schema.get("properties", {})
    missing = [name for name in schema.get("required", ()) if name not in value]
    if missing:
        raise SchemaError(f"{where}: missing required field(s) {missing}; expected fields {list(props)}")
    extra = [k for k in value if k not in props]
    if extra and schema.get("additionalProperties", False) is False and props is not None:
        raise SchemaError(f"{where}: unexpected field(s) {extra}; expected only {list(props)}")
    out = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise SchemaError(f"{where}: expected string keys, got {_short(key)}")
        sub = props.get(key)
        out[key] = _validate(item, sub, f"{path + '.' if path else ''}{key}") if sub else item
    return out


def _validate(value: Any, schema: Mapping[str, Any], path: str) -> Any:
    where = path or "arguments"
    if "const" in schema and value != schema["const"]:
        raise SchemaError(f"{where}: expected {schema['const']!r}, got {_short(value)}")
    if schema.get("type") is not None:
        value = _typed(value, schema["type"], where)
    if "enum" in schema:
        allowed = list(schema["enum"])
        if not any(value == a and _type_name(value) == _type_name(a) for a in allowed):
            raise SchemaError(f"{where}: expected one of {allowed}, got {_short(value)}")
    # The keywords of each type apply to values of that type only (a value has one).
    if isinstance(value, str):
        _check_string(value, schema, where)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_number(value, schema, where)
    elif isinstance(value, (list, tuple)):
        value = _validate_array(value, schema, where)
    elif isinstance(value, dict):
        value = _validate_object(value, schema, path, where)
    return value


def validate(arguments: Any, schema: Mapping[str, Any]) -> dict[str, Any]:
    """Validate and coerce tool arguments.

    Args:
        arguments: the decoded JSON arguments the agent passed.
        schema: a JSON Schema with ``type: object``. ``additionalProperties`` defaults to False:
            an unexpected argument is an error the agent sees.

    Returns:
        The coerced arguments (a new dict).

    Raises:
        SchemaError: with a message naming the path, the expected and the actual value.
    """
    if not isinstance(arguments, dict):
        raise SchemaError(f"arguments: expected a JSON object, got {_type_name(arguments)} {_short(arguments)}")
    fast = _fast_check(schema)
    if fast is not None and fast(arguments):
        return dict(arguments)
    return _validate(arguments, schema, "")


# -- Fast path -------------------------------------------------------------------------------------
# Most calls are an object of scalar arguments that are already valid and need no coercion. For such
# schemas a checker is compiled once; it answers True only when the slow path (_validate) would return
# the arguments unchanged. Anything else (a coercion, an error to word, a nested schema) goes to the
# slow path, which stays the reference: tests/test_schema.py checks both agree.
_SIMPLE_KEYS = frozenset({"type", "enum", "pattern", "minLength", "maxLength", "minimum", "maximum",
                          "description", "title", "examples", "default"})
_FAST: dict[int, tuple[Mapping[str, Any], Any]] = {}


def _scalar_check(schema: Mapping[str, Any]):
    typ = schema.get("type")
    if not isinstance(typ, str) or not set(schema) <= _SIMPLE_KEYS or typ not in ("string", "integer", "number", "boolean"):
        return None
    enum = schema.get("enum")
    pattern = _compiled(schema["pattern"]) if "pattern" in schema else None
    lo_len, hi_len = schema.get("minLength"), schema.get("maxLength")
    lo, hi = schema.get("minimum"), schema.get("maximum")
    kinds = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,)}[typ]
    if enum is not None:
        allowed = frozenset((type(e), e) for e in enum if type(e) in kinds)

    def check(value: Any) -> bool:
        if type(value) not in kinds:
            return False
        if typ == "number" and type(value) is float and not math.isfinite(value):
            return False
        if enum is not None and (type(value), value) not in allowed:
            return False
        if typ == "string":
            if lo_len is not None and len(value) < lo_len or hi_len is not None and len(value) > hi_len:
                return False
            if pattern is not None and not pattern.search(value):
                return False
        elif typ != "boolean":
            if lo is not None and value < lo or hi is not None and value > hi:
                return False
        return True

    return check


def _fast_check(schema: Mapping[str, Any]):
    cached = _FAST.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    check = None
    props = schema.get("properties", {})
    if (schema.get("type") == "object" and set(schema) <= {"type", "properties", "required", "additionalProperties", "description", "title"}
            and schema.get("additionalProperties", False) is False and isinstance(props, dict)):
        checks = {name: _scalar_check(sub) for name, sub in props.items()}
        if all(c is not None for c in checks.values()):
            required = tuple(schema.get("required", ()))

            def check(arguments: dict) -> bool:
                for name in required:
                    if name not in arguments:
                        return False
                for name, value in arguments.items():
                    fn = checks.get(name)
                    if fn is None or not fn(value):
                        return False
                return True

    _FAST[id(schema)] = (schema, check)
    return check


def check_schema(schema: Mapping[str, Any], path: str = "schema") -> None:
    """Raise ValueError if ``schema`` uses anything this validator does not understand."""
    known = {
        "type", "properties", "required", "additionalProperties", "enum", "const", "minimum",
        "maximum", "minLength", "maxLength", "pattern", "items", "minItems", "maxItems",
        "default", "description", "title", "examples",
    }
    unknown = set(schema) - known
    if unknown:
        raise ValueError(f"{path}: unsupported JSON Schema keyword(s) {sorted(unknown)}")
    types = schema.get("type")
    for typ in [types] if isinstance(types, str) else list(types or []):
        if typ not in _TYPES:
            raise ValueError(f"{path}: unknown type {typ!r}; expected one of {_TYPES}")
    for name, sub in schema.get("properties", {}).items():
        check_schema(sub, f"{path}.{name}")
    for name in schema.get("required", ()):
        if name not in schema.get("properties", {}):
            raise ValueError(f"{path}: required field {name!r} is not in properties")
    if isinstance(schema.get("items"), Mapping):
        check_schema(schema["items"], f"{path}[]")
