"""Suite runs: one agent over several envs, one trajectory file, one results file; resumable.

``sopgym eval`` runs through here. A run is a **plan** (env ids, split, tasks ``0..N-1`` per env,
samples per task, seed: the same tasks as any other run with the same plan, see
:func:`~sopgym.episodes.specs.task_specs`) and an **identity** (the plan plus the agent's configuration and the env
kwargs): what must match for a trajectory file to be resumed.

Trajectory file (:mod:`sopgym.trajectory`): a ``run`` line first (``{"type": "run", "format": 1, "identity": ...}``), then each
finished episode's lines in :func:`~sopgym.episodes.runner.trajectory_lines`' format, written when the episode ends,
``episode_index`` being the episode's position in the plan. Resuming (:func:`run_suite` with
``resume=True``) reads the finished episodes back, drops a half-written tail (a run killed while
writing), checks the identity and each episode's env, seed and options against the plan, and runs
only the episodes still missing, appending to the file.

Results (:func:`suite_results`): per env, the evaluator's metrics (:func:`~sopgym.evaluation.metrics.evaluate_records`),
the pass@k curve over every ``k`` the samples allow, the model's usage (tokens, latency, turns cut by
``max_tokens``, cost) and, for SOP-Bench envs, the ``sopbench-compat`` score beside the strict one;
for the suite, the mean over envs (each env weighs the same) with 95% intervals from a bootstrap that
resamples tasks within each env.
"""

from __future__ import annotations

import fnmatch
import json
import os
import platform
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sopgym.episodes.progress import ProgressBar
from sopgym.evaluation.identity import identity_diff
from sopgym.evaluation.metrics import EpisodeScore, evaluate_records, score_record
from sopgym.evaluation.passk import pass_at_k
from sopgym.trajectory import TrajectoryWriter, UnreadableLine, check_format, loads_line, numbered_lines
from sopgym.trajectory import run_line as new_run_line  # run_suite names its read-back line run_line

__all__ = [
    "RESULTS_FORMAT", "SuitePlan", "EpisodeOutcome", "registered_env_ids", "expand_env_patterns", "run_suite",
    "read_trajectory_run", "suite_results", "write_results", "software_info", "SUITE_METRICS",
]

RESULTS_FORMAT = "sopgym-results/2"
#: Rates averaged over envs for the suite (those in ``SUITE_INTERVALS`` get a 95% interval).
SUITE_METRICS = ("task_success_rate", "field_accuracy", "execution_completion_rate", "invalid_action_rate",
                 "mean_turns", "infrastructure_failure_rate", "truncation_rate")
SUITE_INTERVALS = ("task_success_rate", "field_accuracy", "execution_completion_rate")


# --------------------------------------------------------------------------------------------------
# Which envs and episodes
# --------------------------------------------------------------------------------------------------
def registered_env_ids() -> list[str]:
    """Every registered task env (``sopgym/*`` domains and ``sopbench/*`` ones), sorted: what globs
    expand over. Other ids in gymnasium's registry (e.g. ``sopgym/Remote-v0``, an env served
    elsewhere) are taken when named exactly."""
    import sopgym  # noqa: F401 - registers the envs (and SOP-Bench's, with SOPBENCH_DIR)
    from sopgym.envs.registration import registered_env_ids as pack_env_ids

    return sorted(pack_env_ids())


def _in_gym_registry(env_id: str) -> bool:
    import gymnasium as gym

    return env_id in gym.registry


def _bare(env_id: str) -> str:
    """``module:namespace/Name-vN`` -> ``namespace/Name-vN`` (gymnasium's module prefix)."""
    return env_id.split(":", 1)[1] if ":" in env_id else env_id


