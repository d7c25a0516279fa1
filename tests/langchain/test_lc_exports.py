"""langchain_contextfold's public API: one flat, sorted ``__all__``, documented."""

from __future__ import annotations

import inspect
import subprocess
import sys

import langchain_contextfold as lcf

CONTRACT = ["with_compaction", "CompactionMiddleware", "to_core", "from_core",
            "ChatModelSummarizer", "CompactingChatMessageHistory", "search_tools_for",
            "CompactionHook", "is_context_overflow", "COMPACTION_EVENT"]


def _isort_key(name: str) -> tuple[int, str]:
    group = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return group, name


def test_all_is_sorted_unique_and_resolves() -> None:
    assert lcf.__all__ == sorted(lcf.__all__, key=_isort_key)
    assert len(set(lcf.__all__)) == len(lcf.__all__)
    assert [n for n in lcf.__all__ if not hasattr(lcf, n)] == []
    assert [n for n in CONTRACT if n not in lcf.__all__] == []


def _public(value: object) -> bool:
    return inspect.isclass(value) or inspect.isfunction(value)


def test_every_public_name_is_exported_and_documented() -> None:
    unlisted = [name for name, value in vars(lcf).items()
                if not name.startswith("_") and _public(value)
                and (getattr(value, "__module__", "") or "").startswith("langchain_contextfold")
                and name not in lcf.__all__]
    assert unlisted == []
    undocumented = [name for name in lcf.__all__
                    if _public(getattr(lcf, name)) and not inspect.getdoc(getattr(lcf, name))]
    assert undocumented == []


def test_importing_leaves_other_frameworks_alone() -> None:
    code = ("import sys, langchain_contextfold; "
            "print(sorted(m for m in ('llama_index', 'sqlalchemy', 'psycopg', 'langchain_openai')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
