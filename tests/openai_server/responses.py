"""The Responses API endpoints of the loopback server: ``POST /v1/responses`` and
``POST /v1/responses/compact`` (OpenAI, "Create a model response", "Compact a response").

* ``/responses`` validates the input items as the API does (every ``function_call_output``
  answers an earlier ``function_call`` by ``call_id``, every ``function_call`` is answered,
  every ``compaction`` item carries content this server issued), counts the request as a
  chat-completions body (a compaction item counts as its summary), enforces the window
  with the ``context_length_exceeded`` code, and answers with ``output`` items and ``usage``;
* ``/responses/compact`` summarizes the input with the responder (a summary call) and
  returns the input's user messages followed by one ``compaction`` item whose
  ``encrypted_content`` only this server can read (signed; a later request that carries it
  reads as its summary).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

__all__ = ["chat_view", "compact", "issue", "problem", "respond"]

_KEY = b"loopback-compaction-key"


def issue(summary: str) -> str:
    """The ``encrypted_content`` of a compaction whose summary is ``summary``."""
    data = base64.b64encode(summary.encode()).decode()
    mac = hmac.new(_KEY, data.encode(), hashlib.sha256).hexdigest()
    return f"{data}.{mac}"


def _read(content: Any) -> str | None:
    """The summary behind ``encrypted_content``, ``None`` when this server did not issue it."""
    if not isinstance(content, str) or "." not in content:
        return None
    data, mac = content.rsplit(".", 1)
    if not hmac.compare_digest(mac, hmac.new(_KEY, data.encode(), hashlib.sha256).hexdigest()):
        return None
    return base64.b64decode(data).decode()


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(p.get("text", "")) for p in content or () if isinstance(p, dict))


def problem(body: dict[str, Any]) -> str | None:
    """The API's complaint about the input items, or ``None``."""
    items = body.get("input")
    if not isinstance(items, list) or not items:
        return "'input' must be a non-empty array of items"
    calls: set[str] = set()
    answered: set[str] = set()
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "function_call":
            calls.add(item.get("call_id", ""))
        elif kind == "function_call_output":
            if item.get("call_id") not in calls:
                return (f"No tool call found for function call output with call_id "
                        f"{item.get('call_id')}.")
            answered.add(item["call_id"])
        elif kind == "compaction":
            if _read(item.get("encrypted_content")) is None:
                return f"input[{i}]: the encrypted content could not be verified"
        elif kind != "message" or item.get("role") not in ("user", "assistant", "system",
                                                            "developer"):
            return f"input[{i}]: unknown item {kind!r}"
    missing = sorted(calls - answered)
    if missing:
        return f"No tool output found for function call {missing[0]}."
    return None


def chat_view(body: dict[str, Any]) -> dict[str, Any]:
    """The request as a chat-completions body, for counting and for the responders."""
    out: list[dict[str, Any]] = []
    if body.get("instructions"):
        out.append({"role": "system", "content": body["instructions"]})
    for item in body.get("input") or []:
        kind = item.get("type", "message")
        if kind == "message":
            out.append({"role": item["role"], "content": _text(item.get("content"))})
        elif kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and last.get("tool_calls"):
                last["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": item["call_id"],
                        "content": _text(item.get("output"))})
        elif kind == "compaction":
            out.append({"role": "assistant", "content": _read(item["encrypted_content"])})
    tools = [{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}}
             for t in body.get("tools") or []]
    return {"messages": out, **({"tools": tools} if tools else {})}


def _usage(prompt: int, output: int) -> dict[str, Any]:
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + output}


def respond(body: dict[str, Any], reply: Any, prompt: int, ids: Any) -> dict[str, Any]:
    """The ``/responses`` answer for ``reply`` (a responder's ``Reply``)."""
    output: list[dict[str, Any]] = []
    if reply.content:
        output.append({"type": "message", "id": f"msg_{next(ids):06d}", "status": "completed",
                       "role": "assistant", "content": [
                           {"type": "output_text", "text": reply.content, "annotations": []}]})
    for name, args in reply.tool_calls:
        output.append({"type": "function_call", "id": f"fc_{next(ids):06d}",
                       "call_id": f"call_{next(ids):06d}", "name": name,
                       "arguments": json.dumps(args), "status": "completed"})
    return {"id": f"resp_{next(ids):06d}", "object": "response", "created_at": time.time(),
            "model": body.get("model", "gpt-5"), "status": "completed", "output": output,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": body.get("tools", []),
            "usage": _usage(prompt, max(1, len(json.dumps(output)) // 4))}


def compact(body: dict[str, Any], summary: str, prompt: int, ids: Any) -> dict[str, Any]:
    """The ``/responses/compact`` answer: the user messages, then one compaction item."""
    users = [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": _text(item.get("content"))}]}
        for item in body["input"] if item.get("type", "message") == "message"
        and item.get("role") == "user"]
    item = {"type": "compaction", "id": f"cmp_{next(ids):06d}",
            "encrypted_content": issue(summary)}
    return {"id": f"resp_{next(ids):06d}", "object": "response.compaction",
            "created_at": int(time.time()), "output": [*users, item],
            "usage": _usage(prompt, max(1, len(summary) // 4))}
