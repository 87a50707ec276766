"""WarehouseReceiving's task generator: draw, label, records.

* **draw**: a clean shipment (``_clean``) with one fault injected for the target disposition
  (``_inject``, balanced over the five dispositions), plus, half the time, a fault that only a
  later SOP step would catch, shadowed by the deciding one;
* **label**: the generator's own decision table (``_label``), independent of the solver;
* **records**: the ids, the replay records of every tool (with traps: a carrier declaration that
  disagrees with the PO, an appointment for a near-identical shipment id) and the difficulty.

**Difficulty** (``_difficulty``) counts the traps the case holds, all drawn whatever the target
disposition (never which step decides): the carrier's declared pallets, and its declared weight,
disagreeing with the PO; a weight variance in the upper half of the tolerance (it passes, narrowly);
a temperature-controlled load (a range check in tenths, with the preferred-supplier exception);
exactly one open quality hold (a near miss of supplier watch); the carrier-rating distractor
answering with an error. ``easy``: at most 1; ``medium``: 2 or 3; ``hard``: 4 or more. The
``difficulty_label`` check of ``sopgym validate-domain`` keeps it from predicting the disposition.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from sopgym.sop_tasks.generation import balanced_target, record, recorded_error, records

from .tools import DISPOSITIONS, ZONES

_TARGETS = {
    "ACCEPT": ("NONE",),
    "ACCEPT_WITH_NOTE": ("COUNT_DISCREPANCY", "SUPPLIER_WATCH"),
    "PARTIAL_REJECT": ("DAMAGE",),
    "QUARANTINE": ("SEAL_MISMATCH", "TEMP_REVIEW", "WEIGHT_VARIANCE"),
    "REJECT": ("NO_APPOINTMENT", "PO_INVALID", "TEMP_EXCURSION", "DAMAGE"),
}
#: Reasons decided before the count check (step 9): a count fault there is shadowed.
_BEFORE_COUNT = ("NO_APPOINTMENT", "PO_INVALID", "SEAL_MISMATCH", "TEMP_REVIEW", "TEMP_EXCURSION", "WEIGHT_VARIANCE")


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    disposition = balanced_target(rng, split, index, DISPOSITIONS)
    facts = _draw(rng, disposition)
    label, reason, step = _label(facts)
    answer = {"disposition": label, "reason_code": reason, "accepted_pallets": _accepted_pallets(facts, label)}
    return _records(rng, facts, answer, step)


# -- draw ------------------------------------------------------------------------------------------
def _draw(rng: random.Random, disposition: str) -> dict[str, Any]:
    reason = rng.choice(_TARGETS[disposition])
    facts = _clean(rng)
    _inject(facts, reason, disposition, rng)
    return facts


def _clean(rng: random.Random) -> dict[str, Any]:
    """A shipment that passes every check."""
    cls = rng.choice(("ambient", "ambient", "chilled", "frozen"))
    pallets = rng.randint(4, 26)
    expected_weight = pallets * rng.randint(3, 9) * 100
    tolerance = rng.choice((2, 3, 5))
    seal = f"SL{rng.randint(100000, 999999)}"
    max_dev = expected_weight * tolerance // 100
    temp = {"ambient": rng.choice((None, round(rng.uniform(8, 28), 1))),
            "chilled": round(rng.uniform(0.0, 5.0), 1),
            "frozen": round(rng.uniform(-24.0, -15.0), 1)}[cls]
    return {
        "temperature_class": cls, "po_status": "open", "expected_pallets": pallets,
        "expected_weight": expected_weight, "tolerance_pct": tolerance,
        "counted": pallets, "measured_weight": expected_weight + rng.randint(-max_dev, max_dev),
        "seal_declared": seal, "seal_read": seal, "seal_intact": True, "damaged": 0,
        "temperature_c": temp, "tier": rng.choice(("preferred", "standard", "standard")),
        "holds": rng.choice((0, 0, 1)), "appointment_ok": True,
    }


def _no_appointment(f: dict[str, Any], reason: str, disposition: str, rng: random.Random) -> None:
    f["appointment_ok"] = False


def _po_invalid(f: dict[str, Any], reason: str, disposition: str, rng: random.Random) -> None:
    f["po_status"] = rng.choice(("cancelled", "closed"))


def _seal_mismatch(f: dict[str, Any], reason: str, disposition: str, rng: random.Random) -> None:
    if rng.random() < 0.5:
        f["seal_intact"] = False
    else:  # a one-character difference: read carefully
        s = f["seal_declared"]
        i = rng.randrange(2, len(s))
        f["seal_read"] = s[:i] + str((int(s[i]) + rng.randint(1, 9)) % 10) + s[i + 1:]


def _temperature(f: dict[str, Any], reason: str, disposition: str, rng: random.Random) -> None:
    f["temperature_class"] = cls = rng.choice(("chilled", "frozen"))
    review = reason == "TEMP_REVIEW"
    off = rng.randint(1, 10) if review else rng.choice((rng.randint(1, 10), rng.randint(11, 60), None))
    if review:
        f["tier"] = "preferred"
    elif off is not None and off <= 10:
        f["tier"] = rng.choice(("standard", "probation"))
    if off is None:
        f["temperature_c"] = None
    elif cls == "chilled":
        f["temperature_c"] = (50 + off) / 10 if rng.random() < 0.6 else -off / 10
    else:
        f["temperature_c"] = (-150 + off) / 10


def _weight_variance(f: dict[str, Any], reason: str, disposition: str, rng: random.Random) -> None:
    over = f["expected_weight"] * f["tolerance_pct"] // 100 + rng.randint(1, 400)
    f["measured_weight"] = f["expected_weight"] + rng.choice((-1, 1)) * over


def _damage(f: dict[str, Any], reason: str, disposition: str, rng: random.Random) -> None:
    limit = f["counted"] // 4  # damaged <= limit is partial
    f["damaged"] = rng.randint(limit + 1, f["counted"]) if disposition == "REJECT" else rng.randint(1, max(1, limit))
    if disposition == "PARTIAL_REJECT" and f["damaged"] * 4 > f["counted"]:
        f["counted"] = f["expected_pallets"] = max(f["counted"], f["damaged"] * 4)


def _count_discrepancy(f: dict[str, Any], reason: str, disposition: str, rng: random.Random) -> None:
    f["counted"] = max(1, f["expected_pallets"] + rng.choice((-3, -2, -1, 1, 2)))


def _supplier_watch(f: dict[str, Any], reason: str, disposition: str, rng: random.Random) -> None:
    if rng.random() < 0.5:
        f["tier"] = "probation"
    else:
        f["holds"] = rng.randint(2, 4)


#: reason -> how the facts are made to fail at its step: ``(facts, reason, disposition, rng)``.
_FAULTS: dict[str, Callable[[dict[str, Any], str, str, random.Random], None]] = {
    "NO_APPOINTMENT": _no_appointment,
    "PO_INVALID": _po_invalid,
    "SEAL_MISMATCH": _seal_mismatch,
    "TEMP_REVIEW": _temperature,
    "TEMP_EXCURSION": _temperature,
    "WEIGHT_VARIANCE": _weight_variance,
    "DAMAGE": _damage,
    "COUNT_DISCREPANCY": _count_discrepancy,
    "SUPPLIER_WATCH": _supplier_watch,
}


def _inject(f: dict[str, Any], reason: str, disposition: str, rng: random.Random) -> None:
    """Make the facts fail at ``reason``'s step (for ``disposition``), then maybe add shadowed noise."""
    fault = _FAULTS.get(reason)
    if fault is not None:
        fault(f, reason, disposition, rng)
    # Shadowed noise, on half the tasks: a fault only a later step would catch (it must not change
    # the label). The kind None adds nothing; it stays a choice so the pinned splits keep their draws.
    if rng.random() < 0.5:
        noise = rng.choice(("count", "holds", None))
        if noise == "count" and reason in _BEFORE_COUNT:
            f["counted"] = f["expected_pallets"] + 1
        elif noise == "holds" and reason != "NONE":
            f["holds"] = max(f["holds"], 2)


