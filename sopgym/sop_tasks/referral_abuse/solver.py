"""ReferralAbuseEnforcement's reference solver: SOP RA-3 as written, every fact read through the
tools (linked accounts chained into profile lookups). It never imports ``generator.py``."""

from __future__ import annotations

from typing import Any

from sopgym.sop_tasks.pack import ToolCall, expect


def solve(inputs: dict[str, Any]):
    acc = inputs["account_id"]
    profile = expect((yield ToolCall("get_account_profile", {"account_id": acc})))
    rules = expect((yield ToolCall("get_market_rules", {"market": profile["market"]})))
    activity = expect((yield ToolCall("get_referral_activity", {"account_id": acc})))
    devices = expect((yield ToolCall("get_device_links", {"account_id": acc})))
    payments = expect((yield ToolCall("get_payment_links", {"account_id": acc})))
    linked: list[str] = []
    for group in devices["devices"] + payments["instruments"]:
        for other in group["linked_account_ids"]:
            if other != acc and other not in linked:
                linked.append(other)
    statuses = {}
    for other in linked:
        statuses[other] = expect((yield ToolCall("get_account_profile", {"account_id": other})))["status"]
    payouts = expect((yield ToolCall("get_payout_history", {"account_id": acc})))["payouts"]

    referrals = activity["referrals"]
    self_referrals = len({r["referred_account_id"] for r in referrals} & set(linked))
    score = min(20 * self_referrals, 60)
    if "banned" in statuses.values():
        score += 25
    if sum(1 for r in referrals if r["signup_days_ago"] <= 7) >= rules["velocity_limit"]:
        score += 15
    unconverted = sum(1 for r in referrals if not r["converted"])
    if len(referrals) >= 4 and unconverted / len(referrals) > 0.6:
        score += 10
    if profile["created_days_ago"] < rules["min_account_age_days"]:
        score += 10
    if profile["kyc_status"] != "verified":
        score += 10
    paid = [p for p in payouts if p["status"] == "paid"]
    if sum(p["amount_cents"] for p in paid if p["days_ago"] <= 30) > rules["payout_cap_cents"]:
        score += 15
    if profile["program_tier"] == "partner" and self_referrals == 0:
        score = max(0, score - 20)

    if score >= 70:
        action = "BAN"
    elif score >= 45:
        action = "CLAWBACK"
    elif score >= 25:
        action = "SUSPEND_REFERRALS"
    elif score >= 10:
        action = "WARN"
    else:
        action = "NO_ACTION"
    if action == "CLAWBACK" and not paid:
        action = "SUSPEND_REFERRALS"
    if action == "WARN" and profile["prior_enforcements"] >= 2:
        action = "SUSPEND_REFERRALS"
    return {"enforcement_action": action, "risk_score": score, "self_referral_count": self_referrals}
