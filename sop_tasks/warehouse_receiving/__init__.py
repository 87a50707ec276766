"""WarehouseReceiving: inbound receiving inspection (SOP WR-7). Replay tier only.

The generator builds a shipment's facts around a target disposition (balanced over the five
dispositions), adds faults that later SOP steps would catch but an earlier step shadows, and labels
the task with its own decision table (``_label``). The reference solver (``solve``) re-implements
the SOP from the text, reading every fact through the tools, and never calls ``_label``.
"""

from __future__ import annotations

import random
from typing import Any

from sopgym.sandboxes import ERROR_KEY, ToolSpec, canonical_args
from sopgym.sop_tasks.pack import DomainPack, OutputField, ToolCall, ToolError, read_text

DISPOSITIONS = ("ACCEPT", "ACCEPT_WITH_NOTE", "PARTIAL_REJECT", "QUARANTINE", "REJECT")
REASONS = (
    "NONE", "NO_APPOINTMENT", "PO_INVALID", "SEAL_MISMATCH", "TEMP_REVIEW", "TEMP_EXCURSION", "WEIGHT_VARIANCE",
    "DAMAGE", "COUNT_DISCREPANCY", "SUPPLIER_WATCH",
)
_TARGETS = {
    "ACCEPT": ("NONE",),
    "ACCEPT_WITH_NOTE": ("COUNT_DISCREPANCY", "SUPPLIER_WATCH"),
    "PARTIAL_REJECT": ("DAMAGE",),
    "QUARANTINE": ("SEAL_MISMATCH", "TEMP_REVIEW", "WEIGHT_VARIANCE"),
    "REJECT": ("NO_APPOINTMENT", "PO_INVALID", "TEMP_EXCURSION", "DAMAGE"),
}
ZONES = ("A", "B", "C", "COLD-1", "COLD-2")

