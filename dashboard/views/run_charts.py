"""A run's four charts, as the Compare tab, Replay and the exported HTML show them: tokens/s and the device over time
(dashboard.views.live_charts), the step latency and the idle gap (dashboard.views.step_charts)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from core.report.explain import report_device_type
from dashboard.service.page_record import LiveSeries, SavedReport, live_series, split_report
from dashboard.views.live_charts import device_figure, tokens_per_s_figure
from dashboard.views.step_charts import gap_figure, step_latency_figure


def all_figures(live: LiveSeries, report: dict[str, Any] | SavedReport | None) -> tuple[go.Figure, ...]:
    """The four charts of the page: tokens/s, device, step latency, idle gap (`report`: a report, or any document
    the page saves one in)."""
    report = split_report(report).report if report else {}
    return (tokens_per_s_figure(live), device_figure(live, report_device_type(report)), step_latency_figure(report),
            gap_figure(report))


def prebuild() -> list[str]:
    """Build each kind of figure once, so plotly's lazy imports do not land in the middle of a timed run; returns
    each figure's JSON."""
    spans = [{"contestant": "naive", "phase": "trial", "trial": 0, "t0": 0.0, "t1": 1.0}]
    sample = {"t": 0.0, "gpu": 0, "util_pct": 1.0, "mem_used_mb": 1.0, "power_w": 1.0, "sm_clock_mhz": 1.0}
    run = {"contestant": "naive", "timings": {"clock": "host", "tokens_per_s": 1.0, "step_ms": [1.0, 2.0]}}
    live = live_series(series={"naive": {"t": [0.0, 1.0], "tokens_per_s": [1.0, 2.0]}}, spans=spans,
                       monitor={"source": "nvml", "samples": [sample]})
    return [fig.to_json() for fig in all_figures(live, {"runs": [run]})]
