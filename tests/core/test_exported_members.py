"""The public API is pinned: one flat, sorted ``__all__`` at the package root (httpx style),
and one for each public module, each by who needs it."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest

import contextfold as cf

PUBLIC_MODULES = ["contextfold", "contextfold.policy", "contextfold.stores",
                  "contextfold.errors", "contextfold.testing", "contextfold.prompts",
                  "contextfold.integration"]
REPO = Path(__file__).resolve().parents[2]

# The names DESIGN.md promises to outside users; they must stay importable from the root.
CONTRACT = [
    "from_openai", "to_openai", "from_anthropic", "to_anthropic", "validate", "repair",
    "Budget", "counter_for_model", "Message", "ToolCall", "ConversionError",
    "BudgetExceededError", "ThresholdPolicy", "LoopSlicePolicy", "TurnAwarePolicy",
    "TruncationPolicy", "SummaryPolicy", "TieredPolicy", "Pipeline", "compact", "acompact",
    "Compactor", "ExtractiveSummarizer", "SQLiteStore",
]


def _isort_key(name: str) -> tuple[int, str]:
    """Ruff's RUF022 order: CONSTANTS, then Classes, then functions, each alphabetical."""
    group = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return group, name


def _module(name: str) -> ModuleType:
    return importlib.import_module(name)


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_is_sorted_and_unique(name: str) -> None:
    exported = _module(name).__all__
    assert exported == sorted(exported, key=_isort_key)
    assert len(set(exported)) == len(exported)


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_exported_name_resolves(name: str) -> None:
    module = _module(name)
    missing = [n for n in module.__all__ if getattr(module, n, None) is None]
    assert missing == []


def test_the_root_stays_small() -> None:
    assert len(cf.__all__) <= 45


def test_adapters_recipes_and_benchmarks_use_public_names_only() -> None:
    private = re.compile(r"\bcontextfold(\.[a-z]+)*\._[a-z]")
    found = [f"{path.relative_to(REPO)}:{n}" for top in ("integrations", "cookbook", "benchmarks")
             for path in (REPO / top).rglob("*.py")
             for n, line in enumerate(path.read_text().splitlines(), 1) if private.search(line)]
    assert found == []


def test_every_public_class_and_function_is_exported() -> None:
    """Nothing public is reachable from the root without being listed in ``__all__``."""
    unlisted = [
        name
        for name, value in vars(cf).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and (getattr(value, "__module__", "") or "").startswith("contextfold")
        and name not in cf.__all__
    ]
    assert unlisted == []


@pytest.mark.parametrize("name", CONTRACT)
def test_design_contract_name_is_public(name: str) -> None:
    assert name in cf.__all__, f"{name} is part of the public contract (DESIGN.md)"
    assert getattr(cf, name) is not None


def test_exported_functions_and_classes_are_documented() -> None:
    undocumented = [
        name for name in cf.__all__
        if (inspect.isclass(getattr(cf, name)) or inspect.isfunction(getattr(cf, name)))
        and not inspect.getdoc(getattr(cf, name))
    ]
    assert undocumented == []
