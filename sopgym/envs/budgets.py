"""The wall-time budgets over the tools: one per turn, one per episode.

A reply may hold 16 calls, and each code run may take its tool's whole deadline (10 s for
``run_python``): without a budget one ``env.step`` could hold a container for minutes. The env
charges every tool call's wall time (from the tool box's call to its answer, container start
included) to both budgets:

* ``turn_s``: the tools of one reply (one ``step``);
* ``episode_s``: the tools of the whole episode.

Each call is given the time left (the smaller of the two), which the verifiable tier uses as a
deadline for the agent's code; a call that cannot be stopped (replay, stateful tools, SOP-Bench's
tools) is charged after it returns. Once a budget is spent (its time used reaches the limit), the
rest of the reply is not run and the env truncates the episode with the budget's cause
(``turn_time`` or ``episode_time``, the turn's when both are spent by the same call).

Only the configured limits ever reach ``info`` or the record, never a measured time: the same
seeded episode gives the same ``info`` however fast the host is, unless a budget is spent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["WallTimeBudget", "TURN_TIME", "EPISODE_TIME", "clock"]

TURN_TIME = "turn_time"
EPISODE_TIME = "episode_time"

T = TypeVar("T")

#: The clock the budgets read (seconds; a module attribute so a test can substitute a fake one).
clock = time.monotonic


class WallTimeBudget:
    """Wall time the tools may spend per turn and per episode.

    Args:
        turn_s: seconds per reply, or None for no per-turn budget.
        episode_s: seconds per episode, or None for no per-episode budget.
    """

    def __init__(self, turn_s: float | None, episode_s: float | None) -> None:
        self.turn_s = turn_s
        self.episode_s = episode_s
        self.start_episode()

    def start_episode(self) -> None:
        self.spent: str | None = None
        """``turn_time`` or ``episode_time`` once that budget is spent, else None."""
        self._episode_used = 0.0
        self._turn_used = 0.0

    def start_turn(self) -> None:
        self._turn_used = 0.0

    def time_left(self) -> float | None:
        """Seconds the next call may take (None: no budget applies)."""
        left = [limit - used for limit, used in ((self.turn_s, self._turn_used), (self.episode_s, self._episode_used))
                if limit is not None]
        return min(left) if left else None

    def run(self, call: Callable[..., T]) -> T:
        """``call(time_left_s=<the time left>)``, its wall time charged to both budgets."""
        started = clock()
        try:
            return call(time_left_s=self.time_left())
        finally:
            self.charge(clock() - started)

    def charge(self, seconds: float) -> None:
        """Charge wall time to both budgets; marks a budget spent when it has run out."""
        self._turn_used += seconds
        self._episode_used += seconds
        if self.turn_s is not None and self._turn_used >= self.turn_s:
            self.spent = TURN_TIME
        elif self.episode_s is not None and self._episode_used >= self.episode_s:
            self.spent = EPISODE_TIME

    def describe(self) -> str:
        """The spent budget, by its configured limit (never the time measured)."""
        assert self.spent is not None
        if self.spent == TURN_TIME:
            return f"the turn's wall-time budget over the tools ({self.turn_s:g} s, max_turn_seconds) is spent"
        return f"the episode's wall-time budget over the tools ({self.episode_s:g} s, max_episode_seconds) is spent"