def expand_env_patterns(patterns: Sequence[str], registered: Sequence[str] | None = None) -> list[str]:
    """Env ids from ids and globs (``sopgym/*``, ``sopbench/*``, ``sopgym/Warehouse*``), in the order
    given, each once; a glob expands to its matching task envs (:func:`registered_env_ids`) sorted.

    Raises:
        ValueError: no pattern, an unknown id, or a glob that matches nothing (naming what is registered).
    """
    registered = list(registered) if registered is not None else registered_env_ids()
    if not patterns:
        raise ValueError("expected at least one env id or glob (e.g. sopgym/WarehouseReceiving-v0 or 'sopgym/*')")
    out: list[str] = []
    for pattern in patterns:
        if any(ch in pattern for ch in "*?["):
            matches = sorted(i for i in registered if fnmatch.fnmatchcase(i, pattern))
            if not matches:
                raise ValueError(f"env pattern {pattern!r} matches no registered env; registered: {registered}"
                                 + ("; SOP-Bench envs need SOPBENCH_DIR set to a checkout" if pattern.startswith("sopbench") else ""))
        elif _bare(pattern) in registered or _in_gym_registry(pattern) or (
                ":" in pattern and _bare(pattern).startswith(("sopgym/", "sopbench/"))):
            matches = [pattern]
        else:
            raise ValueError(f"unknown env id {pattern!r}; registered: {registered}")
        out.extend(m for m in matches if m not in out)
    return out


@dataclass(frozen=True)
class SuitePlan:
    """Which episodes a run holds.

    Args:
        env_ids: the envs, in order.
        split: ``train``, ``val`` or ``test``.
        num_tasks: tasks ``0..n-1`` per env id.
        samples_per_task: episodes per task (the ``n`` of pass@k).
        seed: the run seed (each episode's is :func:`~sopgym.episodes.specs.episode_seed`).
    """

    env_ids: tuple[str, ...]
    split: str
    num_tasks: Mapping[str, int]
    samples_per_task: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        missing = [e for e in self.env_ids if e not in self.num_tasks]
        if missing:
            raise ValueError(f"num_tasks has no entry for {missing}")

    def specs(self) -> list[Any]:
        from sopgym.episodes.specs import task_specs

        return [spec for env_id in self.env_ids
                for spec in task_specs(env_id, self.split, self.num_tasks[env_id], self.samples_per_task, self.seed)]

    def to_json(self) -> dict[str, Any]:
        return {"env_ids": list(self.env_ids), "split": self.split, "num_tasks": dict(self.num_tasks),
                "samples_per_task": self.samples_per_task, "seed": self.seed}


@dataclass
class EpisodeOutcome:
    """One finished episode of a suite run (run now or read back from the trajectory file)."""

    index: int
    env_id: str
    record: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    """``EpisodeResult.extra``: per-turn agent data under ``turns``, the model's totals under ``model``."""
    resumed: bool = False
    line: int | None = None
    """For an episode read back: the line of its ``episode`` line in the trajectory file."""


# --------------------------------------------------------------------------------------------------
# Trajectory files
# --------------------------------------------------------------------------------------------------
def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _check_model_totals(where: str, totals: Any) -> None:
    """A resumed episode's model totals must be what :func:`~sopgym.agents.chat.usage_totals` writes:
    counts that are integers >= 0 and seconds or dollars that are finite numbers >= 0 (or null)."""
    if not isinstance(totals, Mapping):
        raise ValueError(f"{where}: extra.model is {_kind(totals)}, expected an object")
    for key in ("requests", "turns", "prompt_tokens", "completion_tokens", "max_tokens_cuts", "reply_byte_cuts",
                "cached_turns", "latency_s", "cost_usd"):
        value = totals.get(key)
        integer = key not in ("latency_s", "cost_usd")
        ok = value is None or (not isinstance(value, bool) and isinstance(value, int if integer else (int, float))
                               and value >= 0 and value == value and value != float("inf"))
        if not ok:
            raise ValueError(f"{where}: extra.model.{key} is {json.dumps(value, default=str)[:60]}, expected "
                             f"{'an integer' if integer else 'a finite number'} >= 0 or null")