# -- label -----------------------------------------------------------------------------------------
def _label(f: dict[str, Any]) -> tuple[str, str, int]:
    """(disposition, reason, deciding step) from the facts, as a decision table (tenths of a degree)."""
    if not f["appointment_ok"]:
        return "REJECT", "NO_APPOINTMENT", 1
    if f["po_status"] != "open":
        return "REJECT", "PO_INVALID", 3
    if not f["seal_intact"] or f["seal_read"] != f["seal_declared"]:
        return "QUARANTINE", "SEAL_MISMATCH", 5
    t, cls = f["temperature_c"], f["temperature_class"]
    if cls != "ambient":
        lo, hi = (0, 50) if cls == "chilled" else (None, -150)
        if t is None:
            off = None
        else:
            tt = round(t * 10)
            off = max(0, (lo - tt) if lo is not None else 0, tt - hi)
        if off is None or off > 0:
            if off is not None and off <= 10 and f["tier"] == "preferred":
                return "QUARANTINE", "TEMP_REVIEW", 6
            return "REJECT", "TEMP_EXCURSION", 6
    if abs(f["measured_weight"] - f["expected_weight"]) * 100 > f["tolerance_pct"] * f["expected_weight"]:
        return "QUARANTINE", "WEIGHT_VARIANCE", 7
    if f["damaged"] * 4 > f["counted"]:
        return "REJECT", "DAMAGE", 8
    if f["damaged"] >= 1:
        return "PARTIAL_REJECT", "DAMAGE", 8
    if f["counted"] != f["expected_pallets"]:
        return "ACCEPT_WITH_NOTE", "COUNT_DISCREPANCY", 9
    if f["tier"] == "probation" or f["holds"] >= 2:
        return "ACCEPT_WITH_NOTE", "SUPPLIER_WATCH", 10
    return "ACCEPT", "NONE", 11


