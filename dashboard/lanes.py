"""The timeline chart: each loop's representative trial drawn step by step, host lane above device lanes.

Per loop: a host lane (when the host queued each step, when it sat blocked waiting to learn a step's tokens, and a
tick when each step's tokens became known) and a device lane per GPU (each step's busy span, the idle gaps between
spans hatched). Naive sits above pipelined on one time axis: ms since each loop's trial started. The first view is a
window of 10-20 decode steps from the middle of the trial; the range slider under it reaches the whole trial.

It reads the per-step timestamps of a run's timings, all in ms since that run's start on the host clock:
host_step_start_ms, host_queued_ms, host_wait_start_ms, host_known_ms, device_start_ms / device_end_ms (empty on
the CPU, where the device is the host and its compute is the host's step spans) and rank_device_spans (one entry per
rank under tensor parallelism). Reports written before those were recorded get what they have, the queued and known
times, and `lanes_note` says so in one line.

Bars are filled polygons, one scatter trace per lane and kind with None between steps, so a 4096-step trial is a
handful of SVG paths and the figure builds in a few ms (plotly validation off, as in dashboard.charts).
"""

from __future__ import annotations

import html
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import plotly.graph_objects as go

from core.measure.waits import step_work_ms
from core.options import LOOPS, NO_CHECK
from dashboard import charts
from dashboard.charts import Spec, color

TITLE = "Host and device, step by step"
EMPTY_MESSAGE = "The timeline appears here after each loop's first trial."
OLD_REPORT_NOTE = ("This report predates per-step host and device timestamps: its timeline shows only when each "
                   "step was queued and when its tokens were known on the host (no host waits, no device spans).")
CPU_LINE = "device = host (CPU): its lane is the host's compute"

WINDOW_STEPS = 15              # decode steps in the first view, for a loop of the middle speed ...
MIN_WINDOW_STEPS, MAX_WINDOW_STEPS = 10, 20   # ... and the bounds for the slower and the faster loop
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
WAIT_STYLE = {"fillcolor": "rgba(0,0,0,0)",
              "fillpattern": {"shape": "/", "fgcolor": "#424242", "bgcolor": "#e0e0e0", "size": 6, "solidity": 0.35}}
IDLE_STYLE = {"fillcolor": "rgba(0,0,0,0)",
              "fillpattern": {"shape": "/", "fgcolor": "#757575", "bgcolor": "#f5f5f5", "size": 6, "solidity": 0.3}}
SPAN_KEY = ("solid: queuing (host) · busy (device)", "hatched: waiting (host) · idle (device)")
# Each line of the statistics block fits a phone's chart (50 monospace characters at most): a key of more lines is a
# tuple.
LAUNCH_KEY = ("pale: the device waiting inside a step for its", "      launch (the span beyond the step's work)")
LAUNCH_STYLE = {"fillcolor": "rgba(255,255,255,0.6)"}
KNOWN_KEY = "black tick: a step's tokens known on the host"
SYNC_KEY = ("red triangle: a host read of a device value (the", "      sync audit's run, at its place in the step)")
KERNEL_KEY = ("steps {first}-{last}: the kernel trial's kernels", "      (an extra run under CUPTI, each step scaled",
              "      onto this span), dotted between them")
SYNC_COLOR = "#d62728"
IDLE_INSIDE_STYLE = {"fillcolor": "rgba(0,0,0,0)",
                     "fillpattern": {"shape": ".", "fgcolor": "#9e9e9e", "bgcolor": "#fafafa", "size": 5,
                                     "solidity": 0.25}}
KNOWN_COLOR = "#212121"
QUEUED_KEY = "coloured tick: a step queued by the host"
NBSP = "\u00a0"


# ------------------------------------------------------------------------------------------------ one loop's trial

@dataclass
class DeviceLane:
    label: str                      # "GPU", "GPU 0", "CPU"
    starts: np.ndarray              # per computed step, ms
    ends: np.ndarray


def _empty() -> np.ndarray:
    return np.zeros(0)


