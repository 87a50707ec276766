"""ContentModeration's task generator: draw, label, records.

* **draw** (``_case``): policy signals, thresholds, the author's account and strike history around a
  target action (balanced over the five on val/test), redrawn until the label hits the target;
* **label**: the generator's own decision table (``_label``, in integer hundredths and date ordinals);
* **records** (``_records``): ids and the replay records (a reporter's category and a legacy
  auto-action suggestion as decoys).
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from sopgym.sop_tasks.generation import balanced_target, draw_until, record, records

from .tools import ACTIONS, CODES, LANGUAGES, POLICIES

SUSPEND_AT = 6
THRESHOLDS = (60, 65, 70, 75, 80, 85, 90)  # hundredths
ACCOUNT_TYPES = ("individual", "news_organization", "business", "creator")


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = balanced_target(rng, split, index, ACTIONS)
    case = draw_until(lambda: _case(rng, target), lambda c: _label(c)[0] == target, attempts=500, target=target)
    return _records(rng, case, *_label(case))


# -- draw ------------------------------------------------------------------------------------------
def _case(rng: random.Random, target: str) -> dict[str, Any]:
    report_date = dt.date(2026, 1, 1) + dt.timedelta(days=rng.randint(0, 364))
    codes = rng.sample(CODES, rng.choice((1, 1, 2, 2, 3)))
    thresholds = {k: rng.choice(THRESHOLDS) for k in codes}
    signals = {}
    for k in codes:
        violate = target != "NO_ACTION" and rng.random() < 0.6
        if target in ("SUSPEND", "REMOVE_WITH_STRIKE") and POLICIES[k][1] == 3:
            violate = False
        if target == "BAN" and POLICIES[k][1] == 3:
            violate = True
        t = thresholds[k]
        if violate:
            signals[k] = t if rng.random() < 0.3 else rng.randint(t, 99)  # often exactly at the threshold
        else:
            signals[k] = t - 1 if rng.random() < 0.3 else rng.randint(max(1, t - 45), t - 1)
    if target == "LABEL" or rng.random() < 0.25:
        account_type, verified = "news_organization", target == "LABEL" or rng.random() < 0.5
    else:
        account_type, verified = rng.choice(ACCOUNT_TYPES), rng.random() < 0.4
    strikes = []
    for _ in range(rng.choice((0, 1, 2, 2, 3, 4, 5))):
        # 90 days before the report: the strike expires on the report date (still active).
        issued = report_date - dt.timedelta(days=90 if rng.random() < 0.15 else rng.randint(1, 160))
        strikes.append(
            {
                "points": rng.randint(1, 4),
                "issued_on": issued,
                "expires_on": issued + dt.timedelta(days=90),
                "status": "active" if rng.random() < 0.75 else "overturned",
                "policy_code": rng.choice(CODES),
            }
        )
    return {
        "report_date": report_date,
        "signals": signals,
        "thresholds": thresholds,
        "account_type": account_type,
        "verified": verified,
        "strikes": sorted(strikes, key=lambda s: s["issued_on"]),
    }


# -- label -----------------------------------------------------------------------------------------
def _label(c: dict[str, Any]) -> tuple[str, str, int]:
    """(action, policy code, strike points) from the case facts; confidences in hundredths."""
    day = c["report_date"].toordinal()
    active = sum(s["points"] for s in c["strikes"] if s["status"] == "active" and s["expires_on"].toordinal() >= day)
    violated = [code for code, conf in c["signals"].items() if conf >= c["thresholds"][code]]
    if not violated:
        return "NO_ACTION", "NONE", active
    code = min(violated, key=lambda k: (-POLICIES[k][1], -POLICIES[k][2], k))
    _, severity, weight, newsworthy = POLICIES[code]
    if newsworthy and c["account_type"] == "news_organization" and c["verified"]:
        return "LABEL", code, active
    if severity == 3:
        return "BAN", code, active + weight
    if active + weight >= SUSPEND_AT:
        return "SUSPEND", code, active + weight
    return "REMOVE_WITH_STRIKE", code, active + weight


def _difficulty(c: dict[str, Any]) -> str:
    """easy: no trap; medium: one; hard: two or more (several violations, a confidence at the
    threshold, a strike expiring on the report date, an overturned strike, a self-styled news account)."""
    violated = sum(conf >= c["thresholds"][k] for k, conf in c["signals"].items())
    traps = [
        violated >= 2,
        any(conf in (c["thresholds"][k], c["thresholds"][k] - 1) for k, conf in c["signals"].items()),
        any(s["expires_on"] == c["report_date"] for s in c["strikes"]),
        any(s["status"] == "overturned" for s in c["strikes"]),
        c["account_type"] == "news_organization" and not c["verified"] and violated > 0,
    ]
    return ("easy", "medium", "hard")[min(2, sum(traps))]


# -- records ---------------------------------------------------------------------------------------
def _records(rng: random.Random, case: dict[str, Any], action: str, code: str, points: int) -> dict[str, Any]:
    report_id = f"RPT-{rng.randint(0, 10**8 - 1):08d}"
    post_id = f"PST-{rng.randint(0, 10**9 - 1):09d}"
    author_id = f"USR-{rng.randint(0, 10**7 - 1):07d}"
    reporter_id = f"USR-{rng.randint(0, 10**7 - 1):07d}"
    record_id = f"SR-{rng.randint(0, 10**6 - 1):06d}"
    strikes = [
        {
            "strike_id": f"STK-{rng.randint(0, 10**6 - 1):06d}",
            "policy_code": s["policy_code"],
            "points": s["points"],
            "issued_on": s["issued_on"].isoformat(),
            "expires_on": s["expires_on"].isoformat(),
            "status": s["status"],
        }
        for s in case["strikes"]
    ]
    policies = records(
        ({"policy_code": k}, {
            "policy_code": k,
            "title": POLICIES[k][0],
            "violation_threshold": case["thresholds"][k] / 100,
            "severity": POLICIES[k][1],
            "strike_weight": POLICIES[k][2],
            "newsworthiness_exception": POLICIES[k][3],
            "revision": f"2026.{rng.randint(1, 12)}",
        })
        for k in case["signals"]
    )
    replay = {
        "get_report": record({"report_id": report_id}, {
            "report_id": report_id,
            "post_id": post_id,
            "reported_on": case["report_date"].isoformat(),
            "reporter_id": reporter_id,
            "reporter_category": rng.choice(CODES),
            "duplicate_reports": rng.randint(0, 40),
        }),
        "get_post": record({"post_id": post_id}, {
            "post_id": post_id,
            "author_id": author_id,
            "language": rng.choice(LANGUAGES),
            "excerpt": "[excerpt withheld from the review log; see the policy signals]",
            "policy_signals": [{"policy_code": k, "confidence": v / 100} for k, v in case["signals"].items()],
            "auto_action_suggestion": rng.choice(ACTIONS),
        }),
        "get_policy": policies,
        "get_author_profile": record({"user_id": author_id}, {
            "user_id": author_id,
            "account_type": case["account_type"],
            "verified": case["verified"],
            "account_age_days": rng.randint(3, 4000),
            "followers": rng.randint(0, 2_000_000),
            "strike_record_id": record_id,
        }),
        "get_strike_record": record({"strike_record_id": record_id}, {
            "strike_record_id": record_id,
            "user_id": author_id,
            "strikes": strikes,
            "lifetime_points": sum(s["points"] for s in case["strikes"]) + rng.randint(0, 6),
        }),
        "get_reporter_profile": record({"user_id": reporter_id}, {
            "user_id": reporter_id,
            "reports_filed": rng.randint(1, 300),
            "report_accuracy": round(rng.uniform(0.1, 0.95), 2),
        }),
        "get_post_engagement": record({"post_id": post_id}, {
            "post_id": post_id,
            "views": rng.randint(10, 500000),
            "shares": rng.randint(0, 9000),
            "comments": rng.randint(0, 3000),
        }),
        "translate_post": records(
            ({"post_id": post_id, "target_language": lang}, {
                "post_id": post_id,
                "target_language": lang,
                "translation": "[translation unavailable for withheld excerpts]",
            })
            for lang in LANGUAGES
        ),
    }
    return {
        "inputs": {"report_id": report_id, "queue": rng.choice(("general", "priority", "escalations"))},
        "answer": {"action": action, "policy_code": code, "strike_points": points},
        "replay": replay,
        "difficulty": _difficulty(case),
        "meta": {"num_signals": len(case["signals"]), "num_strikes": len(case["strikes"])},
    }
