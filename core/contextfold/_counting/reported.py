"""What a token count reported from outside must be before it is used.

A counting endpoint's answer and a reply's usage report come from other programs: either
may be ``None``, a string, NaN, a negative number or a bool. Only a whole number of tokens
at or above zero is one; anything else is treated as no report at all (the caller falls
back to its own count), so a nonsensical figure never becomes a budget decision or a
stored count.
"""

from __future__ import annotations

from numbers import Integral

__all__ = ["is_token_count"]


def is_token_count(value: object) -> bool:
    """Whether ``value`` is a whole number of tokens >= 0 (a bool is not one)."""
    return isinstance(value, Integral) and not isinstance(value, bool) and int(value) >= 0
