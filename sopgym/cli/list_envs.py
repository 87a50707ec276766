"""``sopgym list [--json]``: the registered envs with their task counts, tools, output fields and licence."""

from __future__ import annotations

import argparse
import json
from typing import Any

from sopgym.bench.tables import table

__all__ = ["build_parser", "main", "env_summaries"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sopgym list")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    return parser


def env_summaries() -> list[dict[str, Any]]:
    """One dict per registered domain pack (authored and adapted), sorted by env id."""
    import sopgym  # noqa: F401 - registers the envs
    from sopgym.sop_tasks.pack import SPLITS
    from sopgym.sop_tasks.registry import all_packs

    return [
        {
            "env_id": pack.env_id,
            "domain": pack.name,
            "title": pack.title,
            "tasks": {split: pack.num_tasks(split) for split in SPLITS},
            "num_tools": len(pack.tools),
            "tools": [t.name for t in pack.tools],
            "output_fields": [f.name for f in pack.output_fields],
            "license": pack.license,
            "training_allowed": pack.training_allowed,
            "training_note": pack.training_note,
        }
        for pack in sorted(all_packs(), key=lambda p: p.env_id)
    ]


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    rows = env_summaries()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    lines = [
        [r["env_id"], *("unlimited" if n is None else str(n) for n in r["tasks"].values()), str(r["num_tools"]),
         ", ".join(r["output_fields"]), r["license"], "yes" if r["training_allowed"] else "no"]
        for r in rows
    ]
    print(table(["env id", "train", "val", "test", "tools", "output fields", "licence", "training"], lines))
    for r in rows:
        if not r["training_allowed"] and r["training_note"]:
            print(f"{r['env_id']}: training not allowed: {r['training_note']}")
    return 0
