"""A self-contained HTML picture of what compaction did during a run.

One file, no network needed to view it: the data is embedded as JSON and a small script
draws the chart (tokens per model call against the budget and trigger lines, compactions
marked) as inline SVG. Each compaction follows: a line saying what was cut, summarized or
cleared, a table of those changes grouped with totals and the handles that read the
originals back, and the text of the summaries and ledger it put in view.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._contract.policy import Target
from .replay import Replay, StepRecord

__all__ = ["render_html", "step_story", "text_table", "write_html"]

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;color:#1d2330}
h1{font-size:1.4rem;margin:0 0 .3rem} .muted{color:#667085}
#chart{border:1px solid #d0d5dd;border-radius:6px;background:#fff}
table{border-collapse:collapse;margin:.6rem 0 1.4rem;min-width:40rem}
th,td{border-bottom:1px solid #eaecf0;padding:.25rem .6rem;text-align:right}
th:first-child,td:first-child{text-align:left}
.legend span{display:inline-block;margin-right:1.2rem}
.swatch{display:inline-block;width:1.6rem;height:.25rem;vertical-align:middle;margin-right:.3rem}
th:nth-child(2),td:nth-child(2),th:last-child{text-align:left}
tr.total td{font-weight:600;border-top:1px solid #98a2b3} td.handles{text-align:left}
details.inserted pre{white-space:pre-wrap;background:#f9fafb;border:1px solid #eaecf0;
  border-radius:4px;padding:.5rem;max-height:24rem;overflow:auto;font-size:12px}
"""

# Draws the chart from the embedded data. Kept small and dependency-free on purpose.
_SCRIPT = """
(function(){
  const data = JSON.parse(document.getElementById('replay-data').textContent);
  const svg = document.getElementById('chart');
  const NS = 'http://www.w3.org/2000/svg';
  const W = 900, H = 360, L = 78, R = 20, T = 20, B = 44;
  const steps = data.steps;
  const maxY = Math.max(data.budget.input_budget,
    ...steps.map(s => s.history_tokens), ...steps.map(s => s.sent_tokens)) * 1.05;
  const n = Math.max(steps.length, 2);
  const x = i => L + (W - L - R) * (i / (n - 1));
  const y = v => T + (H - T - B) * (1 - v / maxY);
  function el(name, attrs, text){
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    svg.appendChild(e); return e;
  }
  function hline(v, color, label){
    el('line', {x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: color,
      'stroke-dasharray': '6 4', 'class': 'limit'});
    el('text', {x: W - R - 4, y: y(v) - 4, 'text-anchor': 'end', fill: color,
      'font-size': 11}, label + ' ' + v.toLocaleString());
  }
  function series(key, color, cls){
    const pts = steps.map((s, i) => x(i) + ',' + y(s[key])).join(' ');
    el('polyline', {points: pts, fill: 'none', stroke: color, 'stroke-width': 2, 'class': cls});
  }
  // Tick spacing of 1, 2 or 5 times a power of ten, so the labels are round numbers.
  function niceStep(range, count){
    const raw = range / count, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    return [1, 2, 5, 10].map(m => m * mag).find(v => v >= raw);
  }
  el('line', {x1: L, x2: L, y1: T, y2: H - B, stroke: '#98a2b3'});
  el('line', {x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: '#98a2b3'});
  const dy = niceStep(maxY, 5);
  for (let v = 0; v <= maxY; v += dy) {
    el('line', {x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: '#f2f4f7'});
    el('text', {x: L - 6, y: y(v) + 4, 'text-anchor': 'end', 'font-size': 11,
      fill: '#667085', 'class': 'ytick'}, v.toLocaleString());
  }
  const dx = Math.max(1, niceStep(steps.length, 10));
  steps.forEach((s, i) => {
    if (s.step % dx !== 0 && i !== 0) return;
    el('text', {x: x(i), y: H - B + 16, 'text-anchor': 'middle', 'font-size': 11,
      fill: '#667085', 'class': 'xtick'}, String(s.step));
  });
  el('text', {x: (W + L) / 2, y: H - 4, 'text-anchor': 'middle', 'font-size': 12,
    fill: '#667085'}, 'model call (step)');
  el('text', {x: 14, y: (H - B + T) / 2, 'text-anchor': 'middle', 'font-size': 12,
    fill: '#667085', transform: 'rotate(-90 14 ' + (H - B + T) / 2 + ')'}, 'tokens');
  hline(data.budget.input_budget, '#d92d20', 'budget');
  hline(data.budget.trigger_tokens, '#f79009', 'trigger');
  series('history_tokens', '#98a2b3', 'history');
  series('sent_tokens', '#1570ef', 'sent');
  steps.forEach((s, i) => {
    if (s.compacted) el('circle', {cx: x(i), cy: y(s.sent_tokens), r: 5, fill: '#12b76a',
      'class': 'compaction'}).appendChild(document.createElementNS(NS, 'title')).textContent =
      'step ' + s.step + ': ' + s.method;
  });
  svg.setAttribute('data-rendered', String(steps.length));
})();
"""


