"""PatientIntake: outpatient front-desk intake and triage (SOP PI-4). Replay tier only.

The agent triages from the intake vitals and the nurse's symptom screen (an age computed exactly
from the date of birth), then checks coverage, the plan's referral rule against the clinic and the
referral, and allergy cross-reactions against the active medications.
"""

from sopgym.sop_tasks.pack import DomainPack, read_text

from .generator import generate
from .solver import solve
from .tools import FIELDS, TOOLS

PACK = DomainPack(
    name="PatientIntake",
    version=0,
    title="Outpatient patient intake and triage",
    theme="patient intake",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    human_steps=11,  # appointment, patient, vitals, screen, eligibility, plan, clinic, referral, allergies, medications, submit
    generate=generate,
    solver=solve,
)