def read_trajectory_run(path: str | os.PathLike) -> tuple[dict[str, Any] | None, dict[int, EpisodeOutcome], dict[int, dict], int]:
    """Read a suite trajectory file back.

    Returns:
        ``(run line or None, finished episodes by index, their reset lines by index, byte offset
        where the complete part ends)``. A last line without its newline or that is not JSON (a run
        killed while writing), and lines of an episode whose ``episode`` line is missing, lie past
        the offset.

    Raises:
        ValueError: a damaged file, naming the file and the line: a line that is not UTF-8 JSON before
            the end (:class:`sopgym.trajectory.UnreadableLine`), not an object, a run line of another format or whose
            identity is not an object, an episode line whose record the evaluator cannot score or
            whose fields have the wrong kinds.
    """
    run_line = None
    finished: dict[int, EpisodeOutcome] = {}
    resets: dict[int, dict] = {}
    agent_turns: dict[int, list] = {}
    offset = 0
    position = 0
    lines = list(numbered_lines(path))
    for number, where, raw in lines:
        position += len(raw)
        obj = _read_line(raw, where, last=number == len(lines))
        if obj is None:
            break  # a half-written last line
        kind = obj.get("type")
        if kind == "run":
            _check_run_line(obj, where, number)
            run_line, offset = obj, position
            continue
        index = obj.get("episode_index")
        if not isinstance(index, int) or isinstance(index, bool):
            continue
        if index < 0:
            raise ValueError(f"{where}: episode_index is {index}, expected an integer >= 0")
        if kind == "reset":
            resets[index] = obj
            agent_turns[index] = []
        elif kind == "step":
            agent_turns.setdefault(index, []).append(_step_agent(obj, where))
        elif kind == "episode":
            finished[index] = _episode_outcome(obj, index, where, number, agent_turns.get(index) or [])
            offset = position
    return run_line, finished, resets, offset


def _read_line(raw: bytes, where: str, last: bool) -> dict[str, Any] | None:
    """One line of a trajectory file as its object; None for a half-written last line (no newline, or,
    when ``last``, not JSON).

    Raises:
        ValueError: a line that is not UTF-8 JSON (:class:`sopgym.trajectory.UnreadableLine`), or not an object.
    """
    if not raw.endswith(b"\n"):
        return None
    try:
        obj = loads_line(raw, where)
    except UnreadableLine as exc:
        if last and exc.invalid_json:
            return None
        raise
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {_kind(obj)}")
    return obj


def _check_run_line(obj: dict[str, Any], where: str, number: int) -> None:
    """A run line must be the first, of this version's format, with the run's settings as its identity."""
    if number != 1:
        raise ValueError(f"{where}: a 'run' line must be the first line")
    check_format(obj, where)
    if not isinstance(obj.get("identity"), dict):
        raise ValueError(f"{where}: the run line's identity is {_kind(obj.get('identity'))}, expected an object "
                         "(the settings of the run)")


def _step_agent(obj: dict[str, Any], where: str) -> dict[str, Any] | None:
    """A step line's agent entry (None when it has none).

    Raises:
        ValueError: an entry that is not an object.
    """
    agent = obj.get("agent")
    if agent is not None and not isinstance(agent, dict):
        raise ValueError(f"{where}: the step's agent entry is {_kind(agent)}, expected an object")
    return agent


def _episode_outcome(obj: dict[str, Any], index: int, where: str, number: int, turns: list) -> EpisodeOutcome:
    """The finished episode an ``episode`` line holds, given the agent entries of its step lines
    (kept as ``extra["turns"]`` when every step has one).

    Raises:
        ValueError: a record the evaluator cannot score, or fields of the wrong kinds.
    """
    record = {k: v for k, v in obj.items() if k not in ("type", "episode_index", "extra")}
    extra = obj.get("extra") if obj.get("extra") is not None else {}
    if not isinstance(extra, dict):
        raise ValueError(f"{where}: the episode's extra is {_kind(extra)}, expected an object")
    if not isinstance(record.get("env_id"), str):
        raise ValueError(f"{where}: the episode's env_id is {_kind(record.get('env_id'))}, expected a string")
    try:
        score_record(record, where)
    except (TypeError, AttributeError) as exc:
        raise ValueError(f"{where}: the episode record cannot be scored ({type(exc).__name__}: {exc})") from None
    if "model" in extra:
        _check_model_totals(where, extra["model"])
    extra = dict(extra)
    if turns and all(t is not None for t in turns):
        extra["turns"] = turns
    return EpisodeOutcome(index, record["env_id"], record, extra, resumed=True, line=number)


