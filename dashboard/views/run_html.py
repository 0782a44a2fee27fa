"""A run as one self-contained HTML file, to hand someone who has no way to the page (a GPU server without an outbound
tunnel for Gradio's share link): the verdict, what the run shows, the summary tables, the charts and the timeline, and
the audit's sites where the run had an audit; or, for a load report, what the Under load tab shows.

Built from the report dict alone (and the page's record where there is one) by the page's own builders
(dashboard.views.report_text, run_summary, step_time, charts, timeline, load_view, load_charts, audit_view), so the
file shows what the page shows. plotly.js is inlined once; the file asks for nothing over the
network (no remote script, stylesheet, font or image), and its Content-Security-Policy would refuse it if it did.
Everything that came from the report is escaped: a report can be hostile. No gradio, no torch.
"""

from __future__ import annotations

import base64
import hashlib
import html
import logging
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.offline

from core.audit.words import per_step_words
from core.documents.bench_report import BenchReport
from core.documents.kinds import BENCH, LOAD, PAGE, kind_of
from core.documents.load_report import LoadReport
from core.text import clip
from dashboard.service.audit_digest import MAX_SITES
from dashboard.service.page_record import SavedReport, split_report
from dashboard.service.rate_series import live_series_from_report
from dashboard.views import load_charts, load_view, run_charts, timeline
from dashboard.views.audit_view import SITES_CSS, sites_html
from dashboard.views.markdown_html import markdown_html
from dashboard.views.report_text import headline_md, replay_command, trials_shown
from dashboard.views.run_summary import (
    DETAIL_HEADERS,
    DETAIL_LABEL,
    EVIDENCE_HEADERS,
    EVIDENCE_LABEL,
    run_shows_md,
    summary_tables,
)
from dashboard.views.step_time import STEP_TIME_HEADERS, STEP_TIME_LABEL, step_time_rows

log = logging.getLogger(__name__)
OUTPUT_CHARS = 2000  # of each loop's output text (the Compare tab's panes show them)
NOT_A_RUN = "this document is neither a benchmark report nor a load report of python -m core.bench"
# Draws each chart from its JSON (a <script type="application/json"> beside its <div>): data, never code.
DRAW_JS = """
document.querySelectorAll("script.figure").forEach(function (data) {
  var figure = JSON.parse(data.textContent);
  Plotly.newPlot(document.getElementById(data.dataset.chart), figure.data, figure.layout,
                 {displaylogo: false, responsive: true});
});
"""
CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #1f2328;
  background: #fff; }
