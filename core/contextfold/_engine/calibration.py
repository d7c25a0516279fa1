"""Calibration: how the provider's token counts compare with the counter's.

The second layer of defence anchors the next decision on the input tokens the provider
reported for the last request, plus the estimate of what was added since. For a model
without a published tokenizer (Claude), that estimate is an approximation whose error
grows with what is added: a 5,000-token tool result counted 30% high puts the figure
1,500 tokens off. So each reported usage also gives a ratio, the provider's tokens per
counted token of the request it billed, and the tokens added since are scaled by it. The
latest ratio is kept (the content a conversation sends changes slowly), bounded to
[1/4, 4] so that a usage report of another request (a proxy's, a cached prefix left out)
cannot make the figures absurd.

Decisions stay conservative: the Compactor decides on the larger of its estimate and the
calibrated figure, so a ratio under 1 (the counter counts high) changes no decision, and
a ratio over 1 (the counter counts low) makes compaction come sooner.
"""

from __future__ import annotations

__all__ = ["Calibration"]

_LOW, _HIGH = 0.25, 4.0


class Calibration:
    """Provider tokens per counted token, learned from reported usage."""

    __slots__ = ("ratio",)

    def __init__(self) -> None:
        self.ratio: float | None = None
        """The latest ratio, ``None`` before the first usage report."""

    def observe(self, reported: int, counted: int) -> None:
        """The provider billed ``reported`` input tokens for a request counted ``counted``."""
        if reported > 0 and counted > 0:
            self.ratio = min(max(reported / counted, _LOW), _HIGH)

    def scaled(self, tokens: int) -> int:
        """``tokens`` of the counter in the provider's tokens (unchanged before a report)."""
        return tokens if self.ratio is None else round(tokens * self.ratio)
