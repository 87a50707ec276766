"""Turn an assistant reply into tool calls. Pure functions; never raises on any input.

Accepted forms:

* Hermes/Qwen blocks: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (several allowed,
  free text around them is kept as the message content);
* a bare JSON object ``{"name": ..., "arguments": {...}}`` as the whole reply (a Markdown code
  fence around it is allowed);
* an OpenAI-style assistant message dict with ``tool_calls`` (``arguments`` as a JSON string or
  an object).

A call that cannot be read becomes a :class:`ParsedCall` with ``error`` set (status ERROR_PARSE);
a reply that cannot be read at all sets :attr:`ParsedReply.error`.

Bounds (each a policy mistake with a message, never an exception, never a stall):

* a reply longer than ``max_chars`` (text; for a message dict, its content plus its calls' text
  and values) is not read at all: ``error`` says how long it was and what is accepted;
* parsing is linear in the reply's length (tags are found with ``str.find``, never with a
  backtracking regex over the whole reply);
* arguments are JSON values: objects with string keys, arrays, strings, finite or non-finite
  floats, booleans, null, and integers of at most :data:`MAX_INT_DIGITS` digits, nested at most
  :data:`MAX_JSON_DEPTH` deep, at most :data:`MAX_JSON_VALUES` values per call. Anything else in a message dict (numpy scalars, sets, bytes,
  ``Decimal``, dates, objects that contain themselves, tuple keys) makes that call unreadable.
  Tuples are read as arrays. What a :class:`ParsedCall` carries is a fresh copy in plain Python
  types, so ``json.dumps`` of it never raises.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sopgym.sandboxes.schema import MAX_INT_DIGITS

__all__ = [
    "ParsedCall", "ParsedReply", "parse_reply", "MAX_CALLS_PER_TURN", "MAX_REPLY_CHARS", "MAX_JSON_DEPTH",
    "MAX_JSON_VALUES", "MAX_INT_DIGITS",
]

MAX_CALLS_PER_TURN = 16
#: Default bound on a reply's length (the env passes its action space's ``max_length``).
MAX_REPLY_CHARS = 1_000_000
#: Deepest nesting of objects and arrays in a call's arguments.
MAX_JSON_DEPTH = 64
#: Most values (objects, arrays and scalars) in a call's arguments. Tool arguments hold a few dozen;
#: the bound keeps reading a hostile one (2**60 values that share themselves) to milliseconds.
MAX_JSON_VALUES = 10_000

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_CALL_KEYS = frozenset({"name", "arguments", "parameters", "id", "type"})


class _Unreadable(ValueError):
    """A reply value the env does not read (too big, too deep, not JSON). The message is agent-visible."""


@dataclass(slots=True)
class ParsedCall:
    name: str | None
    arguments: Any  # a JSON value (validated later against the tool's schema); see the module docstring
    error: str | None = None  # why the call could not be read
    raw: str = ""


@dataclass(slots=True)
class ParsedReply:
    content: str  # the reply's text (for the assistant message)
    calls: list[ParsedCall] = field(default_factory=list)
    error: str | None = None  # the whole reply could not be read (e.g. wrong action type, too long)


# -- JSON values ---------------------------------------------------------------------------------
_INT_BOUND = 10**MAX_INT_DIGITS  # integers strictly inside (-bound, bound) have at most MAX_INT_DIGITS digits


def _parse_int(text: str) -> int:
    digits = len(text) - (text[0] == "-")
    if digits > MAX_INT_DIGITS:
        raise _Unreadable(f"an integer has {digits} digits; at most {MAX_INT_DIGITS} are accepted")
    return int(text)


_DECODER = json.JSONDecoder(parse_int=_parse_int)


def _loads(text: str, what: str = "tool call") -> tuple[Any, str | None]:
    """Decode the reply's JSON text. Returns (value, None) or (None, the agent-visible reason)."""
    try:
        return _DECODER.decode(text), None
    except _Unreadable as exc:
        return None, f"{what} cannot be read: {exc}"
    except json.JSONDecodeError as exc:
        return None, f"{what} is not valid JSON: {exc}"
    except RecursionError:
        return None, f"{what} is nested too deeply: expected at most {MAX_JSON_DEPTH} levels"


class _TooLarge(Exception):
    """A message dict's values exceed the reply's size bound (the whole reply is refused)."""