@dataclass
class LoopTrial:
    """One loop's representative trial as the chart needs it; `complete` is False for reports without (usable)
    host/device timestamps."""

    name: str
    complete: bool
    cpu: bool
    queued: np.ndarray                                       # per computed step
    known: np.ndarray                                        # per kept step
    host_start: np.ndarray = field(default_factory=_empty)   # per computed step
    wait_start: np.ndarray = field(default_factory=_empty)   # per kept step
    devices: list[DeviceLane] = field(default_factory=list)
    gap_source: DeviceLane | None = None        # rank 0's spans: the summary's idle gap is measured on them
    recorded_gaps: np.ndarray = field(default_factory=_empty)  # gpu_gap_ms, for reports without device spans
    sync_error_ms: float | None = None
    # The kernel trial's merged kernel intervals of some steps (core.measure.kernel_trial), by step: (starts, ends) in
    # ms since that step's start, scaled onto this trial's span of the step.
    kernels: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    # The sync audit's reads (core.measure.sync_audit), placed where they fell in their step: times, hover texts.
    syncs: tuple[np.ndarray, list[str]] = (np.zeros(0), [])
    work_ms: float | None = None  # the device work of one step (core.measure.waits.step_work_ms)

    @property
    def kept(self) -> int:
        return len(self.known)

    def step_times(self) -> np.ndarray:
        """When each kept step began on the host (old reports: when its tokens were known)."""
        return self.host_start[:self.kept] if self.complete else self.known

    def period_ms(self) -> float | None:
        """The median time from one decode step to the next."""
        diffs = np.diff(self.step_times()[1:])
        return float(np.median(diffs)) if len(diffs) else None

    def waits_ms(self) -> np.ndarray | None:
        """Per kept step, how long the host sat blocked before learning its tokens."""
        return np.maximum(0.0, self.known - self.wait_start) if self.complete else None

    def idle_inside_ms(self) -> np.ndarray | None:
        """Per kept step, how long its device span held no work: the span less the step's work (core.measure.waits,
        the kernel trial's kernel time per step or the quickest loop's span), the device waiting for the host to
        launch inside the step, which the gap between steps does not show."""
        lane = self.gap_source
        if lane is None or self.cpu or not self.complete or self.work_ms is None:
            return None
        kept = self.kept
        return np.clip(lane.ends[:kept] - lane.starts[:kept] - self.work_ms, 0.0, None)

    def gaps_ms(self) -> np.ndarray | None:
        """Per kept step, the device's idle time before it (NaN for step 0): the summary's gpu_gap_ms."""
        lane = self.gap_source
        if lane is None:
            return None
        gaps = np.maximum(0.0, lane.starts[1:self.kept] - lane.ends[:self.kept - 1])
        return np.concatenate([[np.nan], gaps])


def loop_trial(run: dict[str, Any]) -> LoopTrial:
    timings = run["timings"]
    known, queued = _array(timings.get("host_known_ms")), _array(timings.get("host_queued_ms"))
    old = LoopTrial(run["contestant"], False, timings.get("clock") != "cuda-events", queued, known,
                    recorded_gaps=_array(timings.get("gpu_gap_ms")))
    try:
        return _complete_trial(run["contestant"], timings, known, queued) or old
    except (TypeError, ValueError, KeyError):  # malformed timestamps: draw what the old fields give
        return old


def _complete_trial(name: str, timings: dict[str, Any], known: np.ndarray, queued: np.ndarray) -> LoopTrial | None:
    if not all(key in timings for key in ("host_step_start_ms", "host_wait_start_ms", "device_start_ms")):
        return None
    computed = len(queued)
    host_start, wait_start = _array(timings["host_step_start_ms"]), _array(timings["host_wait_start_ms"])
    device_start, device_end = _array(timings["device_start_ms"]), _array(timings.get("device_end_ms"))
    if len(host_start) != computed or len(wait_start) != len(known) or len(known) > computed \
            or len(device_start) not in (0, computed) or len(device_end) != len(device_start):
        return None
    trial = LoopTrial(name, True, not len(device_start), queued, known, host_start=host_start, wait_start=wait_start,
                      sync_error_ms=timings.get("clock_sync_error_ms"))
    if trial.cpu:
        trial.gap_source = DeviceLane("CPU", host_start, queued)
        trial.devices = [trial.gap_source]
        return trial
    trial.gap_source = DeviceLane("GPU", device_start, device_end)
    ranks = sorted(timings.get("rank_device_spans") or [], key=lambda r: r["rank"])
    lanes = [DeviceLane(f"GPU {r['rank']}", _array(r["device_start_ms"]), _array(r["device_end_ms"])) for r in ranks]
    if any(len(lane.starts) != computed or len(lane.ends) != computed for lane in lanes):
        return None
    trial.devices = lanes if len(lanes) > 1 else [trial.gap_source]
    return trial


