"""DangerousGoodsClassification's reference solver: SOP DG-5 as written, every fact read through the
tools. It never imports ``generator.py``."""

from __future__ import annotations

from typing import Any

from sopgym.sop_tasks.pack import ToolCall, expect


def _instruction(cache: dict[str, dict], pi_id: str):
    """A packing instruction, read once per consignment."""
    if pi_id not in cache:
        cache[pi_id] = expect((yield ToolCall("get_packing_instruction", {"pi_id": pi_id})))
    return cache[pi_id]


def _aircraft(booked: str, packages: list[dict], records: dict[str, dict], instructions: dict[str, dict]):
    """Step 3: a passenger booking stays passenger while every package has a passenger instruction
    and fits its per-package quantity; else the consignment goes cargo."""
    if booked != "passenger":
        return booked
    for p in packages:
        pax_pi = records[p["un_number"]]["passenger_pi"]
        if pax_pi is None:
            return "cargo"
        pi = yield from _instruction(instructions, pax_pi)
        if p["net_quantity"] > pi["max_net_quantity_per_package"]:
            return "cargo"
    return booked


def _failures(packages: list[dict], records: dict[str, dict], key: str, instructions: dict[str, dict]):
    """Step 4: ``(packaging failures, quantity-only failures)`` under the chosen aircraft's instructions."""
    packaging_failures = quantity_only_failures = 0
    for p in packages:
        pi = yield from _instruction(instructions, records[p["un_number"]][key])
        if p["packaging_code"] not in pi["allowed_packagings"]:
            packaging_failures += 1
        elif p["net_quantity"] > pi["max_net_quantity_per_package"]:
            quantity_only_failures += 1
    return packaging_failures, quantity_only_failures


def _incompatible_pair(classes: list[str]):
    """Step 5: whether some pair of the classes must not travel together."""
    for i, a in enumerate(classes):
        for b in classes[i + 1 :]:
            rule = expect((yield ToolCall("get_segregation_rule", {"class_a": a, "class_b": b})))
            if rule["rule"] == "incompatible":
                return True
    return False


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
    booked = consignment["aircraft_type_booked"]
    aircraft = yield from _aircraft(booked, packages, records, instructions)
    key = "passenger_pi" if aircraft == "passenger" else "cargo_pi"
    packaging_failures, quantity_only_failures = yield from _failures(packages, records, key, instructions)
    if packaging_failures:
        return {"decision": "REJECT_PACKAGING", "non_compliant_packages": packaging_failures + quantity_only_failures}
    if quantity_only_failures:
        return {"decision": "REJECT_QUANTITY", "non_compliant_packages": quantity_only_failures}
    if (yield from _incompatible_pair(sorted({records[p["un_number"]]["class"] for p in packages}))):
        return {"decision": "REJECT_SEGREGATION", "non_compliant_packages": 0}
    return {"decision": "ACCEPT" if aircraft == booked else "CARGO_AIRCRAFT_ONLY", "non_compliant_packages": 0}
