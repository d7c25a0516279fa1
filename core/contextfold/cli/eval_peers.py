"""The peers of the fidelity evaluation, run in the same process on the same probes.

* LangChain ``trim_messages`` (strategy ``last``, same tiktoken counter, starting on a
  human message, keeping the system prompt);
* LangChain ``SummarizationMiddleware`` triggered at the allowance, with the same
  deterministic summarizer we use (``ExtractiveSummarizer``) so only the policy differs;
* LlamaIndex ``ChatMemoryBuffer`` and ``Memory`` with the allowance as ``token_limit``
  and the same tokenizer.

Messages cross over through the frameworks' own OpenAI-format converters. Each peer is
loaded lazily; a missing framework leaves it out of the table.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Sequence
from typing import Any

from .._counting.counters import TiktokenCounter, TokenCounter
from .._messages.model import Message
from .._messages.openai import from_openai, to_openai
from .eval import Contender
from .transcripts import Transcript

__all__ = ["peer_contenders"]


def _encode_fn(counter: TokenCounter) -> Any:
    if isinstance(counter, TiktokenCounter):
        encoding = counter.encoding
        return lambda text: encoding.encode(text, disallowed_special=())
    return lambda text: list(range(counter.count_text(text)))


def _to_langchain(messages: Sequence[Message]) -> list[Any]:
    from langchain_core.messages import convert_to_messages

    return list(convert_to_messages(to_openai(messages)))


def _from_langchain(messages: Sequence[Any]) -> list[Message]:
    from langchain_core.messages import convert_to_openai_messages

    return from_openai(convert_to_openai_messages(list(messages)))


def _lc_counter(counter: TokenCounter) -> Any:
    def count(messages: Sequence[Any]) -> int:
        return counter.count_messages(_from_langchain(messages))

    return count


def _trim(transcript: Transcript, allowance: int, counter: TokenCounter) -> list[Message]:
    from langchain_core.messages import trim_messages

    kept = trim_messages(
        _to_langchain(transcript.messages), max_tokens=allowance, strategy="last",
        token_counter=_lc_counter(counter), start_on="human", include_system=True,
        allow_partial=False,
    )
    return _from_langchain(kept)


def _summarization(transcript: Transcript, allowance: int, counter: TokenCounter) -> list[Message]:
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.messages import RemoveMessage

    from .._contract.policy import SummaryRequest
    from .._summaries.extractive import ExtractiveSummarizer

    extractive = ExtractiveSummarizer()

    def summarize(messages: list[Any]) -> str:
        request = SummaryRequest(
            messages=tuple(_from_langchain(messages)), instructions="summarize"
        )
        return extractive.summarize(request)

    middleware = SummarizationMiddleware(
        model=FakeListChatModel(responses=["unused"]),
        trigger=("tokens", allowance),
        keep=("tokens", int(allowance * 0.5)),
        token_counter=_lc_counter(counter),
        summarizer=summarize,
    )
    state: dict[str, Any] = {"messages": []}
    # Replay call by call, as the agent would run it; the middleware rewrites the state.
    from .replay import step_boundaries

    history = _to_langchain(transcript.messages)
    done = 0
    for cut in step_boundaries(transcript.messages):
        state["messages"] = list(state["messages"]) + history[done:cut]
        done = cut
        update = middleware.before_model(state, None)  # type: ignore[arg-type]
        if update is not None:
            state["messages"] = [m for m in update["messages"] if not isinstance(m, RemoveMessage)]
    return _from_langchain(state["messages"])


def _to_llama(messages: Sequence[Message]) -> list[Any]:
    from llama_index.core.llms import ChatMessage

    out = []
    for d in to_openai(messages):
        extra = {k: v for k, v in d.items() if k not in ("role", "content")}
        content = d.get("content")
        out.append(ChatMessage(role=d["role"], content=content if isinstance(content, str) else
                               None, additional_kwargs=extra))
    return out


def _from_llama(messages: Sequence[Any]) -> list[Message]:
    dicts = []
    for m in messages:
        d: dict[str, Any] = {"role": str(m.role.value), "content": m.content or ""}
        d.update(m.additional_kwargs)
        dicts.append(d)
    return from_openai(dicts)


def _chat_memory_buffer(
    transcript: Transcript, allowance: int, counter: TokenCounter
) -> list[Message]:
    from llama_index.core.memory import ChatMemoryBuffer

    memory = ChatMemoryBuffer.from_defaults(token_limit=allowance, tokenizer_fn=_encode_fn(counter))
    memory.set(_to_llama(transcript.messages))
    return _from_llama(memory.get())


def _memory(transcript: Transcript, allowance: int, counter: TokenCounter) -> list[Message]:
    from llama_index.core.memory import Memory

    memory = Memory.from_defaults(
        token_limit=allowance, tokenizer_fn=_encode_fn(counter), chat_history_token_ratio=0.9,
        token_flush_size=max(allowance // 10, 1),
    )
    async def run() -> list[Any]:
        # One event loop of ours for the whole use, so the engine ``Memory`` opens is
        # disposed in the loop that created it and nothing is left to the collector.
        try:
            await memory.aput_messages(_to_llama(transcript.messages))
            return list(await memory.aget())
        finally:
            engine = getattr(getattr(memory, "sql_store", None), "_async_engine", None)
            if engine is not None:
                await engine.dispose()

    return _from_llama(asyncio.run(run()))


def peer_contenders() -> tuple[list[Contender], list[str]]:
    """The peers whose frameworks are installed, and a line for each one left out."""
    peers: list[Contender] = []
    missing: list[str] = []
    wanted = [
        ("langchain_core", "langchain", "langchain trim_messages", _trim),
        ("langchain", "langchain", "langchain SummarizationMiddleware", _summarization),
        ("llama_index.core", "llamaindex", "llamaindex ChatMemoryBuffer", _chat_memory_buffer),
        ("llama_index.core", "llamaindex", "llamaindex Memory", _memory),
    ]
    for module, extra, name, run in wanted:
        if _installed(module):
            peers.append(Contender(name, run, ours=False))
        else:
            missing.append(f"{name}: not installed (pip install \"contextfold[{extra}]\")")
    return peers, missing


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package itself is missing
        return False
