"""Wrappers over SOP envs. ``RecordTrajectory`` writes every step and every episode to JSONL.

One JSON object per line, each with a ``type``:

* ``reset``: ``episode_index``, ``task_id``, ``observation`` (the task's user message);
* ``step``: ``episode_index``, ``turn``, ``observation``, ``action`` (the reply as given: a string or
  an assistant dict), ``calls`` (``info["calls"]``: the parsed calls with their statuses),
  ``tool_results`` (the ``tool`` messages this step added to the chat), ``reward``, ``status``,
  ``terminated``, ``truncated``;
* ``episode``: ``episode_index`` and every key of ``info["episode"]``, the record the evaluator reads
  (:func:`sopgym.evaluation.load_records` turns these lines back into records).

Lines are strict JSON with non-ASCII escaped (lone surrogates in an action survive a round trip);
values JSON cannot hold (numpy scalars, tuples, sets, non-string keys, non-finite floats, arbitrary
objects, self-references, very deep nesting, huge integers) are converted (see :func:`to_jsonable`), so
recording never raises on whatever action a policy gave. The file is flushed at the end of each episode.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import gymnasium as gym

from sopgym.sandboxes.schema import MAX_INT_DIGITS

__all__ = ["RecordTrajectory", "to_jsonable", "dumps_line", "reset_line", "step_line", "episode_line"]


#: Containers nested deeper than this are written as a marker. A reply may nest 5,000 levels deep (the
#: env reads none of it past MAX_JSON_DEPTH), but a line must stay writable and readable by ``json``.
MAX_DEPTH = 100
#: Most values (containers and scalars) one call of :func:`to_jsonable` writes; the rest become a marker.
#: A structure that shares itself (``x = [x, x]`` sixty times) has 2**60 values when written out.
MAX_VALUES = 100_000
_INT_BOUND = 10**MAX_INT_DIGITS


def to_jsonable(value: Any) -> Any:
    """A copy of ``value`` that ``json.dumps(..., allow_nan=False)`` accepts; never raises, never stalls.

    dict keys become strings, tuples/sets lists (sets sorted by their text), numpy values Python
    ones, bytes text (invalid UTF-8 replaced), non-finite floats the strings ``"nan"``, ``"inf"``,
    ``"-inf"``, anything else its ``repr``. Markers (strings) stand for what cannot be written: a
    container that contains itself (``"<cycle>"``), one nested deeper than :data:`MAX_DEPTH`, an
    integer of more than ``MAX_INT_DIGITS`` digits (which ``json`` may refuse to write or read), and
    everything after the first :data:`MAX_VALUES` values.
    """
    return _jsonable(value, frozenset(), 0, [MAX_VALUES])


_NOT_SCALAR = object()
_MORE = f"<more than {MAX_VALUES} values: not written>"


def _jsonable_scalar(value: Any) -> Any:
    """A scalar as JSON can hold it, or ``_NOT_SCALAR``."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return value if -_INT_BOUND < value < _INT_BOUND else f"<integer of about {_digits(value)} digits>"
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(float(value))
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return _NOT_SCALAR


def _jsonable_dict(value: dict, seen: frozenset[int], depth: int, budget: list[int]) -> dict:
    out = {}
    for k, v in value.items():
        if budget[0] <= 0:
            out["<more>"] = _MORE
            break
        out[k if isinstance(k, str) else str(_jsonable(k, seen, depth, budget))] = _jsonable(v, seen, depth, budget)
    return out


def _jsonable_items(value: Any, seen: frozenset[int], depth: int, budget: list[int]) -> list:
    items = []
    for v in value:
        if budget[0] <= 0:
            items.append(_MORE)
            break
        items.append(_jsonable(v, seen, depth, budget))
    if isinstance(value, (set, frozenset)):
        items.sort(key=lambda x: json.dumps(x, sort_keys=True))
    return items


