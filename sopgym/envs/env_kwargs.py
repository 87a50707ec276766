"""Checks of :class:`~sopgym.envs.SOPEnv`'s constructor arguments: every one, in one place.

``gymnasium.make(env_id, **kwargs)`` lands in ``SOPEnv.__init__``, which calls
:func:`check_env_kwargs` before it builds anything, so a bad value fails at ``make`` with a message
naming the argument, the expected type and range, and what was given, instead of minutes later
(``max_turns=1.5``), never (``turn_cost=nan`` silently turns every reward into NaN) or as a
confusing error deep in a backend (``sandbox="dcoker"`` at the first reset).

Integers must be integers (``numbers.Integral``, never ``bool``: ``max_turns=True`` is refused, as is
``max_turns=4.0``); real numbers must be finite.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Mapping
from typing import Any

from sopgym.sandboxes.factory import SANDBOX_KINDS
from sopgym.sop_tasks.pack import SPLITS, DomainPack

from .reward import REWARD_FUNCTIONS

__all__ = ["check_env_kwargs", "warn_inprocess_code_runner", "InProcessCodeRunnerWarning", "CODE_RUNNERS", "RENDER_MODES"]

CODE_RUNNERS = ("docker", "inprocess")
RENDER_MODES = (None, "ansi")


class InProcessCodeRunnerWarning(UserWarning):
    """``code_runner="inprocess"`` runs the agent's code on this host, as this user: trusted code only."""


def _shown(value: Any) -> str:
    text = repr(value) if not isinstance(value, int) or -10**30 < value < 10**30 else f"<{value.bit_length()}-bit integer>"
    return f"{type(value).__name__} {text[:80]}"


def _integer(name: str, value: Any, low: int, optional: bool = False) -> None:
    if optional and value is None:
        return
    expected = f"{name} must be an integer >= {low}{' or None' if optional else ''}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{expected}, got {_shown(value)}")
    if value < low:
        raise ValueError(f"{expected}, got {value}")


def _real(name: str, value: Any, *, positive: bool = False, optional: bool = False) -> None:
    """A finite real number, >= 0 (``positive``: > 0), or None when ``optional``."""
    if optional and value is None:
        return
    expected = f"{name} must be a finite number {'> 0' if positive else '>= 0'}{' or None' if optional else ''}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{expected}, got {_shown(value)}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{expected}, got {value!r}")


def _choice(name: str, value: Any, choices: tuple[Any, ...]) -> None:
    if not any(value is c or (type(value) is str and value == c) for c in choices):
        raise ValueError(f"{name} must be one of {list(choices)}, got {_shown(value)}")


def check_env_kwargs(
    *,
    domain: Any,
    split: Any,
    reward: Any,
    turn_cost: Any,
    invalid_action_penalty: Any,
    max_turns: Any,
    max_context: Any,
    length_fn: Any,
    max_tool_output_chars: Any,
    sandbox: Any,
    sandbox_options: Any,
    code_runner: Any,
    max_observation_length: Any,
    max_turn_seconds: Any,
    max_episode_seconds: Any,
    render_mode: Any,
) -> None:
    """Check every :class:`~sopgym.envs.SOPEnv` constructor argument (see its docstring for meanings).

    Raises:
        ValueError: naming the first bad argument, the expected type and range, and the value given.
    """
    if not isinstance(domain, (str, DomainPack)):
        raise ValueError(f"domain must be a registered domain name (str) or a DomainPack, got {_shown(domain)}")
    _choice("split", split, SPLITS)
    _choice("reward", reward, tuple(REWARD_FUNCTIONS))
    _real("turn_cost", turn_cost)
    _real("invalid_action_penalty", invalid_action_penalty)
    _integer("max_turns", max_turns, 1, optional=True)
    _integer("max_context", max_context, 1, optional=True)
    if length_fn is not None and not callable(length_fn):
        raise ValueError(f"length_fn must be a callable str -> int or None, got {_shown(length_fn)}")
    _integer("max_tool_output_chars", max_tool_output_chars, 16)
    _choice("sandbox", sandbox, SANDBOX_KINDS)
    if sandbox_options is not None and not (isinstance(sandbox_options, Mapping) and all(isinstance(k, str) for k in sandbox_options)):
        raise ValueError(f"sandbox_options must be a mapping of option names (str) to values, or None, got {_shown(sandbox_options)}")
    _choice("code_runner", code_runner, CODE_RUNNERS)
    _integer("max_observation_length", max_observation_length, 1)
    _real("max_turn_seconds", max_turn_seconds, positive=True, optional=True)
    _real("max_episode_seconds", max_episode_seconds, positive=True, optional=True)
    _choice("render_mode", render_mode, RENDER_MODES)


def warn_inprocess_code_runner(env_id: str) -> None:
    """Warn that ``code_runner="inprocess"`` is for trusted code only (called at construction)."""
    warnings.warn(
        f"{env_id}: code_runner='inprocess' runs the agent's code on this host as your user, outside any "
        "container: it can import sopgym and regenerate the task with its expected answer, read your files "
        "and use the network. Use it for trusted code only (your own solvers, tests); use "
        "code_runner='docker' for a model's code.",
        InProcessCodeRunnerWarning,
        stacklevel=3,
    )
