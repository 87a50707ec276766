"""AdTrafficSpoofing: invalid-traffic review of an ad-exchange publisher (SOP AT-3). Verifiable tier.

Each task carries a log database (impressions, clicks, IP ranges; program ``state.py``) that the
agent can read only with ``run_sql``: read-only queries executed by the verifiable tier's code
runner (Docker by default, the local rlimit runner as the explicit fallback). The IVT rate and the
device CTRs the SOP thresholds use are aggregates no other tool returns. Replay tools give the case,
the partner contract, the publisher profile, its IP allow-list and its enforcement history.

The generator builds the logs around a target action (balanced over the five actions on val/test)
and an invalid-click count inside the target's IVT band, adds traps (other publishers' traffic,
rows outside the window or exactly at its exclusive end, allow-listed data-centre clicks,
near-bursts, latencies exactly at the minimum, clicks on other publishers' impressions, CTRs over
the ceiling on too few impressions, a partner-reported figure), and labels the task by evaluating
the SOP's definitions over its own rows in Python (``_measure``/``_label``). The reference solver
(``solve``) measures through SQL and never calls the labelling code.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import Any

from sopgym.sandboxes import ERROR_KEY, Outcome, StatefulProgram, Tier, ToolResult, ToolSpec, canonical_args
from sopgym.sop_tasks.pack import DomainPack, OutputField, ToolCall, ToolError, object_schema, read_text

ACTIONS = ("TERMINATE", "SUSPEND", "WITHHOLD_PAYMENT", "WARN", "NO_ACTION")
DEVICES = ("desktop", "mobile", "tablet", "ctv")
PROGRAM = StatefulProgram("sopgym.sop_tasks.ad_traffic_spoofing.state")
SQL_TIMEOUT_S = 5.0
_EPOCH_2026 = 1767225600  # 2026-01-01T00:00:00Z




_pub = {"type": "string", "pattern": "^PUB-[0-9]{5}$"}
TOOLS = (
    ToolSpec(
        "get_review_case",
        "IVT review case by case id: publisher id, contract id, partner, review window (Unix seconds, end exclusive) "
        "and the partner's own reported IVT figure.",
        object_schema(case_id={"type": "string", "pattern": "^IVT-[0-9]{6}$"}),
        not_found="review case {case_id} not found",
    ),
    ToolSpec(
        "get_partner_contract",
        "Demand-partner contract by contract id: IVT thresholds, burst and latency limits, CTR ceilings per device type.",
        object_schema(contract_id={"type": "string", "pattern": "^AGR-[0-9]{4}$"}),
        not_found="contract {contract_id} not found",
    ),
    ToolSpec(
        "get_publisher_profile",
        "Publisher profile: name, tier, sign-up date and the id of its declared IP allow-list (or null).",
        object_schema(publisher_id=_pub),
        not_found="publisher {publisher_id} not found",
    ),
    ToolSpec(
        "get_ip_allowlist",
        "A publisher's declared IP allow-list by allow-list id: the ip_ranges range ids it declares as its own proxies.",
        object_schema(allowlist_id={"type": "string", "pattern": "^ALW-[0-9]{5}$"}),
        not_found="allow-list {allowlist_id} not found",
    ),
    ToolSpec(
        "get_enforcement_history",
        "Past enforcement actions against a publisher: date (YYYY-MM-DD), action and case id.",
        object_schema(publisher_id=_pub),
        not_found="publisher {publisher_id} not found",
    ),
    ToolSpec(
        "run_sql",
        "Run one read-only SQLite query against this case's impression/click logs (tables impressions, clicks, "
        "ip_ranges). Returns the result rows as a JSON list of lists. Writes fail.",
        object_schema(query={"type": "string", "minLength": 1, "maxLength": 6000}),
        tier=Tier.VERIFIABLE,
    ),
    ToolSpec(
        "get_payout_statement",
        "A publisher's payout statement for a month (YYYY-MM).",
        object_schema(publisher_id=_pub, month={"type": "string", "pattern": r"^\d{4}-\d{2}$"}),
        distractor=True,
        not_found="no payout statement for {publisher_id} in {month}",
    ),
    ToolSpec(
        "get_creative_review",
        "Creative approval record by creative id.",
        object_schema(creative_id={"type": "string", "pattern": "^CRV-[0-9]{6}$"}),
        distractor=True,
        not_found="creative {creative_id} not found",
    ),
    ToolSpec(
        "get_geo_report",
        "Share of a publisher's impressions by country over the last 30 days.",
        object_schema(publisher_id=_pub),
        distractor=True,
        not_found="no geo report for {publisher_id}",
    ),
)

FIELDS = (
    OutputField("enforcement_action", enum=ACTIONS, description="Enforcement action decided by the SOP."),
    OutputField(
        "ivt_rate_pct", type="number", description="IVT rate in percent, rounded half up to one decimal place."
    ),
)


def run_verifiable(runner: Any, name: str, args: dict[str, Any], episode: Any) -> ToolResult:
    """The verifiable handler: ``run_sql`` through the code runner against the task's log database."""
    if name != "run_sql":
        return ToolResult(Outcome.UNKNOWN_TOOL, error=f"unknown verifiable tool {name!r}; expected 'run_sql'")
    result = runner.run_sql(
        args["query"], program=episode.program, initial_state=episode.initial_state or {}, timeout_s=SQL_TIMEOUT_S
    )
    if result.timed_out:
        return ToolResult(Outcome.TIMEOUT, error=f"query ran past the {SQL_TIMEOUT_S:g} s limit and was stopped")
    if result.exit_code != 0:
        lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
        return ToolResult(
            Outcome.TOOL_ERROR, error=f"query failed: {lines[-1] if lines else 'exit code ' + str(result.exit_code)}"
        )
    text = result.stdout
    if result.truncated:
        text += "\n[output truncated: select fewer rows or aggregate in SQL]"
    return ToolResult(Outcome.OK, content=text)


