"""BusinessVerificationKYB's vocabulary, tools and answer fields: what the agent sees."""

from sopgym.sop_tasks.pack import OutputField
from sopgym.sop_tasks.toolkit import lookup, stateful

DECISIONS = ("APPROVE", "APPROVE_WITH_MONITORING", "ENHANCED_DUE_DILIGENCE", "REJECT")
TIERS = ("LOW", "MEDIUM", "HIGH", "CRITICAL")
CHECKS = ("REGISTRY", "OWNERSHIP", "SANCTIONS")
RESULTS = ("PASS", "FLAG", "FAIL")
JURISDICTIONS = ("GB", "DE", "NL", "IE", "SG", "AE", "CY", "MT")
#: Ownership percent from which an owner is a beneficial owner (SOP section 1).
UBO_PCT = 25.0

_app_id = {"type": "string", "pattern": "^APP-[0-9]{6}$"}
_case_id = {"type": "string", "pattern": "^CASE-[0-9]{6}$"}
_subject = {"type": "string", "pattern": "^(ENT|PRS)-[0-9]{6}$"}
_reg_no = {"type": "string", "pattern": "^[A-Z0-9]{8,12}$"}
TOOLS = (
    lookup(
        "get_application",
        "Onboarding application by id: declared legal name, registration number, jurisdiction, submission "
        "date, website, industry code and the applicant's own declarations.",
        {"application_id": _app_id},
        not_found="application {application_id} not found",
    ),
    lookup(
        "lookup_company_registry",
        "Official company-registry record by jurisdiction (ISO country code) and registration number: "
        "registry status, registered name, incorporation date and registry entity id.",
        {"jurisdiction": {"type": "string", "enum": list(JURISDICTIONS)}, "registration_number": _reg_no},
        not_found="no registry record for {registration_number} in jurisdiction {jurisdiction}",
    ),
    lookup(
        "get_ownership_filing",
        "Beneficial-ownership filing of a registry entity (ENT-...): every listed owner with owner id, "
        "name, owner type (individual or company) and ownership percent.",
        {"entity_id": {"type": "string", "pattern": "^ENT-[0-9]{6}$"}},
        not_found="no ownership filing for entity {entity_id}",
    ),
    lookup(
        "screen_sanctions",
        "Screen one subject (ENT-... or PRS-... id) against the consolidated sanctions lists; returns the hits "
        "with list name, matched name and match score (0-100).",
        {"subject_id": _subject},
        not_found="subject {subject_id} is not in the screening index",
    ),
    lookup(
        "get_credit_report",
        "Commercial credit report by registration number: credit score and payment delays.",
        {"registration_number": _reg_no},
        distractor=True,
        not_found="no credit report for {registration_number}",
    ),
    lookup(
        "get_web_presence",
        "Web presence summary of a domain name: age of the domain, traffic rank, TLS status.",
        {"domain": {"type": "string", "minLength": 3, "maxLength": 100}},
        distractor=True,
        not_found="no web presence data for {domain}",
    ),
    lookup(
        "get_industry_profile",
        "Industry profile by 4-digit industry code: description and typical chargeback rate.",
        {"industry_code": {"type": "string", "pattern": "^[0-9]{4}$"}},
        distractor=True,
        not_found="unknown industry code {industry_code}",
    ),
    stateful(
        "open_case",
        "Open the verification case for an application id (one case per application; returns the existing "
        "case if one is open). Returns the case id.",
        {"application_id": _app_id},
        writes=True,
    ),
    stateful(
        "attach_finding",
        "Attach one finding to a case: check type, subject id (ENT-... or PRS-...) and result. Findings are "
        "final and unique per (check, subject).",
        {
            "case_id": _case_id,
            "check": {"type": "string", "enum": list(CHECKS)},
            "subject_id": _subject,
            "result": {"type": "string", "enum": list(RESULTS)},
        },
        writes=True,
    ),
    stateful(
        "get_case",
        "Read a case: its findings, the risk score and risk tier the case system derives, status and decision.",
        {"case_id": _case_id},
    ),
    stateful(
        "record_decision",
        "Record the onboarding decision on a case (final; needs a REGISTRY finding).",
        {"case_id": _case_id, "decision": {"type": "string", "enum": list(DECISIONS)}},
        writes=True,
    ),
    stateful(
        "add_case_note",
        "Add a free-text note to a case (notes are not findings).",
        {"case_id": _case_id, "text": {"type": "string", "minLength": 1, "maxLength": 500}},
        writes=True,
        distractor=True,
    ),
)

FIELDS = (
    OutputField("decision", enum=DECISIONS, description="The onboarding decision recorded on the case."),
    OutputField("risk_tier", enum=TIERS, description="The risk tier the case system reported."),
)
