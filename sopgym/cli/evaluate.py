"""``sopgym eval``: run a policy (scripted, a model behind an OpenAI-compatible server, or a local
Hugging Face model) on one env or a suite, and write the evaluator's metrics.

Every run goes through :mod:`sopgym.bench.suite`: tasks ``0..N-1`` of the split per env, each
``--samples-per-task`` times (the same tasks for every kind of policy), one trajectory file (resumable
with ``--resume``) and one results file holding per-env metrics, the suite's means with 95% intervals
and the exact configuration. See docs/evaluation.md ("Benchmark a model").

The command reads top to bottom as its phases: :func:`plan_from_arguments` (the envs, their kwargs and
tasks, checked), the pre-flight (:mod:`sopgym.bench.preflight`: the envs' backends, the model
server, tasks the turn limit makes unsolvable; a problem refuses the run before any episode, exit code 1),
:func:`agent_from_arguments` (a built-in policy or a model), :func:`run` (the episodes, with the results
file kept current) and :func:`write_results` (the tables and the files). The text tables and the
output-path rules are library parts, in :mod:`sopgym.bench.eval_command`.

Exit codes: 0 finished; 1 refused by the pre-flight, stopped by the model server, or the results could
not be written; 2 bad arguments (one line on stderr); 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from sopgym.cli.arguments import duration, json_object, non_negative_int, number_in, parse_env_args, positive_int

__all__ = ["build_parser", "main", "cmd_eval", "plan_from_arguments", "agent_from_arguments", "run", "write_results",
           "EvalPlan", "MODEL_POLICIES", "RUNS_FOLDER", "RESULTS_EVERY_S"]

MODEL_POLICIES = ("openai", "hf")
#: Where a model run without --out writes its results and trajectory (a folder per run).
RUNS_FOLDER = "sopgym-runs"
#: The results file is rewritten at most this often while a run goes (and always when it ends).
RESULTS_EVERY_S = 5.0
#: Model options and the policies they belong to (for the "this option needs --policy ..." check).
_MODEL_OPTIONS = {
    "model": MODEL_POLICIES, "base_url": ("openai",), "api_key_env": ("openai",), "temperature": MODEL_POLICIES,
    "top_p": MODEL_POLICIES, "max_tokens": MODEL_POLICIES, "stop": ("openai",), "model_seed": MODEL_POLICIES,
    "tool_choice": ("openai",), "chat_template_kwargs": MODEL_POLICIES, "extra_body": ("openai",),
    "tools": MODEL_POLICIES, "history": MODEL_POLICIES, "request_timeout": ("openai",), "max_retries": ("openai",),
    "server_wait": ("openai",), "no_stream": ("openai",), "max_reply_bytes": ("openai",), "price_prompt": MODEL_POLICIES,
    "price_completion": MODEL_POLICIES, "device": ("hf",), "dtype": ("hf",), "threads": ("hf",), "max_context": ("hf",),
    "cache": MODEL_POLICIES,
}
#: The model server's wait during a pre-flight that already refuses the run (one quick probe, so the
#: message can name every problem at once without waiting --server-wait for a run that will not start).
QUICK_PROBE_S = 2.0


class CommandError(Exception):
    """A problem with the arguments, found before any episode ran: one line, exit code 2."""


def _episodes(text: str) -> int | str:
    return "all" if text == "all" else positive_int(text)


def _policy_names(choices: list[str]):
    """An argparse type: built-in policy names, comma-separated, each once."""

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(n.strip() for n in text.split(",") if n.strip())
        unknown = [n for n in names if n not in choices]
        if not names or unknown or len(set(names)) != len(names):
            raise argparse.ArgumentTypeError(f"expected built-in policies, comma-separated, each once, from {choices}; "
                                             f"got {text!r}")
        return names

    parse.__name__ = "built-in policy names"
    return parse


# --------------------------------------------------------------------------------------------------
# Parser
# --------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The options of ``sopgym eval`` (docs/evaluation.md, "Command line" and "Benchmark a model")."""
    import sopgym.sopbench  # noqa: F401  (registers its groundtruth-replay baseline policy)
    from sopgym.envs.policies import POLICIES

    parser = argparse.ArgumentParser(
        prog="sopgym eval",
        description="Runs tasks 0..EPISODES-1 of the split of every env, each SAMPLES_PER_TASK times, with a scripted "
                    "policy, a model behind an OpenAI-compatible server (--policy openai) or a local Hugging Face model "
                    "(--policy hf), then computes the metrics (docs/evaluation.md) per env and for the suite.",
    )
    parser.add_argument("--env", required=True, nargs="+", action="extend", metavar="ID_OR_GLOB",
                        help="env ids or globs, e.g. sopgym/WarehouseReceiving-v0, 'sopgym/*', 'sopbench/*' (see `sopgym list`)")
    parser.add_argument("--policy", default="oracle", choices=sorted(POLICIES) + list(MODEL_POLICIES),
                        help="a built-in policy, or a model: openai (an OpenAI-compatible server) or hf (a local model)")
    parser.add_argument("--episodes", type=_episodes, default=50,
                        help="tasks per env (task indices 0..N-1), or 'all' for every task of the split")
    parser.add_argument("--samples-per-task", type=positive_int, default=1, help="episodes per task: the n of pass@k")
    parser.add_argument("--k", type=positive_int, default=1, help="k of pass@k and pass^k (<= samples per task)")
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--split", default="test", choices=("train", "val", "test"))
    parser.add_argument("--out", default=None,
                        help="write the results JSON here (its folder must exist; checked before the run), kept current "
                             "as episodes finish; a model run without it writes to sopgym-runs/<time>/")
    parser.add_argument("--trajectories", default=None,
                        help="write every step and episode here as each episode ends (JSONL; its folder is created; "
                             "must differ from --out; default with --out: OUT's name with .trajectories.jsonl)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --trajectories (or the one beside --out): finished episodes are kept, "
                             "the rest are run")
    parser.add_argument("--concurrency", type=positive_int, default=None,
                        help="episodes running at once (default: 1, or 16 per Ray worker for a built-in policy); for a "
                             "model: requests in flight, or the batch of a local model. The records do not depend on it "
                             "for built-in policies")
    parser.add_argument("--workers", type=non_negative_int, default=0, metavar="N",
                        help="run the envs on N Ray env workers, stepped in parallel (needs sopgym[ray]; 0: in this "
                             "process). The records are the same; see docs/scaling.md")
    parser.add_argument("--ray-address", default=None, metavar="ADDR",
                        help="with --workers: the Ray cluster (auto, host:6379, ray://host:10001); default: Ray on this machine")
    parser.add_argument("--reward", default=None, choices=("dense", "binary"), help="env reward (default: the env's)")
    parser.add_argument("--sandbox", default=None, choices=("inprocess", "docker"), help="stateful tool backend")
    parser.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="another gymnasium.make kwarg (repeatable); VALUE is read as JSON when it parses, "
                             "else as a string, e.g. --env-arg max_turns=4 --env-arg tools_runner=subprocess")
    parser.add_argument("--prompt-style", default=None, choices=("chat", "upstream"),
                        help="SOP-Bench envs only: upstream's prompt layout, for comparison with the paper")
    parser.add_argument("--n-bootstrap", type=non_negative_int, default=1000,
                        help="bootstrap resamples for the 95%% intervals (0: off)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--baselines", type=_policy_names(sorted(POLICIES)), default=(), metavar="NAME[,NAME...]",
                        help="also run these built-in policies on the same tasks and env kwargs, first (e.g. "
                             "oracle,majority); with --out (or a model run's folder) each writes OUT's name with "
                             ".NAME.json and its trajectory beside it")

    model = parser.add_argument_group("models (--policy openai or hf; a built-in policy ignores them, with a note)")
    model.add_argument("--model", default=None,
                       help="openai: the served model name; hf: a hub id, a local folder or a .gguf file")
    model.add_argument("--base-url", default=None, help="openai: the API root, e.g. http://127.0.0.1:8000/v1")
    model.add_argument("--api-key-env", default=None, metavar="VAR",
                       help="openai: environment variable holding the API key (default OPENAI_API_KEY; never a flag)")
    model.add_argument("--temperature", type=number_in(0.0, 2.0), default=None, help="sampling temperature (default 0)")
    model.add_argument("--top-p", type=number_in(0.0, 1.0), default=None, help="nucleus mass")
    model.add_argument("--max-tokens", type=positive_int, default=None,
                       help="tokens per reply (default 1024 openai, 512 hf); cut turns report finish_reason=length")
    model.add_argument("--stop", action="append", default=None, metavar="TEXT", help="openai: a stop string (repeatable)")
    model.add_argument("--model-seed", type=non_negative_int, default=None,
                       help="seed every request (derived per episode and turn, so samples of a task differ)")
    model.add_argument("--tool-choice", default=None, choices=("auto", "required", "none"),
                       help="openai: sent as tool_choice (not sent by default; some servers reject it)")
    model.add_argument("--chat-template-kwargs", type=json_object, default=None, metavar="JSON",
                       help='passed to the chat template, e.g. \'{"enable_thinking": false}\'')
    model.add_argument("--extra-body", type=json_object, default=None, metavar="JSON",
                       help='openai: more request fields, e.g. \'{"top_k": 20}\'')
    model.add_argument("--tools", default="auto", choices=("auto", "native", "prompt"),
                       help="native: tools in the request / chat template; prompt: written into the system message "
                            "(servers or templates without tool support); auto: native for openai, for hf native when "
                            "the chat template renders tools")
    model.add_argument("--history", default="auto", choices=("auto", "native", "text"),
                       help="how past turns are sent: native (tool_calls + tool messages) or text (<tool_call> and "
                            "<tool_response> blocks); auto: native with native tools on openai, text otherwise")
    model.add_argument("--request-timeout", type=number_in(0.001), default=None, metavar="S",
                       help="openai: the wall-clock deadline of each request attempt, whatever the server sends "
                            "(default 1200)")
    model.add_argument("--max-retries", type=non_negative_int, default=None,
                       help="openai: retries on timeouts, connection errors, 408/409/429 and 5xx (default 6)")
    model.add_argument("--server-wait", type=number_in(0.0), default=None, metavar="S",
                       help="openai: seconds to wait for the server to answer, at the start and after errors (default 600)")
    model.add_argument("--no-stream", action="store_true", help="openai: ask for whole answers instead of streams")
    model.add_argument("--max-reply-bytes", type=positive_int, default=None, metavar="N",
                       help="openai: reply text kept per answer, in UTF-8 bytes (default 1048576); a longer reply (a "
                            "server ignoring --max-tokens) is cut there, labelled truncated=max_reply_bytes")
    model.add_argument("--price-prompt", type=number_in(0.0), default=None, metavar="USD",
                       help="price per million prompt tokens (with --price-completion: cost in the results)")
    model.add_argument("--price-completion", type=number_in(0.0), default=None, metavar="USD",
                       help="price per million completion tokens")
    model.add_argument("--device", default=None, help="hf: auto, cpu, cuda, cuda:1, ... (default auto)")
    model.add_argument("--dtype", default=None, choices=("auto", "float32", "bfloat16", "float16"), help="hf: weights dtype")
    model.add_argument("--threads", type=positive_int, default=None, help="hf: torch threads")
    model.add_argument("--max-context", type=positive_int, default=None,
                       help="hf: prompt + reply tokens at most (default: the model's max_position_embeddings)")
    model.add_argument("--cache", default=None, metavar="DIR",
                       help="answer requests from the response cache in DIR (DIR/responses.sqlite3, created) and store "
                            "new whole answers there: a re-run with the same settings asks the model nothing; the key "
                            "is the exact request (model, messages, tools, sampling, seed)")
    model.add_argument("--cache-expiry", type=duration, default=None, metavar="DURATION",
                       help="with --cache: entries older than this miss (3600, 90s, 30m, 12h, 7d, 2w or never; "
                            "default 7d)")
    return parser


