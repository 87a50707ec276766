"""Seeded generator of hostile assistant replies, for the fuzz tests.

Each shape is a class of attack the env must answer with a status and a message, never an exception
and never a stall (issue: "a model's reply must never raise out of env.step, nor stall it"). Values
are drawn from ``random.Random(seed)``: the same seed gives the same actions.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import random
from collections.abc import Callable
from typing import Any

import numpy as np

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class ToolView:
    """What a hostile policy knows of one env: tool names and argument schemas (from ``info["tools"]``)."""

    def __init__(self, tools: list[dict[str, Any]], avoid: frozenset[str] = frozenset()):
        self.schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
        # Calls to tools in ``avoid`` (the verifiable tier: they start a process) are drawn only by chance.
        self.names = [n for n in self.schemas if n not in avoid] or list(self.schemas)


def _huge_ints(rng: random.Random) -> Any:
    return rng.choice([
        10**309, -(10**309), 10**640 - 1, 10**640, 10**4300, -(10**4301), 2**63, 2**64 + 1,
    ])


def _huge_int_text(rng: random.Random) -> str:
    digits = rng.choice([309, 310, 640, 641, 4300, 4301, 20_000])
    return rng.choice(["", "-"]) + "1" + "0" * (digits - 1)


def _float_text(rng: random.Random) -> str:
    return rng.choice(["1e400", "-1e400", "NaN", "Infinity", "-Infinity", "1e-400", "1" + "0" * 400 + ".5", "0.1e99999"])


def random_json(rng: random.Random, depth: int = 0) -> Any:
    """A hypothesis-style random JSON value (strings include surrogates, controls and tags)."""
    roll = rng.random()
    if depth > 3 or roll < 0.5:
        return rng.choice([
            None, True, False, rng.randint(-10, 10), rng.random() * rng.choice([1, 1e300, -1e-300]), "",
            random_text(rng, 12), rng.randint(-(10**30), 10**30), float("nan"), float("inf"),
        ])
    if roll < 0.75:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {random_text(rng, 8): random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))}


_CHARS = "ab{}[]\":,\\ \n\t<>/_-0123456789eE.+\u00e9\u4e2d\U0001F600\ud800\udfff\x00\x1b"


def random_text(rng: random.Random, max_len: int) -> str:
    text = "".join(rng.choice(_CHARS) for _ in range(rng.randint(0, max_len)))
    return rng.choice([text, text, text + OPEN, CLOSE + text, "```json\n" + text])


def _schema_value(rng: random.Random, schema: dict[str, Any]) -> Any:
    """A value for one property: usually of the right type, sometimes hostile."""
    typ = schema.get("type", "string")
    typ = typ[0] if isinstance(typ, list) and typ else typ
    roll = rng.random()
    if roll < 0.15:
        return random_json(rng)
    if roll < 0.25:
        return _huge_ints(rng)
    if "enum" in schema and schema["enum"] and rng.random() < 0.6:
        return rng.choice(list(schema["enum"]))
    if typ == "integer":
        return rng.choice([rng.randint(-5, 500), str(rng.randint(0, 99)), 3.0, 2.5, True])
    if typ == "number":
        return rng.choice([rng.random() * 100, rng.randint(0, 9), "4.5", 1e308])
    if typ == "boolean":
        return rng.choice([True, False, "true", "False", 0])
    if typ == "array":
        return [random_json(rng) for _ in range(rng.randint(0, 3))]
    if typ == "object":
        return {"k": random_json(rng)}
    return rng.choice([random_text(rng, 20), "D01", "2024-01-01", "SHP-000001", ""])


def _arguments(rng: random.Random, view: ToolView, name: str) -> dict[str, Any]:
    schema = view.schemas.get(name) or {}
    props = schema.get("properties") or {}
    args = {key: _schema_value(rng, sub) for key, sub in props.items() if rng.random() < 0.9}
    if rng.random() < 0.1:
        args[random_text(rng, 6)] = random_json(rng)
    return args


def _encode(obj: Any) -> str:
    """JSON text of a call whose values may be too big for ``json.dumps`` (huge ints are spliced in)."""
    marks: dict[str, str] = {}

    def swap(value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and not -(10**600) < value < 10**600:
            key = f"__INT{len(marks)}__"
            sign = "-" if value < 0 else ""
            marks[key] = sign + "1" + "0" * (abs(value).bit_length() * 3 // 10)  # as many digits, roughly
            return key
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [swap(v) for v in value]
        return value

    text = json.dumps(swap(obj))
    for key, digits in marks.items():
        text = text.replace(f'"{key}"', digits)
    return text


def _wrap(rng: random.Random, payload: str) -> str:
    return rng.choice([
        lambda s: f"{OPEN}{s}{CLOSE}",
        lambda s: s,
        lambda s: f"Let me check.\n{OPEN}\n{s}\n{CLOSE}\nDone.",
        lambda s: f"```json\n{s}\n```",
        lambda s: f"{OPEN}{s}{CLOSE}{OPEN}{s}{CLOSE}",
        lambda s: f"{OPEN}{s[: len(s) // 2]}",
        lambda s: f"{OPEN}{s}{CLOSE}{CLOSE}",
    ])(payload)


# -- shapes ----------------------------------------------------------------------------------------
def schema_shaped_call(rng: random.Random, view: ToolView) -> Any:
    name = rng.choice(view.names)
    call = {"name": name, "arguments": _arguments(rng, view, name)}
    if rng.random() < 0.3:
        arguments = _encode(call["arguments"])
        return {"role": "assistant", "content": rng.choice([None, "", random_text(rng, 20)]),
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}]}
    return _wrap(rng, _encode(call))


def huge_number_call(rng: random.Random, view: ToolView) -> Any:
    """Integers beyond float range and beyond Python's int-string limit, bare or quoted, and non-finite floats."""
    name = rng.choice(view.names)
    props = list((view.schemas.get(name) or {}).get("properties") or {}) or ["x"]
    args = _arguments(rng, view, name)
    key = rng.choice(props)
    number = rng.choice([_huge_int_text(rng), _float_text(rng)])
    marker = "__N__"
    args[key] = marker if rng.random() < 0.7 else {"nested": [marker]}
    text = _encode({"name": name, "arguments": args})
    quoted = rng.random() < 0.35
    text = text.replace(f'"{marker}"', f'"{number}"' if quoted else number)
    return _wrap(rng, text)


