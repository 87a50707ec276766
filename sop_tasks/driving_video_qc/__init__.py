"""DrivingVideoAnnotationQC: QC of a driving-video bounding-box batch (SOP DV-2). Verifiable tier.

Replay tools return the QC ticket, the project's QC specification, the annotator's and the
reviewer's boxes (JSON per frame) and the annotator's record; the metrics the verdict depends on
(greedy IoU matching per frame after filtering ignored labels and tiny boxes, mean IoU, label
mismatch %, miss %, extra boxes) must be computed with ``run_python``, executed by the verifiable
tier's code runner (Docker by default, the local rlimit runner as the explicit fallback).

The generator draws reference boxes, derives the annotator's boxes from them with a target-driven
amount of jitter, label swaps, misses and extras (plus decoys: ignored-label and tiny boxes that
only count if not filtered, a self-reported confidence), computes the metrics with its own exact
(Fraction) implementation and labels the task with a decision table, re-drawing until the verdict is
the target (balanced over the four verdicts on val/test). The reference solver sends a standalone
program to ``run_python`` and reads its printed JSON; it never calls the labelling code.
"""

from __future__ import annotations

import json
import random
from fractions import Fraction
from typing import Any

from sopgym.sandboxes import ERROR_KEY, Outcome, Tier, ToolResult, ToolSpec, canonical_args
from sopgym.sop_tasks.pack import DomainPack, OutputField, ToolCall, ToolError, object_schema, read_text

VERDICTS = ("ACCEPT", "ACCEPT_WITH_FEEDBACK", "REWORK", "REJECT")
LABELS = ("car", "truck", "bus", "pedestrian", "cyclist", "traffic_light", "traffic_sign")
IGNORABLE = ("dont_care", "reflection", "occluded_region")
WIDTH, HEIGHT = 1920, 1080
PYTHON_TIMEOUT_S = 10.0




_batch = {"type": "string", "pattern": "^BAT-[0-9]{6}$"}
_annotator = {"type": "string", "pattern": "^ANN-[0-9]{4}$"}
_clip = {"type": "string", "pattern": "^CLIP-[0-9a-f]{8}$"}
TOOLS = (
    ToolSpec(
        "get_qc_ticket",
        "QC ticket by ticket id: batch id, project id, annotator id, clip id and the annotator's self-reported confidence.",
        object_schema(ticket_id={"type": "string", "pattern": "^QC-[0-9]{6}$"}),
        not_found="QC ticket {ticket_id} not found",
    ),
    ToolSpec(
        "get_qc_spec",
        "A project's QC specification: IoU match threshold, minimum box area, ignored labels and verdict thresholds.",
        object_schema(project_id={"type": "string", "pattern": "^PRJ-[A-Z]{2}[0-9]{2}$"}),
        not_found="project {project_id} not found",
    ),
    ToolSpec(
        "get_annotator_boxes",
        "The annotator's boxes of a batch, per sampled frame: box_id, label, box [x1, y1, x2, y2] in pixels.",
        object_schema(batch_id=_batch),
        not_found="batch {batch_id} not found",
    ),
    ToolSpec(
        "get_reference_boxes",
        "The reviewer's reference boxes of a batch, per sampled frame: box_id, label, box [x1, y1, x2, y2] in pixels.",
        object_schema(batch_id=_batch),
        not_found="no reference review for batch {batch_id}",
    ),
    ToolSpec(
        "get_annotator_record",
        "Annotator record: status (active or probation), batches delivered, start date.",
        object_schema(annotator_id=_annotator),
        not_found="annotator {annotator_id} not found",
    ),
    ToolSpec(
        "run_python",
        "Run a short Python 3 program in the QC sandbox (no network, no files, standard library only) and return its "
        "stdout. Print the results you need.",
        object_schema(code={"type": "string", "minLength": 1, "maxLength": 20000}),
        tier=Tier.VERIFIABLE,
    ),
    ToolSpec(
        "get_vehicle_telemetry",
        "Speed and steering telemetry summary of a recorded clip.",
        object_schema(clip_id=_clip),
        distractor=True,
        not_found="clip {clip_id} not found",
    ),
    ToolSpec(
        "get_weather_tag",
        "Weather and lighting tags of a recorded clip.",
        object_schema(clip_id=_clip),
        distractor=True,
        not_found="clip {clip_id} not found",
    ),
    ToolSpec(
        "get_annotator_payroll",
        "Payroll summary of an annotator for the current month.",
        object_schema(annotator_id=_annotator),
        distractor=True,
        not_found="annotator {annotator_id} not found",
    ),
)

