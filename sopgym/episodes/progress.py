"""A small progress bar on stderr (standard library only; the core package has no tqdm)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["ProgressBar"]


class ProgressBar:
    """``[#######.....]  35/50 episodes  12.3/s  ETA 1s`` redrawn in place on a terminal.

    On a stream that is not a terminal (a log file, a pipe) it writes a line at most every
    ``log_interval`` seconds and one when finished, so logs are not flooded with carriage returns
    and a long run in the background still shows its progress.

    Args:
        total: the number of units of work.
        label: the unit's name.
        stream: where to draw (stderr by default).
        width: characters of the bar itself.
        min_interval: seconds between redraws on a terminal.
        initial: units already done before this bar started (a resumed run): shown as done, left
            out of the rate and the ETA.
        log_interval: seconds between lines on a non-terminal.
    """

    def __init__(self, total: int, label: str = "episodes", stream: TextIO | None = None, width: int = 30,
                 min_interval: float = 0.1, initial: int = 0, log_interval: float = 60.0) -> None:
        if total < 0:
            raise ValueError(f"total must be >= 0, got {total}")
        if not 0 <= initial <= total:
            raise ValueError(f"initial must be in [0, total={total}], got {initial}")
        self.total = total
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.min_interval = min_interval
        self.done = initial
        self.initial = initial
        self._start = time.monotonic()
        self._last_draw = float("-inf")
        self.log_interval = log_interval
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def line(self) -> str:
        """The bar's current text."""
        frac = self.done / self.total if self.total else 1.0
        filled = int(round(frac * self.width))
        elapsed = time.monotonic() - self._start
        rate = (self.done - self.initial) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        eta_text = f"ETA {_duration(eta)}" if eta == eta else "ETA ?"
        rate_text = f"{rate:.1f}/s" if rate >= 1 or rate == 0 else f"{rate * 60:.1f}/min"
        width = len(str(self.total))
        return (f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done:>{width}}/{self.total} {self.label}"
                f"  {rate_text}  {eta_text if self.done < self.total else _duration(elapsed, precise=True)}")

    def update(self, n: int = 1) -> None:
        """Record ``n`` more units done and redraw if due."""
        self.done = min(self.total, self.done + n)
        now = time.monotonic()
        if self._tty and (now - self._last_draw >= self.min_interval or self.done == self.total):
            self._last_draw = now
            self.stream.write("\r" + self.line())
            self.stream.flush()
        elif not self._tty and self.done < self.total and now - max(self._last_draw, self._start) >= self.log_interval:
            self._last_draw = now
            self.stream.write(self.line() + "\n")
            self.stream.flush()

    def close(self) -> None:
        """Finish the bar with a newline (on a non-terminal: write the final line once)."""
        self.stream.write(("\r" if self._tty else "") + self.line() + "\n")
        self.stream.flush()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _duration(seconds: float, precise: bool = False) -> str:
    """``12s`` / ``12.3s`` under a minute, ``4m05s`` under an hour, ``2h07m`` beyond."""
    if seconds < 60:
        return f"{seconds:.1f}s" if precise else f"{seconds:.0f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
