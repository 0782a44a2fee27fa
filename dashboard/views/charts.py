"""Plotly figures built from plain data (lists and dicts), so they can be tested without a browser.

The *live series* is what the page records while a run streams (dashboard.service.live_view), and
`dashboard.service.rate_series.live_series_from_report` rebuilds for a saved report:
    {"series": {name: {"t": [...], "tokens_per_s": [...]}},            # None in both lists separates trials
     "spans": [{"contestant", "phase" (a core.phases id: "warmup", "trial", "audit", ...), "trial", "t0", "t1"}],
     "monitor": {"source" ("nvml"|"cpu"|"none"), "description", "samples": [{"t", "gpu", "util_pct", "mem_used_mb",
                 "power_w", "sm_clock_mhz"}]}}
with every time in seconds since the run started. A sample's "gpu" is its NVML index (None on the CPU fallback);
metrics a sample did not read are None (the driver buffers utilization, power and clock at their own times). A
*report* is the JSON of `python -m core.bench --json`.

Figures are written as plain dicts and wrapped once. Plotly's per-property validation costs 10-100 ms per figure,
and live charts are rebuilt many times while a run streams, in the server process, which shares the machine's cores
with the engine process timing the decode loop; so it is off by default (`VALIDATE`), and the tests build every
figure with it on.
"""

from __future__ import annotations

import math
import statistics
import textwrap
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from core.measure import stats
from core.phases import phase_named
from core.report.explain import report_device_type
from core.request.options import RUN_OPTION
from dashboard.service.page_record import SavedReport, split_report
from dashboard.service.report_numbers import clock_of

# The A/A control gets a hue of its own: a lighter green than pipelined's was all but the same tint under a span.
# Okabe-Ito's colour-blind-safe palette; naive and pipelined as on the timeline (vermillion, blue), and each trace
# also carries its name in the legend.
COLORS = {"naive": "#D55E00", "pipelined": "#0072B2", "pipelined-again": "#F0E442", "no-check": "#000000",
          "hf": "#009E73", "hf-deferred": "#CC79A7"}
DASHES = {"pipelined-again": "dash"}
SHORT_LABELS = {"pipelined-again": "A/A", "hf-deferred": "hf-def"}  # span labels where the name does not fit
WARMUP_COLOR = "#9e9e9e"
HEIGHT = 360
MAX_POINTS = 20_000
VALIDATE = False
_TEMPLATE = pio.templates["plotly_white"].to_plotly_json()

# The legend sits at the bottom of the figure, under the x axis title; the title has the top margin to itself.
MARGIN = {"l": 55, "r": 55, "t": 50, "b": 10}
LEGEND = {"orientation": "h", "yref": "container", "y": 0.0, "yanchor": "bottom", "x": 0.0, "xanchor": "left",
          "itemsizing": "constant"}
TIME_AXIS = {"title": {"text": "seconds since the run started"}, "tickformat": ",.3~f", "exponentformat": "none",
             "hoverformat": ",.3f"}
MIN_TIME_SPAN_S = 1.0
MESSAGE_WIDTH = 65  # characters per line of a placeholder's message
TITLE_WIDTH = 48  # characters per line of a chart title: what fits a phone's chart at the page's 12 px there
SUBTITLE_WIDTH = 62
TITLE_LINE_PX = 18

# What a span label needs, to leave out those that would not fit inside their span.
PLOT_WIDTH_PX = 540  # a chart in half of a 1400 px wide page, less its margins
LABEL_CHAR_PX = 6
LABEL_PAD_PX = 4

HIST_BINS = 60
ROBUST_QUANTILE = 0.99
ROBUST_FACTOR = 1.2
MIN_GAP_TOP_MS = 0.1

Spec = dict[str, Any]


def color(name: str) -> str:
    return COLORS.get(name, "#7f7f7f")


def dash(name: str) -> str:
    return DASHES.get(name, "solid")


