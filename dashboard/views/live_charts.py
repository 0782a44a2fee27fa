"""The charts of a run's live series: tokens/s over time and the device's samples over time, on one time axis with
each contestant's spans shaded.

The *live series* is what the page records while a run streams (dashboard.service.live_view), and
`dashboard.service.rate_series.live_series_from_report` rebuilds for a saved report:
    {"series": {name: {"t": [...], "tokens_per_s": [...]}},            # None in both lists separates trials
     "spans": [{"contestant", "phase" (a core.phases id: "warmup", "trial", "audit", ...), "trial", "t0", "t1"}],
     "monitor": {"source" ("nvml"|"cpu"|"none"), "description", "samples": [{"t", "gpu", "util_pct", "mem_used_mb",
                 "power_w", "sm_clock_mhz"}]}}
with every time in seconds since the run started. A sample's "gpu" is its NVML index (None on the CPU fallback);
metrics a sample did not read are None (the driver buffers utilization, power and clock at their own times).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from core.phases import phase_named
from dashboard.service.page_record import LiveSeries
from dashboard.views.charts import HEIGHT, MARGIN, Spec, color, dash, empty_figure, figure, line, zero_based

SHORT_LABELS = {"pipelined-again": "A/A", "hf-deferred": "hf-def"}  # span labels where the name does not fit
WARMUP_COLOR = "#9e9e9e"  # the untimed spans' shade

TIME_AXIS = {"title": {"text": "seconds since the run started"}, "tickformat": ",.3~f", "exponentformat": "none",
             "hoverformat": ",.3f"}
MIN_TIME_SPAN_S = 1.0

# What a span label needs, to leave out those that would not fit inside their span.
PLOT_WIDTH_PX = 540  # a chart in half of a 1400 px wide page, less its margins
LABEL_CHAR_PX = 6
LABEL_PAD_PX = 4


# ------------------------------------------------------------------------------------------------ time axis

def span_shapes(spans: Sequence[dict[str, Any]], view: Sequence[float] | None, labels: bool = True, xref: str = "x",
                yref: str = "y domain", label_at: str = "top") -> tuple[list[Spec], list[Spec]]:
    """Shapes shading each loop's span in its colour (warm-ups in grey), and labels for the spans wide enough
    to hold theirs inside the visible range `view`."""
    drawn = [s for s in spans if s.get("t1") is not None and s["t1"] > s["t0"]]
    shapes = [{"type": "rect", "xref": xref, "yref": yref, "x0": s["t0"], "x1": s["t1"], "y0": 0, "y1": 1,
               "fillcolor": color(s["contestant"]) if _timed(s) else WARMUP_COLOR,
               "opacity": 0.13 if _timed(s) else 0.08, "line": {"width": 0}, "layer": "below"}
              for s in drawn]
    if not labels or view is None:
        return shapes, []
    style = {"xref": xref, "yref": yref, "y": 1 if label_at == "top" else 0, "xanchor": "left", "yanchor": label_at,
             "showarrow": False, "font": {"size": 10, "color": "#555"}}
    return shapes, [{"text": text, "x": x, **style} for text, x in _span_labels(drawn, view)]


def _timed(span: dict[str, Any]) -> bool:
    """A timed trial's span (drawn in its contestant's colour); warm-ups and the extra runs after the trials (the
    sync audit, the kernel measurement: core.phases) are untimed, in grey."""
    phase = phase_named(span.get("phase"))
    return phase is not None and phase.timed


def _span_labels(spans: Sequence[dict[str, Any]], view: Sequence[float]) -> list[tuple[str, float]]:
    """(text, x) of each label that fits inside its span's visible part after the previous label; the untimed
    spans of one phase in a row (the warm-ups, the audited runs) share one label, once per phase."""
    placed: list[tuple[str, float]] = []
    free_from, labelled = float("-inf"), set()
    for i, span in enumerate(spans):
        untimed = not _timed(span)
        if untimed and span["phase"] in labelled:
            continue
        right = _phase_run_end(spans, i) if untimed else span["t1"]
        left, right = max(span["t0"], view[0], free_from), min(right, view[1])
        texts = (_phase_noun(span),) if untimed else \
            (span["contestant"], *filter(None, [SHORT_LABELS.get(span["contestant"])]))
        text = next((t for t in texts if right - left >= _label_width_s(t, view)), None)
        if text is not None:
            placed.append((text, left))
            free_from = left + _label_width_s(text, view)
            if untimed:
                labelled.add(span["phase"])
    return placed


def _phase_noun(span: dict[str, Any]) -> str:
    phase = phase_named(span.get("phase"))
    return phase.noun if phase is not None else str(span.get("phase"))


def _phase_run_end(spans: Sequence[dict[str, Any]], first: int) -> float:
    """Where the run of spans of the same phase that begins at `first` ends."""
    end = spans[first]["t1"]
    for span in spans[first + 1:]:
        if span["phase"] != spans[first]["phase"]:
            break
        end = span["t1"]
    return end


def _label_width_s(text: str, view: Sequence[float]) -> float:
    return (len(text) * LABEL_CHAR_PX + LABEL_PAD_PX) / PLOT_WIDTH_PX * (view[1] - view[0])


def time_range(live: LiveSeries) -> list[float] | None:
    """The same x range on the tokens/s and device charts: the whole run, or only the timed trials when the
    warm-up (compilation, often seconds against trials of a fraction of one) would squeeze them into a sliver;
    never under MIN_TIME_SPAN_S, so a run that has barely started does not zoom to nanoseconds.
    Double-clicking a chart shows everything."""
    end = live["t_end"] or _data_end(live)
    if end is None:
        return None
    starts = [s["t0"] for s in live["spans"] if s["phase"] == "trial"]
    first_trial = min(starts) if starts else 0.0
    start = first_trial - 0.02 * (end - first_trial) if first_trial > 0.5 * end else 0.0
    return [start, max(end, start + MIN_TIME_SPAN_S)]


def _data_end(live: LiveSeries) -> float | None:
    times = [t for s in live["series"].values() for t in s.get("t") or [] if t is not None]
    times += [s.get("t1") or s["t0"] for s in live["spans"]]
    times += [s["t"] for s in live["monitor"].get("samples") or []]
    return max(times, default=None)


def _time_axis(view: list[float] | None) -> Spec:
    return {**TIME_AXIS, "range": view} if view else dict(TIME_AXIS)


# ------------------------------------------------------------------------------------------------ tokens/s

def tokens_per_s_figure(live: LiveSeries) -> go.Figure:
    """Tokens/s over time for each contestant (a rate over the last few steps), with the spans shaded."""
    title = "Tokens/s over time"
    series = live["series"]
    if not any(s.get("t") for s in series.values()):
        return empty_figure(title, "Tokens/s per loop appear here while a run streams.")
    timed = {name: s for name, s in series.items() if s.get("t")}
    data = [line(s["t"], s["tokens_per_s"], name, color(name), dash=dash(name), connectgaps=False)
            for name, s in timed.items()]
    spans = live["spans"]
    view = time_range(live)
    shapes, notes = span_shapes(spans, view)
    for span in _untimed_spans(spans, set(timed)):
        data.append(_span_legend_entry(span))
    layout = {"shapes": shapes, "annotations": notes, "xaxis": _time_axis(view),
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


# ------------------------------------------------------------------------------------------------ device

# (sample key, name with one device, name after "GPU i " with several, colour, x axis, y axis, dash)
GPU_METRICS = (("util_pct", "GPU util %", "util %", "#ff7f0e", "x", "y", "solid"),
               ("sm_clock_mhz", "SM clock MHz", "SM clock MHz", "#8c564b", "x", "y2", "dot"),
               ("mem_used_mb", "memory used MiB", "memory used MiB", "#17becf", "x2", "y3", "solid"),
               ("power_w", "power W", "power W", "#bcbd22", "x2", "y4", "solid"))
# On the CPU the sampler reads the engine processes, where the model lives and runs
# (core.measure.gpu_monitor.CpuReader).
CPU_METRICS = (("util_pct", "engine CPU % (of all cores)", "", "#ff7f0e", "x", "y", "solid"),
               ("mem_used_mb", "engine RSS MiB (all ranks)", "", "#17becf", "x2", "y3", "solid"))
# The smallest top of each zero-based axis, so a small change stays small: MHz, MiB (1 GiB), W.
MIN_TOPS = {"sm_clock_mhz": 100.0, "mem_used_mb": 1024.0, "power_w": 50.0}
NVML_TITLE = "GPU utilization (NVML, coarse)"
NVML_SUBTITLE = "util % = share of each ~1/6 s sample period in which any kernel ran: coarse"
CPU_TITLE = "Engine CPU use (no NVIDIA GPU here)"


def device_figure(live: LiveSeries, device_type: str | None = None) -> go.Figure:
    """Utilization over time with the spans shaded; memory, power and SM clock below (NVML), or host RSS (CPU).
    One line per GPU and metric, through the samples that read that metric. With `device_type` (a report's:
    "cuda" or "cpu"), samples of another kind of device than the report's own are not drawn, and it says why."""
    monitor = live["monitor"]
    samples = monitor.get("samples") or []
    if not samples:
        return empty_figure("Device utilization", monitor.get("description") or "No utilization samples.")
    mismatch = _foreign_samples(monitor.get("source"), device_type)
    if mismatch:
        return empty_figure("Device utilization", mismatch)
    gpu = monitor.get("source") == "nvml"
    data, ranges = _device_traces(samples, GPU_METRICS if gpu else CPU_METRICS)
    view = time_range(live)
    spans = live["spans"]
    top_shapes, notes = span_shapes(spans, view, xref="x", yref="y domain", label_at="bottom")
    bottom_shapes, _ = span_shapes(spans, view, labels=False, xref="x2", yref="y3 domain")
    right = {"side": "right", "showgrid": False, "tickmode": "auto", "nticks": 5}
    layout = {
        "shapes": top_shapes + bottom_shapes, "annotations": notes,
        "xaxis": {"anchor": "y", "matches": "x2", "showticklabels": False},
        "xaxis2": {"anchor": "y3", **_time_axis(view)},
        "yaxis": {"domain": [0.45, 1.0], "range": [0, 105], "title": {"text": "util %"}},
        "yaxis3": {"domain": [0.0, 0.36], "anchor": "x2", "title": {"text": "MiB"}, **ranges.get("y3", {})},
    }
    if gpu:
        layout["yaxis2"] = {"overlaying": "y", "title": {"text": "MHz"}, **right, **ranges.get("y2", {})}
        layout["yaxis4"] = {"overlaying": "y3", "anchor": "x2", "title": {"text": "W"}, **right,
                            **ranges.get("y4", {})}
    layout["margin"] = {**MARGIN, "t": 75} if gpu else MARGIN
    # Each line past four adds about half a legend row at the bottom.
    height = HEIGHT + 80 + 12 * max(0, len(data) - 4)
    return figure(data, layout, NVML_TITLE if gpu else CPU_TITLE, height=height,
                  subtitle=NVML_SUBTITLE if gpu else None)