class _SuiteWriter:
    """Appends each finished episode's lines (with its plan index) to the trajectory file."""

    def __init__(self, path: str | os.PathLike, header: dict[str, Any] | None, truncate_at: int | None):
        self._writer = TrajectoryWriter(path, truncate_at=truncate_at)
        if header is not None:
            self._writer.write([header])

    def episode(self, result: Any, index: int) -> None:
        from sopgym.episodes.runner import trajectory_lines

        # one write of the episode's lines, flushed: a run killed now leaves at most a torn tail, which
        # the reader drops (a resumed run then runs that episode again)
        self._writer.write(trajectory_lines(result, episode_index=index))

    def close(self) -> None:
        self._writer.close()


# --------------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------------
def run_suite(
    plan: SuitePlan,
    agent: Any,
    make_env: Callable[[str], Any],
    *,
    identity: Mapping[str, Any],
    trajectories: str | os.PathLike | None = None,
    resume: bool = False,
    concurrency: int = 1,
    progress: bool = True,
    on_resume: Callable[[int, int], None] | None = None,
    pool: Any = None,
    on_outcome: Callable[[EpisodeOutcome], None] | None = None,
) -> list[EpisodeOutcome]:
    """Run every episode of ``plan`` not already finished in ``trajectories``.

    Args:
        plan: the episodes.
        agent: a :class:`~sopgym.episodes.runner.BatchAgent` (a scripted policy's, a model's).
        make_env: ``env_id -> env`` (kwargs included).
        identity: the run's configuration (JSON); a resumed file must hold the same.
        trajectories: the JSONL file (None: nothing written, nothing resumed).
        resume: continue ``trajectories`` instead of starting it afresh.
        concurrency: episodes running at once.
        progress: progress bar with an ETA on stderr.
        on_resume: called with (finished episodes found, episodes to run) when resuming.
        pool: the env pool to run on (None: an in-process :class:`~sopgym.episodes.pools.EnvPool` of ``make_env``;
            e.g. :func:`~sopgym.episodes.runner.make_env_pool` with Ray env workers). It is closed at the end.
        on_outcome: called with each finished episode: first those read back from the file, then
            each one as it ends (after its lines are written), so a caller can keep results current.

    Returns:
        One :class:`EpisodeOutcome` per planned episode, in plan order.

    Raises:
        ValueError: ``resume`` without a file, a file of another run (the differing settings named),
            or an episode in the file that is not the plan's.
    """
    from sopgym.episodes.pools import EnvPool
    from sopgym.episodes.runner import run_episodes

    specs = plan.specs()
    run_header = new_run_line(json.loads(json.dumps(identity, default=str)))
    header: dict[str, Any] | None = run_header  # written at the top of a new file
    finished: dict[int, EpisodeOutcome] = {}
    truncate_at: int | None = None
    if resume:
        if trajectories is None:
            raise ValueError("resume needs the trajectory file of the run to continue (--trajectories PATH)")
        read = _read_back(trajectories, run_header, specs)
        if read is not None:
            finished, truncate_at = read
            header = None  # the file keeps its run line
    pending = [i for i in range(len(specs)) if i not in finished]
    if resume and on_resume is not None:
        on_resume(len(finished), len(pending))
    if on_outcome is not None:
        for index in sorted(finished):
            on_outcome(finished[index])
    writer = _SuiteWriter(trajectories, header, truncate_at) if trajectories is not None else None
    outcomes: dict[int, EpisodeOutcome] = dict(finished)
    pool = pool if pool is not None else EnvPool(make_env)

    def done(result: Any) -> None:
        index = pending[result.index]
        if writer is not None:
            writer.episode(result, index)
        outcomes[index] = EpisodeOutcome(index, specs[index].env_id, dict(result.record), dict(result.extra))
        if on_outcome is not None:
            on_outcome(outcomes[index])

    bar = ProgressBar(len(specs), initial=len(finished)) if progress and specs else None
    try:
        if pending:
            run_episodes([specs[i] for i in pending], agent, pool, concurrency=concurrency, on_result=done,
                         progress=bar if bar is not None else False)
        elif bar is not None:
            bar.close()
    finally:
        pool.close()
        if writer is not None:
            writer.close()
    return [outcomes[i] for i in range(len(specs))]


