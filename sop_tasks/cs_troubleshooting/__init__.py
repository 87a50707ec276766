"""CustomerServiceTroubleshooting: broadband fault contacts (SOP CS-BB-12). Stateful tier.

Every tool runs in the stateful program ``state.py`` (one SQLite database per episode): the agent
authenticates (session token), reads the account, checks outages, runs line tests whose results
change after a port reset, opens a ticket, attaches findings, reads the ticket back for the
priority and SLA the program computes, and escalates or closes it. The answer depends on state
the agent wrote; ``expected_state`` checks the writes themselves (one ticket with the right
category, findings, status and escalation tier; the right port resets).

The generator builds a customer's facts around a target resolution status (balanced over the
five), with decoys (other technologies' outages, restored outages, old or billing tickets,
boundary measurements) and labels the task with its own decision table (``_label``). The
reference solver (``solve``) re-implements the SOP from the text, reads every fact through the
tools and never calls ``_label``.
"""

from __future__ import annotations

import random
from typing import Any

from sopgym.sandboxes import StatefulProgram, Tier, ToolSpec
from sopgym.sop_tasks.cs_troubleshooting.state import FINDING_WEIGHTS
from sopgym.sop_tasks.pack import DomainPack, OutputField, ToolCall, ToolError, object_schema, read_text

RESOLUTIONS = ("REFERRED_BILLING", "OUTAGE_LINKED", "RESOLVED_REMOTE", "ESCALATED", "NO_FAULT_FOUND")
PRIORITIES = ("P1", "P2", "P3", "P4")
TIERS = ("NONE", "TIER2", "FIELD_TECH", "NETWORK_OPS")
CATEGORIES = ("BILLING", "OUTAGE", "LINE_FAULT", "NO_FAULT")
FINDINGS = (
    "OUTAGE_CONFIRMED",
    "NO_SYNC",
    "LOW_SNR",
    "HIGH_PACKET_LOSS",
    "SPEED_BELOW_PLAN",
    "REPEAT_FAULT",
    "PORT_RESET_FAILED",
    "CARE_FLAG",
)
SYMPTOMS = ("no_connection", "slow_speed", "intermittent_drops", "wifi_issue")
_PLANS = {"fiber": (300, 500, 1000), "dsl": (20, 40, 80), "cable": (200, 500)}

_token = {"type": "string", "minLength": 1, "description": "session_token returned by authenticate"}
_service = {"type": "string", "minLength": 1, "description": "a service_id from get_account"}
_ticket = {"type": "string", "minLength": 1, "description": "a ticket_id returned by open_ticket"}




def _spec(
    name: str, description: str, params: dict[str, Any], *, writes: bool = False, distractor: bool = False
) -> ToolSpec:
    return ToolSpec(name, description, params, tier=Tier.STATEFUL, writes=writes, distractor=distractor)


