"""ReferralAbuseEnforcement's vocabulary, tools and answer fields: what the agent sees."""

from sopgym.sop_tasks.pack import OutputField
from sopgym.sop_tasks.toolkit import lookup

ACTIONS = ("NO_ACTION", "WARN", "SUSPEND_REFERRALS", "CLAWBACK", "BAN")
MARKETS = ("US", "GB", "DE", "BR", "IN")

_by_account = {"account_id": {"type": "string", "pattern": "^ACC-[0-9]{7}$"}}
_no_record = "no record for account {account_id}"
TOOLS = (
    lookup(
        "get_account_profile",
        "Profile of an account: status, created_days_ago, kyc_status, market, program_tier, prior_enforcements.",
        _by_account,
        not_found="account {account_id} not found",
    ),
    lookup(
        "get_referral_activity",
        "Accounts referred by an account: referred_account_id, signup_days_ago, converted.",
        _by_account,
        not_found="no referral activity recorded for account {account_id}",
    ),
    lookup(
        "get_device_links",
        "Devices an account used and every account id seen on each device (linked_account_ids).",
        _by_account,
        not_found=_no_record,
    ),
    lookup(
        "get_payment_links",
        "Payment instruments of an account and every account id that used each instrument (linked_account_ids).",
        _by_account,
        not_found=_no_record,
    ),
    lookup(
        "get_payout_history",
        "Referral payouts of an account: payout_id, amount_cents, days_ago, status (paid, pending, reversed).",
        _by_account,
        not_found=_no_record,
    ),
    lookup(
        "get_market_rules",
        "Current referral-abuse thresholds of a market: velocity_limit, min_account_age_days, payout_cap_cents.",
        {"market": {"type": "string", "enum": list(MARKETS)}},
        not_found="no rules for market {market}",
    ),
    lookup(
        "get_program_terms",
        "General terms of the referral programme (bonus amounts, eligibility wording).",
        {},
        distractor=True,
    ),
    lookup(
        "get_support_tickets",
        "Support tickets the account holder opened.",
        _by_account,
        distractor=True,
        not_found=_no_record,
    ),
    lookup(
        "get_login_history",
        "Recent logins of an account with their IP country.",
        _by_account,
        distractor=True,
        not_found=_no_record,
    ),
)

FIELDS = (
    OutputField("enforcement_action", enum=ACTIONS, description="The enforcement action after the SOP's exceptions."),
    OutputField("risk_score", type="integer", description="The risk score computed by SOP step 7."),
    OutputField("self_referral_count", type="integer", description="Referred accounts that are also linked accounts."),
)
