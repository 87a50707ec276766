"""AdTrafficSpoofing's task generator: draw, label, records.

* **draw** (``_draw``): a partner contract, a window click count and an invalid-click count inside
  the target action's IVT band (balanced over the five actions on val/test), then the logs phase
  by phase (``_Logs``): invalid clicks (data-centre IPs, bursts, too-fast clicks, orphan clicks),
  valid clicks with decoys, impressions that put device CTRs under or over their ceilings, noise
  (rows outside the window or exactly at its exclusive end, other publishers' traffic, clicks on
  other publishers' impressions), and the enforcement history;
* **label**: the SOP's definitions evaluated over the drawn rows in Python (``_measure``, exact
  integer and Fraction arithmetic) and its decision table (``_label``);
* **records** (``_records``): ids, the replay records (case, contract, profile, allow-list,
  history, distractors; a partner-reported IVT figure as a decoy) and the difficulty.

**Difficulty** (``_difficulty``) counts the traps the queries and the history must get past, all
drawn whatever the target action (never which step decides): each of the publisher's clicks at
exactly the window's exclusive end; each allow-listed data-centre range (its clicks are valid);
CTV clicks (a CTR over its ceiling on too few impressions to count); an invalid-click count on its
IVT band's edge (the rounding decides); each WARN, and each strike older than 365 days, in the
enforcement history (neither is a strike); the geo distractor answering with an error. ``easy``: at
most 3; ``medium``: 4 or 5; ``hard``: 6 or more. The ``difficulty_label`` check of ``sopgym
validate-domain`` keeps it from predicting the action.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sopgym.sop_tasks.generation import balanced_target, record, recorded_error

from .tools import ACTIONS, DEVICES

_EPOCH_2026 = 1767225600  # 2026-01-01T00:00:00Z


def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    target = balanced_target(rng, split, index, ACTIONS)
    case = _draw(rng, target)
    invalid, total, anomalous = _measure(case.db, case.pub, case.start, case.end, case.contract, case.allow)
    tenths = _tenths(invalid, total)
    action = _label(tenths, case.contract, case.strikes, anomalous)
    assert action == target and invalid == case.invalid_drawn, (target, action, invalid, case.invalid_drawn, total, anomalous)
    return _records(rng, case, action, tenths, invalid, total)


# -- draw ------------------------------------------------------------------------------------------
@dataclass
class _Case:
    """The drawn facts of one review case."""

    contract: dict[str, Any]
    invalid_drawn: int  # the invalid window clicks the draw aimed at
    on_edge: bool  # the invalid count sits on its IVT band's edge
    allow: set[str]  # allow-listed range ids
    start: int
    end: int
    pub: str
    db: dict[str, list]  # the log database (initial state)
    history: list[dict[str, Any]]
    strikes: int  # WITHHOLD_PAYMENT/SUSPEND actions in the 365 days before the window's end


def _draw(rng: random.Random, target: str) -> _Case:
    contract = _draw_contract(rng)
    wh, su = round(contract["withhold_ivt_pct"] * 10), round(contract["suspend_ivt_pct"] * 10)
    band = {"TERMINATE": (su, None), "SUSPEND": (su, None), "WITHHOLD_PAYMENT": (wh, su)}.get(target, (0, wh))
    while True:
        n = rng.randint(24, 48)
        picked = _pick_invalid_count(rng, n, *band)
        if picked is not None:
            k, on_edge = picked
            break
    ranges = _ranges(rng)
    dc = [r for r in ranges if r["kind"] == "datacenter"]
    allow_ranges = rng.sample(dc, rng.choice((0, 1, 1, 2)))
    start = _EPOCH_2026 + rng.randint(0, 330) * 86400 + rng.choice((0, 3600 * rng.randint(1, 23)))
    end = start + 86400 * rng.randint(1, 3)
    pub = f"PUB-{rng.randint(0, 99999):05d}"
    logs = _Logs(rng, pub, start, end, contract, ranges, allow_ranges)
    logs.add_invalid_clicks(k)
    anomaly_device, ctv = logs.add_valid_clicks(n - k, target)
    logs.add_impressions(target, anomaly_device, ctv)
    logs.add_noise()
    db = logs.database(ranges)
    history, strikes = _draw_history(rng, end, target)
    return _Case(contract, k, on_edge, {r["range_id"] for r in allow_ranges}, start, end, pub, db, history, strikes)


def _draw_contract(rng: random.Random) -> dict[str, Any]:
    return {
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


def _pick_invalid_count(rng: random.Random, n: int, lo: int, hi: int | None) -> tuple[int, bool] | None:
    """An invalid count whose rounded rate (tenths) is in [lo, hi); True when it sits on the band's edge."""
    ks = [k for k in range(0, int(n * 0.75) + 1) if _tenths(k, n) >= lo and (hi is None or _tenths(k, n) < hi)]
    if not ks:
        return None
    if rng.random() < 0.3:
        return (ks[0], True) if hi is None or lo > 0 and rng.random() < 0.5 else (ks[-1], True)
    return rng.choice(ks), False