FIELDS = (
    OutputField("verdict", enum=VERDICTS, description="QC verdict of the batch."),
    OutputField("mean_iou", type="number", description="Mean IoU of the matches, rounded half up to 3 decimals."),
    OutputField("label_mismatch_pct", type="number", description="Label mismatch %, rounded half up to 1 decimal."),
)


def run_verifiable(runner: Any, name: str, args: dict[str, Any], episode: Any) -> ToolResult:
    """The verifiable handler: ``run_python`` through the code runner."""
    if name != "run_python":
        return ToolResult(Outcome.UNKNOWN_TOOL, error=f"unknown verifiable tool {name!r}; expected 'run_python'")
    result = runner.run_python(args["code"], timeout_s=PYTHON_TIMEOUT_S)
    if result.timed_out:
        return ToolResult(Outcome.TIMEOUT, error=f"program ran past the {PYTHON_TIMEOUT_S:g} s limit and was stopped")
    if result.exit_code != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-5:]) or f"exit code {result.exit_code}"
        return ToolResult(Outcome.TOOL_ERROR, error=f"program failed (exit code {result.exit_code}):\n{tail}")
    text = result.stdout if result.stdout else "(no output: print the values you need)"
    if result.truncated:
        text += "\n[output truncated: print less]"
    return ToolResult(Outcome.OK, content=text)


# ---------------------------------------------------------------------------------------------
# Generator: boxes built around a target, labelled by exact metrics and a decision table.
# ---------------------------------------------------------------------------------------------
def _area(b: list[int]) -> int:
    return (b[2] - b[0]) * (b[3] - b[1])


def _iou(a: list[int], b: list[int]) -> Fraction:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    inter = w * h if w > 0 and h > 0 else 0
    return Fraction(inter, _area(a) + _area(b) - inter)


def _round_half_up(x: Fraction, places: int) -> Fraction:
    scale = 10**places
    return Fraction(int(x * scale + Fraction(1, 2)), scale)


def _metrics(ann: dict[str, list], ref: dict[str, list], spec: dict[str, Any]) -> dict[str, Any]:
    """Exact metrics of section 3: (mean IoU, mismatch %, miss %) as Fractions rounded, extra count."""
    keep = lambda b: b["label"] not in spec["ignored_labels"] and _area(b["box"]) >= spec["min_box_area_px"]  # noqa: E731
    threshold = Fraction(str(spec["iou_match_threshold"]))
    ious, mismatched, refs, extras = [], 0, 0, 0
    for frame in ref:
        a_boxes = [b for b in ann.get(frame, []) if keep(b)]
        r_boxes = [b for b in ref[frame] if keep(b)]
        refs += len(r_boxes)
        candidates = sorted(
            ((_iou(a["box"], r["box"]), a["box_id"], r["box_id"], a, r) for a in a_boxes for r in r_boxes),
            key=lambda t: (-t[0], t[1], t[2]),
        )
        used_a, used_r = set(), set()
        for iou, aid, rid, a, r in candidates:
            if iou < threshold:
                break
            if aid in used_a or rid in used_r:
                continue
            used_a.add(aid)
            used_r.add(rid)
            ious.append(iou)
            mismatched += a["label"] != r["label"]
        extras += len(a_boxes) - len(used_a)
    n = len(ious)
    return {
        "matches": n,
        "mean_iou": _round_half_up(sum(ious, Fraction(0)) / n, 3) if n else Fraction(0),
        "mismatch_pct": _round_half_up(Fraction(100 * mismatched, n), 1) if n else Fraction(0),
        "miss_pct": _round_half_up(Fraction(100 * (refs - n), refs), 1) if refs else Fraction(0),
        "extras": extras,
    }


