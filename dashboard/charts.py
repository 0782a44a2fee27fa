"""Plotly figures built from plain data (lists and dicts), so they can be tested without a browser.

A *timeline* is what `dashboard.runner` hands out live and rebuilds for a saved report:
    {"series": {name: {"t": [...], "tokens_per_s": [...]}},            # None in both lists separates trials
     "spans": [{"contestant", "phase" ("warmup"|"trial"), "trial", "t0", "t1"}],
     "monitor": {"kind" ("nvml"|"cpu"|"none"), "description", "samples": [{"t", "util_pct", "mem_used_mb",
                 "power_w", "sm_clock_mhz"}]}}
with every time in seconds since the run started. A *report* is the JSON of `python -m core.bench --json`.

Figures are written as plain dicts and wrapped once. Plotly's per-property validation costs 10-100 ms per figure,
and live charts are rebuilt in the process whose other thread is timing the decode loop, so it is off by default
(`VALIDATE`); the tests build every figure with it on.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

COLORS = {"naive": "#d62728", "pipelined": "#2ca02c", "no-check": "#ff7f0e", "hf": "#1f77b4",
          "hf-deferred": "#9467bd"}
LOOPS = ("naive", "pipelined")
WARMUP_COLOR = "#9e9e9e"
HEIGHT = 330
MAX_POINTS = 20_000
MAX_LABELLED_SPANS = 8
VALIDATE = False
_TEMPLATE = pio.templates["plotly_white"].to_plotly_json()

Spec = dict[str, Any]


def color(name: str) -> str:
    return COLORS.get(name, "#7f7f7f")


def figure(data: list[Spec], layout: Spec, title: str, height: int = HEIGHT) -> go.Figure:
    """Wrap trace and layout dicts, with the page's common look."""
    base = {"title": {"text": title, "font": {"size": 15}}, "height": height, "template": _TEMPLATE,
            "margin": {"l": 55, "r": 55, "t": 60, "b": 45},
            "legend": {"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 1.0, "xanchor": "right",
                       "itemsizing": "constant"}}
    return go.Figure(data=data, layout={**base, **layout}, _validate=VALIDATE)


def empty_figure(title: str, message: str) -> go.Figure:
    """A placeholder that says what will appear, or why nothing can."""
    note = {"text": message, "showarrow": False, "x": 0.5, "y": 0.5, "xref": "paper", "yref": "paper",
            "font": {"size": 13, "color": "#666"}}
    return figure([], {"annotations": [note], "xaxis": {"visible": False}, "yaxis": {"visible": False}}, title)


def span_shapes(spans: Sequence[dict[str, Any]], labels: bool = True, xref: str = "x", yref: str = "y domain",
                label_at: str = "top") -> tuple[list[Spec], list[Spec]]:
    """Shapes shading each loop's span in its colour (warm-ups in grey), and their labels."""
    labelled = labels and len(spans) <= MAX_LABELLED_SPANS
    shapes, notes, warmup_labelled = [], [], False
    for span in spans:
        if span.get("t1") is None or span["t1"] <= span["t0"]:
            continue
        warm = span["phase"] == "warmup"
        shapes.append({"type": "rect", "xref": xref, "yref": yref, "x0": span["t0"], "x1": span["t1"], "y0": 0,
                       "y1": 1, "fillcolor": WARMUP_COLOR if warm else color(span["contestant"]),
                       "opacity": 0.08 if warm else 0.13, "line": {"width": 0}, "layer": "below"})
        if labelled and not (warm and warmup_labelled):
            warmup_labelled = warmup_labelled or warm
            notes.append({"text": "warm-up" if warm else span["contestant"], "xref": xref, "yref": yref,
                          "x": span["t0"], "y": 1 if label_at == "top" else 0, "xanchor": "left",
                          "yanchor": label_at, "showarrow": False,
                          "font": {"size": 10, "color": "#555"}})
    return shapes, notes


