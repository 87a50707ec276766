"""DangerousGoodsClassification's vocabulary, tools and answer fields: what the agent sees."""

from sopgym.sop_tasks.pack import OutputField
from sopgym.sop_tasks.toolkit import lookup

DECISIONS = (
    "ACCEPT",
    "CARGO_AIRCRAFT_ONLY",
    "REJECT_FORBIDDEN",
    "REJECT_PACKAGING",
    "REJECT_QUANTITY",
    "REJECT_SEGREGATION",
)
CLASSES = ("1.3G", "2.1", "2.2", "3", "4.3", "5.1", "6.1", "8", "9")

_un = {"type": "string", "pattern": "^UN[0-9]{4}$"}
_cls = {"type": "string", "enum": list(CLASSES)}
TOOLS = (
    lookup(
        "get_consignment",
        "Shipper's declaration: packages (package id, UN number, net quantity and unit, packaging code, gross "
        "weight, shipper's declared class), aircraft type booked, shipper id, flight.",
        {"consignment_id": {"type": "string", "pattern": "^DG-[0-9]{7}$"}},
        not_found="consignment {consignment_id} not found",
    ),
    lookup(
        "lookup_un_number",
        "UN record: proper shipping name, primary class, subsidiary risk, packing group, forbidden flag, "
        "passenger-aircraft and cargo-aircraft packing instruction ids.",
        {"un_number": _un},
        not_found="no entry for {un_number} in the dangerous goods list",
    ),
    lookup(
        "get_packing_instruction",
        "Packing instruction by id (e.g. P353, C364): maximum net quantity per package and unit, allowed packaging codes.",
        {"pi_id": {"type": "string", "pattern": "^[PC][0-9]{3}$"}},
        not_found="packing instruction {pi_id} not found",
    ),
    lookup(
        "get_segregation_rule",
        "Segregation rule between two hazard classes: compatible, separate or incompatible.",
        {"class_a": _cls, "class_b": _cls},
        not_found="no segregation entry for classes {class_a} and {class_b}",
    ),
    lookup(
        "get_shipper_profile",
        "Shipper's account: known-shipper status, dangerous-goods training certificate expiry.",
        {"shipper_id": {"type": "string", "pattern": "^SHP-[0-9]{5}$"}},
        distractor=True,
        not_found="shipper {shipper_id} not found",
    ),
    lookup(
        "get_flight_load_plan",
        "Load plan of a flight: aircraft registration, positions, planned dangerous-goods load (kg).",
        {"flight_number": {"type": "string", "pattern": "^[A-Z0-9]{2}[0-9]{3,4}$"}},
        distractor=True,
        not_found="no load plan for flight {flight_number}",
    ),
    lookup(
        "get_emergency_response_code",
        "Emergency response drill code for a UN number (for the NOTOC, not for acceptance).",
        {"un_number": _un},
        distractor=True,
        not_found="no emergency response code for {un_number}",
    ),
)

FIELDS = (
    OutputField("decision", enum=DECISIONS, description="Acceptance decision (SOP DG-5)."),
    OutputField(
        "non_compliant_packages", type="integer", description="Count from the deciding step (0 when accepted)."
    ),
)
