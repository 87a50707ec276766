"""SellerEmailTriage: seller-support email routing (SOP SET-2). Replay tier only.

The agent reads the email, identifies the sender in the seller directory (chaining the seller id to
the account and the performance metrics), looks up every quoted order (typos are ignored, orders of
another seller divert to Trust & Safety), applies the legal and suspension exceptions, then routes
by the receiving mailbox's routing table (which differs per mailbox and per task) and raises the
priority per the SOP's adjustments.
"""

from sopgym.sop_tasks.pack import DomainPack, read_text

from .generator import generate
from .solver import solve
from .tools import FIELDS, TOOLS

PACK = DomainPack(
    name="SellerEmailTriage",
    version=0,
    title="Seller support email triage",
    theme="seller email triage",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    # email, seller lookup, account, up to 3 orders, routing table, metrics, submit.
    human_steps=9,
    generate=generate,
    solver=solve,
)
