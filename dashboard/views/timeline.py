"""The timeline chart: each loop's representative trial drawn step by step, host lane above device lanes.

Per loop: a host lane (when the host queued each step, when it sat blocked waiting to learn a step's tokens, and a
tick when each step's tokens became known) and a device lane per GPU (each step's busy span, the part of it the
device spent waiting for its launch pale, the idle gaps between spans hatched). Naive sits above pipelined on one
time axis: ms since each loop's trial started. On the CPU the host is the device: one lane per loop. The first view
is a window of 10-20 decode steps from the middle of the trial; the range slider under it reaches the whole trial.
`diff_timelines` draws two reports' loops on one such axis.

The chart reads in words: solid = working, hatched = waiting, pale = the device waiting for its launch; each bar's
hover says which step it is and what its number means, and the table's hover defines each column. The two loops
are told apart by a colour-blind-safe pair (Okabe-Ito vermillion and blue) and by their names on every lane.

It reads the per-step timestamps of a run's timings, all in ms since that run's start on the host clock:
host_step_start_ms, host_queued_ms, host_wait_start_ms, host_known_ms, device_start_ms / device_end_ms (empty on
the CPU, where the device is the host and its compute is the host's step spans) and rank_device_spans (one entry per
rank under tensor parallelism). Reports written before those were recorded get what they have, the queued and known
times, and `timeline_note` says so in one line.

Bars are filled polygons, one scatter trace per lane and kind, so a 4096-step trial is a handful of SVG paths and
the figure builds in a few ms (plotly validation off, as in dashboard.views.charts).
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import plotly.graph_objects as go

from core.report.explain import contestant_waits
from dashboard.views import charts
from dashboard.views.charts import Spec, color
from dashboard.views.timeline_trials import DeviceLane, LoopTrial, Means, first_view, loop_trials, window_means

TITLE = "Host and device, step by step"
EMPTY_MESSAGE = "The timeline appears here after each loop's first trial."
OLD_REPORT_NOTE = ("This report predates per-step host and device timestamps: its timeline shows only when each "
                   "step was queued and when its tokens were known on the host (no host waits, no device spans).")
# On the CPU host and device are one processor: one lane per loop, and no device gap (what separates two steps'
# spans there is the host's own work, not the device waiting).
CPU_LINE = "CPU: host and device are one, one lane per loop"

BAR_HALF = 0.34                # half a bar's height, in lanes
LOOP_SPACING = 1.5             # lanes from one loop's last lane to the next loop's host lane
MIN_GAP_MS = 1e-4              # idle gaps shorter than 0.1 µs are not drawn
# Coordinates go to the page as float32: 0.5 µs steps at 8 s into a trial, far below a pixel at any zoom that shows a
# step; half the bytes of float64. The stated means are computed in float64.
COORDINATE = np.float32
LANE_PX = 46
LABEL_FONT_PX = 11
LABEL_CHAR_PX = 6.3            # a lane label's width per character at LABEL_FONT_PX, a little over the real one
LABEL_PAD_PX = 12
TOP_LINE_PX = 13               # one line of the statistics block
TITLE_PX = 34
BOTTOM_PX = 75                 # x ticks, the range slider and the x title
HOVER_DISTANCE_PX = 40         # a bar's hover point is on its edge: reach it from the bar's middle
DIFF_LABEL = 12                # characters of a diffed run's label on its lanes

# The two loops: Okabe-Ito vermillion and blue (dashboard.views.charts.COLORS, as on the page's other charts), told
# apart under protanopia, deuteranopia and tritanopia; their names on every lane are the second cue.
LOOP_COLORS = {name: charts.COLORS[name] for name in ("naive", "pipelined")}
PALE = 0.6                     # how much white a pale bar mixes into its loop's colour
WAIT_STYLE = {"fillcolor": "rgba(0,0,0,0)",
              "fillpattern": {"shape": "/", "fgcolor": "#424242", "bgcolor": "#e0e0e0", "size": 6, "solidity": 0.35}}
IDLE_STYLE = {"fillcolor": "rgba(0,0,0,0)",
              "fillpattern": {"shape": "/", "fgcolor": "#757575", "bgcolor": "#f5f5f5", "size": 6, "solidity": 0.3}}
SPAN_KEY = "solid = working · hatched = waiting"
LAUNCH_KEY = "pale = the device waiting for its launch"
KNOWN_KEY = "black tick = a step's tokens known on the host"
SYNC_KEY = "red triangle = the host reading a device value"
KERNEL_KEY = "kernels drawn in steps {first}-{last} (kernel measurement)"
QUEUED_KEY = "coloured tick = a step queued by the host"
SYNC_COLOR = "#d62728"
KNOWN_COLOR = "#212121"
NBSP = "\u00a0"

# What each number of the table means: its hover.
COLUMN_HELP = {
    "host wait": "host wait: the host blocked until it knew a step's tokens (naive: .item() on the step it just "
                 "queued; pipelined: a copy queued lag steps earlier)",
    "device gap": "device gap: the device idle between one step's end and the next step's start",
    "idle inside": "idle inside: the part of a step's device span with no work, the device waiting for the host "
                   "to launch it (the span less the step's kernel time)",
}
MEANS_HELP = ("each the median over the loop's trials of the trial's mean per decode step (step 0 is prefill), in "
              "µs: the figure the summary states; the bars are the loop's median trial")
CLOCK_HELP = "GPU times are placed on the host's clock to within ±{error} µs (two reference events per trial)"
KERNEL_HELP = ("kernel measurement: one more run under CUPTI that records every kernel; each of its steps is scaled "
               "onto the same step's span here")


# ------------------------------------------------------------------------------------------------ the figure

def timeline_note(report: dict[str, Any]) -> str | None:
    """One line for the page when the report cannot give the whole timeline; None when it can (or has no loops)."""
    trials = loop_trials(report)
    return OLD_REPORT_NOTE if any(not t.complete for t in trials) else None


@dataclass
class _Group:
    """The loops of one report on the chart, and the label that names the report (None when it is the only one)."""

    label: str | None
    trials: list[LoopTrial]
    report: dict[str, Any] = field(default_factory=dict)  # whose summary the statistics block states


def timeline_figure(report: dict[str, Any]) -> go.Figure:
    """Naive above pipelined: a host lane and a device lane per GPU each (on the CPU the host lane alone), over the
    representative trials."""
    return _figure([_Group(None, loop_trials(report), report)])


def diff_timelines(report_a: dict[str, Any], report_b: dict[str, Any], label_a: str, label_b: str) -> go.Figure:
    """Two reports' timelines on one time axis (ms since each loop's trial started): report_a's loops above
    report_b's, each lane and each row of the table named by its report's label (cut to DIFF_LABEL characters)."""
    return _figure([_Group(_short(label_a), loop_trials(report_a), report_a),
                    _Group(_short(label_b), loop_trials(report_b), report_b)])


def _short(label: str) -> str:
    label = " ".join(str(label).split()) or "?"
    return label if len(label) <= DIFF_LABEL else label[:DIFF_LABEL - 1] + "…"


def loop_color(name: str) -> str:
    """A loop's colour on the timeline: the colour-blind-safe pair for the two loops, the page's for the rest."""
    return LOOP_COLORS.get(name) or color(name)


def pale(hex_color: str, white: float = PALE) -> str:
    """The colour mixed with `white` of white: a loop's colour for the device waiting inside a step."""
    rgb = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(c + (255 - c) * white):02x}" for c in rgb)


