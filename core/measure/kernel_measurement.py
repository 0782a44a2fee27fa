"""The kernel measurement: one more run of a contestant under CUPTI (torch.profiler with CUDA activity only), read per
decode step on the GPU's own terms: how long kernels ran (kernel-busy), how long the device sat inside a step's span
with nothing running (waiting for the host to launch), and how long it idled between steps.

Why a run of its own: a step's two CUDA events (core.measure.step_times) bracket it, so a span counts as busy the
time the device spends waiting for each launch inside the step; in eager mode that is most of it (docs/NUMBERS.md,
"Where the step waits"). Kernel tracing costs the host time, and its post-processing seconds (docs/MEASUREMENT.md,
"The kernel measurement"), so it is never a timed trial; the measurement's own slowdown is reported with it.

The kernels' times come on the profiler's clock; the steps' spans on the host's (perf_counter). The offset between
the two is read at the end of the measured run, for the profiler's realtime clock and for the monotonic one, and the one
under which the kernels fall inside the steps' spans is taken (its coverage is reported).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

INTERVAL_STEPS = 40  # decode steps whose kernel intervals the report keeps: those the timeline shows first
TOP_KERNELS = 12  # the costliest kernels of a decode step the report names
NAME_CHARS = 160  # of a kernel's name (inductor's names list every op it fused)


def kernel_measurement(run_once: Callable[[], dict[str, Any]], timed_step_ms: float | None = None,
                       center_step: int | None = None) -> dict[str, Any]:
    """Run `run_once` (one run of a contestant, returning its outcome: `timings` and `started_s`) under CUPTI and
    read its kernels per decode step; `timed_step_ms` is the timed trials' median step, for the measurement's slowdown;
    `center_step` the step the kept kernel intervals centre on (default: the middle one)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        outcome = run_once()
    began = time.perf_counter()
    named = device_kernels_ns(profiler)
    kernels = sorted((start, end) for start, end, _ in named)
    clocks = {"realtime": time.time_ns() - time.perf_counter_ns(), "monotonic": time.monotonic_ns()
              - time.perf_counter_ns()}
    result = read_kernels(kernels, outcome["timings"], outcome["started_s"], clocks, center_step)
    if result.get("decode_steps"):
        result.update(kinds_per_step(named, outcome["timings"], outcome["started_s"], clocks[result["clock"]]))
    profiled_step = outcome["timings"].get("ms_per_token_p50")
    result.update(profiled_step_ms=profiled_step, timed_step_ms=timed_step_ms,
                  slowdown=profiled_step / timed_step_ms if profiled_step and timed_step_ms else None,
                  post_processing_s=round(time.perf_counter() - began, 3))
    return result


def device_intervals_ns(profiler: Any) -> list[tuple[int, int]]:
    """(start, end) in ns on the profiler's clock of every kernel, memcpy and memset the profiler saw."""
    return sorted((start, end) for start, end, _ in device_kernels_ns(profiler))


def device_kernels_ns(profiler: Any) -> list[tuple[int, int, str]]:
    """(start, end, name), ns on the profiler's clock, of every kernel, memcpy and memset the profiler saw."""
    cuda = torch.autograd.DeviceType.CUDA
    return [(event.start_ns(), event.end_ns(), event.name()) for event in profiler.profiler.kineto_results.events()
            if event.device_type() == cuda and event.end_ns() > event.start_ns()]


def kinds_per_step(named_ns: Sequence[tuple[int, int, str]], timings: dict[str, Any], started_s: float,
                   offset_ns: int, top: int = TOP_KERNELS) -> dict[str, list[dict[str, Any]]]:
    """Kernel time per decode step by kind (core.measure.profiling.kernel_kind) and of the `top` costliest kernels by
    name: each kernel that starts inside a decode step's span (steps 1 on, as read_kernels counts them), its own time
    summed and divided by the steps, costliest first. The steps' gaps between kernels are read_kernels'
    `idle_inside_ms_per_step`."""
    from core.measure.profiling import kernel_kind

    starts, ends = timings.get("device_start_ms") or [], timings.get("device_end_ms") or []
    kept = min(int(timings.get("kept_steps") or 0), len(starts))
    spans = list(zip(starts[1:kept], ends[1:kept]))
    if not spans:
        return {"kinds": [], "top_kernels": []}
    base_ns = started_s * 1e9 + offset_ns
    by_name: dict[str, list[float]] = {}
    for start_ns, end_ns, name in named_ns:
        if _inside((start_ns - base_ns) / 1e6, spans):
            entry = by_name.setdefault(name, [0, 0.0])
            entry[0] += 1
            entry[1] += (end_ns - start_ns) / 1e6
    by_kind: dict[str, list[float]] = {}
    for name, (calls, ms) in by_name.items():
        entry = by_kind.setdefault(kernel_kind(name), [0, 0.0])
        entry[0] += calls
        entry[1] += ms
    steps = len(spans)
    names = sorted(by_name.items(), key=lambda item: -item[1][1])[:top]
    return {"kinds": [{"kind": kind, "ms_per_step": round(ms / steps, 5), "kernels_per_step": round(calls / steps, 2)}
                      for kind, (calls, ms) in sorted(by_kind.items(), key=lambda item: -item[1][1])],
            "top_kernels": [{"name": name[:NAME_CHARS], "kind": kernel_kind(name),
                             "ms_per_step": round(ms / steps, 5), "calls_per_step": round(calls / steps, 2)}
                            for name, (calls, ms) in names]}


def _inside(moment: float, spans: Sequence[tuple[float, float]]) -> bool:
    """Whether `moment` lies in one of the sorted, disjoint `spans`."""
    import bisect

    at = bisect.bisect_right(spans, (moment, float("inf"))) - 1
    return at >= 0 and spans[at][0] <= moment <= spans[at][1]


