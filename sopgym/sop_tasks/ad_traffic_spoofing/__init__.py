"""AdTrafficSpoofing: invalid-traffic review of an ad-exchange publisher (SOP AT-3). Verifiable tier.

Each task carries a log database (impressions, clicks, IP ranges; program ``state.py``) that the
agent can read only with ``run_sql``: read-only queries executed by the verifiable tier's code
runner (Docker by default, the local rlimit runner as the explicit fallback). The IVT rate and the
device CTRs the SOP thresholds use are aggregates no other tool returns. Replay tools give the case,
the partner contract, the publisher profile, its IP allow-list and its enforcement history.
"""

from sopgym.sandboxes import StatefulProgram
from sopgym.sop_tasks.pack import DomainPack, read_text

from .generator import generate
from .solver import solve
from .tools import FIELDS, TOOLS, VERIFIABLE

PACK = DomainPack(
    name="AdTrafficSpoofing",
    version=0,
    title="Ad-traffic spoofing: invalid-traffic review of a publisher",
    theme="ad-traffic spoofing",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    # case, contract, profile, allow-list, IVT query, history or CTR query, decide, submit.
    human_steps=8,
    generate=generate,
    solver=solve,
    program=StatefulProgram(f"{__name__}.state"),
    verifiable=VERIFIABLE,
)
