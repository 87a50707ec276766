"""OrderFulfilment's reference solver: SOP OF-3 as written, every fact read through the tools
(availability read after each reservation). It never imports ``generator.py``."""

from __future__ import annotations

from typing import Any

from sopgym.sop_tasks.pack import ToolCall, expect


def solve(inputs: dict[str, Any]):
    order = expect((yield ToolCall("get_order", {"order_id": inputs["order_id"]})))
    oid = order["order_id"]
    account = expect((yield ToolCall("get_customer_account", {"customer_id": order["customer_id"]})))
    payment = expect((yield ToolCall("get_payment_authorization", {"payment_id": order["payment_id"]})))
    if account["account_status"] != "active" or payment["status"] != "authorized":
        expect((yield ToolCall("set_order_status", {"order_id": oid, "status": "HOLD"})))
        return {"decision": "HOLD", "num_shipments": 0}
    centres = expect((yield ToolCall("list_fulfilment_centres", {"region": order["region"]})))["serving"]
    centres = sorted(centres, key=lambda c: c["rank"])
    express = order["service_level"] == "express"
    my_fcs: set[str] = set()  # FCs holding an active reservation of this order
    any_short = False
    for line in sorted(order["lines"], key=lambda x: x["line_no"]):
        eligible = [c["warehouse_id"] for c in centres
                    if (not express or c["transit_days"] <= 2) and (not line["hazmat"] or c["hazmat_certified"])]
        stock = expect((yield ToolCall("check_availability", {"sku": line["sku"]})))
        available = {w["warehouse_id"]: w["available"] for w in stock["warehouses"]}
        qty = line["quantity"]
        if sum(available.get(w, 0) for w in eligible) < qty:
            any_short = True
            if account["accepts_partial_shipment"]:
                continue
            summary = expect((yield ToolCall("get_order_reservations", {"order_id": oid})))
            for r in summary["active_reservations"]:
                expect((yield ToolCall("release_reservation", {"reservation_id": r["reservation_id"]})))
            expect((yield ToolCall("set_order_status", {"order_id": oid, "status": "BACKORDER"})))
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
            expect((yield ToolCall("reserve_stock", {"order_id": oid, "line_no": line["line_no"], "warehouse_id": w, "quantity": q})))
            my_fcs.add(w)
    summary = expect((yield ToolCall("get_order_reservations", {"order_id": oid})))
    shipments = summary["num_shipments"]
    if not any_short:
        decision = "SHIP_SINGLE" if shipments == 1 else "SHIP_SPLIT"
    else:
        decision = "PARTIAL_SHIP" if any(ln["reserved"] > 0 for ln in summary["lines"]) else "BACKORDER"
    expect((yield ToolCall("set_order_status", {"order_id": oid, "status": decision})))
    return {"decision": decision, "num_shipments": shipments}
