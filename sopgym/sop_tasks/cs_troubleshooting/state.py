"""Stateful program of CustomerServiceTroubleshooting: a broadband provider's care systems.

Standard library only and self-contained: this module also runs inside the Docker sandbox, where
sopgym is not installed (see ``sopgym.sandboxes.StatefulProgram``). It defines ``SCHEMA``,
``TOOLS`` and ``snapshot``.

What the program owns (and the agent can only observe through its tools):

* sessions: ``authenticate`` issues a session token every other customer tool requires;
* line state: ``reset_port`` changes what the next ``run_line_test`` reports;
* tickets: ``open_ticket`` -> ticket id; ``add_findings`` attaches finding codes; the ticket's
  priority and SLA are computed here from the findings and the customer's segment, and are
  visible only through ``get_ticket``; ``escalate_ticket`` and ``close_ticket`` end its life.

A tool raises an exception whose message is the agent-visible error; the backend rolls the whole
call back, so a failing write leaves the state unchanged.
"""

import hashlib

SCHEMA = """
CREATE TABLE config (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE customers (
    customer_id TEXT PRIMARY KEY, verification_code TEXT NOT NULL, name TEXT NOT NULL,
    segment TEXT NOT NULL, priority_care INTEGER NOT NULL, account_status TEXT NOT NULL,
    region_code TEXT NOT NULL, contact_channel TEXT NOT NULL, balance_due_cents INTEGER NOT NULL
);
CREATE TABLE services (
    service_id TEXT PRIMARY KEY, customer_id TEXT NOT NULL, type TEXT NOT NULL,
    technology TEXT, plan_speed_mbps INTEGER
);
CREATE TABLE lines (
    service_id TEXT PRIMARY KEY, port_state TEXT NOT NULL, sync INTEGER NOT NULL,
    downstream_mbps REAL, packet_loss_pct REAL, snr_db REAL,
    post_sync INTEGER NOT NULL, post_downstream_mbps REAL, post_packet_loss_pct REAL, post_snr_db REAL
);
CREATE TABLE outages (
    outage_id TEXT PRIMARY KEY, region_code TEXT NOT NULL, technology TEXT NOT NULL,
    status TEXT NOT NULL, summary TEXT NOT NULL
);
CREATE TABLE ticket_history (
    ticket_id TEXT PRIMARY KEY, service_id TEXT NOT NULL, category TEXT NOT NULL, days_ago INTEGER NOT NULL
);
CREATE TABLE invoices (customer_id TEXT NOT NULL, month TEXT NOT NULL, amount_cents INTEGER NOT NULL, paid INTEGER NOT NULL);
CREATE TABLE offers (offer_id TEXT PRIMARY KEY, title TEXT NOT NULL, monthly_cents INTEGER NOT NULL);
CREATE TABLE sessions (token TEXT PRIMARY KEY, customer_id TEXT NOT NULL);
CREATE TABLE tickets (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, ticket_id TEXT UNIQUE NOT NULL, customer_id TEXT NOT NULL,
    service_id TEXT NOT NULL, category TEXT NOT NULL, status TEXT NOT NULL,
    escalation_tier TEXT, resolution TEXT
);
CREATE TABLE findings (ticket_id TEXT NOT NULL, code TEXT NOT NULL, PRIMARY KEY (ticket_id, code));
CREATE TABLE port_resets (seq INTEGER PRIMARY KEY AUTOINCREMENT, service_id TEXT NOT NULL);
"""

CATEGORIES = ("BILLING", "OUTAGE", "LINE_FAULT", "NO_FAULT")
FINDING_WEIGHTS = {
    "OUTAGE_CONFIRMED": 30,
    "NO_SYNC": 40,
    "LOW_SNR": 15,
    "HIGH_PACKET_LOSS": 20,
    "SPEED_BELOW_PLAN": 15,
    "REPEAT_FAULT": 25,
    "PORT_RESET_FAILED": 10,
    "CARE_FLAG": 20,
}
BUSINESS_BONUS = 15
#: (minimum score, priority) from the most to the least urgent.
PRIORITY_BANDS = ((70, "P1"), (45, "P2"), (20, "P3"), (0, "P4"))
SLA_HOURS = {"P1": 4, "P2": 8, "P3": 24, "P4": 72}
TIERS = ("TIER2", "FIELD_TECH", "NETWORK_OPS")
RESOLUTIONS = ("RESOLVED_REMOTE", "NO_FAULT_FOUND")


