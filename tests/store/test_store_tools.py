"""Search tool specs: schemas, JSON-safe results, scoping and grants; the lazy extra."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import contextfold as cf
from contextfold.errors import ConfigurationError
from contextfold.stores import SEARCH_GUIDANCE, BaseStore, SearchToolSpec, search_tools


def _tools(store: BaseStore, *args: str, **kwargs: object) -> dict[str, SearchToolSpec]:
    return {t.name: t for t in search_tools(store, *args, **kwargs)}  # type: ignore[arg-type]


@pytest.fixture
def filled(store: BaseStore) -> BaseStore:
    store.append("me", [
        cf.Message("user", "mine iron ore at node alpha"),
        cf.Message("assistant", "x " * 2000 + "iron tail", reasoning="the travel cooldown"),
    ])
    store.append("other", [cf.Message("user", "other iron ore", reasoning="other cooldown")])
    store.join_swarm("me", "swarm")
    store.broadcast("swarm", "enemy spotted near iron belt")
    return store


def test_tools_have_names_descriptions_and_object_schemas(filled: BaseStore) -> None:
    tools = _tools(filled, "me", swarm_id="swarm")
    assert set(tools) == {"search_messages", "search_reasoning", "search_broadcasts",
                          "read_message"}
    for tool in tools.values():
        assert tool.description and tool.parameters["type"] == "object"
        assert set(tool.parameters["required"]) <= set(tool.parameters["properties"])
    assert "conversation_id" not in tools["search_messages"].parameters["properties"]
    assert "search_broadcasts" not in _tools(filled, "me")
    assert "Context is limited - use search tools for older information" in SEARCH_GUIDANCE


def test_results_are_json_safe_with_handles_that_read_back(filled: BaseStore) -> None:
    tools = _tools(filled, "me", swarm_id="swarm")
    found = tools["search_messages"](query="iron", limit=10)
    json.dumps(found)
    assert found["count"] == 3  # two messages and the broadcast copy in "me"
    long_hit = next(r for r in found["results"] if r["role"] == "assistant")
    assert len(long_hit["content"]) < 1000 and "TRUNCATED" in long_hit["content"]
    whole = tools["read_message"](handle=long_hit["handle"])
    assert whole["content"].endswith("iron tail") and whole["reasoning"] == "the travel cooldown"
    reasoning = tools["search_reasoning"](query="cooldown")
    assert [r["content"] for r in reasoning["results"]] == ["the travel cooldown"]
    news = tools["search_broadcasts"](query="enemy")
    assert news["count"] == 1 and news["results"][0]["sender_id"] == ""
    assert tools["read_message"](handle=news["results"][0]["handle"])["source"] == "broadcast"


def test_other_conversations_need_an_explicit_grant(filled: BaseStore) -> None:
    other_handle = filled.search_messages("other", "iron")[0].handle
    tools = _tools(filled, "me")
    assert "error" in tools["read_message"](handle=other_handle)
    assert "error" in tools["search_messages"](query="iron", conversation_id="other")
    granted = _tools(filled, "me", allow_conversations=["other"])
    schema = granted["search_messages"].parameters["properties"]["conversation_id"]
    assert schema["enum"] == ["me", "other"]
    hits = granted["search_messages"](query="iron", conversation_id="other")
    assert [r["conversation_id"] for r in hits["results"]] == ["other"]
    assert granted["read_message"](handle=other_handle)["content"] == "other iron ore"
    assert "error" in granted["search_messages"](query="iron", conversation_id="third")


def test_bad_arguments_come_back_as_errors(filled: BaseStore) -> None:
    tools = _tools(filled, "me", swarm_id="swarm")
    assert "error" in tools["search_messages"](query="")
    assert "error" in tools["search_messages"](query="iron", limit="lots")
    assert "error" in tools["read_message"](handle="not-a-handle")
    assert "error" in tools["read_message"](handle=None)
    assert tools["search_messages"](query="iron", limit=10_000)["count"] == 3  # clamped
    with pytest.raises(ConfigurationError):
        search_tools(filled, "")
    with pytest.raises(ConfigurationError):
        search_tools(filled, "me", allow_conversations="other")


def test_postgres_store_without_sqlalchemy_names_the_extra() -> None:
    code = """
import sys
sys.modules["sqlalchemy"] = None
import contextfold as cf
from contextfold.errors import MissingExtraError
try:
    cf.PostgresStore("postgresql://localhost/x")
except MissingExtraError as exc:
    print(type(exc).__name__, exc.package, exc.extra, "|", exc)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("MissingExtraError sqlalchemy postgres |")
    assert 'pip install "contextfold[postgres]"' in out and "PostgresStore" in out


def test_importing_the_stores_loads_no_database_driver() -> None:
    code = ("import sys, contextfold; print(sorted(m for m in ('sqlalchemy', 'psycopg') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_postgres_cases_skip_locally_but_fail_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    from store_helpers import postgres_url

    monkeypatch.delenv("CONTEXTFOLD_TEST_POSTGRES_URL", raising=False)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="CONTEXTFOLD_TEST_POSTGRES_URL"):
        postgres_url()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CONTEXTFOLD_TEST_POSTGRES_URL"):
        postgres_url()
    monkeypatch.setenv("CONTEXTFOLD_TEST_POSTGRES_URL", "postgresql://x@127.0.0.1/y")
    assert postgres_url() == "postgresql://x@127.0.0.1/y"
