"""AdTrafficSpoofing's vocabulary, tools and answer fields: what the agent sees."""

from sopgym.sop_tasks.pack import OutputField
from sopgym.sop_tasks.toolkit import CodeTools, lookup, sql_tool

ACTIONS = ("TERMINATE", "SUSPEND", "WITHHOLD_PAYMENT", "WARN", "NO_ACTION")
DEVICES = ("desktop", "mobile", "tablet", "ctv")

RUN_SQL = sql_tool(
    "Run one read-only SQLite query against this case's impression/click logs (tables impressions, clicks, "
    "ip_ranges). Returns the result rows as a JSON list of lists. Writes fail.",
    timeout_s=5.0,
    max_chars=6000,
)
#: The pack's verifiable handler (``run_sql`` through the episode's code runner).
VERIFIABLE = CodeTools(RUN_SQL)

_pub = {"type": "string", "pattern": "^PUB-[0-9]{5}$"}
TOOLS = (
    lookup(
        "get_review_case",
        "IVT review case by case id: publisher id, contract id, partner, review window (Unix seconds, end exclusive) "
        "and the partner's own reported IVT figure.",
        {"case_id": {"type": "string", "pattern": "^IVT-[0-9]{6}$"}},
        not_found="review case {case_id} not found",
    ),
    lookup(
        "get_partner_contract",
        "Demand-partner contract by contract id: IVT thresholds, burst and latency limits, CTR ceilings per device type.",
        {"contract_id": {"type": "string", "pattern": "^AGR-[0-9]{4}$"}},
        not_found="contract {contract_id} not found",
    ),
    lookup(
        "get_publisher_profile",
        "Publisher profile: name, tier, sign-up date and the id of its declared IP allow-list (or null).",
        {"publisher_id": _pub},
        not_found="publisher {publisher_id} not found",
    ),
    lookup(
        "get_ip_allowlist",
        "A publisher's declared IP allow-list by allow-list id: the ip_ranges range ids it declares as its own proxies.",
        {"allowlist_id": {"type": "string", "pattern": "^ALW-[0-9]{5}$"}},
        not_found="allow-list {allowlist_id} not found",
    ),
    lookup(
        "get_enforcement_history",
        "Past enforcement actions against a publisher: date (YYYY-MM-DD), action and case id.",
        {"publisher_id": _pub},
        not_found="publisher {publisher_id} not found",
    ),
    RUN_SQL.spec,
    lookup(
        "get_payout_statement",
        "A publisher's payout statement for a month (YYYY-MM).",
        {"publisher_id": _pub, "month": {"type": "string", "pattern": r"^\d{4}-\d{2}$"}},
        distractor=True,
        not_found="no payout statement for {publisher_id} in {month}",
    ),
    lookup(
        "get_creative_review",
        "Creative approval record by creative id.",
        {"creative_id": {"type": "string", "pattern": "^CRV-[0-9]{6}$"}},
        distractor=True,
        not_found="creative {creative_id} not found",
    ),
    lookup(
        "get_geo_report",
        "Share of a publisher's impressions by country over the last 30 days.",
        {"publisher_id": _pub},
        distractor=True,
        not_found="no geo report for {publisher_id}",
    ),
)

FIELDS = (
    OutputField("enforcement_action", enum=ACTIONS, description="Enforcement action decided by the SOP."),
    OutputField(
        "ivt_rate_pct", type="number", description="IVT rate in percent, rounded half up to one decimal place."
    ),
)