def self_referencing_dict() -> dict:
    """A dict that contains itself."""
    d: dict = {"a": 1}
    d["self"] = d
    return d


def self_referencing_list() -> list:
    """A list that contains itself."""
    x: list = [1]
    x.append(x)
    return x


def nested(n: int, kind: str = "dict") -> Any:
    """``n`` levels of one-element dicts (or lists) around a leaf."""
    value: Any = "leaf"
    for _ in range(n):
        value = {"a": value} if kind == "dict" else [value]
    return value


def self_sharing(n: int) -> Any:
    """A DAG of 2**n leaves sharing itself: small in memory, exponential to walk as a tree."""
    value: Any = [1]
    for _ in range(n):
        value = [value, value]
    return value


def make_env_without_docker(env_id: str, **kwargs: Any):
    """``gym.make`` with every code/tool runner in-process (no Docker; a SOP-Bench checkout's missing
    tools.py is then a sandbox error), the trusted-code warning silenced."""
    import warnings

    import gymnasium as gym

    from sopgym.envs.env_kwargs import InProcessCodeRunnerWarning
    from sopgym.sop_tasks.registry import get_pack

    if env_id.startswith("sopbench/"):
        kwargs = {"tools_runner": "inprocess", "trust_tools_code": True, **kwargs}
    elif get_pack(env_id.rsplit("-v", 1)[0]).verifiable is not None:
        kwargs = {"code_runner": "inprocess", **kwargs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InProcessCodeRunnerWarning)
        return gym.make(env_id, **kwargs)


def _non_json_values() -> tuple[list[Callable[[], Any]], list[Callable[[], Any]]]:
    return [
        lambda: np.int64(3), lambda: np.float32(1.5), lambda: np.bool_(True), lambda: np.arange(4),
        lambda: np.float64("nan"), lambda: {1, 2}, lambda: frozenset({"a"}), lambda: b"bytes\xff",
        lambda: bytearray(b"x"), lambda: decimal.Decimal("1.5"), lambda: dt.date(2024, 1, 1),
        lambda: dt.datetime(2024, 1, 1, 12), lambda: 1 + 2j, lambda: object(), self_referencing_dict,
        self_referencing_list, lambda: nested(5000), lambda: nested(5000, "list"), lambda: nested(70),
        lambda: nested(63, "list"),
        lambda: {(1, 2): "tuple key"}, lambda: {1: "int key"}, lambda: {None: 1}, lambda: 10**5000,
        lambda: -(10**309), lambda: (1, 2, 3), lambda: print, lambda: range(3), lambda: float("inf"),
    ], [lambda: self_sharing(60), lambda: "x" * 1_000_100]