TOOLS = (
    _spec(
        "authenticate",
        "Verify a customer with the verification code from the contact. Returns a session_token.",
        object_schema(
            customer_id={"type": "string", "pattern": "^CUS-[0-9]{6}$"},
            verification_code={"type": "string", "pattern": "^[0-9]{6}$"},
        ),
    ),
    _spec(
        "get_account",
        "The authenticated customer's account: segment, priority_care, account_status, "
        "region_code, balance due and services (service_id, type, technology, plan_speed_mbps).",
        object_schema(session_token=_token),
    ),
    _spec(
        "check_outage",
        "Known network outages recorded for a region code (any status, any technology).",
        object_schema(region_code={"type": "string", "pattern": "^RG-[0-9]{2}$"}),
    ),
    _spec(
        "run_line_test",
        "Run a line test on a broadband service: port_state, sync, downstream_mbps, packet_loss_pct, snr_db.",
        object_schema(session_token=_token, service_id=_service),
    ),
    _spec(
        "reset_port",
        "Remotely reset the network port of a broadband service (only when errored).",
        object_schema(session_token=_token, service_id=_service),
        writes=True,
    ),
    _spec(
        "get_ticket_history",
        "Earlier tickets of a service: ticket_id, category, days_ago.",
        object_schema(session_token=_token, service_id=_service),
    ),
    _spec(
        "open_ticket",
        "Open a ticket for a service with a category. Returns the ticket_id.",
        object_schema(session_token=_token, service_id=_service, category={"type": "string", "enum": list(CATEGORIES)}),
        writes=True,
    ),
    _spec(
        "add_findings",
        "Attach finding codes to an open ticket (all or nothing).",
        object_schema(
            session_token=_token,
            ticket_id=_ticket,
            codes={"type": "array", "items": {"type": "string", "enum": list(FINDINGS)}, "minItems": 1},
        ),
        writes=True,
    ),
    _spec(
        "get_ticket",
        "Read a ticket: status, findings, the computed priority and sla_hours, escalation tier, resolution.",
        object_schema(session_token=_token, ticket_id=_ticket),
    ),
    _spec(
        "escalate_ticket",
        "Escalate an open ticket that has findings to a support tier.",
        object_schema(session_token=_token, ticket_id=_ticket, tier={"type": "string", "enum": list(TIERS[1:])}),
        writes=True,
    ),
    _spec(
        "close_ticket",
        "Close an open ticket with a resolution.",
        object_schema(
            session_token=_token,
            ticket_id=_ticket,
            resolution={"type": "string", "enum": ["RESOLVED_REMOTE", "NO_FAULT_FOUND"]},
        ),
        writes=True,
    ),
    _spec(
        "get_billing_summary",
        "The customer's recent invoices and whether they were paid.",
        object_schema(session_token=_token),
        distractor=True,
    ),
    _spec(
        "list_plan_offers",
        "Broadband plan upgrade offers currently available.",
        object_schema(session_token=_token),
        distractor=True,
    ),
    _spec(
        "update_contact_preferences",
        "Change the customer's preferred contact channel.",
        object_schema(session_token=_token, channel={"type": "string", "enum": ["phone", "email", "sms", "chat"]}),
        writes=True,
        distractor=True,
    ),
)

FIELDS = (
    OutputField("resolution_status", enum=RESOLUTIONS, description="Outcome of the contact (SOP section 4)."),
    OutputField("ticket_priority", enum=PRIORITIES, description="The ticket's priority as read back from the ticket."),
    OutputField("escalation_tier", enum=TIERS, description="Tier the ticket was escalated to, or NONE."),
    OutputField("sla_hours", type="integer", description="The ticket's SLA in hours as read back from the ticket."),
)


# ---------------------------------------------------------------------------------------------
# Generator: facts built around a target resolution, labelled by a decision table.
# ---------------------------------------------------------------------------------------------
def _line_faults(m: dict[str, Any], plan: int) -> list[str]:
    """Line findings of one measurement (tenths compared as integers, so boundaries are exact)."""
    if not m["sync"]:
        return ["NO_SYNC"]
    out = []
    if round(m["snr_db"] * 10) < 60:
        out.append("LOW_SNR")
    if round(m["packet_loss_pct"] * 10) > 20:
        out.append("HIGH_PACKET_LOSS")
    if round(m["downstream_mbps"] * 10) * 2 < plan * 10:
        out.append("SPEED_BELOW_PLAN")
    return out


def _label(f: dict[str, Any]) -> dict[str, Any]:
    """Resolution, ticket contents, priority, SLA and tier from the facts."""
    findings: list[str] = []
    reset = False
    if f["suspended"]:
        category, resolution = "BILLING", "REFERRED_BILLING"
    elif any(o["status"] == "active" and o["technology"] == f["technology"] for o in f["own_outages"]):
        category, resolution = "OUTAGE", "OUTAGE_LINKED"
        findings.append("OUTAGE_CONFIRMED")
    else:
        reset = f["port_state"] == "errored"
        faults = _line_faults(f["post"] if reset else f["pre"], f["plan"])
        repeat = (
            sum(1 for h in f["history"] if h["category"] in ("LINE_FAULT", "NO_FAULT") and h["days_ago"] <= 30) >= 2
        )
        findings += faults
        if reset and faults:
            findings.append("PORT_RESET_FAILED")
        if repeat:
            findings.append("REPEAT_FAULT")
        if faults or (repeat and not reset):
            category, resolution = "LINE_FAULT", "ESCALATED"
        elif reset:
            category, resolution = "LINE_FAULT", "RESOLVED_REMOTE"
        else:
            category, resolution = "NO_FAULT", "NO_FAULT_FOUND"
    if f["care"]:
        findings.append("CARE_FLAG")
    business = f["segment"] == "business"
    # The ticket system's own points table (state.py).
    score = sum(FINDING_WEIGHTS[c] for c in findings) + (15 if business else 0)
    priority = "P1" if score >= 70 else "P2" if score >= 45 else "P3" if score >= 20 else "P4"
    sla = {"P1": 4, "P2": 8, "P3": 24, "P4": 72}[priority] // (2 if business else 1)
    tier, status, closed_as = "NONE", "open", None
    if resolution == "ESCALATED":
        status = "escalated"
        tier = "FIELD_TECH" if {"NO_SYNC", "LOW_SNR"} & set(findings) else "TIER2"
        if priority == "P1" and business:
            tier = "NETWORK_OPS"
    elif resolution in ("RESOLVED_REMOTE", "NO_FAULT_FOUND"):
        status, closed_as = "closed", resolution
    ticket = {
        "service_id": f["service_id"],
        "category": category,
        "status": status,
        "escalation_tier": None if tier == "NONE" else tier,
        "resolution": closed_as,
        "findings": sorted(findings),
    }
    return {
        "answer": {
            "resolution_status": resolution,
            "ticket_priority": priority,
            "escalation_tier": tier,
            "sla_hours": sla,
        },
        "expected_state": {"tickets": [ticket], "port_resets": [f["service_id"]] if reset else []},
    }


