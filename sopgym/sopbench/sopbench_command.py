"""``sopgym sopbench register|record|check PATH``. Wire with ``add_sopbench_cli(subparsers)``."""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["add_sopbench_cli", "main"]


def add_sopbench_cli(subparsers) -> argparse.ArgumentParser:
    """Add the ``sopbench`` command (with register/record/check) to an argparse subparsers object."""
    parser = subparsers.add_parser("sopbench", help="load, record and check a SOP-Bench checkout (CC BY-NC 4.0 data)")
    sub = parser.add_subparsers(dest="sopbench_command", required=True)
    for name, text in (("register", "list the domains a checkout provides as sopbench/<domain>-v0"),
                       ("record", "pre-record every task's ground-truth-plan tool responses"),
                       ("check", "audit domains: solvable tasks, stub/non-deterministic tools, unreachable labels")):
        p = sub.add_parser(name, help=text)
        p.add_argument("path", help="the SOP-Bench checkout (or its benchmarks/data folder)")
        p.add_argument("--recordings-dir", default=None, help="where recordings live (default ~/.cache/sopgym/sopbench)")
        p.add_argument("--json", action="store_true", help="print JSON")
        if name != "register":
            p.add_argument("--runner", default="docker", choices=("docker", "subprocess", "inprocess"),
                           help="where tools.py runs (default: the Docker sandbox)")
            p.add_argument("--trust-tools-code", action="store_true", help="allow running tools.py unsandboxed")
            p.add_argument("--domain", action="append", default=None, help="only this domain (repeatable)")
            p.add_argument("--timeout-s", type=float, default=120.0)
        if name == "check":
            p.add_argument("--no-run", action="store_true", help="never run tools.py; use existing recordings only")
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    from . import check, record, register

    if args.sopbench_command == "register":
        report = register(args.path, recordings_dir=args.recordings_dir)
        rows = {name: {"env_id": f"sopbench/{name}-v0", "tasks": d.num_tasks, "training_allowed": d.training_allowed,
                       "inputs_rule": d.inputs_rule, "has_tools": d.has_tools, "notes": list(d.problems)}
                for name, d in report.domains.items()}
        if args.json:
            print(json.dumps({"domains": rows, "skipped": report.skipped}, indent=1))
        else:
            for row in rows.values():
                print(f"{row['env_id']}: {row['tasks']} tasks, license CC-BY-NC-4.0, "
                      f"training {'allowed' if row['training_allowed'] else 'NOT allowed'}, inputs {row['inputs_rule']}")
                for note in row["notes"]:
                    print(f"  note: {note}")
            for name, why in report.skipped.items():
                print(f"skipped {name}: {why}")
        print("Registered for this process only: set SOPBENCH_DIR (or call sopgym.sopbench.register) to make them "
              "available to gymnasium.make in other runs.", file=sys.stderr)
        return 0
    options = dict(recordings_dir=args.recordings_dir, runner=args.runner, trust_tools_code=args.trust_tools_code,
                   timeout_s=args.timeout_s, domains=args.domain)
    if args.sopbench_command == "record":
        out = record(args.path, **options)
        print(json.dumps(out, indent=1) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
        return 0
    if args.no_run:
        options["runner"] = None
    out = check(args.path, **options)
    if args.json:
        print(json.dumps({k: (v.to_json() if hasattr(v, "to_json") else {"skipped": v}) for k, v in out.items()}, indent=1))
    else:
        for name, value in out.items():
            print(value.summary() if hasattr(value, "summary") else f"skipped {name}: {value}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sopgym")
    add_sopbench_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
