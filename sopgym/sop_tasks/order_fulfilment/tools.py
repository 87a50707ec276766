"""OrderFulfilment's vocabulary, tools and answer fields: what the agent sees."""

from sopgym.sop_tasks.pack import OutputField
from sopgym.sop_tasks.toolkit import lookup, stateful

DECISIONS = ("SHIP_SINGLE", "SHIP_SPLIT", "PARTIAL_SHIP", "BACKORDER", "HOLD")
REGIONS = ("NORTHEAST", "SOUTHEAST", "MIDWEST", "SOUTHWEST", "WEST")
SERVICE_LEVELS = ("standard", "express")

_order_id = {"type": "string", "pattern": "^ORD-[0-9]{7}$"}
_sku = {"type": "string", "pattern": "^SKU-[0-9]{5}$"}
_fc = {"type": "string", "pattern": "^FC-[A-Z]{3}[0-9]$"}
_region = {"type": "string", "enum": list(REGIONS)}
TOOLS = (
    lookup(
        "get_order",
        "Order by id: customer id, payment id, destination region, service level, and the lines (line number, "
        "SKU, quantity, hazmat flag), plus any customer note.",
        {"order_id": _order_id},
        not_found="order {order_id} not found",
    ),
    lookup(
        "get_customer_account",
        "Customer account by id: account status and whether partial shipments are accepted.",
        {"customer_id": {"type": "string", "pattern": "^CUS-[0-9]{5}$"}},
        not_found="customer {customer_id} not found",
    ),
    lookup(
        "get_payment_authorization",
        "Payment authorisation by payment id: status (authorized, declined, pending_review) and amount.",
        {"payment_id": {"type": "string", "pattern": "^PAY-[0-9]{8}$"}},
        not_found="payment {payment_id} not found",
    ),
    lookup(
        "list_fulfilment_centres",
        "Fulfilment centres serving a destination region: rank (1 = best), transit days and hazmat certification.",
        {"region": _region},
    ),
    lookup(
        "get_carrier_rates",
        "Carrier rate card for a region and service level.",
        {"region": _region, "service_level": {"type": "string", "enum": list(SERVICE_LEVELS)}},
        distractor=True,
    ),
    lookup(
        "get_sku_promotions",
        "Active promotions for a SKU.",
        {"sku": _sku},
        distractor=True,
        not_found="no promotions recorded for {sku}",
    ),
    lookup(
        "get_fc_staffing",
        "Staffing level and pick backlog of a fulfilment centre today.",
        {"warehouse_id": _fc},
        distractor=True,
        not_found="no staffing data for {warehouse_id}",
    ),
    stateful(
        "check_availability",
        "Current stock of a SKU in every fulfilment centre that stocks it: on hand, reserved (all orders) and "
        "available. Reflects every reservation made so far.",
        {"sku": _sku},
    ),
    stateful(
        "reserve_stock",
        "Reserve units of one order line at one fulfilment centre. Fails, reserving nothing, if the quantity "
        "exceeds what is available there or what the line still needs. Returns the reservation id.",
        {
            "order_id": _order_id,
            "line_no": {"type": "integer", "minimum": 1, "maximum": 20},
            "warehouse_id": _fc,
            "quantity": {"type": "integer", "minimum": 1, "maximum": 1000},
        },
        writes=True,
    ),
    stateful(
        "release_reservation",
        "Release an active reservation by id (its units become available again).",
        {"reservation_id": {"type": "string", "pattern": "^RSV-[0-9]{6}$"}},
        writes=True,
    ),
    stateful(
        "get_order_reservations",
        "Reservation summary of an order: active reservations, reserved quantity per line, number of shipments "
        "(distinct fulfilment centres) and order status.",
        {"order_id": _order_id},
    ),
    stateful(
        "set_order_status",
        "Record the order's fulfilment status (once).",
        {"order_id": _order_id, "status": {"type": "string", "enum": list(DECISIONS)}},
        writes=True,
    ),
)

FIELDS = (
    OutputField("decision", enum=DECISIONS, description="The fulfilment status recorded on the order."),
    OutputField("num_shipments", type="integer", description="Distinct fulfilment centres holding the order's reservations."),
)