def _tenth(rng: random.Random, lo: float, hi: float) -> float:
    return rng.randint(round(lo * 10), round(hi * 10)) / 10


def _clean_line(rng: random.Random, plan: int) -> dict[str, Any]:
    """A measurement with no line finding; boundaries (exactly 6.0 dB, 2.0 %, half the plan) included."""
    edge = rng.random() < 0.25
    return {
        "sync": True,
        "snr_db": 6.0 if edge and rng.random() < 0.5 else _tenth(rng, 6.0, 38.0),
        "packet_loss_pct": 2.0 if edge and rng.random() < 0.5 else _tenth(rng, 0.0, 2.0),
        "downstream_mbps": plan / 2 if edge and rng.random() < 0.5 else _tenth(rng, plan / 2, plan * 0.98),
    }


def _faulty_line(rng: random.Random, plan: int) -> dict[str, Any]:
    """A measurement with at least one line finding."""
    if rng.random() < 0.3:
        return {"sync": False, "snr_db": None, "packet_loss_pct": None, "downstream_mbps": None}
    m = _clean_line(rng, plan)
    kinds = rng.sample(("snr", "loss", "speed"), rng.choice((1, 1, 2, 3)))
    if "snr" in kinds:
        m["snr_db"] = _tenth(rng, 1.0, 5.9)
    if "loss" in kinds:
        m["packet_loss_pct"] = _tenth(rng, 2.1, 14.0)
    if "speed" in kinds:
        m["downstream_mbps"] = _tenth(rng, plan * 0.05, plan / 2 - 0.1)
    return m


def _history(rng: random.Random, repeat: bool) -> list[dict[str, Any]]:
    """Earlier tickets: 2-3 counting ones when ``repeat``, else at most one, plus decoys."""
    counting = rng.randint(2, 3) if repeat else rng.choice((0, 0, 1))
    rows = [
        {"category": rng.choice(("LINE_FAULT", "NO_FAULT")), "days_ago": rng.choice((30, rng.randint(1, 30)))}
        for _ in range(counting)
    ]
    for _ in range(rng.randint(0, 3)):  # decoys: billing/outage tickets, or fault tickets older than 30 days
        if rng.random() < 0.5:
            rows.append({"category": rng.choice(("BILLING", "OUTAGE")), "days_ago": rng.randint(1, 30)})
        else:
            rows.append({"category": rng.choice(("LINE_FAULT", "NO_FAULT")), "days_ago": rng.randint(31, 180)})
    return rows


def _outages(rng: random.Random, region: str, tech: str, matching: bool) -> list[dict[str, Any]]:
    """Outages of the customer's region: decoys that must not count, and one that does if ``matching``."""
    rows = []
    for _ in range(rng.randint(0, 3)):
        kind = rng.choice(("other_tech", "restored", "planned"))
        other = rng.choice([t for t in _PLANS if t != tech])
        if kind == "other_tech":
            rows.append({"technology": other, "status": "active"})
        else:
            rows.append({"technology": rng.choice((tech, other)), "status": kind})
    if matching:
        rows.insert(rng.randint(0, len(rows)), {"technology": tech, "status": "active"})
    return [dict(r, region_code=region) for r in rows]


