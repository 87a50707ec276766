"""A stateful program's database and one tool call on it (standard library only).

A *stateful program* is a module with ``SCHEMA`` (SQL), ``TOOLS`` (name -> ``fn(db, args)``) and
``snapshot(db)``. Both places that run such programs use this one implementation: the in-process
backend (``sopgym/sandboxes/inprocess.py``) imports it, and the sandbox image ships this file beside
the container's tool server (``sopgym/sandboxes/docker/server.py`` loads it by path, so it must stay
importable on its own: standard library only, no package-relative imports).
"""

import sqlite3

#: What a stateful program module must define.
PROGRAM_ATTRIBUTES = ("SCHEMA", "TOOLS", "snapshot")


def check_program(module, name):
    """Raise ``ValueError`` naming the first of :data:`PROGRAM_ATTRIBUTES` that ``module`` lacks."""
    for attr in PROGRAM_ATTRIBUTES:
        if not hasattr(module, attr):
            raise ValueError(f"stateful program {name!r} lacks {attr!r}; expected {', '.join(PROGRAM_ATTRIBUTES)}")
    return module


def build_database(module, initial_state):
    """A fresh in-memory database: ``module.SCHEMA`` then the initial rows, table by table."""
    db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    db.row_factory = sqlite3.Row
    db.executescript(module.SCHEMA)
    for table, rows in initial_state.items():
        for row in rows:
            cols = list(row)
            db.execute(
                'INSERT INTO "{}" ({}) VALUES ({})'.format(table, ", ".join(str(c) for c in cols), ", ".join("?" * len(cols))),
                [row[c] for c in cols],
            )
    return db


def call_tool(module, db, name, args):
    """Run tool ``name`` atomically (a SAVEPOINT: a tool that fails half-way leaves the state as it was).

    Returns ``{"outcome": "ok" | "unknown_tool" | "tool_error", "content", "error"}``; a tool's
    exception is the agent-visible error, never raised."""
    fn = module.TOOLS.get(name)
    if fn is None:
        return {"outcome": "unknown_tool", "content": None, "error": f"unknown stateful tool {name!r}"}
    db.execute("SAVEPOINT tool_call")
    try:
        content = fn(db, dict(args))
    except Exception as exc:  # noqa: BLE001 - a tool's exception is the agent-visible error
        db.execute("ROLLBACK TO tool_call")
        db.execute("RELEASE tool_call")
        return {"outcome": "tool_error", "content": None, "error": str(exc) or type(exc).__name__}
    db.execute("RELEASE tool_call")
    return {"outcome": "ok", "content": content, "error": ""}
