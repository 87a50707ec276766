"""A domain pack scaffold that passes ``sopgym validate-domain`` (``sopgym new-domain NAME``:
:mod:`sopgym.cli.new_domain`).

The scaffold is the worked example of docs/adding_a_domain.md: a warranty-claim review domain in
the one layout every authored pack has (``__init__.py``, ``tools.py``, ``generator.py``,
``solver.py``, ``sop.md``), written with the pack helpers (``sopgym.sop_tasks.toolkit`` and
``sopgym.sop_tasks.generation``). Rename, rewrite the SOP and the logic, keep the shape.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["new_domain", "TEMPLATES", "TEMPLATE_SOP"]

TEMPLATE_SOP = """\
# SOP WC-1: __TITLE__ (warranty claim review)

**Purpose:** decide one customer warranty claim. **Applies to:** every claim in the review queue.

## 1. Definitions
- *Elapsed days*: calendar days from the purchase date to the claim's submission date.
- *Coverage days*: 30 x the product's warranty months. A model under a recall programme adds its
  recall extension months (x 30 days) to the coverage, but only for a confirmed manufacturing defect
  with no physical damage.
- *Authorized channel*: purchases made through the `authorized` channel. Marketplace resellers are
  not covered by the manufacturer's warranty.

## 2. Procedure
Apply the steps in order; the first step that reaches a decision ends the review.

1. **Retrieve the claim** by its claim id. Note the serial number and the purchase id.
2. **Retrieve the product** by serial number: warranty months and recall extension months.
3. **Retrieve the purchase** by purchase id: purchase date and sales channel.
4. **Seller check.** If the channel is not `authorized`, decision `DENY_SELLER`.
5. **Coverage check.** Compute elapsed and coverage days. If elapsed days exceed the coverage days
   without any recall extension:
   - if the model has a recall extension, retrieve the inspection report; when the defect is
     confirmed and the damage is `none`, add the extension and re-check;
   - if elapsed days still exceed the coverage, decision `DENY_EXPIRED`.
6. **Inspection.** Retrieve the inspection report (if not already done). If the damage is `liquid`
   or `impact`, decision `DENY_DAMAGE`: physical damage is never covered.
7. **Fault check.** If the inspection did not confirm a defect, decision `NO_FAULT_FOUND`.
8. **Remedy.** Retrieve the unit's repair history. With 2 or more prior repairs the unit is
   replaced: decision `APPROVE_REPLACE`. Otherwise decision `APPROVE_REPAIR`.

## 3. Exceptions and notes
- Store locations and current promotions have no bearing on the decision.
- Never estimate dates: use the purchase record's date, not the customer's statement in the claim.
- Elapsed days exactly equal to the coverage days are still covered.
- The recall extension never helps a unit with physical damage or without a confirmed defect.
- Identifiers are case-sensitive: pass them exactly as the records show them.

## 4. Worked example
A claim submitted 400 days after an authorized purchase of a 12-month model (360 coverage days)
without a recall extension is denied as expired in step 5; the inspection and the repair history are
not needed. The same claim for a model with a 12-month recall extension needs the inspection: with a
confirmed defect and no damage, coverage becomes 720 days and the review continues with step 6.

## 5. Answer format
Call `submit_answer` with one field, `decision`: one of `APPROVE_REPAIR`, `APPROVE_REPLACE`,
`DENY_DAMAGE`, `DENY_EXPIRED`, `DENY_SELLER`, `NO_FAULT_FOUND`.
"""

TEMPLATE_INIT = '''\
"""__NAME__: warranty claim review (scaffolded by `sopgym new-domain`). Replay tier only."""

from sopgym.sop_tasks.pack import DomainPack, read_text

from .generator import generate
from .solver import solve
from .tools import FIELDS, TOOLS

PACK = DomainPack(
    name="__NAME__",
    version=0,
    title="__TITLE__",
    theme="warranty claim review",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    human_steps=6,  # claim, product, purchase, inspection, repair history, submit
    generate=generate,
    solver=solve,
)
'''

TEMPLATE_TOOLS = '''\
"""__NAME__'s vocabulary, tools and answer fields: what the agent sees."""

from sopgym.sop_tasks.pack import OutputField
from sopgym.sop_tasks.toolkit import lookup

DECISIONS = ("APPROVE_REPAIR", "APPROVE_REPLACE", "DENY_DAMAGE", "DENY_EXPIRED", "DENY_SELLER", "NO_FAULT_FOUND")

