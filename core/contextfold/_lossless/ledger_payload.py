"""What marks a message as the compaction ledger: its payload, and the one test of it.

The ledger (`ledger`) writes its entries into the message's
metadata as well as its text, so the next compaction merges them instead of reading the
text back. The payload travels with the message through checkpoints and stores, so it may
come back edited by hand or tampered with: only a payload of the shape the ledger writes
makes a message a ledger (merged, never counted as left out); any other is ordinary content.

Why ordinary content rather than an error: the message is still a user message of the
conversation, and as content it stays in view or goes behind a handle or into a summary
like any other; no later call of the thread fails on it. Refusing it would stop every call
of that thread until someone edits the checkpoint, while nothing in the payload is needed
to go on: the entries only index what the full history holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._messages.model import Message
from .._messages.prompt_kinds import LEDGER_SOURCE

__all__ = ["LEDGER_META", "is_ledger", "payload_entries"]

LEDGER_META = "contextfold_ledger"
"""The metadata key of the ledger's payload: ``{"entries": [...], "shed": n}``."""


def is_ledger(message: Message) -> bool:
    """True for a ledger message: a user message of the ledger's source whose payload has
    the shape the ledger writes."""
    return (message.source == LEDGER_SOURCE and message.role == "user"
            and LEDGER_META in message.metadata and payload_entries(message) is not None)


def payload_entries(message: Message) -> tuple[Mapping[str, Any], ...] | None:
    """The entries of ``message``'s ledger payload, each checked (a ``key`` and a ``text``
    that are strings, a ``handle`` that is one or ``None``, ``uses`` a whole number >= 0,
    ``values`` a list of strings); ``None`` when there is no payload or any part of it has
    another shape. Read once per message."""
    return message.derived("ledger_payload", _checked_entries)


def _checked_entries(message: Message) -> tuple[Mapping[str, Any], ...] | None:
    data = message.metadata.get(LEDGER_META)
    raw = data.get("entries", ()) if isinstance(data, Mapping) else None
    if not isinstance(raw, (list, tuple)) or not all(map(_well_formed, raw)):
        return None
    return tuple(raw)


def _well_formed(entry: object) -> bool:
    if not isinstance(entry, Mapping):
        return False
    handle, uses, values = entry.get("handle"), entry.get("uses", 0), entry.get("values", ())
    return (isinstance(entry.get("key"), str) and isinstance(entry.get("text"), str)
            and (handle is None or isinstance(handle, str))
            and type(uses) is int and uses >= 0
            and isinstance(values, (list, tuple)) and all(isinstance(v, str) for v in values))
