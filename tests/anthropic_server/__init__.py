"""A Messages API server on loopback, for driving the real Anthropic clients (the ``anthropic``
SDK, LangChain's ``ChatAnthropic``, LlamaIndex's ``Anthropic``).

It behaves like the API where compaction is concerned:

* it validates every request as the API does (:mod:`.wire`): a top-level ``system``, roles
  that alternate from a user message, every ``tool_use`` answered by a ``tool_result`` in
  the next user message (results first, ids matching), tools defined when tool blocks are
  sent, signed ``thinking`` blocks (and the final assistant message of an open tool loop
  starting with one when thinking is on), ``max_tokens`` required, no unknown keys;
* it counts the prompt (:func:`.wire.count_request`, the tool-use system prompt included)
  and rejects an over-long request with HTTP 400 ``invalid_request_error`` in the API's two
  wordings: ``prompt is too long: N tokens > W maximum`` when the prompt alone is over the
  window, ``input length and `max_tokens` exceed context limit: P + M > W, ...`` when the
  prompt fits but not with ``max_tokens``;
* it answers ``POST /v1/messages/count_tokens`` with the same count, streams SSE with the
  documented event sequence (``message_start``, ``content_block_start`` / ``_delta`` /
  ``_stop``, ``message_delta`` with the usage, ``message_stop``);
* it applies the context-management edits of the beta ``context_management`` field
  (:mod:`.editing`): clearing old tool uses and thinking, and server-side compaction that
  returns a signed ``compaction`` block, dropping what came before such a block later;
* it records every request for assertions.

Replies come from a responder of ``tests/openai_server`` (a callable from a chat-completions
body to a ``Reply``); the server shows it the request as one (:func:`.wire.as_chat`) and adds
signed thinking when the request turns thinking on.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from openai_server import Refusal, Reply, is_summary_call

from .editing import EDITS_BETAS, apply_edits
from .wire import ENCODING, TOOL_USE_SYSTEM_PROMPT, as_chat, count_request, problem, sign

__all__ = ["ENCODING", "TOOL_USE_SYSTEM_PROMPT", "AnthropicServer", "Recorded", "as_chat",
           "calls_as_reads", "count_request", "sign"]

Responder = Callable[[dict[str, Any]], Reply]


@dataclass
class Recorded:
    """One request the server received."""

    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    prompt_tokens: int
    accepted: bool
    reason: str | None
    summary: bool
    sent: dict[str, Any] = field(default_factory=dict)
    """The reply's JSON body (or the streamed message, assembled), when one was sent."""
    applied_edits: list[dict[str, Any]] = field(default_factory=list)


