"""Argument types and parsers the commands share (argparse ``type=`` callables and ``--env-arg`` items).

A type callable raises :class:`argparse.ArgumentTypeError` with the expected and the given value, so
argparse prints ``argument --seed: expected an integer >= 0, got -5`` and exits with code 2.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["int_at_least", "positive_int", "non_negative_int", "number_in", "json_object", "duration", "parse_env_args"]


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer ``>= low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def number_in(low: float, high: float = float("inf")) -> Callable[[str], float]:
    """An argparse type: a number in ``[low, high]``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number in [{low}, {high}], got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected a number in [{low}, {high}], got {text}")
        return value

    parse.__name__ = f"number in [{low}, {high}]"
    return parse


def json_object(text: str) -> dict[str, Any]:
    """An argparse type: a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r} ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {type(value).__name__}")
    return value


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def duration(text: str) -> float | str:
    """An argparse type: a duration > 0 in seconds (``90``, ``90s``, ``30m``, ``12h``, ``7d``, ``2w``), or
    the string ``never``."""
    if text.strip().lower() == "never":
        return "never"
    number, unit = text.strip(), "s"
    if number and number[-1].lower() in _DURATION_UNITS:
        number, unit = number[:-1], number[-1].lower()
    try:
        value = float(number) * _DURATION_UNITS[unit]
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a duration > 0 such as 3600, 90s, 30m, 12h, 7d, 2w, or never; "
                                         f"got {text!r}")
    return value


def parse_env_args(items: Sequence[str]) -> dict[str, Any]:
    """``--env-arg`` items as ``gymnasium.make`` kwargs; a value is read as JSON when it parses, else kept
    as a string: ``["max_turns=4", "tools_runner=subprocess"]`` -> ``{"max_turns": 4, "tools_runner": "subprocess"}``.

    Raises:
        ValueError: an item that is not ``KEY=VALUE`` with ``KEY`` an identifier.
    """
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
