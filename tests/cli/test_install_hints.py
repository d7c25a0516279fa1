"""Every optional part names its install line when its framework is missing. Each case runs
in a fresh interpreter where the framework's import fails (``sys.modules[name] = None``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize(("hidden", "module", "extra"), [
    ("langchain_core", "langchain_contextfold", "langchain"),
    ("langchain", "langchain_contextfold", "langchain"),
    ("llama_index.core", "llama_index.memory.contextfold", "llamaindex"),
])
def test_an_adapter_without_its_framework_names_the_extra(hidden: str, module: str,
                                                          extra: str) -> None:
    done = _run(f"""
        import sys
        sys.modules[{hidden!r}] = None
        try:
            import {module}
        except ImportError as exc:
            from contextfold.errors import MissingExtraError
            assert isinstance(exc, MissingExtraError), type(exc)
            print(exc)
        else:
            raise SystemExit("imported without its framework")
    """)
    assert done.returncode == 0, done.stderr
    assert f'pip install "contextfold[{extra}]"' in done.stdout


def test_the_demo_without_langchain_names_the_extra() -> None:
    done = _run("""
        import sys
        sys.modules["langchain_core"] = None
        from contextfold.cli import main
        raise SystemExit(main(["demo", "--data-dir", "unused"]))
    """)
    assert done.returncode == 2
    assert 'pip install "contextfold[langchain]"' in done.stderr


def test_eval_says_which_peers_it_left_out(tmp_path: object) -> None:
    done = _run("""
        import json, sys, tempfile, pathlib
        sys.modules["llama_index.core"] = None
        from contextfold.cli import main
        path = pathlib.Path(tempfile.mkdtemp()) / "t.json"
        path.write_text(json.dumps([{"role": "system", "content": "s"},
                                    {"role": "user", "content": "Order ORD-1 please"},
                                    {"role": "assistant", "content": "ORD-1 shipped."}]))
        raise SystemExit(main(["eval", str(path), "--policies", "truncation"]))
    """)
    assert done.returncode == 0, done.stderr
    assert 'peer left out: llamaindex Memory: not installed (pip install ' \
           '"contextfold[llamaindex]")' in done.stdout
    assert "langchain trim_messages" in done.stdout
