"""Which identifiers of what a policy takes out of view matter most.

The one place the policies' removal marks (notices, head+tail cuts) read identifiers from,
so they rank them as the ledger does (by salience, not position) and the recognition they
rely on can change in one spot.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._identifiers.salience import identifiers_and_names, salience
from .._messages.model import Message

__all__ = ["cut_identifiers", "salient_identifiers"]

_ID_CHARS = 40  # longer identifiers are left to the handle


def salient_identifiers(messages: Sequence[Message], k: int) -> list[str]:
    """The ``k`` most salient identifiers of ``messages`` (written in tool-call arguments
    or by the user first, repeated, not boilerplate), the more recent first among equals."""
    scores = salience(messages)
    last: dict[str, int] = {}
    for i, m in enumerate(messages):
        for value in identifiers_and_names(m):
            last[value] = i
    ranked = sorted((v for v in scores if len(v) <= _ID_CHARS),
                    key=lambda v: (-scores[v], -last.get(v, -1)))
    return ranked[:k]


def cut_identifiers(message: Message) -> tuple[str, ...]:
    """The identifiers a head+tail cut of ``message`` keeps the lines of, in the order the
    message names them."""
    return identifiers_and_names(message)
