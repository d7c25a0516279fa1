"""Layered system prompts and the session marker.

* [`PromptLoader`][contextfold.prompts.PromptLoader] combines a personal prompt file (the first that
  exists of several candidates), a project prompt file and the environment facts into one system
  prompt with
  labelled sections::

      # Personal Configuration
      ...
      # Project Configuration
      ...
      # Environment
      Current date: 2026-01-13, Current time: 14:30 (local)
      Working directory: /path/to/project
      Operating system: Linux
      Mode: Interactive REPL

* [`TemporalContext`][contextfold.prompts.TemporalContext] (a pass, in the policies) refreshes that
  ``Current date`` line on every build.
* [`session_started_marker`][contextfold.prompts.session_started_marker] is the fixed
  ``[Session started: ...]`` message that opens a new session's history.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Literal

from .._messages.model import Message
from .._policies.temporal import local_time, now_line
from ..errors import ConfigurationError

__all__ = [
    "LoadedPrompt",
    "PromptLoader",
    "environment_facts",
    "session_started_marker",
]

Mode = Literal["repl", "server"]
_MODE_NAMES = {"repl": "Interactive REPL", "server": "Server (non-interactive)"}



def _operating_system() -> str:
    system = platform.system() or "Unknown"
    if system == "Linux":
        if "microsoft" in platform.release().lower():
            return "Linux (WSL2 on Windows)"
        try:
            text = Path("/etc/os-release").read_text(encoding="utf-8")
        except OSError:
            return "Linux"
        match = re.search(r'^PRETTY_NAME="?([^"\n]+)"?$', text, re.MULTILINE)
        return f"Linux ({match.group(1)})" if match else "Linux"
    if system == "Darwin":
        version = platform.mac_ver()[0]
        return f"macOS {version}" if version else "macOS"
    if system == "Windows":
        return f"Windows {platform.release()}".strip()
    return system


def environment_facts(
    *,
    mode: Mode = "repl",
    cwd: str | os.PathLike[str] | None = None,
    now: datetime | None = None,
    tz: tzinfo | None = None,
) -> list[str]:
    """The ``# Environment`` lines: date and time, working directory, OS, terminal (REPL
    mode only, when known) and mode."""
    lines = [
        now_line(now, tz),
        f"Working directory: {Path(cwd) if cwd is not None else Path.cwd()}",
        f"Operating system: {_operating_system()}",
    ]
    if mode == "repl":
        program, term = os.environ.get("TERM_PROGRAM"), os.environ.get("TERM")
        if program or term:
            shown = f"{program} ({term})" if program and term else (program or term)
            lines.append(f"Terminal: {shown}")
    lines.append(f"Mode: {_MODE_NAMES[mode]}")
    return lines


@dataclass(frozen=True)
class LoadedPrompt:
    """The combined system prompt and where its layers came from."""

    content: str
    """The prompt with its labelled sections."""
    personal_path: Path | None
    """The personal prompt file used, if any."""
    project_path: Path | None
    """The project prompt file used, if any."""


class PromptLoader:
    """Loads the layered system prompt of the context-manager design.

    Args:
        personal: candidate personal prompt files; the first that exists wins
            (for example ``["~/.myagent/AGENTS.md", "/usr/share/myagent/AGENTS.md"]``).
        project: the project prompt file: a path, or a file name looked up in ``cwd``;
            ``None`` for no project layer.
        mode: ``"repl"`` (interactive) or ``"server"``; shown in the environment section.
        cwd: the working directory (default: the process's).
        tz: the zone for the date line (default: the machine's local zone).
        environment: add the ``# Environment`` section.

    Raises:
        ConfigurationError: an unknown ``mode``.
    """

    def __init__(
        self,
        personal: Sequence[str | os.PathLike[str]] | str | os.PathLike[str] = (),
        project: str | os.PathLike[str] | None = "AGENTS.md",
        *,
        mode: Mode = "repl",
        cwd: str | os.PathLike[str] | None = None,
        tz: tzinfo | None = None,
        environment: bool = True,
    ) -> None:
        if mode not in _MODE_NAMES:
            raise ConfigurationError(f"mode must be 'repl' or 'server', got {mode!r}")
        if isinstance(personal, (str, os.PathLike)):
            personal = [personal]
        self.personal = tuple(Path(p).expanduser() for p in personal)
        self.project = Path(project).expanduser() if project is not None else None
        self.mode: Mode = mode
        self.cwd = Path(cwd) if cwd is not None else None
        self.tz = tz
        self.environment = environment

    def _project_path(self) -> Path | None:
        if self.project is None:
            return None
        if self.project.is_absolute():
            return self.project
        return (self.cwd or Path.cwd()) / self.project

    def load(self, now: datetime | None = None) -> LoadedPrompt:
        """Read the layers and combine them. Missing files are skipped; read errors of an
        existing file propagate (``OSError``), since a half-loaded prompt is worse."""
        sections: list[str] = []
        personal_path = next((p for p in self.personal if p.is_file()), None)
        if personal_path is not None:
            text = personal_path.read_text(encoding="utf-8").strip()
            sections.append(f"# Personal Configuration\n{text}")
        project_path = self._project_path()
        if project_path is not None and project_path.is_file():
            text = project_path.read_text(encoding="utf-8").strip()
            sections.append(f"# Project Configuration\n{text}")
        else:
            project_path = None
        if self.environment:
            facts = environment_facts(mode=self.mode, cwd=self.cwd, now=now, tz=self.tz)
            sections.append("# Environment\n" + "\n".join(facts))
        return LoadedPrompt("\n\n".join(sections), personal_path, project_path)


def session_started_marker(
    now: datetime | None = None,
    *,
    tz: tzinfo | None = None,
    role: Literal["system", "user"] = "system",
) -> Message:
    """The ``[Session started: YYYY-MM-DD HH:MM (local)]`` message that opens a session.

    It is a system message by default, placed right after the system prompt, so every
    policy keeps it with the leading system block (a user message would count against
    turn and window limits and could be dropped). Its ``source`` is ``"session"``: never a
    prompt source.
    """
    moment, label = local_time(now, tz)
    return Message(
        role=role,
        content=f"[Session started: {moment:%Y-%m-%d %H:%M} ({label})]",
        source="session",
        created_at=now if now is not None else moment,
    )
