"""Layered prompt loading, temporal context and the session marker."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

import contextfold as cf
from contextfold.errors import ConfigurationError
from contextfold.prompts import PromptLoader, TemporalContext, session_started_marker
from contextfold.prompts._loader import environment_facts

NOW = datetime(2026, 1, 13, 14, 30, tzinfo=timezone.utc)
UTC = timezone.utc


def test_personal_first_existing_wins_and_project_by_name(tmp_path):
    home, shipped, project = tmp_path / "home", tmp_path / "shipped", tmp_path / "proj"
    for d in (home, shipped, project):
        d.mkdir()
    (shipped / "AGENTS.md").write_text("Package defaults.\n")
    (project / "NEXUS.md").write_text("Use pytest.\n")
    loader = PromptLoader([home / "AGENTS.md", shipped / "AGENTS.md"], "NEXUS.md",
                             cwd=project, tz=UTC)
    loaded = loader.load(now=NOW)
    assert loaded.personal_path == shipped / "AGENTS.md"
    assert loaded.project_path == project / "NEXUS.md"
    sections = loaded.content.split("\n\n")
    assert sections[0] == "# Personal Configuration\nPackage defaults."
    assert sections[1] == "# Project Configuration\nUse pytest."
    env = sections[2].splitlines()
    assert env[0] == "# Environment"
    assert env[1] == "Current date: 2026-01-13, Current time: 14:30 (UTC)"
    assert env[2] == f"Working directory: {project}"
    assert env[3].startswith("Operating system: ")
    assert env[-1] == "Mode: Interactive REPL"


def test_missing_layers_are_skipped(tmp_path):
    loaded = PromptLoader([tmp_path / "nope.md"], project=None, mode="server",
                             cwd=tmp_path).load(now=NOW)
    assert (loaded.personal_path, loaded.project_path) == (None, None)
    assert loaded.content.startswith("# Environment\n")
    assert "Mode: Server (non-interactive)" in loaded.content
    assert "Terminal:" not in loaded.content


def test_terminal_is_shown_in_repl_mode(monkeypatch, tmp_path):
    monkeypatch.setenv("TERM_PROGRAM", "vscode")
    monkeypatch.setenv("TERM", "xterm-256color")
    facts = environment_facts(mode="repl", cwd=tmp_path, now=NOW, tz=UTC)
    assert "Terminal: vscode (xterm-256color)" in facts


def test_absolute_project_path_and_no_environment(tmp_path):
    path = tmp_path / "team.md"
    path.write_text("Team rules.")
    loaded = PromptLoader(project=path, environment=False).load()
    assert loaded.content == "# Project Configuration\nTeam rules."


def test_unknown_mode_fails_at_construction():
    with pytest.raises(ConfigurationError, match="mode"):
        PromptLoader(mode="daemon")  # type: ignore[arg-type]


def test_temporal_context_replaces_the_date_line_on_every_build(counter):
    loaded = PromptLoader(project=None, tz=UTC).load(now=NOW)
    history = [cf.Message("system", loaded.content), cf.Message("user", "hi")]
    temporal = TemporalContext(tz=UTC)
    later = NOW + timedelta(hours=3, minutes=5)
    out = cf.compact(history, policy=temporal, budget=cf.Budget(context_window=10_000),
                     counter=counter, now=later).messages
    assert "Current date: 2026-01-13, Current time: 17:35 (UTC)" in out[0].text
    assert "14:30" not in out[0].text
    assert out[0].text.count("Current date:") == 1
    assert out[1] is history[1]
    again = cf.compact(out, policy=temporal, budget=cf.Budget(context_window=10_000),
                       counter=counter, now=later)
    assert again.messages is out and again.report.method == "none"


def test_temporal_context_adds_a_line_or_a_system_message():
    temporal = TemporalContext(tz=UTC)
    plain = [cf.Message("system", "Be brief."), cf.Message("user", "hi")]
    assert temporal.inject(plain, NOW)[0].text == (
        "Be brief.\n\nCurrent date: 2026-01-13, Current time: 14:30 (UTC)"
    )
    bare = [cf.Message("user", "hi")]
    out = temporal.inject(bare, NOW)
    assert [m.role for m in out] == ["system", "user"]


def test_session_marker_is_a_non_prompt_system_message():
    marker = session_started_marker(NOW, tz=UTC)
    assert marker.text == "[Session started: 2026-01-13 14:30 (UTC)]"
    assert (marker.role, marker.source) == ("system", "session")
    local = session_started_marker(NOW)
    assert local.text.endswith("(local)]")


def test_session_marker_survives_loop_slice_and_temporal_skips_it(counter):
    system = cf.Message("system", "You are a mysis.")
    marker = session_started_marker(NOW, tz=UTC)
    history = [system, marker, cf.Message("user", "go")]
    history += [cf.Message("assistant", f"step {k}") for k in range(30)]
    policy = cf.LoopSlicePolicy(temporal=TemporalContext(tz=UTC))
    out = cf.compact(history, policy=policy, budget=cf.Budget(context_window=10_000),
                     counter=counter, now=NOW).messages
    assert out[1] is marker
    assert "Current date: 2026-01-13" in out[0].text
    assert out[2].source == "nudge"  # the marker is not a prompt