def figure(data: list[Spec], layout: Spec, title: str, height: int = HEIGHT, subtitle: str | None = None) -> go.Figure:
    """Wrap trace and layout dicts, with the page's common look."""
    # Plotly does not wrap titles: a long one is broken onto lines that fit a phone's chart (the page's CSS sets
    # the font smaller there), and the top margin grows by a line for each.
    heading = {"text": wrap(title, TITLE_WIDTH), "font": {"size": 15}, "yref": "container", "y": 1.0,
               "yanchor": "top", "pad": {"t": 12}}
    extra_lines = heading["text"].count("<br>")
    if subtitle:
        heading["subtitle"] = {"text": wrap(subtitle, SUBTITLE_WIDTH), "font": {"size": 12, "color": "#555"}}
        extra_lines += heading["subtitle"]["text"].count("<br>")
    # Validation drops empty lists; dropping them here keeps unvalidated figures the same.
    given = {key: value for key, value in layout.items() if value != []}
    margin = dict(given.pop("margin", MARGIN))
    margin["t"] += TITLE_LINE_PX * extra_lines
    base = {"title": heading, "height": height + TITLE_LINE_PX * extra_lines, "template": _TEMPLATE,
            "margin": margin, "legend": LEGEND}
    return go.Figure(data=data, layout={**base, **given}, _validate=VALIDATE)


def empty_figure(title: str, message: str) -> go.Figure:
    """A placeholder that says what will appear, or why nothing can."""
    note = {"text": wrap(message), "showarrow": False, "x": 0.5, "y": 0.5, "xref": "paper", "yref": "paper",
            "font": {"size": 13, "color": "#666"}}
    return figure([], {"annotations": [note], "xaxis": {"visible": False}, "yaxis": {"visible": False}}, title)


def wrap(message: str, width: int = MESSAGE_WIDTH) -> str:
    """The message broken onto lines of at most `width` characters at word boundaries, joined by <br>."""
    paragraphs = message.split("<br>")
    lines = [line for p in paragraphs for line in textwrap.wrap(p, width, break_long_words=False,
                                                                  break_on_hyphens=False) or [""]]
    return "<br>".join(lines)


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


def time_range(live: dict[str, Any]) -> list[float] | None:
    """The same x range on the tokens/s and device charts: the whole run, or only the timed trials when the
    warm-up (compilation, often seconds against trials of a fraction of one) would squeeze them into a sliver;
    never under MIN_TIME_SPAN_S, so a run that has barely started does not zoom to nanoseconds.
    Double-clicking a chart shows everything."""
    end = live.get("t_end") or _data_end(live)
    if end is None:
        return None
    starts = [s["t0"] for s in live.get("spans") or [] if s["phase"] == "trial"]
    first_trial = min(starts) if starts else 0.0
    start = first_trial - 0.02 * (end - first_trial) if first_trial > 0.5 * end else 0.0
    return [start, max(end, start + MIN_TIME_SPAN_S)]


def _data_end(live: dict[str, Any]) -> float | None:
    times = [t for s in (live.get("series") or {}).values() for t in s.get("t") or [] if t is not None]
    times += [s.get("t1") or s["t0"] for s in live.get("spans") or []]
    times += [s["t"] for s in (live.get("monitor") or {}).get("samples") or []]
    return max(times, default=None)


def _time_axis(view: list[float] | None) -> Spec:
    return {**TIME_AXIS, "range": view} if view else dict(TIME_AXIS)


def line(x: list[Any], y: list[Any], name: str, line_color: str, dash: str = "solid", width: float = 2,
         **extra: Any) -> Spec:
    return {"type": "scatter", "mode": "lines", "x": x, "y": y, "name": name,
            "line": {"color": line_color, "dash": dash, "width": width}, **extra}


# ------------------------------------------------------------------------------------------------ tokens/s