def read_kernels(kernels_ns: Sequence[tuple[int, int]], timings: dict[str, Any], started_s: float,
                 clocks: dict[str, int], center_step: int | None = None) -> dict[str, Any]:
    """Per decode step kernel-busy, idle inside and idle between steps, in ms, from device intervals (ns on the
    profiler's clock) and the run's timings (device spans in ms since `started_s`, perf_counter). `clocks`: for each
    clock the profiler may stamp on, that clock minus perf_counter, in ns."""
    starts, ends = timings.get("device_start_ms") or [], timings.get("device_end_ms") or []
    kept = int(timings.get("kept_steps") or 0)
    fits = {name: on_run_clock(kernels_ns, offset, started_s) for name, offset in clocks.items()}
    if not starts:  # generate(): no step spans, only its kernels over the whole call
        clock, kernels = next(iter(fits.items()))
        return {"clock": clock, "kernels": len(kernels), **_whole_run(kernels)}
    coverage = {name: _share_inside(kernels, starts[:kept], ends[:kept]) for name, kernels in fits.items()}
    clock = max(coverage, key=coverage.get)
    kernels = merged_intervals(fits[clock])
    steps = range(1, min(kept, len(starts)))
    busy, inside, gaps, counts, summed = [], [], [], [], []
    separate = sorted(fits[clock])
    for step in steps:
        span = ends[step] - starts[step]
        ran = clipped_intervals(kernels, starts[step], ends[step])
        busy.append(sum(b - a for a, b in ran))
        summed.append(sum(b - a for a, b in clipped_intervals(separate, starts[step], ends[step])))
        inside.append(max(0.0, span - busy[-1]))
        gaps.append(max(0.0, starts[step] - ends[step - 1]))
        counts.append(len(ran))
    device_time = sum(ends[s] - starts[s] for s in steps) + sum(gaps)
    return {
        "clock": clock, "alignment": round(coverage[clock], 4), "decode_steps": len(busy),
        # of the kernel measurement's own device time (its host is slowed by the tracing: the summary relates the
        # kernel time per step to the timed trials' steps instead)
        "kernel_busy_fraction": sum(busy) / device_time if device_time > 0 else None,
        # every kernel's own time summed (kernels side by side on two streams count twice): the profiler's kernel share
        "kernel_time_fraction": sum(summed) / device_time if device_time > 0 else None,
        "kernel_busy_ms_per_step": _mean(busy), "kernel_busy_ms": sum(b - a for a, b in kernels),
        "device_span_ms": kernels[-1][1] - kernels[0][0] if kernels else 0.0,  # first kernel's start to last's end
        "idle_inside_ms_per_step": _mean(inside),
        "gap_ms_per_step": _mean(gaps), "kernel_runs_per_step": statistics.median(counts) if counts else None,
        "per_step": {"busy_ms": _rounded(busy), "idle_inside_ms": _rounded(inside), "gap_ms": _rounded(gaps)},
        "intervals": _window(kernels, starts, ends, kept, kept // 2 if center_step is None else center_step),
    }


def on_run_clock(kernels_ns: Sequence[tuple[int, int]], offset_ns: int,
                  started_s: float) -> list[tuple[float, float]]:
    """The intervals in ms since the run began, if the profiler's clock is perf_counter + `offset_ns`."""
    base_ns = started_s * 1e9 + offset_ns
    return [((a - base_ns) / 1e6, (b - base_ns) / 1e6) for a, b in kernels_ns]


def _share_inside(kernels: list[tuple[float, float]], starts: Sequence[float], ends: Sequence[float]) -> float:
    """The share of the kernels' time that lies inside the run's step spans."""
    total = sum(b - a for a, b in kernels)
    if total <= 0:
        return 0.0
    inside = sum(b - a for s, e in zip(starts, ends) for a, b in clipped_intervals(kernels, s, e))
    return inside / total


def merged_intervals(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping or touching intervals joined (kernels on several streams run side by side)."""
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def clipped_intervals(intervals: list[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    """The parts of sorted, merged `intervals` inside [start, end]."""
    import bisect

    first = max(0, bisect.bisect_left(intervals, (start, start)) - 1)
    out = []
    for a, b in intervals[first:]:
        if a >= end:
            break
        if b > start:
            out.append((max(a, start), min(b, end)))
    return out


def _whole_run(kernels: list[tuple[float, float]]) -> dict[str, Any]:
    merged = merged_intervals(kernels)
    if not merged:
        return {"kernel_busy_fraction": None}
    span, busy = merged[-1][1] - merged[0][0], sum(b - a for a, b in merged)
    return {"kernel_busy_fraction": busy / span if span > 0 else None, "kernel_busy_ms": busy}


def _window(kernels: list[tuple[float, float]], starts: Sequence[float], ends: Sequence[float],
            kept: int, center: int) -> dict[str, Any]:
    """The merged kernel intervals of INTERVAL_STEPS decode steps around `center`, each step's relative to its
    start, for the timeline to draw inside each step's span."""
    first = max(1, min(center - INTERVAL_STEPS // 2, kept - INTERVAL_STEPS))
    last = min(kept, first + INTERVAL_STEPS)
    steps = []
    for step in range(first, last):
        steps.append({"step": step, "span_ms": round(ends[step] - starts[step], 4),
                      "busy": [[round(a - starts[step], 4), round(b - starts[step], 4)]
                               for a, b in clipped_intervals(kernels, starts[step], ends[step])]})
    return {"first_step": first, "steps": steps}


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _rounded(values: list[float]) -> list[float]:
    return [round(v, 4) for v in values]
