"""What an OpenAI-compatible server answers to ``/v1/chat/completions``, read with bounds and checked
field by field: a malformed answer raises :class:`BadAnswer` (one failed attempt, retried like a 5xx
by :mod:`.openai_chat`), never another exception out of the run.

* **JSON** (:func:`loads`): ``NaN`` and ``Infinity`` read as floats (they fail the checks where a
  number matters); an integer literal of more than 64 digits reads as :class:`LongInteger` instead of
  raising Python's digit-limit error; nesting beyond the recursion limit is a :class:`BadAnswer`.
* **Shape**: one choice was asked for, so a choice whose ``index`` is not 0 is malformed, as are a
  body without a choice, a message, delta, tool call or ``function`` that is not an object, text that
  is not a string, and a tool-call delta that skips an index (``index: 7`` before calls 0..6). Chunks
  without ``choices`` (a usage-only chunk, ``{"type": "ping"}`` and other keep-alive events) carry no
  answer and are skipped; so are SSE comments (``: keepalive``). ``delta: null`` is an empty delta.
  A stream must end with ``[DONE]`` or after a ``finish_reason``: one cut short is malformed.
* **Bytes**: the reply's text (content, tool names and arguments: what a record stores and every
  later request of the episode carries) is capped at ``max_reply_bytes``; reading stops there (the
  connection is then closed, so a server that aborts on disconnect stops generating) and the answer
  is labelled ``truncated="max_reply_bytes"``. One SSE event, or a whole non-streamed body, longer
  than :func:`wire_limit` is a :class:`BadAnswer` (a non-streamed body cannot be cut and parsed).
* **Usage** (:func:`checked_usage`): a count that is not an integer, negative or more than
  :data:`MAX_USAGE_TOKENS` is recorded as missing (None) with a warning naming it, so it is never
  summed into totals or cost.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BadAnswer", "Answer", "LongInteger", "MAX_USAGE_TOKENS", "loads", "checked_usage", "wire_limit",
           "read_body", "parse_body", "StreamReader"]

#: More tokens than any model's context holds: a count above it is absurd (recorded as missing).
MAX_USAGE_TOKENS = 100_000_000
_MAX_INT_DIGITS = 64
REPLY_TRUNCATION = "max_reply_bytes"


class BadAnswer(Exception):
    """An answer that cannot be used: malformed, an error reported inside a 200 answer, or a body over
    its bound. Like a 5xx, it is retried, and a request whose every attempt got one fails its episode
    as an infrastructure failure, the message in its record."""


class LongInteger:
    """An integer literal too long to be a count (more than 64 digits), read as its length only."""

    __slots__ = ("digits",)

    def __init__(self, digits: int):
        self.digits = digits

    def __repr__(self) -> str:
        return f"an integer of {self.digits} digits"


@dataclass(frozen=True)
class Answer:
    """One attempt's checked answer.

    Args:
        message: ``{"role": "assistant", "content": str | None[, "tool_calls": [...]]}``.
        finish_reason: as the server said (None when it said nothing, e.g. a truncated reply).
        prompt_tokens, completion_tokens: checked usage (None: not reported, or dropped by the checks).
        usage_warnings: why a reported count was dropped.
        truncated: ``"max_reply_bytes"`` when the reply was cut at the byte cap, else None.
    """

    message: dict[str, Any]
    finish_reason: str | None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    usage_warnings: tuple[str, ...] = ()
    truncated: str | None = None


def _parse_int(literal: str) -> int | LongInteger:
    digits = len(literal.lstrip("-"))
    return LongInteger(digits) if digits > _MAX_INT_DIGITS else int(literal)


def loads(data: bytes | str, what: str) -> Any:
    """Strict-enough JSON for a server's answer (see the module docstring).

    Raises:
        BadAnswer: not JSON, or nested too deep (``what`` names the text in the message).
    """
    try:
        return json.loads(data, parse_int=_parse_int)
    except RecursionError:
        raise BadAnswer(f"{what} is nested too deep to read") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadAnswer(f"{what} is not valid JSON ({exc}): {_preview(data)}") from None


def _preview(data: bytes | str, limit: int = 200) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def checked_usage(usage: Any) -> tuple[int | None, int | None, tuple[str, ...]]:
    """``(prompt_tokens, completion_tokens, warnings)`` from a server's ``usage``: each count an
    integer in ``[0, MAX_USAGE_TOKENS]``, or None with a warning when it is reported as anything else
    (absent counts are None without a warning)."""
    if usage is None:
        return None, None, ()
    if not isinstance(usage, dict):
        return None, None, (f"usage is {_kind(usage)}, expected an object: token counts recorded as missing",)
    counts: list[int | None] = []
    warnings: list[str] = []
    for key in ("prompt_tokens", "completion_tokens"):
        value = usage.get(key)
        problem = None
        if value is None:
            pass
        elif isinstance(value, LongInteger):
            problem = f"{value!r} (absurd)"
        elif isinstance(value, bool) or not isinstance(value, int):
            problem = f"{value!r} (not an integer)"
        elif value < 0:
            problem = f"{value} (negative)"
        elif value > MAX_USAGE_TOKENS:
            problem = f"{value} (absurd: more than {MAX_USAGE_TOKENS})"
        if problem is not None:
            warnings.append(f"usage.{key} is {problem}: recorded as missing")
            value = None
        counts.append(value)
    return counts[0], counts[1], tuple(warnings)


def wire_limit(max_reply_bytes: int) -> int:
    """The most bytes one SSE event or a whole non-streamed body may take: room for a reply at the cap
    written with JSON escapes (up to 6 bytes a character) and the envelope around it."""
    return 8 * max_reply_bytes + (1 << 20)


def _index(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadAnswer(f"{where} is {value!r}, expected an integer")
    return value


def _only_choice(choices: Any, where: str) -> dict[str, Any] | None:
    """The choice of index 0 among ``choices`` (None when there is none)."""
    if not isinstance(choices, list):
        raise BadAnswer(f"{where}.choices is {_kind(choices)}, expected a list")
    found = None
    for i, choice in enumerate(choices):
        if not isinstance(choice, dict):
            raise BadAnswer(f"{where}.choices[{i}] is {_kind(choice)}, expected an object")
        index = _index(choice.get("index", 0), f"{where}.choices[{i}].index")
        if index != 0:
            raise BadAnswer(f"{where}.choices[{i}].index is {index}: one choice (index 0) was asked for")
        if found is not None:
            raise BadAnswer(f"{where} has two choices of index 0")
        found = choice
    return found


def _text(value: Any, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise BadAnswer(f"{where} is {_kind(value)}, expected a string or null")
    return value


def _finish(choice: dict[str, Any], where: str) -> str | None:
    return _text(choice.get("finish_reason"), f"{where}.finish_reason")


def _function(call: Any, where: str) -> tuple[str | None, str | None, Any]:
    """``(id, name, arguments)`` of one tool-call entry (arguments: a string, an object or null, as the
    env reads them)."""
    if not isinstance(call, dict):
        raise BadAnswer(f"{where} is {_kind(call)}, expected an object")
    function = call.get("function")
    if function is None:
        function = {}
    if not isinstance(function, dict):
        raise BadAnswer(f"{where}.function is {_kind(function)} {_preview(str(function), 60)}, expected an object "
                        "with name and arguments")
    arguments = function.get("arguments")
    if arguments is not None and not isinstance(arguments, (str, dict)):
        raise BadAnswer(f"{where}.function.arguments is {_kind(arguments)}, expected a JSON string")
    return _text(call.get("id"), f"{where}.id"), _text(function.get("name"), f"{where}.function.name"), arguments


def _message(content: str | None, calls: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        out["tool_calls"] = [{"id": c["id"], "type": "function",
                              "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]
    return out


class _Budget:
    """The reply's remaining bytes: text past the cap is cut (at a character boundary) and remembered."""

    def __init__(self, max_bytes: int):
        self.left = max_bytes
        self.cut = False

    def take(self, text: str) -> str:
        encoded = text.encode("utf-8", "surrogatepass")  # JSON text may hold lone surrogates
        if len(encoded) <= self.left:
            self.left -= len(encoded)
            return text
        end = self.left
        while end > 0 and (encoded[end] & 0xC0) == 0x80:  # not inside a character
            end -= 1
        self.left, self.cut = 0, True
        return encoded[:end].decode("utf-8", "surrogatepass")


