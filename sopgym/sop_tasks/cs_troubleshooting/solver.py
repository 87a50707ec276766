"""CustomerServiceTroubleshooting's reference solver: SOP CS-BB-12 as written, every fact read
through the tools (the priority and SLA read back from the ticket). It never imports ``generator.py``."""

from __future__ import annotations

from typing import Any

from sopgym.sop_tasks.pack import ToolCall, expect


def solve(inputs: dict[str, Any]):
    auth = expect((yield ToolCall(
        "authenticate", {"customer_id": inputs["customer_id"], "verification_code": inputs["verification_code"]}
    )))
    token = auth["session_token"]
    account = expect((yield ToolCall("get_account", {"session_token": token})))
    broadband = next(s for s in account["services"] if s["type"] == "broadband")
    sid = broadband["service_id"]
    findings: list[str] = []
    closing = None
    if account["account_status"] == "suspended":
        category, status = "BILLING", "REFERRED_BILLING"
    else:
        outages = expect((yield ToolCall("check_outage", {"region_code": account["region_code"]})))["outages"]
        if any(o["status"] == "active" and o["technology"] == broadband["technology"] for o in outages):
            category, status = "OUTAGE", "OUTAGE_LINKED"
            findings.append("OUTAGE_CONFIRMED")
        else:
            test = expect((yield ToolCall("run_line_test", {"session_token": token, "service_id": sid})))
            was_reset = test["port_state"] == "errored"
            if was_reset:
                expect((yield ToolCall("reset_port", {"session_token": token, "service_id": sid})))
                test = expect((yield ToolCall("run_line_test", {"session_token": token, "service_id": sid})))
            line = []
            if not test["sync"]:
                line.append("NO_SYNC")
            else:
                if test["snr_db"] < 6.0:
                    line.append("LOW_SNR")
                if test["packet_loss_pct"] > 2.0:
                    line.append("HIGH_PACKET_LOSS")
                if test["downstream_mbps"] < broadband["plan_speed_mbps"] / 2:
                    line.append("SPEED_BELOW_PLAN")
            findings += line
            if was_reset and line:
                findings.append("PORT_RESET_FAILED")
            history = expect((yield ToolCall("get_ticket_history", {"session_token": token, "service_id": sid})))
            recent = [
                t for t in history["tickets"] if t["category"] in ("LINE_FAULT", "NO_FAULT") and t["days_ago"] <= 30
            ]
            repeat = len(recent) >= 2
            if repeat:
                findings.append("REPEAT_FAULT")
            if line:
                category, status = "LINE_FAULT", "ESCALATED"
            elif was_reset:
                category, status, closing = "LINE_FAULT", "RESOLVED_REMOTE", "RESOLVED_REMOTE"
            elif repeat:
                category, status = "LINE_FAULT", "ESCALATED"
            else:
                category, status, closing = "NO_FAULT", "NO_FAULT_FOUND", "NO_FAULT_FOUND"
    if account["priority_care"]:
        findings.append("CARE_FLAG")
    opened = expect((yield ToolCall("open_ticket", {"session_token": token, "service_id": sid, "category": category})))
    ticket_id = opened["ticket_id"]
    if findings:
        expect((yield ToolCall("add_findings", {"session_token": token, "ticket_id": ticket_id, "codes": findings})))
    ticket = expect((yield ToolCall("get_ticket", {"session_token": token, "ticket_id": ticket_id})))
    tier = "NONE"
    if status == "ESCALATED":
        tier = "FIELD_TECH" if ("NO_SYNC" in findings or "LOW_SNR" in findings) else "TIER2"
        if ticket["priority"] == "P1" and account["segment"] == "business":
            tier = "NETWORK_OPS"
        expect((yield ToolCall("escalate_ticket", {"session_token": token, "ticket_id": ticket_id, "tier": tier})))
    elif closing is not None:
        expect((yield ToolCall("close_ticket", {"session_token": token, "ticket_id": ticket_id, "resolution": closing})))
    return {
        "resolution_status": status,
        "ticket_priority": ticket["priority"],
        "escalation_tier": tier,
        "sla_hours": ticket["sla_hours"],
    }