def line(x: list[Any], y: list[Any], name: str, line_color: str, dash: str = "solid", width: float = 2,
         **extra: Any) -> Spec:
    return {"type": "scatter", "mode": "lines", "x": x, "y": y, "name": name,
            "line": {"color": line_color, "dash": dash, "width": width}, **extra}


def tokens_per_s_figure(timeline: dict[str, Any]) -> go.Figure:
    """Tokens/s over time for each contestant (a rate over the last few steps), with the spans shaded."""
    title = "Tokens/s over time"
    series = timeline.get("series") or {}
    if not any(s.get("t") for s in series.values()):
        return empty_figure(title, "Tokens/s per loop appear here while a run streams.")
    timed = {name: s for name, s in series.items() if s.get("t")}
    data = [line(s["t"], s["tokens_per_s"], name, color(name), connectgaps=False) for name, s in timed.items()]
    spans = timeline.get("spans") or []
    shapes, notes = span_shapes(spans)
    for span in _untimed_spans(spans, set(timed)):
        data.append(_span_legend_entry(span))
    layout = {"shapes": shapes, "annotations": notes,
              "xaxis": {"title": {"text": "seconds since the run started"}, **_time_range(timeline)},
              "yaxis": {"title": {"text": "tokens/s"}, "rangemode": "tozero"}}
    return figure(data, layout, title)


def _untimed_spans(spans: Sequence[dict[str, Any]], timed: set[str]) -> list[dict[str, Any]]:
    """The first trial span of each contestant without per-token times (generate() is timed only as a whole)."""
    firsts: dict[str, dict[str, Any]] = {}
    for span in spans:
        if span["phase"] == "trial" and span["contestant"] not in timed and span.get("t1") is not None:
            firsts.setdefault(span["contestant"], span)
    return list(firsts.values())


def _span_legend_entry(span: dict[str, Any]) -> Spec:
    # A one-pixel point carries the legend entry: plotly.js leaves traces without data out of the legend.
    name = span["contestant"]
    return {"type": "scatter", "mode": "markers", "x": [(span["t0"] + span["t1"]) / 2], "y": [0],
            "name": f"{name} (span only)", "hoverinfo": "skip",
            "marker": {"symbol": "square", "size": 1, "color": color(name), "opacity": 0.45}}


def device_figure(timeline: dict[str, Any]) -> go.Figure:
    """Utilization over time with the spans shaded; memory, power and SM clock below (NVML), or host RSS (CPU)."""
    monitor = timeline.get("monitor") or {}
    samples = monitor.get("samples") or []
    if not samples:
        return empty_figure("Device utilization", monitor.get("description") or "No utilization samples.")
    gpu = monitor.get("kind") == "nvml"
    t = [s["t"] for s in samples]
    wanted = [("util_pct", "GPU util %" if gpu else "CPU util %", "#ff7f0e", "x", "y", "solid")]
    if gpu:
        wanted += [("sm_clock_mhz", "SM clock MHz", "#8c564b", "x", "y2", "dot"),
                   ("mem_used_mb", "memory used MiB", "#17becf", "x2", "y3", "solid"),
                   ("power_w", "power W", "#bcbd22", "x2", "y4", "solid")]
    else:
        wanted.append(("mem_used_mb", "process RSS MiB", "#17becf", "x2", "y3", "solid"))
    data = []
    for key, name, line_color, xaxis, yaxis, dash in wanted:
        values = [s.get(key) for s in samples]
        if any(v is not None for v in values):
            data.append(line(t, values, name, line_color, dash=dash, xaxis=xaxis, yaxis=yaxis))
    top_shapes, notes = span_shapes(timeline.get("spans") or [], xref="x", yref="y domain", label_at="bottom")
    bottom_shapes, _ = span_shapes(timeline.get("spans") or [], labels=False, xref="x2", yref="y3 domain")
    right = {"side": "right", "showgrid": False}
    layout = {
        "shapes": top_shapes + bottom_shapes, "annotations": notes,
        "xaxis": {"anchor": "y", "matches": "x2", "showticklabels": False},
        "xaxis2": {"anchor": "y3", "title": {"text": "seconds since the run started"}, **_time_range(timeline)},
        "yaxis": {"domain": [0.45, 1.0], "range": [0, 105], "title": {"text": "util %"}},
        "yaxis3": {"domain": [0.0, 0.36], "anchor": "x2", "title": {"text": "MiB"}},
    }
    if gpu:
        layout["yaxis2"] = {"overlaying": "y", "title": {"text": "MHz"}, **right}
        layout["yaxis4"] = {"overlaying": "y3", "anchor": "x2", "title": {"text": "W"}, **right}
    title = ("GPU (NVML, coarse: share of each sample period with any kernel running)" if gpu else
             "CPU utilization (no NVIDIA GPU on this server)")
    return figure(data, layout, title, height=HEIGHT + 60)


