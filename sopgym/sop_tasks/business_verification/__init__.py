"""BusinessVerificationKYB: merchant onboarding KYB (SOP KYB-4). Replay lookups + a stateful case file.

The agent opens a verification case, attaches findings (registry check, ownership check, one
sanctions screening per beneficial owner, chained from the registry's entity id and the ownership
filing's owner ids), reads the case back to learn the risk tier the case system derives (it adds a
jurisdiction rating the agent never sees), and records the decision. The reward checks the answer
and the case's findings and decision (``expected_state``).
"""

from sopgym.sandboxes import StatefulProgram
from sopgym.sop_tasks.pack import DomainPack, read_text

from .generator import generate
from .solver import solve
from .tools import FIELDS, TOOLS

PACK = DomainPack(
    name="BusinessVerificationKYB",
    version=0,
    title="Business verification (KYB) for merchant onboarding",
    theme="business verification (KYB)",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    # application, open case, registry + finding, filing + finding, up to 3 screenings + findings,
    # read case, record decision, submit.
    human_steps=15,
    generate=generate,
    solver=solve,
    program=StatefulProgram(f"{__name__}.state"),
)
