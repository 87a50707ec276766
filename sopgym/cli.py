"""The ``sopgym`` command.

Built-in subcommands: ``list`` (the registered envs), ``eval`` (run a policy or a model on envs and
compute the evaluator's metrics: :mod:`sopgym.evaluation.eval_command`), ``show`` (read episodes of a
trajectory file, as text or HTML: :mod:`sopgym.evaluation.show_command`); ``report`` (leaderboard and
plots from results) is lazy.

Adding a subcommand: write ``add_<name>_parser(subparsers)`` that adds a parser and sets
``func=<handler(args) -> exit code>`` as a default, and list it in :data:`COMMANDS`. A subcommand
whose module is optional (heavy dependencies, or built elsewhere) goes in :data:`LAZY_COMMANDS`
instead: its module is imported only when that subcommand runs, and a missing module gives a
message naming the extra to install, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["main", "build_parser", "COMMANDS", "LAZY_COMMANDS", "LazyCommand", "format_results"]


# =============================================================================================
# list
# =============================================================================================
def add_list_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("list", help="registered envs: task counts, tools, output fields, licence")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    parser.set_defaults(func=cmd_list)
    return parser


def env_summaries() -> list[dict[str, Any]]:
    """One dict per registered domain pack (authored and adapted), sorted by env id."""
    import sopgym  # noqa: F401 - registers the envs
    from sopgym.sop_tasks.pack import SPLITS
    from sopgym.sop_tasks.registry import all_packs

    rows = []
    for pack in sorted(all_packs(), key=lambda p: p.env_id):
        rows.append({
            "env_id": pack.env_id,
            "domain": pack.name,
            "title": pack.title,
            "tasks": {split: pack.num_tasks(split) for split in SPLITS},
            "num_tools": len(pack.tools),
            "tools": [t.name for t in pack.tools],
            "output_fields": [f.name for f in pack.output_fields],
            "license": pack.license,
            "training_allowed": pack.training_allowed,
        })
    return rows


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip() for line in (header, *rows)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def cmd_list(args: argparse.Namespace) -> int:
    rows = env_summaries()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = [
        [r["env_id"], *("unlimited" if n is None else str(n) for n in r["tasks"].values()), str(r["num_tools"]),
         ", ".join(r["output_fields"]), r["license"], "yes" if r["training_allowed"] else "no"]
        for r in rows
    ]
    print(_table(["env id", "train", "val", "test", "tools", "output fields", "licence", "training"], table))
    return 0


# =============================================================================================
# eval (sopgym/evaluation/eval_command.py)
# =============================================================================================
def add_eval_parser(subparsers) -> argparse.ArgumentParser:
    from sopgym.evaluation.eval_command import add_eval_parser as add

    return add(subparsers)


def format_results(results: dict[str, Any], *args: Any) -> str:
    """One env's results table (see :func:`sopgym.evaluation.eval_command.format_results`)."""
    from sopgym.evaluation.eval_command import format_results as fmt

    return fmt(results, *args)


# =============================================================================================
# show (sopgym/evaluation/show_command.py)
# =============================================================================================
def add_show_parser(subparsers) -> argparse.ArgumentParser:
    from sopgym.evaluation.show_command import add_show_parser as add

    return add(subparsers)


# =============================================================================================
# Registries of subcommands
# =============================================================================================
#: Built-in subcommands: name -> function that adds its parser (with ``func`` set) to ``subparsers``.
COMMANDS: dict[str, Callable[[Any], argparse.ArgumentParser]] = {
    "list": add_list_parser,
    "eval": add_eval_parser,
    "show": add_show_parser,
}


@dataclass(frozen=True)
class LazyCommand:
    """A subcommand whose module is imported only when it runs.

    Args:
        module: the module to import.
        attr: ``kind == "main"``: a ``main(argv) -> int`` that parses its own arguments;
            ``kind == "parser"``: an ``add_<x>_cli(subparsers)`` that registers the subcommand on
            our parser and sets ``func`` (handler ``func(args) -> int``).
        kind: ``main`` or ``parser``.
        help: one line for ``sopgym --help``.
        install: what to install when the module is missing.
    """

    module: str
    attr: str
    kind: str
    help: str
    install: str

    def __post_init__(self) -> None:
        if self.kind not in ("main", "parser"):
            raise ValueError(f"LazyCommand kind must be 'main' or 'parser', got {self.kind!r}")


