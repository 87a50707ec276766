"""CustomerServiceTroubleshooting's vocabulary, tools and answer fields: what the agent sees.

Every tool is answered by the care systems in ``state.py``.
"""

from sopgym.sop_tasks.pack import OutputField
from sopgym.sop_tasks.toolkit import stateful

RESOLUTIONS = ("REFERRED_BILLING", "OUTAGE_LINKED", "RESOLVED_REMOTE", "ESCALATED", "NO_FAULT_FOUND")
PRIORITIES = ("P1", "P2", "P3", "P4")
TIERS = ("NONE", "TIER2", "FIELD_TECH", "NETWORK_OPS")
CATEGORIES = ("BILLING", "OUTAGE", "LINE_FAULT", "NO_FAULT")
FINDINGS = (
    "OUTAGE_CONFIRMED",
    "NO_SYNC",
    "LOW_SNR",
    "HIGH_PACKET_LOSS",
    "SPEED_BELOW_PLAN",
    "REPEAT_FAULT",
    "PORT_RESET_FAILED",
    "CARE_FLAG",
)
SYMPTOMS = ("no_connection", "slow_speed", "intermittent_drops", "wifi_issue")

_token = {"type": "string", "minLength": 1, "description": "session_token returned by authenticate"}
_service = {"type": "string", "minLength": 1, "description": "a service_id from get_account"}
_ticket = {"type": "string", "minLength": 1, "description": "a ticket_id returned by open_ticket"}
TOOLS = (
    stateful(
        "authenticate",
        "Verify a customer with the verification code from the contact. Returns a session_token.",
        {
            "customer_id": {"type": "string", "pattern": "^CUS-[0-9]{6}$"},
            "verification_code": {"type": "string", "pattern": "^[0-9]{6}$"},
        },
    ),
    stateful(
        "get_account",
        "The authenticated customer's account: segment, priority_care, account_status, "
        "region_code, balance due and services (service_id, type, technology, plan_speed_mbps).",
        {"session_token": _token},
    ),
    stateful(
        "check_outage",
        "Known network outages recorded for a region code (any status, any technology).",
        {"region_code": {"type": "string", "pattern": "^RG-[0-9]{2}$"}},
    ),
    stateful(
        "run_line_test",
        "Run a line test on a broadband service: port_state, sync, downstream_mbps, packet_loss_pct, snr_db.",
        {"session_token": _token, "service_id": _service},
    ),
    stateful(
        "reset_port",
        "Remotely reset the network port of a broadband service (only when errored).",
        {"session_token": _token, "service_id": _service},
        writes=True,
    ),
    stateful(
        "get_ticket_history",
        "Earlier tickets of a service: ticket_id, category, days_ago.",
        {"session_token": _token, "service_id": _service},
    ),
    stateful(
        "open_ticket",
        "Open a ticket for a service with a category. Returns the ticket_id.",
        {"session_token": _token, "service_id": _service, "category": {"type": "string", "enum": list(CATEGORIES)}},
        writes=True,
    ),
    stateful(
        "add_findings",
        "Attach finding codes to an open ticket (all or nothing).",
        {
            "session_token": _token,
            "ticket_id": _ticket,
            "codes": {"type": "array", "items": {"type": "string", "enum": list(FINDINGS)}, "minItems": 1},
        },
        writes=True,
    ),
    stateful(
        "get_ticket",
        "Read a ticket: status, findings, the computed priority and sla_hours, escalation tier, resolution.",
        {"session_token": _token, "ticket_id": _ticket},
    ),
    stateful(
        "escalate_ticket",
        "Escalate an open ticket that has findings to a support tier.",
        {"session_token": _token, "ticket_id": _ticket, "tier": {"type": "string", "enum": list(TIERS[1:])}},
        writes=True,
    ),
    stateful(
        "close_ticket",
        "Close an open ticket with a resolution.",
        {
            "session_token": _token,
            "ticket_id": _ticket,
            "resolution": {"type": "string", "enum": ["RESOLVED_REMOTE", "NO_FAULT_FOUND"]},
        },
        writes=True,
    ),
    stateful(
        "get_billing_summary",
        "The customer's recent invoices and whether they were paid.",
        {"session_token": _token},
        distractor=True,
    ),
    stateful(
        "list_plan_offers",
        "Broadband plan upgrade offers currently available.",
        {"session_token": _token},
        distractor=True,
    ),
    stateful(
        "update_contact_preferences",
        "Change the customer's preferred contact channel.",
        {"session_token": _token, "channel": {"type": "string", "enum": ["phone", "email", "sms", "chat"]}},
        writes=True,
        distractor=True,
    ),
)

FIELDS = (
    OutputField("resolution_status", enum=RESOLUTIONS, description="Outcome of the contact (SOP section 4)."),
    OutputField("ticket_priority", enum=PRIORITIES, description="The ticket's priority as read back from the ticket."),
    OutputField("escalation_tier", enum=TIERS, description="Tier the ticket was escalated to, or NONE."),
    OutputField("sla_hours", type="integer", description="The ticket's SLA in hours as read back from the ticket."),
)