def _facts(rng: random.Random, target: str) -> dict[str, Any]:
    tech = rng.choice(tuple(_PLANS))
    plan = rng.choice(_PLANS[tech])
    f: dict[str, Any] = {
        "segment": "business" if rng.random() < 0.35 else "residential",
        "care": rng.random() < 0.3,
        "technology": tech,
        "plan": plan,
        "suspended": target == "REFERRED_BILLING",
        "variant": "",
    }
    region = f"RG-{rng.randint(10, 99)}"
    f["region"] = region
    f["own_outages"] = _outages(
        rng, region, tech, matching=target == "OUTAGE_LINKED" or (target == "REFERRED_BILLING" and rng.random() < 0.3)
    )
    repeat = rng.random() < 0.3
    port, pre, post = "ok", _clean_line(rng, plan), None
    if target in ("REFERRED_BILLING", "OUTAGE_LINKED"):
        if rng.random() < 0.7:
            pre = _faulty_line(rng, plan)
        port = rng.choice(("ok", "ok", "errored"))
    elif target == "RESOLVED_REMOTE":
        port, pre, post = "errored", _faulty_line(rng, plan), _clean_line(rng, plan)
    elif target == "NO_FAULT_FOUND":
        repeat = False
    else:  # ESCALATED
        f["variant"] = rng.choice(("fault", "fault", "reset_failed", "repeat"))
        if f["variant"] == "fault":
            pre = _faulty_line(rng, plan)
        elif f["variant"] == "reset_failed":
            port, pre, post = "errored", _faulty_line(rng, plan), _faulty_line(rng, plan)
        else:
            repeat = True
    f.update(port_state=port, pre=pre, post=post or _clean_line(rng, plan), history=_history(rng, repeat))
    return f


def _new_id(rng: random.Random, prefix: str, digits: int, used: set[str]) -> str:
    """A random identifier not in ``used`` (and now added to it)."""
    while True:
        ident = f"{prefix}{rng.randint(0, 10**digits - 1):0{digits}d}"
        if ident not in used:
            used.add(ident)
            return ident


