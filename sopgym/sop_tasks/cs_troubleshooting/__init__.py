"""CustomerServiceTroubleshooting: broadband fault contacts (SOP CS-BB-12). Stateful tier.

Every tool runs in the stateful program ``state.py`` (one SQLite database per episode): the agent
authenticates (session token), reads the account, checks outages, runs line tests whose results
change after a port reset, opens a ticket, attaches findings, reads the ticket back for the
priority and SLA the program computes, and escalates or closes it. The answer depends on state
the agent wrote; ``expected_state`` checks the writes themselves (one ticket with the right
category, findings, status and escalation tier; the right port resets).
"""

from sopgym.sandboxes import StatefulProgram
from sopgym.sop_tasks.pack import DomainPack, read_text

from .generator import generate
from .solver import solve
from .tools import FIELDS, TOOLS

PACK = DomainPack(
    name="CustomerServiceTroubleshooting",
    version=0,
    title="Customer-service broadband troubleshooting",
    theme="customer-service troubleshooting",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    # authenticate, account, outage, line test, reset + retest, history, open, findings, read back, route
    human_steps=10,
    generate=generate,
    solver=solve,
    program=StatefulProgram(f"{__name__}.state"),
)
