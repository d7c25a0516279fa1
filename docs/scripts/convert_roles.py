"""Rewrite Sphinx roles in docstrings as mkdocstrings cross-references.

The API reference is rendered by mkdocstrings, which reads Markdown: a Sphinx role such as
``:class:`~contextfold.Compactor``` shows up literally on the page. This script rewrites every
role found in a docstring of ``core/`` and ``integrations/``:

- a target the built site documents becomes a link, ``[`Compactor`][contextfold.Compactor]``,
  with the identifier taken from the site's ``objects.inv`` (so ``mkdocs build --strict`` can
  resolve it);
- any other target (a private helper, the standard library) becomes a backticked name.

Targets are resolved the way Sphinx would read them: absolute, relative to the enclosing class,
the module, its package (a leading dot), or the package root. The runtime object is compared
with what each documented identifier names, so a name imported from a private module links to
the page where it is documented. Only docstrings change; a line made longer than the project's
limit is rewrapped within its paragraph.

Usage, from the repository root::

    .venv/bin/mkdocs build --strict -d /tmp/site   # the inventory to resolve against
    .venv/bin/python docs/scripts/convert_roles.py /tmp/site/objects.inv
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import re
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
ROOTS = (REPO / "core", REPO / "integrations")
ROLE = re.compile(r":(?:py:)?(class|func|meth|attr|exc|data|mod|obj|const):`([^`]+)`")
LIMIT = 100
_MISSING = object()


def read_inventory(path: Path) -> dict[str, str]:
    """Each identifier a Sphinx-format ``objects.inv`` lists, with the address it links to."""
    raw = path.read_bytes()
    body = zlib.decompress(raw.split(b"\n", 4)[4]).decode()
    inventory = {}
    for line in body.splitlines():
        name, _kind, _priority, uri, *_ = line.split(" ")
        inventory[name] = uri.replace("$", name) if uri.endswith("$") else uri
    return inventory


def module_name(path: Path) -> str:
    """The import name of a source file under ``core/`` or ``integrations/``."""
    for root in ROOTS:
        if path.is_relative_to(root):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join(parts)
    raise ValueError(path)


def locate(dotted: str) -> Any:
    """The object a dotted path names (a module, then attributes), or ``_MISSING``."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr, _MISSING)
            if obj is _MISSING:
                return _MISSING
        return obj
    return _MISSING


def _is_named(obj: Any) -> bool:
    """Whether ``obj`` is identified by itself (not a shared value like ``3`` or ``""``)."""
    return inspect.ismodule(obj) or inspect.isclass(obj) or callable(obj) or isinstance(
        obj, property)


class Resolver:
    """Maps a role's target, read in its context, to a documented identifier."""

    def __init__(self, inventory: dict[str, str]) -> None:
        self.known = inventory
        self.by_object: dict[int, list[str]] = {}
        self._keep: list[Any] = []  # the objects stay alive so their ids stay theirs
        for key in inventory:
            obj = locate(key)
            if obj is not _MISSING and _is_named(obj):
                self._keep.append(obj)
                self.by_object.setdefault(id(obj), []).append(key)

    def _documented(self, obj: Any) -> str | None:
        keys = self.by_object.get(id(obj))
        return min(keys, key=lambda k: (len(k), k)) if keys else None

    def _candidates(self, target: str, module: str, owner: str | None) -> Iterator[str]:
        if target.startswith("."):  # relative to the module, then to its package
            package = module.rsplit(".", 1)[0]
            yield module + target
            yield package + target
            return
        yield target
        if owner:
            yield f"{module}.{owner}.{target}"
        yield f"{module}.{target}"
        top = module.split(".")[0]
        yield f"{top}.{target}"
        if module.startswith("llama_index.memory.contextfold"):
            yield f"llama_index.memory.contextfold.{target}"
        yield f"contextfold.{target}"

    def resolve(self, target: str, module: str, owner: str | None) -> str | None:
        """The identifier to link ``target`` to, or None when the site does not document it.
        Of the identifiers that lead to the same place, the public one is written."""
        found = self._resolve(target, module, owner)
        if found is None:
            return None
        same = [key for key, uri in self.known.items() if uri == self.known[found]]
        return min(same, key=lambda k: ("._" in k, len(k), k))

    def _resolve(self, target: str, module: str, owner: str | None) -> str | None:
        for dotted in self._candidates(target, module, owner):
            if dotted in self.known:
                return dotted
            obj = locate(dotted)
            if obj is _MISSING:
                continue
            if _is_named(obj) and (found := self._documented(obj)):
                return found
            # A member (an attribute, a property): link through its documented owner.
            parent, _, member = dotted.rpartition(".")
            holder = locate(parent) if parent else _MISSING
            found = self._documented(holder) if holder is not _MISSING else None
            if found and f"{found}.{member}" in self.known:
                return f"{found}.{member}"
            return None
        for suffix in dict.fromkeys((target.split(".", 1)[-1], target.rsplit(".", 1)[-1])):
            if found := self._by_name(suffix):
                return found
        return None

    def _by_name(self, suffix: str) -> str | None:
        """The one documented object whose path ends in ``suffix``, whatever the path the role
        wrote (a name the root does not export, say); None when there is none or several."""
        keys = [key for key in self.known if key.endswith(f".{suffix}")]
        if len({self.known[key] for key in keys}) != 1:
            return None
        return min(keys, key=lambda k: (len(k), k))


