"""``sopgym sopbench register|record|check PATH``: load a SOP-Bench checkout, pre-record its tool
responses, audit its domains (:mod:`sopgym.sopbench`; the data is CC BY-NC 4.0)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sopgym sopbench")
    sub = parser.add_subparsers(dest="sopbench_command", required=True)
    for name, text in (("register", "list the domains a checkout provides as sopbench/<domain>-v0"),
                       ("record", "pre-record every task's ground-truth-plan tool responses"),
                       ("check", "audit domains: solvable tasks, stub/non-deterministic tools, unreachable labels")):
        p = sub.add_parser(name, help=text)
        p.add_argument("path", help="the SOP-Bench checkout (or its benchmarks/data folder)")
        p.add_argument("--recordings-dir", default=None, help="where recordings live (default ~/.cache/sopgym/sopbench)")
        p.add_argument("--json", action="store_true", help="print JSON")
        p.add_argument("--allow-training", action="append", default=[], metavar="DOMAIN",
                       help="override a licence the matcher cannot settle, after reading it (repeatable; never "
                            "overrides the no-training condition)")
        if name != "register":
            p.add_argument("--runner", default="docker", choices=("docker", "subprocess", "inprocess"),
                           help="where tools.py runs (default: the Docker sandbox)")
            p.add_argument("--trust-tools-code", action="store_true", help="allow running tools.py unsandboxed")
            p.add_argument("--domain", action="append", default=None, help="only this domain (repeatable)")
            p.add_argument("--timeout-s", type=float, default=120.0)
        if name == "check":
            p.add_argument("--no-run", action="store_true", help="never run tools.py; use existing recordings only")
    return parser


def _register(args: argparse.Namespace) -> int:
    from sopgym.sopbench import register

    report = register(args.path, recordings_dir=args.recordings_dir, allow_training=args.allow_training)
    rows: dict[str, dict[str, Any]] = {name: {"env_id": f"sopbench/{name}-v0", "tasks": d.num_tasks, "training_allowed": d.training_allowed,
                   "training_note": d.training_note, "inputs_rule": d.inputs_rule, "has_tools": d.has_tools,
                   "notes": list(d.problems)}
            for name, d in report.domains.items()}
    if args.json:
        print(json.dumps({"domains": rows, "skipped": report.skipped}, indent=1))
    else:
        for row in rows.values():
            print(f"{row['env_id']}: {row['tasks']} tasks, license CC-BY-NC-4.0, "
                  f"training {'allowed' if row['training_allowed'] else 'NOT allowed'}, inputs {row['inputs_rule']}")
            if not row["training_allowed"]:
                print(f"  training: {row['training_note']}")
            for note in row["notes"]:
                print(f"  note: {note}")
        for name, why in report.skipped.items():
            print(f"skipped {name}: {why}")
    print("Registered for this process only: set SOPBENCH_DIR (or call sopgym.sopbench.register) to make them "
          "available to gymnasium.make in other runs.", file=sys.stderr)
    return 0


def _tool_options(args: argparse.Namespace) -> dict[str, Any]:
    return dict(recordings_dir=args.recordings_dir, runner=args.runner, trust_tools_code=args.trust_tools_code,
                timeout_s=args.timeout_s, domains=args.domain, allow_training=args.allow_training)


def _record(args: argparse.Namespace) -> int:
    from sopgym.sopbench import record

    out = record(args.path, **_tool_options(args))
    print(json.dumps(out, indent=1) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
    return 0


def _check(args: argparse.Namespace) -> int:
    from sopgym.sopbench import check

    options = _tool_options(args)
    if args.no_run:
        options["runner"] = None
    out = check(args.path, **options)
    if args.json:
        print(json.dumps({k: (v.to_json() if hasattr(v, "to_json") else {"skipped": v}) for k, v in out.items()}, indent=1))
    else:
        for name, value in out.items():
            print(value.summary() if hasattr(value, "summary") else f"skipped {name}: {value}")
    return 0


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    return {"register": _register, "record": _record, "check": _check}[args.sopbench_command](args)
