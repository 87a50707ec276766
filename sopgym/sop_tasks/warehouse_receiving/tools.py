"""WarehouseReceiving's vocabulary, tools and answer fields: what the agent sees."""

from sopgym.sop_tasks.pack import OutputField
from sopgym.sop_tasks.toolkit import lookup

DISPOSITIONS = ("ACCEPT", "ACCEPT_WITH_NOTE", "PARTIAL_REJECT", "QUARANTINE", "REJECT")
REASONS = (
    "NONE", "NO_APPOINTMENT", "PO_INVALID", "SEAL_MISMATCH", "TEMP_REVIEW", "TEMP_EXCURSION", "WEIGHT_VARIANCE",
    "DAMAGE", "COUNT_DISCREPANCY", "SUPPLIER_WATCH",
)
ZONES = ("A", "B", "C", "COLD-1", "COLD-2")

_shipment = {"type": "string", "pattern": "^SHP-[0-9]{6}$"}
_date = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"}
TOOLS = (
    lookup(
        "get_dock_appointment",
        "The appointment booked at a dock door on a date (YYYY-MM-DD): appointment id, shipment id, time window.",
        {"dock_door": {"type": "string", "pattern": "^D[0-9]{2}$"}, "date": _date},
        not_found="no appointment at dock door {dock_door} on {date}",
    ),
    lookup(
        "get_shipment",
        "Shipment record (advance ship notice) for a shipment id: PO number, supplier id, carrier id, "
        "declared seal number, temperature class and the carrier's declared pallets and weight.",
        {"shipment_id": _shipment},
        not_found="shipment {shipment_id} not found",
    ),
    lookup(
        "get_purchase_order",
        "Purchase order by PO number: status, expected pallets, expected weight (kg) and weight tolerance (%).",
        {"po_number": {"type": "string", "pattern": "^PO-[0-9]{6}$"}},
        not_found="purchase order {po_number} not found",
    ),
    lookup(
        "get_dock_scan",
        "What the dock team measured for a shipment: counted pallets, measured weight (kg), seal intact, "
        "seal number read, damaged pallets, product temperature (degrees C, null when not probed).",
        {"shipment_id": _shipment},
        not_found="no dock scan recorded for shipment {shipment_id}",
    ),
    lookup(
        "get_supplier_profile",
        "Supplier profile: tier (preferred, standard, probation) and number of open quality holds.",
        {"supplier_id": {"type": "string", "pattern": "^SUP-[0-9]{4}$"}},
        not_found="supplier {supplier_id} not found",
    ),
    lookup(
        "get_carrier_rating",
        "On-time rating and claims ratio of a carrier.",
        {"carrier_id": {"type": "string", "minLength": 1}},
        distractor=True,
        not_found="carrier {carrier_id} not found",
    ),
    lookup(
        "get_storage_capacity",
        "Free pallet positions in a storage zone.",
        {"zone": {"type": "string", "enum": list(ZONES)}},
        distractor=True,
    ),
    lookup(
        "get_yard_weather",
        "Yard weather observation for a date (YYYY-MM-DD).",
        {"date": _date},
        distractor=True,
        not_found="no weather observation for {date}",
    ),
)

FIELDS = (
    OutputField("disposition", enum=DISPOSITIONS, description="Final disposition of the shipment."),
    OutputField("reason_code", enum=REASONS, description="The SOP reason code that decided the disposition."),
    OutputField("accepted_pallets", type="integer", description="Pallets that enter stock (SOP section 4)."),
)
