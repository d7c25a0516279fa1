"""Every command and snippet in the README runs as written in a fresh clone.

The blocks are read from README.md itself, so an edited example is tested as edited. Each
Python block runs on its own, in an empty namespace, in an empty folder: nothing is defined
for it (a reader may copy any one block), so each must bring its imports and its model. The
command lines run with nothing beside the checkout: the transcripts are the shipped samples.
"""

from __future__ import annotations

import itertools
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import contextfold as cf

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
BIN = Path(sys.executable).parent
VENV_BIN = ".venv/bin/"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README, flags=re.S | re.M)


def _setup_commands() -> list[str]:
    return _blocks("bash")[0].strip().splitlines()


def _command_lines() -> list[str]:
    """Every line of every shell block after the set-up commands."""
    return [line for block in _blocks("bash")[1:] for line in block.strip().splitlines()]


def _program(command: str) -> list[str]:
    """``command``'s argv with the virtual environment's program resolved to this one's."""
    argv = shlex.split(command)
    name = argv[0].removeprefix(VENV_BIN)
    assert name in ("contextfold", "mkdocs"), f"unexpected program in the README: {command}"
    return [str(BIN / name), *argv[1:]]


def test_the_readme_starts_with_the_two_setup_commands() -> None:
    first = _setup_commands()
    assert len(first) == 2
    assert first[0].endswith(".venv/bin/contextfold demo") and '".[all]"' in first[0]
    assert first[1].endswith(".venv/bin/python -m pytest -q") and '".[dev]"' in first[1]
    # The second is what .ci/run executes (this suite); the first one's demo runs below.


def test_the_readme_is_a_five_minute_read() -> None:
    assert len(README.splitlines()) <= 250, "the detail belongs in docs/ (mkdocs)"


def test_the_demo_command_runs_as_written(tmp_path: Path) -> None:
    demo = _program(_setup_commands()[0].rsplit("&&", 1)[1].strip())
    done = subprocess.run(demo, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reference numbers in the briefing 43/43" in done.stdout
    assert (tmp_path / "contextfold-data" / "report.html").is_file()


@pytest.mark.parametrize("number", range(1, len(_blocks("python")) + 1))
# Raised inside llama-index-workflows when a workflow is built (see tests/llamaindex/conftest.py).
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning:inspect")
def test_each_python_snippet_runs_on_its_own(
    number: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    snippet = _blocks("python")[number - 1]
    monkeypatch.chdir(tmp_path)  # a snippet writes its files (history.db) where it runs
    namespace: dict[str, Any] = {"__name__": "__main__"}
    try:
        exec(compile(snippet, f"README.md python block {number}", "exec"), namespace)
    finally:  # what the snippet opened is closed, so nothing leaks into the next test
        for value in namespace.values():
            if isinstance(value, cf.stores.BaseStore):
                value.close()
            if isinstance(value, cf.Compactor) and isinstance(value.store, cf.stores.BaseStore):
                value.store.close()
    assert capsys.readouterr().out.strip(), "each snippet shows what it did"


def test_the_readme_has_a_snippet_per_framework_and_one_without() -> None:
    snippets = _blocks("python")
    for module in ("langchain_contextfold", "llama_index.memory.contextfold", "contextfold"):
        assert any(re.search(rf"^(from|import) {re.escape(module)}\b", s, re.M)
                   for s in snippets), module


def test_every_name_the_readme_mentions_exists() -> None:
    import importlib

    for name in set(re.findall(r"\bcf\.([A-Za-z_]+)", README)):
        assert hasattr(cf, name), f"README mentions cf.{name}, which the root does not export"
    for module, name in set(re.findall(r"`(contextfold(?:\.[a-z_]+)+)\.([A-Z][A-Za-z]+)`", README)):
        assert hasattr(importlib.import_module(module), name), f"{module}.{name}"


def test_every_link_in_the_readme_leads_to_a_file_of_the_checkout() -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if "://" not in link]
    assert local, "the README points into docs/"
    assert [link for link in local if not (REPO / link).is_file()] == []
    for path in re.findall(r"`((?:tests|docs|cookbook|benchmarks)/[\w/.-]+)`", README):
        assert (REPO / path).exists(), f"the README names {path}, which does not exist"


@pytest.mark.parametrize("command", [c for c in _command_lines() if "mkdocs" not in c])
def test_each_command_line_example_runs(command: str, tmp_path: Path) -> None:
    """Each runs as written with nothing beside the checkout. ``bench`` runs from the
    checkout (it needs ``benchmarks/``); the others run in an empty folder, where they write
    their files."""
    argv = _program(command)
    assert not any("shared" in a for a in argv), "README examples must run in a fresh clone"
    where = REPO if argv[1] == "bench" else tmp_path
    done = subprocess.run(argv, cwd=where, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip()
    for option, value in itertools.pairwise(argv):
        if option in ("--html", "--json"):
            assert (where / value).is_file(), f"{command} wrote no {value}"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.slow
@pytest.mark.parametrize("command", [c for c in _command_lines() if "mkdocs" in c])
def test_the_documentation_command_serves_the_site(command: str) -> None:
    """``mkdocs serve`` as written, on a free port instead of 8000 (several test runs may
    share a machine): the site builds under the project's strict settings and is served."""
    assert shlex.split(command)[1:] == ["serve"]
    port = _free_port()
    server = subprocess.Popen([*_program(command), "--dev-addr", f"127.0.0.1:{port}"],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        page = _first_page(server, f"http://127.0.0.1:{port}/", deadline=time.monotonic() + 480)
    finally:
        server.terminate()
        output = server.communicate(timeout=60)[0]
    assert page is not None, output
    assert "<title>contextfold</title>" in page
    assert not re.search(r"^WARNING\s+-", output, re.M), output  # strict: none at all


def _first_page(server: subprocess.Popen[str], url: str, deadline: float) -> str | None:
    """The page at ``url`` once the server answers; None when it exits or never answers."""
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                return str(reply.read().decode("utf-8"))
        except OSError:
            time.sleep(1)
    return None
