"""Policies that rebuild their view at every call (LoopSlice, TurnAware) give, call by call
through one Compactor, exactly what a fresh Compactor gives for the same input: whatever a
Compactor remembers from its previous call is a cache, never a different answer.

An agent loop is simulated: the caller's history grows message by message and the model
is asked at call points (after a prompt, after a step's results, sometimes several steps
at once); now and then the caller holds an equal copy of an earlier message (a history
converted again), rewinds, or edits its history. Histories carry pins, unprompted stretches
(nudges, idle) and defects (the repair path); the policies run with and without a ledger.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold._lossless import handles
from contextfold._lossless.handles import HANDLE_BLOCK
from contextfold.policy import HeadTail
from contextfold.testing import histories

POLICIES: dict[str, Callable[[], cf.Policy]] = {
    "loop_slice": lambda: cf.LoopSlicePolicy(max_context_messages=6),
    "loop_slice_priority_ledger": lambda: cf.LoopSlicePolicy(
        max_context_messages=4, selection="priority", ledger=cf.Ledger()),
    "turn_aware": cf.TurnAwarePolicy,
    "turn_aware_ledger": lambda: cf.TurnAwarePolicy(ledger=cf.Ledger(), shape=HeadTail(
        head_cap=120, tail_cap=60)),
}
# Keys that describe the conversation's calls rather than this input: they differ between
# a compactor that saw earlier calls and a fresh one by design.
_PER_CONVERSATION = frozenset({"incremental", "cached_prefix", "references", "known_tokens"})


@st.composite
def agent_loops(draw: Any) -> tuple[list[cf.Message], list[tuple[str, int]]]:
    """A history and the caller's steps over it: ``("call", end)`` asks for
    ``history[:end]``, ``("copy", i)`` replaces message ``i`` with an equal copy from then
    on, ``("edit", i)`` with a different one."""
    messages = draw(st.one_of(
        histories(max_turns=4, max_tool_chars=3_000, images=False),
        histories(max_turns=4, max_tool_chars=3_000, images=False, imperfect=True)))
    if draw(st.integers(0, 4)) == 0:  # an autonomous stretch: stored nudges only
        messages = [dataclasses.replace(m, source="nudge") if m.role == "user" else m
                    for m in messages]
    for i in draw(st.lists(st.integers(0, len(messages) - 1), max_size=2)):
        messages[i] = messages[i].pin()
    points = [i + 1 for i, m in enumerate(messages) if m.role == "user" or (
        m.role == "tool" and (i + 1 == len(messages) or messages[i + 1].role != "tool"))]
    points = sorted({*points, len(messages)})
    kept = draw(st.lists(st.booleans(), min_size=len(points), max_size=len(points)))
    steps: list[tuple[str, int]] = []
    for end, keep in zip(points, kept, strict=True):
        if not keep and end != len(messages):
            continue  # several steps appended at once
        if end > 2 and draw(st.integers(0, 9)) == 0:
            steps.append((draw(st.sampled_from(["copy", "edit"])),
                          draw(st.integers(0, end - 2))))
        if end > 3 and draw(st.integers(0, 14)) == 0:
            steps.append(("call", draw(st.integers(1, end - 1))))  # a rewind
        steps.append(("call", end))
    return messages, steps


def _outcome(compactor: cf.Compactor, messages: list[cf.Message]) -> Any:
    try:
        result = compactor.compact(messages)
    except cf.CompactionError as error:
        return type(error), str(error)
    inputs = {id(m) for m in messages}
    report = result.report
    return (
        # The input's own objects, the same ones; what the policy made (nudges stamped with
        # the clock, a ledger, cut copies) equal, whatever its id.
        [(m, m.id, id(m)) if id(m) in inputs else (dataclasses.replace(m, created_at=None),)
         for m in result.messages],
        (report.method, report.targets, report.notes, report.repairs, report.tokens_before,
         report.tokens_after, report.messages_before, report.messages_after),
        {k: v for k, v in report.details.items() if k not in _PER_CONVERSATION},
    )


def _state(compactor: cf.Compactor) -> tuple[int, bool, str | None]:
    s = compactor.state
    return s.encouragement_count, s.idle, s.idle_reason


@settings(max_examples=max(120, settings.default.max_examples))
@given(agent_loops(), st.sampled_from(sorted(POLICIES)), st.integers(700, 6_000),
       st.sampled_from([HANDLE_BLOCK, 4]))
def test_every_call_gives_what_a_fresh_compactor_gives(counter, loop, policy, window, block):
    # Small handle blocks, so that short histories cross block ends as long ones do.
    with mock.patch.object(handles, "HANDLE_BLOCK", block):
        _run_steps(counter, loop, policy, window)


def _run_steps(counter: cf.TokenCounter, loop: tuple[list[cf.Message], list[tuple[str, int]]],
               policy: str, window: int) -> None:
    history, steps = loop
    budget = cf.Budget(context_window=window)
    make = POLICIES[policy]
    stepping = cf.Compactor(make(), budget, counter)
    caller = list(history)
    for kind, at in steps:
        if kind == "copy":
            caller[at] = dataclasses.replace(caller[at])
            continue
        if kind == "edit":
            caller[at] = dataclasses.replace(caller[at], content=f"{caller[at].text} (edited)",
                                             id=uuid.uuid4().hex)
            continue
        fresh = cf.Compactor(make(), budget, counter)
        before = _state(stepping)
        fresh.state.encouragement_count, fresh.state.idle, fresh.state.idle_reason = before
        messages = caller[:at]
        got, expected = _outcome(stepping, messages), _outcome(fresh, messages)
        for part, want in zip(got, expected, strict=True):
            assert part == want
        assert _state(stepping) == _state(fresh)