def _customer_rows(
    rng: random.Random, cid: str, code: str, f: dict[str, Any], bb_id: str, used: set[str]
) -> dict[str, list]:
    """Rows of one customer: the customer, the broadband service and its line, and tv/voice services."""
    name = (
        f"{rng.choice(('Avery', 'Jordan', 'Kai', 'Morgan', 'Riley', 'Sam', 'Noor', 'Tomas'))} "
        f"{rng.choice(('Okafor', 'Lindqvist', 'Moreau', 'Tanaka', 'Silva', 'Novak', 'Reyes'))}"
    )
    customer = {
        "customer_id": cid,
        "verification_code": code,
        "name": name,
        "segment": f["segment"],
        "priority_care": int(f["care"]),
        "account_status": "suspended" if f["suspended"] else "active",
        "region_code": f["region"],
        "contact_channel": rng.choice(("phone", "email", "sms", "chat")),
        "balance_due_cents": rng.choice((0, rng.randint(1000, 40000))),
    }
    services = [
        {
            "service_id": bb_id,
            "customer_id": cid,
            "type": "broadband",
            "technology": f["technology"],
            "plan_speed_mbps": f["plan"],
        }
    ]
    for kind in rng.sample(("tv", "voice"), rng.randint(0, 2)):
        services.append(
            {
                "service_id": _new_id(rng, "SVC-", 7, used),
                "customer_id": cid,
                "type": kind,
                "technology": None,
                "plan_speed_mbps": None,
            }
        )
    pre, post = f["pre"], f["post"]
    line = {
        "service_id": bb_id,
        "port_state": f["port_state"],
        "sync": int(pre["sync"]),
        "downstream_mbps": pre["downstream_mbps"],
        "packet_loss_pct": pre["packet_loss_pct"],
        "snr_db": pre["snr_db"],
        "post_sync": int(post["sync"]),
        "post_downstream_mbps": post["downstream_mbps"],
        "post_packet_loss_pct": post["packet_loss_pct"],
        "post_snr_db": post["snr_db"],
    }
    return {"customers": [customer], "services": services, "lines": [line]}


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = RESOLUTIONS[index % len(RESOLUTIONS)] if split != "train" else rng.choice(RESOLUTIONS)
    f = _facts(rng, target)
    used: set[str] = set()
    customer_id = _new_id(rng, "CUS-", 6, used)
    code = f"{rng.randint(0, 999999):06d}"
    f["service_id"] = bb_id = _new_id(rng, "SVC-", 7, used)
    labelled = _label(f)
    assert labelled["answer"]["resolution_status"] == target, (target, labelled)

    state: dict[str, list] = {
        "customers": [],
        "services": [],
        "lines": [],
        "outages": [],
        "ticket_history": [],
        "invoices": [],
        "offers": [],
        "config": [],
    }
    own = _customer_rows(rng, customer_id, code, f, bb_id, used)
    # A second customer (a decoy household) in the same systems, with its own region and outages.
    decoy_f = _facts(rng, rng.choice(RESOLUTIONS))
    decoy_id = _new_id(rng, "CUS-", 6, used)
    decoy = _customer_rows(rng, decoy_id, f"{rng.randint(0, 999999):06d}", decoy_f, _new_id(rng, "SVC-", 7, used), used)
    for part in (own, decoy):
        for table, rows in part.items():
            state[table].extend(rows)
    outages = f["own_outages"] + [o for o in decoy_f["own_outages"] if o["region_code"] != f["region"]]
    for i, o in enumerate(outages):
        o["outage_id"] = f"OUT-{rng.randint(1000, 9999)}{i}"
        o["summary"] = rng.choice(
            ("fibre cut", "cabinet power loss", "core router maintenance", "duct damage", "node upgrade")
        )
    state["outages"] = [
        {k: o[k] for k in ("outage_id", "region_code", "technology", "status", "summary")} for o in outages
    ]
    state["ticket_history"] = [
        {"ticket_id": f"TCK-{rng.randint(1000, 9999)}{i:02d}", "service_id": bb_id, **h}
        for i, h in enumerate(f["history"])
    ]
    # Tickets on the customer's other services and on the decoy's line look relevant but do not count.
    for i, s in enumerate(state["services"][1:]):
        if rng.random() < 0.5:
            state["ticket_history"].append(
                {
                    "ticket_id": f"TCK-{rng.randint(1000, 9999)}9{i}",
                    "service_id": s["service_id"],
                    "category": "LINE_FAULT",
                    "days_ago": rng.randint(1, 30),
                }
            )
    for month in range(1, rng.randint(2, 4)):
        state["invoices"].append(
            {
                "customer_id": customer_id,
                "month": f"2026-{month:02d}",
                "amount_cents": rng.randint(2500, 15000),
                "paid": int(rng.random() < 0.8),
            }
        )
    state["offers"] = [
        {"offer_id": f"OFF-{i}", "title": t, "monthly_cents": rng.randint(2000, 9000)}
        for i, t in enumerate(("Fibre 1000 upgrade", "TV sports add-on", "Mesh wifi bundle"))
    ]
    state["config"] = [
        {"key": "token_salt", "value": f"{rng.getrandbits(64):016x}"},
        {"key": "next_ticket", "value": str(rng.randint(10000, 89999))},
    ]

    answer = labelled["answer"]
    if target in ("REFERRED_BILLING",):
        difficulty = "easy"
    elif target == "OUTAGE_LINKED":
        difficulty = "easy" if len(f["own_outages"]) == 1 else "medium"
    elif target == "ESCALATED" and (
        f["variant"] in ("reset_failed", "repeat") or answer["escalation_tier"] == "NETWORK_OPS"
    ):
        difficulty = "hard"
    else:
        difficulty = "medium"
    return {
        "inputs": {
            "customer_id": customer_id,
            "verification_code": code,
            "reported_symptom": rng.choice(SYMPTOMS),
            "contact_channel": rng.choice(("phone", "chat")),
        },
        "answer": answer,
        "replay": {},
        "initial_state": state,
        "expected_state": labelled["expected_state"],
        "difficulty": difficulty,
        "meta": {"variant": f["variant"] or target.lower()},
    }


# ---------------------------------------------------------------------------------------------
# Reference solver: the SOP as written, facts only from tools.
# ---------------------------------------------------------------------------------------------
def _check(result: Any) -> Any:
    if isinstance(result, ToolError):
        raise result
    return result


