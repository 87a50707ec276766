"""PatientIntake's vocabulary, tools and answer fields: what the agent sees."""

from sopgym.sop_tasks.pack import OutputField
from sopgym.sop_tasks.toolkit import lookup

DISPOSITIONS = ("ED_TRANSFER", "SELF_PAY", "REFERRAL_HOLD", "PHARMACIST_HOLD", "PROCEED")

_appt = {"type": "string", "pattern": "^APT-[0-9]{7}$"}
_patient = {"type": "string", "pattern": "^PT-[0-9]{6}$"}
_clinic = {"type": "string", "pattern": "^CLN-[A-Z]{4}$"}
TOOLS = (
    lookup(
        "get_appointment",
        "Booked appointment by id: patient id, clinic code, visit date, appointment type and attached referral id (or null).",
        {"appointment_id": _appt},
        not_found="appointment {appointment_id} not found",
    ),
    lookup(
        "get_patient",
        "Registered patient record: name, date of birth (YYYY-MM-DD), sex and the insurance member id on file.",
        {"patient_id": _patient},
        not_found="patient {patient_id} not found",
    ),
    lookup(
        "get_intake_vitals",
        "Vitals recorded by the intake nurse for an appointment: heart rate, systolic BP, SpO2 (%), "
        "temperature (degrees C), respiratory rate and pain score (0-10).",
        {"appointment_id": _appt},
        not_found="no intake vitals recorded for {appointment_id}",
    ),
    lookup(
        "get_symptom_screen",
        "Nurse symptom screen for an appointment: chest pain, stroke signs, cough, rash, vomiting (booleans).",
        {"appointment_id": _appt},
        not_found="no symptom screen recorded for {appointment_id}",
    ),
    lookup(
        "check_eligibility",
        "Insurance eligibility for a member id: coverage status, coverage end date (or null) and plan id.",
        {"member_id": {"type": "string", "pattern": "^MBR-[0-9]{8}$"}},
        not_found="no eligibility record for member {member_id}",
    ),
    lookup(
        "get_health_plan",
        "Health plan by plan id: plan type, whether specialist care needs a referral, and the office copay.",
        {"plan_id": {"type": "string", "pattern": "^PLN-[A-Z]{3}[0-9]{2}$"}},
        not_found="health plan {plan_id} not found",
    ),
    lookup(
        "get_clinic",
        "Clinic by clinic code: name, specialty and service line (primary or specialist).",
        {"clinic_code": _clinic},
        not_found="clinic {clinic_code} not found",
    ),
    lookup(
        "get_referral",
        "Referral by referral id: status, specialty, valid-until date, visits authorised and visits used.",
        {"referral_id": {"type": "string", "pattern": "^REF-[0-9]{6}$"}},
        not_found="referral {referral_id} not found",
    ),
    lookup(
        "get_allergies",
        "Recorded allergies of a patient: allergen code, allergen name, reaction and severity (mild, moderate, severe).",
        {"patient_id": _patient},
        not_found="patient {patient_id} not found",
    ),
    lookup(
        "get_active_medications",
        "Active medications of a patient: drug name, drug class, dose.",
        {"patient_id": _patient},
        not_found="patient {patient_id} not found",
    ),
    lookup(
        "lookup_allergen",
        "Allergen reference entry for an allergen code: the drug classes that cross-react with it.",
        {"allergen_code": {"type": "string", "pattern": "^ALG-[0-9]{5}$"}},
        not_found="allergen code {allergen_code} not in the reference",
    ),
    lookup(
        "get_parking_validation",
        "Parking validation status for an appointment.",
        {"appointment_id": _appt},
        distractor=True,
        not_found="no parking record for {appointment_id}",
    ),
    lookup(
        "get_provider_schedule",
        "A clinic's provider schedule for a date.",
        {"clinic_code": _clinic, "date": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"}},
        distractor=True,
        not_found="no schedule for {clinic_code} on {date}",
    ),
    lookup(
        "get_billing_balance",
        "Outstanding billing balance of a patient.",
        {"patient_id": _patient},
        distractor=True,
        not_found="patient {patient_id} not found",
    ),
)

FIELDS = (
    OutputField("disposition", enum=DISPOSITIONS, description="Intake disposition of the appointment."),
    OutputField(
        "triage_level", type="integer", enum=(1, 2, 3, 4, 5), description="Triage level, 1 (most urgent) to 5."
    ),
)
