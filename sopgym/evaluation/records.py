"""Reading episode records back from JSONL (trajectory files of the runner or of ``RecordTrajectory``;
the format: :mod:`sopgym.trajectory`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from sopgym.trajectory import check_format, loads_line, numbered_lines

__all__ = ["iter_jsonl", "load_records"]


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """(line number, decoded value) for each non-blank line of a JSONL file.

    Raises:
        ValueError: on a line that is not UTF-8 JSON, naming the file and line
            (:class:`sopgym.trajectory.UnreadableLine`).
    """
    for number, where, line in numbered_lines(path):
        if line.strip():
            yield number, loads_line(line, where)


def load_records(jsonl_path: str | os.PathLike) -> list[dict[str, Any]]:
    """Episode records from a JSONL file.

    Reads trajectory files (keeps ``type == "episode"`` lines, dropping their ``type`` and
    ``episode_index``) or a file of bare records (lines without ``type``).

    Raises:
        ValueError: on a line that is not a JSON object, or a run line of another format than this
            version's, naming the file and line.
    """
    records = []
    for number, obj in iter_jsonl(jsonl_path):
        if not isinstance(obj, dict):
            raise ValueError(f"{jsonl_path}:{number}: expected a JSON object, got {type(obj).__name__}")
        kind = obj.pop("type", None)
        if kind == "run":
            check_format(obj, f"{jsonl_path}:{number}")
        elif kind == "episode":
            obj.pop("episode_index", None)
            records.append(obj)
        elif kind is None:
            records.append(obj)
    return records
