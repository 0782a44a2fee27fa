"""Plotly figures built from plain data (lists and dicts), so they can be tested without a browser.

A *timeline* is what `dashboard.runner` hands out live and rebuilds for a saved report:
    {"series": {name: {"t": [...], "tokens_per_s": [...]}},            # None in both lists separates trials
     "spans": [{"contestant", "phase" ("warmup"|"trial"), "trial", "t0", "t1"}],
     "monitor": {"kind" ("nvml"|"cpu"|"none"), "description", "samples": [{"t", "util_pct", "mem_used_mb",
                 "power_w", "sm_clock_mhz"}]}}
with every time in seconds since the run started. A *report* is the JSON of `python -m core.bench --json`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

COLORS = {"naive": "#d62728", "pipelined": "#2ca02c", "hf": "#1f77b4", "hf-deferred": "#9467bd"}
LOOPS = ("naive", "pipelined")
WARMUP_COLOR = "#9e9e9e"
HEIGHT = 330
MAX_POINTS = 20_000
MAX_LABELLED_SPANS = 8


def color(name: str) -> str:
    return COLORS.get(name, "#7f7f7f")


def _layout(fig: go.Figure, title: str, height: int = HEIGHT, **extra: Any) -> go.Figure:
    fig.update_layout(title={"text": title, "font": {"size": 15}}, height=height, template="plotly_white",
                      margin={"l": 55, "r": 55, "t": 60, "b": 45},
                      legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 1.0, "xanchor": "right"},
                      **extra)
    return fig


def empty_figure(title: str, message: str) -> go.Figure:
    """A placeholder that says what will appear, or why nothing can."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font={"size": 13, "color": "#666"})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, title)


def shade_spans(fig: go.Figure, spans: Sequence[dict[str, Any]], labels: bool = True, **where: Any) -> None:
    """Shade each loop's span in its colour (warm-ups in grey) so curves can be read against who was running."""
    labelled = labels and len(spans) <= MAX_LABELLED_SPANS
    warmup_labelled = False
    for span in spans:
        if span.get("t1") is None or span["t1"] <= span["t0"]:
            continue
        warm = span["phase"] == "warmup"
        text = None
        if labelled and not (warm and warmup_labelled):
            text = "warm-up" if warm else span["contestant"]
            warmup_labelled = warmup_labelled or warm
        label = {"annotation_text": text, "annotation_position": "top left",
                 "annotation_font": {"size": 10, "color": "#555"}} if text else {}
        fig.add_vrect(x0=span["t0"], x1=span["t1"], fillcolor=WARMUP_COLOR if warm else color(span["contestant"]),
                      opacity=0.08 if warm else 0.13, line_width=0, layer="below", **label, **where)


def tokens_per_s_figure(timeline: dict[str, Any]) -> go.Figure:
    """Tokens/s over time for each contestant (a rate over the last few steps), with the spans shaded."""
    title = "Tokens/s over time"
    series = timeline.get("series") or {}
    if not any(s.get("t") for s in series.values()):
        return empty_figure(title, "Tokens/s per loop appear here while a run streams.")
    fig = go.Figure()
    for name, s in series.items():
        fig.add_trace(go.Scatter(x=s["t"], y=s["tokens_per_s"], name=name, mode="lines",
                                 line={"color": color(name), "width": 2}, connectgaps=False))
    shade_spans(fig, timeline.get("spans") or [])
    fig.update_xaxes(title_text="seconds since the run started")
    fig.update_yaxes(title_text="tokens/s", rangemode="tozero")
    return _layout(fig, title)


def device_figure(timeline: dict[str, Any]) -> go.Figure:
    """Utilization over time with the spans shaded; memory, power and SM clock below (NVML), or host RSS (CPU)."""
    monitor = timeline.get("monitor") or {}
    samples = monitor.get("samples") or []
    kind = monitor.get("kind", "none")
    if not samples:
        return empty_figure("Device utilization", monitor.get("description") or "No utilization samples.")
    gpu = kind == "nvml"
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1, row_heights=[0.6, 0.4],
                        specs=[[{"secondary_y": True}], [{"secondary_y": True}]])
    t = [s["t"] for s in samples]
    _add_line(fig, t, samples, "util_pct", "GPU util %" if gpu else "CPU util %", "#ff7f0e", 1, False)
    if gpu:
        _add_line(fig, t, samples, "sm_clock_mhz", "SM clock MHz", "#8c564b", 1, True, dash="dot")
        _add_line(fig, t, samples, "mem_used_mb", "memory used MiB", "#17becf", 2, False)
        _add_line(fig, t, samples, "power_w", "power W", "#bcbd22", 2, True)
    else:
        _add_line(fig, t, samples, "mem_used_mb", "process RSS MiB", "#17becf", 2, False)
    shade_spans(fig, timeline.get("spans") or [], row=1, col=1)
    shade_spans(fig, timeline.get("spans") or [], labels=False, row=2, col=1)
    fig.update_yaxes(title_text="util %", range=[0, 105], row=1, col=1, secondary_y=False)
    fig.update_yaxes(title_text="MiB", row=2, col=1, secondary_y=False)
    if gpu:
        fig.update_yaxes(title_text="MHz", row=1, col=1, secondary_y=True, showgrid=False)
        fig.update_yaxes(title_text="W", row=2, col=1, secondary_y=True, showgrid=False)
    fig.update_xaxes(title_text="seconds since the run started", row=2, col=1)
    title = "GPU (NVML, coarse: share of each sample period with any kernel running)" if gpu else \
        "CPU utilization (no NVIDIA GPU on this server)"
    return _layout(fig, title, height=HEIGHT + 60)


