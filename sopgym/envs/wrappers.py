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
The format's version, encoding, writer and reader: :mod:`sopgym.trajectory`.
"""

from __future__ import annotations

import os
from typing import Any, SupportsFloat

import gymnasium as gym

# The format itself (its encoding, lines, writer and reader) lives in .trajectory; these names are
# re-exported here, where their users have always imported them from.
from sopgym.trajectory import (
    MAX_DEPTH,
    MAX_VALUES,
    TrajectoryWriter,
    dumps_line,
    episode_line,
    reset_line,
    step_line,
    to_jsonable,
)

__all__ = ["RecordTrajectory", "to_jsonable", "dumps_line", "reset_line", "step_line", "episode_line",
           "MAX_DEPTH", "MAX_VALUES"]


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
        self._writer = TrajectoryWriter(self.path, append=append)
        self.episode_index = -1
        self._num_messages = 0

    def _write(self, obj: dict[str, Any]) -> None:
        if self._writer.closed:
            raise gym.error.Error(f"RecordTrajectory({self.path!r}) is closed; cannot record")
        self._writer.write([obj], flush=False)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        self.episode_index += 1
        self._num_messages = len(info.get("messages", ()))
        self._write(reset_line(self.episode_index, info.get("task_id"), seed, options, observation))
        return observation, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        messages = info.get("messages", [])
        added = messages[self._num_messages:]
        self._num_messages = len(messages)
        self._write(step_line(self.episode_index, info.get("turn"), observation, action, info.get("calls", []),
                              [m for m in added if m.get("role") == "tool"], float(reward), info.get("status"),
                              terminated, truncated))
        if "episode" in info:
            self._write(episode_line(self.episode_index, info["episode"]))
            self._writer.flush()
        return observation, reward, terminated, truncated, info

    def close(self) -> None:
        """Close the file (safe to call twice) and the wrapped env."""
        self._writer.close()
        super().close()
