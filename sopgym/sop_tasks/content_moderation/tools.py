"""ContentModeration's vocabulary, tools and answer fields: what the agent sees."""

from sopgym.sop_tasks.pack import OutputField
from sopgym.sop_tasks.toolkit import lookup

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
LANGUAGES = ("en", "es", "fr", "de")

_pst = {"type": "string", "pattern": "^PST-[0-9]{9}$"}
_usr = {"type": "string", "pattern": "^USR-[0-9]{7}$"}
TOOLS = (
    lookup(
        "get_report",
        "A user report: reported post id, report date, reporter id, reporter's chosen category, duplicate count.",
        {"report_id": {"type": "string", "pattern": "^RPT-[0-9]{8}$"}},
        not_found="report {report_id} not found",
    ),
    lookup(
        "get_post",
        "A post: author id, language, excerpt, classifier policy signals (policy code, confidence) and a legacy "
        "auto-action suggestion.",
        {"post_id": _pst},
        not_found="post {post_id} not found",
    ),
    lookup(
        "get_policy",
        "Current policy record for a policy code: violation threshold, severity, strike weight, whether the "
        "newsworthiness exception may apply.",
        {"policy_code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]$"}},
        not_found="no policy with code {policy_code}",
    ),
    lookup(
        "get_author_profile",
        "Author profile: account type, verified flag, account age, follower count, strike record id.",
        {"user_id": _usr},
        not_found="user {user_id} not found",
    ),
    lookup(
        "get_strike_record",
        "Enforcement history by strike record id: strikes with policy, points, issue and expiry dates, status.",
        {"strike_record_id": {"type": "string", "pattern": "^SR-[0-9]{6}$"}},
        not_found="strike record {strike_record_id} not found",
    ),
    lookup(
        "get_reporter_profile",
        "Profile of the user who filed a report: report accuracy, reports filed.",
        {"user_id": _usr},
        distractor=True,
        not_found="user {user_id} not found",
    ),
    lookup(
        "get_post_engagement",
        "Views, shares and comments of a post.",
        {"post_id": _pst},
        distractor=True,
        not_found="post {post_id} not found",
    ),
    lookup(
        "translate_post",
        "Machine translation of a post's excerpt.",
        {"post_id": _pst, "target_language": {"type": "string", "enum": list(LANGUAGES)}},
        distractor=True,
        not_found="post {post_id} not found",
    ),
)

FIELDS = (
    OutputField("action", enum=ACTIONS, description="Enforcement action (SOP CM-12 step 6)."),
    OutputField("policy_code", enum=("NONE",) + CODES, description="Deciding policy code, or NONE."),
    OutputField("strike_points", type="integer", description="Active strike points after the decision (step 7)."),
)