LAZY_COMMANDS: dict[str, LazyCommand] = {
    "train": LazyCommand("sopgym.trainers.train_command", "main", "main", "train a policy (needs the train extras)",
                         "pip install 'sopgym[train]'"),
    "sandbox": LazyCommand("sopgym.sandboxes.docker.sandbox_command", "add_sandbox_cli", "parser",
                           "Docker sandbox image and containers: build, status, gc", "pip install 'sopgym[docker]'"),
    "sopbench": LazyCommand("sopgym.sopbench.sopbench_command", "add_sopbench_cli", "parser",
                            "load, record and check a SOP-Bench checkout", "pip install 'sopgym[sopbench]'"),
    "report": LazyCommand("sopgym.evaluation.report", "add_report_cli", "parser",
                          "leaderboard (Markdown, CSV) and plots from `sopgym eval` results", "pip install 'sopgym[report]'"),
    "validate-domain": LazyCommand("sopgym.authoring.quality", "add_validate_domain_cli", "parser",
                                   "run the quality checks of a domain pack", "pip install sopgym"),
    "domains-table": LazyCommand("sopgym.authoring.quality", "add_domains_table_cli", "parser",
                                 "validate every authored domain and write docs/domains.md", "pip install sopgym"),
    "new-domain": LazyCommand("sopgym.authoring.scaffold", "add_new_domain_cli", "parser",
                              "scaffold a domain pack that passes validate-domain", "pip install sopgym"),
    "serve": LazyCommand("sopgym.integrations.openenv_server", "add_serve_cli", "parser",
                         "serve one env over OpenEnv's protocol (sessions, MCP tools, task API)", "pip install 'sopgym[server]'"),
}


def _unavailable(name: str, command: LazyCommand, exc: BaseException) -> int:
    print(f"sopgym {name}: this command is not available here: cannot import {command.module} ({exc}).\n"
          f"Install what it needs with: {command.install}", file=sys.stderr)
    return 1


def _load(command: LazyCommand) -> Callable[..., Any]:
    return getattr(importlib.import_module(command.module), command.attr)


def _add_lazy_placeholder(subparsers, name: str, command: LazyCommand, error: BaseException | None = None) -> None:
    """A parser that lists the command in ``--help`` and, when run, imports and hands over (or explains)."""
    parser = subparsers.add_parser(name, help=command.help, add_help=False)
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    if error is not None:
        parser.set_defaults(func=lambda args: _unavailable(name, command, error))
    else:
        parser.set_defaults(func=lambda args: _run_lazy(name, list(args.rest)))


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``sopgym`` parser. ``command`` names the subcommand about to run: a lazy parser-kind
    command is then imported and registered for real (other lazy commands stay placeholders)."""
    from sopgym import __version__

    parser = argparse.ArgumentParser(prog="sopgym", description="SOP environments: list, evaluate, inspect, train.")
    parser.add_argument("--version", action="version", version=f"sopgym {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in COMMANDS.values():
        add(subparsers)
    for name, lazy in LAZY_COMMANDS.items():
        if lazy.kind == "parser" and name == command:
            try:
                _load(lazy)(subparsers)
            except ImportError as exc:
                _add_lazy_placeholder(subparsers, name, lazy, exc)
        else:
            _add_lazy_placeholder(subparsers, name, lazy)
    return parser


def _run_lazy(name: str, argv: list[str]) -> int:
    lazy = LAZY_COMMANDS[name]
    try:
        target = _load(lazy)
    except ImportError as exc:
        return _unavailable(name, lazy, exc)
    if lazy.kind == "main":
        return int(target(argv) or 0)
    args = build_parser(name).parse_args([name, *argv])
    return int(args.func(args) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sopgym`` console script and of ``python -m sopgym``. Returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in LAZY_COMMANDS:
        return _run_lazy(argv[0], argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # `sopgym list | head`: the reader left; not an error of ours
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's final flush quiet
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
