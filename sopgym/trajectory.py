"""The trajectory format: what a trajectory file holds, and the one writer and reader of its lines.

A trajectory file is JSONL, one JSON object per line, each with a ``type``:

* ``run`` (files of ``sopgym eval`` only, first line): ``format`` (:data:`TRAJECTORY_FORMAT`, the
  version of this format) and ``identity`` (the run's settings); see :mod:`sopgym.bench.suite`.
  Files without a run line (:class:`~sopgym.envs.wrappers.RecordTrajectory`'s, the episode runner's)
  are of the same format;
* ``reset``, ``step``, ``episode``: one episode's lines (:func:`reset_line`, :func:`step_line`,
  :func:`episode_line`; what each field holds: :mod:`sopgym.envs.wrappers`).

Lines are strict JSON with non-ASCII escaped (:func:`dumps_line`: lone surrogates in an action survive
a round trip); values JSON cannot hold are converted (:func:`to_jsonable`), so writing never raises on
whatever a policy gave.

Every writer (:class:`~sopgym.envs.wrappers.RecordTrajectory`, ``sopgym eval``'s suite file, a caller
of the episode runner writing :func:`~sopgym.episodes.runner.trajectory_lines`) writes through :class:`TrajectoryWriter`, and every
reader (:func:`sopgym.evaluation.records.load_records`, ``sopgym show`` and the viewer's
:func:`~sopgym.evaluation.episode_text.read_trajectory`, ``--resume`` and ``sopgym rescore``'s
:func:`~sopgym.bench.suite.read_trajectory_run`) reads through :func:`numbered_lines` and
:func:`loads_line` (so a line that is not UTF-8 JSON is worded one way, :class:`UnreadableLine`) and refuses a run line of another format with :func:`check_format`; each keeps its
own checks of what the lines hold.

The module sits at the top of the package, beside :mod:`sopgym.scoring` and for the same reason: its
users live on both sides of the envs. The envs' own wrapper writes the format, and the envs may import
nothing above them (not the episode layer: ``tests/test_boundaries.py``), while the evaluator's readers
must load without the envs (``sopgym.evaluation`` imports in an interpreter where they cannot be).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator
from typing import IO, Any

from sopgym.sandboxes.schema import MAX_INT_DIGITS

__all__ = ["TRAJECTORY_FORMAT", "to_jsonable", "dumps_line", "loads_line", "run_line", "reset_line", "step_line",
           "episode_line", "check_format", "TrajectoryWriter", "numbered_lines", "UnreadableLine"]

#: The version of the trajectory format, the ``format`` of a file's run line. A reader refuses a run
#: line of any other (:func:`check_format`); a change to what the lines hold bumps it.
TRAJECTORY_FORMAT = 1

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
    """The ``reset`` line of a trajectory file."""
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


class UnreadableLine(ValueError):
    """A line of a JSONL file that is not UTF-8 JSON, worded the one way every reader words it:
    ``PATH:LINE: expected a JSON object per line in UTF-8, got <what was found>``.

    Attributes:
        where: ``PATH:LINE``.
        invalid_json: the text is UTF-8 but not JSON (a torn last line of a killed writer is one).
    """

    def __init__(self, where: str, found: str, *, invalid_json: bool = False) -> None:
        super().__init__(f"{where}: expected a JSON object per line in UTF-8, got {found}")
        self.where = where
        self.invalid_json = invalid_json


def loads_line(raw: bytes, where: str) -> Any:
    """One line of a JSONL file decoded: strict UTF-8, then JSON. Every reader decodes its lines here.

    Args:
        raw: the line's bytes (its newline may be there).
        where: ``PATH:LINE``, for the error.

    Raises:
        UnreadableLine: (a ``ValueError``) bytes that are not UTF-8, text that is not JSON, JSON nested
            too deep to read or an integer past Python's digit limit, naming ``where``.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableLine(where, f"bytes that are not UTF-8 ({raw[exc.start:exc.end]!r} at offset {exc.start} "
                                    f"of the line: {exc.reason})") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise UnreadableLine(where, "JSON nested too deep to read") from None
    except json.JSONDecodeError as exc:
        raise UnreadableLine(where, f"invalid JSON ({exc})", invalid_json=True) from None
    except ValueError as exc:  # an integer past Python's int-string digit limit
        raise UnreadableLine(where, f"unreadable JSON ({str(exc).split(';')[0][:200]})") from None


def run_line(identity: Any) -> dict[str, Any]:
    """The ``run`` line a suite file starts with: this format's version and the run's settings."""
    return {"type": "run", "format": TRAJECTORY_FORMAT, "identity": identity}


def check_format(obj: dict[str, Any], where: str) -> None:
    """Refuse a run line of another format than this version's.

    Raises:
        ValueError: naming ``where``, the format found and the one this version reads.
    """
    if obj.get("format") != TRAJECTORY_FORMAT:
        raise ValueError(f"{where}: the run line's format is {json.dumps(obj.get('format'))[:60]}; this version "
                         f"reads format {TRAJECTORY_FORMAT}")


# --------------------------------------------------------------------------------------------------
# Writing and reading
# --------------------------------------------------------------------------------------------------
class TrajectoryWriter:
    """Writes trajectory lines to a file, each batch of lines in one write.

    Args:
        path: the JSONL file. Parent folders are created.
        append: append to an existing file instead of truncating it.
        truncate_at: cut the existing file to this many bytes, then append (a resumed run drops the
            half-written tail the reader found).
    """

    def __init__(self, path: str | os.PathLike, *, append: bool = False, truncate_at: int | None = None) -> None:
        self.path = os.fspath(path)
        parent = os.path.dirname(self.path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        if truncate_at is not None:
            with open(self.path, "r+b") as f:
                f.truncate(truncate_at)
        self._file: IO[str] | None = open(self.path, "a" if append or truncate_at is not None else "w", encoding="utf-8")  # noqa: SIM115 - closed in close()

    @property
    def closed(self) -> bool:
        return self._file is None

    def write(self, lines: Iterable[dict[str, Any]], *, flush: bool = True) -> None:
        """Write ``lines`` (:func:`dumps_line` each) in one write, then flush unless told not to: a
        process killed now leaves at most a torn last line, which the readers drop or name."""
        file = self._opened()
        file.write("".join(dumps_line(line) + "\n" for line in lines))
        if flush:
            file.flush()

    def flush(self) -> None:
        self._opened().flush()

    def _opened(self) -> IO[str]:
        if self._file is None:
            raise ValueError(f"{self.path}: expected an open trajectory writer, got one already closed")
        return self._file

    def close(self) -> None:
        """Close the file (safe to call twice)."""
        if self._file is not None:
            self._file.close()
            self._file = None


def numbered_lines(path: str | os.PathLike) -> Iterator[tuple[int, str, bytes]]:
    """``(line number from 1, "PATH:NUMBER", the line's bytes with its newline)`` for each line of
    ``path``; decode each with :func:`loads_line`.

    Raises:
        OSError: the file cannot be read.
    """
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            yield number, f"{path}:{number}", line
