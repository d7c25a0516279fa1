"""Importance that learns (the tiered design's adaptive optimization), per conversation.

When the agent reads a compacted original back (``read_original``) or a search hits
content that compaction had hidden, that content was needed after all. We record the tool
it came from and the identifiers the agent looked at; the next compaction of the same
conversation then scores similar content higher:

* ``learned_tool`` (+20 by default): a tool result of a tool whose output was read back;
* ``learned_identifier`` (+30): a message holding an identifier the agent read back.

``TieredPolicy`` adds these points to the tiered design's scores (so a tool result, 30 points,
becomes a residual at 60 and is kept verbatim); ``ThresholdPolicy`` truncates such
messages last. The record lives in the conversation's state (one per ``Compactor``);
``as_dict()`` is what the compaction report shows under ``details["learned"]``.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any

from .._config import Ge, check_fields
from .._contract.policy import ConversationState
from .._messages.model import Message
from .._stores.tools import SearchToolSpec
from .importance import ImportanceScore, identifiers

__all__ = ["LearnedImportance", "apply_learning", "learning_of", "record_searches"]

_KEY = "contextfold.learned_importance"
_MAX_EVENTS = 50


@dataclass
class LearnedImportance:
    """What one conversation taught about importance: tools and identifiers read back.

    Args:
        tool_points: points for a result of a tool that was read back.
        identifier_points: points for a message holding an identifier that was read back.
        max_identifiers: identifiers remembered (the oldest are forgotten first).
    """

    tool_points: Annotated[int, Ge(0)] = 20
    identifier_points: Annotated[int, Ge(0)] = 30
    max_identifiers: Annotated[int, Ge(0)] = 500
    tools: Counter[str] = field(default_factory=Counter)
    """Read-backs and search hits per tool name."""
    identifiers: OrderedDict[str, int] = field(default_factory=OrderedDict)
    """Identifiers the agent looked at, with how often."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """The last read-backs and search hits (kind, handle, tool, identifiers)."""
    _handle_tools: OrderedDict[str, str | None] = field(default_factory=OrderedDict)

    def __post_init__(self) -> None:
        check_fields(self)

    def note_handle(self, handle: str, tool_name: str | None) -> None:
        """Remember which tool a handle's original came from (the driver calls this)."""
        self._handle_tools[handle] = tool_name
        self._handle_tools.move_to_end(handle)
        while len(self._handle_tools) > 4 * self.max_identifiers:
            self._handle_tools.popitem(last=False)

    def record_read(self, handle: str, text: str) -> None:
        """The agent read ``text`` of the original behind ``handle``."""
        self._record("read_original", text, self._handle_tools.get(handle), handle)

    def record_search_hit(self, text: str, tool_name: str | None = None) -> None:
        """A search returned ``text`` (of a ``tool_name`` result, when it was one)."""
        self._record("search_hit", text, tool_name, None)

    def _record(self, kind: str, text: str, tool: str | None, handle: str | None) -> None:
        found = sorted(identifiers(text))[:50]
        if tool:
            self.tools[tool] += 1
        for token in found:
            self.identifiers[token] = self.identifiers.get(token, 0) + 1
            self.identifiers.move_to_end(token)
        while len(self.identifiers) > self.max_identifiers:
            self.identifiers.popitem(last=False)
        self.events.append({"kind": kind, "handle": handle, "tool": tool,
                            "identifiers": found[:10]})
        del self.events[:-_MAX_EVENTS]

    @property
    def empty(self) -> bool:
        """True when nothing was learned yet."""
        return not self.tools and not self.identifiers

    def factors(self, message: Message) -> list[tuple[str, int]]:
        """The learned factors of ``message`` with their points."""
        if self.empty:
            return []
        out = []
        if message.role == "tool" and message.name and self.tools.get(message.name):
            out.append(("learned_tool", self.tool_points))
        if self.identifiers and any(t in self.identifiers for t in identifiers(_text(message))):
            out.append(("learned_identifier", self.identifier_points))
        return [(name, points) for name, points in out if points > 0]

    def points(self, message: Message) -> int:
        """The learned points of ``message`` (0 when it resembles nothing read back)."""
        return sum(points for _, points in self.factors(message))

    def as_dict(self) -> dict[str, Any]:
        """A JSON-safe view for reports."""
        top = sorted(self.identifiers.items(), key=lambda kv: -kv[1])[:20]
        return {"tools": dict(self.tools), "identifiers": [k for k, _ in top],
                "identifier_count": len(self.identifiers), "events": list(self.events[-10:])}


def _text(message: Message) -> str:
    return "\n".join([message.text, *(c.arguments for c in message.tool_calls)])


def learning_of(state: ConversationState) -> LearnedImportance:
    """The conversation's record (created on first use, kept in ``state.extra``)."""
    learned = state.extra.get(_KEY)
    if not isinstance(learned, LearnedImportance):
        learned = LearnedImportance()
        state.extra[_KEY] = learned
    return learned


def learned_in(state: ConversationState) -> LearnedImportance | None:
    """The conversation's record when it has learned something, else ``None``."""
    learned = state.extra.get(_KEY)
    return learned if isinstance(learned, LearnedImportance) and not learned.empty else None


def apply_learning(
    scores: Sequence[ImportanceScore], messages: Sequence[Message],
    learned: LearnedImportance | None, threshold: int,
) -> list[ImportanceScore]:
    """``scores`` raised by what ``learned`` holds (capped at 100; residual re-decided)."""
    if learned is None or learned.empty:
        return list(scores)
    out = []
    for score, message in zip(scores, messages, strict=True):
        extra = learned.factors(message)
        if not extra:
            out.append(score)
            continue
        total = min(100, score.score + sum(points for _, points in extra))
        out.append(replace(score, score=total,
                           factors=(*score.factors, *(name for name, _ in extra)),
                           is_residual=total >= threshold))
    return out


def record_searches(
    specs: Sequence[SearchToolSpec], learned: LearnedImportance
) -> list[SearchToolSpec]:
    """``specs`` (from [`contextfold.search_tools`][contextfold.stores.search_tools]) wrapped so
    that every result they
    return (a search hit's content, a message read by handle) is recorded in ``learned``:
    what the agent had to search for is kept verbatim next time."""

    def wrap(spec: SearchToolSpec) -> SearchToolSpec:
        def run(**arguments: Any) -> dict[str, Any]:
            result = spec(**arguments)
            found = result.get("results")
            items: list[Any] = found if isinstance(found, list) else (
                [result] if "content" in result else [])
            for item in items:
                if isinstance(item, dict) and isinstance(item.get("content"), str):
                    tool = item.get("name") if item.get("role") == "tool" else None
                    learned.record_search_hit(item["content"], tool)
            return result

        return SearchToolSpec(spec.name, spec.description, spec.parameters, run)

    return [wrap(spec) for spec in specs]