header, main, footer { max-width: 1400px; margin: 0 auto; padding: 0 20px; }
header { padding-top: 18px; }
h1 { font-size: 24px; margin: 0 0 6px; }
h2 { font-size: 19px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 16px; margin: 18px 0 6px; }
.facts { color: #444; margin: 4px 0; }
pre, code { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 13px; }
pre { background: #f6f8fa; padding: 8px 10px; overflow-x: auto; white-space: pre-wrap; word-break: break-all; }
p code, li code { background: #f6f8fa; padding: 0 3px; }
.table { overflow-x: auto; margin: 8px 0 14px; }
table { border-collapse: collapse; font-size: 13.5px; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 12px; }
.chart { min-width: 0; }
details.text > summary { cursor: pointer; }
footer { color: #666; font-size: 13px; padding: 24px 20px 30px; }
@media (max-width: 720px) {
  .charts { grid-template-columns: 1fr; }
  .js-plotly-plot .modebar-container { display: none; }
}
"""


@dataclass
class _Page:
    """The document being written: its sections' HTML and its charts' figures, numbered in order."""

    sections: list[str] = field(default_factory=list)
    figures: int = 0

    def chart(self, figure: go.Figure, name: str) -> str:
        """A chart's <div> and its figure's JSON, which DRAW_JS draws."""
        self.figures += 1
        chart_id = f"chart-{self.figures}"
        return (f'<div class="chart" id="{chart_id}" data-name="{html.escape(name)}"></div>'
                f'<script type="application/json" class="figure" data-chart="{chart_id}">'
                f"{_script_safe(figure.to_json())}</script>")

    def charts(self, figures: Sequence[tuple[go.Figure, str]]) -> str:
        return '<div class="charts">' + "".join(self.chart(f, name) for f, name in figures) + "</div>"


def run_html(document: dict[str, Any] | SavedReport) -> str:
    """The HTML file of a bench report (or a page report, or its SavedReport) or of a load report (with its sentences,
    dashboard.views.load_view.sentences). ValueError for any other document."""
    if isinstance(document, SavedReport) or kind_of(document) in (BENCH, PAGE):
        return _bench_html(split_report(document))
    if kind_of(document) == LOAD:
        return _load_html(document)
    raise ValueError(NOT_A_RUN)


def write_html(path: str | Path, text: str) -> Path:
    """Write the file through a new file beside it and a rename (a reader never sees half of one), with the
    permissions open() gives a new file; anything but a regular file (/dev/stdout) is written in place. A text that
    holds a lone surrogate (JSON's "\\ud800") gets a replacement character, as UTF-8 has no such character."""
    target = Path(path)
    if target.exists() and not target.is_file():  # /dev/stdout, a pipe: written in place
        target.write_bytes(text.encode("utf-8", "replace"))
        return target
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    try:
        with os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb") as out:
            out.write(text.encode("utf-8", "replace"))
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return target


def html_download(path: Path, document: dict[str, Any] | SavedReport) -> str | None:
    """The page's "as HTML" download of `document` (see run_html), written at `path`; None where it could not be made
    (the server's log says why): the run's page and its other files are shown all the same."""
    try:
        return str(write_html(path, run_html(document)))
    except Exception:
        log.exception("a run could not be exported as HTML")
        return None


# ------------------------------------------------------------------------------------------------ a bench report

def _bench_html(saved: SavedReport) -> str:
    report, page = saved.report, _Page()
    env, model = report["environment"], report["model"]
    where = env.get("gpu") or env.get("device") or "unknown device"
    tp = f", tensor parallel over {env['tp']} GPUs" if isinstance(env.get("tp"), int) and env["tp"] > 1 else ""
    facts = (f"{clip(model.get('spec', '?'))} on {clip(where)} ({clip(env.get('dtype', '?'))}{tp}), "
             f"{trials_shown(report)}, created {clip(report.get('created', '?'))}.")
    if report.get("interrupted") is True:
        facts += " This run was cut short (interrupted before it finished): its numbers cover only its finished trials."
    page.sections.append(_section("The verdict", markdown_html(headline_md(report, saved.page)) +
                                  markdown_html(run_shows_md(report))))
    evidence, details = summary_tables(report, saved.page)
    tables = _table(EVIDENCE_LABEL, EVIDENCE_HEADERS, evidence) + _table(DETAIL_LABEL, DETAIL_HEADERS, details)
    steps = step_time_rows(report)
    if steps:
        tables += _table(STEP_TIME_LABEL, STEP_TIME_HEADERS, steps)
    page.sections.append(_section("Summary", tables))
    note = timeline.timeline_note(report)
    lanes = (f"<p><em>{_text(note)}</em></p>" if note else "") + page.chart(timeline.timeline_figure(report),
                                                                           "timeline")
    page.sections.append(_section(timeline.TITLE, lanes))
    figures = run_charts.all_figures(live_series_from_report(saved), saved)
    page.sections.append(_section("Charts", page.charts(list(zip(figures, ("tokens/s", "device", "step latency",
                                                                           "idle gap"))))))
    if report.get("sync_audit"):
        page.sections.append(_section("The sync audit: where each loop waited on the device",
                                      _audit_sites(report["sync_audit"])))
    page.sections.append(_section("The prompt and each loop's output", _outputs(report)))
    title = f"syncscope: {clip(model.get('spec', '?'))} on {clip(where)}, {clip(report.get('created', '?'))}"
    return _document(title, facts, replay_command(report), page)


def _outputs(report: BenchReport) -> str:
    """The prompt, and each contestant's output text in its first trial (the Compare tab's panes), clipped."""
    prompt = report["request"].get("prompt")
    parts = [f"<p><b>Prompt:</b></p><pre>{_text(clip(prompt, OUTPUT_CHARS))}</pre>"] if isinstance(prompt, str) else []
    shown: set[str] = set()
    for run in report.get("runs") or []:
        name, texts = run.get("contestant"), run.get("texts")
        if name in shown or not isinstance(texts, list) or not texts:
            continue
        shown.add(name)
        rows = f" (row 1 of {len(texts)})" if len(texts) > 1 else ""
        parts.append(f"<p><b>{_text(name)}</b>{rows}:</p><pre>{_text(clip(texts[0], OUTPUT_CHARS))}</pre>")
    return "".join(parts) or "<p>This report holds no output text.</p>"


def _audit_sites(audits: dict[str, Any]) -> str:
    """Each audited contestant's waits per decode step and its sites, as Your loop lists an audit's (every text
    escaped there)."""
    parts = []
    for name, audit in audits.items():
        if not isinstance(audit, dict):
            continue
        per_step, copies = audit.get("reads_per_decode_step"), audit.get("copies_per_decode_step")
        said = per_step_words(per_step, copies if _number(copies) else None) if _number(per_step) else \
            "no decode step seen"
        steps = audit.get("decode_steps")
        over = f", over {steps:,} decode steps" if isinstance(steps, int) and not isinstance(steps, bool) else ""
        sites = audit.get("sites") if isinstance(audit.get("sites"), list) else []
        parts.append(f"<h3>{_text(name)}: {_text(said)}{over}</h3>")
        shown = [s for s in sites if isinstance(s, dict)][:MAX_SITES]
        parts.append(sites_html({"sites": shown, "decode_steps": steps}))
        if audit.get("note"):
            parts.append(f"<p><em>{_text(clip(audit['note']))}</em></p>")
    return "".join(parts)


# ------------------------------------------------------------------------------------------------ a load report

def _load_html(report: LoadReport) -> str:
    page, env, said = _Page(), report["environment"], load_view.sentences(report)
    where = env.get("gpu") or env.get("device") or "unknown device"
    model = report["model"]["spec"]
    dtype = f" ({clip(env['dtype'])})" if env.get("dtype") else ""
    facts = (f"{clip(model)} on {clip(where)}{dtype}, {load_view.section(report)['slots']} slots, created "
             f"{clip(report.get('created', '?'))}.")
    page.sections.append(_section("What this run shows",
                                  markdown_html(load_view.findings_md(report, said))))
    points = load_view.section(report)["points"]
    main = points[0]
    for point in points:
        page.sections.append(_point(page, point, main=point is main and len(points) > 1))
    figures = load_charts.report_figures(report)
    sweep = page.charts([(figures["sweep"], "slots sweep"), (figures["rate"], "rate sweep")])
    if load_view.sweep_rows(report):
        sweep += _table("The sweep: output tokens/s at each point", load_view.sweep_headers(report),
                        load_view.sweep_rows(report))
    page.sections.append(_section("The sweep", sweep))
    page.sections.append(_section(load_charts.THROUGHPUT_TITLE, page.chart(figures["throughput"], "throughput")))
    audits = {load_view.name(c): entry["sync_audit"] for c, entry in main["contestants"].items()
              if isinstance(entry.get("sync_audit"), dict)}
    if audits:
        page.sections.append(_section("The sync audit: where each loop waited on the device", _audit_sites(audits)))
    if said.text:
        page.sections.append(_section("The run as the CLI prints it", f"<pre>{_text(chr(10).join(said.text))}</pre>"))
    title = f"syncscope under load: {clip(model)} on {clip(where)}, {clip(report.get('created', '?'))}"
    return _document(title, facts, str(report.get("command") or ""), page)


def _point(page: _Page, point: dict[str, Any], main: bool) -> str:
    """One point's contestants table and slots picture: what the page shows for the point chosen."""
    name = load_view.point_name(point)
    body = _table("Contestants (medians over the timed trials)", load_view.TABLE_HEADERS,
                  load_view.contestant_rows(point["contestants"]))
    body += page.chart(load_charts.slots_figure(point, load_view.default_slotted(point)), f"slots {name}")
    return _section(f"{name} (the main point)" if main else name, body)


# ------------------------------------------------------------------------------------------------ the document

def _document(title: str, facts: str, command: str, page: _Page) -> str:
    plotly_js = plotly.offline.get_plotlyjs()
    policy = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:; "
              f"script-src {_script_hash(plotly_js)} {_script_hash(DRAW_JS)}")
    head = (f'<meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
            f"<title>{_text(title)}</title><style>{CSS}{SITES_CSS}</style>")
    header = (f"<header><h1>{_text(title)}</h1><p class=\"facts\">{_text(facts)}</p>"
              f"<p>Reproduce from the command line:</p><pre>{_text(command)}</pre></header>")
    footer = ("<footer>Written by syncscope from the run's report; everything it shows is in this one file, which "
              "needs no network. Open the report's JSON in the dashboard's Replay tab to choose other points and "
              "views.</footer>")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head>{head}<script>{plotly_js}</script></head>\n<body>{header}"
            f"<main>{''.join(page.sections)}</main>{footer}<script>{DRAW_JS}</script></body></html>\n")


def _section(heading: str, body: str) -> str:
    return f"<section><h2>{_text(heading)}</h2>{body}</section>"


def _table(caption: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{_text(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_text(_cell(c))}</td>" for c in row) + "</tr>" for row in rows)
    return (f'<div class="table"><table><caption>{_text(caption)}</caption><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def _cell(value: Any) -> str:
    return "–" if value is None else clip(value)


def _text(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _script_safe(text: str) -> str:
    """JSON to stand inside a <script> element: no "</script>", no "<!--", whatever its strings hold."""
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _script_hash(script: str) -> str:
    """The Content-Security-Policy source that lets this one inline script run (and no script injected beside it)."""
    return f"'sha256-{base64.b64encode(hashlib.sha256(script.encode('utf-8')).digest()).decode('ascii')}'"
