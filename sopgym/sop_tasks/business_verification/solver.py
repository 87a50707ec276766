"""BusinessVerificationKYB's reference solver: SOP KYB-4 as written, every fact read through the
tools (the risk tier read back from the case). It never imports ``generator.py``."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sopgym.sop_tasks.pack import ToolCall, expect


def solve(inputs: dict[str, Any]):
    app = expect((yield ToolCall("get_application", {"application_id": inputs["application_id"]})))
    case = expect((yield ToolCall("open_case", {"application_id": app["application_id"]})))
    case_id = case["case_id"]
    reg = expect((yield ToolCall("lookup_company_registry", {
        "jurisdiction": app["jurisdiction"], "registration_number": app["registration_number"]})))
    entity = reg["entity_id"]
    if reg["status"] != "active":
        registry = "FAIL"
    else:
        age = (dt.date.fromisoformat(app["submitted_on"]) - dt.date.fromisoformat(reg["incorporated_on"])).days
        registry = "FLAG" if not _same_name(reg["registered_name"], app["legal_name"]) or age < 180 else "PASS"
    expect((yield ToolCall("attach_finding", {"case_id": case_id, "check": "REGISTRY", "subject_id": entity, "result": registry})))
    if registry != "FAIL":
        filing = expect((yield ToolCall("get_ownership_filing", {"entity_id": entity})))
        owners = filing["owners"]
        ubos = [o for o in owners if o["ownership_pct"] >= 25.0]
        if not owners:
            ownership = "FAIL"
        elif any(o["owner_type"] == "company" for o in ubos) or round(sum(o["ownership_pct"] for o in owners), 1) < 75.0:
            ownership = "FLAG"
        else:
            ownership = "PASS"
        expect((yield ToolCall("attach_finding", {"case_id": case_id, "check": "OWNERSHIP", "subject_id": entity, "result": ownership})))
        for subject in [entity] + [o["owner_id"] for o in ubos]:
            screening = expect((yield ToolCall("screen_sanctions", {"subject_id": subject})))
            top = max([h["match_score"] for h in screening["hits"]] or [0])
            result = "FAIL" if top >= 90 else "FLAG" if top >= 75 else "PASS"
            expect((yield ToolCall("attach_finding", {"case_id": case_id, "check": "SANCTIONS", "subject_id": subject, "result": result})))
    read = expect((yield ToolCall("get_case", {"case_id": case_id})))
    tier = read["risk_tier"]
    if tier == "CRITICAL":
        decision = "REJECT"
    elif tier == "HIGH":
        decision = "ENHANCED_DUE_DILIGENCE"
    elif tier == "MEDIUM":
        flagged = any(x["check"] == "SANCTIONS" and x["result"] == "FLAG" for x in read["findings"])
        decision = "ENHANCED_DUE_DILIGENCE" if flagged else "APPROVE_WITH_MONITORING"
    else:
        decision = "APPROVE"
    expect((yield ToolCall("record_decision", {"case_id": case_id, "decision": decision})))
    return {"decision": decision, "risk_tier": tier}


def _same_name(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())
