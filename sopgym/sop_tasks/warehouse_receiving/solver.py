"""WarehouseReceiving's reference solver: SOP WR-7 as written, every fact read through the tools.

Written from ``sop.md``, independently of the generator's decision table (it never imports
``generator.py``): when the two agree on every task, the labels are right.
"""

from __future__ import annotations

from typing import Any

from sopgym.sop_tasks.pack import ToolCall, ToolError, expect


def solve(inputs: dict[str, Any]):
    disposition, reason, scan = yield from _decide(inputs)
    if disposition in ("REJECT", "QUARANTINE"):
        accepted = 0
    elif disposition == "PARTIAL_REJECT":
        accepted = scan["counted_pallets"] - scan["damaged_pallets"]
    else:
        accepted = scan["counted_pallets"]
    return {"disposition": disposition, "reason_code": reason, "accepted_pallets": accepted}


def _decide(inputs: dict[str, Any]):
    """SOP section 2, step by step. Returns (disposition, reason, dock scan or None)."""
    appointment = yield ToolCall("get_dock_appointment", {"dock_door": inputs["dock_door"], "date": inputs["arrived_at"][:10]})
    if isinstance(appointment, ToolError) or appointment["shipment_id"] != inputs["shipment_id"]:
        return "REJECT", "NO_APPOINTMENT", None
    shipment = expect((yield ToolCall("get_shipment", {"shipment_id": inputs["shipment_id"]})))
    po = expect((yield ToolCall("get_purchase_order", {"po_number": shipment["po_number"]})))
    if po["status"] in ("cancelled", "closed"):
        return "REJECT", "PO_INVALID", None
    scan = expect((yield ToolCall("get_dock_scan", {"shipment_id": inputs["shipment_id"]})))
    if not scan["seal_intact"] or scan["seal_number_read"] != shipment["declared_seal_number"]:
        return "QUARANTINE", "SEAL_MISMATCH", scan
    supplier = None
    cls = shipment["temperature_class"]
    if cls in ("chilled", "frozen"):
        out = _temp_out_by_tenths(cls, scan["temperature_c"])
        if out is None or out > 0:
            supplier = expect((yield ToolCall("get_supplier_profile", {"supplier_id": shipment["supplier_id"]})))
            if out is not None and out <= 10 and supplier["tier"] == "preferred":
                return "QUARANTINE", "TEMP_REVIEW", scan
            return "REJECT", "TEMP_EXCURSION", scan
    expected = po["expected_weight_kg"]
    if abs(scan["measured_weight_kg"] - expected) * 100 > po["weight_tolerance_pct"] * expected:
        return "QUARANTINE", "WEIGHT_VARIANCE", scan
    damaged, counted = scan["damaged_pallets"], scan["counted_pallets"]
    if damaged / counted > 0.25:
        return "REJECT", "DAMAGE", scan
    if damaged >= 1:
        return "PARTIAL_REJECT", "DAMAGE", scan
    if counted != po["expected_pallets"]:
        return "ACCEPT_WITH_NOTE", "COUNT_DISCREPANCY", scan
    if supplier is None:
        supplier = expect((yield ToolCall("get_supplier_profile", {"supplier_id": shipment["supplier_id"]})))
    if supplier["tier"] == "probation" or supplier["open_quality_holds"] >= 2:
        return "ACCEPT_WITH_NOTE", "SUPPLIER_WATCH", scan
    return "ACCEPT", "NONE", scan


def _temp_out_by_tenths(cls: str, temp: float | None) -> int | None:
    """How far (tenths of a degree) a reading is outside its class's range; None if not probed."""
    if temp is None:
        return None
    t = round(temp * 10)
    if cls == "chilled":
        return max(0, 0 - t, t - 50)
    return max(0, t + 150)
