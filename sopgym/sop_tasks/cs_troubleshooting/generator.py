"""CustomerServiceTroubleshooting's task generator: draw, label, records.

* **draw** (``_draw``): a customer's facts around a target resolution status (balanced over the
  five on val/test): segment and care flag, outages of the region (decoys: other technologies,
  restored or planned ones), line measurements before and after a port reset (boundary values
  included), earlier tickets (decoys: billing tickets, old ones);
* **label** (``_label``): the generator's own decision table; the ticket's priority and SLA are the
  care system's rule (``state.ticket_priority``);
* **records** (``_records``): the care systems' initial state (with a decoy household in the same
  systems) and the expected ticket and port resets.

**Difficulty** (``_difficulty``) counts the traps and the extra work the case holds, all drawn
whatever the target resolution (never which step resolves it): each outage of the region that does
not count (another technology, restored, planned; 0 to 3); each ticket in the line's history that
does not count (billing or outage tickets, fault tickets older than 30 days; 0 to 3); each tv or
voice service next to the broadband one (0 to 2); a balance due on an active account (not a
suspension); the priority-care flag (one more finding); a business account (its priority, SLA and
NETWORK_OPS rule); each reading of the first line test exactly on a threshold (6.0 dB, 2.0 %, half
the plan speed). ``easy``: at most 4; ``medium``: 5 or 6; ``hard``: 7 or more. The
``difficulty_label`` check of ``sopgym validate-domain`` keeps it from predicting the resolution.
"""

from __future__ import annotations

import random
from typing import Any

from sopgym.sop_tasks.generation import balanced_target

from .state import ticket_priority
from .tools import RESOLUTIONS, SYMPTOMS

_PLANS = {"fiber": (300, 500, 1000), "dsl": (20, 40, 80), "cable": (200, 500)}


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = balanced_target(rng, split, index, RESOLUTIONS)
    f, used = _draw(rng, target)
    labelled = _label(f)
    assert labelled["answer"]["resolution_status"] == target, (target, labelled)
    return _records(rng, f, used, labelled, target)


# -- draw ------------------------------------------------------------------------------------------
def _draw(rng: random.Random, target: str) -> tuple[dict[str, Any], set[str]]:
    """The customer's facts and identifiers, and the set of identifiers used so far."""
    f = _facts(rng, target)
    used: set[str] = set()
    f["customer_id"] = _new_id(rng, "CUS-", 6, used)
    f["verification_code"] = f"{rng.randint(0, 999999):06d}"
    f["service_id"] = _new_id(rng, "SVC-", 7, used)
    return f, used


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
    """A customer's facts around ``target`` (the decoy household is drawn with a random target)."""
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


# -- label -----------------------------------------------------------------------------------------
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
    _, priority, sla = ticket_priority(findings, business)
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


def _difficulty(f: dict[str, Any], state: dict[str, list]) -> str:
    """The level of the case's count of traps and extra work (module docstring)."""
    own = f["customer_id"]
    pre, plan = f["pre"], f["plan"]
    on_threshold = pre["sync"] and (
        (round(pre["snr_db"] * 10) == 60) + (round(pre["packet_loss_pct"] * 10) == 20)
        + (round(pre["downstream_mbps"] * 10) * 2 == plan * 10)
    )
    score = (
        sum(not (o["status"] == "active" and o["technology"] == f["technology"]) for o in f["own_outages"])
        + sum(h["category"] in ("BILLING", "OUTAGE") or h["days_ago"] > 30 for h in f["history"])
        + sum(s["customer_id"] == own and s["type"] != "broadband" for s in state["services"])
        + any(c["customer_id"] == own and c["balance_due_cents"] > 0 for c in state["customers"])
        + f["care"]
        + (f["segment"] == "business")
        + on_threshold
    )
    return "easy" if score <= 4 else ("medium" if score <= 6 else "hard")


# -- records ---------------------------------------------------------------------------------------
def _records(rng: random.Random, f: dict[str, Any], used: set[str], labelled: dict[str, Any], target: str) -> dict[str, Any]:
    state = _care_state(rng, f, used)
    return {
        "inputs": {
            "customer_id": f["customer_id"],
            "verification_code": f["verification_code"],
            "reported_symptom": rng.choice(SYMPTOMS),
            "contact_channel": rng.choice(("phone", "chat")),
        },
        "answer": labelled["answer"],
        "replay": {},
        "initial_state": state,
        "expected_state": labelled["expected_state"],
        "difficulty": _difficulty(f, state),
        "meta": {"variant": f["variant"] or target.lower()},
    }


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


def _care_state(rng: random.Random, f: dict[str, Any], used: set[str]) -> dict[str, list]:
    """The care systems' initial state: the customer, a decoy household, outages, ticket history,
    invoices, offers and the configuration (token salt, next ticket number)."""
    bb_id = f["service_id"]
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
    own = _customer_rows(rng, f["customer_id"], f["verification_code"], f, bb_id, used)
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
                "customer_id": f["customer_id"],
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
    return state