def _foreign_samples(source: Any, device_type: str | None) -> str | None:
    """Why samples from `source` cannot be those of a report measured on `device_type`; None when they can."""
    if device_type == "cpu" and source == "nvml":
        return ("This report was measured on the CPU, yet it holds NVML (GPU) samples: they are not of its own "
                "device, so they are not drawn.")
    if device_type == "cuda" and source == "cpu":
        return ("This report was measured on a GPU, yet it holds CPU-use samples: they are not of its own device, "
                "so they are not drawn.")
    return None


def _device_traces(samples: list[dict[str, Any]], metrics: Sequence[tuple]) -> tuple[list[Spec], dict[str, Spec]]:
    """The lines of each metric on each GPU, and a zero-based range for each axis but utilization's."""
    groups = _by_gpu(samples)
    data, ranges = [], {}
    for key, single, several, line_color, xaxis, yaxis, line_dash in metrics:
        values = []
        for rank, (index, group) in enumerate(groups.items()):
            points = [(s["t"], s[key]) for s in group if s.get(key) is not None]
            if not points:
                continue
            name = single if len(groups) == 1 else f"GPU {index} {several}"
            t, y = (list(v) for v in zip(*points))
            data.append(line(t, y, name, _shade(line_color, rank), dash=line_dash, xaxis=xaxis, yaxis=yaxis))
            values += y
        if values and key in MIN_TOPS:
            ranges[yaxis] = {"range": zero_based(values, MIN_TOPS[key])}
    return data, ranges


def _by_gpu(samples: list[dict[str, Any]]) -> dict[Any, list[dict[str, Any]]]:
    """Samples by GPU index, time-ordered. With several GPUs, samples of no GPU are left out."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for sample in sorted(samples, key=lambda s: s["t"]):
        groups.setdefault(sample.get("gpu"), []).append(sample)
    if len(groups) > 1:
        groups.pop(None, None)
    return dict(sorted(groups.items(), key=lambda item: (item[0] is None, item[0] or 0)))


def _shade(hex_color: str, rank: int) -> str:
    """The colour for the rank-th GPU: the colour itself, then alternately darker and lighter."""
    if rank == 0:
        return hex_color
    amount = min(0.6, 0.25 * ((rank + 1) // 2))
    target = 0 if rank % 2 else 255
    channels = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(c + (target - c) * amount):02x}" for c in channels)
