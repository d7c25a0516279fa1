"""The prompt of an LLM summary call, shared by every adapter's summarizer.

The adapters only differ in how they call their framework's model; what the model is asked
(the system prompt, the request's instructions and size hint, the transcript) is the same.

Two forms:

* today's form ([`summary_prompt`][contextfold.integration.summary_prompt]): the summary system
  prompt, then one user message holding the instructions and a rendering of the span;
* the cache-true form ([`cache_true_messages`][contextfold.integration.cache_true_messages]), when
  the request carries the agent's previous request
  ([`SummaryRequest.sent`][contextfold.policy.SummaryRequest.sent]): that request's own messages,
  unchanged, then one user message
  ([`summary_instruction`][contextfold.integration.summary_instruction]) naming the span by position
  ("messages 3 to 41 above"). Everything before that last message is what the provider has just
  served, so it comes from the provider's prompt cache.

Positions name the right messages only where the provider sees the request's messages one
by one. APIs that join consecutive turns of one role (Anthropic's Messages API, Gemini,
Bedrock's Converse: a summary, the ledger and the task prompt become one user turn, tool
results join the user turn after them) renumber them, and the instruction would name other
messages: [`positions_hold`][contextfold.integration.positions_hold] tells the adapters'
summarizers which models get today's form instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._contract.policy import SummaryRequest
from .._messages.model import Message

__all__ = [
    "SUMMARY_INSTRUCTION_OPENING",
    "SUMMARY_SYSTEM_PROMPT",
    "cache_true_messages",
    "positions_hold",
    "render_transcript",
    "span_ranges",
    "summary_instruction",
    "summary_prompt",
]

SUMMARY_SYSTEM_PROMPT = (
    "You compress the history of an AI agent's conversation so the agent can continue its "
    "work from your summary alone. Keep every fact the agent needs: the user's goals and "
    "constraints, decisions taken, identifiers (ids, file paths, URLs, numbers, names), "
    "tool results that still matter, errors met, and what remains to be done. Do not "
    "invent anything. Write the summary only, with no preamble."
)
"""The system prompt of every summary call."""

SUMMARY_INSTRUCTION_OPENING = "Stop working on the task for a moment: compress messages"
"""How the instruction of a cache-true summary request starts (what tells the model, and a
test server, that this request asks for a summary)."""


def render_transcript(messages: Sequence[Message]) -> str:
    """The messages as plain text, one block per message, for a summary prompt."""
    blocks = []
    for m in messages:
        head = m.role.upper() + (f" ({m.name})" if m.name else "")
        if m.role == "tool":
            head += f" result of {m.tool_call_id}" + (" [error]" if m.is_error else "")
        lines = [f"{head}:"]
        if m.reasoning:
            lines.append(f"[reasoning] {m.reasoning}")
        if m.text:
            lines.append(m.text)
        lines.extend(f"[image {image.url[:80]}]" for image in m.images)
        lines.extend(f"[calls {c.name}({c.arguments}) id={c.id}]" for c in m.tool_calls)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def summary_prompt(request: SummaryRequest) -> str:
    """The user prompt of a summary call: instructions, size hint, then the transcript."""
    parts = _asked(request)
    parts.append(f"<conversation>\n{render_transcript(request.messages)}\n</conversation>")
    return "\n\n".join(parts)


def summary_instruction(request: SummaryRequest) -> str:
    """The last message of a cache-true summary request: which messages above to compress
    (1-based, inclusive, counting every message of the request, the system prompt
    included), then the request's instructions and size hint. Raises ``ValueError`` for a
    request without [`sent`][contextfold.policy.SummaryRequest.sent]."""
    sent = request.sent
    if sent is None:
        raise ValueError("summary_instruction needs a request with the previous request (sent)")
    opening = (
        f"{SUMMARY_INSTRUCTION_OPENING} {span_ranges(sent.positions)} above (counting "
        "every message from the first, the system prompt included) into a summary the "
        "agent can continue from in place of those messages. Do not call any tool; "
        "answer with the summary only. "
        + SUMMARY_SYSTEM_PROMPT
    )
    return "\n\n".join([opening, *_asked(request)])


def span_ranges(positions: Sequence[int]) -> str:
    """0-based increasing positions as 1-based inclusive ranges: ``"3 to 10, 12, 14 to 20"``."""
    runs: list[list[int]] = []
    for p in positions:
        if runs and p == runs[-1][1] + 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return ", ".join(f"{a + 1} to {b + 1}" if b > a else f"{a + 1}" for a, b in runs)


_JOINING_PROVIDERS = ("anthropic", "claude", "bedrock", "gemini", "google", "vertex")
"""Words in a model's class path or type name that mark an API joining consecutive turns."""


def positions_hold(model: object) -> bool:
    """Whether ``model`` (a framework's chat model or LLM object) sees a request's messages
    at the positions they were sent, so a cache-true instruction's positions name the
    messages meant: ``False`` for the APIs that join consecutive turns of one role (see the
    module docstring), judged by the model's class path and its ``_llm_type`` (a wrapper's,
    such as a LangChain model with tools bound, by what it wraps)."""
    for _ in range(8):
        inner = getattr(model, "bound", None)
        if inner is None or inner is model:
            break
        model = inner
    kind = type(model)
    names = f"{kind.__module__}.{kind.__qualname__} {getattr(model, '_llm_type', '')}".lower()
    return not any(word in names for word in _JOINING_PROVIDERS)


def cache_true_messages(request: SummaryRequest) -> list[Message]:
    """The messages of a cache-true summary request: the previous request's messages as
    they were sent, then the instruction as a user message."""
    sent = request.sent
    if sent is None:
        raise ValueError("cache_true_messages needs a request with the previous request (sent)")
    return [*sent.messages, Message("user", summary_instruction(request))]


def _asked(request: SummaryRequest) -> list[str]:
    """The request's instructions, the user's latest request and the size hint."""
    parts = [request.instructions.strip()]
    if request.open_request:
        parts.append(
            "The user's latest request, not answered yet (make it the TASK and keep it in "
            f"REMAINING):\n<request>\n{request.open_request}\n</request>"
        )
    elif request.latest_request:
        parts.append(
            "The user's latest request, made after this conversation and answered since "
            "(make it the TASK; the requests below are earlier ones):\n"
            f"<request>\n{request.latest_request}\n</request>"
        )
    if request.max_tokens:
        parts.append(f"Keep the summary under about {request.max_tokens} tokens.")
    return parts
