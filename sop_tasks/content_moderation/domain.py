"""ContentModeration: review of a reported post and enforcement (SOP CM-12). Replay tier.

Facts chain through identifiers: report -> post (signals, author) -> policy records (one per
signal) -> author profile -> strike record. The generator samples a case around a target action
(balanced over the five actions on val/test), labels it with its own decision table (``_label``,
in integer hundredths and date ordinals) and keeps it only when the label hits the target. The
reference solver (``solve``) follows the SOP text through the tools and never calls ``_label``.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from sopgym.sandboxes import ToolSpec, canonical_args
from sopgym.sop_tasks.pack import DomainPack, OutputField, ToolCall, ToolError, object_schema, read_text

ACTIONS = ("NO_ACTION", "LABEL", "REMOVE_WITH_STRIKE", "SUSPEND", "BAN")
#: code -> (title, severity, strike weight, newsworthiness exception allowed)
POLICIES = {
    "HS-1": ("Hateful conduct", 2, 3, True),
    "HR-2": ("Targeted harassment", 2, 2, False),
    "VE-1": ("Violent extremism", 3, 5, True),
    "CT-1": ("Credible threat of violence", 3, 6, False),
    "GV-2": ("Graphic violence", 2, 2, True),
    "MI-3": ("Harmful misinformation", 1, 2, True),
    "SP-1": ("Spam and platform manipulation", 1, 1, False),
    "AD-1": ("Adult content", 1, 1, False),
    "SH-4": ("Self-harm promotion", 2, 4, False),
}
CODES = tuple(sorted(POLICIES))
SUSPEND_AT = 6
THRESHOLDS = (60, 65, 70, 75, 80, 85, 90)  # hundredths
ACCOUNT_TYPES = ("individual", "news_organization", "business", "creator")

_rpt = {"type": "string", "pattern": "^RPT-[0-9]{8}$"}
_pst = {"type": "string", "pattern": "^PST-[0-9]{9}$"}
_usr = {"type": "string", "pattern": "^USR-[0-9]{7}$"}




TOOLS = (
    ToolSpec(
        "get_report",
        "A user report: reported post id, report date, reporter id, reporter's chosen category, duplicate count.",
        object_schema({"report_id": _rpt}),
        not_found="report {report_id} not found",
    ),
    ToolSpec(
        "get_post",
        "A post: author id, language, excerpt, classifier policy signals (policy code, confidence) and a legacy "
        "auto-action suggestion.",
        object_schema({"post_id": _pst}),
        not_found="post {post_id} not found",
    ),
    ToolSpec(
        "get_policy",
        "Current policy record for a policy code: violation threshold, severity, strike weight, whether the "
        "newsworthiness exception may apply.",
        object_schema({"policy_code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]$"}}),
        not_found="no policy with code {policy_code}",
    ),
    ToolSpec(
        "get_author_profile",
        "Author profile: account type, verified flag, account age, follower count, strike record id.",
        object_schema({"user_id": _usr}),
        not_found="user {user_id} not found",
    ),
    ToolSpec(
        "get_strike_record",
        "Enforcement history by strike record id: strikes with policy, points, issue and expiry dates, status.",
        object_schema({"strike_record_id": {"type": "string", "pattern": "^SR-[0-9]{6}$"}}),
        not_found="strike record {strike_record_id} not found",
    ),
    ToolSpec(
        "get_reporter_profile",
        "Profile of the user who filed a report: report accuracy, reports filed.",
        object_schema({"user_id": _usr}),
        distractor=True,
        not_found="user {user_id} not found",
    ),
    ToolSpec(
        "get_post_engagement",
        "Views, shares and comments of a post.",
        object_schema({"post_id": _pst}),
        distractor=True,
        not_found="post {post_id} not found",
    ),
    ToolSpec(
        "translate_post",
        "Machine translation of a post's excerpt.",
        object_schema({"post_id": _pst, "target_language": {"type": "string", "enum": ["en", "es", "fr", "de"]}}),
        distractor=True,
        not_found="post {post_id} not found",
    ),
)

FIELDS = (
    OutputField("action", enum=ACTIONS, description="Enforcement action (SOP CM-12 step 6)."),
    OutputField("policy_code", enum=("NONE",) + CODES, description="Deciding policy code, or NONE."),
    OutputField("strike_points", type="integer", description="Active strike points after the decision (step 7)."),
)


# ---------------------------------------------------------------------------------------------
# Generator
# ---------------------------------------------------------------------------------------------
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


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = ACTIONS[index % len(ACTIONS)] if split != "train" else rng.choice(ACTIONS)
    for _ in range(500):
        case = _case(rng, target)
        action, code, points = _label(case)
        if action == target:
            break
    else:  # pragma: no cover - every target is reachable in a few tries
        raise RuntimeError(f"could not build a ContentModeration case for {target}")

    report_id = f"RPT-{rng.randint(0, 10**8 - 1):08d}"
    post_id = f"PST-{rng.randint(0, 10**9 - 1):09d}"
    author_id = f"USR-{rng.randint(0, 10**7 - 1):07d}"
    reporter_id = f"USR-{rng.randint(0, 10**7 - 1):07d}"
    record_id = f"SR-{rng.randint(0, 10**6 - 1):06d}"
    rd = case["report_date"]
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
    policy_replay = {
        canonical_args({"policy_code": k}): {
            "policy_code": k,
            "title": POLICIES[k][0],
            "violation_threshold": case["thresholds"][k] / 100,
            "severity": POLICIES[k][1],
            "strike_weight": POLICIES[k][2],
            "newsworthiness_exception": POLICIES[k][3],
            "revision": f"2026.{rng.randint(1, 12)}",
        }
        for k in case["signals"]
    }
    replay = {
        "get_report": {
            canonical_args({"report_id": report_id}): {
                "report_id": report_id,
                "post_id": post_id,
                "reported_on": rd.isoformat(),
                "reporter_id": reporter_id,
                "reporter_category": rng.choice(CODES),
                "duplicate_reports": rng.randint(0, 40),
            }
        },
        "get_post": {
            canonical_args({"post_id": post_id}): {
                "post_id": post_id,
                "author_id": author_id,
                "language": rng.choice(("en", "es", "fr", "de")),
                "excerpt": "[excerpt withheld from the review log; see the policy signals]",
                "policy_signals": [{"policy_code": k, "confidence": v / 100} for k, v in case["signals"].items()],
                "auto_action_suggestion": rng.choice(ACTIONS),
            }
        },
        "get_policy": policy_replay,
        "get_author_profile": {
            canonical_args({"user_id": author_id}): {
                "user_id": author_id,
                "account_type": case["account_type"],
                "verified": case["verified"],
                "account_age_days": rng.randint(3, 4000),
                "followers": rng.randint(0, 2_000_000),
                "strike_record_id": record_id,
            }
        },
        "get_strike_record": {
            canonical_args({"strike_record_id": record_id}): {
                "strike_record_id": record_id,
                "user_id": author_id,
                "strikes": strikes,
                "lifetime_points": sum(s["points"] for s in case["strikes"]) + rng.randint(0, 6),
            }
        },
        "get_reporter_profile": {
            canonical_args({"user_id": reporter_id}): {
                "user_id": reporter_id,
                "reports_filed": rng.randint(1, 300),
                "report_accuracy": round(rng.uniform(0.1, 0.95), 2),
            }
        },
        "get_post_engagement": {
            canonical_args({"post_id": post_id}): {
                "post_id": post_id,
                "views": rng.randint(10, 500000),
                "shares": rng.randint(0, 9000),
                "comments": rng.randint(0, 3000),
            }
        },
        "translate_post": {
            canonical_args({"post_id": post_id, "target_language": lang}): {
                "post_id": post_id,
                "target_language": lang,
                "translation": "[translation unavailable for withheld excerpts]",
            }
            for lang in ("en", "es", "fr", "de")
        },
    }
    return {
        "inputs": {"report_id": report_id, "queue": rng.choice(("general", "priority", "escalations"))},
        "answer": {"action": action, "policy_code": code, "strike_points": points},
        "replay": replay,
        "difficulty": _difficulty(case),
        "meta": {"num_signals": len(case["signals"]), "num_strikes": len(case["strikes"])},
    }


# ---------------------------------------------------------------------------------------------
# Reference solver: SOP CM-12 as written, facts only from tools.
# ---------------------------------------------------------------------------------------------
def solve(inputs: dict[str, Any]):
    report = yield ToolCall("get_report", {"report_id": inputs["report_id"]})
    post = yield ToolCall("get_post", {"post_id": report["post_id"]})
    violations = []
    for signal in post["policy_signals"]:
        policy = yield ToolCall("get_policy", {"policy_code": signal["policy_code"]})
        if isinstance(policy, ToolError):
            raise policy
        if signal["confidence"] >= policy["violation_threshold"]:
            violations.append(policy)
    author = yield ToolCall("get_author_profile", {"user_id": post["author_id"]})
    record = yield ToolCall("get_strike_record", {"strike_record_id": author["strike_record_id"]})
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


PACK = DomainPack(
    name="ContentModeration",
    version=0,
    title="Reported content review and enforcement",
    theme="content moderation",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    human_steps=7,  # report, post, ~2 policies, author, strike record, submit
    generate=generate,
    solver=solve,
)
