"""ReferralAbuseEnforcement: scoring and enforcing referral-programme abuse (SOP RA-3). Replay tier.

The agent reads the referrer's profile and market rules, its referral activity, the device and
payment links (whose linked account ids must be chained into further profile lookups), and its
payout history, then computes an integer risk score by the SOP's point rules and maps it to an
enforcement action with two exceptions.
"""

from sopgym.sop_tasks.pack import DomainPack, read_text

from .generator import generate
from .solver import solve
from .tools import FIELDS, TOOLS

PACK = DomainPack(
    name="ReferralAbuseEnforcement",
    version=0,
    title="Referral-programme abuse enforcement",
    theme="referral-abuse enforcement",
    sop=read_text(__file__),
    tools=TOOLS,
    output_fields=FIELDS,
    # profile, market rules, referrals, device links, payment links, ~3 linked profiles, payouts, decide
    human_steps=10,
    generate=generate,
    solver=solve,
)
