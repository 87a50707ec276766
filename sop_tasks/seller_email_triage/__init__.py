"""SellerEmailTriage: seller-support email routing (SOP SET-2). Replay tier only.

The agent reads the email, identifies the sender in the seller directory (chaining the seller id to
the account and the performance metrics), looks up every quoted order (typos are ignored, orders of
another seller divert to Trust & Safety), applies the legal and suspension exceptions, then routes
by the receiving mailbox's routing table (which differs per mailbox and per task) and raises the
priority per the SOP's adjustments.

The generator draws facts with random exceptions, labels them with its own rule table (``_route``)
and keeps the draw when the queue matches the task's target (balanced by index on val/test). The
reference solver (``solve``) follows the SOP text through the tools and never calls ``_route``.
"""

from __future__ import annotations

import random
from typing import Any

from sopgym.sandboxes import ERROR_KEY, ToolSpec, canonical_args
from sopgym.sop_tasks.pack import DomainPack, OutputField, ToolCall, ToolError, object_schema, read_text

QUEUES = ("SELLER_PAYMENTS", "CATALOG_LISTINGS", "ORDER_SUPPORT", "ACCOUNT_HEALTH", "TRUST_SAFETY",
          "LEGAL_ESCALATIONS", "GENERAL_INBOX")
PRIORITIES = ("P1", "P2", "P3", "P4")
MAILBOXES = ("seller-support-na@market.example", "seller-support-eu@market.example", "seller-support-apac@market.example")
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
LEGAL_TERMS = ("lawyer", "attorney", "legal action", "lawsuit", "litigation")

_order_id = {"type": "string", "pattern": "^[0-9]{3}-[0-9]{7}-[0-9]{7}$"}
_seller_id = {"type": "string", "pattern": "^SLR-[A-Z0-9]{8}$"}




TOOLS = (
    ToolSpec(
        "get_email",
        "Inbound email by id: sender address, receiving mailbox, subject, body, contact-form topic, quoted "
        "order ids and a model-suggested queue.",
        object_schema({"email_id": {"type": "string", "pattern": "^EM-[0-9]{8}$"}}),
        not_found="email {email_id} not found",
    ),
    ToolSpec(
        "lookup_seller_by_email",
        "Seller directory: the seller id registered under an email address.",
        object_schema({"email_address": {"type": "string", "pattern": "^[^@\\s]+@[^@\\s]+$"}}),
        not_found="no seller is registered under {email_address}",
    ),
    ToolSpec(
        "get_seller_account",
        "Seller account by seller id: status (active, at_risk, suspended), tier (standard, professional, "
        "strategic), marketplace and registration date.",
        object_schema({"seller_id": _seller_id}),
        not_found="seller {seller_id} not found",
    ),
    ToolSpec(
        "get_seller_metrics",
        "Seller performance metrics by seller id: order defect rate, late shipment rate, cancellation rate "
        "(percent, last 60 days).",
        object_schema({"seller_id": _seller_id}),
        not_found="no metrics for seller {seller_id}",
    ),
    ToolSpec(
        "get_order",
        "Order by order id: owning seller id, status, order total and currency, and whether a buyer dispute is open.",
        object_schema({"order_id": _order_id}),
        not_found="order {order_id} not found",
    ),
    ToolSpec(
        "get_routing_table",
        "Routing table of a seller-support mailbox: one row per topic with queue and base priority.",
        object_schema({"mailbox": {"type": "string", "enum": list(MAILBOXES)}}),
    ),
    ToolSpec(
        "get_listing_count",
        "Number of active listings of a seller.",
        object_schema({"seller_id": _seller_id}),
        distractor=True,
        not_found="seller {seller_id} not found",
    ),
    ToolSpec(
        "translate_text",
        "Machine-translate a text to English.",
        object_schema({"text": {"type": "string", "minLength": 1, "maxLength": 4000}}),
        distractor=True,
        not_found="translation service has no result for this text",
    ),
    ToolSpec(
        "get_holiday_calendar",
        "Public holidays of a country (ISO code) this month.",
        object_schema({"country": {"type": "string", "pattern": "^[A-Z]{2}$"}}),
        distractor=True,
        not_found="no holiday calendar for {country}",
    ),
)

FIELDS = (
    OutputField("queue", enum=QUEUES, description="The work queue the email is routed to."),
    OutputField("priority", enum=PRIORITIES, description="The priority of the routed email."),
)


# ---------------------------------------------------------------------------------------------
# Generator: facts with random exceptions, labelled by a rule table, kept when on target.
# ---------------------------------------------------------------------------------------------
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


