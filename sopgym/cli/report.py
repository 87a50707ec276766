"""``sopgym report RESULTS... --out FOLDER``: a leaderboard (Markdown, CSV) and plots from ``sopgym eval``
results (:mod:`sopgym.evaluation.report`)."""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sopgym report",
                                     description="Puts results files of `sopgym eval --out` side by side: models x envs.")
    parser.add_argument("results", nargs="+", help="results JSON files (one per model/run)")
    parser.add_argument("--out", required=True, help="folder for leaderboard.md, leaderboard.csv and the PNG plots")
    parser.add_argument("--no-plots", action="store_true", help="tables only")
    parser.add_argument("--viewer", action="store_true",
                        help="also write viewer.html (every episode of the runs' trajectory files) and link each "
                             "leaderboard cell to its episodes there")
    return parser


def main(argv: list[str]) -> int:
    """Exit codes: 0 written, 2 a bad results file or output folder (one line on stderr)."""
    args = build_parser().parse_args(argv)
    from sopgym.evaluation.report import build_report

    if os.path.exists(args.out) and not os.path.isdir(args.out):
        print(f"sopgym report: --out {args.out!r} is a file; expected a folder", file=sys.stderr)
        return 2
    try:
        written = build_report(args.results, args.out, plots=not args.no_plots, viewer=args.viewer)
    except (OSError, ValueError) as exc:
        print(f"sopgym report: {exc}", file=sys.stderr)
        return 2
    print(written["markdown"].read_text(encoding="utf-8"))
    for key in ("markdown", "csv"):
        print(f"{key}: {written[key]}")
    if written["viewer"]:
        print(f"viewer: {written['viewer']}")
    for path in written["plots"]:
        print(f"plot: {path}")
    for note in written["notes"]:
        print(f"note: {note}")
    if written["plots_skipped"]:
        print(f"sopgym report: no plots: {written['plots_skipped']}", file=sys.stderr)
    return 0