class AnthropicServer:
    """The server, started on ``127.0.0.1`` (see the module docstring).

    Args:
        window: the context window, in tokens.
        responder: makes the replies; default an echo of the last user text.
    """

    def __init__(self, window: int = 16_384, responder: Responder | None = None) -> None:
        self.window = window
        self.responder = responder or _echo
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._ids = iter(range(1, 1 << 40))

    @property
    def base_url(self) -> str:
        """The address to give a client (the SDK adds ``/v1/messages``)."""
        assert self._httpd is not None, "the server is not running"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def messages(self) -> list[Recorded]:
        """Requests to ``/v1/messages``."""
        return [r for r in self.requests if r.path == "messages"]

    @property
    def rejected(self) -> list[Recorded]:
        """The requests answered with an error."""
        return [r for r in self.requests if not r.accepted]

    @property
    def agent_requests(self) -> list[Recorded]:
        """Accepted ``/v1/messages`` requests that were not summary calls."""
        return [r for r in self.messages if r.accepted and not r.summary]

    def __enter__(self) -> AnthropicServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = self.path.split("?", 1)[0].rstrip("/")
                if not (self.headers.get("x-api-key")
                        or self.headers.get("authorization", "").startswith("Bearer ")):
                    self.error(401, "authentication_error", "x-api-key header is required")
                elif not self.headers.get("anthropic-version"):
                    self.error(400, "invalid_request_error",
                               "anthropic-version: header is required")
                elif path.endswith("/v1/messages/count_tokens"):
                    server._count(self, raw)
                elif path.endswith("/v1/messages"):
                    server._serve(self, raw)
                else:
                    self.error(404, "not_found_error", f"Not found: {self.path}")

            def error(self, status: int, kind: str, message: str) -> None:
                self.json(status, {"type": "error", "error": {"type": kind, "message": message},
                                   "request_id": "req_loopback"})

            def json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("request-id", "req_loopback")
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    # -- requests -------------------------------------------------------------------------

    def _record(self, handler: Any, path: str, body: Any, tokens: int, reason: str | None,
                summary: bool = False) -> Recorded:
        headers = {k.lower(): v for k, v in handler.headers.items()}
        entry = Recorded(path, body if isinstance(body, dict) else {}, headers, tokens,
                         reason is None, reason, summary)
        with self._lock:
            self.requests.append(entry)
        return entry

    def _prepared(self, handler: Any, raw: bytes, path: str, *, needs_max_tokens: bool,
                  ) -> tuple[dict[str, Any], list[dict[str, Any]], Recorded] | None:
        """The request with its edits applied, or ``None`` after answering an error."""
        try:
            body = json.loads(raw)
        except ValueError:
            self._record(handler, path, {}, 0, "invalid JSON")
            handler.error(400, "invalid_request_error", "The request body is not valid JSON")
            return None
        found = problem(body, needs_max_tokens=needs_max_tokens)
        edits = body.get("context_management") if isinstance(body, dict) else None
        betas = set(filter(None, handler.headers.get("anthropic-beta", "").split(",")))
        if found is None and edits is not None and not EDITS_BETAS & {b.strip() for b in betas}:
            found = "context_management: Extra inputs are not permitted"
        if found is not None:
            self._record(handler, path, body, 0, found)
            handler.error(400, "invalid_request_error", found)
            return None
        effective, applied = apply_edits(body, self._summarize)
        entry = self._record(handler, path, body, count_request(effective), None,
                             is_summary_call(as_chat(effective)))
        entry.applied_edits = applied
        return effective, applied, entry

    def _count(self, handler: Any, raw: bytes) -> None:
        prepared = self._prepared(handler, raw, "count_tokens", needs_max_tokens=False)
        if prepared is not None:
            handler.json(200, {"input_tokens": prepared[2].prompt_tokens})

    def _serve(self, handler: Any, raw: bytes) -> None:
        prepared = self._prepared(handler, raw, "messages", needs_max_tokens=True)
        if prepared is None:
            return
        body, applied, entry = prepared
        prompt, max_tokens = entry.prompt_tokens, body["max_tokens"]
        overflow = None
        if prompt > self.window:
            overflow = f"prompt is too long: {prompt} tokens > {self.window} maximum"
        elif prompt + max_tokens > self.window:
            overflow = (f"input length and `max_tokens` exceed context limit: {prompt} + "
                        f"{max_tokens} > {self.window}, decrease input length or `max_tokens` "
                        "and try again")
        if overflow is not None:
            entry.accepted, entry.reason = False, overflow
            handler.error(400, "invalid_request_error", overflow)
            return
        try:
            reply = self.responder(as_chat(body))
        except Refusal as refusal:
            entry.accepted, entry.reason = False, refusal.message
            handler.error(refusal.status, "api_error", refusal.message)
            return
        message = self._message(body, reply, prompt, applied)
        entry.sent = message
        if body.get("stream"):
            _stream(handler, message)
        else:
            handler.json(200, message)

    def _summarize(self, chat_body: dict[str, Any], instructions: str | None) -> str:
        """The text of a server-side compaction: the responder's answer to a summary call."""
        messages = [{"role": "system", "content": "Compress this conversation. "
                     + (instructions or "")}, *chat_body["messages"][1:]]
        return self.responder({"messages": messages}).content or "(nothing to summarize)"

    def _message(self, body: dict[str, Any], reply: Reply, prompt: int,
                 applied: list[dict[str, Any]]) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if (body.get("thinking") or {}).get("type") == "enabled":
            thought = f"The request holds {prompt} tokens; answering it."
            content.append({"type": "thinking", "thinking": thought, "signature": sign(thought)})
        compaction = next((e for e in applied if e["type"] == "compact_20260112"), None)
        if compaction is not None:
            content.insert(0, compaction["block"])
        paused = compaction is not None and compaction["paused"]
        if not paused:
            if reply.content:
                content.append({"type": "text", "text": reply.content})
            for name, args in reply.tool_calls:
                content.append({"type": "tool_use", "id": f"toolu_{next(self._ids):024d}",
                                "name": name, "input": args})
        output = sum(len(ENCODING.encode(json.dumps(b))) for b in content) or 1
        message: dict[str, Any] = {
            "id": f"msg_{next(self._ids):024d}", "type": "message", "role": "assistant",
            "model": body["model"], "content": content,
            "stop_reason": "compaction" if paused else (
                "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"),
            "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": output,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        }
        edits = [e for e in applied if e["type"] != "compact_20260112"]  # reported as a block
        if edits:
            message["context_management"] = {"applied_edits": edits}
        return message