def _read_back(trajectories: str | os.PathLike, run_header: Mapping[str, Any],
               specs: Sequence[Any]) -> tuple[dict[int, EpisodeOutcome], int] | None:
    """A resumed run's finished episodes and where its file is cut (its torn tail), read back from
    ``trajectories`` and checked against this run's identity and plan; None when there is no file yet."""
    if not os.path.exists(trajectories):
        return None
    run_line, finished, resets, truncate_at = read_trajectory_run(trajectories)
    if run_line is None:
        raise ValueError(f"{trajectories}: no 'run' line at the top: not a trajectory file written by "
                         "`sopgym eval`, so it cannot be resumed")
    diff = identity_diff(run_line.get("identity") or {}, run_header["identity"])
    if diff:
        raise ValueError(f"{trajectories} is a run with other settings; resume it with the same ones. "
                         f"Differences: {'; '.join(diff)}")
    for index, outcome in finished.items():
        _check_matches_plan(trajectories, index, outcome, resets.get(index), specs)
    return finished, truncate_at


def _check_matches_plan(path: Any, index: int, outcome: EpisodeOutcome, reset: dict | None, specs: Sequence[Any]) -> None:
    path = f"{path}:{outcome.line}"
    if index >= len(specs):
        raise ValueError(f"{path}: episode_index {index} lies outside this run's {len(specs)} episodes (0..{len(specs) - 1})")
    spec = specs[index]
    if _bare(outcome.env_id) != _bare(spec.env_id):
        raise ValueError(f"{path}: episode {index} is of {outcome.env_id}, but this run's episode {index} is of {spec.env_id}")
    if reset is not None and (reset.get("seed") != spec.seed or reset.get("options") != dict(spec.options or {})):
        raise ValueError(f"{path}: episode {index} ran with seed {reset.get('seed')} and options {reset.get('options')}, "
                         f"but this run's episode {index} has seed {spec.seed} and options {dict(spec.options or {})}")
    outcome.env_id = spec.env_id


# --------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------
def software_info() -> dict[str, Any]:
    """sopgym's version and git commit (when run from a checkout), Python, the platform and the
    versions of the packages a run's figures depend on."""
    from importlib import metadata

    import sopgym

    info: dict[str, Any] = {"sopgym": sopgym.__version__, "python": platform.python_version(),
                            "platform": platform.platform(), "git_commit": None, "git_dirty": None}
    root = Path(sopgym.__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if commit.returncode == 0:
            info["git_commit"] = commit.stdout.strip()
            status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=10)
            info["git_dirty"] = bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass
    packages: dict[str, str | None] = {}
    for name in ("gymnasium", "numpy", "openai", "torch", "transformers", "pandas"):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    info["packages"] = packages
    return info


