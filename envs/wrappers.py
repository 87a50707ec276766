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
objects) are converted (see :func:`to_jsonable`). The file is flushed at the end of each episode.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import gymnasium as gym

__all__ = ["RecordTrajectory", "to_jsonable", "dumps_line", "reset_line", "step_line", "episode_line"]


def to_jsonable(value: Any, _seen: frozenset[int] = frozenset()) -> Any:
    """A copy of ``value`` that ``json.dumps(..., allow_nan=False)`` accepts.

    dict keys become strings, tuples/sets lists (sets sorted by their text), numpy values Python
    ones, bytes text (invalid UTF-8 replaced), non-finite floats the strings ``"nan"``, ``"inf"``,
    ``"-inf"``, anything else its ``repr``; a container that contains itself becomes ``"<cycle>"``.
    """
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if hasattr(value, "tolist") and callable(value.tolist) and type(value).__module__ == "numpy":
        return to_jsonable(value.tolist(), _seen)
    if isinstance(value, (dict, list, tuple, set, frozenset)):
        if id(value) in _seen:
            return "<cycle>"
        seen = _seen | {id(value)}
        if isinstance(value, dict):
            return {k if isinstance(k, str) else str(to_jsonable(k, seen)): to_jsonable(v, seen) for k, v in value.items()}
        items = [to_jsonable(v, seen) for v in value]
        if isinstance(value, (set, frozenset)):
            items.sort(key=lambda x: json.dumps(x, sort_keys=True))
        return items
    return repr(value)


def dumps_line(obj: dict[str, Any]) -> str:
    """One JSONL line: strict JSON, non-ASCII escaped, unencodable values converted (:func:`to_jsonable`)."""
    return json.dumps(to_jsonable(obj), ensure_ascii=True, allow_nan=False)


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
