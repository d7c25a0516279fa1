"""Which identifiers of what a policy takes out of view matter most.

The one place the policies' removal marks (notices, head+tail cuts) read identifiers from
the summaries' extractor, so the recognition they rely on can change in one spot.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from .._messages.model import Message
from .._summaries.identifiers import identifiers_of

__all__ = ["cut_identifiers", "salient_identifiers"]

_ID_CHARS = 40  # longer identifiers are left to the handle


def salient_identifiers(messages: Sequence[Message], k: int) -> list[str]:
    """The ``k`` most salient identifiers of ``messages``: written in tool-call arguments or
    by the user first, then the rarer (seen in fewer messages), then the more recent."""
    seen: Counter[str] = Counter()
    written: set[str] = set()
    last: dict[str, int] = {}
    for i, m in enumerate(messages):
        found = identifiers_of(m)
        seen.update(set(found))
        for value in found:
            last[value] = i
        if (m.role == "user" and m.source is None) or m.tool_calls:
            written.update(found)
    ranked = sorted((v for v in seen if len(v) <= _ID_CHARS),
                    key=lambda v: (v not in written, seen[v], -last[v]))
    return ranked[:k]


def cut_identifiers(message: Message) -> tuple[str, ...]:
    """The identifiers a head+tail cut of ``message`` keeps the lines of, in the order the
    message names them."""
    return identifiers_of(message)
