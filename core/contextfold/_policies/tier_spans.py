"""Where the tiers of [`TieredPolicy`][contextfold.TieredPolicy] begin and end.

The tiered design draws its recency tiers in messages: the last 10 raw (tier 0), messages
10-25 (tier 1), 25-50 (tier 2), the rest (tier 3). Counted in messages, tier 0 of a chat
of short messages holds a few hundred tokens while 70% of the budget is its share, and the
budget sits unused. So tier 0 is sized by the tokens it is given: it holds the newest
groups, as many as fit the allocation it gets once tiers 1-3 took what they need of the
rest (the design's own rule: a tier's unused budget goes to tier 0). Tiers 1 and 2 keep
their widths in messages and start where tier 0 ends, so a tier 0 longer than the design's
10 messages pushes them back; a tier 0 shorter than 10 (its messages are over its
allocation) leaves them where the design puts them and its oldest groups join tier 1.

`Recency` holds running counts over the groups that go to tiers, newest first, so
the tokens and group counts of every tier for any extent of tier 0 come from two binary
searches: the search for the extent costs ``O(log n)`` per step, not a pass over the
history.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

__all__ = ["Recency", "TierSizes"]


@dataclass(frozen=True)
class TierSizes:
    """What each tier 0-3 holds, by tier."""

    tokens: dict[int, int]
    """Tokens of its groups."""
    groups: dict[int, int]
    """How many groups."""
    carried: dict[int, int]
    """Tokens of the summaries of earlier passes among them: already condensed, they are
    carried whole rather than condensed again by the tier's preservation (which would
    shrink old history geometrically, pass after pass)."""


@dataclass(frozen=True)
class Recency:
    """The groups that go to tiers (not residual, not pinned), newest first."""

    groups: tuple[int, ...]
    """Group indices, newest first."""
    lengths: tuple[int, ...]
    """``lengths[i]``: messages in the newest ``i`` groups (``len(groups) + 1`` entries)."""
    tokens: tuple[int, ...]
    """``tokens[i]``: tokens of the newest ``i`` groups (``len(groups) + 1`` entries)."""
    carried: tuple[int, ...]
    """``carried[i]``: tokens of the summaries of earlier passes among the newest ``i``
    groups (``len(groups) + 1`` entries)."""
    bounds: tuple[int, int, int]
    """The design's tier ends in messages from the end: ``tier0_size``, ``tier1_size``,
    ``tier2_size``."""

    @classmethod
    def of(cls, groups: Sequence[int], sizes: Sequence[int], tokens: Sequence[int],
           carried: Sequence[int], bounds: tuple[int, int, int]) -> Recency:
        """From the groups newest first, their message counts, their tokens and the tokens
        of earlier summaries they hold."""
        return cls(tuple(groups), tuple(accumulate(sizes, initial=0)),
                   tuple(accumulate(tokens, initial=0)), tuple(accumulate(carried, initial=0)),
                   bounds)

    def __len__(self) -> int:
        return len(self.groups)

    @property
    def by_count(self) -> int:
        """How many groups the design's tier 0 holds: those that start within the last
        ``tier0_size`` messages (a group straddling the boundary joins the recent tier)."""
        return bisect_left(self.lengths, self.bounds[0], 0, len(self.groups))

    def ends(self, extent: int) -> tuple[int, int]:
        """Where tiers 1 and 2 end (group positions, newest first) when tier 0 holds the
        newest ``extent`` groups."""
        count = self.by_count
        shift = self.lengths[extent] - self.lengths[count] if extent > count else 0
        n = len(self.groups)
        end1 = max(extent, bisect_left(self.lengths, self.bounds[1] + shift, 0, n))
        end2 = max(end1, bisect_left(self.lengths, self.bounds[2] + shift, 0, n))
        return end1, end2

    def sizes(self, extent: int) -> TierSizes:
        """The tokens, groups and carried summary tokens of each tier 0-3 when tier 0 holds
        the newest ``extent`` groups."""
        end1, end2 = self.ends(extent)
        cuts = (0, extent, end1, end2, len(self.groups))

        def per_tier(running: tuple[int, ...]) -> dict[int, int]:
            return {t: running[cuts[t + 1]] - running[cuts[t]] for t in range(4)}

        return TierSizes(per_tier(self.tokens), {t: cuts[t + 1] - cuts[t] for t in range(4)},
                         per_tier(self.carried))

    def tier_of(self, extent: int) -> dict[int, int]:
        """Each group's tier when tier 0 holds the newest ``extent`` groups."""
        end1, end2 = self.ends(extent)
        return {g: 0 if i < extent else 1 if i < end1 else 2 if i < end2 else 3
                for i, g in enumerate(self.groups)}
