"""An audit report (`python -m core.audit --json`, schema syncscope.audit/1) as the page's "Your loop" tab shows it:
a few sentences, the sites (a short row each, opening onto what to do about it), and the audited program's steps on a
timeline with a mark at each read. It draws the file's digest (dashboard.service.audit_digest, which
dashboard.edge.audit_process reads from the file, bounded); nothing in the file is run. Plain data in, text and figures
out (no gradio)."""

from __future__ import annotations

import html
import math
from typing import Any

import numpy as np
import plotly.graph_objects as go

from core.audit.fixes import MAX_CODE_LINES
from core.audit.words import copies_per_step, per_step_words, steps_found, tie_sentence, top_sites, when_read
from core.text import clip
from dashboard.service.audit_digest import HELD_CHARS
from dashboard.views import charts
from dashboard.views.report_text import plain
from dashboard.views.timeline import BAR_HALF, COORDINATE, IDLE_STYLE, SYNC_COLOR, bars

# The sites list: one short row a site (these columns), its fix, code pattern and callers behind the row's expander.
SITE_COLUMNS = ("per decode step", "kind", "where", "the line", "host blocked / device idle after")
ROWS_AT_ONCE = 20  # sites listed open; the rest behind one more expander
SITES_CSS = """
.sites { font-size: 14px; }
.sites .row, .sites summary { display: grid; gap: 10px; align-items: baseline;
  grid-template-columns: 6.5em 7.5em minmax(10em, 2fr) minmax(0, 3fr) 15em; padding: 5px 8px; }
.sites .row { font-weight: 600; border-bottom: 1px solid #ccc; }
.sites summary { cursor: pointer; list-style: none; border-bottom: 1px solid #eee; }
.sites summary::-webkit-details-marker { display: none; }
.sites summary > span { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.sites summary > span:first-child::before { content: "▸ "; }
.sites details[open] > summary > span:first-child::before { content: "▾ "; }
.sites .fix { padding: 4px 8px 10px 2em; }
.sites .fix pre { margin: 4px 0; padding: 6px 8px; overflow-x: auto; background: rgba(127, 127, 127, 0.1); }
.sites .more > summary { display: block; font-style: italic; }
@media (max-width: 720px) {
  .sites { font-size: 13px; }
  .sites .row, .sites summary { grid-template-columns: 4.2em 6.5em minmax(0, 1fr); gap: 2px 6px; }
  .sites .row > span:nth-child(4), .sites summary > span:nth-child(4) { display: none; }
  .sites .row > span:nth-child(5), .sites summary > span:nth-child(5) { grid-column: 2 / -1; }
}
"""
TITLE = "The audited program, step by step"
HOST_COLOR = "#1f77b4"


def _held(text: Any) -> str:
    """A digest's text as it is (it was clipped there); any other text clipped."""
    return clip(text, HELD_CHARS)


def _md(text: Any) -> str:
    return plain(text, HELD_CHARS)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "?"


def summary_md(report: dict[str, Any]) -> str:
    """Two to five sentences: what was audited, its reads and copies per decode step, the top site (or the sites
    that tie for it) and what it costs, and what the chart leaves out of a long audit. `report` is a digest
    (dashboard.service.audit_digest, read by dashboard.edge.audit_process): its fields have their types."""
    per_step = report.get("reads_per_decode_step")
    env = report["environment"]
    where = env.get("gpu") or env.get("device") or "?"
    lines = [f"**{_md(report.get('script') or '?')}** on {_md(where)}: "
             f"{steps_found(report.get('steps'), report.get('step_module'), _md)}."]
    if not _number(per_step):
        lines.append("No decode steps were found: audit again with `--steps-of` naming what each step calls, or mark "
                     "the steps with `core.audit.watch()`.")
    else:
        lines.append(f"**{per_step_words(per_step, _copies(report))}** (at most "
                     f"{_count(report.get('most_reads_in_a_decode_step'))} of them in one), over "
                     f"{_count(report.get('decode_steps'))} decode steps; {_count(report.get('lagged_waits', 0))} "
                     "waits on events with work queued behind them, which cost nothing, are not counted.")
        lines += _top_site_lines(report)
    if _number(report.get("kernel_busy_fraction")):
        lines.append(f"Kernels ran {report['kernel_busy_fraction']:.0%} of the device's time in decode steps (CUPTI).")
    if report.get("note"):
        lines.append(f"*{_md(report['note'])}.*")
    shown = shown_note(report)
    if shown:
        lines.append(f"*{plain(shown, len(shown))}*")
    return "  \n".join(lines)


def _copies(report: dict[str, Any]) -> float | None:
    """Host-to-device copies per decode step: the report's own count, or for a report written before it had one,
    its sites' (where the page holds every site)."""
    if _number(report.get("copies_per_decode_step")):
        return report["copies_per_decode_step"]
    shown = report["shown"]
    return copies_per_step(report["sites"]) if shown["sites"] == shown["shown_sites"] else None


