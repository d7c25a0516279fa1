"""The API reference (docs/reference, built by mkdocs) is organised by task with the main
entry points first, and renders every name the package root exports."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType

import contextfold as cf

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "docs" / "reference"


def _rendered() -> dict[str, list[str]]:
    """Each reference page's ``:::`` identifiers, in order."""
    return {page.name: re.findall(r"^::: ([\w.]+)", page.read_text(encoding="utf-8"), re.M)
            for page in sorted(REFERENCE.glob("*.md"))}


def _module(name: str) -> ModuleType | None:
    """The module ``name`` when it is one (``contextfold.stores``), else None."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        return None


def test_every_root_name_is_rendered_on_a_reference_page() -> None:
    rendered = {name for names in _rendered().values() for name in names}
    missing = []
    for name in cf.__all__:
        if f"contextfold.{name}" in rendered:
            continue
        modules = [m for m in rendered if _module(m) is not None
                   and name in getattr(_module(m), "__all__", ())]
        if not modules:
            missing.append(name)
    assert missing == []


def test_no_object_is_rendered_twice() -> None:
    names = [name for names in _rendered().values() for name in names]
    assert len(names) == len(set(names))


def test_the_reference_starts_with_compacting_and_the_policies() -> None:
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    pages = re.findall(r"^\s+- [^:]+: (reference/[\w.]+\.md)$", nav, re.M)
    assert pages[:4] == ["reference/compacting.md", "reference/policies.md",
                         "reference/langchain.md", "reference/llamaindex.md"]
    assert sorted(pages) == sorted(f"reference/{page}" for page in _rendered())
    first = _rendered()["compacting.md"]
    assert first[:3] == ["contextfold.compact", "contextfold.acompact", "contextfold.Compactor"]
