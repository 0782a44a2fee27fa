"""How well device spans land on the host clock: the real error of core.measure.step_times's reference-event alignment.

    python benchmarks/clock_alignment.py --out clock_alignment.json            # 10 s drift run
    python benchmarks/clock_alignment.py --seconds 3 --events 200 --out a.json

core.measure.step_times puts a CUDA event on the host clock (perf_counter) as: the reference event's host time (the
midpoint of [perf_counter before its record, perf_counter after its synchronize], taken with the device idle) plus
`reference.elapsed_time(event)`. This script measures, with StepClock's own reference:
  reference  the width of that interval over many tries (half of it is the `clock_sync_error_ms` a run reports);
  busy       events between GPU sleeps of known length on one stream, queued ahead; the host spins on each event's
             query() and notes when it first sees it complete. seen - predicted = the host's observation latency
             (>= 0, a few µs) + the alignment's error: a negative value can only be alignment error, and the
             spread bounds it;
  drift      over --seconds, an event recorded on an idle device now and then, bracketed by perf_counter reads
             (before the record, after it is seen complete) against the time predicted from the one reference
             taken at the start: the slope is the drift between the GPU's and the host's clocks (µs per s); then
             the same events against the two-reference prediction (start and end) that every run uses.
  kineto     (also on the CPU) the offset CLOCK_REALTIME - perf_counter that places torch.profiler's trace on the
             report's axis (core.measure.profiling): its bracket and its drift over the same run.
Writes JSON to --out and prints a one-screen summary. Without CUDA the GPU parts are skipped with one line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from core.measure.profiling import realtime_minus_perf_counter_ns
from core.measure.stats import percentile
from core.measure.step_times import StepClock


def describe(values_us: list[float]) -> dict[str, float]:
    return {"n": len(values_us), "min_us": min(values_us), "median_us": statistics.median(values_us),
            "p95_us": percentile(values_us, 95), "max_us": max(values_us)}


def reference_widths(device: torch.device, tries: int) -> dict[str, float]:
    """Half-widths of StepClock's reference interval (µs): the bound each run reports."""
    clock = StepClock(device, 1)
    halves = []
    for _ in range(tries):
        clock.start()
        halves.append(clock.reference_error_s * 1e6)
    return describe(halves)


def sleep_cycles_per_us(device: torch.device) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(2_000_000)
    end.record()
    end.synchronize()
    return 2_000_000 / (start.elapsed_time(end) * 1000)


def seen_when(event: torch.cuda.Event) -> float:
    """perf_counter when the host first sees `event` complete, spinning on query()."""
    while not event.query():
        pass
    return time.perf_counter()


def busy_stream_errors(device: torch.device, events: int, sleep_us: float) -> dict[str, Any]:
    """seen - predicted (µs) for events queued between GPU sleeps, read back in order by a spinning host."""
    per_us = sleep_cycles_per_us(device)
    cycles = int(sleep_us * per_us)
    clock = StepClock(device, 1)
    clock.start()
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(events)]
    torch.cuda._sleep(int(20_000 * per_us))  # 20 ms: the host queues every mark before the first completes
    for mark in marks:
        torch.cuda._sleep(cycles)
        mark.record()
    seen = [seen_when(mark) for mark in marks]
    predicted = [clock.reference_host_s + clock.reference.elapsed_time(mark) / 1000 for mark in marks]
    errors = [(s - p) * 1e6 for s, p in zip(seen, predicted)]
    return {"sleep_us": sleep_us, "seen_minus_predicted": describe(errors),
            "reference_half_width_us": clock.reference_error_s * 1e6}


def drift(device: torch.device | None, seconds: float, period_s: float) -> dict[str, Any]:
    """Idle-device events against the start's reference, and the Kineto offset, sampled over `seconds`."""
    clock = StepClock(device, 1) if device is not None else None
    if clock is not None:
        clock.start()
    kineto_start = realtime_minus_perf_counter_ns()
    rows, marks = [], []
    began = time.perf_counter()
    while time.perf_counter() - began < seconds:
        row: dict[str, float] = {"t_s": time.perf_counter() - began}
        if clock is not None:
            mark = torch.cuda.Event(enable_timing=True)
            before = time.perf_counter()
            mark.record()
            after = seen_when(mark)
            predicted = clock.reference_host_s + clock.reference.elapsed_time(mark) / 1000
            row.update(before_minus_predicted_us=(before - predicted) * 1e6,
                       seen_minus_predicted_us=(after - predicted) * 1e6)
            marks.append((mark, after))
        kineto = realtime_minus_perf_counter_ns()
        row["kineto_offset_change_us"] = (kineto["offset_ns"] - kineto_start["offset_ns"]) / 1000
        rows.append(row)
        time.sleep(period_s)
    if clock is not None:
        _add_corrected(clock, rows, marks)
    return {"seconds": seconds, "samples": rows, "kineto_bracket_us": kineto_start["error_ns"] / 1000,
            **_slopes(rows), **_corrected_summary(rows)}


