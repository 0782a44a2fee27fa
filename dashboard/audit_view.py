"""An audit report (`python -m core.audit --json`, schema syncscope.audit/1) as the page's "Your loop" tab shows it:
a few sentences, the sites table with what to do about each, and the audited program's steps on a timeline with a
mark at each read. Only parses the file; nothing in it is run. Plain data in, text and figures out (no gradio)."""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go

from core import report_schema
from core.measure.sync_fixes import MAX_CODE_LINES
from core.report_schema import AUDIT, BENCH, PAGE, AuditReport
from core.text import clip
from dashboard import charts
from dashboard.report_text import plain
from dashboard.timeline import BAR_HALF, COORDINATE, IDLE_STYLE, SYNC_COLOR, bars

SITE_HEADERS = ("reads per decode step", "kind", "where", "line", "called from", "host blocked µs/step",
                "device idle after µs/step", "what to do")
# Each column wide enough for its header's words and a dozen characters (the page lets the table scroll sideways
# rather than squeeze it): 1210 px, the tab's width at 1400.
SITE_WIDTHS = ["90px", "110px", "190px", "220px", "180px", "100px", "100px", "220px"]
CODE_BREAK = " ⏎ "  # between a fix's code lines: a table cell shows text on one line
IN_REPLAY = ("this JSON is a benchmark report (python -m core.bench), not an audit report of a program: open it in "
             "the Replay tab")
TITLE = "The audited program, step by step"
HOST_COLOR = "#1f77b4"


def is_audit(document: Any) -> bool:
    return report_schema.kind_of(document) == AUDIT


def is_bench_report(document: Any) -> bool:
    """A report Replay opens: core.bench's, or the page's download of one."""
    return report_schema.kind_of(document) in (BENCH, PAGE)


def open_audit(data: bytes | str | Path, max_bytes: int) -> AuditReport:
    """An audit report from JSON text (core.report_schema.load); ValueError naming the first thing missing or wrong
    (it is only parsed)."""
    try:
        return report_schema.load(data, max_bytes, expect=AUDIT)  # type: ignore[return-value]
    except report_schema.ReportError as exc:
        if exc.found in (BENCH, PAGE):
            raise report_schema.ReportError(IN_REPLAY, exc.found) from None
        raise


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def summary_md(report: dict[str, Any]) -> str:
    """Two to four sentences: what was audited, how many reads per decode step, the top site and what it costs."""
    report = report_schema.upgrade(report)
    per_step = report.get("reads_per_decode_step")
    env = report["environment"]
    where = env.get("gpu") or env.get("device") or "?"
    lines = [f"**{plain(clip(report.get('script', '?'), 120))}** on {plain(where)}: {report.get('steps', 0)} steps "
             f"of {plain(clip(report.get('step_module') or 'none found', 80))}."]
    if per_step is None:
        lines.append("No decode steps were found: audit again with `--steps-of` naming what each step calls, or mark "
                     "the steps with `core.audit.watch()`.")
    else:
        lines.append(f"**{per_step:.2f} host reads of device values per decode step** (at most "
                     f"{report.get('most_reads_in_a_decode_step')} in one), over {report.get('decode_steps')} decode "
                     f"steps; {report.get('lagged_waits', 0)} waits on events with work queued behind them, which "
                     "cost nothing, are not counted.")
        top = next((s for s in report.get("sites", []) if (s.get("per_step") or 0) >= 0.5), None)
        if top is not None:
            cost = ""
            if top.get("device_idle_after_ms_per_step") is not None:
                cost = (f": the host waits {top.get('host_blocked_ms_per_step', 0) * 1000:,.0f} µs in it, and the "
                        f"device then idles {top['device_idle_after_ms_per_step'] * 1000:,.0f} µs (at most what "
                        "removing it gives back)")
            thread = f" (on thread {plain(clip(top['thread'], 80))})" if top.get("thread") else ""
            lines.append(f"The most frequent is {plain(top.get('kind'))} at {plain(clip(top.get('file'), 120))}:"
                         f"{top.get('line')}{thread}{cost}.")
            if top.get("fix"):
                lines.append(f"What to do: {plain(clip(top['fix'], 400))}.")
    if report.get("kernel_busy_fraction") is not None:
        lines.append(f"Kernels ran {report['kernel_busy_fraction']:.0%} of the device's time in decode steps (CUPTI).")
    if report.get("note"):
        lines.append(f"*{plain(report['note'])}.*")
    return "  \n".join(lines)


def site_rows(report: dict[str, Any]) -> list[list[Any]]:
    """The sites table (SITE_HEADERS), those read in decode steps first."""
    rows = []
    for site in report.get("sites", []):
        blocked, idle = site.get("host_blocked_ms_per_step"), site.get("device_idle_after_ms_per_step")
        rows.append([_r(site.get("per_step"), 2), clip(site.get("kind"), 40), clip(site.get("file"), 120),
                     f"{site.get('line')}: {clip(site.get('code'), 120)}", called_from(site), _us(blocked), _us(idle),
                     what_to_do(site)])
    return rows


def called_from(site: dict[str, Any]) -> str:
    """A site's thread (where it is not the program's own) and the calls that led to it, innermost first."""
    callers = site.get("callers")
    callers = [clip(c, 120) for c in callers[:4]] if isinstance(callers, list) else []
    text = "; from ".join(callers)
    if site.get("thread"):
        text = f"thread {clip(site['thread'], 80)}" + (f": {text}" if text else "")
    return text or "–"


def what_to_do(site: dict[str, Any]) -> str:
    """A site's fix, then its pattern's lines (at most MAX_CODE_LINES, each clipped) on one line."""
    fix = clip(site.get("fix") or "")
    code = site.get("fix_code")
    if not isinstance(code, str) or not code.strip():
        return fix
    lines = [clip(line.strip(), 160) for line in code.splitlines() if line.strip()][:MAX_CODE_LINES]
    return f"{fix}. Pattern: {CODE_BREAK.join(lines)}" if fix else CODE_BREAK.join(lines)


def _r(value: Any, digits: int) -> Any:
    return "–" if not _number(value) else round(float(value), digits)


def _us(ms: Any) -> Any:
    return "–" if not _number(ms) else round(float(ms) * 1000)


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
    if events:
        texts = [_event_text(e, sites.get(e.get("site"), {})) for e in events]
        data.append({"type": "scatter", "mode": "markers", "name": "a read of a device value",
                     "x": np.asarray([e["t_ms"] for e in events], dtype=COORDINATE),
                     "y": np.full(len(events), -BAR_HALF, dtype=COORDINATE), "text": texts, "hoverinfo": "text",
                     "marker": {"symbol": "triangle-down", "size": 9, "color": SYNC_COLOR}})
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


def _event_text(event: dict[str, Any], site: dict[str, Any]) -> str:
    """A read's hover: plotly renders it as HTML, so what came from the file is escaped."""
    kind, file, code = (html.escape(clip(site.get(key, ""), 100)) for key in ("kind", "file", "code"))
    return f"step {event.get('step')}: {kind} at {file}:{site.get('line', '?')}<br>{code}"