def _top_site_lines(report: dict[str, Any]) -> list[str]:
    tied = top_sites(report.get("sites", []))
    if len(tied) > 1:
        sentence = tie_sentence(tied, _md)
        return [f"{sentence[0].upper()}{sentence[1:]}; each one's fix is in its row below."]
    if not tied:
        return []
    top = tied[0]
    cost = ""
    if _number(top.get("device_idle_after_ms_per_step")):
        blocked = top.get("host_blocked_ms_per_step")
        cost = (f": the host waits {(blocked if _number(blocked) else 0) * 1000:,.0f} µs in it, and the device then "
                f"idles {top['device_idle_after_ms_per_step'] * 1000:,.0f} µs (at most what removing it gives back)")
    thread = f" (on thread {_md(top['thread'])})" if top.get("thread") else ""
    lines = [f"The most frequent is {_md(top.get('kind'))} at {_md(top.get('file'))}:"
             f"{_count(top.get('line'))}{thread}{cost}."]
    if top.get("fix"):
        lines.append(f"What to do: {_md(top['fix'])}.")
    return lines


def shown_note(report: dict[str, Any]) -> str:
    """What the page leaves out of a long audit (its digest's `shown`), in one sentence; "" when it shows it all."""
    shown = report["shown"]
    parts = []
    if shown.get("steps", 0) > shown.get("shown_steps", 0) or shown.get("reads", 0) > shown.get("shown_reads", 0):
        parts.append(f"the chart draws the first {shown['shown_steps']:,} of its {shown['steps']:,} steps and the "
                     f"{shown['shown_reads']:,} reads in them (of {shown['reads']:,})")
    if shown.get("sites", 0) > shown.get("shown_sites", 0):
        parts.append(f"the list shows the {shown['shown_sites']:,} most read of its {shown['sites']:,} sites")
    if not parts:
        return ""
    return (f"This audit is long, so {' and '.join(parts)}; the numbers above are the whole audit's, as "
            "python -m core.audit counted them.")


def sites_html(report: dict[str, Any]) -> str:
    """The sites, those read in decode steps first: one short row each (SITE_COLUMNS), its fix, code pattern and
    callers behind the row's expander; past ROWS_AT_ONCE, the rest behind one more. Every text from the file is
    escaped (`report` is a digest: its texts are clipped)."""
    sites = report.get("sites", [])
    if not sites:
        return '<div class="sites"><p>No line of the program waited on the device.</p></div>'
    caption = ("<p>Each line of the program that waits on the device, the most per decode step first; open a row "
               "for what to do about it.</p>")
    head = "".join(f"<span>{html.escape(title)}</span>" for title in SITE_COLUMNS)
    rows = [site_html(site, report.get("decode_steps")) for site in sites]
    listed = "".join(rows[:ROWS_AT_ONCE])
    if len(rows) > ROWS_AT_ONCE:
        listed += (f'<details class="more"><summary>{len(rows) - ROWS_AT_ONCE:,} more sites, read less often'
                   f"</summary>{''.join(rows[ROWS_AT_ONCE:])}</details>")
    return f'<div class="sites">{caption}<div class="row">{head}</div>{listed}</div>'


def site_html(site: dict[str, Any], decode_steps: Any = None) -> str:
    """One site: a one-line row (per step, kind, file:line, its line of code, its cost) that opens onto what to do
    and when it was read (of the report's `decode_steps`)."""
    line = site.get("line")
    where = f"{_held(site.get('file'))}:{line if isinstance(line, int) and not isinstance(line, bool) else '?'}"
    code = _held(site.get("code") or "")
    cells = [_per_step_text(site.get("per_step")), _held(site.get("kind") or "?"), where, code, cost_text(site)]
    summary = "".join(f'<span title="{_attr(cell)}">{_text(cell)}</span>' for cell in cells)
    return f"<details><summary>{summary}</summary>{fix_html(site, decode_steps)}</details>"


def fix_html(site: dict[str, Any], decode_steps: Any = None) -> str:
    """What a site's row opens onto: the fix, its pattern's lines (at most MAX_CODE_LINES) as code, the line
    itself, when it was read (as the terminal says it, core.audit.words.when_read) and where it was called from."""
    parts = []
    if site.get("fix"):
        parts.append(f"<p><b>What to do:</b> {_text(_held(site['fix']).rstrip('.'))}.</p>")
    code = site.get("fix_code")
    if isinstance(code, str) and code.strip():
        lines = [_held(line) for line in code.splitlines() if line.strip()][:MAX_CODE_LINES]
        parts.append(f"<p>The pattern:</p><pre><code>{_text(chr(10).join(lines))}</code></pre>")
    parts.append(f"<p><b>The line:</b> <code>{_text(_held(site.get('code') or '?'))}</code></p>")
    parts.append(f"<p><b>Read:</b> {_text(when_read(site, decode_steps))}.</p>")
    if (calls := called_from(site)) != "–":
        parts.append(f"<p><b>Called from:</b> {_text(calls)}</p>")
    return f'<div class="fix">{"".join(parts)}</div>'


def cost_text(site: dict[str, Any]) -> str:
    """"863 µs / 590 µs" a decode step (host blocked / device idle after); "–" where the audit has no cost (the
    CPU, or a read of setup steps)."""
    blocked, idle = site.get("host_blocked_ms_per_step"), site.get("device_idle_after_ms_per_step")
    if not _number(blocked) and not _number(idle):
        return "–"
    return f"{_us_text(blocked)} / {_us_text(idle)}"