def solve(inputs: dict[str, Any]):
    auth = _check(
        (
            yield ToolCall(
                "authenticate", {"customer_id": inputs["customer_id"], "verification_code": inputs["verification_code"]}
            )
        )
    )
    token = auth["session_token"]
    account = _check((yield ToolCall("get_account", {"session_token": token})))
    broadband = next(s for s in account["services"] if s["type"] == "broadband")
    sid = broadband["service_id"]
    findings: list[str] = []
    closing = None
    if account["account_status"] == "suspended":
        category, status = "BILLING", "REFERRED_BILLING"
    else:
        outages = _check((yield ToolCall("check_outage", {"region_code": account["region_code"]})))["outages"]
        if any(o["status"] == "active" and o["technology"] == broadband["technology"] for o in outages):
            category, status = "OUTAGE", "OUTAGE_LINKED"
            findings.append("OUTAGE_CONFIRMED")
        else:
            test = _check((yield ToolCall("run_line_test", {"session_token": token, "service_id": sid})))
            was_reset = test["port_state"] == "errored"
            if was_reset:
                _check((yield ToolCall("reset_port", {"session_token": token, "service_id": sid})))
                test = _check((yield ToolCall("run_line_test", {"session_token": token, "service_id": sid})))
            line = []
            if not test["sync"]:
                line.append("NO_SYNC")
            else:
                if test["snr_db"] < 6.0:
                    line.append("LOW_SNR")
                if test["packet_loss_pct"] > 2.0:
                    line.append("HIGH_PACKET_LOSS")
                if test["downstream_mbps"] < broadband["plan_speed_mbps"] / 2:
                    line.append("SPEED_BELOW_PLAN")
            findings += line
            if was_reset and line:
                findings.append("PORT_RESET_FAILED")
            history = _check((yield ToolCall("get_ticket_history", {"session_token": token, "service_id": sid})))
            recent = [
                t for t in history["tickets"] if t["category"] in ("LINE_FAULT", "NO_FAULT") and t["days_ago"] <= 30
            ]
            repeat = len(recent) >= 2
            if repeat:
                findings.append("REPEAT_FAULT")
            if line:
                category, status = "LINE_FAULT", "ESCALATED"
            elif was_reset:
                category, status, closing = "LINE_FAULT", "RESOLVED_REMOTE", "RESOLVED_REMOTE"
            elif repeat:
                category, status = "LINE_FAULT", "ESCALATED"
            else:
                category, status, closing = "NO_FAULT", "NO_FAULT_FOUND", "NO_FAULT_FOUND"
    if account["priority_care"]:
        findings.append("CARE_FLAG")
    opened = _check((yield ToolCall("open_ticket", {"session_token": token, "service_id": sid, "category": category})))
    ticket_id = opened["ticket_id"]
    if findings:
        _check((yield ToolCall("add_findings", {"session_token": token, "ticket_id": ticket_id, "codes": findings})))
    ticket = _check((yield ToolCall("get_ticket", {"session_token": token, "ticket_id": ticket_id})))
    tier = "NONE"
    if status == "ESCALATED":
        tier = "FIELD_TECH" if ("NO_SYNC" in findings or "LOW_SNR" in findings) else "TIER2"
        if ticket["priority"] == "P1" and account["segment"] == "business":
            tier = "NETWORK_OPS"
        _check((yield ToolCall("escalate_ticket", {"session_token": token, "ticket_id": ticket_id, "tier": tier})))
    elif closing is not None:
        _check(
            (yield ToolCall("close_ticket", {"session_token": token, "ticket_id": ticket_id, "resolution": closing}))
        )
    return {
        "resolution_status": status,
        "ticket_priority": ticket["priority"],
        "escalation_tier": tier,
        "sla_hours": ticket["sla_hours"],
    }


PACK = DomainPack(
    name="CustomerServiceTroubleshooting",
    version=0,
    title="Customer-service broadband troubleshooting",
    theme="customer-service troubleshooting",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    # authenticate, account, outage, line test, reset + retest, history, open, findings, read back, route
    human_steps=10,
    generate=generate,
    solver=solve,
    program=StatefulProgram("sopgym.sop_tasks.cs_troubleshooting.state"),
)