def _time_range(timeline: dict[str, Any]) -> Spec:
    """The same x range on the tokens/s and device charts: the whole run, or only the timed trials when the
    warm-up (compilation, often seconds against trials of a fraction of one) would squeeze them into a sliver.
    Double-clicking a chart shows everything."""
    end = timeline.get("t_end")
    if not end:
        return {}
    starts = [s["t0"] for s in timeline.get("spans") or [] if s["phase"] == "trial"]
    first_trial = min(starts) if starts else 0.0
    start = first_trial - 0.02 * (end - first_trial) if first_trial > 0.5 * end else 0.0
    return {"range": [start, end]}


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
    data = [{"type": "histogram", "x": values, "name": name, "marker": {"color": color(name)}, "opacity": 0.6,
             "nbinsx": 60} for name, values in steps.items() if values]
    layout = {"barmode": "overlay", "xaxis": {"title": {"text": "ms per decode step"}},
              "yaxis": {"title": {"text": "steps"}}}
    return figure(data, layout, title)


def gap_figure(report: dict[str, Any]) -> go.Figure:
    """Per-step GPU idle gap of each loop's median trial (CUDA events); on the CPU, host time per step."""
    gpu = device_clock(report) == "cuda-events"
    key = "gpu_gap_ms" if gpu else "step_ms"
    title = ("GPU idle gap before each step (CUDA events, median trial)" if gpu else
             "Host time per step (host clock; no CUDA events on the CPU)")
    data = []
    for name in LOOPS:
        run = representative_run(report, name)
        values = run["timings"].get(key, []) if run else []
        if values:
            data.append(line(list(range(1, len(values) + 1)), values, name, color(name), width=1.5))
    if not data:
        return empty_figure(title, "Per-step timings appear here after a run.")
    layout = {"xaxis": {"title": {"text": "decode step"}},
              "yaxis": {"title": {"text": "idle ms" if gpu else "ms"}, "rangemode": "tozero"}}
    return figure(data, layout, title)


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


def warm_up() -> None:
    """Build each kind of figure once, so plotly's lazy imports do not land in the middle of a timed run."""
    spans = [{"contestant": "naive", "phase": "trial", "trial": 0, "t0": 0.0, "t1": 1.0}]
    sample = {"t": 0.0, "util_pct": 1.0, "mem_used_mb": 1.0, "power_w": 1.0, "sm_clock_mhz": 1.0}
    run = {"contestant": "naive", "timings": {"clock": "host", "tokens_per_s": 1.0, "step_ms": [1.0, 2.0]}}
    timeline = {"series": {"naive": {"t": [0.0, 1.0], "tokens_per_s": [1.0, 2.0]}}, "spans": spans,
                "monitor": {"kind": "nvml", "samples": [sample]}}
    for fig in all_figures(timeline, {"runs": [run]}):
        fig.to_json()
