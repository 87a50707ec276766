"""ContentModeration: review of a reported post and enforcement (SOP CM-12). Replay tier.

Facts chain through identifiers: report -> post (signals, author) -> policy records (one per
signal) -> author profile -> strike record.
"""

from sopgym.sop_tasks.pack import DomainPack, read_text

from .generator import generate
from .solver import solve
from .tools import FIELDS, TOOLS

PACK = DomainPack(
    name="ContentModeration",
    version=0,
    title="Reported content review and enforcement",
    theme="content moderation",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    human_steps=7,  # report, post, ~2 policies, author, strike record, submit
    generate=generate,
    solver=solve,
)
