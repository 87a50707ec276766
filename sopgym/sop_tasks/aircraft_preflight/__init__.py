"""AircraftPreflightInspection: walkaround findings into the technical log, then dispatch (SOP APF-3).

Tiers: replay (flight, aircraft, findings, MEL) and stateful (the technical log in ``state.py``:
``record_defect`` writes, ``get_airworthiness_status`` reads back, ``place_maintenance_hold`` writes).
The answer needs state the agent can only see by reading the log back: earlier deferrals, their
restrictions and due dates, and the log's repeat-defect verdicts on the defects just recorded.
``expected_state`` checks the defects recorded (category, restrictions) and the hold placed.
"""

from sopgym.sandboxes import StatefulProgram
from sopgym.sop_tasks.pack import DomainPack, read_text

from .generator import generate
from .solver import solve
from .tools import FIELDS, TOOLS

PACK = DomainPack(
    name="AircraftPreflightInspection",
    version=0,
    title="Aircraft pre-flight inspection and dispatch release",
    theme="aircraft pre-flight inspection",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    # flight, aircraft, findings, ~2 MEL look-ups and records, status read-back, hold, submit
    human_steps=9,
    generate=generate,
    solver=solve,
    program=StatefulProgram(f"{__name__}.state"),
)
