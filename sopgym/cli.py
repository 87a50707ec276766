"""The ``sopgym`` command.

Built-in subcommands: ``list`` (the registered envs), ``eval`` (run a built-in policy and compute
the evaluator's metrics), ``show`` (read an episode of a trajectory file).

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
# show
# =============================================================================================
def add_show_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("show", help="print an episode of a trajectory file readably")
    parser.add_argument("path", help="JSONL written by `sopgym eval --trajectories` or RecordTrajectory")
    parser.add_argument("--episode", type=int, default=None, help="episode index (default: the first)")
    parser.add_argument("--max-chars", type=int, default=1500, help="cut each text block to this length (0: no cut)")
    parser.set_defaults(func=cmd_show)
    return parser


def _fmt(value: Any) -> str:
    return "n/a" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def _cut(text: str, limit: int) -> str:
    if limit and len(text) > limit:
        return text[:limit] + f" ...[{len(text) - limit} more characters]"
    return text


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in str(text).splitlines() or [""])


def _read_trajectory(path: str) -> dict[int, dict[str, Any]]:
    from sopgym.evaluation.records import iter_jsonl

    episodes: dict[int, dict[str, Any]] = {}
    for _, obj in iter_jsonl(path):
        if not isinstance(obj, dict) or obj.get("episode_index") is None:
            continue
        ep = episodes.setdefault(obj["episode_index"], {"reset": None, "steps": [], "episode": None})
        kind = obj.get("type")
        if kind == "reset":
            ep["reset"] = obj
        elif kind == "step":
            ep["steps"].append(obj)
        elif kind == "episode":
            ep["episode"] = obj
    return episodes


def format_episode(index: int, ep: dict[str, Any], max_chars: int = 1500) -> str:
    """One recorded episode as readable text: input, each turn's reply, calls and results, the verdict."""
    from sopgym.evaluation import score_record

    record = ep["episode"] or {}
    task_id = record.get("task_id") or (ep["reset"] or {}).get("task_id", "?")
    out = [f"== episode {index} | {task_id} =="]
    if ep["reset"] is not None:
        out += ["task input:", _indent(_cut(ep["reset"]["observation"], max_chars))]
    for step in ep["steps"]:
        out.append(f"-- turn {step.get('turn')} | {step.get('status')} | reward {_fmt(step.get('reward'))}")
        action = step.get("action")
        text = action if isinstance(action, str) else json.dumps(action, ensure_ascii=False)
        out += ["  assistant:", _indent(_cut(text, max_chars))]
        for call in step.get("calls") or []:
            args = json.dumps(call.get("arguments"), ensure_ascii=False)
            out.append(f"  call {call.get('name')}({_cut(args, max_chars)}) -> {call.get('status')}")
        results = step.get("tool_results") or []
        for msg in results:
            out += [f"  tool {msg.get('name')}:", _indent(_cut(msg.get("content") or "", max_chars))]
        if not results and step.get("observation"):
            out += ["  env:", _indent(_cut(step["observation"], max_chars))]
    if ep["episode"] is None:
        out.append("(episode not finished in this file)")
        return "\n".join(out)
    end = "truncated (" + str(record.get("truncation_cause")) + ")" if record.get("truncated") else "terminated"
    out.append(f"== end: {end} | {record.get('turns')} turns | reward {_fmt(record.get('reward'))}")
    out.append(f"  answer:   {json.dumps(record.get('answer'), ensure_ascii=False)}")
    out.append(f"  expected: {json.dumps(record.get('expected'), ensure_ascii=False)}")
    try:
        score = score_record(record, where=f"episode {index}")
    except ValueError as exc:
        out.append(f"  evaluator: cannot score this record: {exc}")
    else:
        fields = "  ".join(f"{name} {'right' if ok else 'WRONG'}" for name, ok in score.fields.items())
        out.append(f"  fields: {fields}")
        out.append(f"  evaluator: success={score.success} completed={score.completed} state_ok={score.state_ok} "
                   f"infrastructure_failure={score.infrastructure_failure}")
    return "\n".join(out)


def cmd_show(args: argparse.Namespace) -> int:
    try:
        episodes = _read_trajectory(args.path)
    except (OSError, ValueError) as exc:
        print(f"sopgym show: {exc}", file=sys.stderr)
        return 2
    if not episodes:
        print(f"sopgym show: no episodes in {args.path} (expected lines with an episode_index)", file=sys.stderr)
        return 2
    indices = sorted(episodes)
    index = indices[0] if args.episode is None else args.episode
    if index not in episodes:
        print(f"sopgym show: no episode {index} in {args.path}; it has episodes {indices[0]}..{indices[-1]} "
              f"({len(indices)} in all)", file=sys.stderr)
        return 2
    print(format_episode(index, episodes[index], args.max_chars))
    if args.episode is None and len(indices) > 1:
        print(f"\n({len(indices)} episodes in this file: {indices[0]}..{indices[-1]}; pick one with --episode i)")
    return 0


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