def _figure(groups: list[_Group]) -> go.Figure:
    trials = [t for group in groups for t in group.trials]
    if not trials:
        return charts.empty_figure(TITLE, EMPTY_MESSAGE)
    view = first_view(trials)
    data: list[Spec] = []
    shapes: list[Spec] = []
    ticks: list[tuple[float, str]] = []
    y = 0.0
    for group in groups:
        for trial in group.trials:
            who = f"{group.label} · {trial.name}" if group.label else trial.name
            lanes = _lane_labels(trial)
            traces, marks = _loop_traces(trial, y, who)
            data += traces
            named = html.escape(who, quote=False)
            ticks += [(y + i, f'<span style="color:{loop_color(trial.name)}">{named} · {label}</span>')
                      for i, label in enumerate(lanes)]
            shapes += [_band(trial.name, y, y + len(lanes) - 1), *marks]
            y += len(lanes) - 1 + LOOP_SPACING
    bottom = ticks[-1][0]
    block, definitions = _stats_block(groups)
    top = TITLE_PX + TOP_LINE_PX * (block.count("<br>") + 1) + 8
    # The lane labels' margin is set here (automargin only ever widens it), so the statistics block can start at
    # the figure's left edge rather than the plot's: on a phone the plot is too narrow for it.
    left = LABEL_PAD_PX + LABEL_CHAR_PX * max(len(html.unescape(_plain(text))) for _, text in ticks)
    layout = {
        "showlegend": False, "shapes": shapes, "hovermode": "closest", "hoverdistance": HOVER_DISTANCE_PX,
        "annotations": [{"text": block, "hovertext": definitions, "xref": "paper", "yref": "paper", "x": 0, "y": 1,
                         "xanchor": "left", "yanchor": "bottom", "xshift": 4 - left, "yshift": 6, "align": "left",
                         "showarrow": False, "hoverlabel": {"bgcolor": "#ffffff", "font": {"size": 12}},
                         "font": {"family": "ui-monospace, Menlo, Consolas, monospace", "size": 10, "color": "#333"}}],
        "xaxis": {"title": {"text": "ms since the loop's trial started"}, "zeroline": False, "hoverformat": ",.3f",
                  "rangeslider": {"visible": True, "thickness": 0.1}, **({"range": list(view)} if view else {})},
        "yaxis": {"tickvals": [t for t, _ in ticks], "ticktext": [text for _, text in ticks],
                  "range": [bottom + 0.6, -0.6], "fixedrange": True, "showgrid": False, "zeroline": False,
                  "automargin": True, "tickfont": {"size": LABEL_FONT_PX}},
        "margin": {**charts.MARGIN, "t": top, "l": left, "r": 15, "b": 45},
    }
    height = top + int(LANE_PX * (bottom + 1.2)) + BOTTOM_PX
    return charts.figure(data, layout, TITLE, height=height)


