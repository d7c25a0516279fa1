"""The HTML report renders its chart in a real headless browser."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import replace
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
        truncated = [Target(k, "tool", "truncated", 2_000, 400, tool_name="read_email",
                            handle=f"ctx_{i}_{k}") for k in range(3, 3 + 4 * i, 4)]
        summarized = Target(2, "assistant", "summarized", 500, 0)
        targets = (*truncated, summarized) if compacted else ()
        inserted = (f"[Compaction Summary]\nTASK: step {i} <task>", f"[ledger] EM-00{i}") \
            if compacted else ()
        steps.append(StepRecord(i, 2 * i, history, 2 * i, sent, compacted, int(compacted),
                                "threshold" if compacted else "none", targets,
                                inserted=inserted))
    return Replay(title="demo <run>", budget=budget, policy="threshold", steps=steps)


def test_page_is_self_contained_and_escapes_text() -> None:
    page = render_html(_replay())
    assert "demo &lt;run&gt;" in page
    assert not re.search(r"""(src|href)=["']https?://""", page), "page must not load anything"
    assert page.count("<h3>Step") == 2
    assert "read_email" in page


def test_each_compaction_tells_what_it_did_with_totals_handles_and_inserted_text() -> None:
    page = render_html(_replay())
    step10 = page[page.index("<h3>Step 10"):]
    # Ten read_email results truncated are one row with their totals, not ten rows.
    assert "10 read_email truncated (20,000 → 4,000 tokens); 1 assistant summarized" in step10
    assert step10.count("<td>truncated</td>") == 1
    assert "<td>total</td><td></td><td>11</td><td>20,500</td><td>4,000</td>" in step10
    assert "<code>ctx_10_3</code>" in step10 and "and 4 more" in step10
    assert "10 handle(s)" in step10
    # The summary and ledger the compaction put in view are shown, escaped.
    assert "TASK: step 10 &lt;task&gt;" in step10 and "[ledger] EM-0010" in step10


def test_long_inserted_text_is_cut_with_a_marker() -> None:
    run = _replay()
    step = run.steps[5]
    run.steps[5] = replace(step, inserted=("x" * 10_000,))
    page = render_html(run)
    assert "more characters]" in page and "x" * 10_000 not in page


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
    # Labelled axes: step numbers under the chart, round token values beside it.
    xticks = re.findall(r'class="xtick"[^>]*>(\d+)<', dom)
    assert xticks[0] == "1" and "12" in xticks
    yticks = [int(v.replace(",", "")) for v in re.findall(r'class="ytick"[^>]*>([\d,]+)<', dom)]
    assert yticks[0] == 0 and all(v % 1_000 == 0 for v in yticks) and len(yticks) >= 3
    # The summary text and the handles are on the page the browser drew.
    assert "TASK: step 10 &lt;task&gt;" in dom and "<code>ctx_10_3</code>" in dom
    assert ">tokens</text>" in dom and ">model call (step)</text>" in dom
    shot = tmp_path / "chart.png"
    subprocess.run([browser, *flags, f"--screenshot={shot}", "--window-size=1000,800",
                    page.as_uri()], capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 5_000
