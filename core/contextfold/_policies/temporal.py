"""Temporal context: the current date and time in the system prompt, refreshed on every
build (usable alone, in a pipeline, or as the ``temporal=`` option of a policy)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, tzinfo

from .._contract.policy import CompactionContext, PolicyOutcome
from .._messages.model import Message, TextPart
from .._messages.structure import SYSTEM_ROLES
from .simple import SimplePolicy

__all__ = ["TemporalContext", "local_time", "now_line"]

_NOW_LINE = re.compile(
    r"^Current date: \d{4}-\d{2}-\d{2}, Current time: \d{2}:\d{2} \([^)\n]*\)$", re.MULTILINE
)


def local_time(now: datetime | None, tz: tzinfo | None) -> tuple[datetime, str]:
    """``now`` in ``tz`` (the machine's zone when ``None``) and the label to show."""
    moment = (now if now is not None else datetime.now(tz)).astimezone(tz)
    label = "local" if tz is None else (moment.tzname() or str(tz))
    return moment, label


def now_line(now: datetime | None, tz: tzinfo | None) -> str:
    """The ``Current date: ..., Current time: ... (label)`` line for ``now`` in ``tz``."""
    moment, label = local_time(now, tz)
    return f"Current date: {moment:%Y-%m-%d}, Current time: {moment:%H:%M} ({label})"


class TemporalContext(SimplePolicy):
    """Writes the current date and time into the system prompt on every build.

    The ``Current date: ..., Current time: ... (local)`` line of the first system message is
    replaced, or appended when missing; with no system message one is added. As a pass it
    changes the messages on every call (the time moves), so run it last in a pipeline.

    Args:
        tz: the zone to show (default: the machine's local zone, labelled ``local``).
    """

    name = "temporal_context"
    always_run = True
    """The time moves: the ``Compactor`` runs this on every call, not only over the trigger."""

    def __init__(self, tz: tzinfo | None = None) -> None:
        self.tz = tz

    def line(self, now: datetime | None) -> str:
        """The date-and-time line for ``now``."""
        return now_line(now, self.tz)

    def inject(self, messages: Sequence[Message], now: datetime | None) -> Sequence[Message]:
        """``messages`` whose first system message carries the current time (the input
        itself when it already carries exactly this line)."""
        line = self.line(now)
        for i, m in enumerate(messages):
            if m.role not in SYSTEM_ROLES:
                break
            if m.source == "session":
                continue
            updated = _with_line(m, line)
            if updated is m:
                return messages
            out = list(messages)
            out[i] = updated
            return out
        return [Message(role="system", content=line), *messages]

    def apply(self, messages: Sequence[Message], context: CompactionContext) -> PolicyOutcome:
        """The messages with the time injected (method ``"temporal_context"``, or
        ``"none"`` with the input itself when the line was already current)."""
        out = self.inject(messages, context.now)
        return PolicyOutcome(messages=out, method="none" if out is messages else self.name)


def _with_line(message: Message, line: str) -> Message:
    """``message`` with its date line set to ``line`` (itself when already so)."""
    if isinstance(message.content, str):
        text = message.content
        if _NOW_LINE.search(text):
            new = _NOW_LINE.sub(lambda _m: line, text, count=1)
            return message if new == text else replace(message, content=new)
        return replace(message, content=f"{text}\n\n{line}" if text else line)
    parts = list(message.content)
    for k, part in enumerate(parts):
        if isinstance(part, TextPart) and _NOW_LINE.search(part.text):
            new = _NOW_LINE.sub(lambda _m: line, part.text, count=1)
            if new == part.text:
                return message
            parts[k] = TextPart(new)
            return replace(message, content=tuple(parts))
    return replace(message, content=(*parts, TextPart(line)))