def _jsonable(value: Any, seen: frozenset[int], depth: int, budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        return _MORE
    scalar = _jsonable_scalar(value)
    if scalar is not _NOT_SCALAR:
        return scalar
    if hasattr(value, "tolist") and callable(value.tolist) and type(value).__module__ == "numpy":
        if getattr(value, "size", 1) > budget[0]:
            return f"<numpy array of {value.size} values: not written>"
        return _jsonable(value.tolist(), seen, depth, budget)
    if isinstance(value, (dict, list, tuple, set, frozenset)):
        if id(value) in seen:
            return "<cycle>"
        if depth >= MAX_DEPTH:
            return f"<nested deeper than {MAX_DEPTH} levels>"
        seen, depth = seen | {id(value)}, depth + 1
        if isinstance(value, dict):
            return _jsonable_dict(value, seen, depth, budget)
        return _jsonable_items(value, seen, depth, budget)
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - any object's repr may fail; the line must still be written
        return f"<{type(value).__name__}>"


def _digits(value: int) -> int:
    """Decimal digits of ``abs(value)``, to within one, without converting it to text."""
    return int(abs(value).bit_length() * 0.30103) + 1


def dumps_line(obj: dict[str, Any]) -> str:
    """One JSONL line: strict JSON, non-ASCII escaped, unencodable values converted (:func:`to_jsonable`).

    Each top-level value is converted on its own, so a huge ``action`` is cut without losing the
    line's other fields (``status``, ``reward``, ...).
    """
    return json.dumps({str(k): to_jsonable(v) for k, v in obj.items()}, ensure_ascii=True, allow_nan=False)


def reset_line(episode_index: int, task_id: Any, seed: Any, options: Any, observation: Any) -> dict[str, Any]:
    """The ``reset`` line of a trajectory file (the episode runner writes the same lines)."""
    return {"type": "reset", "episode_index": episode_index, "task_id": task_id, "seed": seed,
            "options": options, "observation": observation}


def step_line(episode_index: int, turn: Any, observation: Any, action: Any, calls: Any, tool_results: Any,
              reward: float, status: Any, terminated: bool, truncated: bool) -> dict[str, Any]:
    """A ``step`` line of a trajectory file."""
    return {"type": "step", "episode_index": episode_index, "turn": turn, "observation": observation,
            "action": action, "calls": calls, "tool_results": tool_results, "reward": reward, "status": status,
            "terminated": terminated, "truncated": truncated}


def episode_line(episode_index: int, record: dict[str, Any]) -> dict[str, Any]:
    """The ``episode`` line of a trajectory file: the record the evaluator reads."""
    return {"type": "episode", "episode_index": episode_index, **record}


class RecordTrajectory(gym.Wrapper):
    """Record each step and each finished episode of an SOP env as JSONL.

    Works on a bare :class:`~sopgym.envs.SOPEnv` or on what ``gymnasium.make`` returns.

    Args:
        env: the env to record.
        path: the JSONL file. Parent folders are created.
        append: append to an existing file instead of truncating it.

    Example:
        >>> env = RecordTrajectory(gymnasium.make("sopgym/WarehouseReceiving-v0"), "traj.jsonl")  # doctest: +SKIP
    """

    def __init__(self, env: gym.Env, path: str | os.PathLike, *, append: bool = False) -> None:
        super().__init__(env)
        self.path = os.fspath(path)
        parent = os.path.dirname(self.path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        self._file = open(self.path, "a" if append else "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.episode_index = -1
        self._num_messages = 0

    def _write(self, obj: dict[str, Any]) -> None:
        if self._file is None:
            raise gym.error.Error(f"RecordTrajectory({self.path!r}) is closed; cannot record")
        self._file.write(dumps_line(obj) + "\n")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        self.episode_index += 1
        self._num_messages = len(info.get("messages", ()))
        self._write(reset_line(self.episode_index, info.get("task_id"), seed, options, observation))
        return observation, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        messages = info.get("messages", [])
        added = messages[self._num_messages:]
        self._num_messages = len(messages)
        self._write(step_line(self.episode_index, info.get("turn"), observation, action, info.get("calls", []),
                              [m for m in added if m.get("role") == "tool"], reward, info.get("status"),
                              terminated, truncated))
        if "episode" in info:
            self._write(episode_line(self.episode_index, info["episode"]))
            self._file.flush()
        return observation, reward, terminated, truncated, info

    def close(self) -> None:
        """Close the file (safe to call twice) and the wrapped env."""
        if self._file is not None:
            self._file.close()
            self._file = None
        super().close()
