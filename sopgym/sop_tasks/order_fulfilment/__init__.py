"""OrderFulfilment: order allocation across fulfilment centres (SOP OF-3). Replay lookups + stateful reservations.

The agent checks account and payment, works out each line's eligible fulfilment centres (serving the
region, express transit limit, hazmat certification), then allocates lines in order: availability
is read from the reservation system *after* earlier reservations (repeated SKUs make stale reads
wrong), reservations follow consolidate / single-FC / split rules, and a short line either releases
everything (no partial shipments) or is skipped. The reward checks the answer and the reservations
and order status left in the state (``expected_state``).
"""

from sopgym.sandboxes import StatefulProgram
from sopgym.sop_tasks.pack import DomainPack, read_text

from .generator import MAX_CALLS, generate
from .solver import solve
from .tools import FIELDS, TOOLS

PACK = DomainPack(
    name="OrderFulfilment",
    version=0,
    title="Order allocation and fulfilment decision",
    theme="order fulfilment",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    # The longest procedures the generator keeps use MAX_CALLS tool calls, plus submit.
    human_steps=MAX_CALLS + 1,
    generate=generate,
    solver=solve,
    program=StatefulProgram(f"{__name__}.state"),
)