def _percentile(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def usage_summary(outcomes: Sequence[EpisodeOutcome]) -> dict[str, Any] | None:
    """A model's usage over episodes (None when no episode carries any): totals, per-episode and
    per-turn means, turn latency percentiles, turns cut by ``max_tokens`` or by the reply byte cap,
    turns whose reported token counts were dropped, turns answered from the response cache (left out
    of the latency figures: no request was sent), failed requests, cost."""
    models = [o.extra["model"] for o in outcomes if isinstance(o.extra.get("model"), Mapping)]
    if not models:
        return None
    turns = [t for o in outcomes for t in (o.extra.get("turns") or []) if isinstance(t, Mapping)]

    def total(key: str) -> Any:
        values = [m.get(key) for m in models]
        return None if any(v is None for v in values) else sum(values)

    latencies = [float(t["latency_s"]) for t in turns
                 if isinstance(t.get("latency_s"), (int, float)) and not t.get("cached")]
    num_turns = len(turns)
    prompt, completion = total("prompt_tokens"), total("completion_tokens")
    failed = [f for o in outcomes if (f := o.extra.get("failed_request"))]
    out = {
        "episodes": len(models),
        "turns": num_turns,
        "requests": total("requests"),
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "prompt_tokens_per_episode": None if prompt is None else prompt / len(models),
        "completion_tokens_per_episode": None if completion is None else completion / len(models),
        "completion_tokens_per_turn": None if completion is None or not num_turns else completion / num_turns,
        "latency_s": float(sum(latencies)),
        "latency_s_per_turn": {"mean": float(np.mean(latencies)) if latencies else None,
                               "p50": _percentile(latencies, 50), "p95": _percentile(latencies, 95)},
        "max_tokens_cuts": sum(t.get("finish_reason") == "length" for t in turns),
        "max_tokens_cut_rate": (sum(t.get("finish_reason") == "length" for t in turns) / num_turns) if num_turns else None,
        "reply_byte_cuts": sum(t.get("truncated") == "max_reply_bytes" for t in turns),
        "usage_dropped_turns": sum(bool(t.get("usage_warnings")) for t in turns),
        "cached_turns": sum(bool(t.get("cached")) for t in turns),
        "finish_reasons": dict(sorted(_count(str(t.get("finish_reason")) for t in turns).items())),
        "failed_requests": {"inference": sum(f.get("cause") == "inference" for f in failed),
                            "context_budget": sum(f.get("cause") == "context_budget" for f in failed)},
    }
    if any("cost_usd" in m for m in models):
        out["cost_usd"] = total("cost_usd")
    return out


def _count(items: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts


def _via_scores(lookup: Mapping[int, EpisodeScore],
                value: Callable[[EpisodeScore], float]) -> Callable[[Mapping[str, Any]], float]:
    """``value`` of a record's score, the score looked up by the record's ``id``."""
    return lambda r: value(lookup[id(r)])


def _by_task(records: Sequence[Mapping[str, Any]], value: Callable[[Mapping[str, Any]], float]) -> tuple[np.ndarray, np.ndarray]:
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for r in records:
        key = str(r["task_id"])
        sums[key] = sums.get(key, 0.0) + float(value(r))
        counts[key] = counts.get(key, 0) + 1
    keys = list(sums)
    return np.array([sums[k] for k in keys]), np.array([counts[k] for k in keys], dtype=np.float64)


def stratified_mean_ci(per_env: Sequence[tuple[np.ndarray, np.ndarray]], *, n_bootstrap: int, seed: int,
                       confidence: float = 0.95) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mean over envs of per-env ratios (sum of per-task
    numerators / sum of per-task episodes), resampling tasks with replacement within each env."""
    rng = np.random.default_rng(seed)
    stats = np.zeros(n_bootstrap)
    for num, den in per_env:
        idx = rng.integers(0, num.size, size=(n_bootstrap, num.size))
        stats += num[idx].sum(axis=1) / den[idx].sum(axis=1)
    stats /= len(per_env)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(stats, [tail, 100.0 - tail])
    return float(low), float(high)


def _compat(records: Sequence[Mapping[str, Any]], n_bootstrap: int, seed: int) -> dict[str, Any]:
    from sopgym.evaluation.passk import bootstrap_ci
    from sopgym.sopbench.compat import NAME, compat_task_success

    num, den = _by_task(records, lambda r: compat_task_success(r))
    rate = float(num.sum() / den.sum())
    out: dict[str, Any] = {"rule": NAME, "task_success_rate": rate}
    if n_bootstrap:
        out["ci95"] = list(bootstrap_ci(num, den, n_bootstrap=n_bootstrap, seed=seed))
    return out


def _suite_pass_at_k(by_env: Mapping[str, Sequence[EpisodeOutcome]], n_bootstrap: int,
                     seed: int) -> tuple[dict[str, float], dict[str, list[float]] | None]:
    """The suite's pass@k curve, for every k up to the fewest samples of any task: per k the mean over
    envs of the mean over tasks of the unbiased pass@k; and per k its 95% interval from the bootstrap
    that resamples tasks within each env (the suite's other intervals' resampling; None without one)."""
    per_env = []
    for group in by_env.values():
        counts: dict[str, list[int]] = {}
        for o in group:
            counts.setdefault(str(o.record["task_id"]), []).append(int(score_record(o.record).success))
        per_env.append(list(counts.values()))
    max_k = min(len(v) for tasks in per_env for v in tasks)
    curve: dict[str, float] = {}
    intervals: dict[str, list[float]] | None = {} if n_bootstrap else None
    for kk in range(1, max_k + 1):
        values = [np.array([pass_at_k(len(v), sum(v), kk) for v in tasks]) for tasks in per_env]
        curve[str(kk)] = float(np.mean([v.mean() for v in values]))
        if intervals is not None:
            intervals[str(kk)] = list(stratified_mean_ci([(v, np.ones_like(v)) for v in values],
                                                         n_bootstrap=n_bootstrap, seed=seed + 200 + kk))
    return curve, intervals


def write_results(path: str | os.PathLike, results: Mapping[str, Any]) -> None:
    """Write a results file atomically: a temporary file beside it, synced, then renamed over it, so a
    run killed at any moment leaves the previous whole file or the new one, never a torn one.

    Raises:
        OSError: the file could not be written (the old one is left as it was).
    """
    tmp = f"{os.fspath(path)}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def suite_results(
    config: Mapping[str, Any],
    outcomes: Sequence[EpisodeOutcome],
    *,
    k: int = 1,
    n_bootstrap: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """The results of a run: per-env metrics and the suite's means with intervals (see the module
    docstring).

    Args:
        config: stored as the results' ``config`` (model, server, sampling, env kwargs, software...).
        outcomes: every episode of the run.
        k: the ``k`` of pass@k / pass^k.
        n_bootstrap: resamples for the intervals (0: none).
        seed: seeds the bootstrap.

    Raises:
        ValueError: no outcomes, or a task with fewer than ``k`` samples.
    """
    if not outcomes:
        raise ValueError("expected at least one finished episode, got none")
    by_env: dict[str, list[EpisodeOutcome]] = {}
    for o in outcomes:
        by_env.setdefault(o.env_id, []).append(o)
    envs: dict[str, Any] = {}
    for offset, (env_id, group) in enumerate(by_env.items()):
        records = [o.record for o in group]
        metrics = evaluate_records(records, k=k, n_bootstrap=n_bootstrap, seed=seed)
        samples = metrics["min_samples_per_task"]
        counts: dict[str, list[int]] = {}
        for r in records:
            counts.setdefault(str(r["task_id"]), []).append(int(score_record(r).success))
        metrics["pass_at_k_curve"] = {str(kk): float(np.mean([pass_at_k(len(v), sum(v), kk) for v in counts.values()]))
                                      for kk in range(1, samples + 1)}
        metrics["usage"] = usage_summary(group)
        if _bare(env_id).startswith("sopbench/"):
            metrics["sopbench_compat"] = _compat(records, n_bootstrap, seed + 10 + offset)
        envs[env_id] = metrics
    suite: dict[str, Any] = {"envs": len(envs), "episodes": len(outcomes), "weighting": "mean over envs", "ci95": {}}
    for name in SUITE_METRICS:
        values = [m[name] for m in envs.values() if m.get(name) is not None]
        suite[name] = float(np.mean(values)) if len(values) == len(envs) else None
    compat = [m["sopbench_compat"]["task_success_rate"] for m in envs.values() if "sopbench_compat" in m]
    if compat:
        suite["sopbench_compat_task_success_rate"] = float(np.mean(compat))
    if n_bootstrap:
        scores = {env_id: [score_record(o.record) for o in group] for env_id, group in by_env.items()}
        value_of: dict[str, Callable[[EpisodeScore], float]] = {
            "task_success_rate": lambda s: s.success,
            "field_accuracy": lambda s: s.field_fraction,
            "execution_completion_rate": lambda s: s.completed,
        }
        for offset, name in enumerate(SUITE_INTERVALS):
            per_env = []
            for env_id, group in by_env.items():
                lookup = {id(o.record): s for o, s in zip(group, scores[env_id])}
                per_env.append(_by_task([o.record for o in group], _via_scores(lookup, value_of[name])))
            suite["ci95"][name] = list(stratified_mean_ci(per_env, n_bootstrap=n_bootstrap, seed=seed + 100 + offset))
    suite["pass_at_k_curve"], curve_ci = _suite_pass_at_k(by_env, n_bootstrap, seed)
    if curve_ci is not None:
        suite["ci95"]["pass_at_k_curve"] = curve_ci
    usage = usage_summary(outcomes)
    if usage is not None:
        suite["usage"] = usage
    return {"format": RESULTS_FORMAT, "config": dict(config), "envs": envs, "suite": suite}
