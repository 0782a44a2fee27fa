"""The timeline's reading of a report: each loop's representative trial (dashboard.views.timeline draws it) and the
means per decode step that the timeline states, over its first view and over the whole trial.

A trial reads the per-step timestamps of a run's timings (dashboard.views.timeline's docstring lists them); a report
written before those were recorded gives what it has, and its trial is not `complete`.
"""

from __future__ import annotations

import html
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.documents.upgrades import upgrade_report
from core.measure.waits import step_work_ms
from core.report.explain import report_device_type
from core.request.options import LOOPS, NO_CHECK
from core.text import SENTENCE_FIELD_CHARS, clip
from dashboard.views import charts, step_charts

# The most reads of a replayed report's audited run drawn on a trial (each with its hover): the histograms' bound.
MAX_SYNC_MARKS = charts.MAX_POINTS
WINDOW_STEPS = 15              # decode steps in the first view, for a loop of the middle speed ...
MIN_WINDOW_STEPS, MAX_WINDOW_STEPS = 10, 20   # ... and the bounds for the slower and the faster loop


# ------------------------------------------------------------------------------------------------ one loop's trial

@dataclass
class DeviceLane:
    label: str                      # "GPU", "GPU 0"
    starts: np.ndarray              # per computed step, ms
    ends: np.ndarray


def _empty() -> np.ndarray:
    return np.zeros(0)


@dataclass
class LoopTrial:
    """One loop's representative trial as the chart needs it; `complete` is False for reports without (usable)
    host/device timestamps; `cpu` when the host is the device (no device lanes, no device gap)."""

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
    # The kernel measurement's merged kernel intervals of some steps (core.measure.kernel_measurement), by step:
    # (starts, ends) in ms since that step's start, scaled onto this trial's span of the step.
    kernels: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    # The sync audit's reads (core.audit.sync), placed where they fell in their step: times, hover texts.
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
        the kernel measurement's kernel time per step or the quickest loop's span), the device waiting for the host to
        launch inside the step, which the gap between steps does not show."""
        lane = self.gap_source
        if lane is None or self.cpu or not self.complete or self.work_ms is None:
            return None
        kept = self.kept
        return np.clip(lane.ends[:kept] - lane.starts[:kept] - self.work_ms, 0.0, None)

    def gaps_ms(self) -> np.ndarray | None:
        """Per kept step, the device's idle time before it (NaN for step 0): the summary's gpu_gap_ms; None on the
        CPU, where the host is the device."""
        lane = self.gap_source
        if lane is None or self.cpu:
            return None
        gaps = np.maximum(0.0, lane.starts[1:self.kept] - lane.ends[:self.kept - 1])
        return np.concatenate([[np.nan], gaps])


def loop_trial(run: dict[str, Any], cpu: bool | None = None) -> LoopTrial:
    """One run's trial; `cpu` from the report's device where it names one, else from the run's own clock."""
    timings = run["timings"]
    known, queued = _array(timings.get("host_known_ms")), _array(timings.get("host_queued_ms"))
    on_cpu = timings.get("clock") != "cuda-events" if cpu is None else cpu
    old = LoopTrial(run["contestant"], False, on_cpu, queued, known,
                    recorded_gaps=_array(timings.get("gpu_gap_ms")))
    try:
        return _complete_trial(run["contestant"], timings, known, queued, cpu) or old
    except (TypeError, ValueError, KeyError):  # malformed timestamps: draw what the old fields give
        return old


def report_on_cpu(report: dict[str, Any]) -> bool | None:
    """True when the report says it ran on the CPU, False on a GPU, None when it does not say (a live run's runs)."""
    device = report_device_type(report)
    return None if device is None else device == "cpu"