def _config(db, key):
    row = db.execute("SELECT value FROM config WHERE key = ?", (key,)).fetchone()
    if row is None:
        raise RuntimeError(f"care system misconfigured: no {key!r}")
    return row["value"]


def _session(db, args):
    """The customer id of a valid session token, or a clear error."""
    token = args["session_token"]
    row = db.execute("SELECT customer_id FROM sessions WHERE token = ?", (token,)).fetchone()
    if row is None:
        raise PermissionError(
            f"invalid session token {token!r}: call authenticate first and pass the session_token it returned"
        )
    return row["customer_id"]


def _own_service(db, customer_id, service_id):
    row = db.execute("SELECT * FROM services WHERE service_id = ?", (service_id,)).fetchone()
    if row is None:
        raise LookupError(f"service {service_id!r} not found")
    if row["customer_id"] != customer_id:
        raise PermissionError(f"service {service_id!r} does not belong to the authenticated customer {customer_id}")
    return row


def _own_ticket(db, customer_id, ticket_id):
    row = db.execute("SELECT * FROM tickets WHERE ticket_id = ?", (ticket_id,)).fetchone()
    if row is None or row["customer_id"] != customer_id:
        raise LookupError(f"ticket {ticket_id!r} not found for customer {customer_id}")
    return row


def _findings(db, ticket_id):
    return sorted(r["code"] for r in db.execute("SELECT code FROM findings WHERE ticket_id = ?", (ticket_id,)))


def ticket_priority(codes, business):
    """(score, priority, sla_hours) of a ticket with these finding codes: the ticketing system's rule.

    The task generator labels with it too: the priority is the care system's, not the SOP's.
    """
    score = sum(FINDING_WEIGHTS[c] for c in codes) + (BUSINESS_BONUS if business else 0)
    priority = next(p for floor, p in PRIORITY_BANDS if score >= floor)
    sla = SLA_HOURS[priority] // (2 if business else 1)
    return score, priority, sla


def _priority(db, ticket):
    """(score, priority, sla_hours) of a stored ticket."""
    segment = db.execute("SELECT segment FROM customers WHERE customer_id = ?", (ticket["customer_id"],)).fetchone()[
        "segment"
    ]
    return ticket_priority(_findings(db, ticket["ticket_id"]), segment == "business")


# -- tools -----------------------------------------------------------------------------------------
def authenticate(db, args):
    row = db.execute("SELECT * FROM customers WHERE customer_id = ?", (args["customer_id"],)).fetchone()
    if row is None:
        raise LookupError(f"customer {args['customer_id']!r} not found")
    if row["verification_code"] != args["verification_code"]:
        raise PermissionError(f"verification failed for customer {args['customer_id']}: the code does not match")
    salt = _config(db, "token_salt")
    token = "SESS-" + hashlib.sha256(f"{salt}|{row['customer_id']}".encode()).hexdigest()[:12].upper()
    db.execute("INSERT OR IGNORE INTO sessions (token, customer_id) VALUES (?, ?)", (token, row["customer_id"]))
    return {"session_token": token, "customer_id": row["customer_id"], "name": row["name"]}


def get_account(db, args):
    customer_id = _session(db, args)
    row = db.execute("SELECT * FROM customers WHERE customer_id = ?", (customer_id,)).fetchone()
    services = [
        {
            "service_id": s["service_id"],
            "type": s["type"],
            "technology": s["technology"],
            "plan_speed_mbps": s["plan_speed_mbps"],
        }
        for s in db.execute("SELECT * FROM services WHERE customer_id = ? ORDER BY service_id", (customer_id,))
    ]
    return {
        "customer_id": customer_id,
        "name": row["name"],
        "segment": row["segment"],
        "priority_care": bool(row["priority_care"]),
        "account_status": row["account_status"],
        "region_code": row["region_code"],
        "balance_due_cents": row["balance_due_cents"],
        "services": services,
    }


def check_outage(db, args):
    rows = db.execute("SELECT * FROM outages WHERE region_code = ? ORDER BY outage_id", (args["region_code"],))
    outages = [{k: r[k] for k in ("outage_id", "region_code", "technology", "status", "summary")} for r in rows]
    return {"region_code": args["region_code"], "outages": outages}


