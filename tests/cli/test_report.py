"""The HTML report renders its chart in a real headless browser."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import contextfold as cf
from contextfold.cli.replay import Replay, StepRecord
from contextfold.cli.report import render_html, write_html
from contextfold.policy import Target


def _replay() -> Replay:
    budget = cf.Budget(context_window=10_000)
    steps = []
    for i in range(1, 13):
        history = 1_000 * i
        compacted = i in (6, 10)
        sent = history if i < 6 else 3_000 + 400 * (i - 6)
        target = Target(3, "tool", "truncated", 2_000, 400, tool_name="read_email")
        targets = (target,) if compacted else ()
        steps.append(StepRecord(i, 2 * i, history, 2 * i, sent, compacted, int(compacted),
                                "threshold" if compacted else "none", targets))
    return Replay(title="demo <run>", budget=budget, policy="threshold", steps=steps)


def test_page_is_self_contained_and_escapes_text() -> None:
    page = render_html(_replay())
    assert "demo &lt;run&gt;" in page
    assert not re.search(r"""(src|href)=["']https?://""", page), "page must not load anything"
    assert page.count("<h3>Step") == 2
    assert "read_email" in page


def _chromium() -> str | None:
    return os.environ.get("CONTEXTFOLD_CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser")


def test_chart_renders_in_headless_chromium(tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("CI must provide Chromium (.ci/services/chromium.sh)")
        pytest.skip("Chromium is not installed")
    page = write_html(_replay(), tmp_path / "report.html")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([browser, *flags, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    # The script ran: the SVG carries the number of steps it drew, two series and the markers.
    assert 'data-rendered="12"' in dom
    assert dom.count("<polyline") == 2
    assert dom.count('class="compaction"') == 2
    assert dom.count('class="limit"') == 2
    shot = tmp_path / "chart.png"
    subprocess.run([browser, *flags, f"--screenshot={shot}", "--window-size=1000,800",
                    page.as_uri()], capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 5_000
