"""``sopgym show TRAJECTORIES...``: episodes of trajectory files, as text (one file) or as the viewer,
one self-contained HTML page of every episode of one or more runs (``--html PAGE``).

The library parts: :mod:`sopgym.evaluation.episode_text` (reading a trajectory file, an episode as
text) and :mod:`sopgym.evaluation.viewer` (the page).
"""

from __future__ import annotations

import argparse
import sys

from sopgym.cli.arguments import non_negative_int

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sopgym show",
        description="Prints an episode of a trajectory file readably, or writes every episode of one or more runs "
                    "into one self-contained HTML viewer (search, filters, runs side by side).")
    parser.add_argument("paths", nargs="+", metavar="TRAJECTORIES",
                        help="JSONL written by `sopgym eval` (--trajectories) or RecordTrajectory; several only with --html")
    parser.add_argument("--episode", type=non_negative_int, action="append", default=None,
                        help="episode index (default: the first; repeatable); with --html, the episodes put in the page")
    parser.add_argument("--max-chars", type=non_negative_int, default=1500,
                        help="cut each text block to this length (0: no cut; text output only)")
    parser.add_argument("--html", default=None, metavar="PAGE",
                        help="write the viewer of every episode of the files (or those of --episode) to this page")
    parser.add_argument("--name", action="append", default=None, metavar="NAME",
                        help="the name of each run in the viewer, in the order of the files (default: the file's name)")
    return parser


def _error(message: str) -> int:
    from sopgym.evaluation.escaping import visible

    print(f"sopgym show: {visible(message, newlines=False)}", file=sys.stderr)
    return 2


def _write_viewer(args: argparse.Namespace) -> int:
    from sopgym.evaluation.viewer import write_viewer

    try:
        summary = write_viewer(args.paths, args.html, names=args.name, episodes=args.episode)
    except (OSError, ValueError) as exc:
        return _error(str(exc))
    print(f"{summary['episodes']} episodes of {summary['runs']} run(s): {args.html}")
    return 0


def main(argv: list[str]) -> int:
    """Exit codes: 0 shown or written, 2 an unreadable file, a missing episode or a bad option (one line on stderr)."""
    args = build_parser().parse_args(argv)
    if args.html:
        return _write_viewer(args)
    if len(args.paths) > 1:
        return _error(f"expected one trajectory file for text output, got {len(args.paths)} (--html PAGE shows several runs)")
    if args.name:
        return _error("--name names runs in the viewer; it needs --html PAGE")
    from sopgym.evaluation.episode_text import format_episode, read_trajectory

    path = args.paths[0]
    try:
        _, episodes = read_trajectory(path)
    except (OSError, ValueError) as exc:
        return _error(str(exc))
    if not episodes:
        return _error(f"no episodes in {path} (expected lines with an episode_index)")
    indices = sorted(episodes)
    missing = [i for i in args.episode or [] if i not in episodes]
    if missing:
        return _error(f"no episode {missing[0]} in {path}; it has episodes {indices[0]}..{indices[-1]} ({len(indices)} in all)")
    chosen = list(args.episode) if args.episode else [indices[0]]
    print("\n\n".join(format_episode(i, episodes[i], args.max_chars) for i in chosen))
    if not args.episode and len(indices) > 1:
        print(f"\n({len(indices)} episodes in this file: {indices[0]}..{indices[-1]}; pick one with --episode i)")
    return 0
