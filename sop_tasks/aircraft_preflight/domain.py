"""AircraftPreflightInspection: walkaround findings into the technical log, then dispatch (SOP APF-3).

Tiers: replay (flight, aircraft, findings, MEL) and stateful (the technical log in ``state.py``:
``record_defect`` writes, ``get_airworthiness_status`` reads back, ``place_maintenance_hold`` writes).
The answer needs state the agent can only see by reading the log back: earlier deferrals, their
restrictions and due dates, and the log's repeat-defect verdicts on the defects just recorded.
``expected_state`` checks the defects recorded (category, restrictions) and the hold placed.

The generator builds a scenario around a target decision (balanced over the four decisions on
val/test), labels it with its own decision table (``_label``) and rejects scenarios whose label
misses the target. The reference solver (``solve``) follows the SOP text through the tools and
never calls ``_label``.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from sopgym.sandboxes import StatefulProgram, Tier, ToolSpec, canonical_args
from sopgym.sop_tasks.pack import DomainPack, OutputField, ToolCall, ToolError, read_text

DECISIONS = ("GO", "GO_WITH_DEFERRALS", "NO_GO_RESTRICTION", "NO_GO_GROUNDED")
CATEGORIES = ("B", "C", "D")
INTERVAL = {"B": 3, "C": 10, "D": 120}
RESTRICTIONS = ("NO_ETOPS", "NO_KNOWN_ICING", "DAY_ONLY")
#: Which flight condition each restriction forbids.
_CONDITION = {"NO_ETOPS": "etops", "NO_KNOWN_ICING": "icing_forecast", "DAY_ONLY": "night_operation"}
HOLD_REASONS = ("OVERDUE_DEFERRAL", "REPEAT_DEFECT", "NO_GO_ITEM", "RESTRICTION_CONFLICT")
FLEETS = ("A320", "B737", "E190", "ATR72")

#: (ATA code, title, units installed, units required, restrictions while deferred)
CATALOGUE = (
    ("21-51", "Air conditioning pack", 2, 1, ()),
    ("21-61", "Zone temperature controller", 2, 1, ()),
    ("23-31", "Passenger address amplifier", 2, 1, ()),
    ("25-31", "Galley oven", 4, 0, ()),
    ("26-17", "Cargo smoke detector loop", 2, 1, ("NO_ETOPS",)),
    ("28-22", "Fuel crossfeed valve position indicator", 1, 0, ("NO_ETOPS",)),
    ("30-31", "Probe heat monitor", 3, 2, ("NO_KNOWN_ICING",)),
    ("30-41", "Windshield heat controller", 2, 1, ("NO_KNOWN_ICING",)),
    ("30-11", "Wing anti-ice valve position switch", 2, 1, ("NO_KNOWN_ICING", "NO_ETOPS")),
    ("33-41", "Navigation light", 4, 2, ("DAY_ONLY",)),
    ("33-44", "Runway turnoff light", 2, 0, ("DAY_ONLY",)),
    ("33-42", "Logo light", 2, 0, ()),
    ("35-21", "Portable oxygen bottle", 6, 4, ()),
    ("38-31", "Lavatory water heater", 3, 0, ()),
    ("49-11", "APU generator", 1, 0, ("NO_ETOPS",)),
)
#: Items no fleet's MEL lists (never deferrable).
NON_MEL = (
    ("32-31", "Main gear retraction actuator"),
    ("27-51", "Flap drive unit"),
    ("29-11", "Engine-driven hydraulic pump"),
    ("71-13", "Engine cowl latch"),
    ("24-21", "Integrated drive generator"),
)
#: Catalogue items a fleet's MEL does not list (so the fleet type matters).
FLEET_EXCLUDED = {"A320": ("38-31",), "B737": ("33-44", "23-31"), "E190": ("21-61",), "ATR72": ("49-11", "26-17")}
COSMETIC = (
    ("51-00", "Paint chipped on radome"),
    ("11-00", "Exit placard worn"),
    ("52-10", "Door seal scuffed"),
    ("56-00", "Cabin window scratched (outer pane, within limits)"),
    ("53-00", "Belly fairing panel dirty"),
)
STATIONS = ("EGLL", "EHAM", "LFPG", "EDDF", "LEMD", "EIDW", "LIRF")

_tail = {"type": "string", "pattern": "^[A-Z]-[A-Z]{4}$", "description": "Tail number, e.g. G-ABCD."}
TOOLS = (
    ToolSpec(
        "get_flight",
        "Dispatch record of a flight: assigned tail number, departure date, scheduled equipment, and the "
        "sector's operating conditions (etops, icing_forecast, night_operation).",
        {
            "type": "object",
            "properties": {"flight_number": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3,4}$"}},
            "required": ["flight_number"],
            "additionalProperties": False,
        },
        not_found="flight {flight_number} not found",
    ),
    ToolSpec(
        "get_aircraft",
        "Master data of a tail: fleet type, MEL revision, flight hours, status board.",
        {
            "type": "object",
            "properties": {"tail_number": _tail},
            "required": ["tail_number"],
            "additionalProperties": False,
        },
        not_found="aircraft {tail_number} not found",
    ),
    ToolSpec(
        "get_walkaround_findings",
        "Findings written on a pre-flight inspection card: finding id, ATA code, description, kind "
        "(cosmetic, placarded, inoperative), units inoperative, placard defect id.",
        {
            "type": "object",
            "properties": {"inspection_id": {"type": "string", "pattern": "^INS-[0-9]{6}$"}},
            "required": ["inspection_id"],
            "additionalProperties": False,
        },
        not_found="inspection {inspection_id} not found",
    ),
    ToolSpec(
        "lookup_mel_item",
        "Minimum Equipment List entry for a fleet type and ATA code: category, units installed and "
        "required for dispatch, restrictions while deferred. Fails when the MEL has no such entry.",
        {
            "type": "object",
            "properties": {
                "fleet_type": {"type": "string", "enum": list(FLEETS)},
                "ata_code": {"type": "string", "pattern": "^[0-9]{2}-[0-9]{2}$"},
            },
            "required": ["fleet_type", "ata_code"],
            "additionalProperties": False,
        },
        not_found="the {fleet_type} MEL has no entry for ATA {ata_code}",
    ),
    ToolSpec(
        "record_defect",
        "Record an inoperative finding in the tail's technical log with its MEL category and restrictions. "
        "Returns the defect id and the state the log assigns (DEFERRED with a due date, or GROUNDING).",
        {
            "type": "object",
            "properties": {
                "tail_number": _tail,
                "finding_id": {"type": "string", "pattern": "^INS-[0-9]{6}-F[0-9]+$"},
                "ata_code": {"type": "string", "pattern": "^[0-9]{2}-[0-9]{2}$"},
                "mel_category": {"type": "string", "enum": ["B", "C", "D", "NO_GO"]},
                "restrictions": {
                    "type": "array",
                    "items": {"type": "string", "enum": list(RESTRICTIONS)},
                    "maxItems": 3,
                },
            },
            "required": ["tail_number", "finding_id", "ata_code", "mel_category", "restrictions"],
            "additionalProperties": False,
        },
        tier=Tier.STATEFUL,
        writes=True,
    ),
    ToolSpec(
        "get_airworthiness_status",
        "Read the technical log of a tail: every open item with its state (DEFERRED, OVERDUE, GROUNDING), "
        "grounding reason, due date and restrictions, and any maintenance hold.",
        {
            "type": "object",
            "properties": {"tail_number": _tail},
            "required": ["tail_number"],
            "additionalProperties": False,
        },
        tier=Tier.STATEFUL,
    ),
    ToolSpec(
        "place_maintenance_hold",
        "Place a maintenance hold on a tail (blocks its release) with a reason code. One hold per tail.",
        {
            "type": "object",
            "properties": {"tail_number": _tail, "reason": {"type": "string", "enum": list(HOLD_REASONS)}},
            "required": ["tail_number", "reason"],
            "additionalProperties": False,
        },
        tier=Tier.STATEFUL,
        writes=True,
    ),
    ToolSpec(
        "get_crew_roster",
        "Flight and cabin crew assigned to a flight.",
        {
            "type": "object",
            "properties": {"flight_number": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3,4}$"}},
            "required": ["flight_number"],
            "additionalProperties": False,
        },
        distractor=True,
        not_found="no roster for flight {flight_number}",
    ),
    ToolSpec(
        "get_station_metar",
        "Latest METAR weather observation at a station (ICAO code).",
        {
            "type": "object",
            "properties": {"station": {"type": "string", "pattern": "^[A-Z]{4}$"}},
            "required": ["station"],
            "additionalProperties": False,
        },
        distractor=True,
        not_found="no METAR for station {station}",
    ),
    ToolSpec(
        "get_spares_stock",
        "Spare parts in stock at the station for an ATA code.",
        {
            "type": "object",
            "properties": {"ata_code": {"type": "string", "pattern": "^[0-9]{2}-[0-9]{2}$"}},
            "required": ["ata_code"],
            "additionalProperties": False,
        },
        distractor=True,
        not_found="no spares catalogued for ATA {ata_code}",
    ),
)

FIELDS = (
    OutputField("dispatch_decision", enum=DECISIONS, description="Dispatch decision from SOP APF-3 step 7."),
    OutputField("open_deferrals", type="integer", description="Open items in state DEFERRED after recording (step 8)."),
)


# ---------------------------------------------------------------------------------------------
# Generator: a scenario built around a target decision, labelled by a decision table.
# ---------------------------------------------------------------------------------------------
def _iso(d: dt.date) -> str:
    return d.isoformat()


def _label(s: dict[str, Any]) -> tuple[str, int, list, list]:
    """(decision, open deferrals, expected recorded defects, expected holds) from the scenario facts."""
    today = s["today"]
    deferred_restr: list[tuple[str, ...]] = []
    overdue = repeat = no_go = False
    for row in s["history"]:
        if row["state"] == "DEFERRED":
            if row["due_on"] < today:
                overdue = True
            else:
                deferred_restr.append(tuple(row["restrictions"]))
    recorded = []
    for f in s["findings"]:
        if f["kind"] != "inoperative":
            continue
        entry = s["mel"].get(f["ata_code"])
        if entry is None or entry["installed"] - f["units_inoperative"] < entry["required"]:
            cat, restr, state = "NO_GO", [], "GROUNDING"
            no_go = True
        else:
            cat, restr = entry["category"], sorted(entry["restrictions"])
            window = [
                r
                for r in s["history"]
                if r["ata_code"] == f["ata_code"] and today - dt.timedelta(days=30) <= r["raised_on"] <= today
            ]
            if len(window) >= 2:
                state, repeat = "GROUNDING", True
            else:
                state = "DEFERRED"
                deferred_restr.append(tuple(restr))
        recorded.append([f["finding_id"], f["ata_code"], cat, restr, state])
    recorded.sort(key=lambda r: r[0])
    tail = s["tail"]
    if overdue or repeat or no_go:
        reason = "OVERDUE_DEFERRAL" if overdue else ("REPEAT_DEFECT" if repeat else "NO_GO_ITEM")
        return "NO_GO_GROUNDED", len(deferred_restr), recorded, [[tail, reason]]
    active = {r for rs in deferred_restr for r in rs}
    if any(s["conditions"][_CONDITION[r]] for r in active):
        return "NO_GO_RESTRICTION", len(deferred_restr), recorded, [[tail, "RESTRICTION_CONFLICT"]]
    if deferred_restr:
        return "GO_WITH_DEFERRALS", len(deferred_restr), recorded, []
    return "GO", 0, recorded, []


def _mel_items(fleet: str) -> list[tuple]:
    return [c for c in CATALOGUE if c[0] not in FLEET_EXCLUDED[fleet]]


def _scenario(rng: random.Random, target: str) -> dict[str, Any]:
    fleet = rng.choice(FLEETS)
    today = dt.date(2026, 1, 1) + dt.timedelta(days=rng.randint(0, 364))
    conditions = {c: rng.random() < 0.4 for c in ("etops", "icing_forecast", "night_operation")}
    items = _mel_items(fleet)
    # Modes of the inoperative findings and of the earlier open deferrals, by target.
    inop_modes: list[str] = []
    open_modes: list[str] = []
    if target == "GO_WITH_DEFERRALS":
        inop_modes = ["ok"] * rng.randint(0, 2)
        open_modes = ["ok"] * rng.randint(0 if inop_modes else 1, 2)
    elif target == "NO_GO_RESTRICTION":
        where = rng.choice(("new", "new", "open"))
        inop_modes = ["ok"] * rng.randint(0, 1) + (["conflict"] if where == "new" else [])
        open_modes = ["ok"] * rng.randint(0, 1) + (["conflict"] if where == "open" else [])
    elif target == "NO_GO_GROUNDED":
        cause = rng.choice(("not_in_mel", "units", "repeat", "overdue", "not_in_mel_other_fleet"))
        inop_modes = ["ok"] * rng.randint(0, 1) + ([cause] if cause != "overdue" else [])
        open_modes = ["ok"] * rng.randint(0, 1) + (["overdue"] if cause == "overdue" else [])
        if rng.random() < 0.2:  # a second, independent cause (hold-reason precedence)
            inop_modes.append(rng.choice(("not_in_mel", "repeat", "units", "conflict")))
    rng.shuffle(inop_modes)

    # Conflicts decide flight conditions first; other items then avoid conflicting restrictions.
    used: set[str] = set()

    def pick(pred) -> tuple:
        choices = [c for c in items if c[0] not in used and pred(c)]
        c = rng.choice(choices)
        used.add(c[0])
        return c

    def fits(c: tuple) -> bool:
        return not any(conditions[_CONDITION[r]] for r in c[4])

    conflict_items = {}
    for i, m in enumerate(inop_modes + open_modes):
        if m == "conflict":
            c = pick(lambda c: bool(c[4]))
            conditions[_CONDITION[rng.choice(c[4])]] = True
            conflict_items[i] = c

    mel: dict[str, dict[str, Any]] = {}
    findings: list[dict[str, Any]] = []
    history: list[dict[str, Any]] = []

    def mel_entry(c: tuple) -> dict[str, Any]:
        return {
            "category": rng.choice(CATEGORIES),
            "installed": c[2],
            "required": c[3],
            "restrictions": list(c[4]),
            "title": c[1],
        }

    def history_row(
        ata: str, raised: dt.date, state: str, category: str = "C", restrictions=(), due=None
    ) -> dict[str, Any]:
        return {
            "ata_code": ata,
            "raised_on": raised,
            "state": state,
            "category": category,
            "restrictions": sorted(restrictions),
            "due_on": due,
        }

    for i, m in enumerate(inop_modes):
        if m in ("not_in_mel", "not_in_mel_other_fleet"):
            if m == "not_in_mel_other_fleet" and FLEET_EXCLUDED[fleet][0] not in used:
                ata = FLEET_EXCLUDED[fleet][0]
                title = next(c[1] for c in CATALOGUE if c[0] == ata)
                used.add(ata)
            else:
                ata, title = rng.choice([n for n in NON_MEL if n[0] not in used])
                used.add(ata)
            findings.append(
                {"ata_code": ata, "description": f"{title} inoperative", "kind": "inoperative", "units_inoperative": 1}
            )
            continue
        if m == "units":
            c = pick(lambda c: c[3] >= 1)
            units = rng.randint(c[2] - c[3] + 1, c[2])
        else:
            c = conflict_items[i] if m == "conflict" else pick(fits)
            spare = c[2] - c[3]
            units = rng.choice((spare, rng.randint(1, spare)))  # often exactly at the limit
        mel[c[0]] = mel_entry(c)
        findings.append(
            {"ata_code": c[0], "description": f"{c[1]} inoperative", "kind": "inoperative", "units_inoperative": units}
        )
        if m == "repeat":
            for _ in range(rng.choice((2, 2, 3))):
                history.append(history_row(c[0], today - dt.timedelta(days=rng.randint(1, 30)), "CLOSED"))
        elif rng.random() < 0.35:  # near miss: only one raise inside the 30-day window
            history.append(history_row(c[0], today - dt.timedelta(days=rng.randint(1, 30)), "CLOSED"))
            history.append(history_row(c[0], today - dt.timedelta(days=rng.randint(31, 60)), "CLOSED"))

    for j, m in enumerate(open_modes):
        c = conflict_items[len(inop_modes) + j] if m == "conflict" else pick(fits)
        cat = rng.choice(CATEGORIES)
        if m == "overdue":
            ago = INTERVAL[cat] + rng.randint(1, 5)
        else:
            ago = rng.choice((INTERVAL[cat], rng.randint(1, INTERVAL[cat])))  # due today is still valid
        raised = today - dt.timedelta(days=ago)
        row = history_row(c[0], raised, "DEFERRED", cat, c[4], raised + dt.timedelta(days=INTERVAL[cat]))
        history.append(row)
        if rng.random() < 0.6:
            findings.append(
                {
                    "ata_code": c[0],
                    "description": f"{c[1]} inoperative, placard fitted",
                    "kind": "placarded",
                    "units_inoperative": 1,
                    "placard_row": row,
                }
            )

    # Closed history on other items (noise) and cosmetic findings.
    for _ in range(rng.randint(0, 3)):
        free = [c for c in CATALOGUE if c[0] not in used]
        c = rng.choice(free)
        history.append(history_row(c[0], today - dt.timedelta(days=rng.randint(3, 200)), "CLOSED"))
    for ata, text in rng.sample(COSMETIC, rng.randint(0, 2)):
        findings.append({"ata_code": ata, "description": text, "kind": "cosmetic", "units_inoperative": 0})
    rng.shuffle(findings)
    return {
        "fleet": fleet,
        "today": today,
        "conditions": conditions,
        "mel": mel,
        "findings": findings,
        "history": history,
        "inop_modes": inop_modes,
        "open_modes": open_modes,
    }


def _difficulty(s: dict[str, Any], decision: str) -> str:
    modes = set(s["inop_modes"]) | set(s["open_modes"])
    if modes & {"repeat", "overdue", "units", "not_in_mel_other_fleet"} or (
        decision == "NO_GO_RESTRICTION" and "conflict" in s["open_modes"]
    ):
        return "hard"
    if decision == "GO" or len(s["inop_modes"]) + len(s["open_modes"]) <= 1:
        return "easy"
    return "medium"


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = DECISIONS[index % len(DECISIONS)] if split != "train" else rng.choice(DECISIONS)
    for _ in range(100):
        s = _scenario(rng, target)
        tail = f"{rng.choice('GDFE')}-{''.join(rng.choice('ABCDEFGHJKLMNPRSTUVWXYZ') for _ in range(4))}"
        s["tail"] = tail
        inspection_id = f"INS-{rng.randint(0, 999999):06d}"
        for k, f in enumerate(s["findings"], start=1):
            f["finding_id"] = f"{inspection_id}-F{k}"
        decision, open_deferrals, recorded, holds = _label(s)
        if decision == target:
            break
    else:  # pragma: no cover - the scenario builder always reaches its target within a few tries
        raise RuntimeError(f"could not build an AircraftPreflightInspection scenario for {target}")

    today = s["today"]
    flight_number = f"{rng.choice(('BA', 'KL', 'AF', 'LH', 'IB', 'EI', 'AZ'))}{rng.randint(100, 9999)}"
    station = rng.choice(STATIONS)
    equipment = s["fleet"] if rng.random() < 0.7 else rng.choice([f for f in FLEETS if f != s["fleet"]])

    # Technical-log rows (initial state). Ids are unique; the log numbers new defects after them.
    rows = []
    for n, h in enumerate(sorted(s["history"], key=lambda r: (r["raised_on"], r["ata_code"])), start=1):
        h["defect_id"] = f"TL-{rng.randint(10, 99)}{n:03d}"
        rows.append(
            {
                "defect_id": h["defect_id"],
                "tail_number": tail,
                "finding_id": f"INS-{rng.randint(0, 999999):06d}-F{rng.randint(1, 4)}",
                "ata_code": h["ata_code"],
                "category": h["category"],
                "restrictions": _json_list(h["restrictions"]),
                "raised_on": _iso(h["raised_on"]),
                "due_on": _iso(h["due_on"]) if h["due_on"] else None,
                "state": h["state"],
                "grounding_reason": None,
            }
        )
    card = []
    for f in s["findings"]:
        entry = {
            "finding_id": f["finding_id"],
            "ata_code": f["ata_code"],
            "description": f["description"],
            "kind": f["kind"],
            "units_inoperative": f["units_inoperative"],
            "placard_defect_id": None,
        }
        if f["kind"] == "placarded":
            entry["placard_defect_id"] = f["placard_row"]["defect_id"]
        card.append(entry)

    mel_replay = {}
    for ata, e in s["mel"].items():
        mel_replay[canonical_args({"fleet_type": s["fleet"], "ata_code": ata})] = {
            "fleet_type": s["fleet"],
            "ata_code": ata,
            "title": e["title"],
            "category": e["category"],
            "installed": e["installed"],
            "required": e["required"],
            "restrictions": e["restrictions"],
            "remarks": "Repair within the category interval." if e["restrictions"] else "No operational restriction.",
        }
    for f in s["findings"]:  # placarded items are listed too (an agent may look them up; harmless)
        if f["kind"] == "placarded":
            row = f["placard_row"]
            c = next(c for c in CATALOGUE if c[0] == row["ata_code"])
            mel_replay.setdefault(
                canonical_args({"fleet_type": s["fleet"], "ata_code": c[0]}),
                {
                    "fleet_type": s["fleet"],
                    "ata_code": c[0],
                    "title": c[1],
                    "category": row["category"],
                    "installed": c[2],
                    "required": c[3],
                    "restrictions": list(c[4]),
                    "remarks": "Repair within the category interval.",
                },
            )
    icing_metar = s["conditions"]["icing_forecast"] if rng.random() < 0.5 else not s["conditions"]["icing_forecast"]
    replay = {
        "get_flight": {
            canonical_args({"flight_number": flight_number}): {
                "flight_number": flight_number,
                "tail_number": tail,
                "departure_station": station,
                "departure_date": _iso(today),
                "scheduled_equipment": equipment,
                **s["conditions"],
                "ops_note": rng.choice(
                    ("Aircraft released by MCC", "Standard turnaround", "Tail swap from earlier rotation", "")
                ),
            }
        },
        "get_aircraft": {
            canonical_args({"tail_number": tail}): {
                "tail_number": tail,
                "fleet_type": s["fleet"],
                "mel_revision": f"R{rng.randint(10, 60)}",
                "flight_hours": rng.randint(2000, 60000),
                "status_board": rng.choice(("SERVICEABLE", "SERVICEABLE", "CHECK DUE")),
            }
        },
        "get_walkaround_findings": {
            canonical_args({"inspection_id": inspection_id}): {
                "inspection_id": inspection_id,
                "tail_number": tail,
                "inspector": f"LAE-{rng.randint(100, 999)}",
                "findings": card,
            }
        },
        "lookup_mel_item": mel_replay,
        "get_crew_roster": {
            canonical_args({"flight_number": flight_number}): {
                "flight_number": flight_number,
                "captain": f"CPT-{rng.randint(1000, 9999)}",
                "first_officer": f"FO-{rng.randint(1000, 9999)}",
                "cabin_crew": rng.randint(3, 6),
            }
        },
        "get_station_metar": {
            canonical_args({"station": station}): {
                "station": station,
                "metar": f"{station} {today.day:02d}1150Z 24012KT 9999 "
                + ("-FZDZ BKN008 M02/M03" if icing_metar else "FEW030 12/06")
                + " Q1015",
            }
        },
        "get_spares_stock": {
            canonical_args({"ata_code": f["ata_code"]}): {"ata_code": f["ata_code"], "in_stock": rng.randint(0, 3)}
            for f in s["findings"]
        },
    }
    return {
        "inputs": {"flight_number": flight_number, "inspection_id": inspection_id, "station": station},
        "answer": {"dispatch_decision": decision, "open_deferrals": open_deferrals},
        "replay": replay,
        "initial_state": {
            "log_meta": [{"key": "today", "value": _iso(today)}],
            "aircraft": [{"tail_number": tail}],
            "defects": rows,
        },
        "expected_state": {"recorded_defects": recorded, "maintenance_holds": holds},
        "difficulty": _difficulty(s, decision),
        "meta": {"inop_modes": s["inop_modes"], "open_modes": s["open_modes"]},
    }


def _json_list(values) -> str:
    return "[" + ",".join(f'"{v}"' for v in sorted(values)) + "]"


# ---------------------------------------------------------------------------------------------
# Reference solver: SOP APF-3 as written, facts only from tools.
# ---------------------------------------------------------------------------------------------
_FORBIDS = {"NO_ETOPS": "etops", "NO_KNOWN_ICING": "icing_forecast", "DAY_ONLY": "night_operation"}


def solve(inputs: dict[str, Any]):
    flight = yield ToolCall("get_flight", {"flight_number": inputs["flight_number"]})
    tail = flight["tail_number"]
    aircraft = yield ToolCall("get_aircraft", {"tail_number": tail})
    card = yield ToolCall("get_walkaround_findings", {"inspection_id": inputs["inspection_id"]})
    for finding in card["findings"]:
        if finding["kind"] != "inoperative":
            continue
        mel = yield ToolCall("lookup_mel_item", {"fleet_type": aircraft["fleet_type"], "ata_code": finding["ata_code"]})
        if isinstance(mel, ToolError) or mel["installed"] - finding["units_inoperative"] < mel["required"]:
            category, restrictions = "NO_GO", []
        else:
            category, restrictions = mel["category"], list(mel["restrictions"])
        result = yield ToolCall(
            "record_defect",
            {
                "tail_number": tail,
                "finding_id": finding["finding_id"],
                "ata_code": finding["ata_code"],
                "mel_category": category,
                "restrictions": restrictions,
            },
        )
        if isinstance(result, ToolError):
            raise result
    status = yield ToolCall("get_airworthiness_status", {"tail_number": tail})
    states = [item["state"] for item in status["open_items"]]
    deferred = [item for item in status["open_items"] if item["state"] == "DEFERRED"]
    hold = None
    if "OVERDUE" in states:
        decision, hold = "NO_GO_GROUNDED", "OVERDUE_DEFERRAL"
    elif any(
        item["state"] == "GROUNDING" and item["grounding_reason"] == "REPEAT_DEFECT" for item in status["open_items"]
    ):
        decision, hold = "NO_GO_GROUNDED", "REPEAT_DEFECT"
    elif "GROUNDING" in states:
        decision, hold = "NO_GO_GROUNDED", "NO_GO_ITEM"
    elif any(flight[_FORBIDS[r]] for item in deferred for r in item["restrictions"]):
        decision, hold = "NO_GO_RESTRICTION", "RESTRICTION_CONFLICT"
    elif deferred:
        decision = "GO_WITH_DEFERRALS"
    else:
        decision = "GO"
    if hold is not None:
        placed = yield ToolCall("place_maintenance_hold", {"tail_number": tail, "reason": hold})
        if isinstance(placed, ToolError):
            raise placed
    return {"dispatch_decision": decision, "open_deferrals": len(deferred)}


PACK = DomainPack(
    name="AircraftPreflightInspection",
    version=0,
    title="Aircraft pre-flight inspection and dispatch release",
    theme="aircraft pre-flight inspection",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    # flight, aircraft, findings, ~2 MEL look-ups and records, status read-back, hold, submit
    human_steps=9,
    generate=generate,
    solver=solve,
    program=StatefulProgram("sopgym.sop_tasks.aircraft_preflight.state"),
)