def _add_corrected(clock: StepClock, rows: list[dict[str, float]], marks: list[tuple[Any, float]]) -> None:
    """seen - predicted once StepClock's end reference corrects the drift, as every run's device spans are."""
    clock.stop()
    scale = clock.host_per_device_ms()
    for row, (mark, seen) in zip(rows, marks):
        predicted = clock.reference_host_s + scale * clock.reference.elapsed_time(mark) / 1000
        row["seen_minus_corrected_us"] = (seen - predicted) * 1e6


def _corrected_summary(rows: list[dict[str, float]]) -> dict[str, Any]:
    values = [r["seen_minus_corrected_us"] for r in rows if "seen_minus_corrected_us" in r]
    if not values:
        return {}
    return {"seen_minus_corrected_us": {"min": min(values), "median": statistics.median(values),
                                        "p95": percentile(values, 95), "max": max(values)}}


def _slopes(rows: list[dict[str, float]]) -> dict[str, float | None]:
    """Least-squares slopes (µs per s) of the errors against time: the drift."""
    out: dict[str, float | None] = {}
    times = [r["t_s"] for r in rows]
    for key in ("seen_minus_predicted_us", "kineto_offset_change_us"):
        values = [r[key] for r in rows if key in r]
        out[key.replace("_us", "_drift_us_per_s")] = (statistics.linear_regression(times, values).slope
                                                       if len(values) > 2 else None)
    return out


def summary_lines(result: dict[str, Any]) -> list[str]:
    lines = [f"clock alignment on {result['device']}"]
    if "reference" in result:
        ref = result["reference"]
        lines.append(f"reference interval half-width (the bound a run reports): median {ref['median_us']:.2f} us, "
                     f"p95 {ref['p95_us']:.2f}, max {ref['max_us']:.2f}")
        for busy in result["busy"]:
            e = busy["seen_minus_predicted"]
            lines.append(f"busy stream, marks every {busy['sleep_us']:.0f} us: seen - predicted min {e['min_us']:.2f} "
                         f"median {e['median_us']:.2f} p95 {e['p95_us']:.2f} max {e['max_us']:.2f} us "
                         f"(n={e['n']}; negative = alignment error)")
        d = result["drift"]
        last = d["samples"][-1]
        lines.append(f"drift over {d['seconds']:.0f} s: {_signed(d['seen_minus_predicted_drift_us_per_s'])} us/s; "
                     f"at the end seen - predicted {last['seen_minus_predicted_us']:.2f} us, "
                     f"record - predicted {last['before_minus_predicted_us']:.2f} us")
        c = d.get("seen_minus_corrected_us")
        if c:
            lines.append(f"with the end reference's drift correction (as runs use): seen - predicted "
                         f"min {c['min']:.2f} "
                         f"median {c['median']:.2f} p95 {c['p95']:.2f} max {c['max']:.2f} us")
    else:
        lines.append(result["skipped"])
    d = result["drift"]
    lines.append(f"kineto (CLOCK_REALTIME - perf_counter) bracket {d['kineto_bracket_us']:.3f} us, drift "
                 f"{_signed(d['kineto_offset_change_drift_us_per_s'])} us/s over {d['seconds']:.0f} s")
    return lines


def _signed(value: float | None) -> str:
    return "n/a (too few samples)" if value is None else f"{value:+.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="JSON result file")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the drift run")
    parser.add_argument("--events", type=int, default=500, help="marks per busy-stream run")
    parser.add_argument("--tries", type=int, default=500, help="reference intervals timed")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"torch": torch.__version__}
    if torch.cuda.is_available():
        device = torch.device("cuda")
        torch.cuda.init()
        result["device"] = torch.cuda.get_device_name(device)
        result["reference"] = reference_widths(device, args.tries)
        result["busy"] = [busy_stream_errors(device, args.events, sleep_us) for sleep_us in (20.0, 100.0, 1000.0)]
        result["drift"] = drift(device, args.seconds, 0.05)
    else:
        result["device"] = "cpu"
        result["skipped"] = "no CUDA device: the GPU parts (reference, busy stream, GPU drift) are skipped"
        result["drift"] = drift(None, args.seconds, 0.05)
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    print("\n".join(summary_lines(result)))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
