"""SellerEmailTriage's task generator: draw, label, records.

* **draw** (``_draw_facts``): the sender's registration, quoted orders (missing ones, another
  seller's), tier, status, a legal threat, the contact-form topic, the receiving mailbox and every
  mailbox's routing table, the order defect rate; redrawn until the queue is the task's target
  (balanced over the seven on val/test), with P2 thinned so no priority exceeds 40 %;
* **label** (``_route``): the generator's own rule table;
* **records** (``_records``): the email (with decoy lines that sound legal or urgent and a
  model-suggested queue) and the replay records.
"""

from __future__ import annotations

import random
from typing import Any

from sopgym.sop_tasks.generation import balanced_target, draw_until, record, recorded_error, records

from .tools import MAILBOXES, QUEUES

#: Table topics with their usual queue and an alternative some mailboxes use.
TABLE_TOPICS = {
    "PAYMENT_DISBURSEMENT": ("SELLER_PAYMENTS", "SELLER_PAYMENTS"),
    "FEES_AND_INVOICES": ("SELLER_PAYMENTS", "ORDER_SUPPORT"),
    "LISTING_ERROR": ("CATALOG_LISTINGS", "CATALOG_LISTINGS"),
    "BRAND_REGISTRY": ("CATALOG_LISTINGS", "TRUST_SAFETY"),
    "ORDER_PROBLEM": ("ORDER_SUPPORT", "ORDER_SUPPORT"),
    "RETURNS_REFUNDS": ("ORDER_SUPPORT", "SELLER_PAYMENTS"),
    "ACCOUNT_STATUS": ("ACCOUNT_HEALTH", "ACCOUNT_HEALTH"),
    "PERFORMANCE_NOTICE": ("ACCOUNT_HEALTH", "CATALOG_LISTINGS"),
    "OTHER": ("GENERAL_INBOX", "GENERAL_INBOX"),
}
#: Topics on the contact form that have no row in any table (they fall back to OTHER).
UNTABLED_TOPICS = ("TAX_QUESTION", "ADVERTISING", "PARTNERSHIP")
_BODIES = {
    "PAYMENT_DISBURSEMENT": "My disbursement for last week has not arrived in my bank account.",
    "FEES_AND_INVOICES": "I was charged a referral fee twice on the same invoice.",
    "LISTING_ERROR": "My listing shows the wrong price and I cannot edit it.",
    "BRAND_REGISTRY": "Another seller is using my brand name on their listings.",
    "ORDER_PROBLEM": "The buyer says the parcel never arrived although tracking shows delivered.",
    "RETURNS_REFUNDS": "A refund was issued without the item being returned to me.",
    "ACCOUNT_STATUS": "I received a warning about my account and need to understand it.",
    "PERFORMANCE_NOTICE": "I got a notice about my late shipment rate.",
    "OTHER": "I have a general question about selling on the marketplace.",
    "TAX_QUESTION": "How do I download my VAT report for last quarter?",
    "ADVERTISING": "My sponsored product campaign stopped spending.",
    "PARTNERSHIP": "We would like to discuss a partnership with your logistics team.",
}
_LEGAL_LINES = (
    "If this is not fixed by Friday my lawyer will contact you.",
    "Our attorney is reviewing this matter.",
    "We are prepared to take legal action.",
    "I will file a lawsuit if the funds are not released.",
    "We are considering litigation over this.",
)
_DECOY_LINES = (
    "Our legal name is shown on the invoice.",
    "We are a legally registered business.",
    "URGENT!!! Please escalate immediately.",
    "Please route this to the payments team.",
    "",
)
_SELLER_CHARS = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = balanced_target(rng, split, index, QUEUES)
    seller_id = "SLR-" + "".join(rng.choice(_SELLER_CHARS) for _ in range(8))
    other_seller = "SLR-" + "".join(rng.choice(_SELLER_CHARS) for _ in range(8))

    def on_target(f: dict[str, Any]) -> bool:
        queue, priority, _, _ = _route(f)
        # P2 is the commonest outcome of the rules; thin it so no priority exceeds 40 %.
        return queue == target and (priority != "P2" or rng.random() < 0.7)

    f = draw_until(lambda: _draw_facts(rng, seller_id, other_seller), on_target, attempts=2000, target=target)
    return _records(rng, f, *_route(f))


