"""WarehouseReceiving: inbound receiving inspection (SOP WR-7). Replay tier only.

The smallest complete pack, and the layout every pack follows: ``tools.py`` (what the agent sees),
``generator.py`` (draw, label, records), ``solver.py`` (the SOP as written), ``sop.md``.
"""

from sopgym.sop_tasks.pack import DomainPack, read_text

from .generator import generate
from .solver import solve
from .tools import FIELDS, TOOLS

PACK = DomainPack(
    name="WarehouseReceiving",
    version=0,
    title="Warehouse receiving inspection",
    theme="warehouse receiving inspection",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    human_steps=6,  # appointment, shipment, PO, dock scan, supplier, submit
    generate=generate,
    solver=solve,
)