def _json_value(value: Any, budget: list[int], depth: int = 0, where: str = "arguments") -> Any:
    """A copy of ``value`` in plain JSON types; :class:`_Unreadable` names the offending path.

    ``budget[0]`` is what is left of the reply's size bound (every value costs one, every string and
    key its length: :class:`_TooLarge` when it runs out), ``budget[1]`` what is left of the call's
    MAX_JSON_VALUES, so a huge or self-sharing structure stops early instead of being walked to the
    end. Recursion is bounded by MAX_JSON_DEPTH, so a value that contains itself ends as "nested too
    deeply".
    """
    budget[0] -= 1
    budget[1] -= 1
    if budget[1] < 0:
        raise _Unreadable(f"more than {MAX_JSON_VALUES} values; at most {MAX_JSON_VALUES} are accepted")
    kind = type(value)
    if kind is str:
        budget[0] -= len(value)
    if budget[0] < 0:
        raise _TooLarge
    if kind is str or kind is float or kind is bool or value is None:
        return value
    if kind is int:
        if not -_INT_BOUND < value < _INT_BOUND:
            raise _Unreadable(f"{where}: an integer has more than {MAX_INT_DIGITS} digits; at most {MAX_INT_DIGITS} are accepted")
        return value
    if kind is dict or kind is list or kind is tuple:
        if depth >= MAX_JSON_DEPTH:
            raise _Unreadable(f"{where}: nested deeper than {MAX_JSON_DEPTH} levels (or it contains itself)")
        if kind is dict:
            out = {}
            for key, item in value.items():
                if type(key) is not str:
                    raise _Unreadable(f"{where}: object keys must be strings, got {type(key).__name__}")
                budget[0] -= len(key)
                out[key] = _json_value(item, budget, depth + 1, f"{where}.{key[:40]}")
            return out
        return [_json_value(item, budget, depth + 1, f"{where}[{i}]") for i, item in enumerate(value)]
    raise _Unreadable(f"{where}: expected a JSON value (object, array, string, number, boolean or null), got {kind.__name__}")


def _flat_size(args: Any) -> int | None:
    """The size (as the reply budget counts it) of the common case that needs no copy: an object of
    plain scalars and short integers. None for anything else."""
    if type(args) is not dict:
        return None
    size = 1
    for key, value in args.items():
        kind = type(value)
        if kind is str:
            size += len(value)
        elif kind is not float and kind is not bool and value is not None and (kind is not int or not -_INT_BOUND < value < _INT_BOUND):
            return None
        if type(key) is not str:
            return None
        size += len(key) + 1
    return size


def _describe(value: Any) -> str:
    """A short description of a value for a message; never raises."""
    if value is None or type(value) in (str, bool, float) or (type(value) is int and -10**20 < value < 10**20):
        return repr(value)[:60]
    return f"a value of type {type(value).__name__}"


# -- Calls ---------------------------------------------------------------------------------------
def _call_from_obj(obj: Any, raw: str, budget: list[int]) -> ParsedCall:
    if type(obj) is not dict:
        return ParsedCall(None, None, f"expected a JSON object with 'name' and 'arguments', got {type(obj).__name__}", raw)
    function = obj.get("function")
    if type(function) is dict:  # OpenAI tool_call entry
        obj = function
    name = obj.get("name")
    if type(name) is not str or not name:
        return ParsedCall(None, None, f"expected a string 'name' in the tool call, got {_describe(name)}", raw)
    shown = repr(name[:60])
    args = obj.get("arguments", obj.get("parameters", {}))
    if type(args) is str:
        budget[0] -= len(args)
        if budget[0] < 0:
            raise _TooLarge
        if not args.strip():
            args = {}
        else:
            args, err = _loads(args, f"arguments of {shown}")
            if err:
                return ParsedCall(name, None, err, raw)
    extra = [k for k in obj if k not in _CALL_KEYS]
    if extra:
        keys = sorted(_describe(k) for k in extra)
        return ParsedCall(name, None, f"unexpected key(s) {keys} in tool call; expected 'name' and 'arguments'", raw)
    size = _flat_size(args)
    if size is not None:
        budget[0] -= size
        if budget[0] < 0:
            raise _TooLarge
    else:
        state = [budget[0], MAX_JSON_VALUES]  # the reply's size budget is shared; the value count is per call
        try:
            args = _json_value(args, state)
        except _Unreadable as exc:
            return ParsedCall(name, None, f"arguments of {shown} cannot be read: {exc}", raw)
        budget[0] = state[0]
    return ParsedCall(name, args, None, raw)


def _blocks(text: str) -> tuple[list[str], int]:
    """The contents of the first MAX_CALLS_PER_TURN complete ``<tool_call>...</tool_call>`` blocks and
    how many complete blocks there are. Linear: each ``find`` starts where the previous one stopped,
    and an opening tag with no closing tag after it ends the scan (a regex ``<tool_call>(.*?)</tool_call>``
    rescans the rest of the reply from every unclosed tag: quadratic)."""
    blocks, count, pos = [], 0, 0
    while True:
        start = text.find(_OPEN, pos)
        if start < 0:
            break
        end = text.find(_CLOSE, start + len(_OPEN))
        if end < 0:
            break
        count += 1
        if count <= MAX_CALLS_PER_TURN:
            blocks.append(text[start + len(_OPEN):end])
        pos = end + len(_CLOSE)
    return blocks, count


