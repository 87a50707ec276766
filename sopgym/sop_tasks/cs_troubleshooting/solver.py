"""CustomerServiceTroubleshooting's reference solver: SOP CS-BB-12 as written, every fact read
through the tools (the priority and SLA read back from the ticket). It never imports ``generator.py``."""

from __future__ import annotations

from typing import Any

from sopgym.sop_tasks.pack import ToolCall, expect


def _line_faults(test: dict[str, Any], broadband: dict[str, Any]) -> list[str]:
    """The line test's fault codes (step 5): no sync, or low SNR, packet loss, speed below half the plan."""
    if not test["sync"]:
        return ["NO_SYNC"]
    line = []
    if test["snr_db"] < 6.0:
        line.append("LOW_SNR")
    if test["packet_loss_pct"] > 2.0:
        line.append("HIGH_PACKET_LOSS")
    if test["downstream_mbps"] < broadband["plan_speed_mbps"] / 2:
        line.append("SPEED_BELOW_PLAN")
    return line


def _line_diagnosis(token: str, sid: str, broadband: dict[str, Any]):
    """No outage: test the line (resetting an errored port and testing again), read the ticket history.
    Returns ``(category, status, closing, findings)``."""
    test = expect((yield ToolCall("run_line_test", {"session_token": token, "service_id": sid})))
    was_reset = test["port_state"] == "errored"
    if was_reset:
        expect((yield ToolCall("reset_port", {"session_token": token, "service_id": sid})))
        test = expect((yield ToolCall("run_line_test", {"session_token": token, "service_id": sid})))
    line = _line_faults(test, broadband)
    findings = list(line)
    if was_reset and line:
        findings.append("PORT_RESET_FAILED")
    history = expect((yield ToolCall("get_ticket_history", {"session_token": token, "service_id": sid})))
    recent = [t for t in history["tickets"] if t["category"] in ("LINE_FAULT", "NO_FAULT") and t["days_ago"] <= 30]
    repeat = len(recent) >= 2
    if repeat:
        findings.append("REPEAT_FAULT")
    if line:
        return "LINE_FAULT", "ESCALATED", None, findings
    if was_reset:
        return "LINE_FAULT", "RESOLVED_REMOTE", "RESOLVED_REMOTE", findings
    if repeat:
        return "LINE_FAULT", "ESCALATED", None, findings
    return "NO_FAULT", "NO_FAULT_FOUND", "NO_FAULT_FOUND", findings


def _diagnosis(account: dict[str, Any], token: str, sid: str, broadband: dict[str, Any]):
    """Steps 3 to 6: billing, then an outage, then the line. Returns ``(category, status, closing, findings)``."""
    if account["account_status"] == "suspended":
        return "BILLING", "REFERRED_BILLING", None, []
    outages = expect((yield ToolCall("check_outage", {"region_code": account["region_code"]})))["outages"]
    if any(o["status"] == "active" and o["technology"] == broadband["technology"] for o in outages):
        return "OUTAGE", "OUTAGE_LINKED", None, ["OUTAGE_CONFIRMED"]
    return (yield from _line_diagnosis(token, sid, broadband))


def _escalation_tier(findings: list[str], ticket: dict[str, Any], account: dict[str, Any]) -> str:
    if ticket["priority"] == "P1" and account["segment"] == "business":
        return "NETWORK_OPS"
    return "FIELD_TECH" if ("NO_SYNC" in findings or "LOW_SNR" in findings) else "TIER2"


def solve(inputs: dict[str, Any]):
    auth = expect((yield ToolCall(
        "authenticate", {"customer_id": inputs["customer_id"], "verification_code": inputs["verification_code"]}
    )))
    token = auth["session_token"]
    account = expect((yield ToolCall("get_account", {"session_token": token})))
    broadband = next(s for s in account["services"] if s["type"] == "broadband")
    sid = broadband["service_id"]
    category, status, closing, findings = yield from _diagnosis(account, token, sid, broadband)
    if account["priority_care"]:
        findings.append("CARE_FLAG")
    opened = expect((yield ToolCall("open_ticket", {"session_token": token, "service_id": sid, "category": category})))
    ticket_id = opened["ticket_id"]
    if findings:
        expect((yield ToolCall("add_findings", {"session_token": token, "ticket_id": ticket_id, "codes": findings})))
    ticket = expect((yield ToolCall("get_ticket", {"session_token": token, "ticket_id": ticket_id})))
    tier = "NONE"
    if status == "ESCALATED":
        tier = _escalation_tier(findings, ticket, account)
        expect((yield ToolCall("escalate_ticket", {"session_token": token, "ticket_id": ticket_id, "tier": tier})))
    elif closing is not None:
        expect((yield ToolCall("close_ticket", {"session_token": token, "ticket_id": ticket_id, "resolution": closing})))
    return {
        "resolution_status": status,
        "ticket_priority": ticket["priority"],
        "escalation_tier": tier,
        "sla_hours": ticket["sla_hours"],
    }
