"""OrderFulfilment: order allocation across fulfilment centres (SOP OF-3). Replay lookups + stateful reservations.

The agent checks account and payment, works out each line's eligible fulfilment centres (serving the
region, express transit limit, hazmat certification), then allocates lines in order: availability
is read from the reservation system *after* earlier reservations (repeated SKUs make stale reads
wrong), reservations follow consolidate / single-FC / split rules, and a short line either releases
everything (no partial shipments) or is skipped. The reward checks the answer and the reservations
and order status left in the state (``expected_state``).

The generator draws facts, simulates the allocation with its own bookkeeping (``_allocate``) and
keeps the draw when the decision matches the task's target (balanced by index on val/test) and the
procedure fits in 15 tool calls. The reference solver (``solve``) follows the SOP text through the
tools and never calls ``_allocate``.
"""

from __future__ import annotations

import random
from typing import Any

from sopgym.sandboxes import ERROR_KEY, StatefulProgram, Tier, ToolSpec, canonical_args
from sopgym.sop_tasks.pack import DomainPack, OutputField, ToolCall, ToolError, object_schema, read_text

DECISIONS = ("SHIP_SINGLE", "SHIP_SPLIT", "PARTIAL_SHIP", "BACKORDER", "HOLD")
REGIONS = ("NORTHEAST", "SOUTHEAST", "MIDWEST", "SOUTHWEST", "WEST")
FCS = ("FC-ATL1", "FC-BOS2", "FC-CHI1", "FC-DAL3", "FC-DEN1", "FC-LAX2", "FC-PHX1", "FC-SEA1")
MAX_CALLS = 15

_order_id = {"type": "string", "pattern": "^ORD-[0-9]{7}$"}
_sku = {"type": "string", "pattern": "^SKU-[0-9]{5}$"}
_fc = {"type": "string", "pattern": "^FC-[A-Z]{3}[0-9]$"}




TOOLS = (
    ToolSpec(
        "get_order",
        "Order by id: customer id, payment id, destination region, service level, and the lines (line number, "
        "SKU, quantity, hazmat flag), plus any customer note.",
        object_schema({"order_id": _order_id}),
        not_found="order {order_id} not found",
    ),
    ToolSpec(
        "get_customer_account",
        "Customer account by id: account status and whether partial shipments are accepted.",
        object_schema({"customer_id": {"type": "string", "pattern": "^CUS-[0-9]{5}$"}}),
        not_found="customer {customer_id} not found",
    ),
    ToolSpec(
        "get_payment_authorization",
        "Payment authorisation by payment id: status (authorized, declined, pending_review) and amount.",
        object_schema({"payment_id": {"type": "string", "pattern": "^PAY-[0-9]{8}$"}}),
        not_found="payment {payment_id} not found",
    ),
    ToolSpec(
        "list_fulfilment_centres",
        "Fulfilment centres serving a destination region: rank (1 = best), transit days and hazmat certification.",
        object_schema({"region": {"type": "string", "enum": list(REGIONS)}}),
    ),
    ToolSpec(
        "get_carrier_rates",
        "Carrier rate card for a region and service level.",
        object_schema({"region": {"type": "string", "enum": list(REGIONS)},
              "service_level": {"type": "string", "enum": ["standard", "express"]}}),
        distractor=True,
    ),
    ToolSpec(
        "get_sku_promotions",
        "Active promotions for a SKU.",
        object_schema({"sku": _sku}),
        distractor=True,
        not_found="no promotions recorded for {sku}",
    ),
    ToolSpec(
        "get_fc_staffing",
        "Staffing level and pick backlog of a fulfilment centre today.",
        object_schema({"warehouse_id": _fc}),
        distractor=True,
        not_found="no staffing data for {warehouse_id}",
    ),
    ToolSpec(
        "check_availability",
        "Current stock of a SKU in every fulfilment centre that stocks it: on hand, reserved (all orders) and "
        "available. Reflects every reservation made so far.",
        object_schema({"sku": _sku}),
        tier=Tier.STATEFUL,
    ),
    ToolSpec(
        "reserve_stock",
        "Reserve units of one order line at one fulfilment centre. Fails, reserving nothing, if the quantity "
        "exceeds what is available there or what the line still needs. Returns the reservation id.",
        object_schema({"order_id": _order_id, "line_no": {"type": "integer", "minimum": 1, "maximum": 20},
              "warehouse_id": _fc, "quantity": {"type": "integer", "minimum": 1, "maximum": 1000}}),
        tier=Tier.STATEFUL, writes=True,
    ),
    ToolSpec(
        "release_reservation",
        "Release an active reservation by id (its units become available again).",
        object_schema({"reservation_id": {"type": "string", "pattern": "^RSV-[0-9]{6}$"}}),
        tier=Tier.STATEFUL, writes=True,
    ),
    ToolSpec(
        "get_order_reservations",
        "Reservation summary of an order: active reservations, reserved quantity per line, number of shipments "
        "(distinct fulfilment centres) and order status.",
        object_schema({"order_id": _order_id}),
        tier=Tier.STATEFUL,
    ),
    ToolSpec(
        "set_order_status",
        "Record the order's fulfilment status (once).",
        object_schema({"order_id": _order_id, "status": {"type": "string", "enum": list(DECISIONS)}}),
        tier=Tier.STATEFUL, writes=True,
    ),
)

