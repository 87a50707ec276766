"""``sopgym eval``: run a policy (scripted, a model behind an OpenAI-compatible server, or a local
Hugging Face model) on one env or a suite, and write the evaluator's metrics.

Every run goes through :mod:`.suite`: tasks ``0..N-1`` of the split per env, each
``--samples-per-task`` times (the same tasks for every kind of policy), one trajectory file
(resumable with ``--resume``) and one results file holding per-env metrics, the suite's means with
95% intervals and the exact configuration. See docs/evaluation.md ("Benchmark a model").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from sopgym.cli.arguments import duration, json_object, non_negative_int, number_in, parse_env_args, positive_int
from sopgym.cli.tables import table as _table

__all__ = ["add_eval_parser", "cmd_eval", "format_results", "format_suite", "parse_env_args", "check_output_paths",
           "trajectories_beside", "MODEL_POLICIES", "RUNS_FOLDER"]

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


# --------------------------------------------------------------------------------------------------
# Parser
# --------------------------------------------------------------------------------------------------
_positive_int = positive_int
_non_negative_int = non_negative_int
_float = number_in
_json_object = json_object


def _episodes(text: str) -> int | str:
    return "all" if text == "all" else _positive_int(text)


def add_eval_parser(subparsers) -> argparse.ArgumentParser:
    import sopgym.sopbench  # noqa: F401  (registers its groundtruth-replay baseline policy)
    from sopgym.envs.policies import POLICIES

    parser = subparsers.add_parser(
        "eval", help="run a policy or a model on envs and report the evaluator's metrics",
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
    parser.add_argument("--samples-per-task", type=_positive_int, default=1, help="episodes per task: the n of pass@k")
    parser.add_argument("--k", type=_positive_int, default=1, help="k of pass@k and pass^k (<= samples per task)")
    parser.add_argument("--seed", type=_non_negative_int, default=0)
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
    parser.add_argument("--concurrency", type=_positive_int, default=None,
                        help="episodes running at once (default: 1, or 16 per Ray worker for a built-in policy); for a "
                             "model: requests in flight, or the batch of a local model. The records do not depend on it "
                             "for built-in policies")
    parser.add_argument("--workers", type=_non_negative_int, default=0, metavar="N",
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
    parser.add_argument("--n-bootstrap", type=_non_negative_int, default=1000,
                        help="bootstrap resamples for the 95%% intervals (0: off)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")

    model = parser.add_argument_group("models (--policy openai or hf)")
    model.add_argument("--model", default=None,
                       help="openai: the served model name; hf: a hub id, a local folder or a .gguf file")
    model.add_argument("--base-url", default=None, help="openai: the API root, e.g. http://127.0.0.1:8000/v1")
    model.add_argument("--api-key-env", default=None, metavar="VAR",
                       help="openai: environment variable holding the API key (default OPENAI_API_KEY; never a flag)")
    model.add_argument("--temperature", type=_float(0.0, 2.0), default=None, help="sampling temperature (default 0)")
    model.add_argument("--top-p", type=_float(0.0, 1.0), default=None, help="nucleus mass")
    model.add_argument("--max-tokens", type=_positive_int, default=None,
                       help="tokens per reply (default 1024 openai, 512 hf); cut turns report finish_reason=length")
    model.add_argument("--stop", action="append", default=None, metavar="TEXT", help="openai: a stop string (repeatable)")
    model.add_argument("--model-seed", type=_non_negative_int, default=None,
                       help="seed every request (derived per episode and turn, so samples of a task differ)")
    model.add_argument("--tool-choice", default=None, choices=("auto", "required", "none"),
                       help="openai: sent as tool_choice (not sent by default; some servers reject it)")
    model.add_argument("--chat-template-kwargs", type=_json_object, default=None, metavar="JSON",
                       help='passed to the chat template, e.g. \'{"enable_thinking": false}\'')
    model.add_argument("--extra-body", type=_json_object, default=None, metavar="JSON",
                       help='openai: more request fields, e.g. \'{"top_k": 20}\'')
    model.add_argument("--tools", default="auto", choices=("auto", "native", "prompt"),
                       help="native: tools in the request / chat template; prompt: written into the system message "
                            "(servers or templates without tool support); auto: native for openai, for hf native when "
                            "the chat template renders tools")
    model.add_argument("--history", default="auto", choices=("auto", "native", "text"),
                       help="how past turns are sent: native (tool_calls + tool messages) or text (<tool_call> and "
                            "<tool_response> blocks); auto: native with native tools on openai, text otherwise")
    model.add_argument("--request-timeout", type=_float(0.001), default=None, metavar="S",
                       help="openai: the wall-clock deadline of each request attempt, whatever the server sends "
                            "(default 1200)")
    model.add_argument("--max-retries", type=_non_negative_int, default=None,
                       help="openai: retries on timeouts, connection errors, 408/409/429 and 5xx (default 6)")
    model.add_argument("--server-wait", type=_float(0.0), default=None, metavar="S",
                       help="openai: seconds to wait for the server to answer, at the start and after errors (default 600)")
    model.add_argument("--no-stream", action="store_true", help="openai: ask for whole answers instead of streams")
    model.add_argument("--max-reply-bytes", type=_positive_int, default=None, metavar="N",
                       help="openai: reply text kept per answer, in UTF-8 bytes (default 1048576); a longer reply (a "
                            "server ignoring --max-tokens) is cut there, labelled truncated=max_reply_bytes")
    model.add_argument("--price-prompt", type=_float(0.0), default=None, metavar="USD",
                       help="price per million prompt tokens (with --price-completion: cost in the results)")
    model.add_argument("--price-completion", type=_float(0.0), default=None, metavar="USD",
                       help="price per million completion tokens")
    model.add_argument("--device", default=None, help="hf: auto, cpu, cuda, cuda:1, ... (default auto)")
    model.add_argument("--dtype", default=None, choices=("auto", "float32", "bfloat16", "float16"), help="hf: weights dtype")
    model.add_argument("--threads", type=_positive_int, default=None, help="hf: torch threads")
    model.add_argument("--max-context", type=_positive_int, default=None,
                       help="hf: prompt + reply tokens at most (default: the model's max_position_embeddings)")
    model.add_argument("--cache", default=None, metavar="DIR",
                       help="answer requests from the response cache in DIR (DIR/responses.sqlite3, created) and store "
                            "new whole answers there: a re-run with the same settings asks the model nothing; the key "
                            "is the exact request (model, messages, tools, sampling, seed)")
    model.add_argument("--cache-expiry", type=duration, default=None, metavar="DURATION",
                       help="with --cache: entries older than this miss (3600, 90s, 30m, 12h, 7d, 2w or never; "
                            "default 7d)")
    parser.set_defaults(func=cmd_eval)
    return parser


# --------------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------------
def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def format_results(results: dict[str, Any], env_id: str | None = None, policy: str | None = None,
                   split: str | None = None) -> str:
    """One env's metrics as the table ``sopgym eval`` prints."""
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
    compat = results.get("sopbench_compat")
    if compat:
        interval = compat.get("ci95")
        rows.append([f"task success ({compat['rule']})", _fmt(compat["task_success_rate"]),
                     f"[{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""])
    usage = results.get("usage")
    if usage:
        latency = usage["latency_s_per_turn"]
        rows += [
            ["prompt tokens / episode", _fmt(usage["prompt_tokens_per_episode"]), ""],
            ["completion tokens / episode", _fmt(usage["completion_tokens_per_episode"]), ""],
            ["latency / turn (s)", _fmt(latency["mean"]), f"p50 {_fmt(latency['p50'])}  p95 {_fmt(latency['p95'])}"],
            ["turns cut by max_tokens", _fmt(usage["max_tokens_cut_rate"]), f"{usage['max_tokens_cuts']} of {usage['turns']}"],
            ["failed requests (infrastructure)", str(usage["failed_requests"]["inference"]), ""],
        ]
        if usage.get("reply_byte_cuts"):
            rows.append(["turns cut by --max-reply-bytes", str(usage["reply_byte_cuts"]), f"of {usage['turns']}"])
        if usage.get("cached_turns"):
            rows.append(["turns answered from --cache", str(usage["cached_turns"]), f"of {usage['turns']} (no request sent)"])
        if usage.get("usage_dropped_turns"):
            rows.append(["turns with token counts dropped", str(usage["usage_dropped_turns"]), "(not sane integers)"])
        if "cost_usd" in usage:
            rows.append(["cost (USD)", _fmt(usage["cost_usd"]), ""])
    samples = (f"{results['min_samples_per_task']}" if results["min_samples_per_task"] == results["max_samples_per_task"]
               else f"{results['min_samples_per_task']}-{results['max_samples_per_task']}")
    head = (f"{env_id or results.get('env_id', '?')} | policy {policy or results.get('policy', '?')} | "
            f"split {split or results.get('split', '?')} | {results['num_tasks']} tasks x {samples} samples = "
            f"{results['episodes']} episodes")
    return head + "\n" + _table(["metric", "value", "95% CI"], rows)


def format_suite(results: dict[str, Any]) -> str:
    """The suite's summary: one line per env and the mean with its interval; the share of episodes
    that failed for the infrastructure, and "not measured" for a line all of whose episodes did."""
    from .metrics import NOT_MEASURED, measured

    def line(label: str, m: dict[str, Any], compat: Any) -> list[str]:
        ci = m.get("ci95", {}).get("task_success_rate")
        if not measured(m):
            return [label, NOT_MEASURED, "", "", "", _fmt(m["mean_turns"]), _fmt(m["infrastructure_failure_rate"]), ""]
        return [label, _fmt(m["task_success_rate"]), f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "", _fmt(m["field_accuracy"]),
                _fmt(m["invalid_action_rate"]), _fmt(m["mean_turns"]), _fmt(m["infrastructure_failure_rate"]),
                _fmt(compat) if compat is not None else ""]

    rows = [line(env_id, m, m.get("sopbench_compat", {}).get("task_success_rate")) for env_id, m in results["envs"].items()]
    suite = results["suite"]
    rows.append(line(f"suite mean ({suite['envs']} envs)", suite, suite.get("sopbench_compat_task_success_rate")))
    return _table(["env", "success", "95% CI", "field acc.", "invalid", "turns", "infra.", "compat"], rows)


def _is_trajectory_file(path: str) -> bool:
    """True when ``path`` is an existing file whose first line is a trajectory line (run/reset/step/episode)."""
    if not os.path.isfile(path):
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.readline(1 << 20)
        line = json.loads(first)
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(line, dict) and (line.get("type") == "run" or (
        line.get("type") in ("reset", "step", "episode") and "episode_index" in line))


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


def trajectories_beside(out: str) -> str:
    """The trajectory file of a run whose results go to ``out`` (when ``--trajectories`` is not given):
    ``results.json`` -> ``results.trajectories.jsonl``."""
    stem = out[: -len(".json")] if out.endswith(".json") else out
    return stem + ".trajectories.jsonl"


# --------------------------------------------------------------------------------------------------
# Building the agent
# --------------------------------------------------------------------------------------------------
def _check_model_options(args: argparse.Namespace) -> str | None:
    """Why the model options do not fit the policy (None when they do)."""
    for name, policies in _MODEL_OPTIONS.items():
        value = getattr(args, name)
        if value in (None, False) or (name in ("tools", "history") and value == "auto"):
            continue
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
        from sopgym.agents.openai_chat import OpenAIChatConfig, OpenAIChatModel

        settings = {key: value for key, value in {
            "api_key_env": args.api_key_env, "temperature": args.temperature, "top_p": args.top_p,
            "max_tokens": args.max_tokens, "stop": tuple(args.stop) if args.stop else None, "tool_choice": args.tool_choice,
            "chat_template_kwargs": args.chat_template_kwargs, "extra_body": args.extra_body,
            "request_timeout_s": args.request_timeout, "max_retries": args.max_retries, "server_wait_s": args.server_wait,
            "max_reply_bytes": args.max_reply_bytes,
        }.items() if value is not None}
        config = OpenAIChatConfig(args.base_url, args.model, max_concurrency=args.concurrency, stream=not args.no_stream,
                                  **settings)
        model = OpenAIChatModel(config)
        tools_mode = "native" if args.tools == "auto" else args.tools
        public = config.public()
        identity = {key: public[key] for key in ("base_url", "model", "temperature", "top_p", "max_tokens", "stop",
                                                 "tool_choice", "chat_template_kwargs", "extra_body")}
    else:
        from sopgym.agents.hf_local import HFChatConfig, HFChatModel

        settings = {key: value for key, value in {
            "device": args.device, "dtype": args.dtype, "temperature": args.temperature, "top_p": args.top_p,
            "max_tokens": args.max_tokens, "max_context": args.max_context,
            "chat_template_kwargs": args.chat_template_kwargs, "threads": args.threads,
        }.items() if value is not None}
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
        history = history or "text"  # a local model reads back exactly the text it wrote
        identity = {key: value for key, value in model.describe()["settings"].items() if key not in ("device", "threads")}
    if cache is not None:
        from sopgym.agents.response_cache import CachedChatModel

        model = CachedChatModel(model, cache)
    agent = ChatAgent(model, tools_mode=tools_mode, history=history, seed=args.model_seed, prices=prices)
    identity.update({"tools_mode": agent.tools_mode, "history": agent.history, "model_seed": args.model_seed})
    return agent, identity


# --------------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------------
class SuiteEnvMaker:
    """``env_id -> gymnasium.make(env_id, ...)`` with the run's env kwargs, plus the SOP-Bench-only ones
    for ``sopbench/*`` envs. Picklable: it travels to Ray env workers."""

    def __init__(self, env_kwargs: dict[str, Any], sopbench_kwargs: dict[str, Any], split: str):
        self.env_kwargs, self.sopbench_kwargs, self.split = dict(env_kwargs), dict(sopbench_kwargs), split

    def __call__(self, env_id: str) -> Any:
        import gymnasium as gym

        import sopgym  # noqa: F401  (registers the envs, in a worker too)

        extra = self.sopbench_kwargs if env_id.split(":")[-1].startswith("sopbench/") else {}
        return gym.make(env_id, **{**self.env_kwargs, **extra, "split": self.split})


def _error(message: str) -> int:
    print(f"sopgym eval: {message}", file=sys.stderr)
    return 2


def cmd_eval(args: argparse.Namespace) -> int:
    import gymnasium as gym

    import sopgym  # noqa: F401 - registers the envs
    from sopgym.agents.chat import ServerRefused

    from .runner import builtin_policy_agent
    from .suite import SuitePlan, expand_env_patterns, run_suite, software_info, suite_results, write_results

    if args.ray_address is not None and not args.workers:
        return _error(f"--ray-address {args.ray_address!r} needs --workers N (N >= 1)")
    if args.concurrency is None:
        args.concurrency = 16 * args.workers if args.workers and args.policy not in MODEL_POLICIES else 1
    if args.k > args.samples_per_task:
        return _error(f"--k ({args.k}) must be <= --samples-per-task ({args.samples_per_task}): pass@k needs n >= k "
                      "samples per task")
    if args.resume and not args.trajectories and not args.out:
        return _error("--resume continues the run in --trajectories PATH (or the one beside --out PATH); give one of them")
    if args.out and not args.trajectories:
        args.trajectories = trajectories_beside(args.out)  # finished work is kept whether or not it was asked for
    problem = _check_model_options(args)
    if problem:
        return _error(problem)
    try:
        env_ids = expand_env_patterns(args.env)
        env_kwargs = parse_env_args(args.env_arg)
    except ValueError as exc:
        return _error(str(exc))
    env_kwargs.update({key: value for key in ("reward", "sandbox") if (value := getattr(args, key)) is not None})
    problem = check_output_paths(args.out, args.trajectories)
    if problem:
        return _error(problem)
    if env_kwargs.get("code_runner") == "inprocess":
        print("sopgym eval: note: code_runner=inprocess runs the agent's code on this host as your user (it can "
              "import sopgym and read the answers): trusted code only", file=sys.stderr)
    sopbench_kwargs = {"prompt_style": args.prompt_style} if args.prompt_style else {}
    if sopbench_kwargs and not any(e.split(":")[-1].startswith("sopbench/") for e in env_ids):
        return _error("--prompt-style applies to SOP-Bench envs (sopbench/*), and this run has none")

    make_env = SuiteEnvMaker(env_kwargs, sopbench_kwargs, args.split)

    num_tasks: dict[str, int] = {}
    for env_id in env_ids:
        try:
            env = make_env(env_id)
        except (ValueError, TypeError, gym.error.Error) as exc:
            return _error(f"{env_id}: {exc}")
        try:
            pack = getattr(env.unwrapped, "pack", None)  # an env served elsewhere has none: its size is unknown
            size = pack.num_tasks(args.split) if pack is not None else None
        finally:
            env.close()
        if args.episodes == "all":
            if size is None:
                return _error(f"--episodes all: split {args.split!r} of {env_id} is unlimited or unknown; give a number")
            num_tasks[env_id] = size
        elif size is not None and args.episodes > size:
            return _error(f"split {args.split!r} of {env_id} has {size} tasks; got episodes={args.episodes}")
        else:
            num_tasks[env_id] = args.episodes
        if num_tasks[env_id] < 1:
            return _error(f"split {args.split!r} of {env_id} has no tasks")
    plan = SuitePlan(tuple(env_ids), args.split, num_tasks, args.samples_per_task, args.seed)

    if args.policy in MODEL_POLICIES:
        try:
            agent, model_identity = build_model_agent(args)
        except (ValueError, OSError) as exc:
            return _error(str(exc))
        except ImportError as exc:
            extra = "models" if args.policy == "openai" else "hf"
            return _error(f"--policy {args.policy} needs packages that are missing ({exc}): pip install 'sopgym[{extra}]'")
    else:
        agent, model_identity = builtin_policy_agent(args.policy), None
    identity = {"policy": args.policy, "model": model_identity, "plan": plan.to_json(), "env_kwargs": env_kwargs,
                "sopbench_env_kwargs": sopbench_kwargs}
    if args.out is None and args.policy in MODEL_POLICIES:  # a model run is never lost for want of --out
        folder = os.path.join(RUNS_FOLDER, time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}")
        os.makedirs(folder, exist_ok=True)
        args.out, args.trajectories = os.path.join(folder, "results.json"), os.path.join(folder, "trajectories.jsonl")
        print(f"sopgym eval: writing the results and trajectories of this run to {folder}/ (--out to choose)",
              file=sys.stderr)
    started = time.time()
    resumed = {"episodes": 0}
    software = software_info()
    finished: dict[int, Any] = {}
    last_write = [float("-inf")]

    def on_resume(count: int, pending: int) -> None:
        resumed["episodes"] = count
        print(f"sopgym eval: resuming {args.trajectories}: {count} episodes finished, {pending} to run", file=sys.stderr)

    def results_now(status: str) -> dict[str, Any]:
        """The results of the episodes finished so far (a running run's without intervals, and with
        the largest k its tasks' samples allow)."""
        outcomes = [finished[i] for i in sorted(finished)]
        config = {
            "identity": identity,
            "agent": agent.describe() if hasattr(agent, "describe") else {"policy": args.policy},
            "k": args.k, "n_bootstrap": args.n_bootstrap, "concurrency": args.concurrency,
            "resumed_episodes": resumed["episodes"], "software": software,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "arguments": _arguments(args),
        }
        if status == "finished":
            k, n_bootstrap = args.k, args.n_bootstrap
        else:
            samples: dict[tuple[str, str], int] = {}
            for o in outcomes:
                key = (o.env_id, str(o.record.get("task_id")))
                samples[key] = samples.get(key, 0) + 1
            k, n_bootstrap = min(args.k, min(samples.values())), 0
        results = suite_results(config, outcomes, k=k, n_bootstrap=n_bootstrap, seed=args.seed)
        results["run"] = {"status": status, "episodes_finished": len(outcomes), "episodes_planned": len(plan.specs()),
                          "trajectories": args.trajectories}
        return results

    def save(status: str) -> str | None:
        """Write the results so far (when there is a file and an episode); why not, if that failed."""
        if not args.out or not finished:
            return None
        try:
            write_results(args.out, results_now(status))
        except OSError as exc:
            return f"could not write the results to {args.out}: {exc}"
        last_write[0] = time.monotonic()
        return None

    def on_outcome(outcome: Any) -> None:
        finished[outcome.index] = outcome
        if time.monotonic() - last_write[0] >= RESULTS_EVERY_S:
            problem = save("running")
            if problem:
                print(f"sopgym eval: {problem}", file=sys.stderr)

    def kept() -> str:
        files = " and ".join(f for f in (args.out, args.trajectories) if f)
        return f"; finished episodes are in {files} (continue with --resume)" if files and finished else ""

    model = getattr(agent, "model", None)
    try:
        if model is not None and hasattr(model, "wait_until_ready"):
            if not args.quiet:
                print(f"sopgym eval: waiting for {args.base_url} ...", file=sys.stderr)
            model.wait_until_ready()
        pool = None
        if args.workers:
            from .runner import make_env_pool

            pool = make_env_pool(make_env, "ray", num_workers=args.workers, address=args.ray_address)
        outcomes = run_suite(plan, agent, make_env, identity=identity, trajectories=args.trajectories,
                             resume=args.resume, concurrency=args.concurrency, progress=not args.quiet,
                             on_resume=on_resume, pool=pool, on_outcome=on_outcome)
    except ServerRefused as exc:
        save("stopped")
        print(f"sopgym eval: stopped: {exc}{kept()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        save("interrupted")
        print(f"sopgym eval: interrupted{kept()}", file=sys.stderr)
        return 130
    except (ValueError, TypeError, gym.error.Error, ImportError) as exc:  # another run's file, env kwargs, no ray
        save("stopped")
        return _error(f"{exc}{kept()}")
    finally:
        if model is not None:
            model.close()
    assert len(finished) == len(outcomes), "run_suite reports every episode through on_outcome"
    try:
        results = results_now("finished")
    except ValueError as exc:
        return _error(str(exc))
    for env_id, metrics in results["envs"].items():
        print(format_results(metrics, env_id, args.policy, args.split))
        print()
    if len(results["envs"]) > 1:
        print(format_suite(results))
    if args.trajectories:
        print(f"trajectories: {args.trajectories}")
    if args.out:
        try:
            write_results(args.out, results)
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