def _array(values: Any) -> np.ndarray:
    return np.asarray(values if values is not None else [], dtype=np.float64).reshape(-1)


def loop_trials(report: dict[str, Any]) -> list[LoopTrial]:
    """The representative trial of each loop that has one, naive first, with its kernel trial's kernels and its
    audit's reads where the report has them."""
    trials = []
    loops = [[r for r in report.get("runs", []) if r.get("contestant") == name] for name in (*LOOPS, NO_CHECK)]
    kernel_trials = report.get("kernel_trial") or {}
    for name in LOOPS:
        run = charts.representative_run(report, name)
        if run is not None and run["timings"].get("host_known_ms"):
            trial = loop_trial(run)
            busy = (kernel_trials.get(name) or {}).get("kernel_busy_ms_per_step")
            trial.work_ms = _work_ms([group for group in loops if group], busy)
            if trial.complete and not trial.cpu:
                trial.kernels = _kernels_onto(trial, (report.get("kernel_trial") or {}).get(name))
            if trial.complete:
                trial.syncs = _syncs_onto(trial, (report.get("sync_audit") or {}).get(name))
            trials.append(trial)
    return trials


def _work_ms(loops: list[list[dict[str, Any]]], busy: Any) -> float | None:
    try:
        return step_work_ms(loops, busy if isinstance(busy, int | float) else None)[0]
    except (TypeError, ValueError, KeyError, IndexError):  # spans of an unexpected shape: no idle inside is shown
        return None


def _kernels_onto(trial: LoopTrial, kernel_trial: Any) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """The kernel trial's kernel intervals of each step it kept, scaled from its span onto this trial's span."""
    lane = trial.gap_source
    steps = ((kernel_trial or {}).get("intervals") or {}).get("steps") if isinstance(kernel_trial, dict) else None
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for entry in steps or []:
        try:
            step, span = int(entry["step"]), float(entry["span_ms"])
            busy = np.asarray(entry["busy"], dtype=np.float64).reshape(-1, 2)
        except (KeyError, TypeError, ValueError):
            continue
        if lane is None or not 0 <= step < min(len(lane.starts), trial.kept) or span <= 0:
            continue
        scale = (lane.ends[step] - lane.starts[step]) / span
        out[step] = (lane.starts[step] + busy[:, 0] * scale, lane.starts[step] + busy[:, 1] * scale)
    return out


def _syncs_onto(trial: LoopTrial, audit: Any) -> tuple[np.ndarray, list[str]]:
    """The audit's reads, each at its offset into its step, placed into this trial's same step (the audited run is a
    run of its own: its reads fall at the same places in a step)."""
    if not isinstance(audit, dict):
        return np.zeros(0), []
    starts, sites = audit.get("step_starts_ms") or [], audit.get("sites") or []
    by_index = {site.get("index", i): site for i, site in enumerate(sites) if isinstance(site, dict)}
    times, texts = [], []
    for event in audit.get("events") or []:
        try:
            step, at = int(event["step"]), float(event["t_ms"])
        except (KeyError, TypeError, ValueError):
            continue
        if not (0 <= step < min(len(starts), len(trial.host_start))):
            continue
        site = by_index.get(event.get("site"), {})
        times.append(trial.host_start[step] + at - float(starts[step]))
        code = html.escape(str(site.get("code", ""))[:120])
        texts.append(f"{trial.name} · sync in step {step}: {site.get('kind', '?')} at "
                     f"{site.get('file', '?')}:{site.get('line', '?')}<br>{code}")
    return np.asarray(times, dtype=np.float64), texts


# ------------------------------------------------------------------------------------------------ window and means

@dataclass
class Means:
    """Mean host wait, device gap and idle inside a step per decode step, in µs, and which steps they cover."""

    wait_us: float | None
    gap_us: float | None
    first: int | None
    last: int | None
    inside_us: float | None = None


