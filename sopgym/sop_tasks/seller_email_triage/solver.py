"""SellerEmailTriage's reference solver: SOP SET-2 as written, every fact read through the tools.
It never imports ``generator.py``."""

from __future__ import annotations

from typing import Any

from sopgym.sop_tasks.pack import ToolCall, ToolError, expect

from .tools import LEGAL_TERMS, PRIORITIES


def solve(inputs: dict[str, Any]):
    email = expect((yield ToolCall("get_email", {"email_id": inputs["email_id"]})))
    directory = yield ToolCall("lookup_seller_by_email", {"email_address": email["from"]})
    if isinstance(directory, ToolError):  # unregistered sender
        found = False
        for oid in email["referenced_order_ids"]:
            order = yield ToolCall("get_order", {"order_id": oid})
            found = found or not isinstance(order, ToolError)
        return {"queue": "TRUST_SAFETY", "priority": "P2"} if found else {"queue": "GENERAL_INBOX", "priority": "P4"}
    seller_id = directory["seller_id"]
    account = expect((yield ToolCall("get_seller_account", {"seller_id": seller_id})))
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
    table = expect((yield ToolCall("get_routing_table", {"mailbox": email["to"]})))
    rows = {r["topic"]: r for r in table["rows"]}
    row = rows.get(email["form_topic"]) or rows["OTHER"]
    metrics = expect((yield ToolCall("get_seller_metrics", {"seller_id": seller_id})))
    level = PRIORITIES.index(row["base_priority"])
    raises = [
        disputed,
        sum(o["order_total"] for o in orders) >= 1000.0 - 1e-9,
        strategic,
        metrics["order_defect_rate_pct"] >= 1.0,
    ]
    level = max(0, level - sum(raises))
    return {"queue": row["queue"], "priority": PRIORITIES[level]}


def _has_legal_term(text: str) -> bool:
    low = text.lower()
    return any(term in low for term in LEGAL_TERMS)
