"""Pre-flight: before the first episode of a run, can every env's backends run, and can its tasks be
solved at all under the run's settings?

A run whose backends are down does not fail loudly by itself: each episode ends as an infrastructure
failure, and a suite mean over such envs reads like a score. So the checks run first, and a problem
refuses the run with its fix:

* :func:`backend_findings`: the backends the envs list (``env.unwrapped.backend_needs()``, see
  :mod:`sopgym.sandboxes.availability`): Docker and the sandbox image for the code runners, for
  ``sandbox="docker"`` and for SOP-Bench's tools, this interpreter's pandas for SOP-Bench's unsandboxed
  runners. Each backend is checked once; one finding per problem names the envs it stops and the env
  kwargs that do without it.
* :func:`endpoint_findings`: a model server answers ``GET /models`` (the client's own readiness wait,
  :meth:`sopgym.agents.openai_chat.OpenAIChatModel.wait_until_ready`), and lists the model asked for.
* :func:`oracle_turn_findings`: warns when the env's ``max_turns`` is below what the domain's reference
  solver (the oracle) takes on the planned tasks, measured by running it on them in-process (the pack's
  own, trusted code) through the episode runner, so the figure is the env's, not a table.

A finding either refuses the run or is a warning; :func:`format_findings` writes them as the commands
print them. ``sopgym eval`` runs all three (docs/evaluation.md, "Pre-flight"); ``sopgym serve`` and the
trainer can call the same functions on their envs.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sopgym.sandboxes.availability import BackendNeed, Fix

__all__ = ["Finding", "backend_needs", "backend_findings", "checked_here", "endpoint_findings", "oracle_turn_findings",
           "format_findings", "python_kwargs", "env_arg_flags", "ORACLE_SAMPLE"]

#: Unsolvable tasks the oracle is re-run on, without the turn limit, to say how many turns it needs.
ORACLE_SAMPLE = 20


@dataclass(frozen=True)
class Finding:
    """One problem found before a run. ``refuse``: the run must not start (else: a warning)."""

    refuse: bool
    message: str


def python_kwargs(env_kwargs: Mapping[str, Any]) -> str:
    """Env kwargs as Python keyword arguments: ``code_runner='inprocess'``."""
    return ", ".join(f"{k}={v!r}" for k, v in env_kwargs.items())


def backend_needs(env: Any) -> list[BackendNeed]:
    """What ``env`` (any wrapper stack) says its episodes need; none for an env that says nothing."""
    needs = getattr(env.unwrapped, "backend_needs", None)
    return list(needs()) if needs is not None else []


def backend_findings(needs: Mapping[str, Sequence[BackendNeed]],
                     show_kwargs: Callable[[Mapping[str, Any]], str] = python_kwargs) -> list[Finding]:
    """Check every backend ``needs`` (``{env_id: [BackendNeed, ...]}``) lists, once each, and return one
    finding per problem: the backend, why it cannot be used, the envs (and what in them) it stops, and
    the fixes written by ``show_kwargs`` (``--env-arg k=v`` for ``sopgym eval``)."""
    problems: dict[str, str | None] = {}
    stopped: dict[tuple[str, str, bool], tuple[tuple[Fix, ...], list[str]]] = {}
    for env_id, env_needs in needs.items():
        for need in env_needs:
            if need.backend not in problems:
                problems[need.backend] = need.check()
            if problems[need.backend] is not None:
                key = (need.backend, repr(need.fixes), need.warning_only)  # one finding per problem and fix
                stopped.setdefault(key, (need.fixes, []))[1].append(f"{env_id} ({need.user})")
    findings = []
    for (backend, _, warning_only), (fixes, users) in stopped.items():
        lines = [f"{backend}: {problems[backend]}", "  needed by: " + "; ".join(users)]
        if warning_only:
            lines.append("  the run goes on: those calls are counted as infrastructure failures, apart from the policy's")
        lines += [f"  or do without it: {show_kwargs(fix.env_kwargs)} ({fix.cost})" for fix in fixes]
        findings.append(Finding(not warning_only, "\n".join(lines)))
    return findings


def checked_here(findings: Sequence[Finding], where: str) -> list[Finding]:
    """Backend findings for envs that run on other hosts (``where``: a Ray cluster): checked on this
    host, which may lack what those hosts have, so warnings, never refusals."""
    return [Finding(False, f"{f.message}\n  (checked on this host only; the envs run on {where})") for f in findings]


def endpoint_findings(model: Any, base_url: str, model_name: str, wait_s: float) -> list[Finding]:
    """Whether the server of ``model`` (an :class:`~sopgym.agents.openai_chat.OpenAIChatModel`) answers
    ``GET /models`` within ``wait_s`` (a refusal when not, or when it refuses the key), and a warning
    when its listing does not hold ``model_name`` (some servers list other names than they serve)."""
    from sopgym.agents.chat import ServerRefused

    try:
        model.wait_until_ready(wait_s)
    except ServerRefused as exc:
        return [Finding(True, f"model server: {exc}")]
    served = getattr(model, "served_models", None)
    if served and model_name not in served:
        shown = ", ".join(served[:10]) + (f" (and {len(served) - 10} more)" if len(served) > 10 else "")
        return [Finding(False, f"model server {base_url} does not list --model {model_name!r} in GET /models; it lists "
                               f"{shown}. If the first request fails with 404, that is why")]
    return []


def _oracle_runs(pack: Any, split: str, indices: Iterable[int], max_turns: int) -> list[Any]:
    """The oracle's episodes on ``indices`` of ``split``, in-process (the pack's own solver: trusted
    code), through the episode runner."""
    from sopgym.envs.env import SOPEnv
    from sopgym.envs.env_kwargs import InProcessCodeRunnerWarning
    from sopgym.envs.policies import make_policy
    from sopgym.episodes.pools import EnvPool
    from sopgym.episodes.runner import PolicyAgent, run_episodes
    from sopgym.episodes.specs import EpisodeSpec

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InProcessCodeRunnerWarning)
        env = SOPEnv(pack, split=split, code_runner="inprocess", max_turns=max_turns)
    policy = make_policy("oracle")
    specs = [EpisodeSpec(pack.env_id, None, {"split": split, "task_index": i}) for i in indices]
    try:
        return run_episodes(specs, PolicyAgent(lambda spec: policy), EnvPool.of(env), concurrency=1)
    finally:
        env.close()


def oracle_turn_findings(env_id: str, env: Any, split: str, num_tasks: int) -> list[Finding]:
    """A warning when ``env``'s ``max_turns`` leaves the oracle unable to solve some of tasks
    ``0..num_tasks-1`` of ``split``: on those, every policy is cut off before the procedure can end.

    Measured, not assumed: the oracle runs on the planned tasks at the env's ``max_turns`` (cheap: a
    low limit ends each episode early), then, on up to :data:`ORACLE_SAMPLE` of the tasks it could not
    finish, without that limit, to say how many turns they take. Nothing is run when ``max_turns`` is at
    least the domain's default (``ceil(1.5 * human_steps)``) or the env has no domain pack (a remote env).
    """
    from sopgym.envs.env import default_max_turns

    unwrapped = env.unwrapped
    pack, max_turns = getattr(unwrapped, "pack", None), getattr(unwrapped, "max_turns", None)
    if pack is None or max_turns is None or max_turns >= default_max_turns(pack.human_steps):
        return []
    cut = [r for r in _oracle_runs(pack, split, range(num_tasks), max_turns)
           if not r.success and r.record["truncation_cause"] == "max_turns"]
    if not cut:
        return []
    bound = 10 * pack.human_steps
    needs = [r.record["turns"] for r in _oracle_runs(pack, split, [r.spec.options["task_index"] for r in cut[:ORACLE_SAMPLE]],
                                                     bound)]
    low, high = min(needs), max(needs)
    span = f"{low}" if low == high else f"{low}-{high}"
    measured = f"all {len(cut)}" if len(needs) == len(cut) else f"{len(needs)} of them"
    return [Finding(False, (
        f"{env_id}: max_turns={max_turns} leaves the oracle unable to finish {len(cut)} of the {num_tasks} planned "
        f"tasks: the reference solution takes {span} turns on them (measured on {measured}; the env's default "
        f"max_turns is {default_max_turns(pack.human_steps)}). On those tasks every policy is cut off before the "
        "procedure ends, and the oracle scores 0"))]


def format_findings(findings: Sequence[Finding], command: str) -> str:
    """The findings as ``command`` prints them on stderr: refusals, then warnings, one block each."""
    blocks = [f"{command}: cannot start: {f.message}" for f in findings if f.refuse]
    blocks += [f"{command}: warning: {f.message}" for f in findings if not f.refuse]
    return "\n".join(blocks)


def env_arg_flags(env_kwargs: Mapping[str, Any]) -> str:
    """Env kwargs as ``sopgym eval`` options: ``--env-arg code_runner=inprocess``."""
    return " ".join(f"--env-arg {k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in env_kwargs.items())
