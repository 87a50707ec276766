"""Technical log of one tail (stateful program of AircraftPreflightInspection). Standard library only.

It runs in-process or inside the Docker sandbox, so it must not import sopgym. The log holds the
tail's defect history (closed defects included, which no read tool exposes), the open deferrals,
and the maintenance holds. ``record_defect`` applies the log's own rules (NO_GO items ground the
aircraft; the repeat-defect rule refuses a deferral when the same ATA code was raised twice or
more in the 30 days before the departure date); ``get_airworthiness_status`` computes each open
item's state (an open deferral past its due date is OVERDUE).

Tables (initial state keys): ``log_meta`` (key, value: ``today`` = departure date, ISO),
``aircraft`` (tail_number), ``defects`` (defect_id, tail_number, finding_id, ata_code, category,
restrictions as a JSON list, raised_on, due_on, state, grounding_reason, is_new), ``holds``.
"""

from __future__ import annotations

import datetime as _dt
import json
import sqlite3
from typing import Any

SCHEMA = """
CREATE TABLE log_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE aircraft (tail_number TEXT PRIMARY KEY);
CREATE TABLE defects (
    defect_id TEXT PRIMARY KEY,
    tail_number TEXT NOT NULL,
    finding_id TEXT,
    ata_code TEXT NOT NULL,
    category TEXT NOT NULL,
    restrictions TEXT NOT NULL DEFAULT '[]',
    raised_on TEXT NOT NULL,
    due_on TEXT,
    state TEXT NOT NULL,
    grounding_reason TEXT,
    is_new INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE holds (hold_id TEXT PRIMARY KEY, tail_number TEXT NOT NULL, reason TEXT NOT NULL, placed_on TEXT NOT NULL);
"""

INTERVAL_DAYS = {"B": 3, "C": 10, "D": 120}
REPEAT_WINDOW_DAYS = 30
REPEAT_THRESHOLD = 2


def _today(db: sqlite3.Connection) -> _dt.date:
    row = db.execute("SELECT value FROM log_meta WHERE key = 'today'").fetchone()
    return _dt.date.fromisoformat(row["value"])


def _check_tail(db: sqlite3.Connection, tail: str) -> None:
    if db.execute("SELECT 1 FROM aircraft WHERE tail_number = ?", (tail,)).fetchone() is None:
        known = ", ".join(r["tail_number"] for r in db.execute("SELECT tail_number FROM aircraft"))
        raise ValueError(f"tail {tail!r} is not in this station's technical log (expected one of: {known})")


def record_defect(db: sqlite3.Connection, args: dict[str, Any]) -> dict[str, Any]:
    tail = args["tail_number"]
    _check_tail(db, tail)
    finding = args["finding_id"]
    dup = db.execute(
        "SELECT defect_id FROM defects WHERE finding_id = ? AND tail_number = ?", (finding, tail)
    ).fetchone()
    if dup is not None:
        raise ValueError(f"finding {finding} is already recorded as defect {dup['defect_id']}")
    today = _today(db)
    ata, category = args["ata_code"], args["mel_category"]
    restrictions = sorted(set(args.get("restrictions", [])))
    if category == "NO_GO" and restrictions:
        raise ValueError(f"a NO_GO item is recorded without restrictions, got {restrictions}")
    since = (today - _dt.timedelta(days=REPEAT_WINDOW_DAYS)).isoformat()
    repeats = db.execute(
        "SELECT COUNT(*) AS n FROM defects WHERE tail_number = ? AND ata_code = ? AND raised_on >= ? AND raised_on <= ?",
        (tail, ata, since, today.isoformat()),
    ).fetchone()["n"]
    if category == "NO_GO":
        state, reason, due = "GROUNDING", "NO_GO_ITEM", None
    elif repeats >= REPEAT_THRESHOLD:
        state, reason, due = "GROUNDING", "REPEAT_DEFECT", None
    else:
        state, reason, due = "DEFERRED", None, (today + _dt.timedelta(days=INTERVAL_DAYS[category])).isoformat()
    number = db.execute("SELECT COUNT(*) AS n FROM defects").fetchone()["n"] + 1
    defect_id = f"TL-{number:05d}"
    while db.execute("SELECT 1 FROM defects WHERE defect_id = ?", (defect_id,)).fetchone() is not None:
        number += 1
        defect_id = f"TL-{number:05d}"
    db.execute(
        "INSERT INTO defects VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
        (defect_id, tail, finding, ata, category, json.dumps(restrictions), today.isoformat(), due, state, reason),
    )
    return {
        "defect_id": defect_id,
        "tail_number": tail,
        "finding_id": finding,
        "ata_code": ata,
        "category": category,
        "restrictions": restrictions,
        "state": state,
        "grounding_reason": reason,
        "due_on": due,
    }


def get_airworthiness_status(db: sqlite3.Connection, args: dict[str, Any]) -> dict[str, Any]:
    tail = args["tail_number"]
    _check_tail(db, tail)
    today = _today(db)
    items = []
    for row in db.execute(
        "SELECT * FROM defects WHERE tail_number = ? AND state != 'CLOSED' ORDER BY defect_id", (tail,)
    ):
        state = row["state"]
        if state == "DEFERRED" and row["due_on"] < today.isoformat():
            state = "OVERDUE"
        items.append(
            {
                "defect_id": row["defect_id"],
                "ata_code": row["ata_code"],
                "category": row["category"],
                "state": state,
                "grounding_reason": row["grounding_reason"],
                "raised_on": row["raised_on"],
                "due_on": row["due_on"],
                "restrictions": json.loads(row["restrictions"]),
            }
        )
    holds = [
        dict(r)
        for r in db.execute(
            "SELECT hold_id, reason, placed_on FROM holds WHERE tail_number = ? ORDER BY hold_id", (tail,)
        )
    ]
    return {"tail_number": tail, "as_of": today.isoformat(), "open_items": items, "maintenance_holds": holds}


def place_maintenance_hold(db: sqlite3.Connection, args: dict[str, Any]) -> dict[str, Any]:
    tail = args["tail_number"]
    _check_tail(db, tail)
    existing = db.execute("SELECT hold_id FROM holds WHERE tail_number = ?", (tail,)).fetchone()
    if existing is not None:
        raise ValueError(f"tail {tail} already has maintenance hold {existing['hold_id']}")
    hold_id = f"MH-{tail}-1"
    today = _today(db).isoformat()
    db.execute("INSERT INTO holds VALUES (?, ?, ?, ?)", (hold_id, tail, args["reason"], today))
    return {"hold_id": hold_id, "tail_number": tail, "reason": args["reason"], "placed_on": today}


TOOLS = {
    "record_defect": record_defect,
    "get_airworthiness_status": get_airworthiness_status,
    "place_maintenance_hold": place_maintenance_hold,
}


def snapshot(db: sqlite3.Connection) -> dict[str, Any]:
    """What the reward compares: the defects recorded this episode and the holds placed."""
    new = [
        [r["finding_id"], r["ata_code"], r["category"], json.loads(r["restrictions"]), r["state"]]
        for r in db.execute("SELECT * FROM defects WHERE is_new = 1 ORDER BY finding_id")
    ]
    holds = [[r["tail_number"], r["reason"]] for r in db.execute("SELECT * FROM holds ORDER BY hold_id")]
    return {"recorded_defects": new, "maintenance_holds": holds}