def main(argv: list[str]) -> int:
    return cmd_eval(build_parser().parse_args(argv))


def cmd_eval(args: argparse.Namespace) -> int:
    """``sopgym eval`` on parsed arguments; returns the exit code."""
    try:
        plan = plan_from_arguments(args)
        ready = _preflight(args, plan)
    except CommandError as exc:
        return _error(str(exc))
    if ready is None:
        return 1
    agent, model_identity = ready
    _run_folder(args)
    for name in args.baselines:
        code = _run_baseline(args, plan, name)
        if code:
            if getattr(agent, "model", None) is not None:
                agent.model.close()
            return code
    return run(args, plan, agent, model_identity)


def baseline_paths(args: argparse.Namespace, name: str) -> tuple[str | None, str | None]:
    """The results and trajectory files of baseline ``name`` of a run: beside the run's results
    (``r.json`` -> ``r.oracle.json``, ``r.oracle.trajectories.jsonl``); none without them."""
    from sopgym.bench.eval_command import trajectories_beside

    if not args.out:
        return None, None
    stem = args.out[: -len(".json")] if args.out.endswith(".json") else args.out
    out = f"{stem}.{name}.json"
    return out, trajectories_beside(out)


def _run_baseline(args: argparse.Namespace, plan: EvalPlan, name: str) -> int:
    """Run built-in policy ``name`` on the run's plan, into its own files (:func:`baseline_paths`)."""
    from sopgym.episodes.runner import builtin_policy_agent

    out, trajectories = baseline_paths(args, name)
    baseline = argparse.Namespace(**{**vars(args), "policy": name, "out": out, "trajectories": trajectories,
                                     "baselines": ()})
    if not args.quiet:
        print(f"sopgym eval: baseline {name}{f' -> {out}' if out else ''}", file=sys.stderr)
    return run(baseline, plan, builtin_policy_agent(name), None)