def _plain(text: str) -> str:
    return re.sub(r"<[^>]+>", "", text)


def _lane_labels(trial: LoopTrial) -> list[str]:
    return ["host", *(lane.label for lane in trial.devices)]


def _band(name: str, first: float, last: float) -> Spec:
    """A faint band of the loop's colour behind its lanes, so the loops stay apart without a legend."""
    return {"type": "rect", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": first - 0.5, "y1": last + 0.5,
            "fillcolor": loop_color(name), "opacity": 0.07, "line": {"width": 0}, "layer": "below"}


def _hover(who: str, what: str) -> str:
    """A bar's hover: its step and its number (customdata), and what that number is."""
    return f"{html.escape(who, quote=False)} · step %{{customdata[0]:d}}<br>{what}<extra></extra>"


def _loop_traces(trial: LoopTrial, y: float, who: str) -> tuple[list[Spec], list[Spec]]:
    """The loop's bars (traces) and ticks (shapes), its host lane at `y` and its device lanes below."""
    hue = loop_color(trial.name)
    known = _ticks(trial.known, y, f"{who} · tokens known", KNOWN_COLOR)
    if not trial.complete:
        return [], [_ticks(trial.queued, y, f"{who} · step queued", hue), known] if len(trial.queued) else [known]
    steps = np.arange(len(trial.queued))
    work = ("host computes a step", "computing %{customdata[1]:,.1f} µs: on the CPU the host computes each step") \
        if trial.cpu else ("host queues a step", "queuing %{customdata[1]:,.1f} µs: the host preparing and "
                                                 "launching the step's work")
    traces = [bars(trial.host_start, trial.queued, y, f"{who} · {work[0]}", {"fillcolor": hue},
                    hover=(steps, _hover(who, work[1]))),
              bars(trial.wait_start, trial.known, y, f"{who} · host blocked waiting", WAIT_STYLE,
                    hover=(steps[:trial.kept], _hover(who, "host wait %{customdata[1]:,.1f} µs: blocked until its "
                                                           "tokens were known")))]
    for offset, lane in enumerate(trial.devices, start=1):
        traces += _device_traces(trial, lane, y + offset, who)
    if len(trial.syncs[0]):
        traces.append({"type": "scatter", "mode": "markers", "x": trial.syncs[0].astype(COORDINATE),
                       "y": np.full(len(trial.syncs[0]), y - BAR_HALF, dtype=COORDINATE),
                       "marker": {"symbol": "triangle-down", "size": 9, "color": SYNC_COLOR,
                                  "line": {"width": 1, "color": "#ffffff"}},
                       "name": f"{who} · sync (audit)", "text": trial.syncs[1], "hoverinfo": "text"})
    return traces, [known]


