"""PatientIntake's task generator: draw, label, records.

* **draw** (``_draw``): a visit around a target disposition (balanced over the five on val/test) and
  a target triage level: vitals and a symptom screen for the level (``_draw_vitals``, with
  lower-acuity noise and readings or birthdays on a boundary), then coverage, plan and referral,
  allergies and medications. A step that comes after the deciding one is free to hold its own
  fault (shadowed); decoys everywhere else: an old insurance card, lapsed "active" coverage, mild
  allergies, look-alike drug names, referrals that are not required;
* **label**: the generator's own decision table (``_triage`` and ``_label``);
* **records** (``_records``): ids and the replay records of every tool.

**Difficulty** (``_difficulty``) counts the traps the case holds, all drawn whatever the target
disposition (never which step decides): the insurance card at check-in naming an old member id
(whose record looks fine); coverage ending on the visit day (still valid); a referral trap (a
missing or invalid referral on a visit that needs none, or a required one valid on its last day or
for its last authorised visit); a mild intolerance to a drug class the patient takes; a look-alike
allergen and drug name; triage on a boundary (a reading on a threshold's safe side, or an age that
turns on a birthday next to the visit); the billing distractor answering with an error. ``easy``: at
most 1; ``medium``: 2; ``hard``: 3 or more. The ``difficulty_label`` check of ``sopgym
validate-domain`` keeps it from predicting the disposition.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from sopgym.sop_tasks.generation import balanced_target, record, recorded_error, records

from .tools import DISPOSITIONS

#: Allergen reference: name and the drug classes that cross-react with it.
ALLERGENS = {
    "penicillin": ("penicillins", "cephalosporins"),
    "sulfonamide antibiotics": ("sulfonamide antibiotics",),
    "ibuprofen": ("nsaids",),
    "codeine": ("opioids",),
    "lisinopril": ("ace inhibitors",),
    "erythromycin": ("macrolides",),
    "atorvastatin": ("statins",),
    "latex": (),
    "egg protein": (),
    "iodinated contrast": ("iodinated contrast media",),
}
MEDICATIONS = {
    "amoxicillin": "penicillins",
    "cefalexin": "cephalosporins",
    "sulfamethoxazole": "sulfonamide antibiotics",
    "naproxen": "nsaids",
    "ibuprofen": "nsaids",
    "tramadol": "opioids",
    "oxycodone": "opioids",
    "lisinopril": "ace inhibitors",
    "ramipril": "ace inhibitors",
    "azithromycin": "macrolides",
    "atorvastatin": "statins",
    "metformin": "biguanides",
    "levothyroxine": "thyroid hormones",
    "amlodipine": "calcium channel blockers",
    "sertraline": "ssris",
    "omeprazole": "proton pump inhibitors",
    "glipizide": "sulfonylureas",
    "furosemide": "loop diuretics",
    "penicillamine": "chelating agents",
    "losartan": "angiotensin receptor blockers",
    "iohexol": "iodinated contrast media",
}
#: Pairs whose names look related but whose classes do not cross-react (decoys).
_LOOKALIKES = (("sulfonamide antibiotics", "glipizide"), ("penicillin", "penicillamine"), ("lisinopril", "losartan"))
SPECIALTIES = ("cardiology", "dermatology", "orthopaedics", "neurology", "gastroenterology")
PRIMARY = ("family_medicine", "internal_medicine")
#: Readings that decide each triage level (``_draw_vitals``).
_TRIGGERS = {
    1: ("spo2", "sbp", "stroke"),
    2: ("spo2", "hr", "temp", "chest_old", "fever_elderly"),
    3: ("hr", "temp", "rr", "pain", "chest_young"),
    4: ("pain", "symptom"),
    5: ("none", "boundary"),
}
#: (level, trigger) -> (vital, low, high): the reading drawn in [low, high] (temperatures in tenths).
_READINGS = {
    (1, "spo2"): ("spo2_pct", 80, 87),
    (1, "sbp"): ("systolic_bp", 62, 79),
    (2, "spo2"): ("spo2_pct", 88, 91),
    (2, "hr"): ("heart_rate", 130, 165),
    (2, "temp"): ("temperature_c", 400, 414),
    (2, "fever_elderly"): ("temperature_c", 380, 399),
    (3, "hr"): ("heart_rate", 101, 129),
    (3, "temp"): ("temperature_c", 380, 399),
    (3, "rr"): ("respiratory_rate", 23, 32),
    (3, "pain"): ("pain_score", 7, 10),
    (4, "pain"): ("pain_score", 1, 6),
}
#: (level, trigger) -> the screen finding it sets.
_SYMPTOMS = {(1, "stroke"): "stroke_signs", (2, "chest_old"): "chest_pain", (3, "chest_young"): "chest_pain"}
#: (level, trigger) -> (the age on the boundary, the age range otherwise), for triggers that hang on the age.
_AGES = {
    (2, "chest_old"): (40, (40, 85)),
    (2, "fever_elderly"): (75, (75, 96)),
    (3, "temp"): (74, (18, 74)),
    (3, "chest_young"): (39, (18, 39)),
}
_REACTIONS = {
    "mild": ("nausea", "stomach upset", "mild itching"),
    "moderate": ("hives", "rash", "swelling"),
    "severe": ("anaphylaxis", "airway swelling", "severe blistering"),
}
_BOOKING_NOTES = (
    "chest tightness when climbing stairs",
    "follow-up on blood pressure",
    "skin rash for two weeks",
    "knee pain",
    "annual review",
    "dizziness",
    "medication review",
)


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = balanced_target(rng, split, index, DISPOSITIONS)
    f = _draw(rng, target)
    disposition, level, step = _label(f)
    assert disposition == target and level == f["level"], (target, f["level"], disposition, level)
    return _records(rng, f, disposition, level, step)


# -- draw ------------------------------------------------------------------------------------------
def _draw(rng: random.Random, target: str) -> dict[str, Any]:
    """The facts of one visit. Every step after the deciding one may hold a fault of its own."""
    visit = dt.date(2026, 1, 1) + dt.timedelta(days=rng.randint(0, 364))
    level = rng.choice((1, 2)) if target == "ED_TRANSFER" else rng.choice((3, 4, 5))
    vitals, screen, dob, tricky = _draw_vitals(level, rng, visit)
    f: dict[str, Any] = {"visit": visit, "dob": dob, "vitals": vitals, "screen": screen, "level": level, "tricky": tricky}
    shadowed = target == "ED_TRANSFER"
    _draw_coverage(rng, f, faulty=target == "SELF_PAY" or (shadowed and rng.random() < 0.3))
    shadowed = shadowed or target == "SELF_PAY"
    hold = target == "REFERRAL_HOLD" or (shadowed and rng.random() < 0.3)
    _draw_referral(rng, f, hold)
    shadowed = shadowed or hold
    _draw_medication(rng, f, conflict=target == "PHARMACIST_HOLD" or (shadowed and rng.random() < 0.4))
    return f


def _draw_vitals(level: int, rng: random.Random, visit: dt.date) -> tuple[dict, dict, dt.date, bool]:
    """Vitals, screen and date of birth whose triage level is ``level`` (with lower-acuity noise).

    The flag is True when the level hangs on a boundary (an age that turns on a birthday next to the
    visit date, or a reading exactly on a threshold's safe side).
    """
    v = {
        "heart_rate": rng.randint(58, 96),
        "systolic_bp": rng.randint(100, 150),
        "spo2_pct": rng.randint(95, 100),
        "temperature_c": rng.randint(361, 375) / 10,
        "respiratory_rate": rng.randint(12, 20),
        "pain_score": 0,
    }
    s = {"chest_pain": False, "stroke_signs": False, "cough": False, "rash": False, "vomiting": False}
    age = rng.randint(18, 88)
    trigger = rng.choice(_TRIGGERS[level])
    age, near_birthday = _apply_trigger(rng, v, s, level, trigger, age)
    # Lower-acuity noise that must not change the level.
    if level <= 3 and rng.random() < 0.5:
        if rng.random() < 0.5:
            v["pain_score"] = max(v["pain_score"], rng.randint(1, 6))
        else:
            s[rng.choice(("cough", "rash", "vomiting"))] = True
    if level <= 2 and rng.random() < 0.4 and trigger not in ("hr",):
        v["heart_rate"] = max(v["heart_rate"], rng.randint(101, 129))
    dob = _date_of_birth(rng, visit, age, near_birthday, older=trigger in ("chest_old", "fever_elderly"))
    return v, s, dob, near_birthday or trigger == "boundary"


def _apply_trigger(rng: random.Random, v: dict, s: dict, level: int, trigger: str, age: int) -> tuple[int, bool]:
    """Set the reading ``trigger`` names for ``level``. Returns (age, whether it sits on a birthday)."""
    near_birthday = False
    reading = _READINGS.get((level, trigger))
    if reading is not None:
        key, lo, hi = reading
        v[key] = rng.randint(lo, hi) / 10 if key == "temperature_c" else rng.randint(lo, hi)
    symptom = _SYMPTOMS.get((level, trigger))
    if symptom is not None:
        s[symptom] = True
    elif (level, trigger) == (4, "symptom"):
        s[rng.choice(("cough", "rash", "vomiting"))] = True
    if (level, trigger) in _AGES:
        boundary, (lo, hi) = _AGES[level, trigger]
        age, near_birthday = (boundary, True) if rng.random() < 0.4 else (rng.randint(lo, hi), False)
    if level == 3 and age >= 75 and trigger != "temp":
        v["temperature_c"] = min(v["temperature_c"], 37.5)
    if trigger == "boundary":  # every reading on the safe side of a boundary
        key = rng.choice(("heart_rate", "spo2_pct", "respiratory_rate", "temperature_c"))
        v[key] = {"heart_rate": 100, "spo2_pct": 92, "respiratory_rate": 22, "temperature_c": 37.9}[key]
    return age, near_birthday


def _date_of_birth(rng: random.Random, visit: dt.date, age: int, near_birthday: bool, older: bool) -> dt.date:
    """A date of birth giving exactly ``age`` on the visit date. ``near_birthday``: the birthday falls
    within a couple of days of the visit (on or just before it when ``older``, just after it otherwise)."""
    if near_birthday:
        shift = rng.choice((0, -1, -2)) if older else rng.choice((1, 2))
        birthday = visit + dt.timedelta(days=shift)
        years = age if older else age + 1
        return _safe_date(birthday.year - years, birthday.month, birthday.day)
    dob = _safe_date(visit.year - age - 1, rng.randint(1, 12), rng.randint(1, 28)) + dt.timedelta(days=rng.randint(0, 364))
    while _age(dob, visit) > age:
        dob += dt.timedelta(days=30)
    while _age(dob, visit) < age:
        dob -= dt.timedelta(days=30)
    return dob


def _safe_date(year: int, month: int, day: int) -> dt.date:
    try:
        return dt.date(year, month, day)
    except ValueError:  # 29 February in a non-leap year
        return dt.date(year, month, 28)


def _draw_coverage(rng: random.Random, f: dict[str, Any], faulty: bool) -> None:
    """Step 6's facts: coverage that fails (terminated, suspended, or "active" but lapsed) or holds."""
    visit = f["visit"]
    if faulty:
        kind = rng.choice(("terminated", "suspended", "lapsed"))
        f["coverage_status"] = "active" if kind == "lapsed" else kind
        f["coverage_end"] = visit - dt.timedelta(days=rng.randint(1, 90))
        if kind != "lapsed" and rng.random() < 0.3:
            f["coverage_end"] = None if kind == "suspended" else f["coverage_end"]
    else:
        f["coverage_status"] = "active"
        f["coverage_end"] = rng.choice((None, visit, visit + dt.timedelta(days=rng.randint(1, 400))))


def _draw_referral(rng: random.Random, f: dict[str, Any], hold: bool) -> None:
    """Step 7's facts: plan, clinic and referral. ``hold``: a specialist visit whose plan needs a
    referral that is missing or invalid; otherwise an invalid referral appears only where none is needed."""
    visit = f["visit"]
    if hold:
        f["referral_required"], f["service_line"] = True, "specialist"
    else:
        f["referral_required"], f["service_line"] = rng.choice(
            ((True, "specialist"), (True, "primary"), (False, "specialist"), (True, "specialist"))
        )
    f["specialty"] = rng.choice(SPECIALTIES) if f["service_line"] == "specialist" else rng.choice(PRIMARY)
    good = {
        "status": "approved",
        "specialty": f["specialty"] if f["service_line"] == "specialist" else rng.choice(SPECIALTIES),
        "valid_until": visit + dt.timedelta(days=rng.choice((0, rng.randint(1, 120)))),
        "authorised": rng.randint(1, 6),
    }
    good["used"] = rng.randint(0, good["authorised"] - 1)
    needed = f["referral_required"] and f["service_line"] == "specialist"
    if hold or (not needed and rng.random() < 0.5):  # an invalid (or missing) referral
        fault = rng.choice(("missing", "status", "specialty", "expired", "exhausted"))
        f["referral"] = None if fault == "missing" else dict(good)
        if fault == "status":
            f["referral"]["status"] = rng.choice(("pending", "denied"))
        elif fault == "specialty":
            f["referral"]["specialty"] = rng.choice([x for x in SPECIALTIES if x != good["specialty"]])
        elif fault == "expired":
            f["referral"]["valid_until"] = visit - dt.timedelta(days=rng.randint(1, 60))
        elif fault == "exhausted":
            f["referral"]["used"] = f["referral"]["authorised"]
    else:
        f["referral"] = good


def _draw_medication(rng: random.Random, f: dict[str, Any], conflict: bool) -> None:
    """Step 8's facts: allergies and active medications, with a moderate/severe cross-reaction when
    ``conflict``, and decoys (a mild intolerance, a look-alike name) either way."""
    meds: list[str] = []
    allergies: list[tuple[str, str]] = []
    if conflict:
        name = rng.choice([a for a, classes in ALLERGENS.items() if classes])
        cls = rng.choice(ALLERGENS[name])
        meds.append(rng.choice([m for m, c in MEDICATIONS.items() if c == cls]))
        allergies.append((name, rng.choice(("moderate", "severe"))))
    decoy = rng.random()
    if decoy < 0.35:  # a mild intolerance to a drug class the patient takes
        name = rng.choice([a for a, classes in ALLERGENS.items() if classes and a not in {x for x, _ in allergies}])
        meds.append(rng.choice([m for m, c in MEDICATIONS.items() if c in ALLERGENS[name]]))
        allergies.append((name, "mild"))
    elif decoy < 0.7:  # a look-alike name that does not cross-react
        name, med = rng.choice(_LOOKALIKES)
        if name not in {x for x, _ in allergies}:
            allergies.append((name, rng.choice(("moderate", "severe"))))
            meds.append(med)
    taken_classes = {MEDICATIONS[m] for m in meds}
    others = [a for a in ALLERGENS if a not in {x for x, _ in allergies}]
    for name in rng.sample(others, rng.randint(0, 2)):
        if not set(ALLERGENS[name]) & taken_classes or conflict:
            allergies.append((name, rng.choice(("mild", "moderate", "severe"))))
    allergy_classes = {c for a, sev in allergies if sev != "mild" for c in ALLERGENS[a]}
    for med in rng.sample(sorted(MEDICATIONS), rng.randint(0, 3)):
        if med not in meds and (MEDICATIONS[med] not in allergy_classes or conflict):
            meds.append(med)
    rng.shuffle(allergies)
    rng.shuffle(meds)
    f["allergies"], f["medications"] = allergies, meds


# -- label -----------------------------------------------------------------------------------------
def _age(dob: dt.date, on: dt.date) -> int:
    return on.year - dob.year - ((on.month, on.day) < (dob.month, dob.day))


def _triage(v: dict[str, Any], s: dict[str, Any], age: int) -> int:
    """Triage level from vitals, screen and age, as a table (temperatures in tenths)."""
    t = round(v["temperature_c"] * 10)
    if v["spo2_pct"] < 88 or v["systolic_bp"] < 80 or s["stroke_signs"]:
        return 1
    if (
        88 <= v["spo2_pct"] <= 91
        or v["heart_rate"] >= 130
        or t >= 400
        or (s["chest_pain"] and age >= 40)
        or (t >= 380 and age >= 75)
    ):
        return 2
    if (
        101 <= v["heart_rate"] <= 129
        or 380 <= t <= 399
        or v["respiratory_rate"] > 22
        or v["pain_score"] >= 7
        or s["chest_pain"]
    ):
        return 3
    if 1 <= v["pain_score"] <= 6 or s["cough"] or s["rash"] or s["vomiting"]:
        return 4
    return 5


def _label(f: dict[str, Any]) -> tuple[str, int, int]:
    """(disposition, triage level, deciding step)."""
    level = _triage(f["vitals"], f["screen"], _age(f["dob"], f["visit"]))
    if level <= 2:
        return "ED_TRANSFER", level, 5
    end = f["coverage_end"]
    if f["coverage_status"] != "active" or (end is not None and end < f["visit"]):
        return "SELF_PAY", level, 6
    if f["referral_required"] and f["service_line"] == "specialist":
        r = f["referral"]
        if r is None or not (
            r["status"] == "approved"
            and r["specialty"] == f["specialty"]
            and r["valid_until"] >= f["visit"]
            and r["used"] < r["authorised"]
        ):
            return "REFERRAL_HOLD", level, 7
    classes = {MEDICATIONS[m] for m in f["medications"]}
    if any(sev != "mild" and classes & set(ALLERGENS[name]) for name, sev in f["allergies"]):
        return "PHARMACIST_HOLD", level, 8
    return "PROCEED", level, 9


# -- records ---------------------------------------------------------------------------------------
def _records(rng: random.Random, f: dict[str, Any], disposition: str, level: int, step: int) -> dict[str, Any]:
    visit, allergies, meds = f["visit"], f["allergies"], f["medications"]
    appointment_id = f"APT-{rng.randint(0, 9999999):07d}"
    patient_id = f"PT-{rng.randint(0, 999999):06d}"
    member_id = f"MBR-{rng.randint(0, 99999999):08d}"
    card_member_id = member_id if rng.random() < 0.5 else f"MBR-{rng.randint(0, 99999999):08d}"
    plan_id = f"PLN-{''.join(rng.choice('ABCDEFGHJKLMNPRSTUVWXYZ') for _ in range(3))}{rng.randint(10, 99)}"
    clinic_code = "CLN-" + "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(4))
    referral_id = None if f["referral"] is None else f"REF-{rng.randint(0, 999999):06d}"
    day = visit.isoformat()
    codes = {name: f"ALG-{n:05d}" for (name, _), n in zip(allergies, rng.sample(range(100000), len(allergies)))}
    replay: dict[str, dict[str, Any]] = {
        "get_appointment": record({"appointment_id": appointment_id}, {
            "appointment_id": appointment_id,
            "patient_id": patient_id,
            "clinic_code": clinic_code,
            "visit_date": day,
            "appointment_type": rng.choice(("new_patient", "follow_up")),
            "referral_id": referral_id,
        }),
        "get_patient": record({"patient_id": patient_id}, {
            "patient_id": patient_id,
            "name": rng.choice(("A. Moreno", "J. Okafor", "L. Chen", "R. Singh", "M. Novak", "S. Haddad")),
            "date_of_birth": f["dob"].isoformat(),
            "sex": rng.choice(("F", "M")),
            "insurance_member_id": member_id,
        }),
        "get_intake_vitals": record({"appointment_id": appointment_id}, {"appointment_id": appointment_id, **f["vitals"]}),
        "get_symptom_screen": record({"appointment_id": appointment_id}, {"appointment_id": appointment_id, **f["screen"]}),
        "check_eligibility": record({"member_id": member_id}, {
            "member_id": member_id,
            "coverage_status": f["coverage_status"],
            "coverage_end": None if f["coverage_end"] is None else f["coverage_end"].isoformat(),
            "plan_id": plan_id,
        }),
        "get_health_plan": record({"plan_id": plan_id}, {
            "plan_id": plan_id,
            "plan_type": "HMO" if f["referral_required"] else rng.choice(("PPO", "EPO")),
            "specialist_referral_required": f["referral_required"],
            "office_copay_usd": rng.choice((0, 15, 25, 40, 60)),
        }),
        "get_clinic": record({"clinic_code": clinic_code}, {
            "clinic_code": clinic_code,
            "name": f"{f['specialty'].replace('_', ' ').title()} Clinic {rng.randint(1, 9)}",
            "specialty": f["specialty"],
            "service_line": f["service_line"],
        }),
        "get_allergies": record({"patient_id": patient_id}, {
            "patient_id": patient_id,
            "allergies": [
                {
                    "allergen_code": codes[name],
                    "allergen_name": name,
                    "reaction": rng.choice(_REACTIONS[sev]),
                    "severity": sev,
                }
                for name, sev in allergies
            ],
        }),
        "get_active_medications": record({"patient_id": patient_id}, {
            "patient_id": patient_id,
            "medications": [
                {
                    "drug_name": m,
                    "drug_class": MEDICATIONS[m],
                    "dose": f"{rng.choice((5, 10, 20, 25, 50, 100, 250, 500))} mg",
                }
                for m in meds
            ],
        }),
        "lookup_allergen": records(
            ({"allergen_code": code},
             {"allergen_code": code, "allergen_name": name, "cross_reactive_classes": list(ALLERGENS[name])})
            for name, code in codes.items()
        ),
        "get_parking_validation": record({"appointment_id": appointment_id}, {
            "appointment_id": appointment_id,
            "validated": rng.random() < 0.5,
        }),
        "get_provider_schedule": record({"clinic_code": clinic_code, "date": day}, {
            "clinic_code": clinic_code,
            "date": day,
            "open_slots": rng.randint(0, 12),
        }),
        "get_billing_balance": record({"patient_id": patient_id}, {
            "patient_id": patient_id,
            "balance_usd": rng.choice((0, 0, round(rng.uniform(10, 900), 2))),
        }),
    }
    if referral_id is not None:
        r = f["referral"]
        replay["get_referral"] = record({"referral_id": referral_id}, {
            "referral_id": referral_id,
            "patient_id": patient_id,
            "status": r["status"],
            "specialty": r["specialty"],
            "valid_until": r["valid_until"].isoformat(),
            "visits_authorised": r["authorised"],
            "visits_used": r["used"],
        })
    if card_member_id != member_id:  # the old card's record: always looks fine (a trap)
        replay["check_eligibility"].update(record({"member_id": card_member_id}, {
            "member_id": card_member_id,
            "coverage_status": "active",
            "coverage_end": None,
            "plan_id": plan_id,
        }))
    billing_down = rng.random() < 0.15
    if billing_down:  # the billing system is occasionally down: a distractor's error must not matter
        replay["get_billing_balance"] = record({"patient_id": patient_id}, recorded_error("billing system unavailable"))
    return {
        "inputs": {
            "appointment_id": appointment_id,
            "checked_in_at": f"{day}T{rng.randint(7, 17):02d}:{rng.randint(0, 59):02d}",
            "insurance_card_member_id": card_member_id,
            "booking_note": rng.choice(_BOOKING_NOTES),
        },
        "answer": {"disposition": disposition, "triage_level": level},
        "replay": replay,
        "difficulty": _difficulty(f, card_member_id != member_id, billing_down),
        "meta": {"deciding_step": step},
    }


def _difficulty(f: dict[str, Any], old_card: bool, billing_down: bool) -> str:
    """The level of the case's trap count (module docstring)."""
    visit, r = f["visit"], f["referral"]
    needed = f["referral_required"] and f["service_line"] == "specialist"
    valid = r is not None and (
        r["status"] == "approved" and r["specialty"] == f["specialty"] and r["valid_until"] >= visit and r["used"] < r["authorised"]
    )
    taken = {MEDICATIONS[m] for m in f["medications"]}
    traps = (
        old_card,
        f["coverage_end"] == visit,
        not valid if not needed else valid and (r["valid_until"] == visit or r["used"] == r["authorised"] - 1),
        any(sev == "mild" and taken & set(ALLERGENS[name]) for name, sev in f["allergies"]),
        any((name, med) in _LOOKALIKES for name, _ in f["allergies"] for med in f["medications"]),
        f["tricky"],
        billing_down,
    )
    score = sum(traps)
    return "easy" if score <= 1 else ("medium" if score == 2 else "hard")
