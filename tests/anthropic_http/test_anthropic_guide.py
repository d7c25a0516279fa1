"""The code of the providers guide (``docs/guides/providers.md``) runs as written, in order in
one namespace, against the loopback Messages API server (the SDK and ChatAnthropic find it
through ``ANTHROPIC_BASE_URL``), with the tool and task a reader brings defined first."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from anthropic_server import calls_as_reads
from openai_server import DocumentAgent

pytestmark = [pytest.mark.anthropic_http, pytest.mark.slow]

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "providers.md"


def blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", GUIDE.read_text(encoding="utf-8"),
                      flags=re.S | re.M)


def test_the_guide_runs_as_written(anthropic_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = DocumentAgent(20)
    # A document whose result was cleared counts as read by its call (the agent would read
    # it again otherwise: it acts only on what it is sent).
    server = anthropic_server(window=200_000, responder=calls_as_reads(agent))
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("OPENAI_API_KEY", "test")  # the OpenAI block only builds its policy
    namespace: dict[str, Any] = {
        "READ_DOCUMENT": {"name": "read_document",
                          "description": "Read one document by its number.",
                          "input_schema": DocumentAgent.TOOL["function"]["parameters"]},
        "TASK": agent.task(),
        "read_document": agent.document,
    }
    code = blocks()
    assert len(code) == 4
    for block in code:
        exec(compile(block, str(GUIDE), "exec"), namespace)
    history, compactor = namespace["history"], namespace["compactor"]
    assert server.rejected == [] and "Codes found" in history[-1].text
    # The provider's fields went out with every request; local clearing kept each request
    # under the provider's trigger, so its summary was never needed (the last resort).
    edits = [e["type"] for e in server.messages[0].body["context_management"]["edits"]]
    assert edits == ["compact_20260112"]
    assert max(r.prompt_tokens for r in server.messages) < 50_000
    assert not any(b["type"] == "compaction" for r in server.messages
                   for b in r.sent.get("content", []))
    cleared = [t for t in namespace["result"].report.targets if t.method == "cleared"]
    assert cleared or any("[Tool result cleared" in str(r.body) for r in server.messages)
    # The LangChain block built a model; the last block a compactor for provider clearing.
    assert namespace["model"] is not None
    assert compactor.policy.request_fields["context_management"]["edits"][0]["type"] == (
        "clear_tool_uses_20250919")
    assert namespace["responses_compactor"].policy.name == "openai_responses_compaction"
