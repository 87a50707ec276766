"""``sopgym validate-domain PATH_OR_NAME``: the quality checks of one domain pack
(:func:`sopgym.authoring.quality.validate_pack`)."""

from __future__ import annotations

import argparse
import json
import sys
import traceback

from sopgym.cli.arguments import non_negative_int

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    from sopgym.authoring.quality import MAX_BASELINE

    p = argparse.ArgumentParser(prog="sopgym validate-domain")
    p.add_argument("path", help="a domain-pack folder (with __init__.py defining PACK) or a registered domain name")
    p.add_argument("--train-tasks", type=non_negative_int, default=200, help="train tasks the oracle must solve (default 200)")
    p.add_argument("--max-baseline", type=float, default=MAX_BASELINE, help="largest allowed baseline success on test (0-1)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def _where(exc: BaseException) -> str:
    """Where an exception of a pack's own code was raised: ``file:line`` (a syntax error's own location)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" ({exc.filename}:{exc.lineno})"
    frames = traceback.extract_tb(exc.__traceback__)
    return f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def _fail(message: str) -> int:
    print(f"sopgym validate-domain: {message}", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    """Exit codes: 0 every check passes, 1 a check fails, 2 the pack cannot be loaded or checked (one line on stderr)."""
    args = build_parser().parse_args(argv)
    from sopgym.authoring.quality import load_pack_from_path, validate_pack

    if not 0.0 <= args.max_baseline <= 1.0:
        return _fail(f"--max-baseline must be a fraction in [0, 1], got {args.max_baseline}")
    try:
        pack = load_pack_from_path(args.path)
    except ValueError as exc:
        return _fail(str(exc))
    except Exception as exc:  # noqa: BLE001 - the pack's own module failed to import: say where, in one line
        return _fail(f"cannot import the pack at {args.path}: {type(exc).__name__}: {exc}{_where(exc)}")
    try:
        report = validate_pack(pack, train_tasks=args.train_tasks, max_baseline=args.max_baseline)
    except Exception as exc:  # noqa: BLE001 - the pack's generator, solver or tools raised: say where, in one line
        return _fail(f"checking {pack.env_id} stopped: {type(exc).__name__}: {exc}{_where(exc)}")
    print(json.dumps(report.to_json(), indent=2, default=str) if args.json else report.format())
    return 0 if report.ok else 1
