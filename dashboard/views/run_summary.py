"""A run's summary as Compare and Replay show it: two tables (the verdict's evidence, then where the time went and
the rest) and what the run shows in words (core.report.explain), with its code quotes as code. Plain data, no gradio:
the exported run (dashboard.views.run_html) shows the same; the tables' components are in dashboard.ui.tabs.compare."""

from __future__ import annotations

import logging
from typing import Any

from core.documents.upgrades import upgrade_report
from core.report.explain import what_this_run_shows
from core.text import clip
from dashboard.service.page_record import PageRecord
from dashboard.views.report_text import plain, table_rows
from dashboard.views.summary_table import SUMMARY_HEADERS

log = logging.getLogger(__name__)

# The summary in two tables, so that the verdict's evidence is in view at 1400 px without scrolling sideways: each
# contestant's decode rate, its spread and sameness, its ratio to the baseline, and (for the verdict's contender) the
# interval and the call; then where the time went and the rest (SUMMARY_HEADERS' other columns).
SPREAD_HEADER = "decode spread %"  # the CLI table's name (core.report.build.TABLE_KEY: the decode rate's)
EVIDENCE_HEADERS = ("contestant", "decode tok/s", SPREAD_HEADER, "same tokens", "× naive (decode)", "interval",
                    "verdict")
EVIDENCE_WIDTHS = ["115px", "95px", "110px", "90px", "110px", "150px", "100px"]  # 770 px: the results column at 1400
_EVIDENCE_FROM_SUMMARY = ("contestant", "decode tok/s", "decode spread %", "same tokens")
DETAIL_HEADERS = ("contestant", *(h for h in SUMMARY_HEADERS if h not in _EVIDENCE_FROM_SUMMARY))
DETAIL_WIDTHS = ["130px", *("110px" for _ in DETAIL_HEADERS[1:])]
EVIDENCE_LABEL = "Summary: the verdict's evidence (medians over trials)"
DETAIL_LABEL = "Where the time went, and the rest"


def run_shows_md(report: dict[str, Any]) -> str:
    """core.report.explain's sentences on what a run shows, as the page's Markdown: its `code` quotes as code, the rest
    as text (a report's file can say anything)."""
    try:
        sentences = what_this_run_shows(report)
    except Exception:  # a report that passed the checks but that the sentences cannot read: say so in words
        log.exception("core.report.explain could not read a report that passed the checks")
        return "*What this run shows cannot be said for this report: a field it reads is not what core.bench writes.*"
    return "**What this run shows:** " + " ".join(code_quoted(sentence) for sentence in sentences)


def code_quoted(text: str) -> str:
    """`text` as Markdown: what stands between backticks as inline code, everything else as plain text."""
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: nothing is code
        return plain(text)
    return "".join(_plain_between(part) if i % 2 == 0 else f"`{clip(' '.join(part.split()))}`" if part.strip() else ""
                   for i, part in enumerate(parts))


def _plain_between(part: str) -> str:
    """plain(), keeping a space at either end (the text around a code quote)."""
    if not part.strip():
        return " " if part else ""
    return (" " if part[0].isspace() else "") + plain(part) + (" " if part[-1].isspace() else "")


def summary_tables(report: dict[str, Any], page: PageRecord | None = None) -> tuple[list[list[Any]], list[list[Any]]]:
    """The summary's cells as two tables: the verdict's evidence (EVIDENCE_HEADERS), then the rest
    (DETAIL_HEADERS), a dash where a number does not exist."""
    rows = [dict(zip(SUMMARY_HEADERS, row)) for row in table_rows(report, page)]
    report = upgrade_report(report)
    verdict = report["verdict"] or {}  # None where no contender was judged
    baseline = verdict.get("baseline") or "naive"
    summary = report["summary"]
    base_rate = _decode_rate(summary, baseline)
    evidence, details = [], []
    for row in rows:
        rate = _decode_rate(summary, row["contestant"])  # unrounded: the table's cell shows one decimal of it
        ratio = (f"{rate / base_rate:.3f}×" if rate is not None and base_rate is not None and
                 row["contestant"] != baseline else "–")
        interval, call = _verdict_cells(verdict) if row["contestant"] == verdict.get("contender") else ("–", "–")
        evidence.append([row["contestant"], row["decode tok/s"], row["decode spread %"], row["same tokens"], ratio,
                         interval, call])
        details.append([row[h] for h in DETAIL_HEADERS])
    return evidence, details


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and value > 0


def _decode_rate(summary: dict[str, Any], name: Any) -> float | None:
    """A contestant's median decode rate as the report holds it (not the table's rounded cell); None without one."""
    rate = summary[name].get("decode_tokens_per_s") if isinstance(name, str) and name in summary else None
    return float(rate) if _positive(rate) and not isinstance(rate, bool) else None


def _verdict_cells(verdict: dict[str, Any]) -> tuple[str, str]:
    """The verdict's interval (or, in a report from before intervals, its noise) and its call, as cells."""
    interval = verdict.get("interval")
    if isinstance(interval, list) and len(interval) == 2 and all(_positive(v) for v in interval):
        confidence = verdict.get("confidence")
        level = f" ({confidence:.0%})" if isinstance(confidence, int | float) and 0 < confidence < 1 else ""
        shown = f"{interval[0]:.3f}–{interval[1]:.3f}×{level}"
    elif _positive(verdict.get("noise")):
        shown = f"±{verdict['noise']:.1%}"
    else:
        shown = "–"
    return shown, str(verdict.get("call") or "–")[:40]
