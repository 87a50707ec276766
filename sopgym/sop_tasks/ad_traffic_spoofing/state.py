"""Log database of AdTrafficSpoofing: the exchange's impression and click logs (standard library only).

This module also runs inside the Docker sandbox, where sopgym is not installed: it must import only
the standard library. The domain's agent reads it only through ``run_sql`` (read-only queries
executed by the verifiable tier's code runner); it has no tools of its own.
"""

SCHEMA = """
CREATE TABLE impressions (imp_id TEXT PRIMARY KEY, publisher_id TEXT NOT NULL, device_type TEXT NOT NULL, ts INTEGER NOT NULL);
CREATE TABLE clicks (
    click_id TEXT PRIMARY KEY, imp_id TEXT NOT NULL, publisher_id TEXT NOT NULL, device_type TEXT NOT NULL,
    ip TEXT NOT NULL, ip_num INTEGER NOT NULL, ts INTEGER NOT NULL
);
CREATE TABLE ip_ranges (
    range_id TEXT PRIMARY KEY, start_num INTEGER NOT NULL, end_num INTEGER NOT NULL, kind TEXT NOT NULL, provider TEXT NOT NULL
);
CREATE INDEX clicks_pub_ts ON clicks (publisher_id, ts);
CREATE INDEX impressions_pub_ts ON impressions (publisher_id, ts);
"""

#: No stateful tools: the logs are read with ``run_sql`` only.
TOOLS: dict[str, object] = {}


def snapshot(db):
    """Row counts per table (the logs are read-only, so this never changes during an episode)."""
    return {
        table: db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        for table in ("impressions", "clicks", "ip_ranges")
    }
