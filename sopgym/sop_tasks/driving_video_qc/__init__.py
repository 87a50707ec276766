"""DrivingVideoAnnotationQC: QC of a driving-video bounding-box batch (SOP DV-2). Verifiable tier.

Replay tools return the QC ticket, the project's QC specification, the annotator's and the
reviewer's boxes (JSON per frame) and the annotator's record; the metrics the verdict depends on
(greedy IoU matching per frame after filtering ignored labels and tiny boxes, mean IoU, label
mismatch %, miss %, extra boxes) must be computed with ``run_python``, executed by the verifiable
tier's code runner (Docker by default, the local rlimit runner as the explicit fallback).
"""

from sopgym.sop_tasks.pack import DomainPack, read_text

from .generator import generate
from .solver import solve
from .tools import FIELDS, TOOLS, VERIFIABLE

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
    verifiable=VERIFIABLE,
)
