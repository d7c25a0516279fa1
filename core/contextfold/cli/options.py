"""The command line's option types: every value is checked when it is parsed.

Each function here is an ``argparse`` type: it returns the converted value or raises
``argparse.ArgumentTypeError`` with a message that says what was expected. The parser
(`Parser`) prints that message on one line and exits with status 2, before any
work starts; nothing is written before every option is known to be good.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

__all__ = [
    "SAMPLE_PREFIX",
    "Parser",
    "comma_list",
    "data_directory",
    "fraction_list",
    "int_in",
    "output_file",
    "transcript_source",
]

SAMPLE_PREFIX = "sample:"
"""``sample:NAME`` names a transcript shipped with the package (``contextfold.samples``)."""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line: ``contextfold eval: error: ...``,
    followed by where to read the options, with exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    """An integer from ``low`` to ``high`` (no upper limit when ``None``)."""
    span = f"at least {low}" if high is None else f"from {low} to {high}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number {span}, got "
                                             f"{text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected a whole number {span}, got {value}")
        return value

    parse.__name__ = "integer"  # argparse names the type in its own messages
    return parse


def fraction_list(text: str) -> list[float]:
    """Comma-separated shares, each above 0 and at most 1: ``0.25,0.5``."""
    values = []
    for item in text.split(","):
        try:
            value = float(item)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated shares above 0 and at most 1 (like 0.25,0.5), got "
                f"{item.strip()!r}") from None
        if not 0 < value <= 1:  # also refuses nan
            raise argparse.ArgumentTypeError(
                f"each share must be above 0 and at most 1, got {item.strip()}")
        values.append(value)
    return values


def comma_list(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """Comma-separated names, each one of ``choices``, none twice."""

    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",")]
        for name in names:
            if name not in choices:
                raise argparse.ArgumentTypeError(
                    f"unknown name {name!r}; choose from: {', '.join(choices)}")
        if len(set(names)) != len(names):
            raise argparse.ArgumentTypeError(f"a name is given twice in {text!r}")
        return names

    parse.__name__ = "list"
    return parse


def transcript_source(text: str) -> Path:
    """A transcript file that exists, or ``sample:NAME`` for a shipped sample."""
    if text.startswith(SAMPLE_PREFIX):
        from ..errors import ConfigurationError
        from ..samples import sample_path

        try:
            return sample_path(text[len(SAMPLE_PREFIX):])
        except ConfigurationError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(
            f"no such file: {text} (the shipped samples are sample:airline, sample:coding "
            "and sample:assistant_first)")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"not a file: {text}")
    return path


def output_file(text: str) -> Path:
    """A file to write: its folder must exist, and it must not be a folder itself."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name")
    folder = path.parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"folder {folder} does not exist; create it first "
                                         "or write elsewhere")
    return path


def data_directory(text: str) -> Path:
    """A folder to write into: it may not exist yet (it is made), but it is not a file and
    no folder on its way is a file."""
    path = Path(text)
    for step in (path, *path.parents):
        if step.exists():
            if not step.is_dir():
                raise argparse.ArgumentTypeError(
                    f"{step} is a file; --data-dir needs a folder")
            break
    return path
