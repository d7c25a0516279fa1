"""Writing the sample files: every sample's JSON text, made from fixed seeds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ._airline import airline_records
from ._coding import coding_records
from ._greeting import greeting_messages

__all__ = ["sample_texts", "write_samples"]


def _text(data: Any) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def sample_texts() -> dict[str, str]:
    """Each sample's file name and the exact text the package ships under it."""
    return {
        "airline.json": _text(airline_records(seed=0)),
        "coding.json": _text(coding_records(seed=0)),
        "assistant_first.json": _text(greeting_messages(seed=0)),
    }


def write_samples(directory: Path) -> list[Path]:
    """Write every sample into ``directory``; returns the paths written."""
    written = []
    for name, text in sample_texts().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