def replacement(match: re.Match[str], resolver: Resolver, module: str,
                owner: str | None) -> str:
    """The Markdown for one role."""
    target = match.group(2).strip()
    titled = re.fullmatch(r"(.+?)\s*<(.+)>", target)  # :attr:`title <target>`
    if titled:
        target = titled.group(2)
    short = target.startswith("~")
    target = target.lstrip("~!")
    shown = target.rsplit(".", 1)[-1] if short else target
    if titled:
        shown = titled.group(1)
    if match.group(1) == "mod" and target.startswith("."):
        # A module reads best in full in the core; the adapters name no private path of the
        # core's (a test keeps them to public names), so there the module's own name.
        shown = next(name for name in (module.rsplit(".", 1)[0] + target, module + target)
                     if inspect.ismodule(locate(name)))
        if not module.startswith("contextfold"):
            shown = target.lstrip(".")
    found = resolver.resolve(target, module, owner)
    if not found:
        return f"`{shown}`"
    if len(shown) + len(found) > LIMIT * 3 // 4:  # too long for one line: the name alone
        shown = shown.rsplit(".", 1)[-1]
    return f"[`{shown}`][{found}]"


def docstring_spans(tree: ast.Module) -> Iterator[tuple[int, int, str | None]]:
    """(first line, last line, enclosing class) of every string statement: the docstrings
    of modules, classes and functions, and the attribute docstrings under assignments."""

    def walk(node: ast.AST, owner: str | None) -> Iterator[tuple[int, int, str | None]]:
        for child in ast.iter_child_nodes(node):
            if (isinstance(child, ast.Expr) and isinstance(child.value, ast.Constant)
                    and isinstance(child.value.value, str)):
                yield child.lineno, child.end_lineno or child.lineno, owner
            inner = child.name if isinstance(child, ast.ClassDef) else owner
            if isinstance(child, ast.ClassDef) and owner:
                inner = f"{owner}.{child.name}"
            yield from walk(child, inner)

    yield from walk(tree, None)


_ITEM = re.compile(r"^(\s*)(- |\* |\d+\. |[\w*]+(?: \([^)]*\))?: )")


def _continuation_indent(line: str) -> str:
    item = _ITEM.match(line)
    indent = re.match(r"\s*", line).group(0)  # type: ignore[union-attr]
    if item and item.group(2).endswith(": ") and not item.group(2).startswith(("- ", "* ")):
        return indent + "    "  # a Google-style argument's description
    if item:
        return indent + " " * len(item.group(2))
    return indent


def _split_point(line: str, indent: str) -> int | None:
    """The last space before the limit that is outside a link or code span."""
    best = None
    depth = 0
    ticks = False
    for i, char in enumerate(line[:LIMIT + 1]):
        if char == "`":
            ticks = not ticks
        elif char == "[" and not ticks:
            depth += 1
        elif char == "]" and not ticks:
            depth = max(0, depth - 1)
        elif char == " " and not ticks and depth == 0 and i > len(indent):
            best = i
    return best


def rewrap(lines: list[str], index: int, last: int) -> int:
    """Rewrap the paragraph from ``lines[index]`` when it passes the limit; returns how many
    lines were added. A tail moves into the next line when that one continues the paragraph."""
    added = 0
    while len(lines[index]) > LIMIT:
        line = lines[index]
        indent = _continuation_indent(line)
        cut = _split_point(line, re.match(r"\s*", line).group(0))  # type: ignore[union-attr]
        if cut is None:
            break
        head, tail = line[:cut].rstrip(), line[cut + 1:].strip()
        lines[index] = head
        nxt = index + 1
        follows = (nxt <= last + added and lines[nxt].strip()
                   and re.match(r"\s*", lines[nxt]).group(0) == indent  # type: ignore[union-attr]
                   and not _ITEM.match(lines[nxt]) and not lines[nxt].strip().startswith('"""')
                   and not lines[nxt].strip().endswith(":"))
        if follows and not tail.endswith('"""'):
            lines[nxt] = f"{indent}{tail} {lines[nxt].strip()}"
        else:
            lines.insert(nxt, f"{indent}{tail}")
            added += 1
        index = nxt
    return added


def convert(path: Path, resolver: Resolver) -> tuple[int, list[str]]:
    """Rewrite the roles in one file's docstrings; returns how many, and the unlinked ones."""
    source = path.read_text(encoding="utf-8")
    module = module_name(path)
    lines = source.split("\n")
    spans = sorted(docstring_spans(ast.parse(source)), reverse=True)  # bottom up: lines shift
    count = 0
    unlinked: list[str] = []
    for first, last, owner in spans:
        for number in range(last - 1, first - 2, -1):
            line = lines[number]
            if not ROLE.search(line):
                continue

            def sub(match: re.Match[str], _owner: str | None = owner) -> str:
                text = replacement(match, resolver, module, _owner)
                if not text.startswith("["):
                    unlinked.append(f"{module}: {match.group(0)}")
                return text

            new, n = ROLE.subn(sub, line)
            count += n
            lines[number] = new
            rewrap(lines, number, last - 1)
    if count:
        path.write_text("\n".join(lines), encoding="utf-8")
    return count, unlinked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inventory", type=Path, help="objects.inv of a built site")
    args = parser.parse_args(argv)
    for root in ROOTS:
        sys.path.insert(0, str(root))
    resolver = Resolver(read_inventory(args.inventory))
    total = 0
    for root in ROOTS:
        for path in sorted(root.rglob("*.py")):
            count, unlinked = convert(path, resolver)
            total += count
            for role in unlinked:
                print(f"not documented, left as code: {role}")
    print(f"{total} roles rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