def called_from(site: dict[str, Any]) -> str:
    """A site's thread (where it is not the program's own) and the calls that led to it, innermost first."""
    callers = site.get("callers")
    callers = [_held(c) for c in callers[:4]] if isinstance(callers, list) else []
    text = "; from ".join(callers)
    if site.get("thread"):
        text = f"thread {_held(site['thread'])}" + (f": {text}" if text else "")
    return text or "–"


def _per_step_text(value: Any) -> str:
    return f"{value:.2f}" if _number(value) else "–"


def _us_text(ms: Any) -> str:
    return f"{ms * 1000:,.0f} µs" if _number(ms) else "–"


def _text(text: str) -> str:
    return html.escape(text, quote=False)


def _attr(text: str) -> str:
    return html.escape(text, quote=True)


def audit_figure(report: dict[str, Any]) -> go.Figure:
    """The host's steps (solid: the step's call; hatched: between calls) and a mark at each read, on the audited
    run's clock; on CUDA a second line: kernel-busy per step."""
    starts = [float(t) for t in report.get("step_starts_ms") or []]
    if not starts:
        return charts.empty_figure(TITLE, "No steps were found in this audit.")
    ends = [e if _number(e) else s for s, e in zip(starts, report.get("step_ends_ms") or [None] * len(starts))]
    sites = {s.get("index", i): s for i, s in enumerate(report.get("sites", []))}
    events = [e for e in report.get("events") or [] if _number(e.get("t_ms"))]
    follows = [*starts[1:], max([*ends, *(e["t_ms"] for e in events)], default=starts[-1])]
    data: list[dict[str, Any]] = [
        bars(np.asarray(starts), np.asarray(ends), 0.0, "a step's call (host)", {"fillcolor": HOST_COLOR}),
        bars(np.asarray(ends), np.asarray(follows), 0.0, "between steps (host)", IDLE_STYLE)]
    data += read_marks(events, sites)
    busy = report.get("kernel_busy_ms_per_step")
    layout: dict[str, Any] = {
        "showlegend": True, "legend": {"orientation": "h", "y": -0.35},
        "xaxis": {"title": {"text": "ms since the audit began"}, "rangeslider": {"visible": True, "thickness": 0.1},
                  "range": [starts[min(len(starts) - 1, len(starts) // 2)], starts[min(len(starts) - 1,
                                                                                       len(starts) // 2 + 12)]]},
        "yaxis": {"tickvals": [0], "ticktext": ["host"], "range": [0.6, -0.6], "fixedrange": True},
    }
    if isinstance(busy, list) and busy and all(_number(b) for b in busy):
        data.append({"type": "scatter", "mode": "lines+markers", "name": "kernel time per step (ms, CUPTI)",
                     "x": starts[:len(busy)], "y": busy, "yaxis": "y2", "line": {"color": "#2ca02c"}})
        layout["yaxis"]["domain"] = [0.45, 1.0]
        layout["yaxis2"] = {"domain": [0.0, 0.35], "title": {"text": "kernel ms"}, "rangemode": "tozero"}
    return charts.figure(data, layout, TITLE, height=420 if busy else 300)


def read_marks(events: list[dict[str, Any]], sites: dict[Any, dict[str, Any]]) -> list[dict[str, Any]]:
    """The reads' marks: one trace per site, its hover said once (site_hover) with each mark's step (customdata), so
    the figure grows by a few numbers a read, whatever the file's texts hold."""
    by_site: dict[tuple[Any, bool], list[dict[str, Any]]] = {}
    for event in events:
        by_site.setdefault((event.get("site"), isinstance(event.get("step"), int)), []).append(event)
    marks = []
    for (site, in_step), reads in by_site.items():
        when = "step %{customdata}" if in_step else "before the steps"
        marks.append({"type": "scatter", "mode": "markers", "name": "a wait on the device (a read or a copy)",
                      "legendgroup": "reads", "showlegend": not marks,
                      "x": np.asarray([e["t_ms"] for e in reads], dtype=COORDINATE),
                      "y": np.full(len(reads), -BAR_HALF, dtype=COORDINATE),
                      "customdata": np.asarray([e["step"] if in_step else 0 for e in reads], dtype=np.int32),
                      "hovertemplate": f"{when}: {site_hover(sites.get(site, {}))}<extra></extra>",
                      "marker": {"symbol": "triangle-down", "size": 9, "color": SYNC_COLOR}})
    return marks


def site_hover(site: dict[str, Any]) -> str:
    """A site as a read's hover says it: plotly renders it as HTML, so what came from the file is escaped, and
    `%` is doubled-up out of plotly's template syntax."""
    if not site:
        return "a site the table does not list"
    kind, file, code = (_held(site.get(key) or "") for key in ("kind", "file", "code"))
    text = f"{kind} at {file}:{_count(site.get('line'))}\n{code}"
    return html.escape(text).replace("\n", "<br>").replace("%", "&#37;")