def read_body(chunks: Iterable[bytes], limit: int) -> bytes:
    """A whole body, refusing one over ``limit`` bytes (reading stops there)."""
    parts: list[bytes] = []
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise BadAnswer(f"the answer's body passed {limit} bytes (did the server ignore max_tokens?); a non-streamed "
                            "body cannot be cut and read: stream it (drop --no-stream) to keep its first bytes")
        parts.append(chunk)
    return b"".join(parts)


def _server_error(obj: dict[str, Any], where: str) -> BadAnswer:
    error = obj.get("error")
    message = error.get("message") if isinstance(error, dict) else error
    return BadAnswer(f"the server reported an error in {where}: {str(message)[:2000]}")


def parse_body(body: bytes, max_reply_bytes: int) -> Answer:
    """A non-streamed ``chat.completion`` body, checked (see the module docstring).

    Raises:
        BadAnswer: anything in it that cannot be used.
    """
    obj = loads(body, "the answer's body")
    if not isinstance(obj, dict):
        raise BadAnswer(f"the answer's body is {_kind(obj)}, expected an object")
    if obj.get("error"):
        raise _server_error(obj, "its answer")
    choice = _only_choice(obj.get("choices"), "the answer")
    if choice is None:
        raise BadAnswer("the answer has no choice (choices is empty)")
    message = choice.get("message")
    if not isinstance(message, dict):
        raise BadAnswer(f"the answer's choices[0].message is {_kind(message)}, expected an object")
    budget = _Budget(max_reply_bytes)
    content = _text(message.get("content"), "the answer's message.content")
    content = None if content is None else budget.take(content)
    raw_calls = message.get("tool_calls")
    if raw_calls is not None and not isinstance(raw_calls, list):
        raise BadAnswer(f"the answer's message.tool_calls is {_kind(raw_calls)}, expected a list")
    calls = []
    for i, raw in enumerate(raw_calls or []):
        call_id, name, arguments = _function(raw, f"the answer's message.tool_calls[{i}]")
        if budget.cut:
            break
        name = None if name is None else budget.take(name)
        if isinstance(arguments, str):
            arguments = budget.take(arguments)
        elif isinstance(arguments, dict) and len(json.dumps(arguments).encode()) > budget.left:
            budget.left, budget.cut = 0, True
            arguments = ""
        calls.append({"id": call_id, "name": name, "arguments": arguments})
    prompt, completion, warnings = checked_usage(obj.get("usage"))
    return Answer(_message(content, calls), _finish(choice, "the answer's choices[0]"), prompt, completion, warnings,
                  REPLY_TRUNCATION if budget.cut else None)