def _error(message: str) -> int:
    print(f"sopgym eval: {message}", file=sys.stderr)
    return 2


# --------------------------------------------------------------------------------------------------
# Plan from arguments
# --------------------------------------------------------------------------------------------------
@dataclass
class EvalPlan:
    """What a run will do, read from its arguments and its envs before anything runs.

    Attributes:
        suite: the episodes (:class:`~sopgym.bench.suite.SuitePlan`).
        make_env: the picklable env factory (:class:`~sopgym.episodes.factory.EnvFactory`: the run's env
            kwargs, the SOP-Bench-only ones for ``sopbench/*`` envs, and the split).
        env_kwargs: the kwargs every env is made with; ``sopbench_kwargs`` those of SOP-Bench envs only.
        identity: the run's settings a resumed file must share (the model's are added by the agent).
        needs: per env, the backends its episodes need (checked by the pre-flight).
        warnings: pre-flight warnings found while the envs were looked at (turn limits the oracle cannot meet).
    """

    suite: Any
    make_env: Any
    env_kwargs: dict[str, Any]
    sopbench_kwargs: dict[str, Any]
    needs: dict[str, list[Any]] = field(default_factory=dict)
    warnings: list[Any] = field(default_factory=list)

    def identity(self, policy: str, model_identity: dict[str, Any] | None) -> dict[str, Any]:
        return {"policy": policy, "model": model_identity, "plan": self.suite.to_json(), "env_kwargs": self.env_kwargs,
                "sopbench_env_kwargs": self.sopbench_kwargs}