FIELDS = (
    OutputField("decision", enum=DECISIONS, description="The fulfilment status recorded on the order."),
    OutputField("num_shipments", type="integer", description="Distinct fulfilment centres holding the order's reservations."),
)

PROGRAM = StatefulProgram(f"{__name__}.state")


# ---------------------------------------------------------------------------------------------
# Generator: facts, a simulation of the allocation, rejection to the target decision.
# ---------------------------------------------------------------------------------------------
def _allocate(f: dict[str, Any]) -> dict[str, Any]:
    """Decision, shipments, final reservations and tool-call count of a fact set."""
    calls = 4  # order, account, payment, serving FCs
    if f["account_status"] != "active" or f["payment_status"] != "authorized":
        return {"decision": "HOLD", "shipments": 0, "held": [], "calls": calls, "features": set()}
    avail = {key: on_hand - f["other_reserved"].get(key, 0) for key, on_hand in f["on_hand"].items()}
    serving = sorted(f["serving"], key=lambda s: s["rank"])
    held: list[tuple[int, str, int]] = []
    short = []
    features: set[str] = set()
    for line in f["lines"]:
        calls += 1
        sku, qty = line["sku"], line["quantity"]
        elig = [s["warehouse_id"] for s in serving
                if (f["service_level"] != "express" or s["transit_days"] <= 2) and (not line["hazmat"] or s["hazmat_certified"])]
        if any(avail.get((s["warehouse_id"], sku), 0) >= qty for s in serving if s["warehouse_id"] not in elig):
            features.add("filter_matters")
        if sum(avail.get((w, sku), 0) for w in elig) < qty:
            short.append(line["line_no"])
            if not f["accepts_partial"]:
                calls += 1 + len(held) + 1  # summary, releases, status
                return {"decision": "BACKORDER", "shipments": 0, "held": [], "calls": calls, "features": features | {"released" if held else "short"}}
            continue
        used = [w for _, w, _ in held]
        full = [w for w in elig if avail.get((w, sku), 0) >= qty]
        consolidate = [w for w in full if w in used]
        if consolidate or full:
            pick = (consolidate or full)[0]
            if consolidate and consolidate[0] != full[0]:
                features.add("consolidated")
            plan = [(pick, qty)]
        else:
            features.add("split")
            plan, need = [], qty
            for w in elig:
                take = min(avail.get((w, sku), 0), need)
                if take > 0:
                    plan.append((w, take))
                    need -= take
                if need == 0:
                    break
        for w, q in plan:
            calls += 1
            avail[(w, sku)] -= q
            held.append((line["line_no"], w, q))
    calls += 2  # summary, status
    shipments = len({w for _, w, _ in held})
    if not short:
        decision = "SHIP_SINGLE" if shipments == 1 else "SHIP_SPLIT"
    else:
        decision = "PARTIAL_SHIP" if held else "BACKORDER"
    return {"decision": decision, "shipments": shipments, "held": held, "calls": calls, "features": features}