def _accepted_pallets(f: dict[str, Any], disposition: str) -> int:
    """SOP section 4."""
    return {"REJECT": 0, "QUARANTINE": 0, "PARTIAL_REJECT": f["counted"] - f["damaged"]}.get(disposition, f["counted"])


# -- records ---------------------------------------------------------------------------------------
def _records(rng: random.Random, f: dict[str, Any], answer: dict[str, Any], step: int) -> dict[str, Any]:
    shipment_id = f"SHP-{rng.randint(0, 999999):06d}"
    po_number = f"PO-{rng.randint(0, 999999):06d}"
    supplier_id = f"SUP-{rng.randint(0, 9999):04d}"
    carrier_id = rng.choice(("CARR-NORTHLINE", "CARR-BLUEPEAK", "CARR-RIVERTON", "CARR-SWIFTWAY"))
    date = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    dock_door = f"D{rng.randint(1, 24):02d}"
    hour = rng.randint(5, 21)
    booking = {"dock_door": dock_door, "date": date}
    appointment = {
        "appointment_id": f"APT-{rng.randint(0, 99999):05d}", "dock_door": dock_door, "date": date,
        "shipment_id": shipment_id, "window": f"{hour:02d}:00-{hour + 2:02d}:00",
    }
    appointments = record(booking, appointment)
    if not f["appointment_ok"]:
        if rng.random() < 0.5:  # booked for another trailer: a near-identical shipment id
            other = f"SHP-{(int(shipment_id[4:]) + rng.randint(1, 9)) % 1000000:06d}"
            appointments = record(booking, {**appointment, "shipment_id": other})
        else:  # booked the day before
            appointments = {}
    # The carrier's declaration disagrees with the PO half the time: a trap for shortcuts.
    declared_pallets = f["expected_pallets"] + rng.choice((0, 0, 1, -1, 2))
    declared_weight = f["expected_weight"] + rng.choice((0, 0, 150, -200, 600))
    replay = {
        "get_dock_appointment": appointments,
        "get_shipment": record({"shipment_id": shipment_id}, {
            "shipment_id": shipment_id, "po_number": po_number, "supplier_id": supplier_id,
            "carrier_id": carrier_id, "declared_seal_number": f["seal_declared"],
            "temperature_class": f["temperature_class"], "declared_pallets": declared_pallets,
            "declared_weight_kg": declared_weight, "ship_date": date,
        }),
        "get_purchase_order": record({"po_number": po_number}, {
            "po_number": po_number, "status": f["po_status"], "expected_pallets": f["expected_pallets"],
            "expected_weight_kg": f["expected_weight"], "weight_tolerance_pct": f["tolerance_pct"],
        }),
        "get_dock_scan": record({"shipment_id": shipment_id}, {
            "shipment_id": shipment_id, "counted_pallets": f["counted"], "measured_weight_kg": f["measured_weight"],
            "seal_intact": f["seal_intact"], "seal_number_read": f["seal_read"] if f["seal_intact"] else None,
            "damaged_pallets": f["damaged"], "temperature_c": f["temperature_c"],
        }),
        "get_supplier_profile": record({"supplier_id": supplier_id}, {
            "supplier_id": supplier_id, "tier": f["tier"], "open_quality_holds": f["holds"],
        }),
        "get_carrier_rating": record({"carrier_id": carrier_id}, {
            "carrier_id": carrier_id, "on_time_pct": rng.randint(70, 99), "claims_ratio": round(rng.uniform(0, 0.08), 3),
        }),
        "get_storage_capacity": records(({"zone": z}, {"zone": z, "free_positions": rng.randint(0, 400)}) for z in ZONES),
        "get_yard_weather": record({"date": date}, {"date": date, "condition": rng.choice(("clear", "rain", "snow", "wind"))}),
    }
    carrier_down = rng.random() < 0.1
    if carrier_down:  # the carrier rating service is occasionally down: a distractor's error must not matter
        replay["get_carrier_rating"] = record({"carrier_id": carrier_id}, recorded_error("carrier rating service unavailable"))
    return {
        "inputs": {"shipment_id": shipment_id, "dock_door": dock_door, "arrived_at": f"{date}T{hour:02d}:{rng.randint(0, 59):02d}"},
        "answer": answer,
        "replay": replay,
        "difficulty": _difficulty(f, declared_pallets, declared_weight, carrier_down),
        "meta": {"deciding_step": step},
    }


def _difficulty(f: dict[str, Any], declared_pallets: int, declared_weight: int, carrier_down: bool) -> str:
    """The level of the case's trap count (module docstring)."""
    variance, tolerance = abs(f["measured_weight"] - f["expected_weight"]) * 100, f["tolerance_pct"] * f["expected_weight"]
    traps = (
        declared_pallets != f["expected_pallets"],
        declared_weight != f["expected_weight"],
        tolerance < 2 * variance <= 2 * tolerance,
        f["temperature_class"] != "ambient",
        f["holds"] == 1,
        carrier_down,
    )
    score = sum(traps)
    return "easy" if score <= 1 else ("medium" if score <= 3 else "hard")
