"""A scripted agent that needs a value buried in the middle of a large tool result.

Shared by the LangChain and LlamaIndex read-back tests. The agent looks the manual up
(one large result whose access code (words, no digits, so no
summary keeps it as an identifier) sits in the middle), pings three times (so the manual
is no longer among the last three tool results and compaction may cut it), then needs the
code: it answers when the code is visible, else calls ``read_original`` with the first
``ctx_`` handle in its context that it has not tried, asking for the lines that match.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import contextfold as cf
from contextfold.stores import READ_ORIGINAL_GUIDANCE

CODE = "violet harbor lantern"
CODE_RE = re.compile(r"access code is ([a-z]+ [a-z]+ [a-z]+)")
HANDLE_RE = re.compile(r"ctx_[0-9a-f]{12}")
SYSTEM = "You are a careful agent. " + READ_ORIGINAL_GUIDANCE
TASK = "Find the access code in the manual and tell me."
PINGS = 3


def manual(words: int = 7_000) -> str:
    """A long document; the access code appears once, in the middle."""
    filler = [f"Section {i}: the pump housing is rated for load class {i % 7}." for i in
              range(words // 11)]
    half = len(filler) // 2
    return " ".join([*filler[:half], f"The access code is {CODE}.", *filler[half:]])


@dataclass(frozen=True)
class Action:
    """What the agent does next: call a tool (``tool`` and ``args``) or answer (``text``)."""

    tool: str | None = None
    args: dict[str, Any] | None = None
    text: str | None = None


def decide(messages: Sequence[cf.Message]) -> Action:
    """The agent's next step given what it sees."""
    calls = [c for m in messages if m.role == "assistant" for c in m.tool_calls]
    names = [c.name for c in calls]
    if "lookup" not in names:
        return Action("lookup", {"document": "manual"})
    if names.count("ping") < PINGS:
        return Action("ping", {"n": names.count("ping") + 1})
    for m in messages:
        if m.role in ("tool", "user") and m.source != "summary":
            found = CODE_RE.search(m.text)
            if found:
                return Action(text=f"The access code is {found.group(1)}.")
    tried = {h for c in calls if c.name == "read_original" for h in HANDLE_RE.findall(c.arguments)}
    for m in messages:
        for handle in HANDLE_RE.findall(m.text):
            if handle not in tried:
                return Action("read_original", {"handle": handle, "pattern": "access code"})
    return Action(text="I could not find the access code.")


def handles_seen(messages: Sequence[cf.Message]) -> set[str]:
    """The handles present in ``messages``."""
    return {h for m in messages for h in HANDLE_RE.findall(m.text)}
