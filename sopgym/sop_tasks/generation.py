"""What a pack's ``generator.py`` is written with: the balanced target, redraws, replay records.

A generator is three steps (docs/adding_a_domain.md): **draw** facts around a target label
(:func:`balanced_target`; :func:`draw_until` when facts are redrawn until their label is the
target), **label** them with the generator's own decision table, and build the task's **records**:
the replay records (:func:`record`, :func:`records`, :func:`recorded_error`), the initial and
expected state, the difficulty.

Example::

    target = balanced_target(rng, split, index, DECISIONS)
    facts = draw_until(lambda: _draw(rng, target), lambda f: _label(f) == target, attempts=500, target=target)
    replay = {"get_claim": record({"claim_id": claim_id}, {"claim_id": claim_id, ...})}
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from sopgym.sandboxes import ERROR_KEY, canonical_args

__all__ = ["balanced_target", "draw_until", "record", "records", "recorded_error"]

T = TypeVar("T")


def balanced_target(rng: random.Random, split: str, index: int, labels: Sequence[T]) -> T:
    """The label a task is built around.

    On ``val`` and ``test`` it is ``labels[index % len(labels)]``, so the fixed splits are balanced
    exactly; on ``train`` it is drawn from ``rng``.
    """
    return labels[index % len(labels)] if split != "train" else rng.choice(labels)


def draw_until(draw: Callable[[], T], accept: Callable[[T], bool], *, attempts: int, target: Any) -> T:
    """The first of at most ``attempts`` draws that ``accept`` takes (rejection sampling to a target).

    Args:
        draw: draws one candidate (from the generator's rng).
        accept: True when the candidate's label is the target.
        attempts: the budget; a generator whose draws reach every target in a few tries never
            exhausts it.
        target: named in the error.

    Raises:
        RuntimeError: no draw was accepted (the generator's draw table cannot reach ``target``).
    """
    for _ in range(attempts):
        candidate = draw()
        if accept(candidate):
            return candidate
    raise RuntimeError(f"no draw reached the target {target!r} in {attempts} attempts")


def record(args: Mapping[str, Any], response: Any) -> dict[str, Any]:
    """One tool's replay records holding one answer: ``{canonical_args(args): response}``.

    ``args`` are the arguments a correct agent passes (after validation); any other arguments get
    the tool's ``not_found`` error.
    """
    return {canonical_args(args): response}


def records(pairs: Iterable[tuple[Mapping[str, Any], Any]]) -> dict[str, Any]:
    """One tool's replay records from ``(args, response)`` pairs, in order (a later pair with the same
    arguments replaces an earlier one)."""
    return {canonical_args(args): response for args, response in pairs}


def recorded_error(message: str) -> dict[str, str]:
    """A recorded response that the replay tier returns as the tool's error (``Error: message``)."""
    return {ERROR_KEY: message}
