"""``sopgym new-domain NAME``: scaffold a domain pack that passes ``sopgym validate-domain``
(:func:`sopgym.authoring.scaffold.new_domain`)."""

from __future__ import annotations

import argparse
import sys

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sopgym new-domain")
    p.add_argument("name", help="CamelCase domain name, e.g. WarrantyClaims")
    p.add_argument("--dest", default="sop_tasks", help="parent folder (default: sop_tasks)")
    p.add_argument("--title", help="human-readable title (default: from the name)")
    return p


def main(argv: list[str]) -> int:
    """Exit codes: 0 written, 2 a bad name or destination (one line on stderr)."""
    args = build_parser().parse_args(argv)
    from sopgym.authoring.scaffold import TEMPLATES, new_domain

    try:
        folder = new_domain(args.name, args.dest, args.title)
    except (ValueError, OSError) as exc:
        print(f"sopgym new-domain: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {folder}/: {', '.join(TEMPLATES)}\nnext: edit them, then run: sopgym validate-domain {folder}")
    return 0
