"""``sopgym eval``: run a policy or a model on envs and report the evaluator's metrics
(:mod:`sopgym.evaluation.eval_command` until its parts move here)."""

from __future__ import annotations

import argparse

__all__ = ["main"]


def run_subparser(name: str, add_parser, argv: list[str]) -> int:
    """Runs a command whose parser is still added to a subparsers object (until eval moves here)."""
    parser = argparse.ArgumentParser(prog="sopgym")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args([name, *argv])
    return args.func(args)


def main(argv: list[str]) -> int:
    from sopgym.evaluation.eval_command import add_eval_parser

    return run_subparser("eval", add_eval_parser, argv)
