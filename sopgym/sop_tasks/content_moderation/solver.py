"""ContentModeration's reference solver: SOP CM-12 as written, every fact read through the tools.
It never imports ``generator.py``."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sopgym.sop_tasks.pack import ToolCall, expect


def solve(inputs: dict[str, Any]):
    report = expect((yield ToolCall("get_report", {"report_id": inputs["report_id"]})))
    post = expect((yield ToolCall("get_post", {"post_id": report["post_id"]})))
    violations = []
    for signal in post["policy_signals"]:
        policy = expect((yield ToolCall("get_policy", {"policy_code": signal["policy_code"]})))
        if signal["confidence"] >= policy["violation_threshold"]:
            violations.append(policy)
    author = expect((yield ToolCall("get_author_profile", {"user_id": post["author_id"]})))
    record = expect((yield ToolCall("get_strike_record", {"strike_record_id": author["strike_record_id"]})))
    reported_on = dt.date.fromisoformat(report["reported_on"])
    active = sum(
        s["points"]
        for s in record["strikes"]
        if s["status"] == "active" and dt.date.fromisoformat(s["expires_on"]) >= reported_on
    )
    if not violations:
        return {"action": "NO_ACTION", "policy_code": "NONE", "strike_points": active}
    violations.sort(key=lambda p: p["policy_code"])
    violations.sort(key=lambda p: (p["severity"], p["strike_weight"]), reverse=True)
    deciding = violations[0]
    if deciding["newsworthiness_exception"] and author["account_type"] == "news_organization" and author["verified"]:
        return {"action": "LABEL", "policy_code": deciding["policy_code"], "strike_points": active}
    total = active + deciding["strike_weight"]
    if deciding["severity"] == 3:
        action = "BAN"
    elif total >= 6:
        action = "SUSPEND"
    else:
        action = "REMOVE_WITH_STRIKE"
    return {"action": action, "policy_code": deciding["policy_code"], "strike_points": total}
