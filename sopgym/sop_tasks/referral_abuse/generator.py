"""ReferralAbuseEnforcement's task generator: draw, label, records.

* **draw** (``_draw_factors``): abstract risk factors biased towards a target action (balanced over
  the five on val/test), redrawn until the label is the target. A share of SUSPEND_REFERRALS tasks
  is reached only through an exception of SOP step 9 (a CLAWBACK score with nothing paid, or a
  WARN score of a repeat offender), so both exceptions are exercised often enough to matter;
* **label** (``_label``): the generator's own point table and exceptions;
* **records** (``_records``): concrete records that realise those factors (market rules, referred
  and linked accounts, devices and payment instruments, payouts), with decoys: the account itself
  inside its own link lists, banned accounts that are referred but not linked, reversed and pending
  payouts, old payouts, boundary values.

**Difficulty** (``_difficulty``) counts the decoys of the case and the linked accounts that are not
self-referrals, none of which moves the risk score: each linked account that was not referred (one
more profile to look up, not a self-referral; 0 to 2); each device or instrument listing the
reviewed account itself; each banned account that was referred but is not linked; each pending or
reversed payout; each paid payout older than 30 days. ``easy``: at most 3; ``medium``: 4 or 5;
``hard``: 6 or more. The ``difficulty_label`` check of ``sopgym validate-domain`` keeps it from
predicting the action.
"""

from __future__ import annotations

import random
from typing import Any

from sopgym.sop_tasks.generation import balanced_target, draw_until, record, records

from .tools import ACTIONS, MARKETS

FLAG_REASONS = ("referral_velocity_monitor", "support_agent_report", "partner_team_review", "payout_anomaly_monitor")
_PROGRAM_TERMS = {
    "referrer_bonus_cents": 2500,
    "referee_bonus_cents": 1500,
    "eligibility": "Referred customers must be new to the service and complete a first purchase.",
    "terms_version": "2026.2",
}
_POINTS = {"banned_link": 25, "velocity": 15, "low_conversion": 10, "new_account": 10, "kyc": 10, "payout_volume": 15}
#: target -> (self-referral counts to draw from, probability of each other factor, probability of partner tier)
_DRAW = {
    "NO_ACTION": ((0,), 0.15, 0.5),
    "WARN": ((0, 0, 1), 0.2, 0.2),
    "SUSPEND_REFERRALS": ((0, 1, 1, 2), 0.3, 0.2),
    "CLAWBACK": ((1, 2, 2, 3), 0.35, 0.15),
    "BAN": ((2, 3, 3), 0.5, 0.15),
}


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = balanced_target(rng, split, index, ACTIONS)
    via_exception = target == "SUSPEND_REFERRALS" and rng.random() < 0.4
    table = _DRAW[rng.choice(("CLAWBACK", "WARN"))] if via_exception else _DRAW[target]

    def on_target(f: dict[str, Any]) -> bool:
        labelled = _label(f)
        return labelled["answer"]["enforcement_action"] == target and bool(labelled["exceptions"]) >= via_exception

    f = draw_until(lambda: _draw_factors(rng, table, via_exception), on_target, attempts=10_000, target=target)
    return _records(rng, f, _label(f))


# -- draw ------------------------------------------------------------------------------------------
def _draw_factors(rng: random.Random, table: tuple, via_exception: bool) -> dict[str, Any]:
    """Random factors drawn with one row of ``_DRAW``."""
    ks, p, p_partner = table
    f = {name: rng.random() < p for name in _POINTS}
    f["self_referrals"] = rng.choice(ks)
    f["other_linked"] = rng.choice((0, 0, 1, 2))
    f["partner"] = rng.random() < p_partner
    f["has_paid"] = f["payout_volume"] or rng.random() < (0.5 if via_exception else 0.75)
    f["prior_enforcements"] = rng.choice((0, 1, 2, 3) if via_exception else (0, 0, 0, 1, 2, 3))
    if f["banned_link"] and f["self_referrals"] + f["other_linked"] == 0:
        f["other_linked"] = 1
    return f


# -- label -----------------------------------------------------------------------------------------
def _label(f: dict[str, Any]) -> dict[str, Any]:
    """(answer, applied exceptions) from the abstract factors."""
    score = min(20 * f["self_referrals"], 60) + sum(p for name, p in _POINTS.items() if f[name])
    if f["partner"] and f["self_referrals"] == 0:
        score = max(0, score - 20)
    bands = ((70, "BAN"), (45, "CLAWBACK"), (25, "SUSPEND_REFERRALS"), (10, "WARN"), (0, "NO_ACTION"))
    action = next(a for floor, a in bands if score >= floor)
    exceptions = []
    if action == "CLAWBACK" and not f["has_paid"]:
        action = "SUSPEND_REFERRALS"
        exceptions.append("nothing_to_claw_back")
    if action == "WARN" and f["prior_enforcements"] >= 2:
        action = "SUSPEND_REFERRALS"
        exceptions.append("repeat_offender")
    answer = {"enforcement_action": action, "risk_score": score, "self_referral_count": f["self_referrals"]}
    return {"answer": answer, "exceptions": exceptions}


