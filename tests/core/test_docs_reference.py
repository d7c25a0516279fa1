"""The API reference (docs/reference, built by mkdocs) is organised by task with the main
entry points first, renders every name the package root exports, and links the names its
docstrings mention (Markdown cross-references to objects that exist, no Sphinx roles)."""

from __future__ import annotations

import ast
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


# Docstrings are read by mkdocstrings as Markdown: a Sphinx role would show up literally.
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|exc|data|mod|obj|const):`")
CROSS_REFERENCE = re.compile(r"\]\[(\w+(?:\.\w+)+)\]")  # [text][dotted.identifier]
SOURCES = [REPO / "core", REPO / "integrations"]


def _docstrings() -> list[tuple[str, str]]:
    """(file:line, text) of every string statement in the shipped code: the docstrings of
    modules, classes and functions, and the attribute docstrings mkdocstrings renders."""
    found = []
    for root in SOURCES:
        for path in sorted(root.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                        and isinstance(node.value.value, str)):
                    found.append((f"{path.relative_to(REPO)}:{node.lineno}", node.value.value))
    return found


def _names_something(identifier: str) -> bool:
    """Whether ``identifier`` is an importable object, or a field of an importable class."""
    parts = identifier.split(".")
    for cut in range(len(parts), 0, -1):
        obj = _module(".".join(parts[:cut]))
        if obj is None:
            continue
        if cut == len(parts):
            return True
        *path, member = parts[cut:]
        for attr in path:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        # A dataclass field without a default is an annotation, not an attribute.
        return hasattr(obj, member) or member in getattr(obj, "__annotations__", {})
    return False


def test_docstrings_use_markdown_cross_references_not_sphinx_roles() -> None:
    offenders = [where for where, text in _docstrings() if ROLE.search(text)]
    assert offenders == [], "rewrite with docs/scripts/convert_roles.py"


def test_every_cross_reference_in_a_docstring_names_an_object() -> None:
    identifiers = {(where, identifier) for where, text in _docstrings()
                   for identifier in CROSS_REFERENCE.findall(text)}
    assert len(identifiers) > 100  # the pattern still finds the references
    assert [ref for ref in sorted(identifiers) if not _names_something(ref[1])] == []
