"""SellerEmailTriage's vocabulary, tools and answer fields: what the agent sees."""

from sopgym.sop_tasks.pack import OutputField
from sopgym.sop_tasks.toolkit import lookup

QUEUES = ("SELLER_PAYMENTS", "CATALOG_LISTINGS", "ORDER_SUPPORT", "ACCOUNT_HEALTH", "TRUST_SAFETY",
          "LEGAL_ESCALATIONS", "GENERAL_INBOX")
PRIORITIES = ("P1", "P2", "P3", "P4")
MAILBOXES = ("seller-support-na@market.example", "seller-support-eu@market.example", "seller-support-apac@market.example")
#: The SOP's legal terms (section 1): any of them in the subject or body is a legal escalation.
LEGAL_TERMS = ("lawyer", "attorney", "legal action", "lawsuit", "litigation")

_seller_id = {"type": "string", "pattern": "^SLR-[A-Z0-9]{8}$"}
TOOLS = (
    lookup(
        "get_email",
        "Inbound email by id: sender address, receiving mailbox, subject, body, contact-form topic, quoted "
        "order ids and a model-suggested queue.",
        {"email_id": {"type": "string", "pattern": "^EM-[0-9]{8}$"}},
        not_found="email {email_id} not found",
    ),
    lookup(
        "lookup_seller_by_email",
        "Seller directory: the seller id registered under an email address.",
        {"email_address": {"type": "string", "pattern": "^[^@\\s]+@[^@\\s]+$"}},
        not_found="no seller is registered under {email_address}",
    ),
    lookup(
        "get_seller_account",
        "Seller account by seller id: status (active, at_risk, suspended), tier (standard, professional, "
        "strategic), marketplace and registration date.",
        {"seller_id": _seller_id},
        not_found="seller {seller_id} not found",
    ),
    lookup(
        "get_seller_metrics",
        "Seller performance metrics by seller id: order defect rate, late shipment rate, cancellation rate "
        "(percent, last 60 days).",
        {"seller_id": _seller_id},
        not_found="no metrics for seller {seller_id}",
    ),
    lookup(
        "get_order",
        "Order by order id: owning seller id, status, order total and currency, and whether a buyer dispute is open.",
        {"order_id": {"type": "string", "pattern": "^[0-9]{3}-[0-9]{7}-[0-9]{7}$"}},
        not_found="order {order_id} not found",
    ),
    lookup(
        "get_routing_table",
        "Routing table of a seller-support mailbox: one row per topic with queue and base priority.",
        {"mailbox": {"type": "string", "enum": list(MAILBOXES)}},
    ),
    lookup(
        "get_listing_count",
        "Number of active listings of a seller.",
        {"seller_id": _seller_id},
        distractor=True,
        not_found="seller {seller_id} not found",
    ),
    lookup(
        "translate_text",
        "Machine-translate a text to English.",
        {"text": {"type": "string", "minLength": 1, "maxLength": 4000}},
        distractor=True,
        not_found="translation service has no result for this text",
    ),
    lookup(
        "get_holiday_calendar",
        "Public holidays of a country (ISO code) this month.",
        {"country": {"type": "string", "pattern": "^[A-Z]{2}$"}},
        distractor=True,
        not_found="no holiday calendar for {country}",
    ),
)

FIELDS = (
    OutputField("queue", enum=QUEUES, description="The work queue the email is routed to."),
    OutputField("priority", enum=PRIORITIES, description="The priority of the routed email."),
)
