"""AircraftPreflightInspection's task generator: draw, label, records.

* **draw** (``_draw``): a scenario around a target decision (balanced over the four on val/test):
  the modes of the inoperative findings and of the earlier open deferrals (``_modes``), then the
  findings, MEL entries and technical-log history that realise them (``_ScenarioDraw``: restriction
  conflicts first, since they set the flight's conditions), closed-history noise and cosmetic
  findings; redrawn until its label is the target;
* **label**: the generator's own decision table (``_label``) over the scenario facts;
* **records** (``_records``): ids, the technical log (initial state), the walkaround card, the
  replay records and the expected state (defects recorded, hold placed).

**Difficulty** (``_difficulty``) counts the traps the case shows the agent, all drawn whatever the
target decision (never which findings ground the aircraft): the flight's scheduled equipment
differing from the aircraft's fleet type (the MEL is the fleet's); the station METAR disagreeing
with the flight's icing forecast; a "CHECK DUE" status board on the aircraft record; each cosmetic
finding on the card (0 to 2), which is neither recorded nor deferred. ``easy``: at most 1;
``medium``: 2; ``hard``: 3 or more. (The findings that need recording, their near misses and the
placarded deferrals are left out: how many there are depends on the decision.) The
``difficulty_label`` check of ``sopgym validate-domain`` keeps it from predicting the decision.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from sopgym.sop_tasks.generation import balanced_target, draw_until, record, records

from .tools import CATEGORIES, DECISIONS, FLEETS, FORBIDDEN_CONDITION

#: Days a deferral of each MEL category may stay open.
INTERVAL = {"B": 3, "C": 10, "D": 120}
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


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = balanced_target(rng, split, index, DECISIONS)
    s = draw_until(lambda: _draw(rng, target), lambda s: _label(s)[0] == target, attempts=100, target=target)
    return _records(rng, s, *_label(s))


# -- draw ------------------------------------------------------------------------------------------
def _draw(rng: random.Random, target: str) -> dict[str, Any]:
    """One scenario, its tail and its inspection card's finding ids."""
    s = _scenario(rng, target)
    s["tail"] = f"{rng.choice('GDFE')}-{''.join(rng.choice('ABCDEFGHJKLMNPRSTUVWXYZ') for _ in range(4))}"
    s["inspection_id"] = f"INS-{rng.randint(0, 999999):06d}"
    for k, f in enumerate(s["findings"], start=1):
        f["finding_id"] = f"{s['inspection_id']}-F{k}"
    return s


def _scenario(rng: random.Random, target: str) -> dict[str, Any]:
    fleet = rng.choice(FLEETS)
    today = dt.date(2026, 1, 1) + dt.timedelta(days=rng.randint(0, 364))
    conditions = {c: rng.random() < 0.4 for c in ("etops", "icing_forecast", "night_operation")}
    inop_modes, open_modes = _modes(rng, target)
    draw = _ScenarioDraw(rng, fleet, today, conditions)
    conflict_items = draw.conflicts(inop_modes + open_modes)
    draw.add_inoperative(inop_modes, conflict_items)
    draw.add_open_deferrals(open_modes, {i - len(inop_modes): c for i, c in conflict_items.items()})
    draw.add_noise()
    rng.shuffle(draw.findings)
    return {
        "fleet": fleet,
        "today": today,
        "conditions": conditions,
        "mel": draw.mel,
        "findings": draw.findings,
        "history": draw.history,
        "inop_modes": inop_modes,
        "open_modes": open_modes,
    }


def _modes(rng: random.Random, target: str) -> tuple[list[str], list[str]]:
    """Modes of the inoperative findings and of the earlier open deferrals, by target.

    ``ok``: deferrable, no conflict; ``conflict``: its restriction forbids a flight condition;
    ``not_in_mel``/``not_in_mel_other_fleet``/``units``/``repeat``/``overdue``: a grounding cause.
    """
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
    return inop_modes, open_modes


def _history_row(ata: str, raised: dt.date, state: str, category: str = "C", restrictions=(), due=None) -> dict[str, Any]:
    return {
        "ata_code": ata,
        "raised_on": raised,
        "state": state,
        "category": category,
        "restrictions": sorted(restrictions),
        "due_on": due,
    }