def _is_sopbench(env_id: str) -> bool:
    return env_id.split(":")[-1].startswith("sopbench/")


def _check_counts_and_paths(args: argparse.Namespace) -> None:
    """The options that do not depend on the envs (raises CommandError). Sets the defaults that depend
    on other options: --concurrency, and --trajectories beside --out."""
    from sopgym.bench.eval_command import check_output_paths, trajectories_beside

    if args.ray_address is not None and not args.workers:
        raise CommandError(f"--ray-address {args.ray_address!r} needs --workers N (N >= 1)")
    if args.concurrency is None:
        args.concurrency = 16 * args.workers if args.workers and args.policy not in MODEL_POLICIES else 1
    if args.k > args.samples_per_task:
        raise CommandError(f"--k ({args.k}) must be <= --samples-per-task ({args.samples_per_task}): pass@k needs "
                           "n >= k samples per task")
    if args.resume and not args.trajectories and not args.out:
        raise CommandError("--resume continues the run in --trajectories PATH (or the one beside --out PATH); give one of them")
    if args.out and not args.trajectories:
        args.trajectories = trajectories_beside(args.out)  # finished work is kept whether or not it was asked for
    problem = _check_model_options(args)
    if problem:
        raise CommandError(problem)
    problem = check_output_paths(args.out, args.trajectories)
    if problem:
        raise CommandError(problem)
    if args.policy in args.baselines:
        raise CommandError(f"--baselines {','.join(args.baselines)} holds --policy {args.policy}: it would run twice")
    for name in args.baselines:
        problem = check_output_paths(*baseline_paths(args, name))
        if problem:
            raise CommandError(f"baseline {name}: {problem}")


