"""The ground-truth-following plan: which calls a correct agent makes for a task row.

For each tool, in ``toolspecs.json`` order, the arguments are "implied by the task row": each
parameter of the tool's schema takes the row's value of the column with the same name (missing
cells are left out), else the value of a key with that name in an earlier result of the same task
(how tokens and ticket ids chain), else it is left out (so a tool that requires it fails with its own
message). Values are coerced to the schema's type where the CSV's type differs (a ``True`` string
for a boolean, a comma-separated string for an array of strings, an integral float for an integer).

This is a plumbing check and a reachability probe, not a solver: it calls every tool once, whatever
the SOP says, and then submits the labels.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from .loader import SopBenchDomain, spec_of

__all__ = ["implied_args", "find_key", "decode", "run_plan", "PlannedCall"]

_MISSING = object()


def decode(text: str) -> Any:
    """A tool result's text as a value (NaN allowed, as Python's json reads it); the text if not JSON."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return text


def find_key(value: Any, key: str) -> Any:
    """The first value under ``key`` in a nested result (depth-first), or ``_MISSING``."""
    children: Iterable[Any]
    if isinstance(value, Mapping):
        if key in value:
            return value[key]
        children = value.values()
    elif isinstance(value, list):
        children = value
    else:
        return _MISSING
    for child in children:
        found = find_key(child, key)
        if found is not _MISSING:
            return found
    return _MISSING


def _coerce(value: Any, schema: Mapping[str, Any]) -> Any:
    typ = schema.get("type")
    if isinstance(typ, list):
        typ = next((t for t in typ if t != "null"), None)
    if typ == "boolean" and isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if typ == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    if typ == "string" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if typ == "array" and isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                return json.loads(text.replace("'", '"'))
            except json.JSONDecodeError:
                pass
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


def implied_args(spec: Mapping[str, Any], row: Mapping[str, Any], earlier: Sequence[Any]) -> dict[str, Any]:
    """Arguments for one tool from the row (JSON values) and the decoded earlier results."""
    schema = spec.get("inputSchema", {}).get("json", {}) or {}
    args = {}
    for param, sub in (schema.get("properties") or {}).items():
        value = row.get(param)
        if value is None:
            value = _MISSING
            for result in reversed(earlier):
                value = find_key(result, param)
                if value is not _MISSING:
                    break
        if value is _MISSING or value is None:
            continue
        args[param] = _coerce(value, sub if isinstance(sub, Mapping) else {})
    return args


class PlannedCall(tuple):
    """``(name, args, response)`` of one planned call."""

    __slots__ = ()

    def __new__(cls, name: str, args: dict, response: dict):
        return super().__new__(cls, (name, args, response))


def run_plan(domain: SopBenchDomain, runner, indices: Sequence[int] | None = None) -> dict[int, list[PlannedCall]]:
    """Run the plan for ``indices`` (all tasks by default) in rounds: round k makes every task's k-th
    call in one ``runner.call_many`` batch (one sandbox request per tool, not per call)."""
    indices = list(range(domain.num_tasks)) if indices is None else list(indices)
    rows = {i: domain.row(i) for i in indices}
    done: dict[int, list[PlannedCall]] = {i: [] for i in indices}
    for entry in domain.toolspecs:
        spec = spec_of(entry)
        batch = [(i, implied_args(spec, rows[i], [decode(c[2]["text"]) for c in done[i]])) for i in indices]
        responses = runner.call_many([(spec["name"], args) for _, args in batch])
        for (i, args), response in zip(batch, responses):
            done[i].append(PlannedCall(spec["name"], args, response))
    return done


def iter_values(value: Any) -> Iterator[Any]:
    """Every scalar inside a decoded result (the result itself when scalar)."""
    if isinstance(value, Mapping):
        for v in value.values():
            yield from iter_values(v)
    elif isinstance(value, list):
        for v in value:
            yield from iter_values(v)
    else:
        yield value