# -- draw ------------------------------------------------------------------------------------------
def _draw_tables(rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    tables = {}
    for mailbox in MAILBOXES:
        rows = []
        for topic, (usual, alternative) in TABLE_TOPICS.items():
            rows.append({
                "topic": topic, "queue": usual if rng.random() < 0.75 else alternative,
                "base_priority": rng.choice(("P2", "P3", "P3", "P4", "P4", "P4")) if topic != "OTHER" else rng.choice(("P3", "P4")),
            })
        tables[mailbox] = rows
    return tables


def _draw_facts(rng: random.Random, seller_id: str, other_seller: str) -> dict[str, Any]:
    orders = []
    for _ in range(rng.choice((0, 1, 1, 2, 2, 3))):
        exists = rng.random() < 0.85
        orders.append({
            "exists": exists,
            "seller_id": other_seller if exists and rng.random() < 0.08 else seller_id,
            "total": round(rng.choice((rng.uniform(8, 300), rng.uniform(300, 1400))), 2),
            "dispute": rng.random() < 0.2,
        })
    topic = rng.choice(tuple(TABLE_TOPICS) * 2 + UNTABLED_TOPICS)
    return {
        "registered": rng.random() < 0.85, "seller_id": seller_id, "orders": orders,
        "tier": rng.choice(("standard", "standard", "professional", "professional", "strategic")),
        "status": rng.choice(("active", "active", "active", "at_risk", "suspended")),
        "legal": rng.random() < 0.12, "topic": topic, "mailbox": rng.choice(MAILBOXES),
        "tables": _draw_tables(rng), "odr": round(rng.choice((rng.uniform(0, 0.99), rng.uniform(0, 0.99), rng.uniform(0, 2.5), 1.0)), 2),
    }


# -- label -----------------------------------------------------------------------------------------
def _route(f: dict[str, Any]) -> tuple[str, str, str, int]:
    """(queue, priority, deciding rule, number of priority raises) of a fact set."""
    real = [o for o in f["orders"] if o["exists"]]
    if not f["registered"]:
        return ("TRUST_SAFETY", "P2", "unregistered", 0) if real else ("GENERAL_INBOX", "P4", "unregistered", 0)
    if any(o["seller_id"] != f["seller_id"] for o in real):
        return "TRUST_SAFETY", "P1", "foreign_order", 0
    disputed = any(o["dispute"] for o in real)
    strategic = f["tier"] == "strategic"
    if f["legal"]:
        return "LEGAL_ESCALATIONS", "P1" if strategic or disputed else "P2", "legal", 0
    if f["status"] == "suspended":
        return "ACCOUNT_HEALTH", "P2" if strategic else "P3", "suspended", 0
    table = {row["topic"]: row for row in f["tables"][f["mailbox"]]}
    row = table.get(f["topic"], table["OTHER"])
    level = int(row["base_priority"][1])
    total_cents = sum(round(o["total"] * 100) for o in real)
    raises = disputed + (total_cents >= 100_000) + strategic + (f["odr"] >= 1.0)
    return row["queue"], f"P{max(1, level - raises)}", "table", raises


# -- records ---------------------------------------------------------------------------------------
def _order_number(rng: random.Random) -> str:
    return f"{rng.randint(100, 999)}-{rng.randint(0, 9_999_999):07d}-{rng.randint(0, 9_999_999):07d}"


def _records(rng: random.Random, f: dict[str, Any], queue: str, priority: str, rule: str, raises: int) -> dict[str, Any]:
    seller_id = f["seller_id"]
    email_id = f"EM-{rng.randint(0, 99_999_999):08d}"
    user = rng.choice(("ops", "support", "info", "sales", "hello", "accounts"))
    sender = f"{user}@{rng.choice(('brightgoods', 'kestrelhome', 'lumenoutdoor', 'oakridgetoys', 'tidewaterpets'))}.example"
    order_ids = [_order_number(rng) for _ in f["orders"]]
    lines = [_BODIES[f["topic"]]]
    if order_ids:
        lines.append("Order(s): " + ", ".join(order_ids) + ".")
    if f["legal"]:
        lines.append(rng.choice(_LEGAL_LINES))
    lines.append(rng.choice(_DECOY_LINES))
    subject = rng.choice(("Help needed", "Question about my account", "Re: case follow-up", "Issue with payment", "URGENT"))
    if f["legal"] and rng.random() < 0.3:
        subject = "Final notice before legal action"
        lines = [ln for ln in lines if ln not in _LEGAL_LINES]
    replay: dict[str, dict[str, Any]] = {
        "get_email": record({"email_id": email_id}, {
            "email_id": email_id, "from": sender, "to": f["mailbox"], "subject": subject,
            "body": " ".join(ln for ln in lines if ln), "form_topic": f["topic"], "referenced_order_ids": order_ids,
            "received_at": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}Z",
            "ml_suggested_queue": queue if rng.random() < 0.4 else rng.choice(QUEUES),
        }),
        "lookup_seller_by_email": {},
        "get_order": {},
        "get_routing_table": records(({"mailbox": m}, {"mailbox": m, "rows": rows}) for m, rows in f["tables"].items()),
    }
    if f["registered"]:
        replay["lookup_seller_by_email"] = record({"email_address": sender}, {"email_address": sender, "seller_id": seller_id})
        replay["get_seller_account"] = record({"seller_id": seller_id}, {
            "seller_id": seller_id, "status": f["status"], "tier": f["tier"],
            "marketplace": rng.choice(("US", "DE", "UK", "JP", "FR")), "registered_on": f"20{rng.randint(12, 25)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
        })
        replay["get_seller_metrics"] = record({"seller_id": seller_id}, {
            "seller_id": seller_id, "order_defect_rate_pct": f["odr"],
            "late_shipment_rate_pct": round(rng.uniform(0, 8), 2), "cancellation_rate_pct": round(rng.uniform(0, 4), 2),
        })
        replay["get_listing_count"] = record({"seller_id": seller_id}, {"seller_id": seller_id, "active_listings": rng.randint(1, 40000)})
    replay["get_order"] = records(
        ({"order_id": oid}, {
            "order_id": oid, "seller_id": o["seller_id"], "status": rng.choice(("shipped", "delivered", "unshipped", "cancelled")),
            "order_total": o["total"], "currency": rng.choice(("USD", "EUR", "GBP")), "dispute_open": o["dispute"],
        })
        for oid, o in zip(order_ids, f["orders"]) if o["exists"]
    )
    replay["get_holiday_calendar"] = records(({"country": c}, {"country": c, "holidays": []}) for c in ("US", "DE", "GB", "JP"))
    if rng.random() < 0.1:  # the calendar service is down: the US calendar errs, the others are not found (a distractor's error must not matter)
        replay["get_holiday_calendar"] = record({"country": "US"}, recorded_error("calendar service unavailable"))
    if rule in ("unregistered", "foreign_order", "suspended"):
        difficulty = "easy"
    elif rule == "table" and raises >= 2 or rule == "legal" and subject.startswith("Final notice"):
        difficulty = "hard"
    else:
        difficulty = "medium"
    return {
        "inputs": {"email_id": email_id, "channel": rng.choice(("email", "contact_form"))},
        "answer": {"queue": queue, "priority": priority},
        "replay": replay,
        "difficulty": difficulty,
        "meta": {"rule": rule},
    }
