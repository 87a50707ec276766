"""Stateful program of BusinessVerificationKYB: the verification case system (standard library only).

This module also runs inside the Docker sandbox, where sopgym is not installed: it must import only
the standard library. Tools take ``(db, args)`` with validated arguments and return JSON-able
values; an exception's message is what the agent sees.

The case system derives a case's risk score from its findings plus the jurisdiction rating it
holds internally (table ``jurisdiction_risk``, never shown to the agent), and maps the score to a
risk tier. That rating is why the agent must read the case back rather than compute the tier.
"""

SCHEMA = """
CREATE TABLE applications (application_id TEXT PRIMARY KEY, jurisdiction TEXT NOT NULL);
CREATE TABLE jurisdiction_risk (jurisdiction TEXT PRIMARY KEY, points INTEGER NOT NULL);
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE cases (
    case_id TEXT PRIMARY KEY, application_id TEXT NOT NULL UNIQUE, jurisdiction TEXT NOT NULL,
    decision TEXT
);
CREATE TABLE findings (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, case_id TEXT NOT NULL, check_type TEXT NOT NULL,
    subject_id TEXT NOT NULL, result TEXT NOT NULL, UNIQUE (case_id, check_type, subject_id)
);
CREATE TABLE notes (seq INTEGER PRIMARY KEY AUTOINCREMENT, case_id TEXT NOT NULL, text TEXT NOT NULL);
"""

#: Risk points per (check, result). FAIL on any check is decisive on its own.
POINTS = {
    ("REGISTRY", "PASS"): 0, ("REGISTRY", "FLAG"): 25, ("REGISTRY", "FAIL"): 100,
    ("OWNERSHIP", "PASS"): 0, ("OWNERSHIP", "FLAG"): 20, ("OWNERSHIP", "FAIL"): 100,
    ("SANCTIONS", "PASS"): 0, ("SANCTIONS", "FLAG"): 30, ("SANCTIONS", "FAIL"): 100,
}
#: Lower bounds of each tier, highest first.
TIERS = ((80, "CRITICAL"), (45, "HIGH"), (20, "MEDIUM"), (0, "LOW"))


def risk_tier(score):
    """The tier of a risk score."""
    for bound, tier in TIERS:
        if score >= bound:
            return tier
    return "LOW"


def _case(db, case_id):
    row = db.execute("SELECT * FROM cases WHERE case_id = ?", (case_id,)).fetchone()
    if row is None:
        raise LookupError(f"case {case_id} not found; use the case id returned by open_case")
    return row


def open_case(db, args):
    app_id = args["application_id"]
    app = db.execute("SELECT * FROM applications WHERE application_id = ?", (app_id,)).fetchone()
    if app is None:
        raise LookupError(f"application {app_id} not found in the case system")
    existing = db.execute("SELECT case_id FROM cases WHERE application_id = ?", (app_id,)).fetchone()
    if existing is not None:
        return {"case_id": existing[0], "application_id": app_id, "already_open": True}
    counter = db.execute("SELECT value FROM counters WHERE name = 'case'").fetchone()[0]
    case_id = f"CASE-{counter:06d}"
    db.execute("UPDATE counters SET value = value + 1 WHERE name = 'case'")
    db.execute("INSERT INTO cases (case_id, application_id, jurisdiction) VALUES (?, ?, ?)",
               (case_id, app_id, app["jurisdiction"]))
    return {"case_id": case_id, "application_id": app_id, "already_open": False}


def attach_finding(db, args):
    case = _case(db, args["case_id"])
    if case["decision"] is not None:
        raise ValueError("case {} already has decision {} and accepts no more findings".format(case["case_id"], case["decision"]))
    check, subject = args["check"], args["subject_id"]
    dup = db.execute(
        "SELECT result FROM findings WHERE case_id = ? AND check_type = ? AND subject_id = ?",
        (case["case_id"], check, subject),
    ).fetchone()
    if dup is not None:
        raise ValueError("a {} finding for {} is already attached to case {} (result {}); findings cannot be edited".format(check, subject, case["case_id"], dup[0]))
    if check in ("REGISTRY", "OWNERSHIP") and not subject.startswith("ENT-"):
        raise ValueError(f"a {check} finding must be about the registry entity (ENT-...), got {subject}")
    db.execute("INSERT INTO findings (case_id, check_type, subject_id, result) VALUES (?, ?, ?, ?)",
               (case["case_id"], check, subject, args["result"]))
    count = db.execute("SELECT COUNT(*) FROM findings WHERE case_id = ?", (case["case_id"],)).fetchone()[0]
    return {"case_id": case["case_id"], "attached": {"check": check, "subject_id": subject, "result": args["result"]},
            "num_findings": count}


def _score(db, case):
    rows = db.execute("SELECT check_type, result FROM findings WHERE case_id = ?", (case["case_id"],)).fetchall()
    points = db.execute("SELECT points FROM jurisdiction_risk WHERE jurisdiction = ?", (case["jurisdiction"],)).fetchone()
    return sum(POINTS[(r[0], r[1])] for r in rows) + (points[0] if points is not None else 0)


def get_case(db, args):
    case = _case(db, args["case_id"])
    findings = [
        {"check": r[0], "subject_id": r[1], "result": r[2]}
        for r in db.execute(
            "SELECT check_type, subject_id, result FROM findings WHERE case_id = ? ORDER BY seq", (case["case_id"],)
        )
    ]
    score = _score(db, case)
    return {
        "case_id": case["case_id"], "application_id": case["application_id"], "findings": findings,
        "risk_score": score, "risk_tier": risk_tier(score),
        "status": "decided" if case["decision"] is not None else "open", "decision": case["decision"],
    }


def record_decision(db, args):
    case = _case(db, args["case_id"])
    if case["decision"] is not None:
        raise ValueError("case {} already has decision {}; a decision is final".format(case["case_id"], case["decision"]))
    has_registry = db.execute(
        "SELECT 1 FROM findings WHERE case_id = ? AND check_type = 'REGISTRY'", (case["case_id"],)
    ).fetchone()
    if has_registry is None:
        raise ValueError("case {} has no REGISTRY finding; attach the registry check before deciding".format(case["case_id"]))
    db.execute("UPDATE cases SET decision = ? WHERE case_id = ?", (args["decision"], case["case_id"]))
    return {"case_id": case["case_id"], "decision": args["decision"], "status": "decided"}


def add_case_note(db, args):
    _case(db, args["case_id"])
    db.execute("INSERT INTO notes (case_id, text) VALUES (?, ?)", (args["case_id"], args["text"]))
    return {"case_id": args["case_id"], "noted": True}


TOOLS = {
    "open_case": open_case,
    "attach_finding": attach_finding,
    "get_case": get_case,
    "record_decision": record_decision,
    "add_case_note": add_case_note,
}


def snapshot(db):
    """Findings and decisions of every case (notes are not part of the scored state)."""
    findings = sorted(
        [r[0], r[1], r[2], r[3]]
        for r in db.execute("SELECT case_id, check_type, subject_id, result FROM findings")
    )
    decisions = sorted([r[0], r[1]] for r in db.execute("SELECT case_id, decision FROM cases"))
    return {"findings": findings, "decisions": decisions}
