"""A self-contained HTML picture of what compaction did during a run.

One file, no network needed to view it: the data is embedded as JSON and a small script
draws the chart (tokens per step against the budget and trigger lines, compactions
marked) as inline SVG, followed by a table of targets for each compaction.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .replay import Replay

__all__ = ["render_html", "text_table", "write_html"]

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;color:#1d2330}
h1{font-size:1.4rem;margin:0 0 .3rem} .muted{color:#667085}
#chart{border:1px solid #d0d5dd;border-radius:6px;background:#fff}
table{border-collapse:collapse;margin:.6rem 0 1.4rem;min-width:40rem}
th,td{border-bottom:1px solid #eaecf0;padding:.25rem .6rem;text-align:right}
th:first-child,td:first-child{text-align:left}
.legend span{display:inline-block;margin-right:1.2rem}
.swatch{display:inline-block;width:1.6rem;height:.25rem;vertical-align:middle;margin-right:.3rem}
"""

# Draws the chart from the embedded data. Kept small and dependency-free on purpose.
_SCRIPT = """
(function(){
  const data = JSON.parse(document.getElementById('replay-data').textContent);
  const svg = document.getElementById('chart');
  const NS = 'http://www.w3.org/2000/svg';
  const W = 900, H = 360, L = 70, R = 20, T = 20, B = 40;
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
  el('line', {x1: L, x2: L, y1: T, y2: H - B, stroke: '#98a2b3'});
  el('line', {x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: '#98a2b3'});
  for (let k = 0; k <= 4; k++) {
    const v = Math.round(maxY * k / 4);
    el('text', {x: L - 6, y: y(v) + 4, 'text-anchor': 'end', 'font-size': 11,
      fill: '#667085'}, v.toLocaleString());
  }
  el('text', {x: (W + L) / 2, y: H - 8, 'text-anchor': 'middle', 'font-size': 12,
    fill: '#667085'}, 'model call');
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


def _targets_table(replay: Replay) -> str:
    parts = []
    for s in replay.steps:
        if not s.compacted or not s.targets:
            continue
        rows = "".join(
            f"<tr><td>{html.escape(t.tool_name or t.role)}</td><td>{t.original_tokens:,}</td>"
            f"<td>{t.new_tokens:,}</td><td>{html.escape(t.method)}</td></tr>"
            for t in s.targets
        )
        parts.append(
            f"<h3>Step {s.step}: {html.escape(s.method)} "
            f"<span class='muted'>({s.history_tokens:,} → {s.sent_tokens:,} tokens, "
            f"{s.llm_calls} LLM call(s))</span></h3>"
            "<table><tr><th>target</th><th>original tokens</th><th>new tokens</th>"
            f"<th>method</th></tr>{rows}</table>"
        )
    return "".join(parts) or "<p class='muted'>No compaction was needed.</p>"


def render_html(replay: Replay) -> str:
    """The report page for ``replay`` as one HTML string."""
    data = json.dumps(replay.to_dict()).replace("</", "<\\/")
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
        f"<h2>Compactions</h2>{_targets_table(replay)}"
        f"<script type='application/json' id='replay-data'>{data}</script>"
        f"<script>{_SCRIPT}</script></body></html>"
    )


def write_html(replay: Replay, path: str | Path) -> Path:
    """Write the report page to ``path`` (parents created) and return the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_html(replay), encoding="utf-8")
    return target
