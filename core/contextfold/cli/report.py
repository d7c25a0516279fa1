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
from .._counting.budget import Budget
from .replay import Replay, StepRecord

__all__ = ["cut_at_word", "render_html", "script_json", "step_reason", "step_story",
           "text_table", "write_html"]

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
details.unchanged summary{color:#667085} details.handles code{margin-right:.3rem}
p.why{margin:.2rem 0} p.read-back{background:#f9fafb;padding:.5rem;border-radius:4px}
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
_HANDLES_INLINE = 6  # more handles than this are listed in a collapsed list
_HEADING_CHARS = 90  # characters of a summary's first line used as its heading


def cut_at_word(text: str, limit: int) -> str:
    """``text`` whole when it fits in ``limit`` characters, else cut at the last space
    before ``limit`` (at ``limit`` when a single word is longer) with an ellipsis."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    space = max(head.rfind(" "), head.rfind("\n"))
    if space > 0 and not text[limit].isspace():
        head = head[:space]
    return head.rstrip() + "…"


def _readable(text: str) -> str:
    """Text for a person: the newlines and tabs that JSON escaped in a quoted tool result
    (a literal backslash-n) shown as line breaks and tabs."""
    return text.replace("\\r\\n", "\n").replace("\\n", "\n").replace("\\t", "\t")


def _handles_cell(handles: Sequence[str]) -> str:
    codes = " ".join(f"<code>{html.escape(h)}</code>" for h in handles)
    if len(handles) <= _HANDLES_INLINE:
        return codes
    return (f"<details class='handles'><summary>{len(handles):,} handles</summary>{codes}"
            "</details>")


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


def step_reason(step: StepRecord, budget: Budget) -> str:
    """Why the compaction ran and what it aimed for, in words."""
    before = step.tokens_before or step.history_tokens
    trigger, target = budget.trigger_tokens, budget.target_tokens
    share = f"{trigger / budget.input_budget:.0%} of the {budget.input_budget:,}-token input budget"
    if step.forced:
        why = (f"The provider refused the request as too long ({before:,} tokens), so it was "
               "compacted whatever the trigger said")
    elif before > trigger:
        why = f"The input reached {before:,} tokens, over the trigger of {trigger:,} ({share})"
    else:
        why = (f"The input was {before:,} tokens, under the trigger of {trigger:,} ({share}): "
               "a compaction was asked for, or one prepared ahead was used")
    summaries = (f"; the summaries took {step.llm_calls} call(s) to the model"
                 if step.llm_calls else "; no model call was made for summaries")
    return (f"{why}. It was compacted toward the target of {target:,} tokens and sent "
            f"{step.sent_tokens:,}{summaries}.")


def _inserted_block(text: str, unchanged_since: int | None) -> str:
    shown = _readable(text)
    cut = shown
    if len(shown) > _TEXT_SHOWN:
        kept = cut_at_word(shown, _TEXT_SHOWN)
        cut = f"{kept}\n[{len(shown) - len(kept) + 1:,} more characters]"
    first = cut_at_word(shown.splitlines()[0], _HEADING_CHARS) if shown else ""
    if unchanged_since is not None:
        return (f"<details class='inserted unchanged'><summary>{html.escape(first)} "
                f"<span class='muted'>(unchanged since step {unchanged_since}: sent again "
                "as it was)</span></summary>"
                f"<pre>{html.escape(cut)}</pre></details>")
    return (f"<details class='inserted' open><summary>{html.escape(first)}</summary>"
            f"<pre>{html.escape(cut)}</pre></details>")


def _read_back(replay: Replay) -> str:
    """How the handles in the tables are read back."""
    where = f" The originals are in {html.escape(replay.originals)}." if replay.originals else ""
    if replay.conversation_id is not None:
        cid = html.escape(json.dumps(replay.conversation_id))
        how = (f"give the agent the <code>read_original</code> tool for conversation "
               f"<code>{cid}</code>: <code>read_original_tool_for(store, {cid})</code> "
               "(<code>langchain_contextfold</code> or "
               "<code>llama_index.memory.contextfold</code>), or call "
               f"<code>contextfold.stores.read_original(store, {cid}, handle)</code>")
    else:
        how = ("in an agent run with a store, give the agent the <code>read_original</code> "
               "tool for its conversation id: <code>read_original_tool_for(store, "
               "conversation_id)</code> (<code>langchain_contextfold</code> or "
               "<code>llama_index.memory.contextfold</code>)")
    return (f"<p class='read-back'>Each handle (<code>ctx_</code> and 12 hex digits) names an "
            f"original that a compaction cut, cleared, dropped or summarized. To read one "
            f"back, {how}; the tool reads a window of the original or the lines matching a "
            f"pattern.{where}</p>")


def _compactions_section(replay: Replay) -> str:
    parts = []
    previous: dict[str, int] = {}  # inserted text -> the step that first sent it
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
        inserted = "".join(_inserted_block(t, previous.get(t)) for t in s.inserted)
        previous = {t: previous.get(t, s.step) for t in s.inserted}
        parts.append(
            f"<section class='compaction-step'><h3>Step {s.step}: {html.escape(s.method)} "
            f"<span class='muted'>({s.history_tokens:,} tokens of history → "
            f"{s.sent_tokens:,} sent, {s.llm_calls} summary call(s) to the model, "
            f"{s.duration * 1000:,.0f} ms)</span></h3>"
            f"<p class='why'>{html.escape(step_reason(s, replay.budget))}</p>"
            f"<p class='story'>{html.escape(step_story(s))}</p>{table}"
            + (f"<h4>Inserted into the model's view</h4>{inserted}" if inserted else "")
            + "</section>"
        )
    if not parts:
        return "<p class='muted'>No compaction was needed.</p>"
    return _read_back(replay) + "".join(parts)


def script_json(data: Any) -> str:
    """``data`` as JSON that is safe inside a ``<script>`` element: no ``<``, ``>`` or
    ``&`` (so no ``</script>``, ``<!--`` or ``<script>`` can end or change the element)
    and no U+2028/U+2029 (line ends to older JavaScript parsers), each written as its
    ``\\uXXXX`` escape, which JSON reads back as the same character."""
    text = json.dumps(data)
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                         ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escape)
    return text


def render_html(replay: Replay) -> str:
    """The report page for ``replay`` as one HTML string."""
    chart_data = replay.to_dict()
    for step in chart_data["steps"]:  # shown as text below; the chart does not need it twice
        del step["inserted"]
    data = script_json(chart_data)
    last = replay.steps[-1] if replay.steps else None
    summary = (
        f"{len(replay.steps)} model calls, {replay.compactions} compaction(s), "
        f"{sum(s.llm_calls for s in replay.steps)} summary call(s) to the model; "
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
