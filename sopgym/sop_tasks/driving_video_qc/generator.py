"""DrivingVideoAnnotationQC's task generator: draw, label, records.

* **draw**: the project's QC spec (``_draw_spec``), then reference boxes and the annotator's boxes
  derived from them with a target-driven amount of jitter, label swaps, misses and extras, plus
  decoys (ignored-label and tiny boxes that only count if not filtered) and the annotator's
  probation flag (``_draw_batch``); redrawn until the verdict is the target (balanced over the four
  on val/test);
* **label**: the metrics of SOP section 3 computed exactly (``_metrics``, Fractions) and the
  decision table (``_label``);
* **records** (``_records``): ids, the replay records (a self-reported confidence as a decoy) and
  the difficulty.

**Difficulty** (``_difficulty``) counts the traps section 2 and the distractors set, all drawn
whatever the target verdict (never which step decides, how far a metric is from its threshold, nor
the probation flag, whose odds depend on the target): each ignored-label region only one side drew
(a reference one left in reads as a miss, an annotator one as an extra box); each decoy annotator
box under ``min_box_area_px`` (an extra box if kept); the weather distractor answering with an
error. ``easy``: at most 2; ``medium``: 3 or 4; ``hard``: 5 or more. The ``difficulty_label`` check
of ``sopgym validate-domain`` keeps it from predicting the verdict.
"""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Any

from sopgym.sop_tasks.generation import balanced_target, draw_until, record, recorded_error

from .tools import VERDICTS

LABELS = ("car", "truck", "bus", "pedestrian", "cyclist", "traffic_light", "traffic_sign")
IGNORABLE = ("dont_care", "reflection", "occluded_region")
WIDTH, HEIGHT = 1920, 1080


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = balanced_target(rng, split, index, VERDICTS)
    spec = _draw_spec(rng)
    batch = draw_until(
        lambda: _draw_batch(rng, spec, target),
        lambda b: b["metrics"]["matches"] >= 5 and _label(b["metrics"], spec, b["probation"])[0] == target,
        attempts=500,
        target=target,
    )
    verdict, step = _label(batch["metrics"], spec, batch["probation"])
    return _records(rng, spec, batch, verdict, step)


# -- draw ------------------------------------------------------------------------------------------
def _draw_spec(rng: random.Random) -> dict[str, Any]:
    return {
        "iou_match_threshold": rng.choice((0.5, 0.6)),
        "min_box_area_px": rng.choice((64, 100, 144)),
        "ignored_labels": sorted(rng.sample(IGNORABLE, rng.randint(1, 2))),
        "reject_mean_iou": rng.choice((0.65, 0.7)),
        "rework_mean_iou": rng.choice((0.78, 0.8, 0.82)),
        "reject_miss_pct": rng.choice((25.0, 30.0)),
        "max_miss_pct": rng.choice((5.0, 8.0, 10.0)),
        "max_label_mismatch_pct": rng.choice((4.0, 5.0, 8.0)),
    }


def _clip_box(x1: int, y1: int, x2: int, y2: int) -> list[int]:
    x1, x2 = max(0, min(x1, WIDTH - 2)), max(0, min(x2, WIDTH))
    y1, y2 = max(0, min(y1, HEIGHT - 2)), max(0, min(y2, HEIGHT))
    return [x1, y1, max(x2, x1 + 1), max(y2, y1 + 1)]


def _draw_batch(rng: random.Random, spec: dict[str, Any], target: str) -> dict[str, Any]:
    """One attempt: reference and annotator boxes per frame, the annotator's probation flag, and the
    exact metrics of the boxes."""
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
    decoys = 0
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
            decoys += 1
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
            decoys += 1
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
    return {"ann": ann, "ref": ref, "probation": probation, "decoys": decoys, "metrics": _metrics(ann, ref, spec)}


# -- label -----------------------------------------------------------------------------------------
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
    """(verdict, deciding step) from the metrics."""
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


# -- records ---------------------------------------------------------------------------------------
def _records(rng: random.Random, spec: dict[str, Any], batch: dict[str, Any], verdict: str, step: int) -> dict[str, Any]:
    ann, ref, probation, m = batch["ann"], batch["ref"], batch["probation"], batch["metrics"]
    ticket_id = f"QC-{rng.randint(0, 999999):06d}"
    batch_id = f"BAT-{rng.randint(0, 999999):06d}"
    project_id = f"PRJ-{rng.choice('ABCDEFGH')}{rng.choice('KLMNPQRS')}{rng.randint(10, 99)}"
    annotator_id = f"ANN-{rng.randint(0, 9999):04d}"
    clip_id = f"CLIP-{rng.getrandbits(32):08x}"
    confidence = rng.choice(("high", "high", "medium", "low"))
    replay: dict[str, dict[str, Any]] = {
        "get_qc_ticket": record({"ticket_id": ticket_id}, {
            "ticket_id": ticket_id,
            "batch_id": batch_id,
            "project_id": project_id,
            "annotator_id": annotator_id,
            "clip_id": clip_id,
            "frames_sampled": len(ref),
            "annotator_confidence": confidence,
        }),
        "get_qc_spec": record({"project_id": project_id}, {"project_id": project_id, **spec}),
        "get_annotator_boxes": record({"batch_id": batch_id}, {
            "batch_id": batch_id,
            "frames": [{"frame_id": f, "boxes": ann[f]} for f in sorted(ann)],
        }),
        "get_reference_boxes": record({"batch_id": batch_id}, {
            "batch_id": batch_id,
            "frames": [{"frame_id": f, "boxes": ref[f]} for f in sorted(ref)],
        }),
        "get_annotator_record": record({"annotator_id": annotator_id}, {
            "annotator_id": annotator_id,
            "status": "probation" if probation else "active",
            "batches_delivered": rng.randint(3, 400),
            "start_date": f"20{rng.randint(20, 25)}-{rng.randint(1, 12):02d}-01",
        }),
        "get_vehicle_telemetry": record({"clip_id": clip_id}, {
            "clip_id": clip_id,
            "mean_speed_kmh": rng.randint(0, 110),
            "max_steering_deg": rng.randint(0, 40),
        }),
        "get_weather_tag": record({"clip_id": clip_id}, {
            "clip_id": clip_id,
            "weather": rng.choice(("clear", "rain", "fog", "snow")),
            "lighting": rng.choice(("day", "dusk", "night")),
        }),
        "get_annotator_payroll": record({"annotator_id": annotator_id}, {
            "annotator_id": annotator_id,
            "hours": rng.randint(20, 170),
        }),
    }
    weather_down = rng.random() < 0.15
    if weather_down:  # the weather tagging service is occasionally down: a distractor's error must not matter
        replay["get_weather_tag"] = record({"clip_id": clip_id}, recorded_error("weather tagging service unavailable"))
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
        "difficulty": _difficulty(batch["decoys"], weather_down),
        "meta": {
            "deciding_step": step,
            "matches": m["matches"],
            "miss_pct": float(m["miss_pct"]),
            "extras": m["extras"],
        },
    }


def _difficulty(decoys: int, weather_down: bool) -> str:
    """The level of the batch's trap count (module docstring)."""
    score = decoys + weather_down
    return "easy" if score <= 2 else ("medium" if score <= 4 else "hard")
