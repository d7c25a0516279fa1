"""The core's layers (drawn in docs/architecture.md) hold: no import runs upward, every
package has a layer, and no modules import each other in a cycle.

Every import counts, including imports inside functions and under ``TYPE_CHECKING``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core" / "contextfold"
LAYERS_PAGE = ROOT / "docs" / "architecture.md"


def _layers(page: str) -> list[list[str]]:
    """The layers, bottom first, from the page's block that follows the ``layers`` marker."""
    found = re.search(r"<!-- layers:[^>]*-->\s*```text\n(.*?)```", page, re.S)
    assert found, "docs/architecture.md has no layers block"
    rows = [line.split() for line in found.group(1).strip().splitlines()]
    return [row[1:] for row in reversed(rows)]


def _modules(core: Path) -> dict[str, tuple[Path, bool]]:
    """Every module of the package: dotted name -> (file, is a package's __init__)."""
    out = {}
    for path in sorted(core.rglob("*.py")):
        parts = list(path.relative_to(core.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_package)
    return out


def _imports(name: str, path: Path, is_package: bool, known: set[str]) -> set[str]:
    """The package's own modules that ``name`` imports, anywhere in its body."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            candidates = [target, *(f"{target}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found.update(c for c in candidates if c in known and c != name)
    return found


def _unit(module: str) -> str:
    """The top-level package or module of the core that ``module`` belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "contextfold"


def _graph(core: Path) -> dict[str, set[str]]:
    modules = _modules(core)
    known = set(modules)
    return {name: _imports(name, path, is_package, known)
            for name, (path, is_package) in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _violations(graph: dict[str, set[str]], layers: list[list[str]]) -> list[str]:
    """Imports that run upward, or sideways between two packages of one inner layer."""
    rank = {unit: k for k, row in enumerate(layers) for unit in row}
    top = len(layers) - 1
    out = []
    for module, targets in sorted(graph.items()):
        here = _unit(module)
        for target in sorted(targets):
            there = _unit(target)
            if there == here:
                continue
            if rank[there] > rank[here] or (rank[there] == rank[here] != top):
                out.append(f"{module} -> {target}")
    return out


GRAPH = _graph(CORE)
LAYERS = _layers(LAYERS_PAGE.read_text(encoding="utf-8"))


def test_every_package_of_the_core_has_a_layer() -> None:
    placed = {unit for row in LAYERS for unit in row}
    assert sorted({_unit(m) for m in GRAPH} - placed) == []
    assert sorted(placed - {_unit(m) for m in GRAPH}) == []  # no layer names a ghost


def test_no_import_runs_upward() -> None:
    assert _violations(GRAPH, LAYERS) == []


def test_no_modules_import_each_other_in_a_cycle() -> None:
    assert _cycles(GRAPH) == []


def test_no_core_module_is_over_800_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in CORE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 800}
    assert long == {}


# The checks themselves, on small hand-made graphs: each can fail.

def test_an_upward_import_is_found() -> None:
    graph = {"contextfold._messages.model": {"contextfold._engine.compactor"},
             "contextfold._engine.compactor": {"contextfold._messages.model"}}
    layers = [["_messages"], ["_engine"], ["contextfold"]]
    assert _violations(graph, layers) == [
        "contextfold._messages.model -> contextfold._engine.compactor"]
    assert _cycles(graph) == [["contextfold._engine.compactor", "contextfold._messages.model"]]


def test_a_sideways_import_within_an_inner_layer_is_found_but_not_among_the_faces() -> None:
    graph = {"contextfold._a.x": {"contextfold._b.y"}, "contextfold.cli": {"contextfold.testing"}}
    layers = [["_a", "_b"], ["contextfold", "cli", "testing"]]
    assert _violations(graph, layers) == ["contextfold._a.x -> contextfold._b.y"]


@pytest.mark.parametrize("code, expected", [
    ("from ..errors import ContextfoldError", {"contextfold.errors"}),
    ("def f():\n    from .._engine.compactor import Compactor", {"contextfold._engine.compactor"}),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import stores",
     {"contextfold.stores"}),
    ("import contextfold._engine.compactor", {"contextfold._engine.compactor"}),
])
def test_every_kind_of_import_is_read(tmp_path: Path, code: str, expected: set[str]) -> None:
    path = tmp_path / "m.py"
    path.write_text(code)
    known = {"contextfold.errors", "contextfold._engine.compactor", "contextfold.stores"}
    assert _imports("contextfold._lossless.m", path, False, known) == expected