def _label(m: dict[str, Any], spec: dict[str, Any], probation: bool) -> tuple[str, int]:
    f = lambda key: Fraction(str(spec[key]))  # noqa: E731
    if m["mean_iou"] < f("reject_mean_iou") or m["miss_pct"] >= f("reject_miss_pct"):
        return "REJECT", 5
    if (
        m["mean_iou"] < f("rework_mean_iou")
        or m["miss_pct"] > f("max_miss_pct")
        or m["mismatch_pct"] > f("max_label_mismatch_pct")
    ):
        return "REWORK", 6
    if probation or m["extras"] >= 1:
        return "ACCEPT_WITH_FEEDBACK", 7
    return "ACCEPT", 8


def _clip_box(x1: int, y1: int, x2: int, y2: int) -> list[int]:
    x1, x2 = max(0, min(x1, WIDTH - 2)), max(0, min(x2, WIDTH))
    y1, y2 = max(0, min(y1, HEIGHT - 2)), max(0, min(y2, HEIGHT))
    return [x1, y1, max(x2, x1 + 1), max(y2, y1 + 1)]


def _draw(rng: random.Random, spec: dict[str, Any], target: str) -> tuple[dict, dict, bool]:
    """One attempt: reference and annotator boxes per frame, and the annotator's probation flag."""
    knobs = {
        "ACCEPT": (0.04, 0.03, 0.0, 0.0),
        "ACCEPT_WITH_FEEDBACK": (0.05, 0.03, 0.02, 0.15),
        "REWORK": (rng.choice((0.06, 0.14)), rng.choice((0.0, 0.12)), rng.choice((0.02, 0.15)), 0.1),
        "REJECT": (rng.choice((0.08, 0.25)), rng.choice((0.0, 0.1)), rng.choice((0.1, 0.35)), 0.1),
    }[target]
    jitter, swap_p, miss_p, extra_p = knobs
    frames = [f"f{rng.randint(0, 9000):05d}" for _ in range(rng.randint(3, 6))]
    frames = sorted(set(frames))
    ref: dict[str, list] = {}
    ann: dict[str, list] = {}
    rid = iter(rng.sample(range(1000, 10000), 200))
    aid = iter(rng.sample(range(1000, 10000), 200))
    for frame in frames:
        ref[frame], ann[frame] = [], []
        for _ in range(rng.randint(3, 7)):
            w, h = rng.randint(18, 260), rng.randint(18, 180)
            x1, y1 = rng.randint(0, WIDTH - w), rng.randint(0, HEIGHT - h)
            label = rng.choice(LABELS)
            ref[frame].append({"box_id": f"R{next(rid)}", "label": label, "box": [x1, y1, x1 + w, y1 + h]})
            if rng.random() < miss_p:
                continue
            j = max(1, round(jitter * (w + h) / 2))
            box = _clip_box(*(v + rng.randint(-j, j) for v in (x1, y1, x1 + w, y1 + h)))
            if rng.random() < swap_p:
                label = rng.choice([x for x in LABELS if x != label])
            ann[frame].append({"box_id": f"A{next(aid)}", "label": label, "box": box})
        if rng.random() < extra_p:  # a box the reviewer did not draw
            w, h = rng.randint(20, 120), rng.randint(20, 90)
            x1, y1 = rng.randint(0, WIDTH - w), rng.randint(0, HEIGHT - h)
            ann[frame].append({"box_id": f"A{next(aid)}", "label": rng.choice(LABELS), "box": [x1, y1, x1 + w, y1 + h]})
        # Decoys removed by section 2: an ignored-label region only one side drew, and a tiny box.
        if rng.random() < 0.4:
            w, h = rng.randint(60, 300), rng.randint(40, 200)
            x1, y1 = rng.randint(0, WIDTH - w), rng.randint(0, HEIGHT - h)
            side = ann if rng.random() < 0.5 else ref
            prefix = "A" if side is ann else "R"
            ident = next(aid) if side is ann else next(rid)
            side[frame].append(
                {
                    "box_id": f"{prefix}{ident}",
                    "label": rng.choice(spec["ignored_labels"]),
                    "box": [x1, y1, x1 + w, y1 + h],
                }
            )
        if rng.random() < 0.4:
            edge = int(spec["min_box_area_px"] ** 0.5)
            w = rng.randint(3, max(3, edge - 2))
            h = max(1, (spec["min_box_area_px"] - 1) // w)
            x1, y1 = rng.randint(0, WIDTH - w), rng.randint(0, HEIGHT - h)
            ann[frame].append(
                {
                    "box_id": f"A{next(aid)}",
                    "label": rng.choice(("traffic_light", "traffic_sign")),
                    "box": [x1, y1, x1 + w, y1 + h],
                }
            )
        rng.shuffle(ref[frame])
        rng.shuffle(ann[frame])
    probation = rng.random() < (0.5 if target == "ACCEPT_WITH_FEEDBACK" else 0.2)
    return ann, ref, probation


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = VERDICTS[index % len(VERDICTS)] if split != "train" else rng.choice(VERDICTS)
    spec = {
        "iou_match_threshold": rng.choice((0.5, 0.6)),
        "min_box_area_px": rng.choice((64, 100, 144)),
        "ignored_labels": sorted(rng.sample(IGNORABLE, rng.randint(1, 2))),
        "reject_mean_iou": rng.choice((0.65, 0.7)),
        "rework_mean_iou": rng.choice((0.78, 0.8, 0.82)),
        "reject_miss_pct": rng.choice((25.0, 30.0)),
        "max_miss_pct": rng.choice((5.0, 8.0, 10.0)),
        "max_label_mismatch_pct": rng.choice((4.0, 5.0, 8.0)),
    }
    for _ in range(500):
        ann, ref, probation = _draw(rng, spec, target)
        m = _metrics(ann, ref, spec)
        if m["matches"] >= 5:
            verdict, step = _label(m, spec, probation)
            if verdict == target:
                break
    else:  # pragma: no cover - the knobs reach every target quickly
        raise AssertionError(f"could not draw a batch with verdict {target}")

    ticket_id = f"QC-{rng.randint(0, 999999):06d}"
    batch_id = f"BAT-{rng.randint(0, 999999):06d}"
    project_id = f"PRJ-{rng.choice('ABCDEFGH')}{rng.choice('KLMNPQRS')}{rng.randint(10, 99)}"
    annotator_id = f"ANN-{rng.randint(0, 9999):04d}"
    clip_id = f"CLIP-{rng.getrandbits(32):08x}"
    confidence = rng.choice(("high", "high", "medium", "low"))
    replay: dict[str, dict[str, Any]] = {
        "get_qc_ticket": {
            canonical_args({"ticket_id": ticket_id}): {
                "ticket_id": ticket_id,
                "batch_id": batch_id,
                "project_id": project_id,
                "annotator_id": annotator_id,
                "clip_id": clip_id,
                "frames_sampled": len(ref),
                "annotator_confidence": confidence,
            }
        },
        "get_qc_spec": {canonical_args({"project_id": project_id}): {"project_id": project_id, **spec}},
        "get_annotator_boxes": {
            canonical_args({"batch_id": batch_id}): {
                "batch_id": batch_id,
                "frames": [{"frame_id": f, "boxes": ann[f]} for f in sorted(ann)],
            }
        },
        "get_reference_boxes": {
            canonical_args({"batch_id": batch_id}): {
                "batch_id": batch_id,
                "frames": [{"frame_id": f, "boxes": ref[f]} for f in sorted(ref)],
            }
        },
        "get_annotator_record": {
            canonical_args({"annotator_id": annotator_id}): {
                "annotator_id": annotator_id,
                "status": "probation" if probation else "active",
                "batches_delivered": rng.randint(3, 400),
                "start_date": f"20{rng.randint(20, 25)}-{rng.randint(1, 12):02d}-01",
            }
        },
        "get_vehicle_telemetry": {
            canonical_args({"clip_id": clip_id}): {
                "clip_id": clip_id,
                "mean_speed_kmh": rng.randint(0, 110),
                "max_steering_deg": rng.randint(0, 40),
            }
        },
        "get_weather_tag": {
            canonical_args({"clip_id": clip_id}): {
                "clip_id": clip_id,
                "weather": rng.choice(("clear", "rain", "fog", "snow")),
                "lighting": rng.choice(("day", "dusk", "night")),
            }
        },
        "get_annotator_payroll": {
            canonical_args({"annotator_id": annotator_id}): {
                "annotator_id": annotator_id,
                "hours": rng.randint(20, 170),
            }
        },
    }
    if rng.random() < 0.15:
        replay["get_weather_tag"] = {
            canonical_args({"clip_id": clip_id}): {ERROR_KEY: "weather tagging service unavailable"}
        }
    near = min(abs(m["mean_iou"] - Fraction(str(spec[k]))) for k in ("reject_mean_iou", "rework_mean_iou"))
    difficulty = (
        "hard" if near <= Fraction(1, 100) or step == 7 and not probation else ("easy" if step == 5 else "medium")
    )
    return {
        "inputs": {
            "ticket_id": ticket_id,
            "queue": rng.choice(("urban-day", "highway", "night-ops")),
            "submitted_at": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00",
        },
        "answer": {
            "verdict": verdict,
            "mean_iou": float(m["mean_iou"]),
            "label_mismatch_pct": float(m["mismatch_pct"]),
        },
        "replay": replay,
        "difficulty": difficulty,
        "meta": {
            "deciding_step": step,
            "matches": m["matches"],
            "miss_pct": float(m["miss_pct"]),
            "extras": m["extras"],
        },
    }


# ---------------------------------------------------------------------------------------------
# Reference solver: the SOP as written; metrics computed by a program sent to run_python.
# ---------------------------------------------------------------------------------------------
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


def _ok(result: Any) -> Any:
    if isinstance(result, ToolError):
        raise result
    return result


def solve(inputs: dict[str, Any]):
    ticket = _ok((yield ToolCall("get_qc_ticket", {"ticket_id": inputs["ticket_id"]})))
    spec = _ok((yield ToolCall("get_qc_spec", {"project_id": ticket["project_id"]})))
    ann = _ok((yield ToolCall("get_annotator_boxes", {"batch_id": ticket["batch_id"]})))
    ref = _ok((yield ToolCall("get_reference_boxes", {"batch_id": ticket["batch_id"]})))
    code = _PROGRAM % {"spec": json.dumps(spec), "ann": json.dumps(ann), "ref": json.dumps(ref)}
    m = _ok((yield ToolCall("run_python", {"code": code})))
    answer = {"mean_iou": m["mean_iou"], "label_mismatch_pct": m["label_mismatch_pct"]}
    if m["mean_iou"] < spec["reject_mean_iou"] or m["miss_pct"] >= spec["reject_miss_pct"]:
        return {"verdict": "REJECT", **answer}
    if (
        m["mean_iou"] < spec["rework_mean_iou"]
        or m["miss_pct"] > spec["max_miss_pct"]
        or m["label_mismatch_pct"] > spec["max_label_mismatch_pct"]
    ):
        return {"verdict": "REWORK", **answer}
    record = _ok((yield ToolCall("get_annotator_record", {"annotator_id": ticket["annotator_id"]})))
    if record["status"] == "probation" or m["extra_boxes"] >= 1:
        return {"verdict": "ACCEPT_WITH_FEEDBACK", **answer}
    return {"verdict": "ACCEPT", **answer}


PACK = DomainPack(
    name="DrivingVideoAnnotationQC",
    version=0,
    title="Driving-video annotation QC",
    theme="driving-video annotation QC",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    # ticket, spec, annotator boxes, reference boxes, run_python, annotator record, submit.
    human_steps=7,
    generate=generate,
    solver=solve,
    verifiable=run_verifiable,
)
