"""BusinessVerificationKYB: merchant onboarding KYB (SOP KYB-4). Replay lookups + a stateful case file.

The agent opens a verification case, attaches findings (registry check, ownership check, one
sanctions screening per beneficial owner, chained from the registry's entity id and the ownership
filing's owner ids), reads the case back to learn the risk tier the case system derives (it adds a
jurisdiction rating the agent never sees), and records the decision. The reward checks the answer
and the case's findings and decision (``expected_state``).

The generator draws facts with random faults, labels them with its own decision table
(``_label``, which re-derives the case system's arithmetic) and keeps the draw when the decision
matches the task's target (balanced by index on val/test). The reference solver (``solve``)
follows the SOP text, reading facts only through the tools, and never calls ``_label``.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from sopgym.sandboxes import ERROR_KEY, StatefulProgram, Tier, ToolSpec, canonical_args
from sopgym.sop_tasks.pack import DomainPack, OutputField, ToolCall, ToolError, object_schema, read_text

DECISIONS = ("APPROVE", "APPROVE_WITH_MONITORING", "ENHANCED_DUE_DILIGENCE", "REJECT")
TIERS = ("LOW", "MEDIUM", "HIGH", "CRITICAL")
CHECKS = ("REGISTRY", "OWNERSHIP", "SANCTIONS")
RESULTS = ("PASS", "FLAG", "FAIL")
JURISDICTIONS = ("GB", "DE", "NL", "IE", "SG", "AE", "CY", "MT")
UBO_PCT = 25.0

_app_id = {"type": "string", "pattern": "^APP-[0-9]{6}$"}
_case_id = {"type": "string", "pattern": "^CASE-[0-9]{6}$"}
_subject = {"type": "string", "pattern": "^(ENT|PRS)-[0-9]{6}$"}
_ent_id = {"type": "string", "pattern": "^ENT-[0-9]{6}$"}




TOOLS = (
    ToolSpec(
        "get_application",
        "Onboarding application by id: declared legal name, registration number, jurisdiction, submission "
        "date, website, industry code and the applicant's own declarations.",
        object_schema({"application_id": _app_id}),
        not_found="application {application_id} not found",
    ),
    ToolSpec(
        "lookup_company_registry",
        "Official company-registry record by jurisdiction (ISO country code) and registration number: "
        "registry status, registered name, incorporation date and registry entity id.",
        object_schema({
            "jurisdiction": {"type": "string", "enum": list(JURISDICTIONS)},
            "registration_number": {"type": "string", "pattern": "^[A-Z0-9]{8,12}$"},
        }),
        not_found="no registry record for {registration_number} in jurisdiction {jurisdiction}",
    ),
    ToolSpec(
        "get_ownership_filing",
        "Beneficial-ownership filing of a registry entity (ENT-...): every listed owner with owner id, "
        "name, owner type (individual or company) and ownership percent.",
        object_schema({"entity_id": _ent_id}),
        not_found="no ownership filing for entity {entity_id}",
    ),
    ToolSpec(
        "screen_sanctions",
        "Screen one subject (ENT-... or PRS-... id) against the consolidated sanctions lists; returns the hits "
        "with list name, matched name and match score (0-100).",
        object_schema({"subject_id": _subject}),
        not_found="subject {subject_id} is not in the screening index",
    ),
    ToolSpec(
        "get_credit_report",
        "Commercial credit report by registration number: credit score and payment delays.",
        object_schema({"registration_number": {"type": "string", "pattern": "^[A-Z0-9]{8,12}$"}}),
        distractor=True,
        not_found="no credit report for {registration_number}",
    ),
    ToolSpec(
        "get_web_presence",
        "Web presence summary of a domain name: age of the domain, traffic rank, TLS status.",
        object_schema({"domain": {"type": "string", "minLength": 3, "maxLength": 100}}),
        distractor=True,
        not_found="no web presence data for {domain}",
    ),
    ToolSpec(
        "get_industry_profile",
        "Industry profile by 4-digit industry code: description and typical chargeback rate.",
        object_schema({"industry_code": {"type": "string", "pattern": "^[0-9]{4}$"}}),
        distractor=True,
        not_found="unknown industry code {industry_code}",
    ),
    ToolSpec(
        "open_case",
        "Open the verification case for an application id (one case per application; returns the existing "
        "case if one is open). Returns the case id.",
        object_schema({"application_id": _app_id}),
        tier=Tier.STATEFUL, writes=True,
    ),
    ToolSpec(
        "attach_finding",
        "Attach one finding to a case: check type, subject id (ENT-... or PRS-...) and result. Findings are "
        "final and unique per (check, subject).",
        object_schema({
            "case_id": _case_id,
            "check": {"type": "string", "enum": list(CHECKS)},
            "subject_id": _subject,
            "result": {"type": "string", "enum": list(RESULTS)},
        }),
        tier=Tier.STATEFUL, writes=True,
    ),
    ToolSpec(
        "get_case",
        "Read a case: its findings, the risk score and risk tier the case system derives, status and decision.",
        object_schema({"case_id": _case_id}),
        tier=Tier.STATEFUL,
    ),
    ToolSpec(
        "record_decision",
        "Record the onboarding decision on a case (final; needs a REGISTRY finding).",
        object_schema({"case_id": _case_id, "decision": {"type": "string", "enum": list(DECISIONS)}}),
        tier=Tier.STATEFUL, writes=True,
    ),
    ToolSpec(
        "add_case_note",
        "Add a free-text note to a case (notes are not findings).",
        object_schema({"case_id": _case_id, "text": {"type": "string", "minLength": 1, "maxLength": 500}}),
        tier=Tier.STATEFUL, writes=True, distractor=True,
    ),
)

FIELDS = (
    OutputField("decision", enum=DECISIONS, description="The onboarding decision recorded on the case."),
    OutputField("risk_tier", enum=TIERS, description="The risk tier the case system reported."),
)

PROGRAM = StatefulProgram(f"{__name__}.state")

# ---------------------------------------------------------------------------------------------
# Generator: facts with random faults, labelled by a decision table, kept when on target.
# ---------------------------------------------------------------------------------------------
_WORDS_A = ("Northgate", "Bluewater", "Silverline", "Harbor", "Kestrel", "Amberfield", "Ironbridge", "Lumen",
            "Copperleaf", "Westmoor", "Falcon", "Greystone", "Brightwell", "Oakridge", "Meridian", "Tidewater")
_WORDS_B = ("Trading", "Logistics", "Digital", "Textiles", "Foods", "Consulting", "Electronics", "Outfitters",
            "Ventures", "Supplies", "Media", "Holdings")
_SUFFIX = {"GB": ("Ltd", "Limited"), "IE": ("Ltd", "Limited"), "DE": ("GmbH", "AG"), "NL": ("B.V.", "N.V."),
           "SG": ("Pte. Ltd.", "Pte Ltd"), "AE": ("LLC", "FZE"), "CY": ("Ltd", "Limited"), "MT": ("Ltd", "Limited")}
_FIRST = ("Anna", "Marek", "Sofia", "Liam", "Yusuf", "Chen", "Ines", "Tomas", "Priya", "Omar", "Elena", "Jonas",
          "Mei", "Rafael", "Hana", "Kofi")
_LAST = ("Novak", "Okafor", "Lindqvist", "Haddad", "Moreau", "Tanaka", "Brennan", "Costa", "Weber", "Rahman",
         "Ivanova", "Mensah", "Kowalski", "Sato")
_LISTS = ("UN-CONSOLIDATED", "EU-FSF", "OFAC-SDN", "UK-HMT")
_STATUSES_BAD = ("dissolved", "struck_off", "suspended")


def _sanctions_result(hits: list[dict[str, Any]]) -> str:
    top = max((h["match_score"] for h in hits), default=0)
    return "FAIL" if top >= 90 else ("FLAG" if top >= 75 else "PASS")


def _label(f: dict[str, Any]) -> dict[str, Any]:
    """Findings, risk score, tier and decision of a fact set (the generator's decision table)."""
    findings = []
    if f["status"] != "active":
        reg = "FAIL"
    else:
        name_differs = " ".join(f["registered_name"].casefold().split()) != " ".join(f["declared_name"].casefold().split())
        reg = "FLAG" if name_differs or f["age_days"] < 180 else "PASS"
    findings.append(("REGISTRY", f["entity_id"], reg))
    if reg != "FAIL":
        owners = f["owners"]
        if not owners:
            own = "FAIL"
        elif any(o["owner_type"] == "company" and o["ownership_pct"] >= UBO_PCT for o in owners) or \
                round(sum(o["ownership_pct"] for o in owners), 1) < 75.0:
            own = "FLAG"
        else:
            own = "PASS"
        findings.append(("OWNERSHIP", f["entity_id"], own))
        subjects = [f["entity_id"]] + [o["owner_id"] for o in owners if o["ownership_pct"] >= UBO_PCT]
        for s in subjects:
            findings.append(("SANCTIONS", s, _sanctions_result(f["hits"].get(s, []))))
    points = {"PASS": 0, "FLAG": {"REGISTRY": 25, "OWNERSHIP": 20, "SANCTIONS": 30}, "FAIL": 100}
    score = f["jurisdiction_points"] + sum(
        points[r][c] if r == "FLAG" else points[r] for c, _, r in findings
    )
    tier = "CRITICAL" if score >= 80 else "HIGH" if score >= 45 else "MEDIUM" if score >= 20 else "LOW"
    sanctions_flag = any(c == "SANCTIONS" and r == "FLAG" for c, _, r in findings)
    decision = {
        "CRITICAL": "REJECT", "HIGH": "ENHANCED_DUE_DILIGENCE", "LOW": "APPROVE",
        "MEDIUM": "ENHANCED_DUE_DILIGENCE" if sanctions_flag else "APPROVE_WITH_MONITORING",
    }[tier]
    return {"findings": findings, "score": score, "tier": tier, "decision": decision, "sanctions_flag": sanctions_flag}


def _pct(rng: random.Random, lo: float, hi: float) -> float:
    return round(rng.uniform(lo, hi), 1)


def _draw_owners(rng: random.Random, ids: list[str]) -> list[dict[str, Any]]:
    """0 to 2 beneficial owners (>= 25 %) plus minor owners, with their ids drawn from ``ids``."""
    if rng.random() < 0.05:
        return []
    num_ubo = rng.choice((0, 1, 1, 2, 2, 2))
    pcts = []
    if num_ubo == 1:
        pcts.append(rng.choice((UBO_PCT, _pct(rng, 25.0, 80.0))))
    elif num_ubo == 2:
        first = _pct(rng, 25.0, 50.0)
        pcts += [first, rng.choice((UBO_PCT, _pct(rng, 25.0, min(50.0, 100.0 - first))))]
    remaining = 100.0 - sum(pcts)
    low_coverage = rng.random() < 0.12
    if low_coverage:  # the filing accounts for less than 75 %
        remaining = max(0.0, min(remaining, 74.9 - sum(pcts)))
    while remaining > 0.05 and len(pcts) < 5:
        share = min(remaining, rng.choice((24.9, _pct(rng, 5.0, 24.9))))
        pcts.append(round(share, 1))
        remaining = round(remaining - share, 1)
        if low_coverage and rng.random() < 0.5:
            break
    owners = []
    for pct in pcts:
        is_company = rng.random() < (0.25 if pct >= UBO_PCT else 0.3)
        oid = ids.pop()
        owners.append({
            "owner_id": ("ENT-" if is_company else "PRS-") + oid,
            "name": (f"{rng.choice(_WORDS_A)} {rng.choice(('Capital', 'Holdings', 'Partners'))} {rng.choice(('Ltd', 'S.A.', 'LLC'))}"
                     if is_company else f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"),
            "owner_type": "company" if is_company else "individual",
            "ownership_pct": pct,
        })
    rng.shuffle(owners)
    return owners


def _draw_hits(rng: random.Random, name: str, minor: bool) -> list[dict[str, Any]]:
    if rng.random() > (0.3 if minor else 0.22):
        return []
    band = rng.random()
    if minor:  # decoys: owners below 25 % are not screened, so their hits never count
        score = rng.randint(85, 99)
    elif band < 0.45:
        score = rng.randint(55, 74)
    elif band < 0.8:
        score = rng.randint(75, 89)
    else:
        score = rng.randint(90, 99)
    hits = [{"list_name": rng.choice(_LISTS), "matched_name": name.upper(), "match_score": score}]
    if rng.random() < 0.3:
        hits.append({"list_name": rng.choice(_LISTS), "matched_name": name.split()[0].upper(), "match_score": rng.randint(50, score)})
        rng.shuffle(hits)
    return hits


def _draw_facts(rng: random.Random) -> dict[str, Any]:
    jur = rng.choice(JURISDICTIONS)
    base = f"{rng.choice(_WORDS_A)} {rng.choice(_WORDS_B)}"
    suffixes = _SUFFIX[jur]
    declared = f"{base} {suffixes[0]}"
    registered = declared
    mismatch = rng.random()
    if mismatch < 0.12:
        registered = f"{base} {suffixes[1]}"
    elif mismatch < 0.2:
        registered = f"{rng.choice(_WORDS_A)} {base.split()[1]} {suffixes[0]}"
    elif mismatch < 0.35:  # only case and spacing differ: still the same name
        registered = declared.upper() if rng.random() < 0.5 else declared.replace(" ", "  ", 1)
    if registered == declared and mismatch < 0.2:
        registered = f"{base} {suffixes[1]}"
    age = rng.choice((rng.randint(30, 179), 179, 180, rng.randint(180, 4000), rng.randint(400, 6000), rng.randint(400, 6000)))
    ids = [f"{n:06d}" for n in rng.sample(range(1, 1_000_000), 8)]
    entity_id = "ENT-" + ids.pop()
    owners = _draw_owners(rng, ids)
    hits = {entity_id: _draw_hits(rng, registered, False)}
    for o in owners:
        hits[o["owner_id"]] = _draw_hits(rng, o["name"], o["ownership_pct"] < UBO_PCT)
    return {
        "jurisdiction": jur, "declared_name": declared, "registered_name": registered, "age_days": age,
        "status": rng.choice(_STATUSES_BAD) if rng.random() < 0.1 else "active",
        "entity_id": entity_id, "owners": owners, "hits": hits,
        "jurisdiction_points": rng.choice((0, 0, 10, 25)),
    }


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = DECISIONS[index % len(DECISIONS)] if split != "train" else rng.choice(DECISIONS)
    for _ in range(1000):
        f = _draw_facts(rng)
        label = _label(f)
        if label["decision"] == target:
            break
    else:  # pragma: no cover - the fault rates make every target common
        raise RuntimeError(f"no fact draw reached decision {target}")

    submitted = dt.date(2026, 1, 1) + dt.timedelta(days=rng.randint(0, 330))
    incorporated = submitted - dt.timedelta(days=f["age_days"])
    app_id = f"APP-{rng.randint(0, 999999):06d}"
    reg_no = f"{f['jurisdiction']}{rng.randint(0, 99999999):08d}"
    case_no = rng.randint(100000, 999999)
    case_id = f"CASE-{case_no:06d}"
    website = f"{f['declared_name'].split()[0].lower()}{f['declared_name'].split()[1].lower()}.example"
    industry = f"{rng.choice((5045, 5311, 5399, 5732, 5812, 7372, 7399, 4214)):04d}"
    declared_owners = [o["name"] for o in f["owners"] if o["ownership_pct"] >= 10] or ["(none declared)"]
    if rng.random() < 0.4:  # the applicant's own declaration omits owners: a trap for shortcuts
        declared_owners = declared_owners[:1]
    owner_ids = [f["entity_id"]] + [o["owner_id"] for o in f["owners"]]
    names = {f["entity_id"]: f["registered_name"], **{o["owner_id"]: o["name"] for o in f["owners"]}}

    replay: dict[str, dict[str, Any]] = {
        "get_application": {canonical_args({"application_id": app_id}): {
            "application_id": app_id, "legal_name": f["declared_name"], "registration_number": reg_no,
            "jurisdiction": f["jurisdiction"], "submitted_on": submitted.isoformat(), "website": website,
            "industry_code": industry, "declared_owners": declared_owners,
            "self_declared_sanctions_clear": True, "declared_annual_revenue_eur": rng.randint(50, 9000) * 1000,
        }},
        "lookup_company_registry": {canonical_args({"jurisdiction": f["jurisdiction"], "registration_number": reg_no}): {
            "registration_number": reg_no, "jurisdiction": f["jurisdiction"], "entity_id": f["entity_id"],
            "registered_name": f["registered_name"], "status": f["status"],
            "incorporated_on": incorporated.isoformat(),
        }},
        "get_ownership_filing": {canonical_args({"entity_id": f["entity_id"]}): {
            "entity_id": f["entity_id"], "filed_on": (submitted - dt.timedelta(days=rng.randint(10, 300))).isoformat(),
            "owners": f["owners"],
        }},
        "screen_sanctions": {
            canonical_args({"subject_id": s}): {"subject_id": s, "screened_name": names[s], "hits": f["hits"].get(s, [])}
            for s in owner_ids
        },
        "get_credit_report": {canonical_args({"registration_number": reg_no}): {
            "registration_number": reg_no, "credit_score": rng.randint(300, 850), "days_beyond_terms": rng.randint(0, 60),
        }},
        "get_web_presence": {canonical_args({"domain": website}): {
            "domain": website, "domain_age_days": rng.randint(10, 5000), "tls_valid": rng.random() < 0.9,
            "traffic_rank": rng.randint(1000, 9_000_000),
        }},
        "get_industry_profile": {canonical_args({"industry_code": industry}): {
            "industry_code": industry, "chargeback_rate_pct": round(rng.uniform(0.1, 2.5), 2),
        }},
    }
    if rng.random() < 0.1:
        replay["get_credit_report"] = {canonical_args({"registration_number": reg_no}): {ERROR_KEY: "credit bureau unavailable"}}
    initial_state = {
        "applications": [{"application_id": app_id, "jurisdiction": f["jurisdiction"]}],
        "jurisdiction_risk": [
            {"jurisdiction": j, "points": f["jurisdiction_points"] if j == f["jurisdiction"] else rng.choice((0, 10, 25))}
            for j in JURISDICTIONS
        ],
        "counters": [{"name": "case", "value": case_no}],
    }
    expected_state = {
        "findings": sorted([case_id, c, s, r] for c, s, r in label["findings"]),
        "decisions": [[case_id, label["decision"]]],
    }
    # A decoy that matters: an owner below 25 % with a confirmed-level hit (screening it would flip the case).
    minor_decoy = any(
        o["ownership_pct"] < UBO_PCT and _sanctions_result(f["hits"].get(o["owner_id"], [])) == "FAIL" for o in f["owners"]
    )
    any_hits = any(f["hits"].values())
    if label["findings"][0][2] == "FAIL" or (not any_hits and label["decision"] == "APPROVE"):
        difficulty = "easy"
    elif (label["tier"] == "MEDIUM" and label["sanctions_flag"]) or (minor_decoy and label["decision"] != "REJECT"):
        difficulty = "hard"
    else:
        difficulty = "medium"
    return {
        "inputs": {"application_id": app_id, "received_via": rng.choice(("web", "partner_api", "sales_referral"))},
        "answer": {"decision": label["decision"], "risk_tier": label["tier"]},
        "replay": replay,
        "initial_state": initial_state,
        "expected_state": expected_state,
        "difficulty": difficulty,
        "meta": {"risk_score": label["score"], "num_findings": len(label["findings"])},
    }


# ---------------------------------------------------------------------------------------------
# Reference solver: the SOP as written, facts only from tools.
# ---------------------------------------------------------------------------------------------
def _same_name(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def _ok(result: Any) -> Any:
    if isinstance(result, ToolError):
        raise result
    return result


def solve(inputs: dict[str, Any]):
    app = _ok((yield ToolCall("get_application", {"application_id": inputs["application_id"]})))
    case = _ok((yield ToolCall("open_case", {"application_id": app["application_id"]})))
    case_id = case["case_id"]
    reg = _ok((yield ToolCall("lookup_company_registry", {
        "jurisdiction": app["jurisdiction"], "registration_number": app["registration_number"]})))
    entity = reg["entity_id"]
    if reg["status"] != "active":
        registry = "FAIL"
    else:
        age = (dt.date.fromisoformat(app["submitted_on"]) - dt.date.fromisoformat(reg["incorporated_on"])).days
        registry = "FLAG" if not _same_name(reg["registered_name"], app["legal_name"]) or age < 180 else "PASS"
    _ok((yield ToolCall("attach_finding", {"case_id": case_id, "check": "REGISTRY", "subject_id": entity, "result": registry})))
    if registry != "FAIL":
        filing = _ok((yield ToolCall("get_ownership_filing", {"entity_id": entity})))
        owners = filing["owners"]
        ubos = [o for o in owners if o["ownership_pct"] >= 25.0]
        if not owners:
            ownership = "FAIL"
        elif any(o["owner_type"] == "company" for o in ubos) or round(sum(o["ownership_pct"] for o in owners), 1) < 75.0:
            ownership = "FLAG"
        else:
            ownership = "PASS"
        _ok((yield ToolCall("attach_finding", {"case_id": case_id, "check": "OWNERSHIP", "subject_id": entity, "result": ownership})))
        for subject in [entity] + [o["owner_id"] for o in ubos]:
            screening = _ok((yield ToolCall("screen_sanctions", {"subject_id": subject})))
            top = max([h["match_score"] for h in screening["hits"]] or [0])
            result = "FAIL" if top >= 90 else "FLAG" if top >= 75 else "PASS"
            _ok((yield ToolCall("attach_finding", {"case_id": case_id, "check": "SANCTIONS", "subject_id": subject, "result": result})))
    read = _ok((yield ToolCall("get_case", {"case_id": case_id})))
    tier = read["risk_tier"]
    if tier == "CRITICAL":
        decision = "REJECT"
    elif tier == "HIGH":
        decision = "ENHANCED_DUE_DILIGENCE"
    elif tier == "MEDIUM":
        flagged = any(x["check"] == "SANCTIONS" and x["result"] == "FLAG" for x in read["findings"])
        decision = "ENHANCED_DUE_DILIGENCE" if flagged else "APPROVE_WITH_MONITORING"
    else:
        decision = "APPROVE"
    _ok((yield ToolCall("record_decision", {"case_id": case_id, "decision": decision})))
    return {"decision": decision, "risk_tier": tier}


PACK = DomainPack(
    name="BusinessVerificationKYB",
    version=0,
    title="Business verification (KYB) for merchant onboarding",
    theme="business verification (KYB)",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    # application, open case, registry + finding, filing + finding, up to 3 screenings + findings,
    # read case, record decision, submit.
    human_steps=15,
    generate=generate,
    solver=solve,
    program=PROGRAM,
)
