"""AircraftPreflightInspection's reference solver: SOP APF-3 as written, every fact read through the
tools (the deferral states and repeat verdicts from the technical log read back after recording).
It never imports ``generator.py``."""

from __future__ import annotations

from typing import Any

from sopgym.sop_tasks.pack import ToolCall, ToolError, expect

from .tools import FORBIDDEN_CONDITION


def solve(inputs: dict[str, Any]):
    flight = expect((yield ToolCall("get_flight", {"flight_number": inputs["flight_number"]})))
    tail = flight["tail_number"]
    aircraft = expect((yield ToolCall("get_aircraft", {"tail_number": tail})))
    card = expect((yield ToolCall("get_walkaround_findings", {"inspection_id": inputs["inspection_id"]})))
    for finding in card["findings"]:
        if finding["kind"] != "inoperative":
            continue
        mel = yield ToolCall("lookup_mel_item", {"fleet_type": aircraft["fleet_type"], "ata_code": finding["ata_code"]})
        if isinstance(mel, ToolError) or mel["installed"] - finding["units_inoperative"] < mel["required"]:
            category, restrictions = "NO_GO", []
        else:
            category, restrictions = mel["category"], list(mel["restrictions"])
        expect((yield ToolCall(
            "record_defect",
            {
                "tail_number": tail,
                "finding_id": finding["finding_id"],
                "ata_code": finding["ata_code"],
                "mel_category": category,
                "restrictions": restrictions,
            },
        )))
    status = expect((yield ToolCall("get_airworthiness_status", {"tail_number": tail})))
    states = [item["state"] for item in status["open_items"]]
    deferred = [item for item in status["open_items"] if item["state"] == "DEFERRED"]
    hold = None
    if "OVERDUE" in states:
        decision, hold = "NO_GO_GROUNDED", "OVERDUE_DEFERRAL"
    elif any(
        item["state"] == "GROUNDING" and item["grounding_reason"] == "REPEAT_DEFECT" for item in status["open_items"]
    ):
        decision, hold = "NO_GO_GROUNDED", "REPEAT_DEFECT"
    elif "GROUNDING" in states:
        decision, hold = "NO_GO_GROUNDED", "NO_GO_ITEM"
    elif any(flight[FORBIDDEN_CONDITION[r]] for item in deferred for r in item["restrictions"]):
        decision, hold = "NO_GO_RESTRICTION", "RESTRICTION_CONFLICT"
    elif deferred:
        decision = "GO_WITH_DEFERRALS"
    else:
        decision = "GO"
    if hold is not None:
        expect((yield ToolCall("place_maintenance_hold", {"tail_number": tail, "reason": hold})))
    return {"dispatch_decision": decision, "open_deferrals": len(deferred)}