def _draw_facts(rng: random.Random, target: str) -> dict[str, Any]:
    region = rng.choice(REGIONS)
    fcs = rng.sample(FCS, len(FCS))
    num_serving = rng.choice((2, 3, 3, 4))
    serving = [
        {"warehouse_id": w, "rank": i + 1, "transit_days": rng.choice((1, 2, 2, 3, 4)), "hazmat_certified": rng.random() < 0.6}
        for i, w in enumerate(fcs[:num_serving])
    ]
    non_serving = fcs[num_serving:num_serving + 2]
    num_lines = rng.choice((1, 2, 2, 3))
    skus = [f"SKU-{n:05d}" for n in rng.sample(range(10000, 99999), num_lines)]
    lines = []
    for i in range(num_lines):
        sku = skus[i]
        if i > 0 and rng.random() < 0.3:  # the same SKU again: earlier reservations change availability
            sku = lines[rng.randrange(i)]["sku"]
        lines.append({"line_no": i + 1, "sku": sku, "quantity": rng.randint(1, 12), "hazmat": rng.random() < 0.2})
    on_hand: dict[tuple[str, str], int] = {}
    other: dict[tuple[str, str], int] = {}
    for sku in dict.fromkeys(line["sku"] for line in lines):
        for w in [s["warehouse_id"] for s in serving] + list(non_serving):
            if rng.random() < 0.75:
                on_hand[(w, sku)] = rng.randint(0, 24)
                if on_hand[(w, sku)] and rng.random() < 0.4:
                    other[(w, sku)] = rng.randint(1, on_hand[(w, sku)])
    hold = target == "HOLD"
    bad = rng.choice(("account", "payment", "both")) if hold else None
    return {
        "region": region, "service_level": rng.choice(("standard", "standard", "express")), "serving": serving,
        "non_serving": list(non_serving), "lines": lines, "on_hand": on_hand, "other_reserved": other,
        "account_status": rng.choice(("suspended", "credit_hold")) if bad in ("account", "both") else "active",
        "payment_status": rng.choice(("declined", "pending_review")) if bad in ("payment", "both") else "authorized",
        "accepts_partial": rng.random() < 0.5,
    }


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = DECISIONS[index % len(DECISIONS)] if split != "train" else rng.choice(DECISIONS)
    # Most backorders should exercise the release path (reservations made, then released).
    want_release = target == "BACKORDER" and rng.random() < 0.6
    for _ in range(5000):
        f = _draw_facts(rng, target)
        alloc = _allocate(f)
        if alloc["decision"] == target and alloc["calls"] <= MAX_CALLS and (not want_release or "released" in alloc["features"]):
            break
    else:  # pragma: no cover - every target is common under these draws
        raise RuntimeError(f"no fact draw reached decision {target}")

    order_id = f"ORD-{rng.randint(0, 9_999_999):07d}"
    customer_id = f"CUS-{rng.randint(0, 99999):05d}"
    payment_id = f"PAY-{rng.randint(0, 99_999_999):08d}"
    rsv_start = rng.randint(100000, 900000)
    decoy_fc = rng.choice(f["non_serving"] + [s["warehouse_id"] for s in f["serving"]])
    order = {
        "order_id": order_id, "customer_id": customer_id, "payment_id": payment_id, "region": f["region"],
        "service_level": f["service_level"], "placed_at": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00",
        "lines": f["lines"], "preferred_warehouse": decoy_fc,
        "customer_note": rng.choice(("", f"Please ship everything from {decoy_fc}.", "Leave at the back door.")),
    }
    skus = list(dict.fromkeys(line["sku"] for line in f["lines"]))
    replay: dict[str, dict[str, Any]] = {
        "get_order": {canonical_args({"order_id": order_id}): order},
        "get_customer_account": {canonical_args({"customer_id": customer_id}): {
            "customer_id": customer_id, "account_status": f["account_status"],
            "accepts_partial_shipment": f["accepts_partial"], "loyalty_tier": rng.choice(("bronze", "silver", "gold")),
        }},
        "get_payment_authorization": {canonical_args({"payment_id": payment_id}): {
            "payment_id": payment_id, "status": f["payment_status"], "amount": round(rng.uniform(15, 900), 2), "currency": "USD",
        }},
        "list_fulfilment_centres": {canonical_args({"region": r}): {
            "region": r, "serving": f["serving"] if r == f["region"] else [
                {"warehouse_id": w, "rank": i + 1, "transit_days": rng.randint(1, 4), "hazmat_certified": rng.random() < 0.5}
                for i, w in enumerate(rng.sample(FCS, 3))
            ],
        } for r in REGIONS},
        "get_carrier_rates": {canonical_args({"region": r, "service_level": s}): {
            "region": r, "service_level": s, "rate_per_kg": round(rng.uniform(0.4, 3.5), 2),
        } for r in REGIONS for s in ("standard", "express")},
        "get_sku_promotions": {canonical_args({"sku": s}): {"sku": s, "promotions": rng.choice(([], ["BOGO"], ["10PCT"]))} for s in skus},
        "get_fc_staffing": {canonical_args({"warehouse_id": w}): {
            "warehouse_id": w, "staffing_pct": rng.randint(60, 110), "pick_backlog": rng.randint(0, 4000),
        } for w in FCS},
    }
    if rng.random() < 0.1:
        replay["get_carrier_rates"] = {k: {ERROR_KEY: "rating engine unavailable"} for k in replay["get_carrier_rates"]}
    # Other orders' reservations: one per (FC, SKU) pair with a held quantity.
    others = []
    for n, ((w, sku), q) in enumerate(sorted(f["other_reserved"].items())):
        others.append({"reservation_id": f"RSV-{rsv_start - 1 - n:06d}", "order_id": f"ORD-{rng.randint(0, 9_999_999):07d}",
                       "line_no": 1, "warehouse_id": w, "sku": sku, "quantity": q, "status": "active"})
    other_orders = sorted({r["order_id"] for r in others} - {order_id})
    initial_state = {
        "orders": [{"order_id": order_id, "status": "RELEASED"}] + [{"order_id": o, "status": "PICKING"} for o in other_orders],
        "order_lines": [{"order_id": order_id, "line_no": ln["line_no"], "sku": ln["sku"], "quantity": ln["quantity"]} for ln in f["lines"]],
        "stock": [{"warehouse_id": w, "sku": s, "on_hand": q} for (w, s), q in sorted(f["on_hand"].items())],
        "reservations": others,
        "counters": [{"name": "reservation", "value": rsv_start}],
    }
    sku_of = {ln["line_no"]: ln["sku"] for ln in f["lines"]}
    agg: dict[tuple[str, int, str, str], int] = {}
    for line_no, w, q in alloc["held"]:
        key = (order_id, line_no, w, sku_of[line_no])
        agg[key] = agg.get(key, 0) + q
    for r in others:
        key = (r["order_id"], r["line_no"], r["warehouse_id"], r["sku"])
        agg[key] = agg.get(key, 0) + r["quantity"]
    statuses = {o: "PICKING" for o in other_orders}
    statuses[order_id] = alloc["decision"]
    expected_state = {
        "reservations": [[*k, v] for k, v in sorted(agg.items())],
        "order_status": [[o, s] for o, s in sorted(statuses.items())],
    }
    if alloc["decision"] == "HOLD":
        difficulty = "easy"
    elif alloc["features"] & {"consolidated", "released", "filter_matters"} or len(set(sku_of.values())) < len(sku_of):
        difficulty = "hard"
    else:
        difficulty = "medium"
    return {
        "inputs": {"order_id": order_id, "released_by": rng.choice(("wave-planner", "manual", "auto-release"))},
        "answer": {"decision": alloc["decision"], "num_shipments": alloc["shipments"]},
        "replay": replay,
        "initial_state": initial_state,
        "expected_state": expected_state,
        "difficulty": difficulty,
        "meta": {"oracle_calls": alloc["calls"], "features": sorted(alloc["features"])},
    }


