"""DrivingVideoAnnotationQC's vocabulary, tools and answer fields: what the agent sees."""

from sopgym.sop_tasks.pack import OutputField
from sopgym.sop_tasks.toolkit import CodeTools, lookup, python_tool

VERDICTS = ("ACCEPT", "ACCEPT_WITH_FEEDBACK", "REWORK", "REJECT")

RUN_PYTHON = python_tool(
    "Run a short Python 3 program in the QC sandbox (no network, no files, standard library only) and return its "
    "stdout. Print the results you need.",
    timeout_s=10.0,
    max_chars=20000,
)
#: The pack's verifiable handler (``run_python`` through the episode's code runner).
VERIFIABLE = CodeTools(RUN_PYTHON)

_batch = {"type": "string", "pattern": "^BAT-[0-9]{6}$"}
_annotator = {"type": "string", "pattern": "^ANN-[0-9]{4}$"}
_clip = {"type": "string", "pattern": "^CLIP-[0-9a-f]{8}$"}
TOOLS = (
    lookup(
        "get_qc_ticket",
        "QC ticket by ticket id: batch id, project id, annotator id, clip id and the annotator's self-reported confidence.",
        {"ticket_id": {"type": "string", "pattern": "^QC-[0-9]{6}$"}},
        not_found="QC ticket {ticket_id} not found",
    ),
    lookup(
        "get_qc_spec",
        "A project's QC specification: IoU match threshold, minimum box area, ignored labels and verdict thresholds.",
        {"project_id": {"type": "string", "pattern": "^PRJ-[A-Z]{2}[0-9]{2}$"}},
        not_found="project {project_id} not found",
    ),
    lookup(
        "get_annotator_boxes",
        "The annotator's boxes of a batch, per sampled frame: box_id, label, box [x1, y1, x2, y2] in pixels.",
        {"batch_id": _batch},
        not_found="batch {batch_id} not found",
    ),
    lookup(
        "get_reference_boxes",
        "The reviewer's reference boxes of a batch, per sampled frame: box_id, label, box [x1, y1, x2, y2] in pixels.",
        {"batch_id": _batch},
        not_found="no reference review for batch {batch_id}",
    ),
    lookup(
        "get_annotator_record",
        "Annotator record: status (active or probation), batches delivered, start date.",
        {"annotator_id": _annotator},
        not_found="annotator {annotator_id} not found",
    ),
    RUN_PYTHON.spec,
    lookup(
        "get_vehicle_telemetry",
        "Speed and steering telemetry summary of a recorded clip.",
        {"clip_id": _clip},
        distractor=True,
        not_found="clip {clip_id} not found",
    ),
    lookup(
        "get_weather_tag",
        "Weather and lighting tags of a recorded clip.",
        {"clip_id": _clip},
        distractor=True,
        not_found="clip {clip_id} not found",
    ),
    lookup(
        "get_annotator_payroll",
        "Payroll summary of an annotator for the current month.",
        {"annotator_id": _annotator},
        distractor=True,
        not_found="annotator {annotator_id} not found",
    ),
)

FIELDS = (
    OutputField("verdict", enum=VERDICTS, description="QC verdict of the batch."),
    OutputField("mean_iou", type="number", description="Mean IoU of the matches, rounded half up to 3 decimals."),
    OutputField("label_mismatch_pct", type="number", description="Label mismatch %, rounded half up to 1 decimal."),
)