def _complete_trial(name: str, timings: dict[str, Any], known: np.ndarray, queued: np.ndarray,
                    cpu: bool | None) -> LoopTrial | None:
    if not all(key in timings for key in ("host_step_start_ms", "host_wait_start_ms", "device_start_ms")):
        return None
    computed = len(queued)
    host_start, wait_start = _array(timings["host_step_start_ms"]), _array(timings["host_wait_start_ms"])
    device_start, device_end = _array(timings["device_start_ms"]), _array(timings.get("device_end_ms"))
    if len(host_start) != computed or len(wait_start) != len(known) or len(known) > computed \
            or len(device_start) not in (0, computed) or len(device_end) != len(device_start):
        return None
    on_cpu = not len(device_start) if cpu is None else cpu
    if not on_cpu and not len(device_start):
        return None
    trial = LoopTrial(name, True, on_cpu, queued, known, host_start=host_start, wait_start=wait_start,
                      sync_error_ms=None if on_cpu else timings.get("clock_sync_error_ms"))
    if trial.cpu:
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
    """The representative trial of each loop that has one, naive first, with its kernel measurement's kernels and its
    audit's reads where the report has them."""
    report = upgrade_report(report)
    trials = []
    cpu = report_on_cpu(report)
    loops = [[r for r in report["runs"] if r.get("contestant") == name] for name in (*LOOPS, NO_CHECK)]
    kernel_measurements = report.get("kernel_measurement", {})  # NotRequired: only where the measurement ran
    audits = report.get("sync_audit", {})
    for name in LOOPS:
        run = step_charts.representative_run(report, name)
        if run is not None and run["timings"].get("host_known_ms"):
            trial = loop_trial(run, cpu)
            measured = kernel_measurements.get(name)  # None: the measurement did not reach this loop
            busy = measured.get("kernel_busy_ms_per_step") if measured else None
            trial.work_ms = _work_ms([group for group in loops if group], busy)
            if trial.complete and not trial.cpu:
                trial.kernels = _kernels_onto(trial, measured)
            if trial.complete:
                trial.syncs = _syncs_onto(trial, audits.get(name))
            trials.append(trial)
    return trials


def _work_ms(loops: list[list[dict[str, Any]]], busy: Any) -> float | None:
    try:
        return step_work_ms(loops, busy if isinstance(busy, int | float) else None)[0]
    except (TypeError, ValueError, KeyError, IndexError):  # spans of an unexpected shape: no idle inside is shown
        return None


def _kernels_onto(trial: LoopTrial, measured: Any) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """The kernel measurement's kernel intervals of each step it kept, scaled from its span onto this trial's span."""
    lane = trial.gap_source
    intervals = measured.get("intervals") if isinstance(measured, dict) else None
    steps = intervals.get("steps") if isinstance(intervals, dict) else None
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
        texts.append(f"{trial.name} · sync in step {step}: {_sync_site(site)}")
        if len(texts) == MAX_SYNC_MARKS:
            break
    return np.asarray(times, dtype=np.float64), texts


def _sync_site(site: dict[str, Any]) -> str:
    """A read's site as its hover says it: plotly renders hovers as HTML, so what came from the report is escaped,
    and clipped (a replayed report's fields can be of any size)."""
    limits = {"kind": 40, "file": SENTENCE_FIELD_CHARS, "code": SENTENCE_FIELD_CHARS}
    kind, file, code = (html.escape(clip(site.get(key, "?" if key != "code" else ""), limit))
                        for key, limit in limits.items())
    line = site.get("line") if isinstance(site.get("line"), int) else "?"
    return f"{kind} at {file}:{line}<br>{code}"


# ------------------------------------------------------------------------------------------------ window and means

@dataclass
class Means:
    """Mean host wait, device gap and idle inside a step per decode step, in µs, and which steps they cover."""

    wait_us: float | None
    gap_us: float | None
    first: int | None
    last: int | None
    inside_us: float | None = None


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
        gap = _mean_us(trial.recorded_gaps) if view is None and not trial.cpu else None
        return Means(None, gap, first, last)
    waits, gaps, launches = trial.waits_ms(), trial.gaps_ms(), trial.idle_inside_ms()
    return Means(_mean_us(waits[steps]), _mean_us(gaps[steps]) if gaps is not None else None, first, last,
                 _mean_us(launches[steps]) if launches is not None else None)


def _mean_us(values: np.ndarray) -> float | None:
    return float(np.mean(values)) * 1000 if len(values) else None