NO_MEANS = Means(None, None, None, None)


def first_view(trials: Sequence[LoopTrial]) -> tuple[float, float] | None:
    """The first view's x range: about WINDOW_STEPS decode steps around the middle of the shorter trial, between
    MIN_WINDOW_STEPS of the slower loop and MAX_WINDOW_STEPS of the faster one where both can hold."""
    periods = [p for t in trials if (p := t.period_ms())]
    if not periods:
        return None
    slow, fast = max(periods), min(periods)
    width = WINDOW_STEPS * statistics.geometric_mean([slow, fast])
    width = max(min(width, MAX_WINDOW_STEPS * fast), MIN_WINDOW_STEPS * slow)
    center = min(float(t.step_times()[t.kept // 2]) for t in trials if t.kept > 2)
    return center - width / 2, center + width / 2


def window_means(trial: LoopTrial, view: tuple[float, float] | None) -> Means:
    """Means over the decode steps that begin inside `view` (all of them with view None)."""
    times = trial.step_times()
    steps = np.arange(1, trial.kept)
    if view is not None:
        steps = steps[(times[1:] >= view[0]) & (times[1:] < view[1])]
    first, last = (int(steps[0]), int(steps[-1])) if len(steps) else (None, None)
    if not trial.complete:
        return Means(None, _mean_us(trial.recorded_gaps) if view is None else None, first, last)
    waits, gaps, launches = trial.waits_ms(), trial.gaps_ms(), trial.idle_inside_ms()
    return Means(_mean_us(waits[steps]), _mean_us(gaps[steps]) if gaps is not None else None, first, last,
                 _mean_us(launches[steps]) if launches is not None else None)


def _mean_us(values: np.ndarray) -> float | None:
    return float(np.mean(values)) * 1000 if len(values) else None


def lanes_means(report: dict[str, Any]) -> dict[str, dict[str, Means]]:
    """Per loop, the means the chart states: over the first view ("window") and the whole trial ("trial")."""
    trials = loop_trials(report)
    view = first_view(trials)
    return {t.name: {"window": window_means(t, view) if view else NO_MEANS, "trial": window_means(t, None)}
            for t in trials}


# ------------------------------------------------------------------------------------------------ the figure

def lanes_note(report: dict[str, Any]) -> str | None:
    """One line for the page when the report cannot give the whole timeline; None when it can (or has no loops)."""
    trials = loop_trials(report)
    return OLD_REPORT_NOTE if any(not t.complete for t in trials) else None


def lanes_figure(report: dict[str, Any]) -> go.Figure:
    """Naive above pipelined: a host lane and a device lane per GPU each, over the representative trials."""
    trials = loop_trials(report)
    if not trials:
        return charts.empty_figure(TITLE, EMPTY_MESSAGE)
    view = first_view(trials)
    data: list[Spec] = []
    shapes: list[Spec] = []
    ticks: list[tuple[float, str]] = []
    y = 0.0
    for trial in trials:
        lanes = _lane_labels(trial)
        traces, marks = _loop_traces(trial, y)
        data += traces
        ticks += [(y + i, f'<span style="color:{color(trial.name)}">{trial.name} · {label}</span>')
                  for i, label in enumerate(lanes)]
        shapes += [_band(trial.name, y, y + len(lanes) - 1), *marks]
        y += len(lanes) - 1 + LOOP_SPACING
    bottom = ticks[-1][0]
    block = _stats_block(trials, view)
    top = TITLE_PX + TOP_LINE_PX * (block.count("<br>") + 1) + 8
    # The lane labels' margin is set here (automargin only ever widens it), so the statistics block can start at
    # the figure's left edge rather than the plot's: on a phone the plot is too narrow for it.
    left = LABEL_PAD_PX + LABEL_CHAR_PX * max(len(_plain(text)) for _, text in ticks)
    layout = {
        "showlegend": False, "shapes": shapes, "hovermode": "closest",
        "annotations": [{"text": block, "xref": "paper", "yref": "paper", "x": 0, "y": 1, "xanchor": "left",
                         "yanchor": "bottom", "xshift": 4 - left, "yshift": 6, "align": "left", "showarrow": False,
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
            "fillcolor": color(name), "opacity": 0.07, "line": {"width": 0}, "layer": "below"}


def _loop_traces(trial: LoopTrial, y: float) -> tuple[list[Spec], list[Spec]]:
    """The loop's bars (traces) and ticks (shapes), its host lane at `y` and its device lanes below."""
    name, hue = trial.name, color(trial.name)
    known = _ticks(trial.known, y, f"{name} · tokens known", KNOWN_COLOR)
    if not trial.complete:
        return [], [_ticks(trial.queued, y, f"{name} · step queued", hue), known] if len(trial.queued) else [known]
    traces = [_bars(trial.host_start, trial.queued, y, f"{name} · host queues a step", {"fillcolor": hue}),
              _bars(trial.wait_start, trial.known, y, f"{name} · host blocked waiting", WAIT_STYLE)]
    for offset, lane in enumerate(trial.devices, start=1):
        traces += _device_traces(trial, lane, y + offset)
    if len(trial.syncs[0]):
        traces.append({"type": "scatter", "mode": "markers", "x": trial.syncs[0].astype(COORDINATE),
                       "y": np.full(len(trial.syncs[0]), y - BAR_HALF, dtype=COORDINATE),
                       "marker": {"symbol": "triangle-down", "size": 9, "color": SYNC_COLOR,
                                  "line": {"width": 1, "color": "#ffffff"}},
                       "name": f"{name} · sync (audit)", "text": trial.syncs[1], "hoverinfo": "text"})
    return traces, [known]


def _device_traces(trial: LoopTrial, lane: DeviceLane, y: float) -> list[Spec]:
    """A device lane: each step's span solid; where the kernel trial gave the step's kernels, those solid and the
    rest of the span pale (the device waiting for launches inside the step); the gaps between spans hatched."""
    name, hue = trial.name, color(trial.name)
    if trial.cpu:
        return [_bars(lane.starts, lane.ends, y, f"{name} · host computes (device = host)", {"fillcolor": hue}),
                _bars(*_gaps(lane), y, f"{name} · {lane.label} idle", IDLE_STYLE)]
    traced = np.zeros(len(lane.starts), dtype=bool)
    if lane is trial.gap_source:
        traced[[step for step in trial.kernels if step < len(traced)]] = True
    traces = [_bars(lane.starts[~traced], lane.ends[~traced], y, f"{name} · {lane.label} busy", {"fillcolor": hue}),
              _bars(*_gaps(lane), y, f"{name} · {lane.label} idle", IDLE_STYLE)]
    if traced.any():
        traces.append(_bars(lane.starts[traced], lane.ends[traced], y,
                            f"{name} · {lane.label} waiting inside the step (kernel trial)", IDLE_INSIDE_STYLE))
        starts = np.concatenate([trial.kernels[s][0] for s in sorted(trial.kernels)])
        ends = np.concatenate([trial.kernels[s][1] for s in sorted(trial.kernels)])
        traces.append(_bars(starts, ends, y, f"{name} · {lane.label} kernels (kernel trial)", {"fillcolor": hue}))
    inside = trial.idle_inside_ms() if lane is trial.gap_source else None
    if inside is not None:
        waiting = np.zeros(len(lane.starts), dtype=bool)
        waiting[:len(inside)] = inside > MIN_GAP_MS
        waiting &= ~traced
        kept = np.flatnonzero(waiting)
        traces.append(_bars(lane.starts[kept], lane.starts[kept] + inside[kept], y,
                            f"{name} · {lane.label} waiting inside the step", LAUNCH_STYLE))
    return traces


def _gaps(lane: DeviceLane) -> tuple[np.ndarray, np.ndarray]:
    """The idle gaps between consecutive spans of a lane, as (starts, ends)."""
    ends, starts = lane.ends[:-1], lane.starts[1:]
    idle = starts - ends > MIN_GAP_MS
    return ends[idle], starts[idle]


def _bars(starts: np.ndarray, ends: np.ndarray, y: float, name: str, style: Spec) -> Spec:
    """Rectangles as one filled polygon: a comb whose teeth are the bars, joined along their bottom edge (zero
    area), so plotly.js draws one SVG path; with None between rectangles it draws one per rectangle and a
    4096-step trial takes seconds to render. Arrays go to the page as base64, without per-number copying."""
    xs = np.column_stack([starts, starts, ends, ends]).astype(COORDINATE)
    teeth = np.array([y + BAR_HALF, y - BAR_HALF, y - BAR_HALF, y + BAR_HALF], dtype=COORDINATE)
    return {"type": "scatter", "mode": "lines", "x": xs.ravel(), "y": np.tile(teeth, len(starts)), "fill": "toself",
            "line": {"width": 0}, "name": name, "hoveron": "fills", "hoverinfo": "name", **style}


def _ticks(times: np.ndarray, y: float, name: str, tick_color: str) -> Spec:
    """A vertical tick across the lane at each time: one path shape of moves and lines, a single SVG path (see
    _bars). A little transparent, so a zoomed-out trial's ticks do not hide the lane under them."""
    low, high = y - BAR_HALF, y + BAR_HALF
    path = "".join(map(f"M{{:.4f}},{low:g}V{high:g}".format, times.tolist()))
    return {"type": "path", "xref": "x", "yref": "y", "path": path, "name": name,
            "line": {"color": tick_color, "width": 1.5}, "opacity": 0.75, "layer": "above"}


# ------------------------------------------------------------------------------------------------ statistics block

def _stats_block(trials: Sequence[LoopTrial], view: tuple[float, float] | None) -> str:
    """A small monospace table: per loop, mean host wait and device gap per decode step over the first view and
    over the whole trial, and the decode steps each covers; then what the marks mean."""
    lines = []
    if any(t.cpu and t.complete for t in trials):
        lines.append(CPU_LINE)
    errors = [t.sync_error_ms for t in trials if t.sync_error_ms is not None]
    if errors:
        lines.append(f"GPU spans on the host clock: ±{max(errors) * 1000:,.1f} µs")
    lines.append(f"{'µs per decode step':<21}{'window':>9}{'trial':>9}".replace(" ", NBSP))
    for trial in trials:
        window = window_means(trial, view) if view else NO_MEANS
        whole = window_means(trial, None)
        label = f'<span style="color:{color(trial.name)}"><b>{trial.name}</b></span>'
        lines += [_row(trial.name, "host wait", _us(window.wait_us), _us(whole.wait_us), label),
                  _row("", "device gap", _us(window.gap_us), _us(whole.gap_us)),
                  *([_row("", "idle inside", _us(window.inside_us), _us(whole.inside_us))]
                    if whole.inside_us is not None else []),
                  _row("", "steps", _steps(window), _steps(whole))]
    if any(t.complete for t in trials):
        lines += SPAN_KEY
    if any(t.complete and not t.cpu for t in trials):
        lines += LAUNCH_KEY
    traced = sorted({step for t in trials for step in t.kernels})
    if traced:
        lines += [line.format(first=traced[0], last=traced[-1]) for line in KERNEL_KEY]
    if any(len(t.syncs[0]) for t in trials):
        lines += SYNC_KEY
    lines.append(KNOWN_KEY)
    if not all(t.complete for t in trials):
        lines.append(QUEUED_KEY)
    return "<br>".join(_indent_kept(line) for line in lines)


def _indent_kept(line: str) -> str:
    """A key's continuation line keeps its indent: SVG text would collapse leading spaces."""
    stripped = line.lstrip(" ")
    return NBSP * (len(line) - len(stripped)) + stripped


def _row(loop: str, metric: str, window: str, trial: str, label: str | None = None) -> str:
    """One line of the table; spaces made non-breaking, as SVG text would collapse them."""
    text = f"{loop:<10}{metric:<11}{window:>9}{trial:>9}".replace(" ", NBSP)
    return text if label is None else label + text[len(loop):]


def _us(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f}"


def _steps(means: Means) -> str:
    return "–" if means.first is None else f"{means.first}-{means.last}"


def prebuild() -> None:
    """Build one figure, so plotly's lazy imports do not land in the middle of a run."""
    timings = {"host_known_ms": [1.0, 2.0, 3.0], "host_queued_ms": [0.5, 1.5, 2.5], "tokens_per_s": 1.0}
    lanes_figure({"runs": [{"contestant": "naive", "timings": timings}]}).to_json()
