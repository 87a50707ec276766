"""DangerousGoodsClassification's task generator: draw, label, records.

* **draw** (``_case``): a booking and packages around a target decision (balanced over the six on
  val/test): UN numbers (a forbidden one, an incompatible or merely separate class pair), and per
  package a quantity and packaging steered by a mode (``_package``: often exactly at its limit, over
  the passenger limit, over every limit, a wrong packaging); redrawn until the label hits the target;
* **label**: the generator's own decision table (``_label``, quantities in tenths);
* **records** (``_records``): ids, the consignment (with shipper-declared classes that are sometimes
  wrong) and the replay records of the UN list, packing instructions and segregation table.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from sopgym.sop_tasks.generation import balanced_target, draw_until, record, records

from .tools import CLASSES, DECISIONS

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
_INCOMPATIBLE = {
    frozenset(p) for p in (("3", "5.1"), ("2.1", "5.1"), ("4.3", "8"), ("4.3", "3"), ("1.3G", "3"), ("1.3G", "2.1"))
}
_SEPARATE = {frozenset(p) for p in (("8", "6.1"), ("2.2", "3"), ("5.1", "8"), ("2.1", "8"), ("4.3", "5.1"))}
_ALLOWED_UN = tuple(k for k, v in UN.items() if not v[7])
_FORBIDDEN_UN = tuple(k for k, v in UN.items() if v[7])


def segregation(a: str, b: str) -> str:
    """The desk's segregation table (symmetric)."""
    pair = frozenset((a, b))
    if a == b:
        return "compatible"
    if pair in _INCOMPATIBLE:
        return "incompatible"
    return "separate" if pair in _SEPARATE else "compatible"


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = balanced_target(rng, split, index, DECISIONS)
    booking, packages = draw_until(
        lambda: _case(rng, target), lambda case: _label(*case)[0] == target, attempts=500, target=target
    )
    return _records(rng, booking, packages, *_label(booking, packages))


# -- draw ------------------------------------------------------------------------------------------
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


def _package(rng: random.Random, un: str, booking: str, mode: str) -> dict[str, Any]:
    """One package of ``un``; ``mode`` steers its quantity/packaging (the label decides what it is)."""
    _, _, _, _, _, pax, cargo, forbidden = UN[un]
    if forbidden:
        return {"un": un, "qty": rng.randint(5, 200), "packaging": rng.choice(PACKAGINGS)}
    assert cargo is not None, f"{un}: only a forbidden UN number has no cargo PI"
    flies_pax = booking == "passenger" and pax is not None
    limit, allowed = PI[pax if flies_pax and pax is not None else cargo]
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


# -- label -----------------------------------------------------------------------------------------
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
        pi = UN[p["un"]][col]
        assert isinstance(pi, str), f"{p['un']}: no {aircraft} PI"  # a passenger booking without one moved to cargo
        limit, allowed = PI[pi]
        wrong_pack = p["packaging"] not in allowed
        bad_pack += wrong_pack
        bad += wrong_pack or p["qty"] > limit
    if bad:
        return ("REJECT_PACKAGING" if bad_pack else "REJECT_QUANTITY"), bad
    classes = {UN[p["un"]][1] for p in packages}
    if any(segregation(a, b) == "incompatible" for a, b in itertools.combinations(sorted(classes), 2)):
        return "REJECT_SEGREGATION", 0
    return ("ACCEPT" if aircraft == booking else "CARGO_AIRCRAFT_ONLY"), 0


def _difficulty(booking: str, packages: list[dict[str, Any]], decision: str) -> str:
    """Counts traps: several packages, three packages, a passenger-to-cargo move, a segregation check
    that decides, a quantity exactly at its limit. easy: at most one; medium: two; hard: more."""
    switched = booking == "passenger" and any(
        (pax := UN[p["un"]][5]) is None or p["qty"] > PI[pax][0] for p in packages if not UN[p["un"]][7]
    )
    at_limit = any(p["qty"] in (PI[pi][0] for pi in UN[p["un"]][5:7] if pi) for p in packages)
    traps = [len(packages) >= 2, len(packages) == 3, switched, decision == "REJECT_SEGREGATION", at_limit]
    return ("easy", "easy", "medium", "hard", "hard", "hard")[sum(traps)]


# -- records ---------------------------------------------------------------------------------------
def _records(rng: random.Random, booking: str, packages: list[dict[str, Any]], decision: str, count: int) -> dict[str, Any]:
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
                "net_quantity": p["qty"] / 10,
                "unit": unit,
                "packaging_code": p["packaging"],
                "gross_weight_kg": round(p["qty"] / 10 * rng.uniform(1.1, 1.6) + 0.5, 1),
                "declared_class": declared,
                "description": name,
            }
        )
    uns = sorted({p["un"] for p in packages})
    un_records, pi_records = [], []
    for u in uns:
        name, cls, sub, pg, unit, pax, cargo, forbidden = UN[u]
        un_records.append(({"un_number": u}, {
            "un_number": u,
            "proper_shipping_name": name,
            "class": cls,
            "subsidiary_risk": sub,
            "packing_group": pg,
            "forbidden": forbidden,
            "passenger_pi": pax,
            "cargo_pi": cargo,
            "unit": unit,
        }))
        for pi in (pax, cargo):
            if pi is not None:
                limit, allowed = PI[pi]
                pi_records.append(({"pi_id": pi}, {
                    "pi_id": pi,
                    "aircraft": "passenger" if pi.startswith("P") else "cargo",
                    "max_net_quantity_per_package": limit / 10,
                    "unit": unit,
                    "allowed_packagings": list(allowed),
                }))
    replay = {
        "get_consignment": record({"consignment_id": consignment_id}, {
            "consignment_id": consignment_id,
            "shipper_id": shipper_id,
            "flight_number": flight,
            "aircraft_type_booked": booking,
            "packages": listed,
        }),
        "lookup_un_number": records(un_records),
        "get_packing_instruction": records(pi_records),
        "get_segregation_rule": records(
            ({"class_a": a, "class_b": b}, {"class_a": a, "class_b": b, "rule": segregation(a, b)})
            for a in CLASSES
            for b in CLASSES
        ),
        "get_shipper_profile": record({"shipper_id": shipper_id}, {
            "shipper_id": shipper_id,
            "known_shipper": rng.random() < 0.8,
            "dg_training_expires": f"202{rng.randint(6, 8)}-{rng.randint(1, 12):02d}-01",
        }),
        "get_flight_load_plan": record({"flight_number": flight}, {
            "flight_number": flight,
            "registration": f"D-A{rng.choice('BCDEFGHIJ')}{rng.choice('KLMNOPQRS')}{rng.choice('TUVWXYZ')}",
            "planned_dg_load_kg": rng.randint(0, 3000),
        }),
        "get_emergency_response_code": records(
            ({"un_number": u}, {"un_number": u, "drill_code": f"{rng.randint(1, 10)}{rng.choice('LFHPW')}"}) for u in uns
        ),
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