def _add_line(fig: go.Figure, t: list[float], samples: list[dict[str, Any]], key: str, name: str, line_color: str,
              row: int, secondary: bool, dash: str = "solid") -> None:
    values = [s.get(key) for s in samples]
    if all(v is None for v in values):
        return
    fig.add_trace(go.Scatter(x=t, y=values, name=name, mode="lines", line={"color": line_color, "dash": dash}),
                  row=row, col=1, secondary_y=secondary)


def device_clock(report: dict[str, Any]) -> str:
    """'cuda-events' when the loops were timed on the GPU clock, else 'host'."""
    clocks = {r["timings"].get("clock") for r in report.get("runs", []) if r["contestant"] in LOOPS}
    return "cuda-events" if clocks == {"cuda-events"} else "host"


def step_latency_figure(report: dict[str, Any]) -> go.Figure:
    """Distribution of per-step latency of both loops over all trials."""
    gpu = device_clock(report) == "cuda-events"
    clock = "GPU clock, CUDA events" if gpu else "host clock: time between tokens known on the host"
    title = f"Per-step latency ({clock})"
    steps = {name: _subsample([ms for r in _runs(report, name) for ms in r["timings"].get("step_ms", [])])
             for name in LOOPS}
    if not any(steps.values()):
        return empty_figure(title, "Per-step latencies appear here after a run.")
    fig = go.Figure()
    for name, values in steps.items():
        if values:
            fig.add_trace(go.Histogram(x=values, name=name, marker_color=color(name), opacity=0.6, nbinsx=60))
    fig.update_xaxes(title_text="ms per decode step")
    fig.update_yaxes(title_text="steps")
    return _layout(fig, title, barmode="overlay")


def gap_figure(report: dict[str, Any]) -> go.Figure:
    """Per-step GPU idle gap of each loop's median trial (CUDA events); on the CPU, host time per step."""
    gpu = device_clock(report) == "cuda-events"
    key = "gpu_gap_ms" if gpu else "step_ms"
    title = ("GPU idle gap before each step (CUDA events, median trial)" if gpu else
             "Host time per step (host clock; no CUDA events on the CPU)")
    fig = go.Figure()
    for name in LOOPS:
        run = representative_run(report, name)
        values = run["timings"].get(key, []) if run else []
        if values:
            fig.add_trace(go.Scatter(x=list(range(1, len(values) + 1)), y=values, name=name, mode="lines",
                                     line={"color": color(name), "width": 1.5}))
    if not fig.data:
        return empty_figure(title, "Per-step timings appear here after a run.")
    fig.update_xaxes(title_text="decode step")
    fig.update_yaxes(title_text="idle ms" if gpu else "ms", rangemode="tozero")
    return _layout(fig, title)


def representative_run(report: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The trial of `name` whose tokens/s is closest to the median (the one behind the summary number)."""
    runs = _runs(report, name)
    if not runs:
        return None
    middle = statistics.median(r["timings"]["tokens_per_s"] for r in runs)
    return min(runs, key=lambda r: abs(r["timings"]["tokens_per_s"] - middle))


def _runs(report: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [r for r in report.get("runs", []) if r.get("contestant") == name]


def _subsample(values: list[float]) -> list[float]:
    if len(values) <= MAX_POINTS:
        return values
    stride = -(-len(values) // MAX_POINTS)
    return values[::stride]


def all_figures(timeline: dict[str, Any], report: dict[str, Any] | None) -> tuple[go.Figure, ...]:
    """The four charts of the page: tokens/s, device, step latency, idle gap."""
    report = report or {}
    return tokens_per_s_figure(timeline), device_figure(timeline), step_latency_figure(report), gap_figure(report)