def _order_number(rng: random.Random) -> str:
    return f"{rng.randint(100, 999)}-{rng.randint(0, 9_999_999):07d}-{rng.randint(0, 9_999_999):07d}"


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = QUEUES[index % len(QUEUES)] if split != "train" else rng.choice(QUEUES)
    seller_id = "SLR-" + "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(8))
    other_seller = "SLR-" + "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(8))
    for _ in range(2000):
        f = _draw_facts(rng, seller_id, other_seller)
        queue, priority, rule, raises = _route(f)
        # P2 is the commonest outcome of the rules; thin it so no priority exceeds 40 %.
        if queue == target and (priority != "P2" or rng.random() < 0.7):
            break
    else:  # pragma: no cover - every queue is common under these draws
        raise RuntimeError(f"no fact draw reached queue {target}")

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
        "get_email": {canonical_args({"email_id": email_id}): {
            "email_id": email_id, "from": sender, "to": f["mailbox"], "subject": subject,
            "body": " ".join(ln for ln in lines if ln), "form_topic": f["topic"], "referenced_order_ids": order_ids,
            "received_at": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}Z",
            "ml_suggested_queue": queue if rng.random() < 0.4 else rng.choice(QUEUES),
        }},
        "lookup_seller_by_email": {},
        "get_order": {},
        "get_routing_table": {
            canonical_args({"mailbox": m}): {"mailbox": m, "rows": rows} for m, rows in f["tables"].items()
        },
    }
    if f["registered"]:
        replay["lookup_seller_by_email"][canonical_args({"email_address": sender})] = {
            "email_address": sender, "seller_id": seller_id,
        }
        replay["get_seller_account"] = {canonical_args({"seller_id": seller_id}): {
            "seller_id": seller_id, "status": f["status"], "tier": f["tier"],
            "marketplace": rng.choice(("US", "DE", "UK", "JP", "FR")), "registered_on": f"20{rng.randint(12, 25)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
        }}
        replay["get_seller_metrics"] = {canonical_args({"seller_id": seller_id}): {
            "seller_id": seller_id, "order_defect_rate_pct": f["odr"],
            "late_shipment_rate_pct": round(rng.uniform(0, 8), 2), "cancellation_rate_pct": round(rng.uniform(0, 4), 2),
        }}
        replay["get_listing_count"] = {canonical_args({"seller_id": seller_id}): {"seller_id": seller_id, "active_listings": rng.randint(1, 40000)}}
    for oid, o in zip(order_ids, f["orders"]):
        if o["exists"]:
            replay["get_order"][canonical_args({"order_id": oid})] = {
                "order_id": oid, "seller_id": o["seller_id"], "status": rng.choice(("shipped", "delivered", "unshipped", "cancelled")),
                "order_total": o["total"], "currency": rng.choice(("USD", "EUR", "GBP")), "dispute_open": o["dispute"],
            }
    replay["get_holiday_calendar"] = {canonical_args({"country": c}): {"country": c, "holidays": []} for c in ("US", "DE", "GB", "JP")}
    if rng.random() < 0.1:
        replay["get_holiday_calendar"] = {canonical_args({"country": "US"}): {ERROR_KEY: "calendar service unavailable"}}
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


# ---------------------------------------------------------------------------------------------
# Reference solver: the SOP as written, facts only from tools.
# ---------------------------------------------------------------------------------------------
def _ok(result: Any) -> Any:
    if isinstance(result, ToolError):
        raise result
    return result


def _has_legal_term(text: str) -> bool:
    low = text.lower()
    return any(term in low for term in ("lawyer", "attorney", "legal action", "lawsuit", "litigation"))


def solve(inputs: dict[str, Any]):
    email = _ok((yield ToolCall("get_email", {"email_id": inputs["email_id"]})))
    directory = yield ToolCall("lookup_seller_by_email", {"email_address": email["from"]})
    if isinstance(directory, ToolError):  # unregistered sender
        found = False
        for oid in email["referenced_order_ids"]:
            order = yield ToolCall("get_order", {"order_id": oid})
            found = found or not isinstance(order, ToolError)
        return {"queue": "TRUST_SAFETY", "priority": "P2"} if found else {"queue": "GENERAL_INBOX", "priority": "P4"}
    seller_id = directory["seller_id"]
    account = _ok((yield ToolCall("get_seller_account", {"seller_id": seller_id})))
    orders = []
    for oid in email["referenced_order_ids"]:
        order = yield ToolCall("get_order", {"order_id": oid})
        if not isinstance(order, ToolError):
            orders.append(order)
    if any(o["seller_id"] != seller_id for o in orders):
        return {"queue": "TRUST_SAFETY", "priority": "P1"}
    strategic = account["tier"] == "strategic"
    disputed = any(o["dispute_open"] for o in orders)
    if _has_legal_term(email["subject"] + " " + email["body"]):
        return {"queue": "LEGAL_ESCALATIONS", "priority": "P1" if strategic or disputed else "P2"}
    if account["status"] == "suspended":
        return {"queue": "ACCOUNT_HEALTH", "priority": "P2" if strategic else "P3"}
    table = _ok((yield ToolCall("get_routing_table", {"mailbox": email["to"]})))
    rows = {r["topic"]: r for r in table["rows"]}
    row = rows.get(email["form_topic"]) or rows["OTHER"]
    metrics = _ok((yield ToolCall("get_seller_metrics", {"seller_id": seller_id})))
    level = PRIORITIES.index(row["base_priority"])
    raises = [
        disputed,
        sum(o["order_total"] for o in orders) >= 1000.0 - 1e-9,
        strategic,
        metrics["order_defect_rate_pct"] >= 1.0,
    ]
    level = max(0, level - sum(raises))
    return {"queue": row["queue"], "priority": PRIORITIES[level]}


PACK = DomainPack(
    name="SellerEmailTriage",
    version=0,
    title="Seller support email triage",
    theme="seller email triage",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    # email, seller lookup, account, up to 3 orders, routing table, metrics, submit.
    human_steps=9,
    generate=generate,
    solver=solve,
    program=None,
)