def _own_broadband(db, args, rule):
    """The session customer's service ``args["service_id"]``, which must be broadband (``rule`` ends the error)."""
    customer_id = _session(db, args)
    service = _own_service(db, customer_id, args["service_id"])
    if service["type"] != "broadband":
        raise ValueError(f"service {args['service_id']} is a {service['type']} service: {rule}")
    return service


def _resets(db, service_id):
    """How often the service's port was reset this episode."""
    return db.execute("SELECT COUNT(*) AS n FROM port_resets WHERE service_id = ?", (service_id,)).fetchone()["n"]


def run_line_test(db, args):
    _own_broadband(db, args, "line tests run on broadband services only")
    line = db.execute("SELECT * FROM lines WHERE service_id = ?", (args["service_id"],)).fetchone()
    was_reset = _resets(db, args["service_id"]) > 0
    prefix = "post_" if was_reset else ""
    sync = bool(line[prefix + "sync"])
    return {
        "service_id": args["service_id"],
        "port_state": "ok" if was_reset else line["port_state"],
        "sync": sync,
        "downstream_mbps": line[prefix + "downstream_mbps"] if sync else None,
        "packet_loss_pct": line[prefix + "packet_loss_pct"] if sync else None,
        "snr_db": line[prefix + "snr_db"] if sync else None,
    }


def reset_port(db, args):
    _own_broadband(db, args, "only broadband ports can be reset")
    line = db.execute("SELECT port_state FROM lines WHERE service_id = ?", (args["service_id"],)).fetchone()
    if line["port_state"] != "errored" or _resets(db, args["service_id"]):
        raise ValueError(f"port of service {args['service_id']} is not in the errored state: reset refused")
    db.execute("INSERT INTO port_resets (service_id) VALUES (?)", (args["service_id"],))
    return {"service_id": args["service_id"], "reset": "done"}


def get_ticket_history(db, args):
    customer_id = _session(db, args)
    _own_service(db, customer_id, args["service_id"])
    rows = db.execute(
        "SELECT * FROM ticket_history WHERE service_id = ? ORDER BY days_ago, ticket_id", (args["service_id"],)
    )
    return {
        "service_id": args["service_id"],
        "tickets": [{"ticket_id": r["ticket_id"], "category": r["category"], "days_ago": r["days_ago"]} for r in rows],
    }


def open_ticket(db, args):
    customer_id = _session(db, args)
    _own_service(db, customer_id, args["service_id"])
    if args["category"] not in CATEGORIES:
        raise ValueError(f"category must be one of {', '.join(CATEGORIES)}, got {args['category']!r}")
    existing = db.execute(
        "SELECT ticket_id FROM tickets WHERE service_id = ? AND status = 'open'", (args["service_id"],)
    ).fetchone()
    if existing is not None:
        raise ValueError(
            f"service {args['service_id']} already has open ticket {existing['ticket_id']}: use it instead of opening another"
        )
    number = int(_config(db, "next_ticket"))
    ticket_id = f"TCK-{number}"
    db.execute("UPDATE config SET value = ? WHERE key = 'next_ticket'", (str(number + 1),))
    db.execute(
        "INSERT INTO tickets (ticket_id, customer_id, service_id, category, status) VALUES (?, ?, ?, ?, 'open')",
        (ticket_id, customer_id, args["service_id"], args["category"]),
    )
    return {"ticket_id": ticket_id, "status": "open"}


def add_findings(db, args):
    customer_id = _session(db, args)
    ticket = _own_ticket(db, customer_id, args["ticket_id"])
    if ticket["status"] != "open":
        raise ValueError(
            f"ticket {ticket['ticket_id']} is {ticket['status']}: findings can only be added to open tickets"
        )
    codes = list(args["codes"])
    if not codes:
        raise ValueError("codes must list at least one finding code")
    for code in codes:
        if code not in FINDING_WEIGHTS:
            raise ValueError(f"unknown finding code {code!r}; expected one of {', '.join(FINDING_WEIGHTS)}")
        exists = db.execute(
            "SELECT 1 FROM findings WHERE ticket_id = ? AND code = ?", (ticket["ticket_id"], code)
        ).fetchone()
        if exists:
            raise ValueError(f"finding {code} is already attached to ticket {ticket['ticket_id']}")
        db.execute("INSERT INTO findings (ticket_id, code) VALUES (?, ?)", (ticket["ticket_id"], code))
    return {"ticket_id": ticket["ticket_id"], "findings_attached": len(codes)}


