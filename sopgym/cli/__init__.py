"""The ``sopgym`` command: one module per subcommand under ``sopgym/cli/``.

``sopgym NAME ARGS...`` runs :data:`COMMANDS` ``[NAME]``: first its ``needs()`` when it has one (it
imports the library the command runs on; an ImportError there, an optional dependency missing, is
one message naming what to install and exit code 1, never a traceback), then ``main(ARGS)``, which
parses the arguments and calls library functions; its return value is the exit code. A command
module imports only argparse and this package at its top and the library inside its functions, so
``sopgym list`` loads neither torch, docker nor openenv.

Adding a subcommand: write ``sopgym/cli/<name>.py`` with ``build_parser()`` and ``main(argv) -> int``
(and ``needs()`` when it runs on an optional dependency), and list it in :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sopgym.cli import (
    domains_table,
    evaluate,
    list_envs,
    new_domain,
    report,
    rescore,
    sandbox,
    serve,
    show,
    sopbench,
    train,
    validate_domain,
)

__all__ = ["main", "build_parser", "run_command", "Command", "COMMANDS"]


@dataclass(frozen=True)
class Command:
    """One subcommand of ``sopgym``.

    Args:
        help: its line in ``sopgym --help``.
        main: ``main(argv) -> exit code``, given the arguments after the command's name.
        needs: imports what the command runs on, before ``main`` (so before its arguments are parsed:
            ``sopgym serve --help`` without the server extra says what to install).
        install: what to install when ``needs`` raises ImportError.
    """

    help: str
    main: Callable[[list[str]], int]
    needs: Callable[[], None] | None = None
    install: str = "pip install sopgym"


#: The subcommands, in the order ``sopgym --help`` lists them.
COMMANDS: dict[str, Command] = {
    "list": Command("registered envs: task counts, tools, output fields, licence", list_envs.main),
    "eval": Command("run a policy or a model on envs and report the evaluator's metrics", evaluate.main),
    "show": Command("print an episode of a trajectory file, or write the HTML viewer of many runs", show.main),
    "train": Command("train a policy (needs the train extras)", train.main, train.needs, "pip install 'sopgym[train]'"),
    "sandbox": Command("Docker sandbox image and containers: build, status, gc", sandbox.main, sandbox.needs,
                       "pip install 'sopgym[docker]'"),
    "sopbench": Command("load, record and check a SOP-Bench checkout", sopbench.main),
    "report": Command("leaderboard (Markdown, CSV) and plots from `sopgym eval` results", report.main),
    "rescore": Command("score a run's recorded episodes again with this evaluator; write its results", rescore.main),
    "validate-domain": Command("run the quality checks of a domain pack", validate_domain.main),
    "domains-table": Command("validate every authored domain and write docs/domains.md", domains_table.main),
    "new-domain": Command("scaffold a domain pack that passes validate-domain", new_domain.main),
    "serve": Command("serve one env over OpenEnv's protocol (sessions, MCP tools, task API)", serve.main, serve.needs,
                     "pip install 'sopgym[server]'"),
}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: ``--help`` (the commands and their lines), ``--version``, the command's name.
    Each command parses its own arguments (``COMMANDS[name].main``)."""
    from sopgym import __version__

    parser = argparse.ArgumentParser(prog="sopgym", description="SOP environments: list, evaluate, inspect, train.")
    parser.add_argument("--version", action="version", version=f"sopgym {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in COMMANDS.items():
        listed = subparsers.add_parser(name, help=command.help, add_help=False)
        listed.add_argument("rest", nargs=argparse.REMAINDER)
    return parser


def run_command(name: str, argv: list[str]) -> int:
    """Runs ``sopgym NAME ARGV...`` and returns its exit code."""
    command = COMMANDS[name]
    if command.needs is not None:
        try:
            command.needs()
        except ImportError as exc:
            print(f"sopgym {name}: this command is not available here: {exc}.\n"
                  f"Install what it needs with: {command.install}", file=sys.stderr)
            return 1
    try:
        return int(command.main(argv) or 0)
    except BrokenPipeError:  # `sopgym list | head`: the reader left; not an error of ours
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's final flush quiet
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sopgym`` console script and of ``python -m sopgym``. Returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        return run_command(argv[0], argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)  # --help, --version and an unknown command end here
    if args.command is not None:
        return run_command(args.command, list(args.rest))
    parser.print_help(sys.stderr)
    return 2