def text_table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """A plain-text table for terminals: first column left-aligned, the rest right-aligned."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(cells):
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths, strict=True))))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


_TEXT_SHOWN = 4_000  # characters of each inserted summary shown before a marker
_HANDLES_SHOWN = 6  # handles listed per row before "and N more"


def _handles_cell(handles: Sequence[str]) -> str:
    shown = " ".join(f"<code>{html.escape(h)}</code>" for h in handles[:_HANDLES_SHOWN])
    rest = len(handles) - _HANDLES_SHOWN
    return shown + (f" <span class='muted'>and {rest} more</span>" if rest > 0 else "")


def _grouped_targets(targets: Sequence[Target]) -> list[tuple[str, str, int, int, int, list[str]]]:
    """Targets grouped by (method, tool or role): count, tokens before and after, and the
    distinct handles (a run of left-out messages shares one)."""
    groups: dict[tuple[str, str], list[Target]] = {}
    for t in targets:
        groups.setdefault((t.method, t.tool_name or t.role), []).append(t)
    return [
        (method, what, len(ts), sum(t.original_tokens for t in ts),
         sum(t.new_tokens for t in ts), list(dict.fromkeys(t.handle for t in ts if t.handle)))
        for (method, what), ts in groups.items()
    ]


def step_story(step: StepRecord) -> str:
    """One line saying what a compaction did: per method, how many messages and tokens."""
    parts = [
        f"{n} {what} {method} ({before:,} → {after:,} tokens)"
        for method, what, n, before, after, _ in _grouped_targets(step.targets)
    ]
    return "; ".join(parts) or "no message changed"


def _inserted_block(text: str) -> str:
    cut = text[:_TEXT_SHOWN]
    more = len(text) - len(cut)
    marker = f"\n[… {more:,} more characters]" if more > 0 else ""
    first = html.escape(text.splitlines()[0][:80]) if text else ""
    return (f"<details class='inserted' open><summary>{first}</summary>"
            f"<pre>{html.escape(cut + marker)}</pre></details>")


def _compactions_section(replay: Replay) -> str:
    parts = []
    for s in replay.steps:
        if not s.compacted:
            continue
        grouped = _grouped_targets(s.targets)
        rows = "".join(
            f"<tr><td>{html.escape(method)}</td><td>{html.escape(what)}</td><td>{n:,}</td>"
            f"<td>{before:,}</td><td>{after:,}</td><td class='handles'>"
            f"{_handles_cell(handles)}</td></tr>"
            for method, what, n, before, after, handles in grouped
        )
        total = (
            f"<tr class='total'><td>total</td><td></td><td>{len(s.targets):,}</td>"
            f"<td>{sum(t.original_tokens for t in s.targets):,}</td>"
            f"<td>{sum(t.new_tokens for t in s.targets):,}</td>"
            f"<td>{len({h for g in grouped for h in g[5]}):,} handle(s)</td></tr>"
        )
        table = (
            "<table><tr><th>done</th><th>to</th><th>messages</th><th>tokens before</th>"
            f"<th>tokens after</th><th>handles (read_original)</th></tr>{rows}{total}</table>"
            if s.targets else ""
        )
        inserted = "".join(_inserted_block(t) for t in s.inserted)
        parts.append(
            f"<section class='compaction-step'><h3>Step {s.step}: {html.escape(s.method)} "
            f"<span class='muted'>({s.history_tokens:,} tokens of history → "
            f"{s.sent_tokens:,} sent, {s.llm_calls} LLM call(s), "
            f"{s.duration * 1000:,.0f} ms)</span></h3>"
            f"<p class='story'>{html.escape(step_story(s))}</p>{table}"
            + (f"<h4>Inserted into the model's view</h4>{inserted}" if inserted else "")
            + "</section>"
        )
    return "".join(parts) or "<p class='muted'>No compaction was needed.</p>"


def render_html(replay: Replay) -> str:
    """The report page for ``replay`` as one HTML string."""
    chart_data = replay.to_dict()
    for step in chart_data["steps"]:  # shown as text below; the chart does not need it twice
        del step["inserted"]
    data = json.dumps(chart_data).replace("</", "<\\/")
    last = replay.steps[-1] if replay.steps else None
    summary = (
        f"{len(replay.steps)} model calls, {replay.compactions} compaction(s); "
        f"last call sent {last.sent_tokens:,} of {last.history_tokens:,} tokens"
        if last
        else "no model calls"
    )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>contextfold report: {html.escape(replay.title)}</title>"
        f"<style>{_STYLE}</style></head><body>"
        f"<h1>{html.escape(replay.title)}</h1>"
        f"<p class='muted'>policy {html.escape(replay.policy)} · {summary}</p>"
        "<p class='legend'><span><i class='swatch' style='background:#1570ef'></i>sent to the "
        "model</span><span><i class='swatch' style='background:#98a2b3'></i>full history</span>"
        "<span><i class='swatch' style='background:#d92d20'></i>budget</span>"
        "<span><i class='swatch' style='background:#f79009'></i>trigger</span>"
        "<span><i class='swatch' style='background:#12b76a'></i>compaction</span></p>"
        "<svg id='chart' width='900' height='360' viewBox='0 0 900 360' role='img' "
        "aria-label='context tokens per model call'></svg>"
        f"<h2>Compactions</h2>{_compactions_section(replay)}"
        f"<script type='application/json' id='replay-data'>{data}</script>"
        f"<script>{_SCRIPT}</script></body></html>"
    )


def write_html(replay: Replay, path: str | Path) -> Path:
    """Write the report page to ``path`` (parents created) and return the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_html(replay), encoding="utf-8")
    return target
