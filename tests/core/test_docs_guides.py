"""The code on the documentation site runs as written in a fresh clone.

A guide is read top to bottom, so its Python blocks run in order in one namespace (a later
block may use what an earlier one built), with nothing defined for them, in an empty folder.
Its ``contextfold`` command lines run too, except those the README test already runs.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import contextfold as cf

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
BIN = Path(sys.executable).parent
# Pages whose code runs elsewhere, against what it needs.
ELSEWHERE = {
    "guides/providers.md": "tests/anthropic_http/test_anthropic_guide.py (a Messages API server)",
}


def _blocks(page: Path, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", page.read_text(encoding="utf-8"),
                      flags=re.S | re.M)


def _pages_with(language: str) -> list[str]:
    return [str(page.relative_to(DOCS)) for page in sorted(DOCS.rglob("*.md"))
            if _blocks(page, language) and str(page.relative_to(DOCS)) not in ELSEWHERE]


def test_the_guides_show_code() -> None:
    assert {"guides/quickstart.md", "guides/lossless.md", "guides/stores.md",
            "guides/choosing.md"} <= set(_pages_with("python"))
    for page in ELSEWHERE:
        assert (DOCS / page).is_file() and (REPO / ELSEWHERE[page].split()[0]).is_file()


@pytest.mark.parametrize("page", _pages_with("python"))
# Raised inside llama-index-workflows when a workflow is built (see tests/llamaindex/conftest.py).
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning:inspect")
def test_the_python_of_each_guide_runs_in_order(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the guides write their files (history.db) where they run
    namespace: dict[str, Any] = {"__name__": "__main__"}
    try:
        for number, block in enumerate(_blocks(DOCS / page, "python"), start=1):
            exec(compile(block, f"docs/{page} python block {number}", "exec"), namespace)
    finally:  # what the guide opened is closed, so nothing leaks into the next test
        for value in namespace.values():
            if isinstance(value, cf.stores.BaseStore):
                value.close()
    assert capsys.readouterr().out.strip(), "a guide's code shows what it did"


def _readme_commands() -> set[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```bash\n(.*?)^```", readme, flags=re.S | re.M)
    return {line.strip().removeprefix(".venv/bin/") for b in blocks for line in b.splitlines()}


def _commands() -> list[tuple[str, str]]:
    found = []
    for page in _pages_with("bash"):
        for block in _blocks(DOCS / page, "bash"):
            for line in block.splitlines():
                command = line.split("#", 1)[0].strip().removeprefix(".venv/bin/")
                if command.startswith("contextfold ") and command not in _readme_commands():
                    found.append((page, command))
    return found


@pytest.mark.slow  # eval beside the peers: minutes on a shared two-core machine
@pytest.mark.parametrize(("page", "command"), _commands())
def test_each_command_line_of_the_guides_runs(page: str, command: str, tmp_path: Path) -> None:
    argv = shlex.split(command)
    where = REPO if argv[1] == "bench" else tmp_path
    done = subprocess.run([str(BIN / "contextfold"), *argv[1:]], cwd=where,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{page}: {command}\n{done.stdout}{done.stderr}"
    assert done.stdout.strip()
