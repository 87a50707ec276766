"""PatientIntake's reference solver: SOP PI-4 as written, every fact read through the tools.
It never imports ``generator.py``."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sopgym.sop_tasks.pack import ToolCall, expect


def solve(inputs: dict[str, Any]):
    appt = expect((yield ToolCall("get_appointment", {"appointment_id": inputs["appointment_id"]})))
    patient = expect((yield ToolCall("get_patient", {"patient_id": appt["patient_id"]})))
    age = _completed_years(patient["date_of_birth"], appt["visit_date"])
    vitals = expect((yield ToolCall("get_intake_vitals", {"appointment_id": inputs["appointment_id"]})))
    screen = expect((yield ToolCall("get_symptom_screen", {"appointment_id": inputs["appointment_id"]})))
    level = _level(vitals, screen, age)
    if level <= 2:
        return {"disposition": "ED_TRANSFER", "triage_level": level}
    elig = expect((yield ToolCall("check_eligibility", {"member_id": patient["insurance_member_id"]})))
    if elig["coverage_status"] != "active" or (
        elig["coverage_end"] is not None and elig["coverage_end"] < appt["visit_date"]
    ):
        return {"disposition": "SELF_PAY", "triage_level": level}
    plan = expect((yield ToolCall("get_health_plan", {"plan_id": elig["plan_id"]})))
    clinic = expect((yield ToolCall("get_clinic", {"clinic_code": appt["clinic_code"]})))
    if plan["specialist_referral_required"] and clinic["service_line"] == "specialist":
        if appt["referral_id"] is None:
            return {"disposition": "REFERRAL_HOLD", "triage_level": level}
        ref = expect((yield ToolCall("get_referral", {"referral_id": appt["referral_id"]})))
        valid = (
            ref["status"] == "approved"
            and ref["specialty"] == clinic["specialty"]
            and ref["valid_until"] >= appt["visit_date"]
            and ref["visits_used"] < ref["visits_authorised"]
        )
        if not valid:
            return {"disposition": "REFERRAL_HOLD", "triage_level": level}
    allergies = expect((yield ToolCall("get_allergies", {"patient_id": appt["patient_id"]})))
    meds = expect((yield ToolCall("get_active_medications", {"patient_id": appt["patient_id"]})))
    taking = {m["drug_class"] for m in meds["medications"]}
    for allergy in allergies["allergies"]:
        if allergy["severity"] not in ("moderate", "severe"):
            continue
        ref = expect((yield ToolCall("lookup_allergen", {"allergen_code": allergy["allergen_code"]})))
        if taking.intersection(ref["cross_reactive_classes"]):
            return {"disposition": "PHARMACIST_HOLD", "triage_level": level}
    return {"disposition": "PROCEED", "triage_level": level}


def _completed_years(born: str, on: str) -> int:
    b, d = dt.date.fromisoformat(born), dt.date.fromisoformat(on)
    years = d.year - b.year
    if (d.month, d.day) < (b.month, b.day):
        years -= 1
    return years


def _level(v: dict[str, Any], s: dict[str, Any], age: int) -> int:
    """SOP step 4: the most urgent level any criterion assigns."""
    tenths = round(v["temperature_c"] * 10)
    levels = [5]
    if v["spo2_pct"] < 88 or v["systolic_bp"] < 80 or s["stroke_signs"]:
        levels.append(1)
    if v["spo2_pct"] in range(88, 92) or v["heart_rate"] >= 130 or tenths >= 400:
        levels.append(2)
    if s["chest_pain"]:
        levels.append(2 if age >= 40 else 3)
    if tenths >= 380:
        levels.append(2 if age >= 75 else 3)
    if v["heart_rate"] in range(101, 130) or v["respiratory_rate"] > 22 or v["pain_score"] >= 7:
        levels.append(3)
    if v["pain_score"] in range(1, 7) or s["cough"] or s["rash"] or s["vomiting"]:
        levels.append(4)
    return min(levels)
