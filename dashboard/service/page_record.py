"""The page's own record of a run, and the documents Replay opens and the page offers for download.

A *report* is the JSON of `python -m core.bench --json`; the engine writes it and nothing here changes it. What the
page itself saw of a run (its live series, the device samples, the form's notices, NVML means) is a PageRecord,
kept next to the report. The page's download holds both, each under its own key (core.documents.page_report):

    {"schema": "syncscope.page-report/1", "report": <the report>, "page": <the PageRecord> or null}

Replay opens that, a bare report, and the page's downloads from before, all through core.documents.schema.load().
Everything here reads plain data; nothing imports torch or gradio.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, TypedDict

from core.documents.bench_report import BenchReport
from core.documents.files import MAX_REPORT_BYTES
from core.documents.kinds import BENCH, PAGE, PAGE_REPORT_SCHEMA, kind_of
from core.documents.page_report import PageReport
from core.documents.schema import load
from core.documents.upgrades import upgrade


@dataclass(frozen=True)
class PageRecord:
    """What the page saw of one run, that core.bench's report cannot hold: the live series (seconds since the job
    started), the device samples over it, the notices its settings gave, and each contestant's NVML means."""

    t_end: float | None
    series: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)
    spans: list[dict[str, Any]] = field(default_factory=list)
    monitor: dict[str, Any] = field(default_factory=lambda: no_monitor())
    notices: tuple[str, ...] = ()
    nvml_by_contestant: dict[str, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def of_run(cls, live: LiveSeries, notices: list[str] | tuple[str, ...]) -> PageRecord:
        """The record of a finished run, from its final live series (dashboard.service.live_view)."""
        monitor, spans = live["monitor"], live["spans"]
        # On the CPU fallback the samples are the engine's CPU %, not NVML's: the NVML column gets a dash.
        nvml = nvml_means(monitor.get("samples", []), spans) if monitor.get("source") == "nvml" else {}
        return cls(t_end=live["t_end"], series=live["series"], spans=spans, monitor=monitor,
                   notices=tuple(notices), nvml_by_contestant=nvml)

    def live_series(self) -> LiveSeries:
        """The chart data (dashboard.views.live_charts' live series)."""
        return {"t_end": self.t_end, "series": self.series, "spans": self.spans, "monitor": self.monitor}

    def to_json(self) -> dict[str, Any]:
        return {**self.live_series(), "notices": list(self.notices), "nvml_by_contestant": self.nvml_by_contestant}

    @classmethod
    def from_json(cls, section: dict[str, Any]) -> PageRecord:
        """A record from its JSON: the "page" of a page report, upgraded (core.documents.upgrades.upgrade_page)."""
        return cls(t_end=section.get("t_end"), series=section["series"], spans=section["spans"],
                   monitor=dict(section.get("monitor", no_monitor())), notices=tuple(section["notices"]),
                   nvml_by_contestant=section["nvml_by_contestant"])


@dataclass(frozen=True)
class SavedReport:
    """A saved document as its two parts: core.bench's report, and the page's record (None when the page did not
    make the file)."""

    report: BenchReport
    page: PageRecord | None = None


def page_report(report: dict[str, Any], page: PageRecord | None) -> PageReport:
    """The document the page offers for download: the report (without the server's host name) and the page's
    record, each under its own key."""
    return {"schema": PAGE_REPORT_SCHEMA, "report": public_report(report),  # type: ignore[typeddict-item]
            "page": page.to_json() if page is not None else None}


def public_report(report: dict[str, Any]) -> dict[str, Any]:
    """The report as offered for download: run data, without the server's host name."""
    out = dict(report)
    out["environment"] = {k: v for k, v in report.get("environment", {}).items() if k != "host"}
    return out


def split_report(document: dict[str, Any] | SavedReport) -> SavedReport:
    """Any document this project writes (a report, a page report, an old page download) as its two parts, each
    upgraded (core.documents.upgrades.upgrade)."""
    if isinstance(document, SavedReport):
        return document
    upgraded = upgrade(document)
    if kind_of(upgraded) == PAGE:
        page = upgraded["page"]
        return SavedReport(upgraded["report"], PageRecord.from_json(page) if isinstance(page, dict) else None)
    return SavedReport(upgraded)


def report_notices(report: dict[str, Any] | SavedReport, page: PageRecord | None = None) -> list[str]:
    """The notices a run's headline lists: the page's (what its settings became), then each run's, once each."""
    saved = split_report(report)
    page = page or saved.page
    from_runs = (n for run in saved.report["runs"] for n in run.get("notices", []))
    return list(dict.fromkeys([*(page.notices if page else ()), *from_runs]))


def open_report(data: bytes | str, max_bytes: int = MAX_REPORT_BYTES) -> SavedReport:
    """A complete report and the page's record of it (if the page saved it) from JSON text (core.documents.schema.load);
    ValueError naming the first thing that is missing or wrong. Only parses: never opens paths."""
    return split_report(load(data, max_bytes, expect=BENCH))


def parse_report(data: bytes | str, max_bytes: int = MAX_REPORT_BYTES) -> BenchReport:
    """The complete core.bench report in JSON text (a report, or a page's download of one): see open_report."""
    return open_report(data, max_bytes).report


def nvml_means(samples: list[dict[str, Any]], spans: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per contestant, the mean of each NVML reading taken inside its timed trials (warm-ups left out)."""
    out: dict[str, dict[str, float]] = {}
    for name in {s["contestant"] for s in spans if s["phase"] == "trial"}:
        windows = [(s["t0"], s["t1"]) for s in spans if s["contestant"] == name and s["phase"] == "trial"]
        inside = [x for x in samples if any(t0 <= x["t"] <= t1 for t0, t1 in windows)]
        means = {key: statistics.fmean(v) for key in ("util_pct", "power_w", "sm_clock_mhz")
                 if (v := [x[key] for x in inside if x.get(key) is not None])}
        if means:
            out[name] = {**means, "samples": len(inside)}
    return out


class LiveSeries(TypedDict):
    """A run's live series as the charts draw it (dashboard.views.live_charts), every part there: the page streams it
    (dashboard.service.live_view), keeps it (PageRecord) or rebuilds it for a report (dashboard.service.rate_series)."""

    t_end: float | None
    series: dict[str, dict[str, list[float | None]]]
    spans: list[dict[str, Any]]
    monitor: dict[str, Any]


def live_series(*, t_end: float | None = None, series: dict[str, dict[str, list[float | None]]] | None = None,
                spans: list[dict[str, Any]] | None = None, monitor: dict[str, Any] | None = None) -> LiveSeries:
    """A live series of the parts given, each other part empty: what the charts show before a run has any."""
    return {"t_end": t_end, "series": {} if series is None else series, "spans": [] if spans is None else spans,
            "monitor": {"source": "none", "description": "No utilization samples.", "samples": []}
            if monitor is None else monitor}


def no_monitor() -> dict[str, Any]:
    return {"source": "none", "description": "No utilization samples in this report: core.bench does not record "
                                           "them; reports saved from the dashboard do.", "samples": []}
