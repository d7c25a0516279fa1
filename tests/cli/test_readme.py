"""Every command and snippet in the README runs as written after the README's first install.

The blocks are read from the README itself, so an edited example is tested as edited. The
Python snippets run in order in one namespace, as a reader would run them, with the few
objects the README leaves to the reader (their model, tools and messages) defined first.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

import contextfold as cf
from pg_scratch import scratch_schema

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
BIN = Path(sys.executable).parent
POSTGRES_PLACEHOLDER = "postgresql+psycopg://user@host/db"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README, flags=re.S | re.M)


def _readers_objects() -> dict[str, Any]:
    """What the README's snippets take from the reader: a chat model, tools, an LLM and
    OpenAI-format messages."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from llama_index.core.llms.mock import MockFunctionCallingLLM

    class ChatModel(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            return self

    def lookup_order(order_id: str) -> str:
        """Look up an order by its id."""
        return f"order {order_id}: shipped"

    return {
        "chat_model": ChatModel(messages=iter([AIMessage("done")] * 10)),
        "tools": [lookup_order],
        "my_tools": [],
        "base_llm": MockFunctionCallingLLM(),
        "openai_messages": [
            {"role": "system", "content": "You are a support agent."},
            {"role": "user", "content": "Where is order 4412?"},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "c1", "type": "function",
                "function": {"name": "lookup_order", "arguments": '{"order_id": "4412"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "order 4412: shipped"},
            {"role": "assistant", "content": "Order 4412 has shipped."},
        ],
    }


def test_the_readme_starts_with_the_two_setup_commands() -> None:
    first = README.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert len(first) == 2
    assert first[0].endswith(".venv/bin/contextfold demo") and '".[all]"' in first[0]
    assert first[1].endswith(".venv/bin/python -m pytest -q") and '".[dev]"' in first[1]
    # The second is what .ci/run executes (this suite); the first one's demo runs below.


def test_the_demo_command_runs_as_written(tmp_path: Path) -> None:
    first = README.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()[0]
    demo = shlex.split(first.rsplit("&&", 1)[1])
    assert demo[0] == ".venv/bin/contextfold"
    done = subprocess.run([str(BIN / "contextfold"), *demo[1:]], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reference numbers in the briefing 43/43" in done.stdout
    assert (tmp_path / "contextfold-data" / "report.html").is_file()


# Raised inside llama-index-workflows when a workflow is built (see tests/llamaindex/conftest.py).
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning:inspect")
def test_the_python_snippets_run_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = os.environ.get("CONTEXTFOLD_TEST_POSTGRES_URL")
    snippets = _blocks("python")
    assert len(snippets) >= 5
    if url is None and any(POSTGRES_PLACEHOLDER in s for s in snippets):
        if os.environ.get("CI"):
            pytest.fail("CI must provide PostgreSQL (.ci/services/postgres.sh)")
        pytest.skip("the store snippet needs PostgreSQL (CONTEXTFOLD_TEST_POSTGRES_URL)")
    monkeypatch.chdir(tmp_path)  # the snippets write history.db where they run
    opened: list[cf.stores.BaseStore] = []  # the snippets show stores side by side
    for kind in ("SQLiteStore", "PostgresStore"):
        real = getattr(cf, kind)

        def opening(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            opened.append(_real(*args, **kwargs))
            return opened[-1]

        monkeypatch.setattr(cf, kind, opening)
    namespace = _readers_objects()
    with ExitStack() as scratch:
        if url is not None:  # the database's own schema is left alone
            url = scratch.enter_context(scratch_schema(url))
        _run_snippets(snippets, url, namespace, opened, tmp_path)


def _run_snippets(snippets: list[str], url: str | None, namespace: dict[str, Any],
                  opened: list[cf.stores.BaseStore], tmp_path: Path) -> None:
    try:
        for number, snippet in enumerate(snippets, start=1):
            code = snippet.replace(POSTGRES_PLACEHOLDER, url or POSTGRES_PLACEHOLDER)
            try:
                exec(compile(code, f"README.md python block {number}", "exec"), namespace)
            except Exception as exc:  # name the block that failed
                pytest.fail(f"README python block {number} failed: {exc!r}\n{snippet}")
        # What the snippets built is real: a compacted result, a store with the messages.
        assert namespace["result"].messages and (tmp_path / "history.db").is_file()
        assert namespace["store"].load("agent-7")
        assert any(type(s).__name__ == "PostgresStore" for s in opened)
    finally:
        for store in opened:
            store.close()


def test_every_name_the_readme_mentions_exists() -> None:
    import importlib

    for name in set(re.findall(r"\bcf\.([A-Za-z_]+)", README)):
        assert hasattr(cf, name), f"README mentions cf.{name}, which the root does not export"
    for module, name in set(re.findall(r"`(contextfold(?:\.[a-z_]+)+)\.([A-Z][A-Za-z]+)`", README)):
        assert hasattr(importlib.import_module(module), name), f"{module}.{name}"


@pytest.mark.parametrize("command", [
    line for block in _blocks("bash")[1:] for line in block.strip().splitlines()
])
def test_each_command_line_example_runs(command: str, tmp_path: Path) -> None:
    """Each runs as written with nothing beside the checkout: the transcripts are the shipped
    samples. ``bench`` runs from the checkout (it needs ``benchmarks/``); the others run in
    an empty folder, where they write their files."""
    argv = shlex.split(command)
    assert argv[0] == "contextfold"
    assert not any("shared" in a for a in argv), "README examples must run in a fresh clone"
    where = REPO if argv[1] == "bench" else tmp_path
    done = subprocess.run([str(BIN / "contextfold"), *argv[1:]], cwd=where,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip()
    for option, value in itertools.pairwise(argv):
        if option in ("--html", "--json"):
            assert (where / value).is_file(), f"{command} wrote no {value}"