class _ScenarioDraw:
    """Findings, MEL entries and log history drawn for a scenario's modes, each catalogue item used once.

    Args:
        rng: the generator's rng (the methods draw from it in the order ``_scenario`` calls them).
        fleet, today: the aircraft's fleet type and the departure date.
        conditions: the flight's operating conditions; restriction conflicts switch theirs on, so
            the other items are then drawn to fit them.
    """

    def __init__(self, rng: random.Random, fleet: str, today: dt.date, conditions: dict[str, bool]) -> None:
        self.rng, self.fleet, self.today, self.conditions = rng, fleet, today, conditions
        self.items = [c for c in CATALOGUE if c[0] not in FLEET_EXCLUDED[fleet]]  # the fleet's MEL
        self.used: set[str] = set()
        self.mel: dict[str, dict[str, Any]] = {}
        self.findings: list[dict[str, Any]] = []
        self.history: list[dict[str, Any]] = []

    def pick(self, pred) -> tuple:
        choices = [c for c in self.items if c[0] not in self.used and pred(c)]
        c = self.rng.choice(choices)
        self.used.add(c[0])
        return c

    def fits(self, c: tuple) -> bool:
        """Whether deferring ``c`` forbids none of the flight's conditions."""
        return not any(self.conditions[FORBIDDEN_CONDITION[r]] for r in c[4])

    def mel_entry(self, c: tuple) -> dict[str, Any]:
        return {
            "category": self.rng.choice(CATEGORIES),
            "installed": c[2],
            "required": c[3],
            "restrictions": list(c[4]),
            "title": c[1],
        }

    def conflicts(self, modes: list[str]) -> dict[int, tuple]:
        """The item of every ``conflict`` mode (by position), with the condition it forbids switched on."""
        conflict_items = {}
        for i, m in enumerate(modes):
            if m == "conflict":
                c = self.pick(lambda c: bool(c[4]))
                self.conditions[FORBIDDEN_CONDITION[self.rng.choice(c[4])]] = True
                conflict_items[i] = c
        return conflict_items

    def add_inoperative(self, modes: list[str], conflict_items: dict[int, tuple]) -> None:
        """The new inoperative findings (and their MEL entries; repeat history for ``repeat``)."""
        rng, today = self.rng, self.today
        for i, m in enumerate(modes):
            if m in ("not_in_mel", "not_in_mel_other_fleet"):
                if m == "not_in_mel_other_fleet" and FLEET_EXCLUDED[self.fleet][0] not in self.used:
                    ata = FLEET_EXCLUDED[self.fleet][0]
                    title = next(c[1] for c in CATALOGUE if c[0] == ata)
                    self.used.add(ata)
                else:
                    ata, title = rng.choice([n for n in NON_MEL if n[0] not in self.used])
                    self.used.add(ata)
                self.findings.append(
                    {"ata_code": ata, "description": f"{title} inoperative", "kind": "inoperative", "units_inoperative": 1}
                )
                continue
            if m == "units":
                c = self.pick(lambda c: c[3] >= 1)
                units = rng.randint(c[2] - c[3] + 1, c[2])
            else:
                c = conflict_items[i] if m == "conflict" else self.pick(self.fits)
                spare = c[2] - c[3]
                units = rng.choice((spare, rng.randint(1, spare)))  # often exactly at the limit
            self.mel[c[0]] = self.mel_entry(c)
            self.findings.append(
                {"ata_code": c[0], "description": f"{c[1]} inoperative", "kind": "inoperative", "units_inoperative": units}
            )
            if m == "repeat":
                for _ in range(rng.choice((2, 2, 3))):
                    self.history.append(_history_row(c[0], today - dt.timedelta(days=rng.randint(1, 30)), "CLOSED"))
            elif rng.random() < 0.35:  # near miss: only one raise inside the 30-day window
                self.history.append(_history_row(c[0], today - dt.timedelta(days=rng.randint(1, 30)), "CLOSED"))
                self.history.append(_history_row(c[0], today - dt.timedelta(days=rng.randint(31, 60)), "CLOSED"))

    def add_open_deferrals(self, modes: list[str], conflict_items: dict[int, tuple]) -> None:
        """Earlier deferrals still open in the log (overdue for ``overdue``; due today is still valid),
        often with a placarded finding on the card."""
        rng, today = self.rng, self.today
        for j, m in enumerate(modes):
            c = conflict_items[j] if m == "conflict" else self.pick(self.fits)
            cat = rng.choice(CATEGORIES)
            if m == "overdue":
                ago = INTERVAL[cat] + rng.randint(1, 5)
            else:
                ago = rng.choice((INTERVAL[cat], rng.randint(1, INTERVAL[cat])))
            raised = today - dt.timedelta(days=ago)
            row = _history_row(c[0], raised, "DEFERRED", cat, c[4], raised + dt.timedelta(days=INTERVAL[cat]))
            self.history.append(row)
            if rng.random() < 0.6:
                self.findings.append(
                    {
                        "ata_code": c[0],
                        "description": f"{c[1]} inoperative, placard fitted",
                        "kind": "placarded",
                        "units_inoperative": 1,
                        "placard_row": row,
                    }
                )

    def add_noise(self) -> None:
        """Closed history on other items and cosmetic findings."""
        rng = self.rng
        for _ in range(rng.randint(0, 3)):
            free = [c for c in CATALOGUE if c[0] not in self.used]
            c = rng.choice(free)
            self.history.append(_history_row(c[0], self.today - dt.timedelta(days=rng.randint(3, 200)), "CLOSED"))
        for ata, text in rng.sample(COSMETIC, rng.randint(0, 2)):
            self.findings.append({"ata_code": ata, "description": text, "kind": "cosmetic", "units_inoperative": 0})


