"""``contextfold demo`` runs offline and keeps its promises."""

from __future__ import annotations

import io
import json
from pathlib import Path

from contextfold.cli import main
from contextfold.cli.demo import DEMO_BUDGET, run_demo


def test_demo_reads_every_email_within_budget(tmp_path: Path) -> None:
    out = io.StringIO()
    status = run_demo(data_dir=tmp_path, emails=43, out=out)
    text = out.getvalue()
    assert status == 0, text
    assert "e-mails read 43/43 (re-reads: 0)" in text
    assert "reference numbers in the briefing 43/43" in text
    run = json.loads((tmp_path / "report.json").read_text())
    steps = run["steps"]
    assert all(s["sent_tokens"] <= DEMO_BUDGET.input_budget for s in steps)
    assert steps[-1]["history_tokens"] > DEMO_BUDGET.input_budget  # compaction was needed
    assert sum(s["compacted"] for s in steps) >= 2
    assert (tmp_path / "report.html").read_text().startswith("<!doctype html>")
    assert (tmp_path / "history.db").stat().st_size > 0
    assert "model: scripted" in text  # the output says no real model answered


def test_demo_report_shows_what_each_compaction_put_in_view_and_its_handles(
        tmp_path: Path) -> None:
    assert run_demo(data_dir=tmp_path, emails=43, out=io.StringIO()) == 0
    compactions = [s for s in json.loads((tmp_path / "report.json").read_text())["steps"]
                   if s["compacted"]]
    page = (tmp_path / "report.html").read_text()
    for step in compactions:
        assert any(text.startswith("[Compaction ledger") for text in step["inserted"])
        handles = [t["handle"] for t in step["targets"] if t["handle"]]
        assert len(handles) == len(step["targets"])  # every cut message can be read back
        assert f"<code>{handles[0]}</code>" in page
        assert f"Step {step['step']}: threshold" in page
    # What the ledger and summary say about a cut e-mail is on the page.
    assert "EM-001" in page and "[Compaction Summary]" in page


def test_demo_through_the_command_line(tmp_path: Path) -> None:
    out = io.StringIO()
    assert main(["demo", "--data-dir", str(tmp_path), "--emails", "20"], out=out) == 0
    assert "e-mails read 20/20" in out.getvalue()
