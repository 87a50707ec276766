"""BusinessVerificationKYB's task generator: draw, label, records.

* **draw** (``_draw_facts``): a registry record, an ownership filing and sanctions hits with random
  faults (a registered name that differs, or only in case and spacing; a young company; a corporate
  owner; a filing under 75 %; hits on minor owners, who are never screened), redrawn until the
  decision is the task's target (balanced over the four on val/test);
* **label** (``_label``): the findings the SOP asks for, and the case system's risk score, tier and
  decision, scored with the case system's own points table (``state.py``);
* **records** (``_records``): ids, the replay records, the case system's initial state (with the
  jurisdiction rating the agent never sees) and the expected findings and decision.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from sopgym.sop_tasks.generation import balanced_target, draw_until, record, recorded_error, records

from .state import POINTS, risk_tier
from .tools import DECISIONS, JURISDICTIONS, UBO_PCT

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


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = balanced_target(rng, split, index, DECISIONS)
    f = draw_until(lambda: _draw_facts(rng), lambda f: _label(f)["decision"] == target, attempts=1000, target=target)
    return _records(rng, f, _label(f))


# -- draw ------------------------------------------------------------------------------------------
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


# -- label -----------------------------------------------------------------------------------------
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
    score = f["jurisdiction_points"] + sum(POINTS[(check, result)] for check, _, result in findings)
    tier = risk_tier(score)
    sanctions_flag = any(c == "SANCTIONS" and r == "FLAG" for c, _, r in findings)
    decision = {
        "CRITICAL": "REJECT", "HIGH": "ENHANCED_DUE_DILIGENCE", "LOW": "APPROVE",
        "MEDIUM": "ENHANCED_DUE_DILIGENCE" if sanctions_flag else "APPROVE_WITH_MONITORING",
    }[tier]
    return {"findings": findings, "score": score, "tier": tier, "decision": decision, "sanctions_flag": sanctions_flag}


def _difficulty(f: dict[str, Any], label: dict[str, Any]) -> str:
    # A decoy that matters: an owner below 25 % with a confirmed-level hit (screening it would flip the case).
    minor_decoy = any(
        o["ownership_pct"] < UBO_PCT and _sanctions_result(f["hits"].get(o["owner_id"], [])) == "FAIL" for o in f["owners"]
    )
    any_hits = any(f["hits"].values())
    if label["findings"][0][2] == "FAIL" or (not any_hits and label["decision"] == "APPROVE"):
        return "easy"
    if (label["tier"] == "MEDIUM" and label["sanctions_flag"]) or (minor_decoy and label["decision"] != "REJECT"):
        return "hard"
    return "medium"


# -- records ---------------------------------------------------------------------------------------
def _records(rng: random.Random, f: dict[str, Any], label: dict[str, Any]) -> dict[str, Any]:
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
    registry_key = {"jurisdiction": f["jurisdiction"], "registration_number": reg_no}

    replay: dict[str, dict[str, Any]] = {
        "get_application": record({"application_id": app_id}, {
            "application_id": app_id, "legal_name": f["declared_name"], "registration_number": reg_no,
            "jurisdiction": f["jurisdiction"], "submitted_on": submitted.isoformat(), "website": website,
            "industry_code": industry, "declared_owners": declared_owners,
            "self_declared_sanctions_clear": True, "declared_annual_revenue_eur": rng.randint(50, 9000) * 1000,
        }),
        "lookup_company_registry": record(registry_key, {
            "registration_number": reg_no, "jurisdiction": f["jurisdiction"], "entity_id": f["entity_id"],
            "registered_name": f["registered_name"], "status": f["status"],
            "incorporated_on": incorporated.isoformat(),
        }),
        "get_ownership_filing": record({"entity_id": f["entity_id"]}, {
            "entity_id": f["entity_id"], "filed_on": (submitted - dt.timedelta(days=rng.randint(10, 300))).isoformat(),
            "owners": f["owners"],
        }),
        "screen_sanctions": records(
            ({"subject_id": s}, {"subject_id": s, "screened_name": names[s], "hits": f["hits"].get(s, [])})
            for s in owner_ids
        ),
        "get_credit_report": record({"registration_number": reg_no}, {
            "registration_number": reg_no, "credit_score": rng.randint(300, 850), "days_beyond_terms": rng.randint(0, 60),
        }),
        "get_web_presence": record({"domain": website}, {
            "domain": website, "domain_age_days": rng.randint(10, 5000), "tls_valid": rng.random() < 0.9,
            "traffic_rank": rng.randint(1000, 9_000_000),
        }),
        "get_industry_profile": record({"industry_code": industry}, {
            "industry_code": industry, "chargeback_rate_pct": round(rng.uniform(0.1, 2.5), 2),
        }),
    }
    if rng.random() < 0.1:  # the credit bureau is occasionally down: a distractor's error must not matter
        replay["get_credit_report"] = record({"registration_number": reg_no}, recorded_error("credit bureau unavailable"))
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
    return {
        "inputs": {"application_id": app_id, "received_via": rng.choice(("web", "partner_api", "sales_referral"))},
        "answer": {"decision": label["decision"], "risk_tier": label["tier"]},
        "replay": replay,
        "initial_state": initial_state,
        "expected_state": expected_state,
        "difficulty": _difficulty(f, label),
        "meta": {"risk_score": label["score"], "num_findings": len(label["findings"])},
    }