# ---------------------------------------------------------------------------------------------
# Reference solver: the SOP as written, facts only from tools.
# ---------------------------------------------------------------------------------------------
def _ok(result: Any) -> Any:
    if isinstance(result, ToolError):
        raise result
    return result


def solve(inputs: dict[str, Any]):
    order = _ok((yield ToolCall("get_order", {"order_id": inputs["order_id"]})))
    oid = order["order_id"]
    account = _ok((yield ToolCall("get_customer_account", {"customer_id": order["customer_id"]})))
    payment = _ok((yield ToolCall("get_payment_authorization", {"payment_id": order["payment_id"]})))
    if account["account_status"] != "active" or payment["status"] != "authorized":
        _ok((yield ToolCall("set_order_status", {"order_id": oid, "status": "HOLD"})))
        return {"decision": "HOLD", "num_shipments": 0}
    centres = _ok((yield ToolCall("list_fulfilment_centres", {"region": order["region"]})))["serving"]
    centres = sorted(centres, key=lambda c: c["rank"])
    express = order["service_level"] == "express"
    my_fcs: set[str] = set()  # FCs holding an active reservation of this order
    any_short = False
    for line in sorted(order["lines"], key=lambda x: x["line_no"]):
        eligible = [c["warehouse_id"] for c in centres
                    if (not express or c["transit_days"] <= 2) and (not line["hazmat"] or c["hazmat_certified"])]
        stock = _ok((yield ToolCall("check_availability", {"sku": line["sku"]})))
        available = {w["warehouse_id"]: w["available"] for w in stock["warehouses"]}
        qty = line["quantity"]
        if sum(available.get(w, 0) for w in eligible) < qty:
            any_short = True
            if account["accepts_partial_shipment"]:
                continue
            summary = _ok((yield ToolCall("get_order_reservations", {"order_id": oid})))
            for r in summary["active_reservations"]:
                _ok((yield ToolCall("release_reservation", {"reservation_id": r["reservation_id"]})))
            _ok((yield ToolCall("set_order_status", {"order_id": oid, "status": "BACKORDER"})))
            return {"decision": "BACKORDER", "num_shipments": 0}
        whole = [w for w in eligible if available.get(w, 0) >= qty]
        preferred = [w for w in whole if w in my_fcs] or whole
        if preferred:
            plan = [(preferred[0], qty)]
        else:
            plan, need = [], qty
            for w in eligible:
                if need == 0:
                    break
                take = min(available.get(w, 0), need)
                if take > 0:
                    plan.append((w, take))
                    need -= take
        for w, q in plan:
            _ok((yield ToolCall("reserve_stock", {"order_id": oid, "line_no": line["line_no"], "warehouse_id": w, "quantity": q})))
            my_fcs.add(w)
    summary = _ok((yield ToolCall("get_order_reservations", {"order_id": oid})))
    shipments = summary["num_shipments"]
    if not any_short:
        decision = "SHIP_SINGLE" if shipments == 1 else "SHIP_SPLIT"
    else:
        decision = "PARTIAL_SHIP" if any(ln["reserved"] > 0 for ln in summary["lines"]) else "BACKORDER"
    _ok((yield ToolCall("set_order_status", {"order_id": oid, "status": decision})))
    return {"decision": decision, "num_shipments": shipments}


PACK = DomainPack(
    name="OrderFulfilment",
    version=0,
    title="Order allocation and fulfilment decision",
    theme="order fulfilment",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    # Longest procedures the generator keeps use 15 tool calls, plus submit.
    human_steps=MAX_CALLS + 1,
    generate=generate,
    solver=solve,
    program=PROGRAM,
)
