"""Turn an assistant reply into tool calls. Pure functions; never raises on any input.

Accepted forms:

* Hermes/Qwen blocks: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (several allowed,
  free text around them is kept as the message content);
* a bare JSON object ``{"name": ..., "arguments": {...}}`` as the whole reply (a Markdown code
  fence around it is allowed);
* an OpenAI-style assistant message dict with ``tool_calls`` (``arguments`` as a JSON string or
  an object).

A call that cannot be read becomes a :class:`ParsedCall` with ``error`` set (status ERROR_PARSE).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ParsedCall", "ParsedReply", "parse_reply", "MAX_CALLS_PER_TURN"]

MAX_CALLS_PER_TURN = 16
_BLOCK_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_CALL_KEYS = frozenset({"name", "arguments", "parameters", "id", "type"})
_FENCE_RE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


@dataclass(slots=True)
class ParsedCall:
    name: str | None
    arguments: Any  # decoded JSON (validated later against the tool's schema)
    error: str | None = None  # why the call could not be read
    raw: str = ""


@dataclass(slots=True)
class ParsedReply:
    content: str  # the reply's text (for the assistant message)
    calls: list[ParsedCall] = field(default_factory=list)
    error: str | None = None  # the whole reply could not be read (e.g. wrong action type)


def _call_from_obj(obj: Any, raw: str) -> ParsedCall:
    if not isinstance(obj, dict):
        return ParsedCall(None, None, f"expected a JSON object with 'name' and 'arguments', got {type(obj).__name__}", raw)
    if "function" in obj and isinstance(obj["function"], dict):  # OpenAI tool_call entry
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ParsedCall(None, None, f"expected a string 'name' in the tool call, got {name!r}", raw)
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except (json.JSONDecodeError, RecursionError) as exc:
            return ParsedCall(name, None, f"arguments of {name!r} are not valid JSON: {exc}", raw)
    extra = obj.keys() - _CALL_KEYS
    if extra:
        return ParsedCall(name, None, f"unexpected key(s) {sorted(extra)} in tool call; expected 'name' and 'arguments'", raw)
    return ParsedCall(name, args, None, raw)


def _loads(text: str) -> tuple[Any, str | None]:
    try:
        return json.loads(text), None
    except (json.JSONDecodeError, RecursionError) as exc:
        return None, f"tool call is not valid JSON: {exc}"


def _parse_text(text: str) -> ParsedReply:
    blocks = _BLOCK_RE.findall(text)
    if blocks:
        calls = []
        for raw in blocks:
            obj, err = _loads(raw.strip())
            calls.append(ParsedCall(None, None, err, raw) if err else _call_from_obj(obj, raw))
        if text.count("<tool_call>") != len(blocks) or text.count("</tool_call>") != len(blocks):
            calls.append(ParsedCall(None, None, "unbalanced <tool_call> tag: expected <tool_call>{...}</tool_call>", text))
        return ParsedReply(text, calls)
    if "<tool_call>" in text:
        return ParsedReply(text, [ParsedCall(None, None, "unclosed <tool_call> tag: expected <tool_call>{...}</tool_call>", text)])
    stripped = text.strip()
    fenced = _FENCE_RE.match(stripped)
    if fenced:
        stripped = fenced.group(1)
    if stripped.startswith("{") and stripped.endswith("}"):
        obj, err = _loads(stripped)
        if err:
            return ParsedReply(text, [ParsedCall(None, None, err, stripped)])
        if isinstance(obj, dict) and ("name" in obj or "function" in obj):
            return ParsedReply(text, [_call_from_obj(obj, stripped)])
    return ParsedReply(text, [])


def _parse_message(msg: dict) -> ParsedReply:
    content = msg.get("content") or ""
    if not isinstance(content, str):
        return ParsedReply("", error=f"assistant content must be a string or null, got {type(content).__name__}")
    tool_calls = msg.get("tool_calls")
    if tool_calls is None:
        return _parse_text(content)
    if not isinstance(tool_calls, list):
        return ParsedReply(content, error=f"tool_calls must be a list, got {type(tool_calls).__name__}")
    calls = [_call_from_obj(tc, json.dumps(tc, default=str)[:500]) for tc in tool_calls]
    return ParsedReply(content, calls)


def parse_reply(action: Any) -> ParsedReply:
    """Parse one assistant reply (a string or an assistant message dict)."""
    if isinstance(action, str):
        reply = _parse_text(action)
    elif isinstance(action, dict):
        if action.get("role", "assistant") != "assistant":
            return ParsedReply("", error=f"expected an assistant message, got role {action.get('role')!r}")
        reply = _parse_message(action)
    else:
        return ParsedReply("", error=f"expected the reply as a str or an assistant message dict, got {type(action).__name__}")
    if len(reply.calls) > MAX_CALLS_PER_TURN:
        kept = reply.calls[:MAX_CALLS_PER_TURN]
        kept.append(ParsedCall(None, None, f"too many tool calls in one reply: expected at most {MAX_CALLS_PER_TURN}, got {len(reply.calls)}"))
        reply = ParsedReply(reply.content, kept)
    return reply
