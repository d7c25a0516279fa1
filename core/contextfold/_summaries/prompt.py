"""The prompt of an LLM summary call, shared by every adapter's summarizer.

The adapters only differ in how they call their framework's model; what the model is asked
(the system prompt, the request's instructions and size hint, the transcript) is the same.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._contract.policy import SummaryRequest
from .._messages.model import Message

__all__ = ["SUMMARY_SYSTEM_PROMPT", "render_transcript", "summary_prompt"]

SUMMARY_SYSTEM_PROMPT = (
    "You compress the history of an AI agent's conversation so the agent can continue its "
    "work from your summary alone. Keep every fact the agent needs: the user's goals and "
    "constraints, decisions taken, identifiers (ids, file paths, URLs, numbers, names), "
    "tool results that still matter, errors met, and what remains to be done. Do not "
    "invent anything. Write the summary only, with no preamble."
)
"""The system prompt of every summary call."""


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
    parts.append(f"<conversation>\n{render_transcript(request.messages)}\n</conversation>")
    return "\n\n".join(parts)