def _ranges(rng: random.Random) -> list[dict[str, Any]]:
    """The exchange's IP ranges: data centres, residential broadband, mobile carriers."""
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


def _ip(num: int) -> str:
    return ".".join(str((num >> s) & 255) for s in (24, 16, 8, 0))


class _Logs:
    """The case's impression and click logs, drawn phase by phase, with unique ids and IPs.

    Args:
        rng: the generator's rng (every phase draws from it, in the order ``_draw`` calls them).
        pub, start, end: the reviewed publisher and its window (end exclusive).
        contract: the partner contract (burst, latency, CTR thresholds).
        ranges: every IP range; ``allow_ranges`` the data-centre ranges the publisher allow-lists.
    """

    def __init__(self, rng: random.Random, pub: str, start: int, end: int, contract: dict[str, Any],
                 ranges: list[dict[str, Any]], allow_ranges: list[dict[str, Any]]) -> None:
        self.rng, self.pub, self.start, self.end, self.contract = rng, pub, start, end, contract
        self.burst, self.min_latency = contract["burst_clicks_per_minute"], contract["min_click_latency_s"]
        allow = {r["range_id"] for r in allow_ranges}
        self.bad_dc = [(r["start_num"], r["end_num"]) for r in ranges if r["kind"] == "datacenter" and r["range_id"] not in allow]
        self.good_space = [(r["start_num"], r["end_num"]) for r in ranges if r["kind"] != "datacenter"]
        self.allowed_space = [(r["start_num"], r["end_num"]) for r in allow_ranges]
        self.impressions: list[dict[str, Any]] = []
        self.clicks: list[dict[str, Any]] = []
        self.used_ips: set[int] = set()
        self._imp_ids = iter(rng.sample(range(10**7, 10**8), 6000))
        self._click_ids = iter(rng.sample(range(10**7, 10**8), 1500))

    # -- rows -----------------------------------------------------------------------------------
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

    def when(self) -> int:
        """A time in the window, at least half an hour after its start (room for latencies)."""
        return self.rng.randint(self.start + 1800, self.end - 1)

    def latency(self) -> int:
        """A valid click latency."""
        return self.rng.randint(self.min_latency, 1800)

    def device(self) -> str:
        return self.rng.choices(DEVICES[:3], weights=(4, 5, 2))[0]

    # -- phases ---------------------------------------------------------------------------------
    def add_invalid_clicks(self, k: int) -> None:
        """``k`` invalid window clicks, each with at least one reason; some have two."""
        rng, pub, B, L = self.rng, self.pub, self.burst, self.min_latency
        remaining = k
        while remaining > 0:
            reason = rng.choice(("dc", "burst", "fast", "orphan") if remaining >= B else ("dc", "fast", "orphan"))
            if reason == "burst":
                size = rng.randint(B, min(B + 2, remaining))
                ip = self.fresh_ip(self.bad_dc if rng.random() < 0.3 else self.good_space + self.allowed_space)
                minute = rng.randint(self.start + 1860, self.end - 61) // 60
                dev = self.device()
                for _ in range(size):
                    self.click(pub, dev, ip, minute * 60 + rng.randint(0, 59), self.latency())
                remaining -= size
                continue
            ip = self.fresh_ip(self.bad_dc if reason == "dc" or rng.random() < 0.2 else self.good_space + self.allowed_space)
            if reason == "orphan":
                self.click(pub, self.device(), ip, self.when(), None)
            else:
                self.click(
                    pub,
                    self.device(),
                    ip,
                    self.when(),
                    rng.randint(0, L - 1) if reason == "fast" or rng.random() < 0.2 else self.latency(),
                )
            remaining -= 1

    def add_valid_clicks(self, valid: int, target: str) -> tuple[str | None, bool]:
        """``valid`` valid window clicks (more for a WARN target's anomaly), with decoys that look
        invalid but are not. Returns (the WARN target's anomalous device or None, CTV clicks added)."""
        rng, pub, B, L, contract = self.rng, self.pub, self.burst, self.min_latency, self.contract
        anomaly_device = None
        if target == "WARN":
            anomaly_device = rng.choice(DEVICES[:3])
            ceil_t = round(contract["ctr_ceiling_pct"][anomaly_device] * 10)
            need = contract["min_impressions_for_ctr"] * ceil_t // 1000 + 1
            already = sum(1 for c in self.clicks if c["device_type"] == anomaly_device)
            extra = max(0, need - already)
            if extra > valid:  # not enough valid clicks: add some (the rate only goes down, staying in band)
                valid = extra
            for _ in range(extra):
                self.click(pub, anomaly_device, self.fresh_ip(self.good_space), self.when(), self.latency())
            valid -= extra
        ctv = rng.random() < 0.5 and valid >= 4
        if ctv:
            for _ in range(rng.randint(2, 4)):
                self.click(pub, "ctv", self.fresh_ip(self.good_space), self.when(), self.latency())
                valid -= 1
        while valid > 0:
            decoy = rng.random()
            if decoy < 0.15 and self.allowed_space:  # declared proxy: data-centre range, but allow-listed
                self.click(pub, self.device(), self.fresh_ip(self.allowed_space), self.when(), self.latency())
                valid -= 1
            elif decoy < 0.25 and valid >= B:  # near-burst straddling a minute boundary (B clicks, < B per minute)
                ip = self.fresh_ip(self.good_space)
                minute = rng.randint(self.start + 1860, self.end - 121) // 60
                dev = self.device()
                for j in range(B):
                    self.click(
                        pub,
                        dev,
                        ip,
                        minute * 60 + (rng.randint(0, 59) if j < B - 1 else 60 + rng.randint(0, 59)),
                        self.latency(),
                    )
                valid -= B
            elif decoy < 0.33 and valid >= B - 1:  # B-1 clicks in one minute
                ip = self.fresh_ip(self.good_space)
                minute = rng.randint(self.start + 1860, self.end - 61) // 60
                dev = self.device()
                for _ in range(B - 1):
                    self.click(pub, dev, ip, minute * 60 + rng.randint(0, 59), self.latency())
                valid -= B - 1
            else:
                self.click(pub, self.device(), self.fresh_ip(self.good_space), self.when(),
                           L if rng.random() < 0.1 else self.latency())
                valid -= 1
        return anomaly_device, ctv

    def add_impressions(self, target: str, anomaly_device: str | None, ctv: bool) -> None:
        """Impressions per device: CTR at or under the ceiling, except the anomalous device (a WARN
        target's, or one a higher action shadows); a CTV CTR over its ceiling on too few impressions."""
        rng, pub, contract = self.rng, self.pub, self.contract
        clicked = Counter(c["device_type"] for c in self.clicks)
        own = Counter(i["device_type"] for i in self.impressions)
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
                self.impression(pub, dev, rng.randint(self.start, self.end - 1))
        if ctv:  # CTV: CTR far over its ceiling, on too few impressions to count
            for _ in range(rng.randint(20, min_imps - 1) - own["ctv"]):
                self.impression(pub, "ctv", rng.randint(self.start, self.end - 1))

    def add_noise(self) -> None:
        """Rows that must not count: data-centre clicks before the window or at/after its exclusive
        end; other publishers' traffic in the window, mostly from data centres, some of it what this
        publisher's orphan clicks point to."""
        rng, pub, start, end = self.rng, self.pub, self.start, self.end
        for _ in range(rng.randint(3, 10)):
            if rng.random() < 0.5:
                ts = rng.randint(start - 7200, start - 1)
                self.click(pub, self.device(), self.fresh_ip(self.bad_dc), ts, rng.randint(0, 60))
            else:
                ts = end + rng.choice((0, rng.randint(1, 3600)))
                self.click(pub, self.device(), self.fresh_ip(self.bad_dc), ts, rng.randint(0, ts - end))
        others = [f"PUB-{rng.randint(0, 99999):05d}" for _ in range(rng.randint(1, 2))]
        for other in others:
            if other == pub:
                continue
            for _ in range(rng.randint(8, 20)):
                self.click(
                    other,
                    self.device(),
                    self.fresh_ip(self.bad_dc if rng.random() < 0.6 else self.good_space),
                    self.when(),
                    rng.randint(0, 600),
                )
            for _ in range(rng.randint(60, 160)):
                self.impression(other, self.device(), rng.randint(start, end - 1))
        foreign = [i["imp_id"] for i in self.impressions if i["publisher_id"] != pub]
        existing = {i["imp_id"] for i in self.impressions}
        for click in self.clicks:  # half the orphan clicks point at another publisher's impression
            if click["publisher_id"] == pub and click["imp_id"] not in existing and foreign and rng.random() < 0.5:
                click["imp_id"] = rng.choice(foreign)

    def database(self, ranges: list[dict[str, Any]]) -> dict[str, list]:
        """The log database (rows shuffled, so row order tells nothing)."""
        self.rng.shuffle(self.impressions)
        self.rng.shuffle(self.clicks)
        return {"impressions": self.impressions, "clicks": self.clicks, "ip_ranges": ranges}