#: Values JSON cannot carry; the heavy ones (a structure of 2**60 values sharing itself, a megabyte
#: string: recording each costs a tenth of a second) are drawn rarely, by the ``oversized`` shape.
NON_JSON, HEAVY_NON_JSON = _non_json_values()


def non_json_dict_action(rng: random.Random, view: ToolView, values: list[Callable[[], Any]] = NON_JSON) -> Any:
    """A message dict holding a value JSON cannot carry, somewhere a parser looks."""
    value = rng.choice(values)()
    name = rng.choice(view.names)
    args = _arguments(rng, view, name)
    where = rng.randrange(8)
    if where == 0:
        args[rng.choice(list(args) or ["x"])] = value
        return {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": name, "arguments": args}}]}
    if where == 1:
        return {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": name, "arguments": value}}]}
    if where == 2:
        return {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": value, "arguments": args}}]}
    if where == 3:
        return {"role": "assistant", "content": value}
    if where == 4:
        return {"role": value, "content": "hi"}
    if where == 5:
        return {"role": "assistant", "content": None, "tool_calls": value}
    if where == 6:
        return {"role": "assistant", "content": None, "tool_calls": [value]}
    return {"role": "assistant", "content": None, "tool_calls": [{"function": value, value if isinstance(value, str) else "x": 1}]}


def tag_flood(rng: random.Random, view: ToolView) -> str:
    """Unclosed, unbalanced and repeated ``<tool_call>`` tags, up to about a megabyte."""
    n = rng.choice([1, 2, 17, 100, 1000, 8_000, 16_000, 90_000])
    call = json.dumps({"name": rng.choice(view.names), "arguments": {}})
    return rng.choice([
        lambda: OPEN * n,
        lambda: (OPEN + "{") * n,
        lambda: OPEN * n + CLOSE,
        lambda: CLOSE * n + OPEN,
        lambda: (OPEN + call + CLOSE) * min(n, 2000),
        lambda: OPEN + call * n,
        lambda: (OPEN + OPEN + call + CLOSE) * min(n, 2000),
        lambda: "```" + " " * (n * 10) + "x",
        lambda: "```json" + "\n" * (n * 10) + "{",
        lambda: "{" * n,
        lambda: "[" * (n * 10),
        lambda: OPEN + '{"name": "a", "arguments": ' + "[" * (n * 10) + CLOSE,
    ])()


def oversized(rng: random.Random, view: ToolView) -> Any:
    """Replies longer than the action space allows (1,000,000 characters by default), and message dicts
    holding megabyte strings or structures of 2**60 values."""
    if rng.random() < 0.5:
        return non_json_dict_action(rng, view, HEAVY_NON_JSON)
    call = OPEN + json.dumps({"name": rng.choice(view.names), "arguments": {}}) + CLOSE
    filler = rng.choice(["a", " ", "\u4e2d", OPEN])
    text = call + filler * (1_000_001 - len(call) + rng.randint(0, 10))
    return text if rng.random() < 0.6 else {"role": "assistant", "content": text}


def random_reply(rng: random.Random, view: ToolView) -> Any:
    """Random text, random JSON values as the whole action, and other wrong action types."""
    return rng.choice([
        lambda: random_text(rng, 200),
        lambda: json.dumps(random_json(rng)),
        lambda: random_json(rng),
        lambda: _wrap(rng, json.dumps({"name": rng.choice(view.names + ["", "nope"]), "arguments": random_json(rng)})),
        lambda: {"role": "assistant", "content": random_text(rng, 30),
                 "tool_calls": [{"function": {"name": rng.choice(view.names), "arguments": random_text(rng, 30)}}]},
        lambda: random_text(rng, 30).encode("utf-8", "surrogatepass"),
        lambda: rng.choice(NON_JSON)(),
    ])()


#: (shape, weight). Heavy shapes (megabyte replies) are rare so the run stays short.
SHAPES: list[tuple[Callable[[random.Random, ToolView], Any], float]] = [
    (schema_shaped_call, 0.34),
    (huge_number_call, 0.2),
    (non_json_dict_action, 0.2),
    (tag_flood, 0.04),
    (oversized, 0.004),
    (random_reply, 0.216),
]


def hostile_action(rng: random.Random, view: ToolView) -> tuple[str, Any]:
    """(shape name, action)."""
    shapes, weights = zip(*SHAPES)
    shape = rng.choices(shapes, weights)[0]
    return shape.__name__, shape(rng, view)