def _check_model_options(args: argparse.Namespace) -> str | None:
    """Why the model options do not fit the policy (None when they do). A built-in policy ignores them,
    with a note, so a baseline runs with the model run's command line and only --policy changed."""
    given = [name for name in _MODEL_OPTIONS
             if getattr(args, name) not in (None, False) and not (name in ("tools", "history") and getattr(args, name) == "auto")]
    if args.policy not in MODEL_POLICIES:
        if given:
            print(f"sopgym eval: note: --policy {args.policy} is a built-in policy: ignoring the model options "
                  f"{', '.join('--' + n.replace('_', '-') for n in given)}", file=sys.stderr)
        return None
    for name in given:
        policies = _MODEL_OPTIONS[name]
        if args.policy not in policies:
            return f"--{name.replace('_', '-')} is an option of --policy {' or '.join(policies)}, not of {args.policy!r}"
    if args.policy == "openai" and (not args.base_url or not args.model):
        return "--policy openai needs --base-url (e.g. http://127.0.0.1:8000/v1) and --model (the served model name)"
    if args.policy == "hf" and not args.model:
        return "--policy hf needs --model (a hub id, a local folder or a .gguf file)"
    if args.cache_expiry is not None and not args.cache:
        return "--cache-expiry applies to the response cache: give --cache DIR too"
    if (args.price_prompt is None) != (args.price_completion is None):
        return "give both --price-prompt and --price-completion (USD per million tokens), or neither"
    return None


def _env_settings(args: argparse.Namespace) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """The env ids (globs expanded), the kwargs of every env and those of SOP-Bench envs only."""
    from sopgym.bench.suite import expand_env_patterns

    try:
        env_ids = expand_env_patterns(args.env)
        env_kwargs = parse_env_args(args.env_arg)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    env_kwargs.update({key: value for key in ("reward", "sandbox") if (value := getattr(args, key)) is not None})
    if env_kwargs.get("code_runner") == "inprocess":
        print("sopgym eval: note: code_runner=inprocess runs the agent's code on this host as your user (it can "
              "import sopgym and read the answers): trusted code only", file=sys.stderr)
    sopbench_kwargs = {"prompt_style": args.prompt_style} if args.prompt_style else {}
    if sopbench_kwargs and not any(_is_sopbench(e) for e in env_ids):
        raise CommandError("--prompt-style applies to SOP-Bench envs (sopbench/*), and this run has none")
    return env_ids, env_kwargs, sopbench_kwargs


def _num_tasks(args: argparse.Namespace, env_id: str, size: int | None) -> int:
    """Tasks to run of ``env_id``, whose split has ``size`` tasks (None: unlimited or unknown)."""
    if args.episodes == "all":
        if size is None:
            raise CommandError(f"--episodes all: split {args.split!r} of {env_id} is unlimited or unknown; give a number")
        count = size
    elif size is not None and args.episodes > size:
        raise CommandError(f"split {args.split!r} of {env_id} has {size} tasks; got episodes={args.episodes}")
    else:
        count = args.episodes
    if count < 1:
        raise CommandError(f"split {args.split!r} of {env_id} has no tasks")
    return count


def plan_from_arguments(args: argparse.Namespace) -> EvalPlan:
    """The run the arguments ask for, with every env made once (kwargs checked, split sized, backends
    listed, turn limits measured against the oracle's).

    Raises:
        CommandError: an argument that does not fit (one line).
    """
    import gymnasium as gym

    import sopgym  # noqa: F401 - registers the envs
    from sopgym.bench.preflight import backend_needs, oracle_turn_findings
    from sopgym.bench.suite import SuitePlan
    from sopgym.episodes.factory import EnvFactory

    _check_counts_and_paths(args)
    env_ids, env_kwargs, sopbench_kwargs = _env_settings(args)
    make_env = EnvFactory(env_kwargs, namespace_kwargs={"sopbench": sopbench_kwargs}, split=args.split)
    plan = EvalPlan(None, make_env, env_kwargs, sopbench_kwargs)
    num_tasks: dict[str, int] = {}
    for env_id in env_ids:
        try:
            env = plan.make_env(env_id)
        except (ValueError, TypeError, gym.error.Error) as exc:
            raise CommandError(f"{env_id}: {exc}") from None
        try:
            pack = getattr(env.unwrapped, "pack", None)  # an env served elsewhere has none: its size is unknown
            num_tasks[env_id] = _num_tasks(args, env_id, pack.num_tasks(args.split) if pack is not None else None)
            plan.needs[env_id] = backend_needs(env)
            plan.warnings += oracle_turn_findings(env_id, env, args.split, num_tasks[env_id])
        finally:
            env.close()
    plan.suite = SuitePlan(tuple(env_ids), args.split, num_tasks, args.samples_per_task, args.seed)
    return plan


