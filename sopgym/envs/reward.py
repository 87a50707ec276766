"""Rewards: plain functions of the submitted answer and the environment's final state.

Never reads what the agent *claims* (free text, tool arguments other than the submission): only
the validated ``submit_answer`` arguments the env stored and the state snapshot. Components are
reported separately so group-based advantages can see which parts vary.

* ``dense``  = fraction of checks right (each output field, plus each expected-state key);
* ``binary`` = 1 when every check is right, else 0.

Optional shaping (off by default) is reported as its own components: ``shaping/turn_cost`` per
turn and ``shaping/invalid_action`` per invalid reply.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sopgym.scoring import field_scores

__all__ = ["RewardConfig", "REWARD_FUNCTIONS", "SHAPING_PREFIX", "outcome_components", "outcome_reward", "state_scores"]

SHAPING_PREFIX = "shaping/"
"""Reward components whose name starts with it are shaping, not the task's outcome: the outcome
rewards ignore them, and a trainer can take them out of a return (``info["reward_components"]``)."""


@dataclass(frozen=True)
class RewardConfig:
    """Args:
    kind: ``dense`` (fraction of checks right; default: gives group advantages variance) or
        ``binary`` (all right; matches the evaluator's task success exactly).
    turn_cost: subtracted every turn (0 = off). Reported as ``shaping/turn_cost``.
    invalid_action_penalty: subtracted per invalid reply (0 = off). ``shaping/invalid_action``.
    """

    kind: str = "dense"
    turn_cost: float = 0.0
    invalid_action_penalty: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in REWARD_FUNCTIONS:
            raise ValueError(f"reward must be one of {sorted(REWARD_FUNCTIONS)}, got {self.kind!r}")
        if self.turn_cost < 0 or self.invalid_action_penalty < 0:
            raise ValueError(f"shaping costs must be >= 0, got turn_cost={self.turn_cost}, invalid_action_penalty={self.invalid_action_penalty}")


def state_scores(final_state: Mapping[str, Any] | None, expected_state: Mapping[str, Any] | None) -> dict[str, bool]:
    """Each expected-state key must equal the final snapshot's value exactly (JSON equality)."""
    if not expected_state:
        return {}
    final_state = final_state or {}
    return {key: key in final_state and final_state[key] == want for key, want in expected_state.items()}


def outcome_components(
    answer: Mapping[str, Any] | None,
    expected: Mapping[str, Any],
    fields: Sequence[Any],
    final_state: Mapping[str, Any] | None = None,
    expected_state: Mapping[str, Any] | None = None,
) -> dict[str, float]:
    """``field/<name>`` and ``state/<key>`` components, each 0.0 or 1.0.

    No answer scores 0 everywhere, state included: an episode that never submits must not collect
    credit for state that happened to be right from the start.
    """
    fscores = field_scores(answer, expected, fields) if answer is not None else {f.name: False for f in fields}
    comps = {f"field/{k}": float(v) for k, v in fscores.items()}
    sscores = state_scores(final_state, expected_state)
    comps.update({f"state/{k}": float(v and answer is not None) for k, v in sscores.items()})
    return comps


def _dense(components: Mapping[str, float]) -> float:
    checks = [v for k, v in components.items() if not k.startswith(SHAPING_PREFIX)]
    return sum(checks) / len(checks) if checks else 0.0


def _binary(components: Mapping[str, float]) -> float:
    checks = [v for k, v in components.items() if not k.startswith(SHAPING_PREFIX)]
    return float(bool(checks) and all(v == 1.0 for v in checks))


REWARD_FUNCTIONS: dict[str, Callable[[Mapping[str, float]], float]] = {"dense": _dense, "binary": _binary}


def outcome_reward(kind: str, components: Mapping[str, float]) -> float:
    return REWARD_FUNCTIONS[kind](components)
