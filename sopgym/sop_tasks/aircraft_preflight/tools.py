"""AircraftPreflightInspection's vocabulary, tools and answer fields: what the agent sees."""

from sopgym.sop_tasks.pack import OutputField
from sopgym.sop_tasks.toolkit import lookup, stateful

DECISIONS = ("GO", "GO_WITH_DEFERRALS", "NO_GO_RESTRICTION", "NO_GO_GROUNDED")
CATEGORIES = ("B", "C", "D")
RESTRICTIONS = ("NO_ETOPS", "NO_KNOWN_ICING", "DAY_ONLY")
#: The flight condition (a ``get_flight`` field) each deferral restriction forbids (SOP step 7).
FORBIDDEN_CONDITION = {"NO_ETOPS": "etops", "NO_KNOWN_ICING": "icing_forecast", "DAY_ONLY": "night_operation"}
HOLD_REASONS = ("OVERDUE_DEFERRAL", "REPEAT_DEFECT", "NO_GO_ITEM", "RESTRICTION_CONFLICT")
FLEETS = ("A320", "B737", "E190", "ATR72")

_tail = {"type": "string", "pattern": "^[A-Z]-[A-Z]{4}$", "description": "Tail number, e.g. G-ABCD."}
_flight = {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3,4}$"}
_ata = {"type": "string", "pattern": "^[0-9]{2}-[0-9]{2}$"}
TOOLS = (
    lookup(
        "get_flight",
        "Dispatch record of a flight: assigned tail number, departure date, scheduled equipment, and the "
        "sector's operating conditions (etops, icing_forecast, night_operation).",
        {"flight_number": _flight},
        not_found="flight {flight_number} not found",
    ),
    lookup(
        "get_aircraft",
        "Master data of a tail: fleet type, MEL revision, flight hours, status board.",
        {"tail_number": _tail},
        not_found="aircraft {tail_number} not found",
    ),
    lookup(
        "get_walkaround_findings",
        "Findings written on a pre-flight inspection card: finding id, ATA code, description, kind "
        "(cosmetic, placarded, inoperative), units inoperative, placard defect id.",
        {"inspection_id": {"type": "string", "pattern": "^INS-[0-9]{6}$"}},
        not_found="inspection {inspection_id} not found",
    ),
    lookup(
        "lookup_mel_item",
        "Minimum Equipment List entry for a fleet type and ATA code: category, units installed and "
        "required for dispatch, restrictions while deferred. Fails when the MEL has no such entry.",
        {"fleet_type": {"type": "string", "enum": list(FLEETS)}, "ata_code": _ata},
        not_found="the {fleet_type} MEL has no entry for ATA {ata_code}",
    ),
    stateful(
        "record_defect",
        "Record an inoperative finding in the tail's technical log with its MEL category and restrictions. "
        "Returns the defect id and the state the log assigns (DEFERRED with a due date, or GROUNDING).",
        {
            "tail_number": _tail,
            "finding_id": {"type": "string", "pattern": "^INS-[0-9]{6}-F[0-9]+$"},
            "ata_code": _ata,
            "mel_category": {"type": "string", "enum": [*CATEGORIES, "NO_GO"]},
            "restrictions": {"type": "array", "items": {"type": "string", "enum": list(RESTRICTIONS)}, "maxItems": 3},
        },
        writes=True,
    ),
    stateful(
        "get_airworthiness_status",
        "Read the technical log of a tail: every open item with its state (DEFERRED, OVERDUE, GROUNDING), "
        "grounding reason, due date and restrictions, and any maintenance hold.",
        {"tail_number": _tail},
    ),
    stateful(
        "place_maintenance_hold",
        "Place a maintenance hold on a tail (blocks its release) with a reason code. One hold per tail.",
        {"tail_number": _tail, "reason": {"type": "string", "enum": list(HOLD_REASONS)}},
        writes=True,
    ),
    lookup(
        "get_crew_roster",
        "Flight and cabin crew assigned to a flight.",
        {"flight_number": _flight},
        distractor=True,
        not_found="no roster for flight {flight_number}",
    ),
    lookup(
        "get_station_metar",
        "Latest METAR weather observation at a station (ICAO code).",
        {"station": {"type": "string", "pattern": "^[A-Z]{4}$"}},
        distractor=True,
        not_found="no METAR for station {station}",
    ),
    lookup(
        "get_spares_stock",
        "Spare parts in stock at the station for an ATA code.",
        {"ata_code": _ata},
        distractor=True,
        not_found="no spares catalogued for ATA {ata_code}",
    ),
)

FIELDS = (
    OutputField("dispatch_decision", enum=DECISIONS, description="Dispatch decision from SOP APF-3 step 7."),
    OutputField("open_deferrals", type="integer", description="Open items in state DEFERRED after recording (step 8)."),
)
