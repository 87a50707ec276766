"""OrderFulfilment's task generator: draw, label, records.

* **draw** (``_draw_facts``): the order's region, service level, serving fulfilment centres, lines
  (repeated SKUs among them), stock and other orders' reservations, account and payment; redrawn
  until the allocation's decision is the task's target (balanced over the five on val/test), the
  procedure fits in ``MAX_CALLS`` tool calls, and (for most backorders) reservations are released;
* **label** (``_allocate``): a simulation of the SOP's allocation with the generator's own
  bookkeeping: decision, shipments, final reservations, tool calls;
* **records** (``_records``): ids, the replay records (a customer note naming a preferred
  warehouse as a decoy), the reservation system's initial state and the expected reservations
  and order statuses.

**Difficulty** (``_difficulty``) counts the traps and filters the order holds, drawn before (and
whatever) the allocation decides: a customer note asking for one warehouse (the SOP's ranking
decides, not the customer); the carrier-rates distractor answering with an error; each line
repeating an earlier line's SKU (earlier reservations change what is available); each hazmat line
(only certified centres are eligible); an express order (only centres within 2 transit days); each
(centre, SKU) with stock other orders have reserved (on hand is not available). ``easy``: at most
2; ``medium``: 3 or 4; ``hard``: 5 or more. The ``difficulty_label`` check of ``sopgym
validate-domain`` keeps it from predicting the decision.
"""

from __future__ import annotations

import random
from typing import Any

from sopgym.sop_tasks.generation import balanced_target, draw_until, record, recorded_error, records

from .tools import DECISIONS, REGIONS, SERVICE_LEVELS

FCS = ("FC-ATL1", "FC-BOS2", "FC-CHI1", "FC-DAL3", "FC-DEN1", "FC-LAX2", "FC-PHX1", "FC-SEA1")
#: The most tool calls a kept task's procedure may take.
MAX_CALLS = 15


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = balanced_target(rng, split, index, DECISIONS)
    # Most backorders should exercise the release path (reservations made, then released).
    want_release = target == "BACKORDER" and rng.random() < 0.6

    def on_target(f: dict[str, Any]) -> bool:
        alloc = _allocate(f)
        return (alloc["decision"] == target and alloc["calls"] <= MAX_CALLS
                and (not want_release or "released" in alloc["features"]))

    f = draw_until(lambda: _draw_facts(rng, target), on_target, attempts=5000, target=target)
    return _records(rng, f, _allocate(f))


# -- draw ------------------------------------------------------------------------------------------
def _draw_facts(rng: random.Random, target: str) -> dict[str, Any]:
    region = rng.choice(REGIONS)
    fcs = rng.sample(FCS, len(FCS))
    num_serving = rng.choice((2, 3, 3, 4))
    serving: list[dict[str, Any]] = [
        {"warehouse_id": w, "rank": i + 1, "transit_days": rng.choice((1, 2, 2, 3, 4)), "hazmat_certified": rng.random() < 0.6}
        for i, w in enumerate(fcs[:num_serving])
    ]
    non_serving = fcs[num_serving:num_serving + 2]
    num_lines = rng.choice((1, 2, 2, 3))
    skus = [f"SKU-{n:05d}" for n in rng.sample(range(10000, 99999), num_lines)]
    lines: list[dict[str, Any]] = []
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


# -- label -----------------------------------------------------------------------------------------
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


# -- records ---------------------------------------------------------------------------------------
def _records(rng: random.Random, f: dict[str, Any], alloc: dict[str, Any]) -> dict[str, Any]:
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
        "get_order": record({"order_id": order_id}, order),
        "get_customer_account": record({"customer_id": customer_id}, {
            "customer_id": customer_id, "account_status": f["account_status"],
            "accepts_partial_shipment": f["accepts_partial"], "loyalty_tier": rng.choice(("bronze", "silver", "gold")),
        }),
        "get_payment_authorization": record({"payment_id": payment_id}, {
            "payment_id": payment_id, "status": f["payment_status"], "amount": round(rng.uniform(15, 900), 2), "currency": "USD",
        }),
        "list_fulfilment_centres": records(({"region": r}, {
            "region": r, "serving": f["serving"] if r == f["region"] else [
                {"warehouse_id": w, "rank": i + 1, "transit_days": rng.randint(1, 4), "hazmat_certified": rng.random() < 0.5}
                for i, w in enumerate(rng.sample(FCS, 3))
            ],
        }) for r in REGIONS),
        "get_carrier_rates": records(({"region": r, "service_level": s}, {
            "region": r, "service_level": s, "rate_per_kg": round(rng.uniform(0.4, 3.5), 2),
        }) for r in REGIONS for s in SERVICE_LEVELS),
        "get_sku_promotions": records(
            ({"sku": s}, {"sku": s, "promotions": rng.choice(([], ["BOGO"], ["10PCT"]))}) for s in skus
        ),
        "get_fc_staffing": records(({"warehouse_id": w}, {
            "warehouse_id": w, "staffing_pct": rng.randint(60, 110), "pick_backlog": rng.randint(0, 4000),
        }) for w in FCS),
    }
    rates_down = rng.random() < 0.1
    if rates_down:  # the rating engine is occasionally down: a distractor's error must not matter
        replay["get_carrier_rates"] = {key: recorded_error("rating engine unavailable") for key in replay["get_carrier_rates"]}
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
    return {
        "inputs": {"order_id": order_id, "released_by": rng.choice(("wave-planner", "manual", "auto-release"))},
        "answer": {"decision": alloc["decision"], "num_shipments": alloc["shipments"]},
        "replay": replay,
        "initial_state": initial_state,
        "expected_state": expected_state,
        "difficulty": _difficulty(f, order["customer_note"], rates_down),
        "meta": {"oracle_calls": alloc["calls"], "features": sorted(alloc["features"])},
    }


def _difficulty(f: dict[str, Any], customer_note: str, rates_down: bool) -> str:
    """The level of the order's count of traps and filters (module docstring)."""
    lines = f["lines"]
    score = (
        customer_note.startswith("Please ship everything from")
        + rates_down
        + len(lines) - len({line["sku"] for line in lines})
        + sum(line["hazmat"] for line in lines)
        + (f["service_level"] == "express")
        + len(f["other_reserved"])
    )
    return "easy" if score <= 2 else ("medium" if score <= 4 else "hard")
