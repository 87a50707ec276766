"""DangerousGoodsClassification: acceptance check of a dangerous-goods air consignment (SOP DG-5). Replay tier.

Facts chain: consignment -> UN records -> packing instructions (ids from the UN record) and
segregation rules (classes from the UN record). Numeric thresholds: net quantity per package
against the PI maximum (equal passes), passenger-to-cargo fallback. The answer has an integer
field compared as a number. The tables are illustrative internal tables, not a regulation.

The generator samples packages around a target decision (balanced over six decisions on
val/test), labels with its own decision table (``_label``, quantities in tenths) and keeps the
case only when the label hits the target. The reference solver (``solve``) follows the SOP text.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from sopgym.sandboxes import ToolSpec, canonical_args
from sopgym.sop_tasks.pack import DomainPack, OutputField, ToolCall, ToolError, object_schema, read_text

DECISIONS = (
    "ACCEPT",
    "CARGO_AIRCRAFT_ONLY",
    "REJECT_FORBIDDEN",
    "REJECT_PACKAGING",
    "REJECT_QUANTITY",
    "REJECT_SEGREGATION",
)
#: UN number -> (proper shipping name, class, subsidiary risk, packing group, unit, passenger PI, cargo PI, forbidden)
UN = {
    "UN1263": ("Paint", "3", None, "II", "L", "P353", "C364", False),
    "UN1993": ("Flammable liquid, n.o.s.", "3", None, "III", "L", "P355", "C366", False),
    "UN3065": ("Alcoholic beverages", "3", None, "III", "L", "P355", "C366", False),
    "UN1830": ("Sulphuric acid", "8", None, "II", "L", "P851", "C855", False),
    "UN1789": ("Hydrochloric acid", "8", None, "II", "L", "P851", "C855", False),
    "UN1428": ("Sodium", "4.3", None, "I", "kg", None, "C487", False),
    "UN1942": ("Ammonium nitrate", "5.1", None, "III", "kg", "P559", "C560", False),
    "UN1479": ("Oxidizing solid, n.o.s.", "5.1", None, "II", "kg", "P558", "C562", False),
    "UN2810": ("Toxic liquid, organic, n.o.s.", "6.1", None, "III", "L", "P663", "C663", False),
    "UN1950": ("Aerosols, flammable", "2.1", None, None, "kg", "P203", "C203", False),
    "UN1001": ("Acetylene, dissolved", "2.1", None, None, "kg", None, "C200", False),
    "UN1072": ("Oxygen, compressed", "2.2", "5.1", None, "kg", "P200", "C200", False),
    "UN3480": ("Lithium ion batteries", "9", None, "II", "kg", None, "C965", False),
    "UN1845": ("Carbon dioxide, solid (dry ice)", "9", None, None, "kg", "P954", "C954", False),
    "UN0335": ("Fireworks", "1.3G", None, None, "kg", None, None, True),
    "UN2426": ("Ammonium nitrate, liquid (hot concentrated solution)", "5.1", None, None, "L", None, None, True),
}
#: PI id -> (max net quantity per package in tenths of the unit, allowed packaging codes)
PI = {
    "P353": (50, ("4G", "1A1", "3H1")),
    "C364": (600, ("4G", "1A1", "3H1", "1H1")),
    "P355": (600, ("4G", "1A1", "3H1", "1H1")),
    "C366": (2200, ("1A1", "1H1", "3H1")),
    "P851": (10, ("4G", "1H1")),
    "C855": (300, ("1H1", "3H1")),
    "C487": (150, ("1A1", "4C1")),
    "P559": (250, ("4G", "5H4")),
    "C560": (1000, ("4G", "5H4", "1A1")),
    "P558": (50, ("4G", "1H1")),
    "C562": (250, ("4G", "1H1", "1A1")),
    "P663": (600, ("1A1", "1H1", "6HA1")),
    "C663": (2200, ("1A1", "1H1")),
    "P203": (750, ("4G",)),
    "C203": (1500, ("4G", "4C1")),
    "C200": (1500, ("1A1",)),
    "P200": (750, ("1A1",)),
    "C965": (350, ("4G", "4C1")),
    "P954": (2000, ("4G", "4C1")),
    "C954": (5000, ("4G", "4C1", "1A1")),
}
PACKAGINGS = ("1A1", "1H1", "3H1", "4C1", "4G", "5H4", "6HA1")
CLASSES = ("1.3G", "2.1", "2.2", "3", "4.3", "5.1", "6.1", "8", "9")
_INCOMPATIBLE = {
    frozenset(p) for p in (("3", "5.1"), ("2.1", "5.1"), ("4.3", "8"), ("4.3", "3"), ("1.3G", "3"), ("1.3G", "2.1"))
}
_SEPARATE = {frozenset(p) for p in (("8", "6.1"), ("2.2", "3"), ("5.1", "8"), ("2.1", "8"), ("4.3", "5.1"))}


def segregation(a: str, b: str) -> str:
    """The desk's segregation table (symmetric)."""
    pair = frozenset((a, b))
    if a == b:
        return "compatible"
    if pair in _INCOMPATIBLE:
        return "incompatible"
    return "separate" if pair in _SEPARATE else "compatible"