_id = {"type": "string", "minLength": 1}
TOOLS = (
    ToolSpec(
        "get_dock_appointment",
        "The appointment booked at a dock door on a date (YYYY-MM-DD): appointment id, shipment id, time window.",
        {"type": "object", "properties": {"dock_door": {"type": "string", "pattern": "^D[0-9]{2}$"},
                                          "date": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"}},
         "required": ["dock_door", "date"]},
        not_found="no appointment at dock door {dock_door} on {date}",
    ),
    ToolSpec(
        "get_shipment",
        "Shipment record (advance ship notice) for a shipment id: PO number, supplier id, carrier id, "
        "declared seal number, temperature class and the carrier's declared pallets and weight.",
        {"type": "object", "properties": {"shipment_id": {"type": "string", "pattern": "^SHP-[0-9]{6}$"}}, "required": ["shipment_id"]},
        not_found="shipment {shipment_id} not found",
    ),
    ToolSpec(
        "get_purchase_order",
        "Purchase order by PO number: status, expected pallets, expected weight (kg) and weight tolerance (%).",
        {"type": "object", "properties": {"po_number": {"type": "string", "pattern": "^PO-[0-9]{6}$"}}, "required": ["po_number"]},
        not_found="purchase order {po_number} not found",
    ),
    ToolSpec(
        "get_dock_scan",
        "What the dock team measured for a shipment: counted pallets, measured weight (kg), seal intact, "
        "seal number read, damaged pallets, product temperature (degrees C, null when not probed).",
        {"type": "object", "properties": {"shipment_id": {"type": "string", "pattern": "^SHP-[0-9]{6}$"}}, "required": ["shipment_id"]},
        not_found="no dock scan recorded for shipment {shipment_id}",
    ),
    ToolSpec(
        "get_supplier_profile",
        "Supplier profile: tier (preferred, standard, probation) and number of open quality holds.",
        {"type": "object", "properties": {"supplier_id": {"type": "string", "pattern": "^SUP-[0-9]{4}$"}}, "required": ["supplier_id"]},
        not_found="supplier {supplier_id} not found",
    ),
    ToolSpec(
        "get_carrier_rating",
        "On-time rating and claims ratio of a carrier.",
        {"type": "object", "properties": {"carrier_id": _id}, "required": ["carrier_id"]},
        distractor=True,
        not_found="carrier {carrier_id} not found",
    ),
    ToolSpec(
        "get_storage_capacity",
        "Free pallet positions in a storage zone.",
        {"type": "object", "properties": {"zone": {"type": "string", "enum": list(ZONES)}}, "required": ["zone"]},
        distractor=True,
    ),
    ToolSpec(
        "get_yard_weather",
        "Yard weather observation for a date (YYYY-MM-DD).",
        {"type": "object", "properties": {"date": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"}}, "required": ["date"]},
        distractor=True,
        not_found="no weather observation for {date}",
    ),
)

FIELDS = (
    OutputField("disposition", enum=DISPOSITIONS, description="Final disposition of the shipment."),
    OutputField("reason_code", enum=REASONS, description="The SOP reason code that decided the disposition."),
    OutputField("accepted_pallets", type="integer", description="Pallets that enter stock (SOP section 4)."),
)


# ---------------------------------------------------------------------------------------------
# Generator: facts built around a target, labelled by a decision table.
# ---------------------------------------------------------------------------------------------
def _tenths(x: float) -> int:
    return round(x * 10)


def _label(f: dict[str, Any]) -> tuple[str, str, int]:
    """(disposition, reason, deciding step) from the facts, as a decision table."""
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
            tt = _tenths(t)
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


def _inject(f: dict[str, Any], reason: str, disposition: str, rng: random.Random) -> None:
    if reason == "NO_APPOINTMENT":
        f["appointment_ok"] = False
    elif reason == "PO_INVALID":
        f["po_status"] = rng.choice(("cancelled", "closed"))
    elif reason == "SEAL_MISMATCH":
        if rng.random() < 0.5:
            f["seal_intact"] = False
        else:  # a one-character difference: read carefully
            s = f["seal_declared"]
            i = rng.randrange(2, len(s))
            f["seal_read"] = s[:i] + str((int(s[i]) + rng.randint(1, 9)) % 10) + s[i + 1:]
    elif reason in ("TEMP_REVIEW", "TEMP_EXCURSION"):
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
    elif reason == "WEIGHT_VARIANCE":
        over = f["expected_weight"] * f["tolerance_pct"] // 100 + rng.randint(1, 400)
        f["measured_weight"] = f["expected_weight"] + rng.choice((-1, 1)) * over
    elif reason == "DAMAGE":
        limit = f["counted"] // 4  # damaged <= limit is partial
        f["damaged"] = rng.randint(limit + 1, f["counted"]) if disposition == "REJECT" else rng.randint(1, max(1, limit))
        if disposition == "PARTIAL_REJECT" and f["damaged"] * 4 > f["counted"]:
            f["counted"] = f["expected_pallets"] = max(f["counted"], f["damaged"] * 4)
    elif reason == "COUNT_DISCREPANCY":
        f["counted"] = max(1, f["expected_pallets"] + rng.choice((-3, -2, -1, 1, 2)))
    elif reason == "SUPPLIER_WATCH":
        if rng.random() < 0.5:
            f["tier"] = "probation"
        else:
            f["holds"] = rng.randint(2, 4)
    # Shadowed noise: a fault that only a later step would catch (it must not change the label).
    if rng.random() < 0.5:
        noise = rng.choice(("count", "holds", "declared"))
        if noise == "count" and reason in ("NO_APPOINTMENT", "PO_INVALID", "SEAL_MISMATCH", "TEMP_REVIEW", "TEMP_EXCURSION", "WEIGHT_VARIANCE"):
            f["counted"] = f["expected_pallets"] + 1
        elif noise == "holds":
            f["holds"] = max(f["holds"], 2) if reason != "NONE" else f["holds"]


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    disposition = DISPOSITIONS[index % len(DISPOSITIONS)] if split != "train" else rng.choice(DISPOSITIONS)
    reason = rng.choice(_TARGETS[disposition])
    f = _clean(rng)
    _inject(f, reason, disposition, rng)
    label_disp, label_reason, step = _label(f)
    accepted = {"REJECT": 0, "QUARANTINE": 0, "PARTIAL_REJECT": f["counted"] - f["damaged"]}.get(label_disp, f["counted"])

    shipment_id = f"SHP-{rng.randint(0, 999999):06d}"
    po_number = f"PO-{rng.randint(0, 999999):06d}"
    supplier_id = f"SUP-{rng.randint(0, 9999):04d}"
    carrier_id = rng.choice(("CARR-NORTHLINE", "CARR-BLUEPEAK", "CARR-RIVERTON", "CARR-SWIFTWAY"))
    date = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    dock_door = f"D{rng.randint(1, 24):02d}"
    hour = rng.randint(5, 21)
    appointment = {
        "appointment_id": f"APT-{rng.randint(0, 99999):05d}", "dock_door": dock_door, "date": date,
        "shipment_id": shipment_id, "window": f"{hour:02d}:00-{hour + 2:02d}:00",
    }
    appointments = {canonical_args({"dock_door": dock_door, "date": date}): appointment}
    if not f["appointment_ok"]:
        if rng.random() < 0.5:  # booked for another trailer: a near-identical shipment id
            other = f"SHP-{(int(shipment_id[4:]) + rng.randint(1, 9)) % 1000000:06d}"
            appointments = {canonical_args({"dock_door": dock_door, "date": date}): {**appointment, "shipment_id": other}}
        else:  # booked the day before
            appointments = {}
    # The carrier's declaration disagrees with the PO half the time: a trap for shortcuts.
    declared_pallets = f["expected_pallets"] + rng.choice((0, 0, 1, -1, 2))
    declared_weight = f["expected_weight"] + rng.choice((0, 0, 150, -200, 600))
    replay = {
        "get_dock_appointment": appointments,
        "get_shipment": {canonical_args({"shipment_id": shipment_id}): {
            "shipment_id": shipment_id, "po_number": po_number, "supplier_id": supplier_id,
            "carrier_id": carrier_id, "declared_seal_number": f["seal_declared"],
            "temperature_class": f["temperature_class"], "declared_pallets": declared_pallets,
            "declared_weight_kg": declared_weight, "ship_date": date,
        }},
        "get_purchase_order": {canonical_args({"po_number": po_number}): {
            "po_number": po_number, "status": f["po_status"], "expected_pallets": f["expected_pallets"],
            "expected_weight_kg": f["expected_weight"], "weight_tolerance_pct": f["tolerance_pct"],
        }},
        "get_dock_scan": {canonical_args({"shipment_id": shipment_id}): {
            "shipment_id": shipment_id, "counted_pallets": f["counted"], "measured_weight_kg": f["measured_weight"],
            "seal_intact": f["seal_intact"], "seal_number_read": f["seal_read"] if f["seal_intact"] else None,
            "damaged_pallets": f["damaged"], "temperature_c": f["temperature_c"],
        }},
        "get_supplier_profile": {canonical_args({"supplier_id": supplier_id}): {
            "supplier_id": supplier_id, "tier": f["tier"], "open_quality_holds": f["holds"],
        }},
        "get_carrier_rating": {canonical_args({"carrier_id": carrier_id}): {
            "carrier_id": carrier_id, "on_time_pct": rng.randint(70, 99), "claims_ratio": round(rng.uniform(0, 0.08), 3),
        }},
        "get_storage_capacity": {canonical_args({"zone": z}): {"zone": z, "free_positions": rng.randint(0, 400)} for z in ZONES},
        "get_yard_weather": {canonical_args({"date": date}): {"date": date, "condition": rng.choice(("clear", "rain", "snow", "wind"))}},
    }
    if rng.random() < 0.1:  # the supplier master is occasionally offline for a stale id
        replay["get_carrier_rating"] = {canonical_args({"carrier_id": carrier_id}): {ERROR_KEY: "carrier rating service unavailable"}}
    difficulty = "easy" if step <= 5 else ("medium" if step <= 8 else "hard")
    if label_reason == "TEMP_REVIEW":
        difficulty = "hard"
    return {
        "inputs": {"shipment_id": shipment_id, "dock_door": dock_door, "arrived_at": f"{date}T{hour:02d}:{rng.randint(0, 59):02d}"},
        "answer": {"disposition": label_disp, "reason_code": label_reason, "accepted_pallets": accepted},
        "replay": replay,
        "difficulty": difficulty,
        "meta": {"deciding_step": step},
    }


# ---------------------------------------------------------------------------------------------
# Reference solver: the SOP as written, facts only from tools.
# ---------------------------------------------------------------------------------------------
def _temp_out_by_tenths(cls: str, temp: float | None) -> int | None:
    """How far (tenths of a degree) a reading is outside its class's range; None if not probed."""
    if temp is None:
        return None
    t = round(temp * 10)
    if cls == "chilled":
        return max(0, 0 - t, t - 50)
    return max(0, t + 150)


def _decide(inputs: dict[str, Any]):
    """SOP section 2, step by step. Returns (disposition, reason, dock scan or None)."""
    appointment = yield ToolCall("get_dock_appointment", {"dock_door": inputs["dock_door"], "date": inputs["arrived_at"][:10]})
    if isinstance(appointment, ToolError) or appointment["shipment_id"] != inputs["shipment_id"]:
        return "REJECT", "NO_APPOINTMENT", None
    shipment = yield ToolCall("get_shipment", {"shipment_id": inputs["shipment_id"]})
    po = yield ToolCall("get_purchase_order", {"po_number": shipment["po_number"]})
    if po["status"] in ("cancelled", "closed"):
        return "REJECT", "PO_INVALID", None
    scan = yield ToolCall("get_dock_scan", {"shipment_id": inputs["shipment_id"]})
    if not scan["seal_intact"] or scan["seal_number_read"] != shipment["declared_seal_number"]:
        return "QUARANTINE", "SEAL_MISMATCH", scan
    supplier = None
    cls = shipment["temperature_class"]
    if cls in ("chilled", "frozen"):
        out = _temp_out_by_tenths(cls, scan["temperature_c"])
        if out is None or out > 0:
            supplier = yield ToolCall("get_supplier_profile", {"supplier_id": shipment["supplier_id"]})
            if out is not None and out <= 10 and supplier["tier"] == "preferred":
                return "QUARANTINE", "TEMP_REVIEW", scan
            return "REJECT", "TEMP_EXCURSION", scan
    expected = po["expected_weight_kg"]
    if abs(scan["measured_weight_kg"] - expected) * 100 > po["weight_tolerance_pct"] * expected:
        return "QUARANTINE", "WEIGHT_VARIANCE", scan
    damaged, counted = scan["damaged_pallets"], scan["counted_pallets"]
    if damaged / counted > 0.25:
        return "REJECT", "DAMAGE", scan
    if damaged >= 1:
        return "PARTIAL_REJECT", "DAMAGE", scan
    if counted != po["expected_pallets"]:
        return "ACCEPT_WITH_NOTE", "COUNT_DISCREPANCY", scan
    if supplier is None:
        supplier = yield ToolCall("get_supplier_profile", {"supplier_id": shipment["supplier_id"]})
    if supplier["tier"] == "probation" or supplier["open_quality_holds"] >= 2:
        return "ACCEPT_WITH_NOTE", "SUPPLIER_WATCH", scan
    return "ACCEPT", "NONE", scan


def solve(inputs: dict[str, Any]):
    disposition, reason, scan = yield from _decide(inputs)
    if disposition in ("REJECT", "QUARANTINE"):
        accepted = 0
    elif disposition == "PARTIAL_REJECT":
        accepted = scan["counted_pallets"] - scan["damaged_pallets"]
    else:
        accepted = scan["counted_pallets"]
    return {"disposition": disposition, "reason_code": reason, "accepted_pallets": accepted}


PACK = DomainPack(
    name="WarehouseReceiving",
    version=0,
    title="Warehouse receiving inspection",
    theme="warehouse receiving inspection",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    human_steps=6,  # appointment, shipment, PO, dock scan, supplier, submit
    generate=generate,
    solver=solve,
)