@dataclass
class _Call:
    id: str | None = None
    name: str = ""
    arguments: str = ""


@dataclass
class StreamReader:
    """Reads a ``chat.completion.chunk`` SSE stream as it arrives: :meth:`feed` the bytes, then take
    :meth:`reply`.

    Args:
        max_reply_bytes: the reply's cap (see the module docstring).
    """

    max_reply_bytes: int
    done: bool = False
    """``[DONE]`` was read, or the reply reached its cap: read no more."""
    _buffer: bytearray = field(default_factory=bytearray)
    _data: list[bytes] = field(default_factory=list)
    _event_bytes: int = 0
    _events: int = 0
    _content: list[str] = field(default_factory=list)
    _calls: list[_Call] = field(default_factory=list)
    _finish: str | None = None
    _finished: bool = False
    _usage: Any = None

    def __post_init__(self) -> None:
        self._budget = _Budget(self.max_reply_bytes)
        self._limit = wire_limit(self.max_reply_bytes)

    def feed(self, data: bytes) -> bool:
        """Take the next bytes of the stream; True once no more need reading (see :attr:`done`).

        Raises:
            BadAnswer: a malformed event, an error event, or an event over the bound.
        """
        if self.done:
            return True
        self._buffer += data
        start = 0
        while not self.done:
            end = self._buffer.find(b"\n", start)
            if end < 0:
                break
            line = bytes(self._buffer[start:end]).rstrip(b"\r")
            start = end + 1
            self._line(line)
        del self._buffer[:start]
        if len(self._buffer) + self._event_bytes > self._limit:
            raise BadAnswer(f"an SSE event of the stream passed {self._limit} bytes without ending")
        return self.done

    def _line(self, line: bytes) -> None:
        if not line:
            if self._data:
                data = b"\n".join(self._data)
                self._data, self._event_bytes = [], 0
                self._event(data)
            return
        if line.startswith(b":"):
            return  # an SSE comment: a keep-alive
        name, _, value = line.partition(b":")
        if name == b"data":
            value = value[1:] if value.startswith(b" ") else value
            self._data.append(value)
            self._event_bytes += len(value) + 1
        # other fields (event:, id:, retry:) carry nothing of the answer

    def _event(self, data: bytes) -> None:
        self._events += 1
        where = f"stream event {self._events}"
        if data.strip() == b"[DONE]":
            self.done = True
            return
        chunk = loads(data, where)
        if not isinstance(chunk, dict):
            raise BadAnswer(f"{where} is {_kind(chunk)}, expected an object: {_preview(data)}")
        if chunk.get("error"):
            raise _server_error(chunk, where)
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        if "choices" not in chunk:
            return  # a ping or another event that carries no answer
        choice = _only_choice(chunk["choices"], where)
        if choice is None:
            return  # the usage-only chunk
        delta = choice.get("delta")
        if delta is None:
            delta = {}
        if not isinstance(delta, dict):
            raise BadAnswer(f"{where}: choices[0].delta is {_kind(delta)}, expected an object")
        content = _text(delta.get("content"), f"{where}: choices[0].delta.content")
        if content:
            self._content.append(self._budget.take(content))
        calls = delta.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise BadAnswer(f"{where}: choices[0].delta.tool_calls is {_kind(calls)}, expected a list")
        for i, raw in enumerate(calls or []):
            self._call_delta(raw, f"{where}: choices[0].delta.tool_calls[{i}]")
        finish = _finish(choice, f"{where}: choices[0]")
        if finish is not None:
            self._finish, self._finished = finish, True
        if self._budget.cut:
            self.done = True

    def _call_delta(self, raw: Any, where: str) -> None:
        call_id, name, arguments = _function(raw, where)
        index = raw.get("index")
        if index is None:  # servers that omit it: a new call when it names one, else the current call
            index = len(self._calls) if (call_id or name) or not self._calls else len(self._calls) - 1
        index = _index(index, f"{where}.index")
        if not 0 <= index <= len(self._calls):
            raise BadAnswer(f"{where}.index is {index}, but {len(self._calls)} call(s) were started: calls are "
                            "numbered from 0 without gaps")
        if index == len(self._calls):
            self._calls.append(_Call())
        call = self._calls[index]
        if call_id and not call.id:
            call.id = call_id
        if name and name != call.name:
            call.name += self._budget.take(name)
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments, ensure_ascii=False)
        if arguments:
            call.arguments += self._budget.take(arguments)

    def reply(self) -> Answer:
        """The answer read so far, checked.

        Raises:
            BadAnswer: the stream ended before the answer did (no ``[DONE]``, no ``finish_reason``, no cap
                reached), or never carried a choice.
        """
        truncated = REPLY_TRUNCATION if self._budget.cut else None
        if truncated is None and not self.done and not self._finished:
            raise BadAnswer(f"the stream ended after {self._events} event(s) without a finish_reason or [DONE]: cut short")
        if truncated is None and not self._content and not self._calls and not self._finished:
            raise BadAnswer("the stream carried no choice")
        prompt, completion, warnings = checked_usage(self._usage)
        calls = [{"id": c.id, "name": c.name or None, "arguments": c.arguments} for c in self._calls]
        content = "".join(self._content) if self._content else None
        return Answer(_message(content, calls), None if truncated else self._finish, prompt, completion, warnings,
                      truncated)