def _events(message: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The documented SSE sequence for ``message``."""
    start = {**message, "content": [], "stop_reason": None,
             "usage": {**message["usage"], "output_tokens": 1}}
    start.pop("context_management", None)
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        empty: dict[str, Any] = {
            "text": {"type": "text", "text": ""},
            "tool_use": {"type": "tool_use", "id": block.get("id"), "name": block.get("name"),
                         "input": {}},
            "thinking": {"type": "thinking", "thinking": "", "signature": ""},
            "compaction": {"type": "compaction", "content": None,
                           "signature": block.get("signature")},
        }.get(kind, {"type": kind})
        yield "content_block_start", {"type": "content_block_start", "index": index,
                                      "content_block": empty}
        for delta in _deltas(block):
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    end: dict[str, Any] = {"type": "message_delta",
                           "delta": {"stop_reason": message["stop_reason"],
                                     "stop_sequence": None},
                           "usage": {"output_tokens": message["usage"]["output_tokens"]}}
    if "context_management" in message:
        end["context_management"] = message["context_management"]
    yield "message_delta", end
    yield "message_stop", {"type": "message_stop"}


def _deltas(block: dict[str, Any]) -> Iterator[dict[str, Any]]:
    kind = block["type"]
    if kind == "text":
        for word in re.findall(r"\S+\s*", block["text"]):
            yield {"type": "text_delta", "text": word}
    elif kind == "tool_use":
        args = json.dumps(block["input"])
        for piece in (args[: len(args) // 2], args[len(args) // 2:]):
            yield {"type": "input_json_delta", "partial_json": piece}
    elif kind == "thinking":
        yield {"type": "thinking_delta", "thinking": block["thinking"]}
        yield {"type": "signature_delta", "signature": block["signature"]}
    elif kind == "compaction":
        yield {"type": "compaction_delta", "content": block["content"]}


def _stream(handler: Any, message: dict[str, Any]) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Cache-Control", "no-cache")
    handler.send_header("Connection", "close")
    handler.end_headers()
    for name, data in _events(message):
        handler.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        time.sleep(0)
    handler.wfile.flush()
    handler.close_connection = True


def calls_as_reads(responder: Responder, limit: int = 300) -> Responder:
    """``responder`` shown every tool call as text (``read_document({"number": 5})``), so a
    ``DocumentAgent`` counts a document whose result was cleared as read by its call, as
    its docstring says; after ``limit`` requests it refuses (a runaway loop ends in an
    error instead of never ending)."""
    seen = iter(range(limit))

    def respond(body: dict[str, Any]) -> Reply:
        if next(seen, None) is None:
            raise Refusal(400, f"more than {limit} requests: the agent loops")
        messages = [{**m, "content": (m.get("content") or "") + "".join(
            f" {c['function']['name']}({c['function']['arguments']})"
            for c in m["tool_calls"])} if m.get("tool_calls") else m
            for m in body["messages"]]
        return responder({**body, "messages": messages})

    return respond


def _echo(body: dict[str, Any]) -> Reply:
    last = next((m for m in reversed(body["messages"]) if m["role"] == "user"), {"content": ""})
    return Reply(content="echo: " + str(last.get("content") or "")[:200])
