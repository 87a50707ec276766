"""Re-scoring recorded episodes with the current evaluator (``sopgym rescore``), as tau2-bench's
``evaluate-trajs`` does: an evaluator fix needs no re-run of the model.

The input is a trajectory file of ``sopgym eval`` (a ``run`` line, then each finished episode's
lines), read by :func:`~.suite.read_trajectory_run`, the reader ``--resume`` uses, with its checks:
a damaged file is one ``ValueError`` naming the file and the line. Every finished episode is checked
against the plan of its run line (env, seed and options of its place in the plan, as ``--resume``
checks), then its record (answer, expected answer, fields, states) is judged again by
:func:`~sopgym.evaluation.metrics.score_record` through :func:`~.suite.suite_results`, which also writes the usage
from the recorded turns: the results are those ``sopgym eval`` writes for the same episodes
(``sopgym report`` reads them). A half-written tail (an episode whose ``episode`` line never came)
is not scored; the results' ``run`` block says how many episodes of the plan were found.

What the trajectory does not hold is not made up: ``config.agent`` carries only the policy and the
model name of the run line (the agent's full settings are in the original results file), and the
results have no ``started_at``/``finished_at`` of the run; ``config.rescored`` says what was read
and when.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from .suite import SuitePlan, _check_matches_plan, read_trajectory_run, software_info, suite_results

__all__ = ["rescore_trajectories"]


def _plan(path: str | os.PathLike, identity: Mapping[str, Any]) -> SuitePlan:
    plan = identity.get("plan")
    try:
        if not isinstance(plan, Mapping):
            raise TypeError(f"expected an object, got {type(plan).__name__}")
        env_ids, num_tasks = plan["env_ids"], plan["num_tasks"]
        if not isinstance(env_ids, list) or not all(isinstance(e, str) for e in env_ids) or not isinstance(num_tasks, Mapping):
            raise TypeError("expected env_ids a list of strings and num_tasks an object")
        counts = [plan["samples_per_task"], plan["seed"], *num_tasks.values()]
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
            raise TypeError("expected samples_per_task, seed and num_tasks' values integers >= 0")
        return SuitePlan(tuple(env_ids), str(plan["split"]), dict(num_tasks), plan["samples_per_task"], plan["seed"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}:1: the run line's identity.plan is not a plan of `sopgym eval` ({type(exc).__name__}: "
                         f"{str(exc)[:200]}); expected env_ids, split, num_tasks, samples_per_task, seed") from None


def rescore_trajectories(path: str | os.PathLike, *, k: int = 1, n_bootstrap: int = 1000,
                         arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The results of the finished episodes of a ``sopgym eval`` trajectory file, scored now.

    Args:
        path: the trajectory file.
        k: the ``k`` of pass@k and pass^k (a run that did not finish gets at most the largest ``k``
            its tasks' samples allow, and no intervals, as ``sopgym eval`` writes a running run's).
        n_bootstrap: resamples for the 95% intervals (0: none); seeded with the run's seed, as
            ``sopgym eval`` seeds them.
        arguments: stored as ``config.arguments``.

    Returns:
        A results dict in the format ``sopgym eval --out`` writes (:func:`~.suite.write_results`).

    Raises:
        ValueError: a damaged file (the file and the line named), a file without a run line, without
            finished episodes, or whose episodes are not its plan's; ``k`` over a task's samples.
    """
    run_line, finished, resets, offset = read_trajectory_run(path)
    if run_line is None:
        raise ValueError(f"{path}:1: expected a 'run' line at the top (a trajectory file written by `sopgym eval`), "
                         "got none")
    identity = run_line["identity"]
    plan = _plan(path, identity)
    specs = plan.specs()
    for index, outcome in finished.items():
        _check_matches_plan(path, index, outcome, resets.get(index), specs)
    if not finished:
        raise ValueError(f"{path}: no finished episode to score (expected at least one 'episode' line)")
    outcomes = [finished[i] for i in sorted(finished)]
    whole = len(outcomes) == len(specs)
    if not whole:
        samples: dict[tuple[str, str], int] = {}
        for o in outcomes:
            key = (o.env_id, str(o.record.get("task_id")))
            samples[key] = samples.get(key, 0) + 1
        k, n_bootstrap = min(k, min(samples.values())), 0
    model = identity.get("model") if isinstance(identity.get("model"), Mapping) else {}
    config = {
        "identity": identity,
        "agent": {"policy": identity.get("policy"), **({"model": model["model"]} if "model" in model else {})},
        "k": k, "n_bootstrap": n_bootstrap, "software": software_info(),
        "rescored": {"trajectories": os.fspath(path), "episodes": len(outcomes),
                     "unfinished_tail_bytes": os.path.getsize(path) - offset,
                     "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
        "arguments": dict(arguments or {}),
    }
    results = suite_results(config, outcomes, k=k, n_bootstrap=n_bootstrap, seed=plan.seed)
    results["run"] = {"status": "finished" if whole else "incomplete", "episodes_finished": len(outcomes),
                      "episodes_planned": len(specs), "trajectories": os.fspath(path)}
    return results
