"""``sopgym domains-table [--out docs/domains.md]``: validate every authored domain and write the suite
table (:func:`sopgym.authoring.quality.domains_page`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sopgym domains-table")
    p.add_argument("--out", help="write the Markdown here (e.g. docs/domains.md) instead of stdout")
    p.add_argument("--train-tasks", type=int, default=200)
    return p


def main(argv: list[str]) -> int:
    """Exit codes: 0 every domain passes its checks, 1 one fails (the table says which)."""
    args = build_parser().parse_args(argv)
    from sopgym.authoring.quality import domains_page, validate_pack
    from sopgym.sop_tasks.registry import all_packs

    reports = []
    for pack in sorted(all_packs("sopgym"), key=lambda p: p.name):
        print(f"validating {pack.env_id} ...", file=sys.stderr)
        reports.append(validate_pack(pack, train_tasks=args.train_tasks))
    text = domains_page(reports, args.train_tasks)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(text)
    return 0 if all(r.ok for r in reports) else 1
