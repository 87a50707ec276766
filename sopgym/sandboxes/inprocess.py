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
from .sqlite_program import build_database, call_tool, check_program

__all__ = ["InProcessBackend", "load_program", "build_database"]


def load_program(program: StatefulProgram) -> ModuleType:
    return check_program(importlib.import_module(program.module), program.module)


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
        done = call_tool(self._module, self._db, name, arguments)
        return ToolResult(Outcome(done["outcome"]), content=done["content"], error=done["error"])

    def snapshot(self) -> dict[str, Any]:
        assert self._db is not None and self._module is not None, "snapshot before start_episode"
        return self._module.snapshot(self._db)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
        self._db = None
        self._module = None
