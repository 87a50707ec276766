"""``sopgym show PATH``: episodes of a trajectory file, as text or one HTML page
(:mod:`sopgym.evaluation.show_command` until its parts move here)."""

from __future__ import annotations

from sopgym.cli.evaluate import run_subparser

__all__ = ["main"]


def main(argv: list[str]) -> int:
    from sopgym.evaluation.show_command import add_show_parser

    return run_subparser("show", add_show_parser, argv)