def tokens_per_s_figure(live: dict[str, Any]) -> go.Figure:
    """Tokens/s over time for each contestant (a rate over the last few steps), with the spans shaded."""
    title = "Tokens/s over time"
    series = live.get("series") or {}
    if not any(s.get("t") for s in series.values()):
        return empty_figure(title, "Tokens/s per loop appear here while a run streams.")
    timed = {name: s for name, s in series.items() if s.get("t")}
    data = [line(s["t"], s["tokens_per_s"], name, color(name), dash=dash(name), connectgaps=False)
            for name, s in timed.items()]
    spans = live.get("spans") or []
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


def device_figure(live: dict[str, Any], device_type: str | None = None) -> go.Figure:
    """Utilization over time with the spans shaded; memory, power and SM clock below (NVML), or host RSS (CPU).
    One line per GPU and metric, through the samples that read that metric. With `device_type` (a report's:
    "cuda" or "cpu"), samples of another kind of device than the report's own are not drawn, and it says why."""
    monitor = live.get("monitor") or {}
    samples = monitor.get("samples") or []
    if not samples:
        return empty_figure("Device utilization", monitor.get("description") or "No utilization samples.")
    mismatch = _foreign_samples(monitor.get("source"), device_type)
    if mismatch:
        return empty_figure("Device utilization", mismatch)
    gpu = monitor.get("source") == "nvml"
    data, ranges = _device_traces(samples, GPU_METRICS if gpu else CPU_METRICS)
    view = time_range(live)
    spans = live.get("spans") or []
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


def zero_based(values: Sequence[float], min_top: float) -> list[float]:
    """[0, top]: the values with 10% headroom, and never less than min_top, so a constant is a flat line."""
    return [0.0, max(max(values) * 1.1, min_top)]


# ------------------------------------------------------------------------------------------------ report charts

def step_latency_figure(report: dict[str, Any]) -> go.Figure:
    """Distribution of per-step latency of every contestant with per-step times, over all trials, on shared bins
    and a window that leaves far outliers out (and says how many). On the host clock, a pipelined loop's steps whose
    tokens arrive together are left out, and the subtitle says why (host_clock_steps)."""
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


def host_clock_steps(report: dict[str, Any], name: str, run: dict[str, Any]) -> tuple[list[float], int]:
    """A run's step times on the host clock (the time between tokens known on the host) without the steps that say
    nothing of a step: a pipelined loop reads each step's tokens `lag` steps late, so its first step holds the
    `lag` steps queued before the first read, and its last `lag` steps' tokens arrive together at the end (~0 ms).
    (the kept times, how many were left out)."""
    values = run["timings"].get("step_ms") or []
    lag = _lag(report, name)
    if lag is None or len(values) <= lag + 1:
        return values, 0
    return values[1:-lag], lag + 1


def _lag(report: dict[str, Any], name: str) -> int | None:
    """The lag `name` ran with, where lag is its option (the pipelined loops), else None."""
    if name not in RUN_OPTION["lag"].affects:
        return None
    ran = ((report.get("effective") or {}).get(name) or {}).get("options") or {}
    asked = (report.get("request") or {}).get("options") or {}
    lag = ran.get("lag", asked.get("lag", 1))
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


def readable(value: float, digits: int = 3) -> str:
    """`value` to `digits` significant digits (whole numbers from 10**digits on), written out: 1,352 and 0.0123,
    never 1.35e+03."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def gap_figure(report: dict[str, Any]) -> go.Figure:
    """Per-step GPU idle gap of each contestant's median trial (CUDA events); on the CPU, host time per step, without
    a pipelined loop's steps whose tokens arrive together (host_clock_steps, said in the subtitle)."""
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


def all_figures(live: dict[str, Any], report: dict[str, Any] | SavedReport | None) -> tuple[go.Figure, ...]:
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
    live = {"series": {"naive": {"t": [0.0, 1.0], "tokens_per_s": [1.0, 2.0]}}, "spans": spans,
            "monitor": {"source": "nvml", "samples": [sample]}}
    return [fig.to_json() for fig in all_figures(live, {"runs": [run]})]
