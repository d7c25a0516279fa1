"""What the summary service does with each kind of failure, and the window it respects:
a too-long request is split at once, a refused one falls back at once, only transient
failures are retried with waits."""

from __future__ import annotations

from typing import Any

import pytest

import contextfold as cf
from contextfold._provider_errors import error_kind, overflow_of
from contextfold._summaries.service import SummaryService
from contextfold.policy import SummaryRequest
from contextfold.testing import ScriptedSummarizer


class StatusError(Exception):
    """An SDK error carrying an HTTP status, like openai.APIStatusError."""

    def __init__(self, status: int, message: str = "refused", code: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status
        self.code = code


def too_long() -> StatusError:
    return StatusError(400, "This model's maximum context length is 4096 tokens. However, your "
                       "messages resulted in 9000 tokens.", code="context_length_exceeded")


def request(n: int = 30) -> SummaryRequest:
    msgs = [cf.Message(role="user", content="Read the files.")]
    for k in range(n):
        msgs.append(cf.Message(role="assistant", content=f"file {k} holds ID-{k:04d} " + "x " * 60))
    return SummaryRequest(messages=tuple(msgs), instructions="Summarize.")


def service(summarizer: Any, sleeps: list[float], **kw: Any) -> SummaryService:
    retry = cf.RetryPolicy(sleep=sleeps.append)
    return SummaryService(summarizer, retry=retry, counter=kw.pop("counter"), **kw)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_a_refused_request_falls_back_at_once(status: int, counter: cf.TokenCounter) -> None:
    sleeps: list[float] = []
    s = ScriptedSummarizer(default=lambda r: (_ for _ in ()).throw(StatusError(status)))
    svc = service(s, sleeps, counter=counter)
    reply = svc.answer(request(3))
    assert reply.origin == "fallback" and reply.text
    assert s.calls == 1 and sleeps == []
    assert svc.details()["refused"] == 1


@pytest.mark.parametrize("error", [StatusError(429), StatusError(503), TimeoutError("slow"),
                                   ConnectionError("reset")])
def test_transient_failures_back_off(error: BaseException, counter: cf.TokenCounter) -> None:
    sleeps: list[float] = []
    s = ScriptedSummarizer([error, "TASK: t\nDATA: ID-0000"])
    reply = service(s, sleeps, counter=counter).answer(request(1))
    assert reply.origin == "summarizer" and s.calls == 2 and sleeps == [1.0]


def test_a_request_the_model_finds_too_long_is_split_without_waiting(
    counter: cf.TokenCounter,
) -> None:
    sleeps: list[float] = []
    sizes: list[int] = []

    def model(r: SummaryRequest) -> str:
        size = counter.count_messages(r.messages)
        sizes.append(size)
        if size > 1_500:
            raise too_long()
        return "TASK: read\nDATA: " + " ".join(f"ID-{k:04d}" for k in range(30))

    svc = service(ScriptedSummarizer(default=model), sleeps, counter=counter)
    reply = svc.answer(request(30))
    assert reply.origin == "summarizer"
    assert sleeps == []
    assert sizes[0] > 1_500 and max(sizes[1:]) <= 1_500
    assert svc.details()["too_long"] >= 1 and svc.details()["splits"] >= 1


def test_requests_fit_the_window_with_room_for_the_summary(counter: cf.TokenCounter) -> None:
    # The conversation's budget is the window when the summarizer states none; the summary
    # request leaves a quarter of a small window for the reply.
    seen: list[int] = []

    def model(r: SummaryRequest) -> str:
        seen.append(counter.count_messages(r.messages) + counter.count_text(r.instructions))
        return "TASK: t"

    svc = service(ScriptedSummarizer(default=model), [], counter=counter, window=2_000)
    svc.answer(request(40))
    assert len(seen) > 1 and max(seen) <= 2_000 - 2_000 // 4


def test_error_kinds() -> None:
    assert error_kind(too_long()) == "overflow"
    assert error_kind(StatusError(401)) == "fatal"
    assert error_kind(StatusError(429)) == "transient"
    assert error_kind(StatusError(500)) == "transient"
    assert error_kind(TimeoutError()) == "transient"
    assert error_kind(RuntimeError("bug")) == "transient"  # unknown: bounded retries


def test_overflow_figures_in_each_wording() -> None:
    requested = Exception(
        "This model's maximum context length is 16385 tokens. However, you requested 17000 "
        "tokens (15000 in the messages, 2000 in the completion). Please reduce the length of "
        "the messages or completion.")
    found = overflow_of(requested)
    assert found is not None and found.limit == 16_385 and found.prompt_tokens == 15_000
    assert found.input_limit == 14_385
    anthropic = overflow_of(Exception("prompt is too long: 208310 tokens > 200000 maximum"))
    assert anthropic is not None and (anthropic.limit, anthropic.prompt_tokens) == (200_000,
                                                                                    208_310)
    assert overflow_of(StatusError(401)) is None
