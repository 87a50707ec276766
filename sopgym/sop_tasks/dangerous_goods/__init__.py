"""DangerousGoodsClassification: acceptance check of a dangerous-goods air consignment (SOP DG-5). Replay tier.

Facts chain: consignment -> UN records -> packing instructions (ids from the UN record) and
segregation rules (classes from the UN record). Numeric thresholds: net quantity per package
against the PI maximum (equal passes), passenger-to-cargo fallback. The answer has an integer
field compared as a number. The tables are illustrative internal tables, not a regulation.
"""

from sopgym.sop_tasks.pack import DomainPack, read_text

from .generator import generate
from .solver import solve
from .tools import FIELDS, TOOLS

PACK = DomainPack(
    name="DangerousGoodsClassification",
    version=0,
    title="Dangerous-goods classification and acceptance for air cargo",
    theme="dangerous-goods classification",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    human_steps=9,  # consignment, ~2 UN look-ups, ~3 PIs, ~2 segregation checks, submit
    generate=generate,
    solver=solve,
)
