"""A conversation's compaction state as a document for its store, so any process resumes it.

What the next call builds on is written after each call and read back by a process that
has not served the conversation yet (a restart, another worker):

- the prefix as sent: the previous input as a count and a digest of its messages (their
  ids and content), and the output as runs of that input's messages (by position) and the
  messages compaction inserted (summaries, the ledger, rolling blocks: whole, as the store
  codec writes messages), with its token figure;
- calibration (the provider's last reported input, the tokens added since, the ratio), the
  last output's size, the nudge counter and idle flag, and an input budget a provider
  lowered.

A process resuming a conversation checks the digest against the input it was given: the
prefix is taken only when that input starts with the very messages the state was made
from; otherwise the call starts over, as it would have without a state. So the first call
after a resume sends what the previous process would have sent, byte for byte, and no
summary is asked for again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .._counting.reported import is_token_count
from .._messages.model import Message
from .._stores import codec
from .incremental import Prefix

__all__ = ["FORMAT", "Saved", "SavedAhead", "SeenDigest", "digest", "dump_prefix", "load_prefix"]

FORMAT = 1
"""The version of the document; a document of another version is not read."""


def digest(messages: Sequence[Message]) -> str:
    """A digest of ``messages``' ids and contents, in order."""
    return str(_extended(hashlib.blake2b(digest_size=16), messages).hexdigest())


def _extended(h: Any, messages: Sequence[Message]) -> Any:
    for m in messages:
        h.update(f"{m.id or ''}\0{m.fingerprint}\0".encode())
    return h


class SeenDigest:
    """`digest` of a prefix's input, carried forward as the input grows (a call
    appends to the same list), so writing the state after each call does not hash the
    whole conversation again."""

    def __init__(self) -> None:
        self._of: list[Message] | None = None
        self._n = 0
        self._h: Any = None

    def __call__(self, seen: list[Message]) -> str:
        if self._of is not seen or len(seen) < self._n:
            self._of, self._n, self._h = seen, 0, hashlib.blake2b(digest_size=16)
        _extended(self._h, seen[self._n:])
        self._n = len(seen)
        return str(self._h.hexdigest())


def dump_prefix(prefix: Prefix, seen_digest: SeenDigest | None = None) -> dict[str, Any] | None:
    """The prefix as a JSON document, or ``None`` before any call."""
    if not prefix.primed:
        return None
    seen = prefix.seen
    position = {id(m): i for i, m in enumerate(seen)}
    runs: list[list[Any]] = []
    for m in prefix.out:
        i = position.get(id(m))
        if i is None:
            runs.append(["m", codec.encode(m)])
        elif runs and runs[-1][0] == "r" and runs[-1][2] == i:
            runs[-1][2] = i + 1
        else:
            runs.append(["r", i, i + 1])
    hexdigest = seen_digest(seen) if seen_digest is not None else digest(seen)
    return {"seen": len(seen), "digest": hexdigest, "out": runs,
            "out_tokens": prefix.out_tokens, "out_exact": prefix.out_exact,
            "fixed": prefix.fixed}


def load_prefix(doc: dict[str, Any], messages: Sequence[Message]) -> Prefix | None:
    """The prefix ``doc`` describes over ``messages`` (the resumed call's input), or
    ``None`` when that input does not start with the messages it was made from."""
    n = doc["seen"]
    if not isinstance(n, int) or len(messages) < n or digest(messages[:n]) != doc["digest"]:
        return None
    seen = list(messages[:n])
    out: list[Message] = []
    for run in doc["out"]:
        if run[0] == "r":
            out.extend(seen[run[1]:run[2]])
        else:
            out.append(codec.decode(run[1]))
    prefix = Prefix()
    prefix.seen = seen
    prefix.primed = True
    prefix.fixed = int(doc["fixed"])
    prefix.out = tuple(out)
    prefix.out_tokens, prefix.out_exact = int(doc["out_tokens"]), bool(doc["out_exact"])
    prefix.call_ids = {c.id for m in out for c in m.tool_calls}
    prefix._out_valid = None  # checked when an append needs it
    return prefix


@dataclass(frozen=True)
class SavedAhead:
    """A compaction that was being prepared ahead when the state was written."""

    size: int
    """The snapshot's length, in messages of the prefix's output."""
    trigger: float
    target: float
    known: int | None
    """The calibrated size the preparation started from."""
    started: datetime


@dataclass(frozen=True)
class Saved:
    """A conversation's compaction state, as read from or written to its store."""

    prefix: dict[str, Any] | None
    known: int | None
    since: int
    ratio: float | None
    last_output_tokens: int | None
    encouragement_count: int
    idle: bool
    idle_reason: str | None
    context_window: int
    ahead: list[Any] | None = None
    """A compaction being prepared ahead: the snapshot's length (messages of the prefix's
    output), the lowered trigger and target, the calibrated size it started from."""

    def prepared_ahead(self) -> SavedAhead | None:
        """The compaction being prepared ahead; ``None`` when there is none or the entry is
        not one this module wrote."""
        try:
            if self.ahead is None:
                return None
            size, trigger, target, known, started = self.ahead
            if not (isinstance(size, int) and _number(trigger) and _number(target)
                    and _count(known)):
                return None
            return SavedAhead(size, trigger, target, known, datetime.fromisoformat(started))
        except (TypeError, ValueError):
            return None

    def dumps(self) -> str:
        """The JSON text the store keeps."""
        doc = {"format": FORMAT, "prefix": self.prefix, "known": self.known,
               "since": self.since, "ratio": self.ratio,
               "last_output_tokens": self.last_output_tokens,
               "encouragement_count": self.encouragement_count, "idle": self.idle,
               "idle_reason": self.idle_reason, "context_window": self.context_window,
               "ahead": self.ahead}
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def loads(cls, text: str) -> Saved | None:
        """The state in ``text``; ``None`` for a document of another version or shape."""
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict) or doc.get("format") != FORMAT:
                return None
            if not (_number(doc["ratio"]) and _count(doc["known"])
                    and _count(doc["last_output_tokens"])
                    and isinstance(doc["prefix"], (dict, type(None)))
                    and isinstance(doc["idle_reason"], (str, type(None)))):
                return None
            return cls(
                prefix=doc["prefix"], known=doc["known"], since=int(doc["since"]),
                ratio=doc["ratio"], last_output_tokens=doc["last_output_tokens"],
                encouragement_count=int(doc["encouragement_count"]), idle=bool(doc["idle"]),
                idle_reason=doc["idle_reason"], context_window=int(doc["context_window"]),
                ahead=doc.get("ahead") if isinstance(doc.get("ahead"), list) else None,
            )
        except (ValueError, KeyError, TypeError):
            return None


def _number(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                             and 0 < value < float("inf"))


def _count(value: Any) -> bool:
    return value is None or is_token_count(value)
