"""The package's shape: importable the LlamaIndex way, one sorted public list, and the
namespace packages it merges with left without ``__init__.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import llama_index.memory.contextfold as pkg

ROOT = Path(__file__).resolve().parents[2]


def test_public_names_are_sorted_and_importable() -> None:
    names = list(pkg.__all__)
    assert names == sorted(names, key=lambda n: (not n.isupper(), n))
    for name in names:
        assert getattr(pkg, name) is not None


def test_llama_index_namespaces_have_no_init() -> None:
    assert not (ROOT / "integrations" / "llama_index" / "__init__.py").exists()
    assert not (ROOT / "integrations" / "llama_index" / "memory" / "__init__.py").exists()
    import llama_index.core  # still found beside ours

    assert llama_index.core.__file__


def test_core_does_not_import_llama_index() -> None:
    code = "import sys, contextfold; print('llama_index' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