# --------------------------------------------------------------------------------------------------
# Pre-flight
# --------------------------------------------------------------------------------------------------
def _preflight(args: argparse.Namespace, plan: EvalPlan) -> tuple[Any, dict[str, Any] | None] | None:
    """Check the envs' backends and the model server before any episode, print every finding, and
    return the agent and its model identity (None: refused; nothing was written). The agent is built
    after the backends pass, except for a model server, which is probed anyway (quickly) so that one
    message names every problem. With --ray-address the backends are checked here but only warned about.

    Raises:
        CommandError: the agent's settings (one line).
    """
    from sopgym.bench.preflight import (
        backend_findings,
        checked_here,
        endpoint_findings,
        env_arg_flags,
        format_findings,
    )

    findings = backend_findings(plan.needs, env_arg_flags)
    if args.ray_address is not None:  # the envs run on the cluster's hosts, not necessarily this one's backends
        findings = checked_here(findings, f"the Ray cluster at {args.ray_address}")
    findings += plan.warnings
    refused = any(f.refuse for f in findings)
    agent = model_identity = None
    if not refused or args.policy == "openai":  # a local model is not loaded for a run that will not start
        agent, model_identity = agent_from_arguments(args)
    model = getattr(agent, "model", None)
    # A model behind --cache has no wait: a re-run answered from the cache needs no server at all.
    if model is not None and hasattr(model, "wait_until_ready"):
        if not args.quiet and not refused:
            print(f"sopgym eval: waiting for {args.base_url} ...", file=sys.stderr)
        findings += endpoint_findings(model, args.base_url, args.model, QUICK_PROBE_S if refused else model.config.server_wait_s)
    if findings:
        print(format_findings(findings, "sopgym eval"), file=sys.stderr)
    if any(f.refuse for f in findings):
        if model is not None:
            model.close()
        return None
    return agent, model_identity


# --------------------------------------------------------------------------------------------------
# Agent from arguments
# --------------------------------------------------------------------------------------------------
def agent_from_arguments(args: argparse.Namespace) -> tuple[Any, dict[str, Any] | None]:
    """The agent of ``--policy`` and the model settings that make a run's identity (None for a
    built-in policy).

    Raises:
        CommandError: bad model settings, or the model's packages are missing (one line).
    """
    from sopgym.episodes.runner import builtin_policy_agent

    if args.policy not in MODEL_POLICIES:
        return builtin_policy_agent(args.policy), None
    try:
        return build_model_agent(args)
    except (ValueError, OSError) as exc:
        raise CommandError(str(exc)) from None
    except ImportError as exc:
        extra = "models" if args.policy == "openai" else "hf"
        raise CommandError(f"--policy {args.policy} needs packages that are missing ({exc}): pip install 'sopgym[{extra}]'") from None


def open_cache(args: argparse.Namespace) -> Any:
    """The :class:`~sopgym.agents.response_cache.ResponseCache` of ``--cache DIR`` (None without it).

    Raises:
        ValueError: the cache file is not a usable cache (:class:`~sopgym.agents.response_cache.CacheError`,
            naming the file).
    """
    if not getattr(args, "cache", None):
        return None
    from sopgym.agents.response_cache import DEFAULT_EXPIRY_S, ResponseCache

    expiry = getattr(args, "cache_expiry", None)
    expiry = DEFAULT_EXPIRY_S if expiry is None else None if expiry == "never" else expiry
    return ResponseCache(args.cache, expiry)


