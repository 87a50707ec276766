"""In-process stateful backend: one private SQLite database per episode (the embedded default).

What it protects against: state leaking between episodes or between envs (each episode gets a
fresh in-memory database built from the task's initial state; nothing is shared or kept after
``start_episode`` or ``close``). What it does not protect against: the tool code itself is
trusted Python running in this process; use the Docker backend for isolation from the host.
"""

from __future__ import annotations

import importlib
import sqlite3
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from .base import Outcome, StatefulBackend, StatefulProgram, ToolResult

__all__ = ["InProcessBackend", "load_program", "build_database"]


def load_program(program: StatefulProgram) -> ModuleType:
    module = importlib.import_module(program.module)
    for attr in ("SCHEMA", "TOOLS", "snapshot"):
        if not hasattr(module, attr):
            raise ValueError(f"stateful program {program.module!r} lacks {attr!r}; expected SCHEMA, TOOLS, snapshot")
    return module


def build_database(module: ModuleType, initial_state: Mapping[str, list]) -> sqlite3.Connection:
    """A fresh in-memory database: ``module.SCHEMA`` then the initial rows, table by table."""
    db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    db.row_factory = sqlite3.Row
    db.executescript(module.SCHEMA)
    for table, rows in initial_state.items():
        for row in rows:
            cols = list(row)
            db.execute(
                f'INSERT INTO "{table}" ({", ".join(f"{c!s}" for c in cols)}) VALUES ({", ".join("?" * len(cols))})',
                [row[c] for c in cols],
            )
    return db


class InProcessBackend(StatefulBackend):
    def __init__(self) -> None:
        self._db: sqlite3.Connection | None = None
        self._module: ModuleType | None = None

    def start_episode(self, program: StatefulProgram, initial_state: Mapping[str, list]) -> None:
        self.close()
        self._module = load_program(program)
        self._db = build_database(self._module, initial_state)

    def call(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        assert self._db is not None and self._module is not None, "call before start_episode"
        fn = self._module.TOOLS.get(name)
        if fn is None:
            return ToolResult(Outcome.UNKNOWN_TOOL, error=f"unknown stateful tool {name!r}")
        # Each call is atomic: a tool that fails half-way leaves the state as it was.
        self._db.execute("SAVEPOINT tool_call")
        try:
            content = fn(self._db, dict(arguments))
        except Exception as exc:  # noqa: BLE001 - a tool's exception is the agent-visible error
            self._db.execute("ROLLBACK TO tool_call")
            self._db.execute("RELEASE tool_call")
            return ToolResult(Outcome.TOOL_ERROR, error=str(exc) or type(exc).__name__)
        self._db.execute("RELEASE tool_call")
        return ToolResult(Outcome.OK, content=content)

    def snapshot(self) -> dict[str, Any]:
        assert self._db is not None and self._module is not None, "snapshot before start_episode"
        return self._module.snapshot(self._db)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
        self._db = None
        self._module = None
