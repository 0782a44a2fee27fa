"""Tokens/s over a window of steps: the live curve's (dashboard.service.live_view) and the one rebuilt for a saved
report that has no recorded page series, from its per-step host timestamps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.request.options import NO_CHECK
from dashboard.service.page_record import LiveSeries, PageRecord, SavedReport, no_monitor, split_report

RATE_WINDOW = 8  # steps per point of a tokens/s curve, live (dashboard.service.live_view) or rebuilt from a report


def window_rate(window: Sequence[tuple[float, float]]) -> float | None:
    """Tokens/s over a window of steps, each (when its tokens were known, how many): the tokens after the first
    step over the time since it. None when the window spans no time."""
    if len(window) < 2 or window[-1][0] <= window[0][0]:
        return None
    return sum(count for _, count in window[1:]) / (window[-1][0] - window[0][0])


def live_series_from_report(report: dict[str, Any] | SavedReport, page: PageRecord | None = None) -> LiveSeries:
    """Chart data for a saved report: the page's recorded live series when the page made it, else one rebuilt from
    the per-step host timestamps, with the runs laid end to end in the order they ran."""
    saved = split_report(report)
    page = page or saved.page
    if page is not None:
        return page.live_series()
    report = saved.report
    cursor, spans = 0.0, []
    series: dict[str, dict[str, list[float | None]]] = {}
    for name, warm in report["warmup"].items():
        length = (warm.get("total_ms") or 0) / 1000
        spans.append({"contestant": name, "phase": "warmup", "trial": None, "t0": cursor, "t1": cursor + length})
        cursor += length
    for run in sorted(report["runs"], key=lambda r: (r["trial"], r["order"])):
        timings = run["timings"]
        length = timings["total_ms"] / 1000
        spans.append({"contestant": run["contestant"], "phase": "trial", "trial": run["trial"], "t0": cursor,
                      "t1": cursor + length})
        if run["contestant"] != NO_CHECK:  # its tokens all become known at the end: no rate curve
            _append_rates(series.setdefault(run["contestant"], {"t": [], "tokens_per_s": []}), timings, cursor)
        cursor += length
    series = {name: s for name, s in series.items() if s["t"]}
    return {"t_end": cursor, "series": series, "spans": spans, "monitor": no_monitor()}


def _append_rates(target: dict[str, list[float | None]], timings: dict[str, Any], offset: float) -> None:
    known = [ms / 1000 for ms in timings.get("host_known_ms", [])]
    if len(known) < 2:
        return
    per_step = timings["new_tokens"] / max(1, timings["kept_steps"])
    if target["t"]:
        target["t"].append(None)
        target["tokens_per_s"].append(None)
    for i in range(1, len(known)):
        rate = window_rate([(t, per_step) for t in known[max(0, i - RATE_WINDOW):i + 1]])
        if rate is not None:
            target["t"].append(offset + known[i])
            target["tokens_per_s"].append(rate)
