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
# eval
# =============================================================================================
def _int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text}")
        return value

    parse.__name__ = f"integer >= {low}"  # argparse names the type in its messages
    return parse


_positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)


def _is_trajectory_file(path: str) -> bool:
    """True when ``path`` is an existing file whose first line is a trajectory line (reset/step/episode)."""
    if not os.path.isfile(path):
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.readline(1 << 20)
        line = json.loads(first)
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(line, dict) and line.get("type") in ("reset", "step", "episode") and "episode_index" in line


def check_output_paths(out: str | None, trajectories: str | None) -> str | None:
    """Why the output paths of ``sopgym eval`` cannot be written (None when they can), checked before any
    episode runs, so a run is never lost to a typo in a path.

    The results file must be a file (not a folder) in an existing folder; the trajectory file's folder is
    created if missing, but no part of it may be a file; the two must be different files (the results
    would overwrite the trajectories).
    """
    paths = [(flag, path) for flag, path in (("--out", out), ("--trajectories", trajectories)) if path]
    for flag, path in paths:
        if os.path.isdir(path) or path.endswith(("/", os.sep)):
            return f"{flag} {path!r} is a folder; expected a file path"
        parent = os.path.dirname(os.path.abspath(path))
        if flag == "--out" and not os.path.isdir(parent):
            return f"{flag} {path!r}: folder {parent!r} does not exist; create it or choose another path"
        existing = parent
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            return f"{flag} {path!r}: {existing!r} is a file, not a folder"
        if not os.access(existing, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
            return f"{flag} {path!r} is not writable"
    if out and _is_trajectory_file(out):
        return (f"--out {out!r} is a trajectory file (its first line is a trajectory line): refusing to overwrite it "
                "with results; choose another path")
    if out and trajectories:
        same = os.path.realpath(out) == os.path.realpath(trajectories) or (
            os.path.exists(out) and os.path.exists(trajectories) and os.path.samefile(out, trajectories))
        if same:
            return (f"--out and --trajectories name the same file {out!r}: the results would overwrite the "
                    "trajectories; give two paths")
    return None


def add_eval_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "eval", help="run a built-in policy on an env and report the evaluator's metrics",
        description="Runs tasks 0..EPISODES-1 of the split, each SAMPLES_PER_TASK times, then computes the metrics "
                    "(see docs/evaluation.md) from the episode records.",
    )
    parser.add_argument("--env", required=True, help="env id, e.g. sopgym/WarehouseReceiving-v0 (see `sopgym list`)")
    import sopgym.sopbench  # noqa: F401  (registers its groundtruth-replay baseline policy)
    from sopgym.envs.policies import POLICIES

    parser.add_argument("--policy", default="oracle", choices=sorted(POLICIES),
                        help="built-in policy (see sopgym.envs.policies)")
    parser.add_argument("--episodes", type=_positive_int, default=50, help="number of tasks (task indices 0..N-1)")
    parser.add_argument("--samples-per-task", type=_positive_int, default=1, help="episodes per task: the n of pass@k")
    parser.add_argument("--k", type=_positive_int, default=1, help="k of pass@k and pass^k (<= samples per task)")
    parser.add_argument("--seed", type=_non_negative_int, default=0)
    parser.add_argument("--split", default="test", choices=("train", "val", "test"))
    parser.add_argument("--out", default=None, help="write the results JSON here (its folder must exist; checked before "
                                                    "the run)")
    parser.add_argument("--trajectories", default=None,
                        help="write every step and episode here (JSONL; its folder is created; must differ from --out)")
    parser.add_argument("--reward", default=None, choices=("dense", "binary"), help="env reward (default: the env's)")
    parser.add_argument("--sandbox", default=None, choices=("inprocess", "docker"), help="stateful tool backend")
    parser.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="another gymnasium.make kwarg (repeatable); VALUE is read as JSON when it parses, "
                             "else as a string, e.g. --env-arg max_turns=4 --env-arg tools_runner=subprocess. "
                             "code_runner=inprocess is for trusted code only: the agent's code then runs on this "
                             "host and can import sopgym and read the answers")
    parser.add_argument("--n-bootstrap", type=_non_negative_int, default=1000,
                        help="bootstrap resamples for the 95%% intervals (0: off)")
    parser.add_argument("--workers", type=_non_negative_int, default=0, metavar="N",
                        help="run the envs on N Ray env workers, stepped in parallel (needs sopgym[ray]; 0: in this "
                             "process). The records are the same; see docs/scaling.md")
    parser.add_argument("--ray-address", default=None, metavar="ADDR",
                        help="with --workers: the Ray cluster (auto, host:6379, ray://host:10001); default: Ray on this machine")
    parser.add_argument("--concurrency", type=_positive_int, default=None,
                        help="episodes at once (default: 1, or 16 per Ray worker); the records do not depend on it")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=cmd_eval)
    return parser


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def format_results(results: dict[str, Any]) -> str:
    """The results table printed at the end of ``sopgym eval``."""
    ci = results.get("ci95", {})
    k = results.get("k", 1)
    names = [
        ("task_success_rate", "task success rate"),
        ("field_accuracy", "field accuracy (mean)"),
        *((f"field_accuracy_per_field/{f}", f"  field {f}") for f in results.get("field_accuracy_per_field", {})),
        ("execution_completion_rate", "execution completion rate"),
        ("conditional_task_success_rate", "conditional success rate"),
        ("tool_call_accuracy", "tool-call accuracy"),
        ("invalid_action_rate", "invalid-action rate"),
        ("mean_turns", "mean turns"),
        ("truncation_rate", "truncation rate"),
        *((f"truncation_rate_by_cause/{c}", f"  truncated: {c}") for c in results.get("truncation_rate_by_cause", {})),
        ("infrastructure_failure_rate", "infrastructure failure rate"),
        ("pass_at_k", f"pass@{k}"),
        ("pass_hat_k", f"pass^{k}"),
    ]
    rows = []
    for key, label in names:
        if "/" in key:
            group, sub = key.split("/", 1)
            value = results[group][sub]
        else:
            value = results.get(key)
        interval = ci.get(key)
        rows.append([label, _fmt(value), f"[{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""])
    head = (f"{results.get('env_id', '?')} | policy {results.get('policy', '?')} | split {results.get('split', '?')} | "
            f"{results['num_tasks']} tasks x {results['min_samples_per_task']}"
            f"{'' if results['min_samples_per_task'] == results['max_samples_per_task'] else '-' + str(results['max_samples_per_task'])}"
            f" samples = {results['episodes']} episodes")
    return head + "\n" + _table(["metric", "value", "95% CI"], rows)


def parse_env_args(items: Sequence[str]) -> dict[str, Any]:
    """``["max_turns=4", "tools_runner=subprocess"]`` -> ``{"max_turns": 4, "tools_runner": "subprocess"}``."""
    kwargs: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--env-arg expects KEY=VALUE with KEY an identifier, got {item!r}")
        try:
            kwargs[key] = json.loads(text)
        except json.JSONDecodeError:
            kwargs[key] = text
    return kwargs


def cmd_eval(args: argparse.Namespace) -> int:
    import gymnasium as gym

    import sopgym  # noqa: F401 - registers the envs
    from sopgym.evaluation import evaluate_records, run_policy

    if args.ray_address is not None and not args.workers:
        print(f"sopgym eval: --ray-address {args.ray_address!r} needs --workers N (N >= 1)", file=sys.stderr)
        return 2
    if args.k > args.samples_per_task:
        print(f"sopgym eval: --k ({args.k}) must be <= --samples-per-task ({args.samples_per_task}): "
              "pass@k needs n >= k samples per task", file=sys.stderr)
        return 2
    if ":" not in args.env and args.env not in gym.registry:  # "module:id" ids are resolved by gymnasium.make
        known = sorted(i for i in gym.registry if i.startswith(("sopgym/", "sopbench/")))
        print(f"sopgym eval: unknown env id {args.env!r}; registered: {known}", file=sys.stderr)
        return 2
    try:
        env_kwargs = parse_env_args(args.env_arg)
    except ValueError as exc:
        print(f"sopgym eval: {exc}", file=sys.stderr)
        return 2
    env_kwargs.update({key: value for key in ("reward", "sandbox") if (value := getattr(args, key)) is not None})
    problem = check_output_paths(args.out, args.trajectories)
    if problem:
        print(f"sopgym eval: {problem}", file=sys.stderr)
        return 2
    if env_kwargs.get("code_runner") == "inprocess":
        print("sopgym eval: note: code_runner=inprocess runs the agent's code on this host as your user (it can "
              "import sopgym and read the answers): trusted code only", file=sys.stderr)
    try:
        records = run_policy(
            args.env, args.policy, args.episodes, args.samples_per_task, args.seed, args.split, env_kwargs,
            trajectories_path=args.trajectories, progress=not args.quiet, workers=args.workers,
            address=args.ray_address, concurrency=args.concurrency,
        )
    except (ValueError, TypeError, gym.error.Error, ImportError) as exc:  # bad counts, policy, env or kwargs; no ray
        print(f"sopgym eval: {exc}", file=sys.stderr)
        return 2
    metrics = evaluate_records(records, k=args.k, n_bootstrap=args.n_bootstrap, seed=args.seed)
    results = {
        "env_id": args.env,
        "policy": args.policy,
        "split": args.split,
        "seed": args.seed,
        "samples_per_task": args.samples_per_task,
        "env_kwargs": env_kwargs,
        **metrics,
    }
    print(format_results(results))
    if args.trajectories:
        print(f"trajectories: {args.trajectories}")
    if args.out:
        try:
            with open(args.out, "w", encoding="utf-8") as f:
                json.dump(results, f, indent=2)
                f.write("\n")
        except OSError as exc:  # checked before the run; the disk may still fill up. The table above holds them.
            print(f"sopgym eval: could not write the results to {args.out}: {exc}", file=sys.stderr)
            return 1
        print(f"results: {args.out}")
    return 0


# =============================================================================================
# show
# =============================================================================================
def add_show_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("show", help="print an episode of a trajectory file readably")
    parser.add_argument("path", help="JSONL written by `sopgym eval --trajectories` or RecordTrajectory")
    parser.add_argument("--episode", type=_non_negative_int, default=None, help="episode index (default: the first)")
    parser.add_argument("--max-chars", type=_non_negative_int, default=1500,
                        help="cut each text block to this length (0: no cut)")
    parser.set_defaults(func=cmd_show)
    return parser


def _cut(text: str, limit: int) -> str:
    if limit and len(text) > limit:
        return text[:limit] + f" ...[{len(text) - limit} more characters]"
    return text


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in str(text).splitlines() or [""])


def _json_text(value: Any) -> str:
    """``json.dumps`` for display; never raises (a value read from JSON may still be too deep to write)."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError) as exc:
        return f"<cannot display: {type(exc).__name__}>"


def _plain(value: Any) -> str:
    """A string as itself, None as ``None``, anything else as its JSON text (never raises)."""
    return value if isinstance(value, str) else "None" if value is None else _json_text(value)


# What each kind of trajectory line must hold for `show` to print it: key -> (allowed types, description).
_LINE_FIELDS: dict[str, dict[str, tuple[tuple[type, ...], str]]] = {
    "reset": {"observation": ((str, type(None)), "a string")},
    "step": {
        "observation": ((str, type(None)), "a string"),
        "calls": ((list, type(None)), "a list of call objects"),
        "tool_results": ((list, type(None)), "a list of tool messages"),
        "reward": ((int, float, type(None)), "a number"),
        "status": ((str, type(None)), "a string"),
    },
    "episode": {
        "reward": ((int, float, type(None)), "a number"),
        "truncated": ((bool, type(None)), "a boolean"),
    },
}


def _check_line(kind: str, obj: dict[str, Any]) -> str | None:
    """Why a trajectory line cannot be shown (None when it can)."""
    for key, (types, what) in _LINE_FIELDS.get(kind, {}).items():
        value = obj.get(key)
        if not isinstance(value, types) or isinstance(value, bool) and bool not in types:
            return f"{kind} line: {key!r} must be {what}, got {type(value).__name__}"
    if kind == "step":
        for key in ("calls", "tool_results"):
            for item in obj.get(key) or []:
                if not isinstance(item, dict):
                    return f"step line: each of {key!r} must be an object, got {type(item).__name__}"
        for msg in obj.get("tool_results") or []:
            if not isinstance(msg.get("content"), (str, type(None))):
                return f"step line: a tool result's 'content' must be a string, got {type(msg['content']).__name__}"
    return None


def _read_trajectory(path: str) -> dict[int, dict[str, Any]]:
    """Episodes of a trajectory file by index.

    Raises:
        OSError: the file cannot be read.
        ValueError: a line that is not a JSON object or whose fields have the wrong types, naming the line.
    """
    episodes: dict[int, dict[str, Any]] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                obj = json.loads(line)
            except RecursionError:
                raise ValueError(f"{where}: the line is nested too deeply to read") from None
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: expected a JSON object per line, got invalid JSON ({exc})") from None
            except ValueError as exc:  # e.g. an integer beyond Python's int-string limit
                raise ValueError(f"{where}: cannot read the line: {str(exc).split(';')[0]}") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{where}: expected a JSON object per line, got {type(obj).__name__}")
            index = obj.get("episode_index")
            if index is None:
                continue  # not a trajectory line (e.g. a bare record)
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                raise ValueError(f"{where}: 'episode_index' must be a non-negative integer, got {_json_text(index)[:60]}")
            kind = obj.get("type")
            if not isinstance(kind, (str, type(None))):
                raise ValueError(f"{where}: 'type' must be 'reset', 'step' or 'episode', got {type(kind).__name__}")
            problem = _check_line(kind, obj) if kind else None
            if problem:
                raise ValueError(f"{where}: {problem}")
            ep = episodes.setdefault(index, {"reset": None, "steps": [], "episode": None})
            if kind == "reset":
                ep["reset"] = obj
            elif kind == "step":
                ep["steps"].append(obj)
            elif kind == "episode":
                ep["episode"] = obj
    return episodes


def format_episode(index: int, ep: dict[str, Any], max_chars: int = 1500) -> str:
    """One recorded episode as readable text: input, each turn's reply, calls and results, the verdict.

    Lines are expected as :func:`_read_trajectory` checked them; the record itself is judged by the
    evaluator, and a record it cannot judge is reported in the text, not raised.
    """
    from sopgym.evaluation import score_record

    record = ep["episode"] or {}
    task_id = record.get("task_id") or (ep["reset"] or {}).get("task_id", "?")
    out = [f"== episode {index} | {_plain(task_id)[:200]} =="]
    if ep["reset"] is not None:
        out += ["task input:", _indent(_cut(ep["reset"].get("observation") or "", max_chars))]
    for step in ep["steps"]:
        out.append(f"-- turn {_plain(step.get('turn'))[:60]} | {step.get('status')} | reward {_fmt(step.get('reward'))}")
        action = step.get("action")
        text = action if isinstance(action, str) else _json_text(action)
        out += ["  assistant:", _indent(_cut(text, max_chars))]
        for call in step.get("calls") or []:
            args = _json_text(call.get("arguments"))
            out.append(f"  call {_plain(call.get('name'))[:200]}({_cut(args, max_chars)}) -> {_plain(call.get('status'))[:60]}")
        results = step.get("tool_results") or []
        for msg in results:
            out += [f"  tool {_plain(msg.get('name'))[:200]}:", _indent(_cut(msg.get("content") or "", max_chars))]
        if not results and step.get("observation"):
            out += ["  env:", _indent(_cut(step["observation"], max_chars))]
    if ep["episode"] is None:
        out.append("(episode not finished in this file)")
        return "\n".join(out)
    end = "truncated (" + _plain(record.get("truncation_cause"))[:60] + ")" if record.get("truncated") else "terminated"
    out.append(f"== end: {end} | {_plain(record.get('turns'))[:60]} turns | reward {_fmt(record.get('reward'))}")
    out.append(f"  answer:   {_cut(_json_text(record.get('answer')), max_chars)}")
    out.append(f"  expected: {_cut(_json_text(record.get('expected')), max_chars)}")
    try:
        score = score_record(record, where=f"episode {index}")
    except (ValueError, TypeError, RecursionError) as exc:  # a hand-edited or foreign record
        out.append(f"  evaluator: cannot score this record: {type(exc).__name__}: {_cut(str(exc), 300)}")
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
