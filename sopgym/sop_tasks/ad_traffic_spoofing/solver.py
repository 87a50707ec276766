"""AdTrafficSpoofing's reference solver: SOP AT-3 as written; the aggregates measured with SQL
through ``run_sql``, every other fact read through the tools. It never imports ``generator.py``."""

from __future__ import annotations

import datetime as dt
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from sopgym.sop_tasks.pack import ToolCall, expect


def solve(inputs: dict[str, Any]):
    case = expect((yield ToolCall("get_review_case", {"case_id": inputs["case_id"]})))
    contract = expect((yield ToolCall("get_partner_contract", {"contract_id": case["contract_id"]})))
    profile = expect((yield ToolCall("get_publisher_profile", {"publisher_id": case["publisher_id"]})))
    allowed: list[str] = []
    if profile["allowlist_id"] is not None:
        allowed = expect((yield ToolCall("get_ip_allowlist", {"allowlist_id": profile["allowlist_id"]})))["range_ids"]
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
    rows = expect((yield ToolCall("run_sql", {"query": " ".join(ivt_query.split())})))
    invalid, total = rows[0]
    rate = (Decimal(100 * invalid) / Decimal(total)).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)
    answer_rate = float(rate)
    if rate >= Decimal(str(contract["suspend_ivt_pct"])):
        history = expect((yield ToolCall("get_enforcement_history", {"publisher_id": case["publisher_id"]})))
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
    rows = expect((yield ToolCall("run_sql", {"query": " ".join(ctr_query.split())})))
    shown = {dev: cnt for kind, dev, cnt in rows if kind == "impressions"}
    clicks = {dev: cnt for kind, dev, cnt in rows if kind == "clicks"}
    ceilings = contract["ctr_ceiling_pct"]
    for dev, count in shown.items():
        if count >= contract["min_impressions_for_ctr"] and dev in ceilings:
            if Decimal(100 * clicks.get(dev, 0)) / Decimal(count) > Decimal(str(ceilings[dev])):
                return {"enforcement_action": "WARN", "ivt_rate_pct": answer_rate}
    return {"enforcement_action": "NO_ACTION", "ivt_rate_pct": answer_rate}


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