def get_ticket(db, args):
    customer_id = _session(db, args)
    ticket = _own_ticket(db, customer_id, args["ticket_id"])
    _, priority, sla = _priority(db, ticket)
    return {
        "ticket_id": ticket["ticket_id"],
        "service_id": ticket["service_id"],
        "category": ticket["category"],
        "status": ticket["status"],
        "findings": _findings(db, ticket["ticket_id"]),
        "priority": priority,
        "sla_hours": sla,
        "escalation_tier": ticket["escalation_tier"],
        "resolution": ticket["resolution"],
    }


def _end_ticket(db, args, *, argument, column, allowed, status, verb, needs_findings=False):
    """Move an open ticket of the session's customer to ``status``, storing ``args[argument]`` (one
    of ``allowed``) in ``column``; ``verb`` names the move in the error messages."""
    customer_id = _session(db, args)
    ticket = _own_ticket(db, customer_id, args["ticket_id"])
    value = args[argument]
    if value not in allowed:
        raise ValueError(f"{argument} must be one of {', '.join(allowed)}, got {value!r}")
    if ticket["status"] != "open":
        raise ValueError(f"ticket {ticket['ticket_id']} is {ticket['status']}: only open tickets can be {verb}")
    if needs_findings and not _findings(db, ticket["ticket_id"]):
        raise ValueError(f"ticket {ticket['ticket_id']} has no findings: attach findings before escalating")
    db.execute(f"UPDATE tickets SET status = ?, {column} = ? WHERE ticket_id = ?", (status, value, ticket["ticket_id"]))
    return {"ticket_id": ticket["ticket_id"], "status": status, column: value}


def escalate_ticket(db, args):
    return _end_ticket(db, args, argument="tier", column="escalation_tier", allowed=TIERS, status="escalated",
                       verb="escalated", needs_findings=True)


def close_ticket(db, args):
    return _end_ticket(db, args, argument="resolution", column="resolution", allowed=RESOLUTIONS, status="closed",
                       verb="closed")


# -- distractors (the SOP never needs them) ------------------------------------------------------
def get_billing_summary(db, args):
    customer_id = _session(db, args)
    rows = db.execute(
        "SELECT month, amount_cents, paid FROM invoices WHERE customer_id = ? ORDER BY month", (customer_id,)
    )
    return {
        "customer_id": customer_id,
        "invoices": [{"month": r["month"], "amount_cents": r["amount_cents"], "paid": bool(r["paid"])} for r in rows],
    }


def list_plan_offers(db, args):
    _session(db, args)
    rows = db.execute("SELECT * FROM offers ORDER BY offer_id")
    return {
        "offers": [{"offer_id": r["offer_id"], "title": r["title"], "monthly_cents": r["monthly_cents"]} for r in rows]
    }


def update_contact_preferences(db, args):
    customer_id = _session(db, args)
    db.execute("UPDATE customers SET contact_channel = ? WHERE customer_id = ?", (args["channel"], customer_id))
    return {"customer_id": customer_id, "contact_channel": args["channel"]}


TOOLS = {
    "authenticate": authenticate,
    "get_account": get_account,
    "check_outage": check_outage,
    "run_line_test": run_line_test,
    "reset_port": reset_port,
    "get_ticket_history": get_ticket_history,
    "open_ticket": open_ticket,
    "add_findings": add_findings,
    "get_ticket": get_ticket,
    "escalate_ticket": escalate_ticket,
    "close_ticket": close_ticket,
    "get_billing_summary": get_billing_summary,
    "list_plan_offers": list_plan_offers,
    "update_contact_preferences": update_contact_preferences,
}


def snapshot(db):
    """The final state the reward checks: tickets opened this episode and ports reset."""
    tickets = []
    for t in db.execute("SELECT * FROM tickets ORDER BY seq"):
        tickets.append(
            {
                "service_id": t["service_id"],
                "category": t["category"],
                "status": t["status"],
                "escalation_tier": t["escalation_tier"],
                "resolution": t["resolution"],
                "findings": _findings(db, t["ticket_id"]),
            }
        )
    resets = [r["service_id"] for r in db.execute("SELECT service_id FROM port_resets ORDER BY seq")]
    return {"tickets": tickets, "port_resets": resets}
