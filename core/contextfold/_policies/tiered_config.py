"""TieredPolicy's prompts and its configuration from seed 002's environment variables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConfigurationError

__all__ = ["ENV_PREFIX", "TIER_INSTRUCTIONS", "env_kwargs"]

ENV_PREFIX = "PROMPT_COMPACTION_"
"""Seed 002's prefix of every variable."""

_EXACT = "Copy identifiers, reference numbers, names and amounts exactly as written."
TIER_INSTRUCTIONS = (
    "Summarize these messages, keeping about 70% of their detail. Preserve:\n"
    "- participants and their roles\n- actions taken and their outcomes\n"
    "- important decisions or conclusions\n- key technical details or data\n" + _EXACT,
    "Summarize these messages, keeping about 40% of their detail. Preserve:\n"
    "- main topics discussed\n- important decisions made\n"
    "- unresolved items or open questions\n- critical context for future reference\n" + _EXACT,
    "Summarize these messages briefly, keeping about 15% of their detail. Answer:\n"
    "- What was this conversation about?\n- What was concluded or decided?\n"
    "- Any critical outcomes?\n" + _EXACT,
)
"""Seed 002's summarization strategy of tiers 1, 2 and 3."""


def env_kwargs(env: Mapping[str, str]) -> dict[str, Any]:
    """``TieredPolicy`` keyword arguments from ``env`` (see ``TieredPolicy.from_env``).

    Raises:
        ConfigurationError: a variable does not parse; the message names it.
    """
    kwargs: dict[str, Any] = {}
    parsers: tuple[tuple[str, str, Any], ...] = (
        ("RESIDUALS_ENABLED", "residuals_enabled", _parse_bool),
        ("RESIDUAL_THRESHOLD", "residual_threshold", int),
        ("RESIDUAL_MAX_PERCENT", "residual_max_percent", float),
        ("BUDGET_ENABLED", "budget_allocation", _parse_bool),
        ("TIER0_SIZE", "tier0_size", int),
        ("TIER1_SIZE", "tier1_size", int),
        ("TIER2_SIZE", "tier2_size", int),
        ("TIERED_ENABLED", "tiered", _parse_bool),
    )
    for suffix, attr, parse in parsers:
        raw = env.get(ENV_PREFIX + suffix)
        if raw is None or not raw.strip():
            continue
        try:
            kwargs[attr] = parse(raw.strip())
        except ValueError as exc:
            raise ConfigurationError(f"{ENV_PREFIX}{suffix}={raw!r}: {exc}") from None
    if kwargs.pop("tiered", True) is False:
        kwargs["tier1_size"] = kwargs["tier2_size"] = 2**62
    return kwargs


def _parse_bool(raw: str) -> bool:
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")