def _device_traces(trial: LoopTrial, lane: DeviceLane, y: float, who: str) -> list[Spec]:
    """A device lane: each step's span solid, the part of it the device waited for its launch pale; where the
    kernel measurement gave the step's kernels, those solid and the rest of the span pale; the gaps between spans
    hatched."""
    hue, faint, label = loop_color(trial.name), {"fillcolor": pale(loop_color(trial.name))}, lane.label
    steps = np.arange(len(lane.starts))
    traced = np.zeros(len(lane.starts), dtype=bool)
    if lane is trial.gap_source:
        traced[[step for step in trial.kernels if step < len(traced)]] = True
    gap_starts, gap_ends, gap_steps = _gaps(lane)
    traces = [bars(lane.starts[~traced], lane.ends[~traced], y, f"{who} · {label} busy", {"fillcolor": hue},
                    hover=(steps[~traced], _hover(who, f"{label} span %{{customdata[1]:,.1f}} µs: from the step's "
                                                       "first device marker to its last"))),
              bars(gap_starts, gap_ends, y, f"{who} · {label} idle", IDLE_STYLE,
                    hover=(gap_steps, _hover(who, "device gap %{customdata[1]:,.1f} µs: the device idle before "
                                                  "this step, between steps")))]
    inside_text = "idle inside %{customdata[1]:,.1f} µs: the device waiting for its launch"
    if traced.any():
        traces.append(bars(lane.starts[traced], lane.ends[traced], y,
                            f"{who} · {label} waiting inside the step (kernel measurement)", faint,
                            hover=(steps[traced], _hover(who, f"{label} span %{{customdata[1]:,.1f}} µs: pale "
                                                              "where no kernel ran (kernel measurement)"))))
        order = sorted(trial.kernels)
        starts = np.concatenate([trial.kernels[s][0] for s in order])
        ends = np.concatenate([trial.kernels[s][1] for s in order])
        owners = np.concatenate([np.full(len(trial.kernels[s][0]), s) for s in order])
        traces.append(bars(starts, ends, y, f"{who} · {label} kernels (kernel measurement)", {"fillcolor": hue},
                            hover=(owners, _hover(who, "a kernel %{customdata[1]:,.1f} µs: the device working "
                                                   "(kernel measurement)"))))
    inside = trial.idle_inside_ms() if lane is trial.gap_source else None
    if inside is not None:
        waiting = np.zeros(len(lane.starts), dtype=bool)
        waiting[:len(inside)] = inside > MIN_GAP_MS
        waiting &= ~traced
        kept = np.flatnonzero(waiting)
        traces.append(bars(lane.starts[kept], lane.starts[kept] + inside[kept], y,
                            f"{who} · {label} waiting inside the step", faint,
                            hover=(kept, _hover(who, inside_text))))
    return traces