def _end_date(end_ts: int) -> dt.date:
    return dt.datetime.fromtimestamp(end_ts, dt.timezone.utc).date()


def _draw_history(rng: random.Random, end: int, target: str) -> tuple[list[dict[str, Any]], int]:
    """The publisher's enforcement history and its strike count (SOP step 5)."""
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
    return history, strikes


# -- label -----------------------------------------------------------------------------------------
def _tenths(invalid: int, total: int) -> int:
    """100 * invalid / total in tenths of a percent, rounded half up (integer arithmetic)."""
    return (2000 * invalid + total) // (2 * total)


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
    """The action of SOP steps 5 to 8."""
    if tenths >= round(c["suspend_ivt_pct"] * 10):
        return "TERMINATE" if strikes >= 2 else "SUSPEND"
    if tenths >= round(c["withhold_ivt_pct"] * 10):
        return "WITHHOLD_PAYMENT"
    return "WARN" if anomalous else "NO_ACTION"


# -- records ---------------------------------------------------------------------------------------
def _records(rng: random.Random, case: _Case, action: str, tenths: int, invalid: int, total: int) -> dict[str, Any]:
    pub, start, end = case.pub, case.start, case.end
    case_id = f"IVT-{rng.randint(0, 999999):06d}"
    contract_id = f"AGR-{rng.randint(0, 9999):04d}"
    allowlist_id = f"ALW-{rng.randint(0, 99999):05d}" if case.allow or rng.random() < 0.5 else None
    partner = rng.choice(("Brightline DSP", "Kestrel Demand", "Polaris Ads", "Tidewater Media"))
    month = _end_date(end).strftime("%Y-%m")
    reported = round(max(0.0, tenths / 10 + rng.choice((-1, 1)) * rng.uniform(2, 15)), 1)
    replay: dict[str, dict[str, Any]] = {
        "get_review_case": record({"case_id": case_id}, {
            "case_id": case_id,
            "publisher_id": pub,
            "contract_id": contract_id,
            "partner": partner,
            "window_start_ts": start,
            "window_end_ts": end,
            "window_start_utc": _iso(start),
            "window_end_utc": _iso(end),
            "partner_reported_ivt_pct": reported,
        }),
        "get_partner_contract": record(
            {"contract_id": contract_id}, {"contract_id": contract_id, "partner": partner, **case.contract}
        ),
        "get_publisher_profile": record({"publisher_id": pub}, {
            "publisher_id": pub,
            "name": rng.choice(("Daily Ledger", "PixelPlay Games", "Trailhead Outdoors", "QuickRecipes", "StreamNest")),
            "tier": rng.choice(("standard", "standard", "premium")),
            "signup_date": f"20{rng.randint(15, 25)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            "allowlist_id": allowlist_id,
        }),
        "get_enforcement_history": record({"publisher_id": pub}, {"publisher_id": pub, "actions": case.history}),
        "get_payout_statement": record({"publisher_id": pub, "month": month}, {
            "publisher_id": pub,
            "month": month,
            "gross_usd": round(rng.uniform(500, 90000), 2),
        }),
        "get_geo_report": record({"publisher_id": pub}, {
            "publisher_id": pub,
            "shares": {"US": rng.randint(30, 70), "GB": rng.randint(5, 20), "IN": rng.randint(5, 20)},
        }),
        "get_creative_review": {},
    }
    if allowlist_id is not None:
        replay["get_ip_allowlist"] = record({"allowlist_id": allowlist_id}, {
            "allowlist_id": allowlist_id,
            "publisher_id": pub,
            "range_ids": sorted(case.allow),
            "note": "declared corporate proxy / CDN egress" if case.allow else "no ranges declared",
        })
    geo_down = rng.random() < 0.15
    if geo_down:  # the geo reporting service is occasionally down: a distractor's error must not matter
        replay["get_geo_report"] = record({"publisher_id": pub}, recorded_error("geo reporting service unavailable"))

    step = {"TERMINATE": 5, "SUSPEND": 5, "WITHHOLD_PAYMENT": 6, "WARN": 7, "NO_ACTION": 8}[action]
    return {
        "inputs": {"case_id": case_id, "partner": partner, "opened_at": _iso(end + rng.randint(3600, 86400 * 5))},
        "answer": {"enforcement_action": action, "ivt_rate_pct": tenths / 10},
        "replay": replay,
        "initial_state": case.db,
        "difficulty": _difficulty(case, geo_down),
        "meta": {"deciding_step": step, "window_clicks": total, "invalid_clicks": invalid},
    }


def _difficulty(case: _Case, geo_down: bool) -> str:
    """The level of the case's trap count (module docstring)."""
    cutoff = (_end_date(case.end) - dt.timedelta(days=365)).isoformat()
    own = [c for c in case.db["clicks"] if c["publisher_id"] == case.pub]
    score = (
        sum(c["ts"] == case.end for c in own)
        + len(case.allow)
        + any(c["device_type"] == "ctv" and case.start <= c["ts"] < case.end for c in own)
        + case.on_edge
        + sum(h["action"] == "WARN" or h["date"] < cutoff for h in case.history)
        + geo_down
    )
    return "easy" if score <= 3 else ("medium" if score <= 5 else "hard")


def _iso(ts: int) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