# -- label -----------------------------------------------------------------------------------------
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
    if any(s["conditions"][FORBIDDEN_CONDITION[r]] for r in active):
        return "NO_GO_RESTRICTION", len(deferred_restr), recorded, [[tail, "RESTRICTION_CONFLICT"]]
    if deferred_restr:
        return "GO_WITH_DEFERRALS", len(deferred_restr), recorded, []
    return "GO", 0, recorded, []


def _difficulty(s: dict[str, Any], replay: dict[str, dict[str, Any]]) -> str:
    """The level of the case's trap count (module docstring), read from the scenario and its records."""
    (flight,), (aircraft,) = replay["get_flight"].values(), replay["get_aircraft"].values()
    (metar,) = replay["get_station_metar"].values()
    traps = (
        flight["scheduled_equipment"] != s["fleet"],
        ("-FZDZ" in metar["metar"]) != s["conditions"]["icing_forecast"],
        aircraft["status_board"] == "CHECK DUE",
        sum(f["kind"] == "cosmetic" for f in s["findings"]),
    )
    score = sum(traps)
    return "easy" if score <= 1 else ("medium" if score == 2 else "hard")


# -- records ---------------------------------------------------------------------------------------
def _records(rng: random.Random, s: dict[str, Any], decision: str, open_deferrals: int, recorded: list,
             holds: list) -> dict[str, Any]:
    today, tail, inspection_id = s["today"], s["tail"], s["inspection_id"]
    flight_number = f"{rng.choice(('BA', 'KL', 'AF', 'LH', 'IB', 'EI', 'AZ'))}{rng.randint(100, 9999)}"
    station = rng.choice(STATIONS)
    equipment = s["fleet"] if rng.random() < 0.7 else rng.choice([f for f in FLEETS if f != s["fleet"]])
    rows = _log_rows(rng, s)
    icing_metar = s["conditions"]["icing_forecast"] if rng.random() < 0.5 else not s["conditions"]["icing_forecast"]
    replay = {
        "get_flight": record({"flight_number": flight_number}, {
            "flight_number": flight_number,
            "tail_number": tail,
            "departure_station": station,
            "departure_date": today.isoformat(),
            "scheduled_equipment": equipment,
            **s["conditions"],
            "ops_note": rng.choice(
                ("Aircraft released by MCC", "Standard turnaround", "Tail swap from earlier rotation", "")
            ),
        }),
        "get_aircraft": record({"tail_number": tail}, {
            "tail_number": tail,
            "fleet_type": s["fleet"],
            "mel_revision": f"R{rng.randint(10, 60)}",
            "flight_hours": rng.randint(2000, 60000),
            "status_board": rng.choice(("SERVICEABLE", "SERVICEABLE", "CHECK DUE")),
        }),
        "get_walkaround_findings": record({"inspection_id": inspection_id}, {
            "inspection_id": inspection_id,
            "tail_number": tail,
            "inspector": f"LAE-{rng.randint(100, 999)}",
            "findings": _card(s),
        }),
        "lookup_mel_item": _mel_records(s),
        "get_crew_roster": record({"flight_number": flight_number}, {
            "flight_number": flight_number,
            "captain": f"CPT-{rng.randint(1000, 9999)}",
            "first_officer": f"FO-{rng.randint(1000, 9999)}",
            "cabin_crew": rng.randint(3, 6),
        }),
        "get_station_metar": record({"station": station}, {
            "station": station,
            "metar": f"{station} {today.day:02d}1150Z 24012KT 9999 "
            + ("-FZDZ BKN008 M02/M03" if icing_metar else "FEW030 12/06")
            + " Q1015",
        }),
        "get_spares_stock": records(
            ({"ata_code": f["ata_code"]}, {"ata_code": f["ata_code"], "in_stock": rng.randint(0, 3)}) for f in s["findings"]
        ),
    }
    return {
        "inputs": {"flight_number": flight_number, "inspection_id": inspection_id, "station": station},
        "answer": {"dispatch_decision": decision, "open_deferrals": open_deferrals},
        "replay": replay,
        "initial_state": {
            "log_meta": [{"key": "today", "value": today.isoformat()}],
            "aircraft": [{"tail_number": tail}],
            "defects": rows,
        },
        "expected_state": {"recorded_defects": recorded, "maintenance_holds": holds},
        "difficulty": _difficulty(s, replay),
        "meta": {"inop_modes": s["inop_modes"], "open_modes": s["open_modes"]},
    }


