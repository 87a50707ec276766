"""ReferralAbuseEnforcement's reference solver: SOP RA-3 as written, every fact read through the
tools (linked accounts chained into profile lookups). It never imports ``generator.py``."""

from __future__ import annotations

from typing import Any

from sopgym.sop_tasks.pack import ToolCall, expect


def _risk_score(profile: dict, rules: dict, referrals: list[dict], statuses: dict[str, str], paid: list[dict],
                self_referrals: int) -> int:
    """Step 4: the risk score, signal by signal, with the partner tier's discount."""
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
    if sum(p["amount_cents"] for p in paid if p["days_ago"] <= 30) > rules["payout_cap_cents"]:
        score += 15
    if profile["program_tier"] == "partner" and self_referrals == 0:
        score = max(0, score - 20)
    return score


#: Step 5: the action of the highest band the score reaches.
_BANDS = ((70, "BAN"), (45, "CLAWBACK"), (25, "SUSPEND_REFERRALS"), (10, "WARN"))


def _action(score: int, paid: list[dict], prior_enforcements: int) -> str:
    action = next((name for floor, name in _BANDS if score >= floor), "NO_ACTION")
    if action == "CLAWBACK" and not paid:
        return "SUSPEND_REFERRALS"
    if action == "WARN" and prior_enforcements >= 2:
        return "SUSPEND_REFERRALS"
    return action


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
    paid = [p for p in payouts if p["status"] == "paid"]
    score = _risk_score(profile, rules, referrals, statuses, paid, self_referrals)
    action = _action(score, paid, profile["prior_enforcements"])
    return {"enforcement_action": action, "risk_score": score, "self_referral_count": self_referrals}