def _unfenced(stripped: str) -> str:
    """The inside of a Markdown code fence (```json ... ```) around the whole reply, else the reply."""
    if len(stripped) >= 6 and stripped.startswith("```") and stripped.endswith("```"):
        inner = stripped[3:-3]
        return (inner[4:] if inner.startswith("json") else inner).strip()
    return stripped


def _parse_text(text: str) -> ParsedReply:
    try:
        return _parse_bounded_text(text)
    except _TooLarge:  # not expected: what the text decodes to is no larger than the text
        return ParsedReply(text, error="reply is too large to read; nothing in it was run")


def _parse_bounded_text(text: str) -> ParsedReply:
    # The caller bounded the text's length. What it decodes to costs at most its length in the size
    # budget, plus as much again for arguments given as a JSON string (counted as text, then decoded).
    budget = [2 * len(text) + 16]
    blocks, count = _blocks(text)
    if blocks:
        calls = []
        for raw in blocks:
            obj, err = _loads(raw.strip())
            calls.append(ParsedCall(None, None, err, raw) if err else _call_from_obj(obj, raw, budget))
        if count > MAX_CALLS_PER_TURN:
            calls.append(ParsedCall(None, None, f"too many tool calls in one reply: expected at most {MAX_CALLS_PER_TURN}, got {count}"))
        elif text.count(_OPEN) != count or text.count(_CLOSE) != count:
            calls.append(ParsedCall(None, None, "unbalanced <tool_call> tag: expected <tool_call>{...}</tool_call>", text[:200]))
        return ParsedReply(text, calls)
    if _OPEN in text:
        return ParsedReply(text, [ParsedCall(None, None, "unclosed <tool_call> tag: expected <tool_call>{...}</tool_call>", text[:200])])
    stripped = _unfenced(text.strip())
    if stripped.startswith("{") and stripped.endswith("}"):
        obj, err = _loads(stripped)
        if err:
            return ParsedReply(text, [ParsedCall(None, None, err, stripped[:200])])
        if isinstance(obj, dict) and ("name" in obj or "function" in obj):
            return ParsedReply(text, [_call_from_obj(obj, stripped[:200], budget)])
    return ParsedReply(text, [])


def _parse_message(msg: dict, max_chars: int) -> ParsedReply:
    content = msg.get("content")
    if content is None:
        content = ""
    elif type(content) is not str:
        return ParsedReply("", error=f"assistant content must be a string or null, got {type(content).__name__}")
    if len(content) > max_chars:
        return ParsedReply("", error=_too_long(len(content), max_chars))
    tool_calls = msg.get("tool_calls")
    if tool_calls is None:
        return _parse_text(content)
    if type(tool_calls) is not list:
        return ParsedReply(content, error=f"tool_calls must be a list, got {type(tool_calls).__name__}")
    budget = [max_chars - len(content)]
    try:
        calls = [_call_from_obj(tc, "", budget) for tc in tool_calls[:MAX_CALLS_PER_TURN]]
    except _TooLarge:
        return ParsedReply(content, error=f"reply is too large: its content and tool calls exceed {max_chars} characters; nothing in it was run")
    if len(tool_calls) > MAX_CALLS_PER_TURN:
        calls.append(ParsedCall(None, None, f"too many tool calls in one reply: expected at most {MAX_CALLS_PER_TURN}, got {len(tool_calls)}"))
    return ParsedReply(content, calls)


def _too_long(length: int, limit: int) -> str:
    return f"reply is too long: expected at most {limit} characters, got {length}; nothing in it was run"


def parse_reply(action: Any, max_chars: int = MAX_REPLY_CHARS) -> ParsedReply:
    """Parse one assistant reply (a string or an assistant message dict).

    Args:
        action: the reply as the policy gave it.
        max_chars: the longest reply read (see the module docstring); a longer one is an error.

    Returns:
        The parsed reply. Never raises: whatever cannot be read is an ``error`` on the reply or a call.
    """
    if isinstance(action, str):
        if len(action) > max_chars:
            return ParsedReply(action, error=_too_long(len(action), max_chars))
        return _parse_text(action)
    if isinstance(action, dict):
        role = action.get("role", "assistant")
        if type(role) is not str or role != "assistant":
            return ParsedReply("", error=f"expected an assistant message, got role {_describe(role)}")
        return _parse_message(action, max_chars)
    return ParsedReply("", error=f"expected the reply as a str or an assistant message dict, got {type(action).__name__}")