def _log_rows(rng: random.Random, s: dict[str, Any]) -> list[dict[str, Any]]:
    """The technical log's rows (initial state), with unique ids; the log numbers new defects after them.
    Also gives each history row its ``defect_id`` (placarded findings cite it)."""
    rows = []
    for n, h in enumerate(sorted(s["history"], key=lambda r: (r["raised_on"], r["ata_code"])), start=1):
        h["defect_id"] = f"TL-{rng.randint(10, 99)}{n:03d}"
        rows.append(
            {
                "defect_id": h["defect_id"],
                "tail_number": s["tail"],
                "finding_id": f"INS-{rng.randint(0, 999999):06d}-F{rng.randint(1, 4)}",
                "ata_code": h["ata_code"],
                "category": h["category"],
                "restrictions": "[" + ",".join(f'"{v}"' for v in sorted(h["restrictions"])) + "]",
                "raised_on": h["raised_on"].isoformat(),
                "due_on": h["due_on"].isoformat() if h["due_on"] else None,
                "state": h["state"],
                "grounding_reason": None,
            }
        )
    return rows


def _card(s: dict[str, Any]) -> list[dict[str, Any]]:
    """The inspection card's findings (placarded ones cite the open deferral's defect id)."""
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
    return card


def _mel_records(s: dict[str, Any]) -> dict[str, Any]:
    """The fleet's MEL entries for the new findings, and for the placarded items (an agent may look
    them up; harmless)."""
    entries = [
        ({"fleet_type": s["fleet"], "ata_code": ata}, {
            "fleet_type": s["fleet"],
            "ata_code": ata,
            "title": e["title"],
            "category": e["category"],
            "installed": e["installed"],
            "required": e["required"],
            "restrictions": e["restrictions"],
            "remarks": "Repair within the category interval." if e["restrictions"] else "No operational restriction.",
        })
        for ata, e in s["mel"].items()
    ]
    listed = {ata for ata in s["mel"]}
    for f in s["findings"]:
        if f["kind"] == "placarded" and f["placard_row"]["ata_code"] not in listed:
            row = f["placard_row"]
            c = next(c for c in CATALOGUE if c[0] == row["ata_code"])
            listed.add(c[0])
            entries.append(({"fleet_type": s["fleet"], "ata_code": c[0]}, {
                "fleet_type": s["fleet"],
                "ata_code": c[0],
                "title": c[1],
                "category": row["category"],
                "installed": c[2],
                "required": c[3],
                "restrictions": list(c[4]),
                "remarks": "Repair within the category interval.",
            }))
    return records(entries)
