"""The summary service: retries with backoff, splitting, caching, verification, fallback,
with the same flow behind the sync and the async driver."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import contextfold as cf
from contextfold._summaries.service import SummaryService
from contextfold._summaries.split import append_to_data, split_request
from contextfold.errors import ConfigurationError
from contextfold.policy import SummaryRequest
from contextfold.stores import LRUSummaryCache
from contextfold.testing import ScriptedSummarizer

SUMMARY = "TASK: book a flight\nPROGRESS:\n1. searched\nDATA:\n- HAT001\nDECISIONS:\n- none"


def _request(*texts: str, **kw: Any) -> SummaryRequest:
    msgs = [cf.Message(role="user", content=texts[0])]
    msgs += [cf.Message(role="assistant", content=t) for t in texts[1:]]
    return SummaryRequest(messages=tuple(msgs), instructions="Summarize.", **kw)


class _Sleeps:
    def __init__(self) -> None:
        self.sync: list[float] = []
        self.async_: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sync.append(seconds)

    async def asleep(self, seconds: float) -> None:
        self.async_.append(seconds)


def _service(summarizer: Any, sleeps: _Sleeps | None = None, **kw: Any) -> SummaryService:
    sleeps = sleeps or _Sleeps()
    retry = cf.RetryPolicy(sleep=sleeps.sleep, asleep=sleeps.asleep, **kw.pop("retry", {}))
    return SummaryService(summarizer, retry=retry, **kw)


# -- retries ---------------------------------------------------------------------------


def test_retries_with_exponential_backoff_until_success() -> None:
    sleeps = _Sleeps()
    s = ScriptedSummarizer([TimeoutError("t1"), ConnectionError("c2"), "", SUMMARY])
    service = _service(s, sleeps)
    reply = service.answer(_request("Book flight HAT001"))
    assert reply.text == SUMMARY and reply.origin == "summarizer"
    assert s.calls == 4 and service.llm_calls == 4
    assert sleeps.sync == [1.0, 2.0, 4.0]  # the threshold design: 1 s, 2 s, 4 s...
    assert service.details()["retries"] == 3


def test_backoff_is_capped_and_configurable() -> None:
    policy = cf.RetryPolicy(max_attempts=7, base_delay=1.0, factor=2.0, max_delay=16.0)
    assert [policy.delay(k) for k in range(1, 7)] == [1, 2, 4, 8, 16, 16]
    assert cf.RetryPolicy(base_delay=0).delay(4) == 0


def test_zero_delays_do_not_sleep() -> None:
    sleeps = _Sleeps()
    s = ScriptedSummarizer([RuntimeError("x"), SUMMARY])
    _service(s, sleeps, retry={"base_delay": 0}).answer(_request("hi"))
    assert sleeps.sync == [] and s.calls == 2


async def test_async_driver_runs_the_same_flow() -> None:
    sleeps = _Sleeps()
    s = ScriptedSummarizer([TimeoutError("t1"), ConnectionError("c2"), SUMMARY])
    service = _service(s, sleeps)
    reply = await service.aanswer(_request("Book flight HAT001"))
    assert reply.text == SUMMARY and s.calls == 3
    assert sleeps.async_ == [1.0, 2.0] and sleeps.sync == []


async def test_async_timeout_counts_as_a_failure() -> None:
    class Slow:
        async def asummarize(self, request: SummaryRequest) -> str:
            await asyncio.sleep(5)
            return "late"

    service = _service(Slow(), retry={"base_delay": 0, "max_attempts": 2, "timeout": 0.01})
    reply = await service.aanswer(_request("Order #KT-9284"))
    assert reply.origin == "fallback" and reply.text is not None
    assert "#KT-9284" in reply.text and "late" not in reply.text
    assert "TimeoutError" in (reply.error or "")


def test_sync_timeout_counts_as_a_failure_without_waiting_for_the_call() -> None:
    import threading

    release = threading.Event()
    finished: list[bool] = []

    class Stuck:
        def summarize(self, request: SummaryRequest) -> str:
            release.wait(10)
            finished.append(True)
            return "late"

    service = _service(Stuck(), retry={"base_delay": 0, "max_attempts": 2, "timeout": 0.01},
                       on_failure="notice")
    reply = service.answer(_request("x"))
    still_running = not finished
    release.set()
    assert still_running  # the reply came back while the calls were still running
    assert reply.text is None and reply.origin == "failed" and service.llm_calls == 2


# -- failure safety ---------------------------------------------------------------------


def test_exhausted_retries_fall_back_to_the_extractive_summary() -> None:
    s = ScriptedSummarizer(default=lambda r: (_ for _ in ()).throw(RuntimeError("HTTP 503")))
    service = _service(s, retry={"base_delay": 0})
    reply = service.answer(_request("Refund order ORD-77123 to ana@example.com"))
    assert s.calls == 5
    assert reply.origin == "fallback" and reply.text is not None
    assert "HTTP 503" not in reply.text
    assert "ORD-77123" in reply.text and "ana@example.com" in reply.text
    assert reply.error == "RuntimeError: HTTP 503"
    assert service.details()["fallbacks"] == 1 and service.details()["failures"] == 1
    assert any("used the extractive summary" in n for n in service.notes)


def test_notice_mode_replies_without_text() -> None:
    s = ScriptedSummarizer(default=lambda r: (_ for _ in ()).throw(RuntimeError("down")))
    reply = _service(s, retry={"base_delay": 0}, on_failure="notice").answer(_request("x"))
    assert reply.text is None and reply.origin == "failed" and "down" in (reply.error or "")


def test_non_text_answers_are_failures() -> None:
    class Weird:
        def summarize(self, request: SummaryRequest) -> Any:
            return {"summary": "not text"}

    reply = _service(Weird(), retry={"base_delay": 0}, on_failure="notice").answer(_request("x"))
    assert reply.text is None


def test_failed_summaries_are_not_cached() -> None:
    cache = LRUSummaryCache()
    s = ScriptedSummarizer(default=lambda r: (_ for _ in ()).throw(RuntimeError("down")))
    _service(s, retry={"base_delay": 0}, cache=cache).answer(_request("x"))
    assert len(cache) == 0


# -- cache --------------------------------------------------------------------------------


def test_cache_hits_make_no_calls() -> None:
    cache = LRUSummaryCache(maxsize=4)
    s = ScriptedSummarizer(default=SUMMARY)
    first = _service(s, cache=cache)
    assert first.answer(_request("Book flight HAT001")).origin == "summarizer"
    second = _service(s, cache=cache)
    reply = second.answer(_request("Book flight HAT001"))
    assert reply.origin == "cache" and reply.text is not None and "HAT001" in reply.text
    assert s.calls == 1 and second.llm_calls == 0 and second.details()["cache_hits"] == 1


def test_lru_evicts_the_least_recently_used() -> None:
    cache = LRUSummaryCache(maxsize=2)
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") == "A"  # a is now the most recent
    cache.put("c", "C")
    assert "b" not in cache and cache.get("a") == "A" and cache.get("c") == "C"
    with pytest.raises(ConfigurationError):
        LRUSummaryCache(maxsize=0)


def test_a_store_persists_the_cache_and_a_broken_store_is_a_miss() -> None:
    from contextfold._summaries.cache import cache_for

    store = cf.MemoryStore()
    cache = cache_for(LRUSummaryCache(), store)
    assert cache is not None
    cache.put("k", "text")
    assert store.get_summary("k") == "text"
    fresh = cache_for(LRUSummaryCache(), store)
    assert fresh is not None and fresh.get("k") == "text"

    class Broken:
        def get_summary(self, key: str) -> str:
            raise OSError("disk gone")

        def put_summary(self, key: str, text: str) -> None:
            raise OSError("disk gone")

    broken = cache_for(None, Broken())
    assert broken is not None
    broken.put("k", "v")  # logged, not raised
    assert broken.get("k") == "v"  # the memory layer still has it


# -- splitting ----------------------------------------------------------------------------


def test_an_input_over_the_window_is_split_and_merged(counter: cf.TokenCounter) -> None:
    texts = [f"Step {i}: checked order ORD-{10_000 + i} " + "word " * 120 for i in range(12)]
    request = _request(*texts, max_input_tokens=600)
    s = ScriptedSummarizer(default=lambda r: f"TASK: t\nDATA:\n- part {r.purpose}")
    service = _service(s, counter=counter)
    reply = service.answer(request)
    parts = [r for r in s.requests if ":part" in r.purpose]
    merges = [r for r in s.requests if r.purpose.endswith(":merge")]
    assert len(parts) >= 2 and len(merges) == 1 and s.calls == len(parts) + 1
    for part in parts:
        assert counter.count_messages(part.messages) + counter.count_text(part.instructions) <= 600
    assert sum(len(p.messages) for p in parts) == len(request.messages)  # nothing lost
    assert "summaries of consecutive parts" in merges[0].instructions
    assert reply.text is not None and service.details()["splits"] == 1
    for i in range(12):  # verification restores what the merge left out
        assert f"ORD-{10_000 + i}" in reply.text


def test_the_summarizer_window_attribute_also_splits(counter: cf.TokenCounter) -> None:
    class Small(ScriptedSummarizer):
        max_input_tokens = 300

    s = Small(default="TASK: t")
    _service(s, counter=counter).answer(_request(*["word " * 100] * 8))
    assert s.calls > 2


def test_a_group_never_splits_across_parts_unless_alone_too_big(counter: cf.TokenCounter) -> None:
    call = cf.ToolCall(id="c1", name="read_file", arguments="{}")
    msgs = (
        cf.Message(role="user", content="go " * 50),
        cf.Message(role="assistant", tool_calls=(call,)),
        cf.Message(role="tool", content="data " * 60, tool_call_id="c1"),
        cf.Message(role="user", content="huge " * 900),
    )
    request = SummaryRequest(messages=msgs, instructions="Summarize.")
    parts = split_request(request, 200, counter)
    for part in parts:
        assert not cf.validate(part.messages) or part.messages[0].role != "tool"
    assert any(msgs[1] in p.messages and msgs[2] in p.messages for p in parts)
    assert sum("[transcript part" in p.messages[0].text for p in parts) >= 4


# -- verification -------------------------------------------------------------------------


def test_verification_appends_missing_identifiers_under_data() -> None:
    s = ScriptedSummarizer([SUMMARY])
    service = _service(s)
    request = _request(
        "Rebook HAT001 for mia_li_3668 on 2024-05-20; refund $120.50 to card credit_card_4421"
    )
    reply = service.answer(request)
    assert reply.text is not None
    lines = reply.text.splitlines()
    data = lines.index("DATA:")
    decisions = lines.index("DECISIONS:")
    added = lines[data + 1 : decisions]
    assert added == ["- HAT001", "- mia_li_3668", "- 2024-05-20", "- $120.50", "- credit_card_4421"]
    assert service.details()["verified_missing"] == 4
    assert any("appended 4 identifier" in n for n in service.notes)


def test_append_to_data_makes_the_section_when_missing() -> None:
    assert append_to_data("All done.", ["X-12"]) == "All done.\nDATA:\n- X-12"


def test_extractive_default_is_not_an_llm_call() -> None:
    service = SummaryService()
    reply = service.answer(_request("Order #KT-9284"))
    assert reply.text is not None and "#KT-9284" in reply.text
    assert service.llm_calls == 0 and service.details()["summarizer_calls"] == 1


def test_compact_routes_through_the_service(counter: cf.TokenCounter) -> None:
    from compactor_helpers import FoldPolicy

    from contextfold.testing import generate_history

    history = generate_history(3, turns=8, tool_chars=600)
    budget = cf.Budget(context_window=3_000, output_reserve=500)
    result = cf.compact(history, policy=FoldPolicy(), budget=budget, counter=counter)
    assert result.report.method == "fold"
    summary = next(m for m in result.messages if m.source == "summary").text
    assert "TASK:" in summary and "DATA:" in summary  # the extractive default
    assert result.report.llm_calls == 0
    assert result.report.details["summary"]["summarizer_calls"] == 1


def test_verification_stays_within_the_size_hint_and_says_what_did_not_fit(
    counter: cf.TokenCounter,
) -> None:
    ids = [f"ORD-{10_000 + i}" for i in range(200)]
    request = _request("Orders: " + ", ".join(ids), max_tokens=120)
    service = _service(ScriptedSummarizer(["TASK: orders\nDATA:\n- ORD-10000"]),
                       counter=counter)
    reply = service.answer(request)
    assert reply.text is not None and counter.count_text(reply.text) <= 120
    details = service.details()
    assert details["verified_missing"] > 0 and details["verified_unfit"] > 0
    assert details["verified_missing"] + details["verified_unfit"] == 199
    assert any("did not fit its size hint" in n and "ORD-" in n for n in service.notes)