_claim = {"claim_id": {"type": "string", "pattern": "^CLM-[0-9]{6}$"}}
_serial = {"serial_number": {"type": "string", "pattern": "^SN[0-9]{8}$"}}
TOOLS = (
    lookup("get_claim", "A warranty claim: serial number, purchase id, submission date.", _claim,
           not_found="claim {claim_id} not found"),
    lookup("get_product", "Product by serial number: model, warranty months, recall extension months.", _serial,
           not_found="product {serial_number} not found"),
    lookup("get_purchase", "Purchase record: purchase date and sales channel.",
           {"purchase_id": {"type": "string", "pattern": "^PUR-[0-9]{6}$"}}, not_found="purchase {purchase_id} not found"),
    lookup("get_inspection", "Inspection report of a claim: damage (none, liquid, impact) and whether a defect was "
           "confirmed.", _claim, not_found="no inspection report for claim {claim_id}"),
    lookup("get_repair_history", "Number of prior repairs of a unit.", _serial,
           not_found="no repair history for {serial_number}"),
    lookup("get_store_locator", "Stores near a postcode.", {"postcode": {"type": "string", "pattern": "^[0-9]{5}$"}},
           distractor=True, not_found="no stores near {postcode}"),
    lookup("get_promotions", "Current promotions for a model.",
           {"model": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"}}, distractor=True,
           not_found="no promotions for {model}"),
)
FIELDS = (OutputField("decision", enum=DECISIONS, description="The SOP decision."),)
'''

TEMPLATE_GENERATOR = '''\
"""__NAME__'s task generator: draw facts around a target decision, label them, build the records."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from sopgym.sop_tasks.generation import balanced_target, record

from .tools import DECISIONS


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = balanced_target(rng, split, index, DECISIONS)
    facts = _draw(rng, target)
    return _records(rng, facts, _label(facts))


def _draw(rng: random.Random, target: str) -> dict[str, Any]:
    """Facts that lead to ``target``, with traps the SOP's order resolves."""
    months = rng.choice((12, 24, 36))
    f = {"channel": "authorized", "months": months, "extension": rng.choice((0, 0, 12)), "damage": "none",
         "defect": True, "repairs": rng.randint(0, 1), "elapsed": rng.randint(10, 30 * months)}
    if target == "DENY_SELLER":
        f["channel"] = "marketplace"
        f["elapsed"] = rng.randint(10, 30 * months + 400)  # sometimes also expired: step 4 comes first
    elif target == "DENY_EXPIRED":
        f["elapsed"] = 30 * (months + f["extension"]) + rng.randint(1, 300)
    elif target == "DENY_DAMAGE":
        f["damage"] = rng.choice(("liquid", "impact"))
    elif target == "NO_FAULT_FOUND":
        f["defect"] = False
    elif target == "APPROVE_REPLACE":
        f["repairs"] = rng.randint(2, 4)
    if target != "DENY_EXPIRED" and f["extension"] and rng.random() < 0.5 and f["defect"] and f["damage"] == "none":
        f["elapsed"] = 30 * months + rng.randint(1, 30 * f["extension"])  # saved by the recall extension
    return f


def _label(f: dict[str, Any]) -> str:
    """The generator's own decision table: the label is what the facts imply, not the target."""
    if f["channel"] != "authorized":
        return "DENY_SELLER"
    clean_defect = f["defect"] and f["damage"] == "none"
    coverage = 30 * (f["months"] + (f["extension"] if clean_defect else 0))
    if f["elapsed"] > coverage:
        return "DENY_EXPIRED"
    if f["damage"] != "none":
        return "DENY_DAMAGE"
    if not f["defect"]:
        return "NO_FAULT_FOUND"
    return "APPROVE_REPLACE" if f["repairs"] >= 2 else "APPROVE_REPAIR"


def _records(rng: random.Random, f: dict[str, Any], label: str) -> dict[str, Any]:
    """Ids, the replay records of every tool (the distractors' too) and the difficulty."""
    claim_id, serial = f"CLM-{rng.randint(0, 999999):06d}", f"SN{rng.randint(0, 99999999):08d}"
    purchase_id, model = f"PUR-{rng.randint(0, 999999):06d}", f"{rng.choice(('TX', 'QV', 'BL'))}-{rng.randint(100, 999)}"
    bought = dt.date(2024, 1, 1) + dt.timedelta(days=rng.randint(0, 500))
    submitted = bought + dt.timedelta(days=f["elapsed"])
    postcode = f"{rng.randint(10000, 99999)}"
    claimed_offset = rng.randint(0, 90)  # drawn where the record below used to draw it: tasks unchanged
    replay = {
        "get_claim": record({"claim_id": claim_id}, {
            "claim_id": claim_id, "serial_number": serial, "purchase_id": purchase_id,
            "submitted_on": submitted.isoformat(), "customer_postcode": postcode,
            # the customer's own statement, wrong on purpose: the SOP says to use the purchase record
            "customer_says_bought_on": (bought + dt.timedelta(days=claimed_offset)).isoformat()}),
        "get_product": record({"serial_number": serial}, {"serial_number": serial, "model": model, "warranty_months": f["months"],
                                                          "recall_extension_months": f["extension"]}),
        "get_purchase": record({"purchase_id": purchase_id}, {"purchase_id": purchase_id, "purchase_date": bought.isoformat(),
                                                              "channel": f["channel"]}),
        "get_inspection": record({"claim_id": claim_id}, {"claim_id": claim_id, "damage": f["damage"], "defect_confirmed": f["defect"]}),
        "get_repair_history": record({"serial_number": serial}, {"serial_number": serial, "prior_repairs": f["repairs"]}),
        "get_store_locator": record({"postcode": postcode}, {"stores": [f"Store {rng.randint(1, 99)}"]}),
        "get_promotions": record({"model": model}, {"model": model, "promotions": []}),
    }
    # Difficulty from what makes a case hard to read, drawn independently of the target: a recall
    # extension to weigh, a customer's purchase date that disagrees with the record. Never from the
    # label: validate-domain fails a difficulty that predicts it (check difficulty_label).
    difficulty = ("easy", "medium", "hard")[(f["extension"] > 0) + (claimed_offset > 45)]
    return {"inputs": {"claim_id": claim_id}, "answer": {"decision": label}, "replay": replay, "difficulty": difficulty}
'''

TEMPLATE_SOLVER = '''\
"""__NAME__'s reference solver: SOP WC-1 step by step, facts only from tools, written from the SOP
text (it never imports ``generator.py``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sopgym.sop_tasks.pack import ToolCall, expect


def solve(inputs: dict[str, Any]):
    claim = expect((yield ToolCall("get_claim", {"claim_id": inputs["claim_id"]})))
    product = expect((yield ToolCall("get_product", {"serial_number": claim["serial_number"]})))
    purchase = expect((yield ToolCall("get_purchase", {"purchase_id": claim["purchase_id"]})))
    if purchase["channel"] != "authorized":
        return {"decision": "DENY_SELLER"}
    elapsed = (dt.date.fromisoformat(claim["submitted_on"]) - dt.date.fromisoformat(purchase["purchase_date"])).days
    coverage = 30 * product["warranty_months"]
    inspection = None
    if elapsed > coverage:
        if product["recall_extension_months"]:
            inspection = expect((yield ToolCall("get_inspection", {"claim_id": inputs["claim_id"]})))
            if inspection["defect_confirmed"] and inspection["damage"] == "none":
                coverage += 30 * product["recall_extension_months"]
        if elapsed > coverage:
            return {"decision": "DENY_EXPIRED"}
    if inspection is None:
        inspection = expect((yield ToolCall("get_inspection", {"claim_id": inputs["claim_id"]})))
    if inspection["damage"] in ("liquid", "impact"):
        return {"decision": "DENY_DAMAGE"}
    if not inspection["defect_confirmed"]:
        return {"decision": "NO_FAULT_FOUND"}
    history = expect((yield ToolCall("get_repair_history", {"serial_number": claim["serial_number"]})))
    return {"decision": "APPROVE_REPLACE" if history["prior_repairs"] >= 2 else "APPROVE_REPAIR"}
'''

#: The files of a scaffolded pack; ``__NAME__`` and ``__TITLE__`` are replaced.
TEMPLATES = {
    "__init__.py": TEMPLATE_INIT,
    "tools.py": TEMPLATE_TOOLS,
    "generator.py": TEMPLATE_GENERATOR,
    "solver.py": TEMPLATE_SOLVER,
    "sop.md": TEMPLATE_SOP,
}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def new_domain(name: str, dest: str | Path = "sop_tasks", title: str | None = None) -> Path:
    """Write ``dest/<snake_name>/`` with the pack layout (``__init__.py``, ``tools.py``,
    ``generator.py``, ``solver.py``, ``sop.md``). Returns the folder.

    Raises:
        ValueError: the name is not CamelCase letters/digits, or the folder exists.
    """
    if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", name):
        raise ValueError(f"domain name must be CamelCase letters and digits (e.g. WarrantyClaims), got {name!r}")
    folder = Path(dest) / _snake(name)
    if folder.exists():
        raise ValueError(f"{folder} already exists; choose another name or --dest")
    folder.mkdir(parents=True)
    title = title or re.sub(r"(?<!^)(?=[A-Z])", " ", name)
    for filename, template in TEMPLATES.items():
        (folder / filename).write_text(template.replace("__NAME__", name).replace("__TITLE__", title), encoding="utf-8")
    return folder
