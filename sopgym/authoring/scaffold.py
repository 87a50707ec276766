"""``sopgym new-domain NAME``: scaffold a domain pack that passes ``sopgym validate-domain``.

The scaffold is the worked example of docs/adding_a_domain.md: a warranty-claim review domain in
under 200 lines of Python plus its SOP. Rename, rewrite the SOP and the logic, keep the shape.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

__all__ = ["new_domain", "add_new_domain_cli", "TEMPLATE_INIT", "TEMPLATE_SOP"]

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
"""__NAME__: warranty claim review (scaffolded by `sopgym new-domain`). Replay tier only.

The generator builds a claim around a target decision and labels it with its own decision table
(``_label``); the reference solver (``solve``) follows the SOP through the tools, independently.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from sopgym.sandboxes import ToolSpec, canonical_args
from sopgym.sop_tasks.pack import DomainPack, OutputField, ToolCall, ToolError, object_schema, read_text

DECISIONS = ("APPROVE_REPAIR", "APPROVE_REPLACE", "DENY_DAMAGE", "DENY_EXPIRED", "DENY_SELLER", "NO_FAULT_FOUND")


def _tool(name, description, param, pattern, distractor=False):
    schema = object_schema({param: {"type": "string", "pattern": pattern}})
    return ToolSpec(name, description, schema, distractor=distractor, not_found=f"{{{param}}} not found")


TOOLS = (
    _tool("get_claim", "A warranty claim: serial number, purchase id, submission date.", "claim_id", "^CLM-[0-9]{6}$"),
    _tool("get_product", "Product by serial number: model, warranty months, recall extension months.", "serial_number", "^SN[0-9]{8}$"),
    _tool("get_purchase", "Purchase record: purchase date and sales channel.", "purchase_id", "^PUR-[0-9]{6}$"),
    _tool("get_inspection", "Inspection report of a claim: damage (none, liquid, impact) and whether a defect was confirmed.", "claim_id", "^CLM-[0-9]{6}$"),
    _tool("get_repair_history", "Number of prior repairs of a unit.", "serial_number", "^SN[0-9]{8}$"),
    _tool("get_store_locator", "Stores near a postcode.", "postcode", "^[0-9]{5}$", distractor=True),
    _tool("get_promotions", "Current promotions for a model.", "model", "^[A-Z]{2}-[0-9]{3}$", distractor=True),
)
FIELDS = (OutputField("decision", enum=DECISIONS, description="The SOP decision."),)


def _label(f: dict[str, Any]) -> str:
    """The generator's decision table."""
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


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = DECISIONS[index % len(DECISIONS)] if split != "train" else rng.choice(DECISIONS)
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
    claim_id, serial = f"CLM-{rng.randint(0, 999999):06d}", f"SN{rng.randint(0, 99999999):08d}"
    purchase_id, model = f"PUR-{rng.randint(0, 999999):06d}", f"{rng.choice(('TX', 'QV', 'BL'))}-{rng.randint(100, 999)}"
    bought = dt.date(2024, 1, 1) + dt.timedelta(days=rng.randint(0, 500))
    submitted = bought + dt.timedelta(days=f["elapsed"])
    postcode = f"{rng.randint(10000, 99999)}"

    def one(param, value, response):
        return {canonical_args({param: value}): response}

    replay = {
        "get_claim": one("claim_id", claim_id, {"claim_id": claim_id, "serial_number": serial, "purchase_id": purchase_id,
                                                "submitted_on": submitted.isoformat(), "customer_postcode": postcode,
                                                "customer_says_bought_on": (bought + dt.timedelta(days=rng.randint(0, 90))).isoformat()}),
        "get_product": one("serial_number", serial, {"serial_number": serial, "model": model, "warranty_months": months,
                                                     "recall_extension_months": f["extension"]}),
        "get_purchase": one("purchase_id", purchase_id, {"purchase_id": purchase_id, "purchase_date": bought.isoformat(), "channel": f["channel"]}),
        "get_inspection": one("claim_id", claim_id, {"claim_id": claim_id, "damage": f["damage"], "defect_confirmed": f["defect"]}),
        "get_repair_history": one("serial_number", serial, {"serial_number": serial, "prior_repairs": f["repairs"]}),
        "get_store_locator": one("postcode", postcode, {"stores": [f"Store {rng.randint(1, 99)}"]}),
        "get_promotions": one("model", model, {"model": model, "promotions": []}),
    }
    label = _label(f)
    difficulty = {"DENY_SELLER": "easy", "DENY_EXPIRED": "medium", "DENY_DAMAGE": "medium"}.get(label, "hard")
    return {"inputs": {"claim_id": claim_id}, "answer": {"decision": label}, "replay": replay, "difficulty": difficulty}


def solve(inputs: dict[str, Any]):
    """SOP WC-1 step by step, facts only from tools."""
    claim = yield ToolCall("get_claim", {"claim_id": inputs["claim_id"]})
    product = yield ToolCall("get_product", {"serial_number": claim["serial_number"]})
    purchase = yield ToolCall("get_purchase", {"purchase_id": claim["purchase_id"]})
    if purchase["channel"] != "authorized":
        return {"decision": "DENY_SELLER"}
    elapsed = (dt.date.fromisoformat(claim["submitted_on"]) - dt.date.fromisoformat(purchase["purchase_date"])).days
    coverage = 30 * product["warranty_months"]
    inspection = None
    if elapsed > coverage:
        if product["recall_extension_months"]:
            inspection = yield ToolCall("get_inspection", {"claim_id": inputs["claim_id"]})
            if inspection["defect_confirmed"] and inspection["damage"] == "none":
                coverage += 30 * product["recall_extension_months"]
        if elapsed > coverage:
            return {"decision": "DENY_EXPIRED"}
    if inspection is None:
        inspection = yield ToolCall("get_inspection", {"claim_id": inputs["claim_id"]})
    if isinstance(inspection, ToolError):
        raise inspection
    if inspection["damage"] in ("liquid", "impact"):
        return {"decision": "DENY_DAMAGE"}
    if not inspection["defect_confirmed"]:
        return {"decision": "NO_FAULT_FOUND"}
    history = yield ToolCall("get_repair_history", {"serial_number": claim["serial_number"]})
    return {"decision": "APPROVE_REPLACE" if history["prior_repairs"] >= 2 else "APPROVE_REPAIR"}


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


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def new_domain(name: str, dest: str | Path = "sop_tasks", title: str | None = None) -> Path:
    """Write ``dest/<snake_name>/{__init__.py, sop.md}``. Returns the folder.

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
    (folder / "__init__.py").write_text(TEMPLATE_INIT.replace("__NAME__", name).replace("__TITLE__", title), encoding="utf-8")
    (folder / "sop.md").write_text(TEMPLATE_SOP.replace("__TITLE__", title), encoding="utf-8")
    return folder


def _cmd_new_domain(args: argparse.Namespace) -> int:
    folder = new_domain(args.name, args.dest, args.title)
    print(f"wrote {folder}/__init__.py and {folder}/sop.md\nnext: edit them, then run: sopgym validate-domain {folder}")
    return 0


def add_new_domain_cli(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("new-domain", help="scaffold a domain pack that passes validate-domain")
    p.add_argument("name", help="CamelCase domain name, e.g. WarrantyClaims")
    p.add_argument("--dest", default="sop_tasks", help="parent folder (default: sop_tasks)")
    p.add_argument("--title", help="human-readable title (default: from the name)")
    p.set_defaults(func=_cmd_new_domain)
    return p
