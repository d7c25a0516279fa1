"""Progress of a long command, drawn as a bar on standard error when a terminal shows it.

When standard error is not a terminal (piped, redirected, a CI log) nothing is drawn: the
table on standard output is the result, and a log of carriage returns helps nobody. A run
that finishes within `QUIET_SECONDS` draws nothing either.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["QUIET_SECONDS", "Progress"]

QUIET_SECONDS = 1.0
"""A run is shown only once it has taken this long."""

_WIDTH = 28  # characters of the bar


class Progress:
    """Counts finished units of work out of ``total`` and redraws one line for each."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total = max(total, 1)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.clock = clock
        self.started = clock()
        self.drawn = False
        self.enabled = self.stream.isatty()

    def advance(self, what: str = "") -> None:
        """One more unit finished; ``what`` names it on the line."""
        self.done += 1
        if not self.enabled:
            return
        elapsed = self.clock() - self.started
        if elapsed < QUIET_SECONDS and not self.drawn:
            return
        filled = _WIDTH * self.done // self.total
        left = elapsed / self.done * (self.total - self.done)
        line = (f"\r{self.label} [{'#' * filled}{'.' * (_WIDTH - filled)}] "
                f"{self.done}/{self.total}, {elapsed:.0f} s, about {left:.0f} s left  {what}")
        self.stream.write(line[:120].ljust(120))
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        """Clear the bar, so what follows starts on a clean line."""
        if self.drawn:
            self.stream.write("\r" + " " * 120 + "\r")
            self.stream.flush()
            self.drawn = False
