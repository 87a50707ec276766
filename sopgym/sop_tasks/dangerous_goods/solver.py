"""DangerousGoodsClassification's reference solver: SOP DG-5 as written, every fact read through the
tools. It never imports ``generator.py``."""

from __future__ import annotations

from typing import Any

from sopgym.sop_tasks.pack import ToolCall, expect


def solve(inputs: dict[str, Any]):
    consignment = expect((yield ToolCall("get_consignment", {"consignment_id": inputs["consignment_id"]})))
    packages = consignment["packages"]
    records: dict[str, dict] = {}
    for p in packages:
        if p["un_number"] not in records:
            records[p["un_number"]] = expect((yield ToolCall("lookup_un_number", {"un_number": p["un_number"]})))
    forbidden = [p for p in packages if records[p["un_number"]]["forbidden"]]
    if forbidden:
        return {"decision": "REJECT_FORBIDDEN", "non_compliant_packages": len(forbidden)}

    instructions: dict[str, dict] = {}

    def instruction(pi_id: str):
        if pi_id not in instructions:
            instructions[pi_id] = expect((yield ToolCall("get_packing_instruction", {"pi_id": pi_id})))
        return instructions[pi_id]

    booked = consignment["aircraft_type_booked"]
    aircraft = booked
    if booked == "passenger":
        for p in packages:
            pax_pi = records[p["un_number"]]["passenger_pi"]
            if pax_pi is None:
                aircraft = "cargo"
                break
            pi = yield from instruction(pax_pi)
            if p["net_quantity"] > pi["max_net_quantity_per_package"]:
                aircraft = "cargo"
                break
    key = "passenger_pi" if aircraft == "passenger" else "cargo_pi"
    packaging_failures = quantity_only_failures = 0
    for p in packages:
        pi = yield from instruction(records[p["un_number"]][key])
        if p["packaging_code"] not in pi["allowed_packagings"]:
            packaging_failures += 1
        elif p["net_quantity"] > pi["max_net_quantity_per_package"]:
            quantity_only_failures += 1
    if packaging_failures:
        return {"decision": "REJECT_PACKAGING", "non_compliant_packages": packaging_failures + quantity_only_failures}
    if quantity_only_failures:
        return {"decision": "REJECT_QUANTITY", "non_compliant_packages": quantity_only_failures}
    classes = sorted({records[p["un_number"]]["class"] for p in packages})
    for i, a in enumerate(classes):
        for b in classes[i + 1 :]:
            rule = expect((yield ToolCall("get_segregation_rule", {"class_a": a, "class_b": b})))
            if rule["rule"] == "incompatible":
                return {"decision": "REJECT_SEGREGATION", "non_compliant_packages": 0}
    return {"decision": "ACCEPT" if aircraft == booked else "CARGO_AIRCRAFT_ONLY", "non_compliant_packages": 0}
