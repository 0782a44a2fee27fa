"""The charts of a report's steps: the per-step latency of every contestant, and the GPU's idle gap before each step
of its median trial (on the CPU, the host's time per step). A *report* is the JSON of `python -m core.bench --json`;
any report, old ones too (core.documents.upgrades.upgrade_report)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from core.documents.bench_report import BenchReport
from core.documents.upgrades import upgrade_report
from core.measure import stats
from core.request.options import RUN_OPTION
from dashboard.service.report_numbers import clock_of
from dashboard.views.charts import MAX_POINTS, Spec, color, dash, empty_figure, figure, line, readable

HIST_BINS = 60
ROBUST_QUANTILE = 0.99
ROBUST_FACTOR = 1.2
MIN_GAP_TOP_MS = 0.1


def step_latency_figure(report: dict[str, Any]) -> go.Figure:
    """Distribution of per-step latency of every contestant with per-step times, over all trials, on shared bins
    and a window that leaves far outliers out (and says how many). On the host clock, a pipelined loop's steps whose
    tokens arrive together are left out, and the subtitle says why (host_clock_steps)."""
    report = upgrade_report(report)
    gpu = clock_of(report) == "cuda-events"
    clock = "GPU clock, CUDA events" if gpu else "host clock: time between tokens known on the host"
    title = f"Per-step latency ({clock})"
    steps, left_out = {}, {}
    for name in contestants(report):
        kept = [host_clock_steps(report, name, r) if not gpu else (r["timings"].get("step_ms") or [], 0)
                for r in _runs(report, name)]
        if values := _subsample([ms for values, _ in kept for ms in values]):
            steps[name] = values
        left_out[name] = max((dropped for _, dropped in kept), default=0)
    if not steps:
        return empty_figure(title, "Per-step latencies appear here after a run.")
    every = [v for values in steps.values() for v in values]
    limit = robust_limit(every, [statistics.median(values) for values in steps.values()])
    bins = shared_bins(every, limit)
    data = [{"type": "histogram", "x": values, "name": name, "marker": {"color": color(name)}, "opacity": 0.6,
             "xbins": bins} for name, values in steps.items()]
    hidden = sum(v >= bins["end"] for v in every)
    layout = {"barmode": "overlay", "xaxis": {"title": {"text": "ms per decode step"},
                                              "range": [bins["start"], bins["end"]]},
              "yaxis": {"title": {"text": "steps"}}, "annotations": _hidden_note(hidden, "step", bins["end"])}
    return figure(data, layout, title, subtitle=left_out_note(left_out))


def host_clock_steps(report: BenchReport, name: str, run: dict[str, Any]) -> tuple[list[float], int]:
    """A run's step times on the host clock (the time between tokens known on the host) without the steps that say
    nothing of a step: a pipelined loop reads each step's tokens `lag` steps late, so its first step holds the
    `lag` steps queued before the first read, and its last `lag` steps' tokens arrive together at the end (~0 ms).
    (the kept times, how many were left out)."""
    values = run["timings"].get("step_ms") or []
    lag = _lag(report, name)
    if lag is None or len(values) <= lag + 1:
        return values, 0
    return values[1:-lag], lag + 1


def _lag(report: BenchReport, name: str) -> int | None:
    """The lag `name` ran with, where lag is its option (the pipelined loops), else None."""
    if name not in RUN_OPTION["lag"].affects:
        return None
    ran = report["effective"][name]["options"] if name in report["effective"] else {}  # not in reports of before
    lag = ran.get("lag", report["request"]["options"].get("lag", 1))
    return lag if isinstance(lag, int) and not isinstance(lag, bool) and lag > 0 else 1


def left_out_note(left_out: dict[str, int]) -> str | None:
    """What host_clock_steps left out, in two sentences (None where nothing was)."""
    named = [name for name, count in left_out.items() if count]
    if not named:
        return None
    lag = max(left_out[name] for name in named) - 1
    if lag == 1:
        late, last, held = "a step", "last step", "the next step's work"
        arrive = "the last step's token arrives right after the one before it, at the end"
    else:
        late, last, held = f"{lag} steps", f"last {lag} steps", f"the next {lag} steps' work"
        arrive = f"the last {lag} steps' tokens arrive at once, at the end"
    return (f"Left out of {' and '.join(named)}: the first step and the {last}. It reads tokens {late} late, so on "
            f"the host clock its first step also holds {held}, and {arrive}.")


def robust_limit(values: Sequence[float], medians: Sequence[float]) -> float:
    """The largest value worth showing: the 99th percentile (of the lower rank, so one outlier among a few
    values is left out) with 20% headroom, but never below any median."""
    ordered = sorted(values)
    quantile = ordered[int(ROBUST_QUANTILE * (len(ordered) - 1))]
    return max(quantile * ROBUST_FACTOR, *medians)


def shared_bins(values: Sequence[float], limit: float) -> Spec:
    """HIST_BINS bins from just below the smallest value to just above the largest one within `limit`."""
    low, high = min(values), max(v for v in values if v <= limit)
    width = max(high - low, 0.2 * high, 1e-3)
    start = max(0.0, low - 0.05 * width)
    size = (high + 0.05 * width - start) / HIST_BINS
    return {"start": start, "end": start + HIST_BINS * size, "size": size}


def _hidden_note(count: int, unit: str, beyond: float) -> list[Spec]:
    if not count:
        return []
    text = f"{count} {unit}{'s' if count != 1 else ''} > {readable(beyond)} ms not shown"
    return [{"text": text, "xref": "paper", "yref": "paper", "x": 1, "y": 1, "xanchor": "right", "yanchor": "top",
             "showarrow": False, "bgcolor": "rgba(255,255,255,0.8)", "font": {"size": 11, "color": "#555"}}]


def gap_figure(report: dict[str, Any]) -> go.Figure:
    """Per-step GPU idle gap of each contestant's median trial (CUDA events); on the CPU, host time per step, without
    a pipelined loop's steps whose tokens arrive together (host_clock_steps, said in the subtitle)."""
    report = upgrade_report(report)
    gpu = clock_of(report) == "cuda-events"
    title = ("GPU idle gap before each step (CUDA events, median trial)" if gpu else
             "Host time per step (host clock; no CUDA events on the CPU)")
    data, left_out = [], {}
    for name in contestants(report):
        run = representative_run(report, name)
        if gpu:
            values, first = (run["timings"].get("gpu_gap_ms") or []) if run else [], 1
        else:
            values, left_out[name] = host_clock_steps(report, name, run) if run else ([], 0)
            first = 2 if left_out[name] else 1  # the steps are numbered as the run's own
        if values:
            data.append(line(list(range(first, first + len(values))), values, name, color(name), dash=dash(name),
                             width=1.5))
    if not data:
        return empty_figure(title, "Per-step timings appear here after a run.")
    every = [v for trace in data for v in trace["y"]]
    limit = robust_limit(every, [statistics.median(trace["y"]) for trace in data])
    top = max(max(v for v in every if v <= limit) * 1.1, MIN_GAP_TOP_MS)
    layout = {"xaxis": {"title": {"text": "decode step"}},
              "yaxis": {"title": {"text": "idle ms" if gpu else "ms"}, "range": [0, top]},
              "annotations": _hidden_note(sum(v > top for v in every), "point", top)}
    return figure(data, layout, title, subtitle=left_out_note(left_out))


def representative_run(report: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The trial of `name` behind the summary number (core.measure.stats.representative_run)."""
    return stats.representative_run(_runs(report, name))


def contestants(report: dict[str, Any]) -> list[str]:
    """The report's contestants in the order they first ran."""
    return list(dict.fromkeys(r["contestant"] for r in report.get("runs", []) if r.get("contestant")))


def _runs(report: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [r for r in report.get("runs", []) if r.get("contestant") == name]


def _subsample(values: list[float]) -> list[float]:
    if len(values) <= MAX_POINTS:
        return values
    stride = -(-len(values) // MAX_POINTS)
    return values[::stride]
