"""A run's identity, and the differences between two: the one definition ``--resume`` and
``sopgym report`` share.

``sopgym eval`` stores a run's **identity** (:mod:`sopgym.bench.suite`: the policy, the model's settings that
change its answers, the plan: env ids, split, tasks per env, samples per task, seed; the env kwargs
and the SOP-Bench-only ones such as ``prompt_style``) in the trajectory file's ``run`` line and in the
results' ``config.identity``, and the software it ran on in ``config.software``.

* ``--resume`` refuses a trajectory file whose identity differs from the command's
  (:func:`identity_diff`, every key).
* ``sopgym report`` compares the runs it puts side by side on the same identity, less what is meant
  to differ between the rows of a leaderboard (the policy, the model's name and server:
  :data:`RANKED_KEYS`) and less the env set, which it reports on its own (:func:`comparable_identity`);
  the software versions are compared too, apart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["identity_diff", "comparable_identity", "settings_diff", "envs_count", "RANKED_KEYS"]

#: What a leaderboard compares (one row per value): left out when the report compares identities.
RANKED_KEYS = ("policy", "model.model", "model.base_url")


def identity_diff(old: Mapping[str, Any], new: Mapping[str, Any], labels: tuple[str, str] = ("file", "now"),
                  prefix: str = "") -> list[str]:
    """The keys (dotted, nested objects walked) whose values differ, each as
    ``"key: <labels[0]> <old value>, <labels[1]> <new value>"``; a key one side lacks reads ``<absent>``.

    Example:
        >>> identity_diff({"plan": {"seed": 0}}, {"plan": {"seed": 1}})
        ['plan.seed: file 0, now 1']
    """
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += identity_diff(a, b, labels, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {labels[0]} {json.dumps(a, default=str)[:120]}, "
                       f"{labels[1]} {json.dumps(b, default=str)[:120]}")
    return out


def _drop(identity: Mapping[str, Any], dotted: str) -> None:
    *path, last = dotted.split(".")
    target: Any = identity
    for key in path:
        target = target.get(key) if isinstance(target, Mapping) else None
    if isinstance(target, dict):
        target.pop(last, None)


def comparable_identity(identity: Mapping[str, Any] | None, envs: Sequence[str]) -> dict[str, Any] | None:
    """What must match for two runs' figures on ``envs`` (the envs both ran) to be compared: the run's
    identity without :data:`RANKED_KEYS`, without the env list, and with the tasks per env of
    ``envs`` only. None when the results record no identity (a file of an older version).
    """
    if not identity:
        return None
    out = json.loads(json.dumps(identity, default=str))
    for dotted in RANKED_KEYS:
        _drop(out, dotted)
    plan = out.get("plan")
    if isinstance(plan, dict):
        plan.pop("env_ids", None)
        if isinstance(plan.get("num_tasks"), dict):
            plan["num_tasks"] = {e: n for e, n in plan["num_tasks"].items() if e in envs}
    return out


def settings_diff(a: Mapping[str, Any], b: Mapping[str, Any], labels: tuple[str, str]) -> list[str]:
    """:func:`identity_diff` of two :func:`comparable_identity` results; when one run is a scripted
    policy (``model: null``, no model settings) the other's model settings are left out too, so a
    model run is not reported as differing from a baseline in settings the baseline has none of."""
    if a.get("model") is None or b.get("model") is None:
        a, b = ({k: v for k, v in side.items() if k != "model"} for side in (a, b))
    return identity_diff(a, b, labels)


def envs_count(n: int) -> str:
    """``"1 env"``, ``"3 envs"``."""
    return f"{n} env{'' if n == 1 else 's'}"