# -- records ---------------------------------------------------------------------------------------
def _new_id(rng: random.Random, used: set[str]) -> str:
    while True:
        ident = f"ACC-{rng.randint(0, 9_999_999):07d}"
        if ident not in used:
            used.add(ident)
            return ident


def _split(rng: random.Random, total: int, parts: int) -> list[int]:
    """``parts`` positive integers summing to ``total`` (total >= parts)."""
    cuts = sorted(rng.sample(range(1, total), parts - 1)) if parts > 1 else []
    edges = [0, *cuts, total]
    return [b - a for a, b in zip(edges, edges[1:])]


def _profile(rng: random.Random, account_id: str, status: str, market: str) -> dict[str, Any]:
    return {
        "account_id": account_id,
        "status": status,
        "created_days_ago": rng.randint(1, 1500),
        "kyc_status": rng.choice(("verified", "verified", "pending")),
        "market": market,
        "program_tier": "standard",
        "prior_enforcements": rng.choice((0, 0, 1)),
        "email_domain": rng.choice(("mailbox.test", "post.example", "inbox.example", "quickmail.test")),
    }


def _referrals(rng: random.Random, f: dict[str, Any], limit: int, ids: list[str]) -> list[dict[str, Any]]:
    """The referral rows realising the velocity and conversion factors (``ids``: the referred accounts)."""
    n = len(ids)
    recent = rng.randint(limit, n) if f["velocity"] else rng.randint(0, min(n, limit - 1))
    if f["low_conversion"]:
        unconverted = rng.randint(6 * n // 10 + 1, n)
    elif n >= 4:
        unconverted = rng.randint(0, 6 * n // 10)  # 60% exactly (n = 5, 10) is allowed and adds nothing
    else:
        unconverted = rng.randint(0, n)
    recent_set = set(rng.sample(range(n), recent))
    unconverted_set = set(rng.sample(range(n), unconverted))
    return [
        {
            "referred_account_id": ids[i],
            "signup_days_ago": rng.choice((7, rng.randint(0, 7)))
            if i in recent_set
            else rng.choice((8, rng.randint(8, 240))),
            "converted": i not in unconverted_set,
        }
        for i in range(n)
    ]


def _payouts(rng: random.Random, f: dict[str, Any], cap: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if f["has_paid"]:
        if f["payout_volume"]:
            recent_total = cap + rng.randint(1, cap // 2)
        else:
            recent_total = rng.choice((cap, rng.randint(0, cap), 0))
        if recent_total:
            for amount in _split(rng, recent_total, min(rng.randint(1, 4), recent_total)):
                rows.append({"amount_cents": amount, "days_ago": rng.randint(0, 30), "status": "paid"})
        if not rows or rng.random() < 0.5:  # older paid payouts never count towards the volume rule
            rows.append({"amount_cents": rng.randint(1000, cap), "days_ago": rng.randint(31, 200), "status": "paid"})
    for _ in range(rng.randint(0, 2)):  # pending or reversed payouts are never paid
        rows.append(
            {
                "amount_cents": rng.randint(1000, cap),
                "days_ago": rng.randint(0, 60),
                "status": rng.choice(("pending", "reversed")),
            }
        )
    rng.shuffle(rows)
    return [dict(r, payout_id=f"PAY-{rng.randint(100000, 999999)}{i}") for i, r in enumerate(rows)]


def _links(rng: random.Random, account_id: str, linked: list[str], prefix: str, mask: str) -> list[dict[str, Any]]:
    """Devices or instruments carrying ``linked`` accounts; the account itself may be listed too."""
    count = rng.randint(1, 2)
    groups: list[list[str]] = [[] for _ in range(count)]
    for acc in linked:
        groups[rng.randrange(count)].append(acc)
    out = []
    for g in groups:
        if rng.random() < 0.5:
            g.insert(rng.randint(0, len(g)), account_id)
        out.append({prefix: mask.format(rng.randint(1000, 9999)), "linked_account_ids": g})
    return out


def _records(rng: random.Random, f: dict[str, Any], labelled: dict[str, Any]) -> dict[str, Any]:
    market = rng.choice(MARKETS)
    rules: dict[str, Any] = {
        "market": market,
        "velocity_limit": rng.randint(3, 7),
        "min_account_age_days": rng.choice((14, 30, 45, 60, 90)),
        "payout_cap_cents": rng.choice((15000, 25000, 40000, 60000)),
    }
    used: set[str] = set()
    account_id = _new_id(rng, used)
    k = f["self_referrals"]
    n = rng.randint(max(1, k, rules["velocity_limit"] if f["velocity"] else 1, 4 if f["low_conversion"] else 1), 10)
    referred = [_new_id(rng, used) for _ in range(n)]
    self_referred = rng.sample(referred, k)
    others = [_new_id(rng, used) for _ in range(f["other_linked"])]
    linked = self_referred + others
    rng.shuffle(linked)

    # Each linked account shares a device, a payment instrument, or both.
    on_device, on_payment = [], []
    for acc in linked:
        where = rng.choice(("device", "payment", "both"))
        if where in ("device", "both"):
            on_device.append(acc)
        if where in ("payment", "both"):
            on_payment.append(acc)

    profiles = {}
    reviewed = _profile(rng, account_id, "active", market)
    min_age = rules["min_account_age_days"]
    reviewed["created_days_ago"] = (
        rng.randint(1, min_age - 1) if f["new_account"] else rng.choice((min_age, rng.randint(min_age, 2000)))
    )
    reviewed["kyc_status"] = rng.choice(("pending", "failed")) if f["kyc"] else "verified"
    reviewed["program_tier"] = "partner" if f["partner"] else "standard"
    reviewed["prior_enforcements"] = f["prior_enforcements"]
    profiles[account_id] = reviewed
    banned = set(rng.sample(linked, rng.randint(1, min(2, len(linked))))) if f["banned_link"] else set()
    for acc in linked:
        profiles[acc] = _profile(
            rng, acc, "banned" if acc in banned else rng.choice(("active", "active", "closed")), market
        )
    for acc in referred:  # referred but not linked: a banned one here must not count
        if acc not in profiles:
            profiles[acc] = _profile(rng, acc, rng.choice(("active", "active", "closed", "banned")), market)

    activity = {"account_id": account_id, "referrals": _referrals(rng, f, rules["velocity_limit"], referred)}
    devices: dict[str, Any] = {"account_id": account_id, "devices": _links(rng, account_id, on_device, "device_id", "DEV-{}")}
    payments: dict[str, Any] = {
        "account_id": account_id,
        "instruments": _links(rng, account_id, on_payment, "instrument_id", "CARD-****{}"),
    }
    payouts: dict[str, Any] = {"account_id": account_id, "payouts": _payouts(rng, f, rules["payout_cap_cents"])}
    by_account = {"account_id": account_id}
    replay = {
        "get_account_profile": records(({"account_id": a}, p) for a, p in profiles.items()),
        "get_referral_activity": record(by_account, activity),
        "get_device_links": record(by_account, devices),
        "get_payment_links": record(by_account, payments),
        "get_payout_history": record(by_account, payouts),
        "get_market_rules": record({"market": market}, rules),
        "get_program_terms": record({}, _PROGRAM_TERMS),
        "get_support_tickets": record(by_account, {
            "account_id": account_id,
            "tickets": [
                {
                    "ticket_id": f"SUP-{rng.randint(10000, 99999)}",
                    "subject": rng.choice(("bonus not received", "cannot log in", "update email")),
                }
                for _ in range(rng.randint(0, 2))
            ],
        }),
        "get_login_history": record(by_account, {
            "account_id": account_id,
            "logins": [
                {"days_ago": rng.randint(0, 30), "ip_country": rng.choice(MARKETS)} for _ in range(rng.randint(1, 4))
            ],
        }),
    }
    return {
        "inputs": {
            "case_id": f"RAE-{rng.randint(0, 999999):06d}",
            "account_id": account_id,
            "flag_reason": rng.choice(FLAG_REASONS),
        },
        "answer": labelled["answer"],
        "replay": replay,
        "difficulty": _difficulty(account_id, profiles, referred, linked, devices["devices"] + payments["instruments"],
                                  payouts["payouts"]),
        "meta": {"exceptions": labelled["exceptions"], "linked_accounts": len(linked)},
    }


def _difficulty(account_id: str, profiles: dict[str, dict[str, Any]], referred: list[str], linked: list[str],
                groups: list[dict[str, Any]], payouts: list[dict[str, Any]]) -> str:
    """The level of the case's count of decoys (module docstring)."""
    score = (
        len(set(linked) - set(referred))
        + sum(account_id in g["linked_account_ids"] for g in groups)
        + sum(profiles[a]["status"] == "banned" for a in referred if a not in linked)
        + sum(p["status"] != "paid" for p in payouts)
        + sum(p["status"] == "paid" and p["days_ago"] > 30 for p in payouts)
    )
    return "easy" if score <= 3 else ("medium" if score <= 5 else "hard")