def build_model_agent(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The :class:`~sopgym.agents.chat.ChatAgent` of ``--policy openai|hf`` and the model settings that
    make a run's identity (what a resumed run must share).

    Raises:
        ValueError: bad settings (named).
        ImportError: the model's packages are missing.
    """
    from sopgym.agents.chat import ChatAgent, Prices

    prices = Prices(args.price_prompt, args.price_completion) if args.price_prompt is not None else None
    history = None if args.history == "auto" else args.history
    cache = open_cache(args)  # before the model loads: a damaged cache file is refused at once
    if args.policy == "openai":
        model, tools_mode, identity = _openai_model(args)
    else:
        model, tools_mode, identity = _hf_model(args)
        history = history or "text"  # a local model reads back exactly the text it wrote
    if cache is not None:
        from sopgym.agents.response_cache import CachedChatModel

        model = CachedChatModel(model, cache)
    agent = ChatAgent(model, tools_mode=tools_mode, history=history, seed=args.model_seed, prices=prices)
    identity.update({"tools_mode": agent.tools_mode, "history": agent.history, "model_seed": args.model_seed})
    return agent, identity


def _given(settings: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in settings.items() if value is not None}


def _openai_model(args: argparse.Namespace) -> tuple[Any, str, dict[str, Any]]:
    from sopgym.agents.openai_chat import OpenAIChatConfig, OpenAIChatModel

    settings = _given({
        "api_key_env": args.api_key_env, "temperature": args.temperature, "top_p": args.top_p,
        "max_tokens": args.max_tokens, "stop": tuple(args.stop) if args.stop else None, "tool_choice": args.tool_choice,
        "chat_template_kwargs": args.chat_template_kwargs, "extra_body": args.extra_body,
        "request_timeout_s": args.request_timeout, "max_retries": args.max_retries, "server_wait_s": args.server_wait,
        "max_reply_bytes": args.max_reply_bytes,
    })
    config = OpenAIChatConfig(args.base_url, args.model, max_concurrency=args.concurrency, stream=not args.no_stream,
                              **settings)
    model = OpenAIChatModel(config)
    public = config.public()
    identity = {key: public[key] for key in ("base_url", "model", "temperature", "top_p", "max_tokens", "stop",
                                             "tool_choice", "chat_template_kwargs", "extra_body")}
    return model, "native" if args.tools == "auto" else args.tools, identity


def _hf_model(args: argparse.Namespace) -> tuple[Any, str, dict[str, Any]]:
    from sopgym.agents.hf_local import HFChatConfig, HFChatModel

    settings = _given({
        "device": args.device, "dtype": args.dtype, "temperature": args.temperature, "top_p": args.top_p,
        "max_tokens": args.max_tokens, "max_context": args.max_context,
        "chat_template_kwargs": args.chat_template_kwargs, "threads": args.threads,
    })
    config = HFChatConfig(args.model, **settings)
    if not args.quiet:
        print(f"sopgym eval: loading {args.model} ...", file=sys.stderr)
    model = HFChatModel(config)
    if args.tools == "auto":
        tools_mode = "native" if model.template_renders_tools else "prompt"
    elif args.tools == "native" and not model.template_renders_tools:
        raise ValueError(f"the chat template of {args.model} ignores tools=: use --tools prompt (or auto)")
    else:
        tools_mode = args.tools
    identity = {key: value for key, value in model.describe()["settings"].items() if key not in ("device", "threads")}
    return model, tools_mode, identity


# --------------------------------------------------------------------------------------------------
# Run
# --------------------------------------------------------------------------------------------------
class _Recorder:
    """The run's finished episodes, and its results file kept current as they finish."""

    def __init__(self, args: argparse.Namespace, plan: EvalPlan, agent: Any, identity: dict[str, Any]):
        from sopgym.bench.suite import software_info

        self.args, self.plan, self.agent, self.identity = args, plan, agent, identity
        self.started = time.time()
        self.resumed = 0
        self.software = software_info()
        self.finished: dict[int, Any] = {}
        self.last_write = float("-inf")

    def on_resume(self, count: int, pending: int) -> None:
        self.resumed = count
        print(f"sopgym eval: resuming {self.args.trajectories}: {count} episodes finished, {pending} to run", file=sys.stderr)

    def on_outcome(self, outcome: Any) -> None:
        self.finished[outcome.index] = outcome
        if time.monotonic() - self.last_write >= RESULTS_EVERY_S:
            problem = self.save("running")
            if problem:
                print(f"sopgym eval: {problem}", file=sys.stderr)

    def _config(self) -> dict[str, Any]:
        args = self.args
        return {
            "identity": self.identity,
            "agent": self.agent.describe() if hasattr(self.agent, "describe") else {"policy": args.policy},
            "k": args.k, "n_bootstrap": args.n_bootstrap, "concurrency": args.concurrency,
            "resumed_episodes": self.resumed, "software": self.software,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "arguments": _arguments(args),
        }

    def results(self, status: str) -> dict[str, Any]:
        """The results of the episodes finished so far (a running run's without intervals, and with
        the largest k its tasks' samples allow)."""
        from sopgym.bench.suite import suite_results

        outcomes = [self.finished[i] for i in sorted(self.finished)]
        k, n_bootstrap = self.args.k, self.args.n_bootstrap
        if status != "finished":
            samples: dict[tuple[str, str], int] = {}
            for o in outcomes:
                key = (o.env_id, str(o.record.get("task_id")))
                samples[key] = samples.get(key, 0) + 1
            k, n_bootstrap = min(k, min(samples.values())), 0
        results = suite_results(self._config(), outcomes, k=k, n_bootstrap=n_bootstrap, seed=self.args.seed)
        results["run"] = {"status": status, "episodes_finished": len(outcomes),
                          "episodes_planned": len(self.plan.suite.specs()), "trajectories": self.args.trajectories}
        return results

    def save(self, status: str) -> str | None:
        """Write the results so far (when there is a file and an episode); why not, if that failed."""
        from sopgym.bench import suite

        if not self.args.out or not self.finished:
            return None
        try:
            suite.write_results(self.args.out, self.results(status))
        except OSError as exc:
            return f"could not write the results to {self.args.out}: {exc}"
        self.last_write = time.monotonic()
        return None

    def kept(self) -> str:
        files = " and ".join(f for f in (self.args.out, self.args.trajectories) if f)
        return f"; finished episodes are in {files} (continue with --resume)" if files and self.finished else ""


def _run_folder(args: argparse.Namespace) -> None:
    """A model run is never lost for want of --out: without it, it writes to sopgym-runs/<time>-<pid>/."""
    if args.out is None and args.policy in MODEL_POLICIES:
        folder = os.path.join(RUNS_FOLDER, time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}")
        os.makedirs(folder, exist_ok=True)
        args.out, args.trajectories = os.path.join(folder, "results.json"), os.path.join(folder, "trajectories.jsonl")
        print(f"sopgym eval: writing the results and trajectories of this run to {folder}/ (--out to choose)",
              file=sys.stderr)


def run(args: argparse.Namespace, plan: EvalPlan, agent: Any, model_identity: dict[str, Any] | None = None) -> int:
    """Run the plan's episodes not finished yet (all of them, or those a resumed file lacks), keeping the
    results file current, then :func:`write_results`. Returns the exit code."""
    import gymnasium as gym

    from sopgym.agents.chat import ServerRefused
    from sopgym.bench import suite

    identity = plan.identity(args.policy, model_identity)
    _run_folder(args)
    recorder = _Recorder(args, plan, agent, identity)
    model = getattr(agent, "model", None)
    try:
        pool = None
        if args.workers:
            from sopgym.episodes.runner import make_env_pool

            pool = make_env_pool(plan.make_env, "ray", num_workers=args.workers, address=args.ray_address)
        outcomes = suite.run_suite(plan.suite, agent, plan.make_env, identity=identity, trajectories=args.trajectories,
                                   resume=args.resume, concurrency=args.concurrency, progress=not args.quiet,
                                   on_resume=recorder.on_resume, pool=pool, on_outcome=recorder.on_outcome)
    except ServerRefused as exc:
        recorder.save("stopped")
        print(f"sopgym eval: stopped: {exc}{recorder.kept()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        recorder.save("interrupted")
        print(f"sopgym eval: interrupted{recorder.kept()}", file=sys.stderr)
        return 130
    except (ValueError, TypeError, gym.error.Error, ImportError) as exc:  # another run's file, env kwargs, no ray
        recorder.save("stopped")
        return _error(f"{exc}{recorder.kept()}")
    finally:
        if model is not None:
            model.close()
    assert len(recorder.finished) == len(outcomes), "run_suite reports every episode through on_outcome"
    try:
        results = recorder.results("finished")
    except ValueError as exc:
        return _error(str(exc))
    return write_results(args, results)


# --------------------------------------------------------------------------------------------------
# Write results
# --------------------------------------------------------------------------------------------------
def write_results(args: argparse.Namespace, results: dict[str, Any]) -> int:
    """Print each env's table (and the suite's), write the results file; returns the exit code."""
    from sopgym.bench import suite
    from sopgym.bench.eval_command import format_results, format_suite

    for env_id, metrics in results["envs"].items():
        print(format_results(metrics, env_id, args.policy, args.split))
        print()
    if len(results["envs"]) > 1:
        print(format_suite(results))
    if args.trajectories:
        print(f"trajectories: {args.trajectories}")
    if args.out:
        try:
            suite.write_results(args.out, results)
        except OSError as exc:
            print(f"sopgym eval: could not write the results to {args.out}: {exc}", file=sys.stderr)
            return 1
        print(f"results: {args.out}")
    return 0


def _arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The command's arguments as given (no option carries a secret: keys come from the environment;
    credentials in --base-url are dropped)."""
    out = {key: value for key, value in vars(args).items() if key not in ("func", "command")}
    if out.get("base_url"):
        import urllib.parse

        parsed = urllib.parse.urlparse(out["base_url"])
        if parsed.username or parsed.password:
            netloc = (parsed.hostname or "") + (f":{parsed.port}" if parsed.port else "")
            out["base_url"] = urllib.parse.urlunparse(parsed._replace(netloc=netloc))
    return out
