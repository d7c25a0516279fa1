"""Helpers for the compactor tests: a small summarizing policy and agent-loop steps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import contextfold as cf
from contextfold._head_tail import truncate_head_tail
from contextfold._messages.structure import leading_system_count
from contextfold.policy import (
    CompactionContext,
    PolicyOutcome,
    PolicyRun,
    SummaryRequest,
    Target,
    split_groups,
)

NOTICE = "[Compaction Notice: a conversation summary could not be generated.]"


class FoldPolicy:
    """Over the trigger (or forced): fold the oldest groups into one summary message.

    Keeps the system block and the newest groups that fit ``budget.target_tokens`` (at
    least the newest group; only it when forced), asks for one summary of the rest, and
    writes the summary (or the notice when the reply has no text) as a user message.
    """

    name = "fold"
    always_run = False

    def __init__(self, summary_tokens: int = 250) -> None:
        self.summary_tokens = summary_tokens

    def run(self, messages: Sequence[cf.Message], context: CompactionContext) -> PolicyRun:
        if not context.force and context.input_tokens(messages) <= context.budget.trigger_tokens:
            return PolicyOutcome(messages)
        lead = leading_system_count(messages)
        groups = split_groups(messages, lead)
        # what the provider counted beyond our estimate (calibration) shrinks the room
        offset = max(0, (context.known_tokens or 0) - context.measure(messages))
        room = (context.budget.target_tokens - context.measure(messages[:lead])
                - self.summary_tokens - 40 - offset)
        if context.force:  # the provider said it overflowed: keep only the newest group
            room = 0
        keep_from, used = len(groups), 0
        while keep_from > 0:
            size = sum(map(context.counter.count_message, groups[keep_from - 1].messages))
            if used + size > room and keep_from < len(groups):
                break
            used += size
            keep_from -= 1
        if keep_from == 0:
            return PolicyOutcome(messages)
        old = tuple(m for g in groups[:keep_from] for m in g.messages)
        reply = yield SummaryRequest(
            messages=old, instructions="Summarize: TASK, PROGRESS, REMAINING, DATA, DECISIONS.",
            max_tokens=self.summary_tokens, purpose="fold",
        )
        text = reply.text if reply.text is not None else NOTICE
        size = context.counter.count_text(text)
        if size > self.summary_tokens:  # a summary over its size hint is cut head+tail
            text = truncate_head_tail(text, max_chars=len(text) * self.summary_tokens // size // 2)
        summary = cf.Message(role="user", content=f"[Compaction Summary]\n{text}", source="summary")
        kept = list(messages[groups[keep_from].start:]) if keep_from < len(groups) else []
        targets = tuple(
            Target(index=i, role=m.role, method="summarized",
                      original_tokens=context.counter.count_message(m), new_tokens=0)
            for i, m in enumerate(old, lead)
        )
        return PolicyOutcome(
            [*messages[:lead], summary, *kept], method="fold", targets=targets,
            notes=() if reply.text is not None else ("summary failed; used notice",),
        )


def call_points(history: Sequence[cf.Message]) -> list[int]:
    """Lengths at which an agent loop calls the model: the prefix is valid and ends with a
    user message or a complete set of tool results."""
    points = []
    for i in range(1, len(history) + 1):
        last = history[i - 1]
        nxt = history[i] if i < len(history) else None
        ends_turn = last.role == "user" or (
            last.role == "tool" and (nxt is None or nxt.role != "tool")
        )
        if ends_turn and not cf.validate(history[:i]):
            points.append(i)
    return points


def edited(messages: Sequence[cf.Message], index: int) -> list[cf.Message]:
    """``messages`` with the text of one message changed (an edited history)."""
    out = list(messages)
    m = out[index]
    out[index] = replace(m, content=f"{m.text} (edited)") if isinstance(m.content, str) else m
    return out