_un = {"type": "string", "pattern": "^UN[0-9]{4}$"}
_cls = {"type": "string", "enum": list(CLASSES)}
TOOLS = (
    ToolSpec(
        "get_consignment",
        "Shipper's declaration: packages (package id, UN number, net quantity and unit, packaging code, gross "
        "weight, shipper's declared class), aircraft type booked, shipper id, flight.",
        object_schema({"consignment_id": {"type": "string", "pattern": "^DG-[0-9]{7}$"}}),
        not_found="consignment {consignment_id} not found",
    ),
    ToolSpec(
        "lookup_un_number",
        "UN record: proper shipping name, primary class, subsidiary risk, packing group, forbidden flag, "
        "passenger-aircraft and cargo-aircraft packing instruction ids.",
        object_schema({"un_number": _un}),
        not_found="no entry for {un_number} in the dangerous goods list",
    ),
    ToolSpec(
        "get_packing_instruction",
        "Packing instruction by id (e.g. P353, C364): maximum net quantity per package and unit, allowed packaging codes.",
        object_schema({"pi_id": {"type": "string", "pattern": "^[PC][0-9]{3}$"}}),
        not_found="packing instruction {pi_id} not found",
    ),
    ToolSpec(
        "get_segregation_rule",
        "Segregation rule between two hazard classes: compatible, separate or incompatible.",
        object_schema({"class_a": _cls, "class_b": _cls}),
        not_found="no segregation entry for classes {class_a} and {class_b}",
    ),
    ToolSpec(
        "get_shipper_profile",
        "Shipper's account: known-shipper status, dangerous-goods training certificate expiry.",
        object_schema({"shipper_id": {"type": "string", "pattern": "^SHP-[0-9]{5}$"}}),
        distractor=True,
        not_found="shipper {shipper_id} not found",
    ),
    ToolSpec(
        "get_flight_load_plan",
        "Load plan of a flight: aircraft registration, positions, planned dangerous-goods load (kg).",
        object_schema({"flight_number": {"type": "string", "pattern": "^[A-Z0-9]{2}[0-9]{3,4}$"}}),
        distractor=True,
        not_found="no load plan for flight {flight_number}",
    ),
    ToolSpec(
        "get_emergency_response_code",
        "Emergency response drill code for a UN number (for the NOTOC, not for acceptance).",
        object_schema({"un_number": _un}),
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


# ---------------------------------------------------------------------------------------------
# Generator
# ---------------------------------------------------------------------------------------------
def _label(booking: str, packages: list[dict[str, Any]]) -> tuple[str, int]:
    """(decision, count) from the packages (quantities in tenths)."""
    forbidden = sum(UN[p["un"]][7] for p in packages)
    if forbidden:
        return "REJECT_FORBIDDEN", forbidden
    aircraft = booking
    if booking == "passenger":
        for p in packages:
            pax = UN[p["un"]][5]
            if pax is None or p["qty"] > PI[pax][0]:
                aircraft = "cargo"
    col = 5 if aircraft == "passenger" else 6
    bad_pack = bad = 0
    for p in packages:
        limit, allowed = PI[UN[p["un"]][col]]
        wrong_pack = p["packaging"] not in allowed
        bad_pack += wrong_pack
        bad += wrong_pack or p["qty"] > limit
    if bad:
        return ("REJECT_PACKAGING" if bad_pack else "REJECT_QUANTITY"), bad
    classes = {UN[p["un"]][1] for p in packages}
    if any(segregation(a, b) == "incompatible" for a, b in itertools.combinations(sorted(classes), 2)):
        return "REJECT_SEGREGATION", 0
    return ("ACCEPT" if aircraft == booking else "CARGO_AIRCRAFT_ONLY"), 0


_ALLOWED_UN = tuple(k for k, v in UN.items() if not v[7])
_FORBIDDEN_UN = tuple(k for k, v in UN.items() if v[7])


def _package(rng: random.Random, un: str, booking: str, mode: str) -> dict[str, Any]:
    """One package of ``un``; ``mode`` steers its quantity/packaging (the label decides what it is)."""
    _, _, _, _, _, pax, cargo, forbidden = UN[un]
    if forbidden:
        return {"un": un, "qty": rng.randint(5, 200), "packaging": rng.choice(PACKAGINGS)}
    flies_pax = booking == "passenger" and pax is not None
    limit, allowed = PI[pax if flies_pax else cargo]
    qty = rng.choice((limit, rng.randint(max(1, limit // 5), limit)))  # often exactly at the limit
    packaging = rng.choice(allowed)
    if mode == "switch" and booking == "passenger" and pax is not None:
        lo, hi = PI[pax][0] + 1, PI[cargo][0]
        qty = rng.choice((lo, hi, rng.randint(lo, hi)))
        packaging = rng.choice(PI[cargo][1])
    elif mode == "qty":  # over the cargo limit too, so a passenger booking cannot escape by moving
        over = PI[cargo][0]
        qty = over + rng.choice((1, rng.randint(1, max(1, over))))
    elif mode == "pack":
        packaging = rng.choice([c for c in PACKAGINGS if c not in allowed])
    return {"un": un, "qty": qty, "packaging": packaging}


def _case(rng: random.Random, target: str) -> tuple[str, list[dict[str, Any]]]:
    booking = "cargo" if target != "CARGO_AIRCRAFT_ONLY" and rng.random() < 0.35 else "passenger"
    n = rng.choice((1, 2, 2, 3, 3))
    uns = [rng.choice(_ALLOWED_UN) for _ in range(n)]
    if target == "REJECT_FORBIDDEN":
        uns[rng.randrange(n)] = rng.choice(_FORBIDDEN_UN)
    if target == "REJECT_SEGREGATION" or rng.random() < 0.25:  # an incompatible (or merely separate) pair
        a, b = sorted(rng.choice(sorted(_INCOMPATIBLE | _SEPARATE, key=sorted)))
        pick = {c: [u for u in _ALLOWED_UN if UN[u][1] == c] for c in (a, b)}
        if all(pick.values()):
            if n == 1:
                uns.append(uns[0])
                n = 2
            uns[0], uns[1] = rng.choice(pick[a]), rng.choice(pick[b])
    modes = ["ok"] * n
    special = {"CARGO_AIRCRAFT_ONLY": "switch", "REJECT_PACKAGING": "pack", "REJECT_QUANTITY": "qty"}.get(target)
    if special:
        for i in rng.sample(range(n), rng.choice((1, 1, min(2, n)))):
            modes[i] = special
    if target in ("REJECT_PACKAGING", "REJECT_QUANTITY") and rng.random() < 0.3:
        modes[rng.randrange(n)] = rng.choice(("pack", "qty", "switch"))
    elif booking == "passenger" and target != "CARGO_AIRCRAFT_ONLY" and rng.random() < 0.2:
        modes[rng.randrange(n)] = "switch"
    return booking, [_package(rng, u, booking, m) for u, m in zip(uns, modes)]


def _difficulty(booking: str, packages: list[dict[str, Any]], decision: str) -> str:
    """Counts traps: several packages, three packages, a passenger-to-cargo move, a segregation check
    that decides, a quantity exactly at its limit. easy: at most one; medium: two; hard: more."""
    switched = booking == "passenger" and any(
        UN[p["un"]][5] is None or p["qty"] > PI[UN[p["un"]][5]][0] for p in packages if not UN[p["un"]][7]
    )
    at_limit = any(p["qty"] in (PI[pi][0] for pi in UN[p["un"]][5:7] if pi) for p in packages)
    traps = [len(packages) >= 2, len(packages) == 3, switched, decision == "REJECT_SEGREGATION", at_limit]
    return ("easy", "easy", "medium", "hard", "hard", "hard")[sum(traps)]


def _fmt(tenths: int) -> float:
    return tenths / 10


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = DECISIONS[index % len(DECISIONS)] if split != "train" else rng.choice(DECISIONS)
    for _ in range(500):
        booking, packages = _case(rng, target)
        decision, count = _label(booking, packages)
        if decision == target:
            break
    else:  # pragma: no cover - every target is reachable in a few tries
        raise RuntimeError(f"could not build a DangerousGoodsClassification case for {target}")

    consignment_id = f"DG-{rng.randint(0, 10**7 - 1):07d}"
    shipper_id = f"SHP-{rng.randint(0, 99999):05d}"
    flight = f"{rng.choice(('LH', 'AF', 'KL', 'BA', 'QR', 'EK'))}{rng.randint(100, 9999)}"
    listed = []
    for k, p in enumerate(packages, start=1):
        name, cls, _, _, unit, *_ = UN[p["un"]]
        declared = cls if rng.random() < 0.75 else rng.choice([c for c in CLASSES if c != cls])
        listed.append(
            {
                "package_id": f"{consignment_id}-P{k}",
                "un_number": p["un"],
                "net_quantity": _fmt(p["qty"]),
                "unit": unit,
                "packaging_code": p["packaging"],
                "gross_weight_kg": round(_fmt(p["qty"]) * rng.uniform(1.1, 1.6) + 0.5, 1),
                "declared_class": declared,
                "description": name,
            }
        )
    un_replay, pi_replay = {}, {}
    for u in sorted({p["un"] for p in packages}):
        name, cls, sub, pg, unit, pax, cargo, forbidden = UN[u]
        un_replay[canonical_args({"un_number": u})] = {
            "un_number": u,
            "proper_shipping_name": name,
            "class": cls,
            "subsidiary_risk": sub,
            "packing_group": pg,
            "forbidden": forbidden,
            "passenger_pi": pax,
            "cargo_pi": cargo,
            "unit": unit,
        }
        for pi in (pax, cargo):
            if pi is not None:
                limit, allowed = PI[pi]
                pi_replay[canonical_args({"pi_id": pi})] = {
                    "pi_id": pi,
                    "aircraft": "passenger" if pi.startswith("P") else "cargo",
                    "max_net_quantity_per_package": _fmt(limit),
                    "unit": unit,
                    "allowed_packagings": list(allowed),
                }
    seg_replay = {
        canonical_args({"class_a": a, "class_b": b}): {"class_a": a, "class_b": b, "rule": segregation(a, b)}
        for a in CLASSES
        for b in CLASSES
    }
    replay = {
        "get_consignment": {
            canonical_args({"consignment_id": consignment_id}): {
                "consignment_id": consignment_id,
                "shipper_id": shipper_id,
                "flight_number": flight,
                "aircraft_type_booked": booking,
                "packages": listed,
            }
        },
        "lookup_un_number": un_replay,
        "get_packing_instruction": pi_replay,
        "get_segregation_rule": seg_replay,
        "get_shipper_profile": {
            canonical_args({"shipper_id": shipper_id}): {
                "shipper_id": shipper_id,
                "known_shipper": rng.random() < 0.8,
                "dg_training_expires": f"202{rng.randint(6, 8)}-{rng.randint(1, 12):02d}-01",
            }
        },
        "get_flight_load_plan": {
            canonical_args({"flight_number": flight}): {
                "flight_number": flight,
                "registration": f"D-A{rng.choice('BCDEFGHIJ')}{rng.choice('KLMNOPQRS')}{rng.choice('TUVWXYZ')}",
                "planned_dg_load_kg": rng.randint(0, 3000),
            }
        },
        "get_emergency_response_code": {
            canonical_args({"un_number": u}): {
                "un_number": u,
                "drill_code": f"{rng.randint(1, 10)}{rng.choice('LFHPW')}",
            }
            for u in sorted({p["un"] for p in packages})
        },
    }
    return {
        "inputs": {
            "consignment_id": consignment_id,
            "acceptance_station": rng.choice(("FRA", "CDG", "AMS", "LHR", "DOH", "DXB")),
        },
        "answer": {"decision": decision, "non_compliant_packages": count},
        "replay": replay,
        "difficulty": _difficulty(booking, packages, decision),
        "meta": {"num_packages": len(packages), "booking": booking},
    }


# ---------------------------------------------------------------------------------------------
# Reference solver: SOP DG-5 as written, facts only from tools.
# ---------------------------------------------------------------------------------------------
def solve(inputs: dict[str, Any]):
    consignment = yield ToolCall("get_consignment", {"consignment_id": inputs["consignment_id"]})
    packages = consignment["packages"]
    records: dict[str, dict] = {}
    for p in packages:
        if p["un_number"] not in records:
            rec = yield ToolCall("lookup_un_number", {"un_number": p["un_number"]})
            if isinstance(rec, ToolError):
                raise rec
            records[p["un_number"]] = rec
    forbidden = [p for p in packages if records[p["un_number"]]["forbidden"]]
    if forbidden:
        return {"decision": "REJECT_FORBIDDEN", "non_compliant_packages": len(forbidden)}

    instructions: dict[str, dict] = {}

    def instruction(pi_id: str):
        if pi_id not in instructions:
            instructions[pi_id] = yield ToolCall("get_packing_instruction", {"pi_id": pi_id})
        return instructions[pi_id]

    booked = consignment["aircraft_type_booked"]
    aircraft = booked
    if booked == "passenger":
        for p in packages:
            pax_pi = records[p["un_number"]]["passenger_pi"]
            if pax_pi is None:
                aircraft = "cargo"
                break
            pi = yield from instruction(pax_pi)
            if p["net_quantity"] > pi["max_net_quantity_per_package"]:
                aircraft = "cargo"
                break
    key = "passenger_pi" if aircraft == "passenger" else "cargo_pi"
    packaging_failures = quantity_only_failures = 0
    for p in packages:
        pi = yield from instruction(records[p["un_number"]][key])
        if p["packaging_code"] not in pi["allowed_packagings"]:
            packaging_failures += 1
        elif p["net_quantity"] > pi["max_net_quantity_per_package"]:
            quantity_only_failures += 1
    if packaging_failures:
        return {"decision": "REJECT_PACKAGING", "non_compliant_packages": packaging_failures + quantity_only_failures}
    if quantity_only_failures:
        return {"decision": "REJECT_QUANTITY", "non_compliant_packages": quantity_only_failures}
    classes = sorted({records[p["un_number"]]["class"] for p in packages})
    for i, a in enumerate(classes):
        for b in classes[i + 1 :]:
            rule = yield ToolCall("get_segregation_rule", {"class_a": a, "class_b": b})
            if rule["rule"] == "incompatible":
                return {"decision": "REJECT_SEGREGATION", "non_compliant_packages": 0}
    return {"decision": "ACCEPT" if aircraft == booked else "CARGO_AIRCRAFT_ONLY", "non_compliant_packages": 0}


PACK = DomainPack(
    name="DangerousGoodsClassification",
    version=0,
    title="Dangerous-goods classification and acceptance for air cargo",
    theme="dangerous-goods classification",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    human_steps=9,  # consignment, ~2 UN look-ups, ~3 PIs, ~2 segregation checks, submit
    generate=generate,
    solver=solve,
)
