"""Context references, made lossless: a handle to every compacted original.

Whatever a policy truncates, clears, drops or summarizes gets a stable handle, the tiered
design's ``ctx_<hash>`` form: ``ctx_`` and the first 12 hex digits of a SHA-256 over the
originals' fingerprints (content only, so the same original gets the same handle in every
run). The policy writes the handle into the truncation label, the placeholder or the summary
and sets [`Target.handle`][contextfold.policy.Target.handle]; policies stay pure. What the
driver then does with the originals, and how the agent reads them back, is
`originals`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, TypeGuard

from .._messages.model import Message
from .._stores.protocols import ReferenceStore
from .._stores.reference_cache import default_references

if TYPE_CHECKING:
    from .._contract.policy import CompactionContext

__all__ = [
    "HANDLE_RE",
    "handle_for",
    "handle_text",
    "keeps_originals",
    "original_text",
    "replaced_line",
]

HANDLE_RE = re.compile(r"\bctx_[0-9a-f]{12}\b")
"""A handle anywhere in a text."""


def handle_for(messages: Message | Iterable[Message]) -> str:
    """The handle of one original message, or of a span of them (a summary's members).

    ``ctx_`` and 12 hex digits of SHA-256 over the messages' fingerprints (duplicates
    counted once), so it depends on content only and is the same in every run.
    """
    if isinstance(messages, Message):  # one message's handle is kept on it (immutable)
        return messages.derived("handle", _own_handle)
    items = list(messages)
    if len(items) == 1:
        return items[0].derived("handle", _own_handle)
    prints = dict.fromkeys(m.fingerprint for m in items)
    digest = hashlib.sha256("\n".join(prints).encode("ascii")).hexdigest()
    return "ctx_" + digest[:12]


def replaced_line(count: int, handle: str) -> str:
    """The line a summary or notice carries to name the handle of the ``count`` messages it
    stands for (``read_original`` returns their full text)."""
    return f"[Full text of the {count} messages this replaces: {handle}]"


def _own_handle(message: Message) -> str:
    return "ctx_" + hashlib.sha256(message.fingerprint.encode("ascii")).hexdigest()[:12]


def original_text(messages: Message | Sequence[Message]) -> str:
    """The text kept behind a handle: a message's text (with its reasoning and tool calls
    when it has them), or a transcript of a span, one block per message."""
    if isinstance(messages, Message):
        return _message_text(messages)
    unique = list({m.fingerprint: m for m in messages}.values())
    if len(unique) == 1:
        return _message_text(unique[0])
    blocks = []
    for m in unique:
        who = f"{m.role} ({m.name})" if m.name else m.role
        blocks.append(f"[{who}]\n{_message_text(m)}")
    return "\n\n".join(blocks)


def _message_text(m: Message) -> str:
    parts = [m.text] if m.text else []
    if m.reasoning:
        parts.append(f"[reasoning]\n{m.reasoning}")
    parts.extend(f"[tool call {c.name} id={c.id}] {c.arguments}" for c in m.tool_calls)
    return "\n\n".join(parts)


def keeps_originals(
    store: object, conversation_id: str | None
) -> TypeGuard[ReferenceStore]:
    return bool(conversation_id) and isinstance(store, ReferenceStore)


def handle_text(handle: str, context: CompactionContext) -> str:
    """How a handle is shown to the model: with the tool to call and, when originals live
    only in memory, how long they stay readable."""
    if keeps_originals(context.store, context.conversation_id):
        return f"{handle} (read_original)"
    cache = context.references if context.references is not None else default_references()
    return f"{handle} (read_original; kept in memory for the last {cache.capacity} originals)"