def _gaps(lane: DeviceLane) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The idle gaps between consecutive spans of a lane, as (starts, ends, the step each gap comes before)."""
    ends, starts = lane.ends[:-1], lane.starts[1:]
    idle = starts - ends > MIN_GAP_MS
    return ends[idle], starts[idle], np.flatnonzero(idle) + 1


def bars(starts: np.ndarray, ends: np.ndarray, y: float, name: str, style: Spec,
          hover: tuple[np.ndarray, str] | None = None) -> Spec:
    """Rectangles as one filled polygon: a comb whose teeth are the bars, joined along their bottom edge (zero
    area), so plotly.js draws one SVG path; with None between rectangles it draws one per rectangle and a
    4096-step trial takes seconds to render. Arrays go to the page as base64, without per-number copying.

    With `hover` (each bar's step, and a hovertemplate) each bar gets a fifth corner in the middle of its far edge,
    and all five carry (step, the bar's length in µs), so hovering the bar says what it is. Hover on the fill is off
    there: plotly.js tested a comb's fill against points of other lanes and named the wrong loop."""
    if hover is None:
        xs = np.column_stack([starts, starts, ends, ends]).astype(COORDINATE)
        teeth = np.array([y + BAR_HALF, y - BAR_HALF, y - BAR_HALF, y + BAR_HALF], dtype=COORDINATE)
        return {"type": "scatter", "mode": "lines", "x": xs.ravel(), "y": np.tile(teeth, len(starts)),
                "fill": "toself", "line": {"width": 0}, "name": name, "hoveron": "fills", "hoverinfo": "name",
                **style}
    steps, template = hover
    xs = np.column_stack([starts, starts, (starts + ends) / 2, ends, ends]).astype(COORDINATE)
    teeth = np.array([y + BAR_HALF, y - BAR_HALF, y - BAR_HALF, y - BAR_HALF, y + BAR_HALF], dtype=COORDINATE)
    numbers = np.column_stack([steps, (ends - starts) * 1000]).astype(COORDINATE)
    return {"type": "scatter", "mode": "lines", "x": xs.ravel(), "y": np.tile(teeth, len(starts)), "fill": "toself",
            "line": {"width": 0}, "name": name, "hoveron": "points", "customdata": np.repeat(numbers, 5, axis=0),
            "hovertemplate": template, **style}


def _ticks(times: np.ndarray, y: float, name: str, tick_color: str) -> Spec:
    """A vertical tick across the lane at each time: one path shape of moves and lines, a single SVG path (see
    bars). A little transparent, so a zoomed-out trial's ticks do not hide the lane under them."""
    low, high = y - BAR_HALF, y + BAR_HALF
    path = "".join(map(f"M{{:.4f}},{low:g}V{high:g}".format, times.tolist()))
    return {"type": "path", "xref": "x", "yref": "y", "path": path, "name": name,
            "line": {"color": tick_color, "width": 1.5}, "opacity": 0.75, "layer": "above"}


# ------------------------------------------------------------------------------------------------ statistics block

COLUMN_WIDTHS = {"host wait": 10, "device gap": 12, "idle inside": 13}
NAME_WIDTH = 11


def _stats_block(groups: Sequence[_Group]) -> tuple[str, str]:
    """A small monospace table, a row per loop: its host wait, device gap and idle inside per decode step as the
    summary states them (core.report.explain.contestant_waits: the median over its trials of each trial's mean), so the
    page has one figure of each; then a legend in words. And the hover that defines each of them."""
    trials = [t for group in groups for t in group.trials]
    means = {id(t): _summary_means(group.report, t) for group in groups for t in group.trials}
    columns = ["host wait", *(["device gap"] if any(not t.cpu for t in trials) else []),
               *(["idle inside"] if any(m.inside_us is not None for m in means.values()) else [])]
    lines = [CPU_LINE] if any(t.cpu and t.complete for t in trials) else []
    lines.append("µs per decode step, median of the trials' means")
    lines.append(_row("", columns))
    for group in groups:
        if group.label:
            lines.append(html.escape(group.label, quote=False))
        for trial in group.trials:
            m = means[id(trial)]
            values = {"host wait": m.wait_us, "device gap": m.gap_us, "idle inside": m.inside_us}
            indent = "  " if group.label else ""
            name = f'{indent}<span style="color:{loop_color(trial.name)}"><b>{trial.name}</b></span>'
            lines.append(name + _row(indent + trial.name, [_us(values[c]) for c in columns],
                                     [COLUMN_WIDTHS[c] for c in columns])[len(indent + trial.name):])
    lines += _legend(trials)
    return "<br>".join(line.replace(" ", NBSP) if "<span" not in line else _nbsp_outside_tags(line)
                       for line in lines), _definitions(trials, columns)


def _legend(trials: Sequence[LoopTrial]) -> list[str]:
    """What the bars and marks mean, in words, for what this chart draws."""
    lines = []
    if any(t.complete for t in trials):
        lines.append(SPAN_KEY)
    if any(t.complete and not t.cpu for t in trials):
        lines.append(LAUNCH_KEY)
    traced = sorted({step for t in trials for step in t.kernels})
    if traced:
        lines.append(KERNEL_KEY.format(first=traced[0], last=traced[-1]))
    if any(len(t.syncs[0]) for t in trials):
        lines.append(SYNC_KEY)
    lines.append(KNOWN_KEY)
    if not all(t.complete for t in trials):
        lines.append(QUEUED_KEY)
    return lines


def _definitions(trials: Sequence[LoopTrial], columns: Sequence[str]) -> str:
    """The table's hover: what each column means, over which steps, and how far the GPU's times can be off."""
    parts = [COLUMN_HELP[c] for c in columns] + [MEANS_HELP]
    if any(t.cpu and t.complete for t in trials):
        parts.append("on the CPU the host computes each step itself: there is no device to wait for, so no device "
                     "gap")
    errors = [t.sync_error_ms for t in trials if t.sync_error_ms is not None]
    if errors:
        parts.append(CLOCK_HELP.format(error=f"{max(errors) * 1000:,.1f}"))
    if any(t.kernels for t in trials):
        parts.append(KERNEL_HELP)
    return "<br>".join(charts.wrap(html.escape(part, quote=False), 60) for part in parts)


def _nbsp_outside_tags(line: str) -> str:
    """Spaces made non-breaking (SVG text would collapse them), those inside HTML tags kept."""
    return "".join(piece if piece.startswith("<") else piece.replace(" ", NBSP)
                   for piece in re.split(r"(<[^>]+>)", line))


def _row(name: str, cells: Sequence[str], widths: Sequence[int] | None = None) -> str:
    """One line of the table: the loop's name, then each cell right-aligned in its column."""
    widths = widths if widths is not None else [COLUMN_WIDTHS[c] for c in cells]
    return f"{name:<{NAME_WIDTH}}" + "".join(f"{cell:>{width}}" for cell, width in zip(cells, widths))


def _us(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f}"


def _summary_means(report: dict[str, Any], trial: LoopTrial) -> Means:
    """A loop's waits per decode step in µs as the report's summary states them (during a run, as it will: from the
    trials so far); where it has none of a figure (a report from before the summary had them), the drawn trial's."""
    waits = contestant_waits(report, trial.name)
    drawn = window_means(trial, None)

    def us(key: str, fallback: float | None) -> float | None:
        return waits[key] * 1000 if waits.get(key) is not None else fallback

    return Means(us("host_wait_ms", drawn.wait_us), us("device_gap_ms", drawn.gap_us) if not trial.cpu else None,
                 drawn.first, drawn.last, us("idle_inside_ms", drawn.inside_us) if not trial.cpu else None)


def prebuild() -> None:
    """Build one figure, so plotly's lazy imports do not land in the middle of a run."""
    timings = {"host_known_ms": [1.0, 2.0, 3.0], "host_queued_ms": [0.5, 1.5, 2.5], "tokens_per_s": 1.0}
    timeline_figure({"runs": [{"contestant": "naive", "timings": timings}]}).to_json()
