"""DrivingVideoAnnotationQC's reference solver: SOP DV-2 as written; the metrics computed by a
standalone program sent to ``run_python``, every other fact read through the tools. It never
imports ``generator.py``."""

from __future__ import annotations

import json
from typing import Any

from sopgym.sop_tasks.pack import ToolCall, expect


def solve(inputs: dict[str, Any]):
    ticket = expect((yield ToolCall("get_qc_ticket", {"ticket_id": inputs["ticket_id"]})))
    spec = expect((yield ToolCall("get_qc_spec", {"project_id": ticket["project_id"]})))
    ann = expect((yield ToolCall("get_annotator_boxes", {"batch_id": ticket["batch_id"]})))
    ref = expect((yield ToolCall("get_reference_boxes", {"batch_id": ticket["batch_id"]})))
    code = _PROGRAM % {"spec": json.dumps(spec), "ann": json.dumps(ann), "ref": json.dumps(ref)}
    m = expect((yield ToolCall("run_python", {"code": code})))
    answer = {"mean_iou": m["mean_iou"], "label_mismatch_pct": m["label_mismatch_pct"]}
    if m["mean_iou"] < spec["reject_mean_iou"] or m["miss_pct"] >= spec["reject_miss_pct"]:
        return {"verdict": "REJECT", **answer}
    if (
        m["mean_iou"] < spec["rework_mean_iou"]
        or m["miss_pct"] > spec["max_miss_pct"]
        or m["label_mismatch_pct"] > spec["max_label_mismatch_pct"]
    ):
        return {"verdict": "REWORK", **answer}
    record = expect((yield ToolCall("get_annotator_record", {"annotator_id": ticket["annotator_id"]})))
    if record["status"] == "probation" or m["extra_boxes"] >= 1:
        return {"verdict": "ACCEPT_WITH_FEEDBACK", **answer}
    return {"verdict": "ACCEPT", **answer}


_PROGRAM = r"""
import json
from decimal import Decimal, ROUND_HALF_UP
from fractions import Fraction

SPEC = json.loads(%(spec)r)
ANN = {f["frame_id"]: f["boxes"] for f in json.loads(%(ann)r)["frames"]}
REF = {f["frame_id"]: f["boxes"] for f in json.loads(%(ref)r)["frames"]}

def area(b):
    x1, y1, x2, y2 = b
    return (x2 - x1) * (y2 - y1)

def overlap(a, b):
    dx = min(a[2], b[2]) - max(a[0], b[0])
    dy = min(a[3], b[3]) - max(a[1], b[1])
    return dx * dy if dx > 0 and dy > 0 else 0

def usable(box):
    return box["label"] not in SPEC["ignored_labels"] and area(box["box"]) >= SPEC["min_box_area_px"]

def half_up(value, places):
    q = Decimal(1).scaleb(-places)
    return float((Decimal(value.numerator) / Decimal(value.denominator)).quantize(q, rounding=ROUND_HALF_UP))

cut = Fraction(str(SPEC["iou_match_threshold"]))
matched_ious, label_diff, n_ref, n_extra = [], 0, 0, 0
for frame in sorted(set(ANN) | set(REF)):
    mine = [b for b in ANN.get(frame, []) if usable(b)]
    gold = [b for b in REF.get(frame, []) if usable(b)]
    n_ref += len(gold)
    pairs = []
    for a in mine:
        for r in gold:
            inter = overlap(a["box"], r["box"])
            pairs.append((Fraction(inter, area(a["box"]) + area(r["box"]) - inter), a, r))
    pairs.sort(key=lambda p: p[2]["box_id"])
    pairs.sort(key=lambda p: p[1]["box_id"])
    pairs.sort(key=lambda p: p[0], reverse=True)
    taken_a, taken_r = set(), set()
    for iou, a, r in pairs:
        if iou >= cut and a["box_id"] not in taken_a and r["box_id"] not in taken_r:
            taken_a.add(a["box_id"])
            taken_r.add(r["box_id"])
            matched_ious.append(iou)
            label_diff += a["label"] != r["label"]
    n_extra += len(mine) - len(taken_a)
k = len(matched_ious)
print(json.dumps({
    "matches": k,
    "mean_iou": half_up(sum(matched_ious, Fraction(0)) / k, 3) if k else 0.0,
    "label_mismatch_pct": half_up(Fraction(100 * label_diff, k), 1) if k else 0.0,
    "miss_pct": half_up(Fraction(100 * (n_ref - k), n_ref), 1) if n_ref else 0.0,
    "extra_boxes": n_extra,
}))
"""