# ---------------------------------------------------------------------------------------------
# Generator: logs built around a target, labelled by evaluating the SOP over the rows in Python.
# ---------------------------------------------------------------------------------------------
def _tenths(invalid: int, total: int) -> int:
    """100 * invalid / total in tenths of a percent, rounded half up (integer arithmetic)."""
    return (2000 * invalid + total) // (2 * total)


def _end_date(end_ts: int) -> dt.date:
    return dt.datetime.fromtimestamp(end_ts, dt.timezone.utc).date()


def _measure(
    db: dict[str, list], pub: str, start: int, end: int, c: dict[str, Any], allow: set[str]
) -> tuple[int, int, list[str]]:
    """(invalid, total, anomalous device types) of the publisher's window, by the SOP's definitions."""
    window = [k for k in db["clicks"] if k["publisher_id"] == pub and start <= k["ts"] < end]
    imps = {i["imp_id"]: i for i in db["impressions"] if i["publisher_id"] == pub}
    dc = [r for r in db["ip_ranges"] if r["kind"] == "datacenter" and r["range_id"] not in allow]
    groups = Counter((k["ip"], k["ts"] // 60) for k in window)
    invalid = 0
    for k in window:
        imp = imps.get(k["imp_id"])
        if (
            any(r["start_num"] <= k["ip_num"] <= r["end_num"] for r in dc)
            or groups[(k["ip"], k["ts"] // 60)] >= c["burst_clicks_per_minute"]
            or imp is None
            or k["ts"] - imp["ts"] < c["min_click_latency_s"]
        ):
            invalid += 1
    shown = Counter(i["device_type"] for i in imps.values() if start <= i["ts"] < end)
    clicked = Counter(k["device_type"] for k in window)
    anomalous = [
        d
        for d in DEVICES
        if shown[d] >= c["min_impressions_for_ctr"]
        and Fraction(100 * clicked[d], shown[d]) > Fraction(str(c["ctr_ceiling_pct"][d]))
    ]
    return invalid, len(window), anomalous


def _label(tenths: int, c: dict[str, Any], strikes: int, anomalous: list[str]) -> str:
    if tenths >= round(c["suspend_ivt_pct"] * 10):
        return "TERMINATE" if strikes >= 2 else "SUSPEND"
    if tenths >= round(c["withhold_ivt_pct"] * 10):
        return "WITHHOLD_PAYMENT"
    return "WARN" if anomalous else "NO_ACTION"


def _ip(num: int) -> str:
    return ".".join(str((num >> s) & 255) for s in (24, 16, 8, 0))


class _Logs:
    """Row builder with unique ids and IPs."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.impressions: list[dict[str, Any]] = []
        self.clicks: list[dict[str, Any]] = []
        self.used_ips: set[int] = set()
        self._imp_ids = iter(rng.sample(range(10**7, 10**8), 6000))
        self._click_ids = iter(rng.sample(range(10**7, 10**8), 1500))

    def imp_id(self) -> str:
        return f"I{next(self._imp_ids)}"

    def fresh_ip(self, ranges: list[tuple[int, int]]) -> int:
        while True:
            lo, hi = self.rng.choice(ranges)
            num = self.rng.randint(lo, hi)
            if num not in self.used_ips:
                self.used_ips.add(num)
                return num

    def impression(self, pub: str, device: str, ts: int) -> str:
        imp_id = self.imp_id()
        self.impressions.append({"imp_id": imp_id, "publisher_id": pub, "device_type": device, "ts": ts})
        return imp_id

    def click(self, pub: str, device: str, ip: int, ts: int, latency: int | None, imp_id: str | None = None) -> None:
        """A click; ``latency`` None means it points to ``imp_id`` (or a made-up id) without an impression of its own."""
        if latency is not None:
            imp_id = self.impression(pub, device, ts - latency)
        elif imp_id is None:
            imp_id = self.imp_id()  # an id no impression has
        self.clicks.append(
            {
                "click_id": f"C{next(self._click_ids)}",
                "imp_id": imp_id,
                "publisher_id": pub,
                "device_type": device,
                "ip": _ip(ip),
                "ip_num": ip,
                "ts": ts,
            }
        )


def _ranges(rng: random.Random) -> list[dict[str, Any]]:
    kinds = (
        ["datacenter"] * rng.randint(3, 5)
        + ["residential"] * rng.randint(2, 3)
        + ["mobile_carrier"] * rng.randint(1, 2)
    )
    prefixes = rng.sample(
        [(a, b) for a in range(11, 224) if a not in (127, 169, 172, 192) for b in range(0, 256, 17)], len(kinds)
    )
    providers = {
        "datacenter": ("Hostwave Cloud", "NimbusDC", "Arclight Hosting", "CoreRack", "Quarry Compute"),
        "residential": ("Metro Broadband", "Valley Fiber", "Coastline Cable"),
        "mobile_carrier": ("Orbit Mobile", "Relay Wireless"),
    }
    ids = rng.sample(range(100, 1000), len(kinds))
    out = []
    for kind, (a, b), rid in zip(kinds, prefixes, ids):
        start = (a << 24) | (b << 16) | (rng.randint(0, 200) << 8)
        out.append(
            {
                "range_id": f"R{rid}",
                "start_num": start,
                "end_num": start + 256 * rng.randint(1, 8) - 1,
                "kind": kind,
                "provider": rng.choice(providers[kind]),
            }
        )
    return out


def _pick_invalid_count(rng: random.Random, n: int, lo: int, hi: int | None) -> tuple[int, bool] | None:
    """An invalid count whose rounded rate (tenths) is in [lo, hi); True when it sits on the band's edge."""
    ks = [k for k in range(0, int(n * 0.75) + 1) if _tenths(k, n) >= lo and (hi is None or _tenths(k, n) < hi)]
    if not ks:
        return None
    if rng.random() < 0.3:
        return (ks[0], True) if hi is None or lo > 0 and rng.random() < 0.5 else (ks[-1], True)
    return rng.choice(ks), False


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = ACTIONS[index % len(ACTIONS)] if split != "train" else rng.choice(ACTIONS)
    contract = {
        "withhold_ivt_pct": rng.choice((5.0, 6.5, 8.0, 10.0, 12.5)),
        "suspend_ivt_pct": rng.choice((20.0, 25.0, 30.0)),
        "burst_clicks_per_minute": rng.choice((3, 4, 5)),
        "min_click_latency_s": rng.choice((1, 2, 3)),
        "min_impressions_for_ctr": rng.choice((100, 150, 200)),
        "ctr_ceiling_pct": {
            "desktop": rng.choice((4.0, 4.5, 5.0, 6.0)),
            "mobile": rng.choice((5.0, 6.0, 7.0, 8.0)),
            "tablet": rng.choice((4.5, 5.0, 6.0)),
            "ctv": rng.choice((1.0, 1.5, 2.0)),
        },
    }
    wh, su = round(contract["withhold_ivt_pct"] * 10), round(contract["suspend_ivt_pct"] * 10)
    band = {"TERMINATE": (su, None), "SUSPEND": (su, None), "WITHHOLD_PAYMENT": (wh, su)}.get(target, (0, wh))
    while True:
        n = rng.randint(24, 48)
        picked = _pick_invalid_count(rng, n, *band)
        if picked is not None:
            k, on_edge = picked
            break
    B, L = contract["burst_clicks_per_minute"], contract["min_click_latency_s"]
    ranges = _ranges(rng)
    dc = [r for r in ranges if r["kind"] == "datacenter"]
    allow_ranges = rng.sample(dc, rng.choice((0, 1, 1, 2)))
    allow = {r["range_id"] for r in allow_ranges}
    bad_dc = [(r["start_num"], r["end_num"]) for r in dc if r["range_id"] not in allow]
    good_space = [(r["start_num"], r["end_num"]) for r in ranges if r["kind"] != "datacenter"]
    allowed_space = [(r["start_num"], r["end_num"]) for r in allow_ranges]

    start = _EPOCH_2026 + rng.randint(0, 330) * 86400 + rng.choice((0, 3600 * rng.randint(1, 23)))
    end = start + 86400 * rng.randint(1, 3)
    pub = f"PUB-{rng.randint(0, 99999):05d}"
    logs = _Logs(rng)

    def when() -> int:
        return rng.randint(start + 1800, end - 1)

    def latency() -> int:
        return rng.randint(L, 1800)

    def device() -> str:
        return rng.choices(DEVICES[:3], weights=(4, 5, 2))[0]

    # Invalid window clicks (k of them), each with at least one reason; some have two.
    remaining = k
    while remaining > 0:
        reason = rng.choice(("dc", "burst", "fast", "orphan") if remaining >= B else ("dc", "fast", "orphan"))
        if reason == "burst":
            size = rng.randint(B, min(B + 2, remaining))
            ip = logs.fresh_ip(bad_dc if rng.random() < 0.3 else good_space + allowed_space)
            minute = rng.randint(start + 1860, end - 61) // 60
            dev = device()
            for _ in range(size):
                logs.click(pub, dev, ip, minute * 60 + rng.randint(0, 59), latency())
            remaining -= size
            continue
        ip = logs.fresh_ip(bad_dc if reason == "dc" or rng.random() < 0.2 else good_space + allowed_space)
        if reason == "orphan":
            logs.click(pub, device(), ip, when(), None)
        else:
            logs.click(
                pub,
                device(),
                ip,
                when(),
                rng.randint(0, L - 1) if reason == "fast" or rng.random() < 0.2 else latency(),
            )
        remaining -= 1

    # Valid window clicks (n - k), with decoys that look invalid but are not.
    valid = n - k
    anomaly_device = None
    if target == "WARN":
        anomaly_device = rng.choice(DEVICES[:3])
        ceil_t = round(contract["ctr_ceiling_pct"][anomaly_device] * 10)
        need = contract["min_impressions_for_ctr"] * ceil_t // 1000 + 1
        already = sum(1 for c in logs.clicks if c["device_type"] == anomaly_device)
        extra = max(0, need - already)
        if extra > valid:  # not enough valid clicks: add some (the rate only goes down, staying in band)
            n += extra - valid
            valid = extra
        for _ in range(extra):
            logs.click(pub, anomaly_device, logs.fresh_ip(good_space), when(), latency())
        valid -= extra
    ctv = rng.random() < 0.5 and valid >= 4
    if ctv:
        for _ in range(rng.randint(2, 4)):
            logs.click(pub, "ctv", logs.fresh_ip(good_space), when(), latency())
            valid -= 1
    while valid > 0:
        decoy = rng.random()
        if decoy < 0.15 and allowed_space:  # declared proxy: data-centre range, but allow-listed
            logs.click(pub, device(), logs.fresh_ip(allowed_space), when(), latency())
            valid -= 1
        elif decoy < 0.25 and valid >= B:  # near-burst straddling a minute boundary (B clicks, < B per minute)
            ip = logs.fresh_ip(good_space)
            minute = rng.randint(start + 1860, end - 121) // 60
            dev = device()
            for j in range(B):
                logs.click(
                    pub,
                    dev,
                    ip,
                    minute * 60 + (rng.randint(0, 59) if j < B - 1 else 60 + rng.randint(0, 59)),
                    latency(),
                )
            valid -= B
        elif decoy < 0.33 and valid >= B - 1:  # B-1 clicks in one minute
            ip = logs.fresh_ip(good_space)
            minute = rng.randint(start + 1860, end - 61) // 60
            dev = device()
            for _ in range(B - 1):
                logs.click(pub, dev, ip, minute * 60 + rng.randint(0, 59), latency())
            valid -= B - 1
        else:
            logs.click(pub, device(), logs.fresh_ip(good_space), when(), L if rng.random() < 0.1 else latency())
            valid -= 1

    # Impressions per device: CTR at or under the ceiling, except the anomaly; a small CTV decoy.
    clicked = Counter(c["device_type"] for c in logs.clicks)
    own = Counter(i["device_type"] for i in logs.impressions)
    min_imps = contract["min_impressions_for_ctr"]
    shadowed = target in ("TERMINATE", "SUSPEND", "WITHHOLD_PAYMENT")
    if shadowed and rng.random() < 0.4:
        anomaly_device = rng.choice(
            [
                d
                for d in DEVICES[:3]
                if clicked[d] * 1000 // round(contract["ctr_ceiling_pct"][d] * 10) > max(min_imps, own[d])
            ]
            or [None]
        )
    for dev in DEVICES[:3]:
        ceil_t = round(contract["ctr_ceiling_pct"][dev] * 10)
        if dev == anomaly_device:
            high = (clicked[dev] * 1000 - 1) // ceil_t
            total = rng.randint(max(min_imps, own[dev]), high)
        else:
            floor = -(-clicked[dev] * 1000 // ceil_t)  # smallest count with CTR <= ceiling
            total = max(floor, own[dev]) + (0 if rng.random() < 0.15 else rng.randint(1, max(1, floor // 3)))
        for _ in range(total - own[dev]):
            logs.impression(pub, dev, rng.randint(start, end - 1))
    if ctv:  # CTV: CTR far over its ceiling, on too few impressions to count
        for _ in range(rng.randint(20, min_imps - 1) - own["ctv"]):
            logs.impression(pub, "ctv", rng.randint(start, end - 1))

    # Noise outside the window (data-centre clicks, before the start or at/after the exclusive end).
    for _ in range(rng.randint(3, 10)):
        if rng.random() < 0.5:
            ts = rng.randint(start - 7200, start - 1)
            logs.click(pub, device(), logs.fresh_ip(bad_dc), ts, rng.randint(0, 60))
        else:
            ts = end + rng.choice((0, rng.randint(1, 3600)))
            logs.click(pub, device(), logs.fresh_ip(bad_dc), ts, rng.randint(0, ts - end))
    # Other publishers' traffic in the same window, mostly from data centres; some of it is what
    # this publisher's orphan clicks point to.
    others = [f"PUB-{rng.randint(0, 99999):05d}" for _ in range(rng.randint(1, 2))]
    for other in others:
        if other == pub:
            continue
        for _ in range(rng.randint(8, 20)):
            logs.click(
                other,
                device(),
                logs.fresh_ip(bad_dc if rng.random() < 0.6 else good_space),
                when(),
                rng.randint(0, 600),
            )
        for _ in range(rng.randint(60, 160)):
            logs.impression(other, device(), rng.randint(start, end - 1))
    foreign = [i["imp_id"] for i in logs.impressions if i["publisher_id"] != pub]
    existing = {i["imp_id"] for i in logs.impressions}
    for click in logs.clicks:  # half the orphan clicks point at another publisher's impression
        if click["publisher_id"] == pub and click["imp_id"] not in existing and foreign and rng.random() < 0.5:
            click["imp_id"] = rng.choice(foreign)

    rng.shuffle(logs.impressions)
    rng.shuffle(logs.clicks)
    db = {"impressions": logs.impressions, "clicks": logs.clicks, "ip_ranges": ranges}

    # Enforcement history.
    cutoff = _end_date(end) - dt.timedelta(days=365)
    strikes_wanted = {"TERMINATE": rng.randint(2, 3), "SUSPEND": rng.randint(0, 1)}.get(target, rng.randint(0, 3))
    history = []
    for j in range(strikes_wanted):
        day = cutoff if j == 0 and rng.random() < 0.3 else cutoff + dt.timedelta(days=rng.randint(1, 330))
        history.append({"date": day.isoformat(), "action": rng.choice(("WITHHOLD_PAYMENT", "SUSPEND"))})
    for _ in range(rng.randint(0, 3)):  # WARNs and stale strikes
        if rng.random() < 0.5:
            history.append({"date": (cutoff + dt.timedelta(days=rng.randint(0, 330))).isoformat(), "action": "WARN"})
        else:
            history.append(
                {
                    "date": (cutoff - dt.timedelta(days=rng.choice((1, rng.randint(2, 700))))).isoformat(),
                    "action": rng.choice(("WITHHOLD_PAYMENT", "SUSPEND")),
                }
            )
    history.sort(key=lambda h: h["date"])
    for h in history:
        h["case_id"] = f"IVT-{rng.randint(0, 999999):06d}"
    strikes = sum(h["action"] in ("WITHHOLD_PAYMENT", "SUSPEND") and h["date"] >= cutoff.isoformat() for h in history)

    invalid, total, anomalous = _measure(db, pub, start, end, contract, allow)
    tenths = _tenths(invalid, total)
    action = _label(tenths, contract, strikes, anomalous)
    assert action == target and invalid == k, (target, action, invalid, k, total, n, anomalous)

    # ---- records -----------------------------------------------------------------------------
    case_id = f"IVT-{rng.randint(0, 999999):06d}"
    contract_id = f"AGR-{rng.randint(0, 9999):04d}"
    allowlist_id = f"ALW-{rng.randint(0, 99999):05d}" if allow or rng.random() < 0.5 else None
    partner = rng.choice(("Brightline DSP", "Kestrel Demand", "Polaris Ads", "Tidewater Media"))
    iso = lambda ts: dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    month = _end_date(end).strftime("%Y-%m")
    reported = round(max(0.0, tenths / 10 + rng.choice((-1, 1)) * rng.uniform(2, 15)), 1)
    replay: dict[str, dict[str, Any]] = {
        "get_review_case": {
            canonical_args({"case_id": case_id}): {
                "case_id": case_id,
                "publisher_id": pub,
                "contract_id": contract_id,
                "partner": partner,
                "window_start_ts": start,
                "window_end_ts": end,
                "window_start_utc": iso(start),
                "window_end_utc": iso(end),
                "partner_reported_ivt_pct": reported,
            }
        },
        "get_partner_contract": {
            canonical_args({"contract_id": contract_id}): {"contract_id": contract_id, "partner": partner, **contract}
        },
        "get_publisher_profile": {
            canonical_args({"publisher_id": pub}): {
                "publisher_id": pub,
                "name": rng.choice(
                    ("Daily Ledger", "PixelPlay Games", "Trailhead Outdoors", "QuickRecipes", "StreamNest")
                ),
                "tier": rng.choice(("standard", "standard", "premium")),
                "signup_date": f"20{rng.randint(15, 25)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                "allowlist_id": allowlist_id,
            }
        },
        "get_enforcement_history": {canonical_args({"publisher_id": pub}): {"publisher_id": pub, "actions": history}},
        "get_payout_statement": {
            canonical_args({"publisher_id": pub, "month": month}): {
                "publisher_id": pub,
                "month": month,
                "gross_usd": round(rng.uniform(500, 90000), 2),
            }
        },
        "get_geo_report": {
            canonical_args({"publisher_id": pub}): {
                "publisher_id": pub,
                "shares": {"US": rng.randint(30, 70), "GB": rng.randint(5, 20), "IN": rng.randint(5, 20)},
            }
        },
        "get_creative_review": {},
    }
    if allowlist_id is not None:
        replay["get_ip_allowlist"] = {
            canonical_args({"allowlist_id": allowlist_id}): {
                "allowlist_id": allowlist_id,
                "publisher_id": pub,
                "range_ids": sorted(allow),
                "note": "declared corporate proxy / CDN egress" if allow else "no ranges declared",
            }
        }
    if rng.random() < 0.15:
        replay["get_geo_report"] = {
            canonical_args({"publisher_id": pub}): {ERROR_KEY: "geo reporting service unavailable"}
        }

    step = {"TERMINATE": 5, "SUSPEND": 5, "WITHHOLD_PAYMENT": 6, "WARN": 7, "NO_ACTION": 8}[action]
    difficulty = (
        "easy" if step == 6 and not on_edge else ("hard" if on_edge or step == 5 and strikes in (1, 2) else "medium")
    )
    return {
        "inputs": {"case_id": case_id, "partner": partner, "opened_at": iso(end + rng.randint(3600, 86400 * 5))},
        "answer": {"enforcement_action": action, "ivt_rate_pct": tenths / 10},
        "replay": replay,
        "initial_state": db,
        "difficulty": difficulty,
        "meta": {"deciding_step": step, "window_clicks": total, "invalid_clicks": invalid},
    }


# ---------------------------------------------------------------------------------------------
# Reference solver: the SOP as written; aggregates measured with SQL through run_sql.
# ---------------------------------------------------------------------------------------------
def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _ok(result: Any) -> Any:
    if isinstance(result, ToolError):
        raise result
    return result


def solve(inputs: dict[str, Any]):
    case = _ok((yield ToolCall("get_review_case", {"case_id": inputs["case_id"]})))
    contract = _ok((yield ToolCall("get_partner_contract", {"contract_id": case["contract_id"]})))
    profile = _ok((yield ToolCall("get_publisher_profile", {"publisher_id": case["publisher_id"]})))
    allowed: list[str] = []
    if profile["allowlist_id"] is not None:
        allowed = _ok((yield ToolCall("get_ip_allowlist", {"allowlist_id": profile["allowlist_id"]})))["range_ids"]
    pub, lo, hi = _sql_str(case["publisher_id"]), int(case["window_start_ts"]), int(case["window_end_ts"])
    not_allowed = f"AND r.range_id NOT IN ({', '.join(_sql_str(x) for x in allowed)})" if allowed else ""
    ivt_query = f"""
        WITH w AS (SELECT * FROM clicks WHERE publisher_id = {pub} AND ts >= {lo} AND ts < {hi}),
        burst AS (SELECT ip, ts / 60 AS minute FROM w GROUP BY ip, ts / 60
                  HAVING COUNT(*) >= {int(contract["burst_clicks_per_minute"])}),
        bad AS (
            SELECT w.click_id FROM w JOIN ip_ranges r ON w.ip_num BETWEEN r.start_num AND r.end_num
                WHERE r.kind = 'datacenter' {not_allowed}
            UNION SELECT w.click_id FROM w JOIN burst b ON w.ip = b.ip AND w.ts / 60 = b.minute
            UNION SELECT w.click_id FROM w LEFT JOIN impressions i ON i.imp_id = w.imp_id AND i.publisher_id = w.publisher_id
                WHERE i.imp_id IS NULL OR w.ts - i.ts < {int(contract["min_click_latency_s"])}
        )
        SELECT (SELECT COUNT(*) FROM bad), (SELECT COUNT(*) FROM w)"""
    rows = _ok((yield ToolCall("run_sql", {"query": " ".join(ivt_query.split())})))
    invalid, total = rows[0]
    rate = (Decimal(100 * invalid) / Decimal(total)).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)
    answer_rate = float(rate)
    if rate >= Decimal(str(contract["suspend_ivt_pct"])):
        history = _ok((yield ToolCall("get_enforcement_history", {"publisher_id": case["publisher_id"]})))
        end_day = dt.datetime.fromtimestamp(hi, dt.timezone.utc).date()
        since = (end_day - dt.timedelta(days=365)).isoformat()
        strikes = [
            a for a in history["actions"] if a["action"] in ("WITHHOLD_PAYMENT", "SUSPEND") and a["date"] >= since
        ]
        return {"enforcement_action": "TERMINATE" if len(strikes) >= 2 else "SUSPEND", "ivt_rate_pct": answer_rate}
    if rate >= Decimal(str(contract["withhold_ivt_pct"])):
        return {"enforcement_action": "WITHHOLD_PAYMENT", "ivt_rate_pct": answer_rate}
    ctr_query = f"""
        SELECT 'impressions', device_type, COUNT(*) FROM impressions
            WHERE publisher_id = {pub} AND ts >= {lo} AND ts < {hi} GROUP BY device_type
        UNION ALL
        SELECT 'clicks', device_type, COUNT(*) FROM clicks
            WHERE publisher_id = {pub} AND ts >= {lo} AND ts < {hi} GROUP BY device_type"""
    rows = _ok((yield ToolCall("run_sql", {"query": " ".join(ctr_query.split())})))
    shown = {dev: cnt for kind, dev, cnt in rows if kind == "impressions"}
    clicks = {dev: cnt for kind, dev, cnt in rows if kind == "clicks"}
    ceilings = contract["ctr_ceiling_pct"]
    for dev, count in shown.items():
        if count >= contract["min_impressions_for_ctr"] and dev in ceilings:
            if Decimal(100 * clicks.get(dev, 0)) / Decimal(count) > Decimal(str(ceilings[dev])):
                return {"enforcement_action": "WARN", "ivt_rate_pct": answer_rate}
    return {"enforcement_action": "NO_ACTION", "ivt_rate_pct": answer_rate}


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
    program=PROGRAM,
    verifiable=run_verifiable,
)
