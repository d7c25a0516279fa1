"""The HTML report renders its chart in a real headless browser."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

import contextfold as cf
from contextfold.cli.replay import Replay, StepRecord
from contextfold.cli.report import cut_at_word, render_html, write_html
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
    # Every handle is listed; ten of them in a collapsed list.
    assert "<details class='handles'><summary>10 handles</summary>" in step10
    assert all(f"<code>ctx_10_{k}</code>" in step10 for k in range(3, 43, 4))
    assert "more</span>" not in step10
    assert "10 handle(s)" in step10
    # The summary and ledger the compaction put in view are shown, escaped.
    assert "TASK: step 10 &lt;task&gt;" in step10 and "[ledger] EM-0010" in step10


def test_each_compaction_says_why_in_words() -> None:
    page = render_html(_replay())
    step6 = page[page.index("<h3>Step 6"):page.index("<h3>Step 10")]
    # The budget: 10,000 tokens, trigger 75%, target 50%; the history of step 6 is 6,000.
    assert ("The input was 6,000 tokens, under the trigger of 7,500 (75% of the "
            "10,000-token input budget)") in step6
    run = _replay()
    run.steps[5] = replace(run.steps[5], tokens_before=8_100, llm_calls=2)
    run.steps[9] = replace(run.steps[9], forced=True, llm_calls=0)
    page = render_html(run)
    assert ("The input reached 8,100 tokens, over the trigger of 7,500 (75% of the "
            "10,000-token input budget). It was compacted toward the target of 5,000 tokens "
            "and sent 3,000; the summaries took 2 call(s) to the model.") in page
    assert "The provider refused the request as too long (10,000 tokens)" in page
    assert "no model call was made for summaries" in page
    assert "2 compaction(s), 2 summary call(s) to the model" in page


def test_the_page_says_how_to_read_a_handle_back() -> None:
    run = _replay()
    page = render_html(run)
    assert "read_original_tool_for(store, conversation_id)" in page
    run.conversation_id, run.originals = "thread <7>", "the SQLite store data/history.db"
    page = render_html(run)
    assert ("<code>read_original_tool_for(store, &quot;thread &lt;7&gt;&quot;)</code>"
            in page)
    assert "contextfold.stores.read_original(store, &quot;thread &lt;7&gt;&quot;, handle)" in page
    assert "The originals are in the SQLite store data/history.db." in page


def test_headings_are_cut_at_a_word_and_escaped_newlines_are_line_breaks() -> None:
    run = _replay()
    words = "reservation " * 20
    run.steps[5] = replace(run.steps[5], inserted=(
        f"[Compaction Summary] {words}\nbody", '{"body": "line one\\nline two\\tend"}'))
    page = render_html(run)
    heading = re.search(r"<summary>(\[Compaction Summary\][^<]*)</summary>", page)
    assert heading and heading.group(1).endswith("reservation…")
    assert len(heading.group(1)) <= 91
    assert "line one\nline two\tend" in page and "\\n" not in page.split("<script")[0]
    assert cut_at_word("hello wonderful world", 12) == "hello…"
    assert cut_at_word("abcdefghijkl", 5) == "abcde…"  # one long word: cut where it must be
    assert cut_at_word("short", 5) == "short"


def test_a_rolling_block_sent_again_unchanged_is_marked() -> None:
    run = _replay()
    block = "[Compaction Summary]\nTASK: the first block"
    run.steps[5] = replace(run.steps[5], inserted=(block, "[ledger] A"))
    run.steps[9] = replace(run.steps[9], inserted=(block, "[Compaction Summary]\nsecond"))
    page = render_html(run)
    step10 = page[page.index("<h3>Step 10"):]
    assert step10.count("unchanged since step 6") == 1
    assert "<details class='inserted unchanged'><summary>[Compaction Summary]" in step10
    assert "<details class='inserted' open><summary>[Compaction Summary]" in step10  # new
    step6 = page[page.index("<h3>Step 6"):page.index("<h3>Step 10")]
    assert "unchanged" not in step6


HOSTILE = "x</script><!--<script>alert(1)</script>&\u2028\u2029>"


def _hostile_replay() -> Replay:
    run = _replay()
    steps = []
    for step in run.steps:
        targets = tuple(replace(t, tool_name=HOSTILE) for t in step.targets)
        steps.append(replace(step, targets=targets, method=step.method))
    return replace(run, title=HOSTILE, steps=steps, policy=HOSTILE)


def test_hostile_names_cannot_end_or_change_the_embedded_data() -> None:
    page = render_html(_hostile_replay())
    data = page[page.index("id='replay-data'>") + len("id='replay-data'>"):]
    data = data[:data.index("</script>")]
    assert not set("<>&\u2028\u2029") & set(data)
    chart = json.loads(data)
    assert chart["steps"][5]["targets"][0]["tool"] == HOSTILE  # read back exactly
    assert chart["title"] == HOSTILE
    # Outside the data, the names are escaped text: two scripts only, no comment opened.
    assert page.count("<script") == 2 and "<!--" not in page


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
    page = write_html(_hostile_replay(), tmp_path / "report.html")
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
    # The hostile tool and title names stayed text: no script ran from them.
    assert dom.count("<script") == 2 and "&lt;script&gt;alert(1)" in dom
    assert ">tokens</text>" in dom and ">model call (step)</text>" in dom
    shot = tmp_path / "chart.png"
    subprocess.run([browser, *flags, f"--screenshot={shot}", "--window-size=1000,800",
                    page.as_uri()], capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 5_000
