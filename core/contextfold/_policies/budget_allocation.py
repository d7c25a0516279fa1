"""Token budget allocation: fixed parts first, then residuals, then the tiers.

    total = fixed parts + safety margin + residuals + tier 0 + tier 1 + tier 2 + tier 3

1. fixed parts are measured (system prompt, tool definitions, calibration offset) or
   reserved (the current message, 50 tokens);
2. the conversation gets what is left after a safety margin (100 tokens);
3. residuals come first, up to 20% of the total;
4. the rest is split 70/20/7/3 between tiers 0-3;
5. a tier that needs less than its share gives the surplus to tier 0 (the most recent,
   uncompressed context).

The tiered design's worked example (4,000 tokens, 1,050 fixed, 400 of residuals) gives tiers of
1,715 / 490 / 171 / 73 tokens and 97.5% utilization; a test reproduces it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..errors import ConfigurationError

__all__ = ["DEFAULT_TIER_SHARES", "BudgetAllocation", "allocate_budget"]

DEFAULT_TIER_SHARES = (0.70, 0.20, 0.07, 0.03)
"""The tiered design's split of the conversation budget between tiers 0, 1, 2 and 3."""


@dataclass(frozen=True)
class BudgetAllocation:
    """Where the tokens of a compacted prompt go (the tiered design's ``TokenBudget``)."""

    total: int
    """The budget being allocated."""
    fixed: Mapping[str, int]
    """Measured or reserved parts outside the conversation, by name."""
    safety_margin: int
    """Tokens kept free for estimation error."""
    residuals: int
    """Tokens for residuals (capped at their share of the total)."""
    tiers: tuple[int, int, int, int]
    """Tokens for tiers 0-3, after the unused budget of tiers 1-3 moved to tier 0."""
    surplus_to_tier0: int = 0
    """How many tokens tiers 1-3 did not need and gave to tier 0."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Free additions for reports."""

    @property
    def fixed_total(self) -> int:
        """The sum of the fixed parts."""
        return sum(self.fixed.values())

    @property
    def allocated(self) -> int:
        """Tokens allocated: fixed parts, residuals and tiers."""
        return self.fixed_total + self.residuals + sum(self.tiers)

    @property
    def remaining(self) -> int:
        """Tokens of the total not allocated (the safety margin and rounding)."""
        return self.total - self.allocated

    @property
    def utilization_percent(self) -> float:
        """Allocated tokens as a percentage of the total."""
        return 100.0 * self.allocated / self.total if self.total else 0.0

    def as_dict(self) -> dict[str, Any]:
        """A plain dict for reports (``report.details["budget"]``)."""
        return {
            "total": self.total,
            "allocated": {
                **dict(self.fixed),
                "residuals": self.residuals,
                "tier0": self.tiers[0],
                "tier1": self.tiers[1],
                "tier2": self.tiers[2],
                "tier3": self.tiers[3],
            },
            "safety_margin": self.safety_margin,
            "surplus_to_tier0": self.surplus_to_tier0,
            "remaining": self.remaining,
            "utilization_percent": round(self.utilization_percent, 2),
            **dict(self.extra),
        }


def allocate_budget(
    total: int,
    *,
    fixed: Mapping[str, int],
    residual_tokens: int,
    tier_needs: Sequence[int] | None = None,
    safety_margin: int = 100,
    residual_share: float = 0.20,
    tier_shares: Sequence[float] = DEFAULT_TIER_SHARES,
) -> BudgetAllocation:
    """Split ``total`` tokens as the tiered design's ``allocateTokenBudget`` does.

    Args:
        total: the token budget.
        fixed: the fixed parts by name (measured or reserved).
        residual_tokens: what the residuals actually take.
        tier_needs: what tiers 1, 2 and 3 need at most; the surplus of their shares goes
            to tier 0. Without it nothing is redistributed.
        safety_margin: tokens left free (the tiered design: 100).
        residual_share: the residuals' cap as a share of ``total`` (the tiered design: 20%).
        tier_shares: the split between tiers 0-3 (the tiered design: 70/20/7/3).

    Raises:
        ConfigurationError: shares out of range or not summing to at most 1.
    """
    if total < 0 or safety_margin < 0 or residual_tokens < 0:
        raise ConfigurationError("total, safety_margin and residual_tokens must be >= 0")
    _check_shares(residual_share, tier_shares)
    fixed_parts = MappingProxyType({k: max(0, int(v)) for k, v in fixed.items()})
    conversation = max(0, total - sum(fixed_parts.values()) - safety_margin)
    residuals = min(residual_tokens, int(total * residual_share), conversation)
    remaining = conversation - residuals
    tiers = [int(remaining * share) for share in tier_shares]
    surplus = 0
    if tier_needs is not None:
        if len(tier_needs) != 3:
            raise ConfigurationError(f"tier_needs must give tiers 1-3, got {len(tier_needs)}")
        for k, need in enumerate(tier_needs, start=1):
            spare = max(0, tiers[k] - max(0, int(need)))
            tiers[k] -= spare
            surplus += spare
        tiers[0] += surplus
    return BudgetAllocation(
        total=total, fixed=fixed_parts, safety_margin=safety_margin, residuals=residuals,
        tiers=(tiers[0], tiers[1], tiers[2], tiers[3]), surplus_to_tier0=surplus,
    )


def _check_shares(residual_share: float, tier_shares: Sequence[float]) -> None:
    if not 0 <= residual_share <= 1:
        raise ConfigurationError(f"residual_share must be in [0, 1], got {residual_share}")
    if len(tier_shares) != 4 or any(not 0 <= s <= 1 for s in tier_shares):
        raise ConfigurationError(f"tier_shares must be 4 values in [0, 1], got {tier_shares}")
    if sum(tier_shares) > 1 + 1e-9:
        raise ConfigurationError(f"tier_shares must sum to at most 1, got {sum(tier_shares)}")
