"""A benchmark report as Chrome trace-event JSON: the file ui.perfetto.dev and chrome://tracing open.

One process per contestant; in each, a "runs" track (every warm-up and trial, placed at its `started_ms`), a
"host" track (each step's queuing, each wait for the device, an instant when each step's tokens became known) and
one track per device rank (each computed step's busy span, overshoot included, with the idle gap before it).
Times are microseconds since the run began, on the host clock (device spans are put on it by
core.measure.step_times's reference event). Reports written before these fields existed give what they hold (host spans
where present, runs laid end to end) and a note in the metadata saying so; a reader never gets an exception.

This module is torch-free: the dashboard server imports it.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from typing import Any

from core.documents.upgrades import upgrade_report

RUNS_TID, HOST_TID, SYNC_TID, DEVICE_TID = 0, 1, 2, 10  # device rank r is track DEVICE_TID + r
PROFILER_PID_BASE = 1000                   # torch.profiler's processes, when merged, count from here
OLD_REPORT_NOTE = ("this report predates the timeline fields (run start times, device spans on the host clock): "
                   "runs are laid end to end in the order they ran, and only host spans are drawn")

Event = dict[str, Any]


def chrome_trace(report: dict[str, Any]) -> dict[str, Any]:
    """The whole report as a trace-event JSON object (dict ready for json.dump); any report, old ones too
    (core.documents.upgrades.upgrade_report gives it today's names and sections)."""
    report = upgrade_report(report)
    contestants = _contestants(report)
    starts = _run_starts(report)
    events: list[Event] = []
    for pid, name in enumerate(contestants, start=1):
        runs = [(i, run) for i, run in enumerate(report["runs"]) if run.get("contestant") == name]
        warmup = report["warmup"].get(name)
        events.extend(_contestant_events(pid, name, runs, warmup, starts, report))
    return {"traceEvents": events, "displayTimeUnit": "ms", "metadata": _metadata(report, starts)}


def merge_profiler_trace(trace: dict[str, Any], profiler_trace: dict[str, Any], shift_us: float) -> None:
    """Add torch.profiler's events to `trace`, moved by `shift_us` onto its axis, under processes of their own."""
    pids: dict[Any, int] = {}
    for event in profiler_trace.get("traceEvents", []):
        if "ph" not in event:
            continue
        moved = dict(event)
        moved["pid"] = pids.setdefault(event.get("pid"), PROFILER_PID_BASE + len(pids))
        moved.setdefault("tid", 0)
        if moved["ph"] == "M":
            moved["ts"] = 0
            if moved.get("name") == "process_name":
                moved["args"] = {"name": f"torch.profiler: {event.get('args', {}).get('name', event.get('pid'))}"}
        else:
            moved["ts"] = float(event.get("ts", 0)) + shift_us
        trace["traceEvents"].append(moved)


# ---------------------------------------------------------------------------------------------- placement

def _contestants(report: dict[str, Any]) -> list[str]:
    named = list(report["request"].get("contestants", []))
    for run in report["runs"]:
        if run.get("contestant") not in named:
            named.append(run.get("contestant"))
    return named


def _run_starts(report: dict[str, Any]) -> dict[str, Any]:
    """ms since the run began for each warm-up and trial: as recorded, or laid end to end when not."""
    warmups, runs = report["warmup"], report["runs"]
    recorded = all("started_ms" in run for run in runs) and all("started_ms" in w for w in warmups.values())
    if recorded:
        return {"recorded": True, "warmup": {n: w["started_ms"] for n, w in warmups.items()},
                "runs": [run["started_ms"] for run in runs]}
    cursor, warmup_starts, run_starts = 0.0, {}, []
    for name, warmup in warmups.items():
        warmup_starts[name] = cursor
        cursor += _warmup_wall_ms(warmup)
    for run in runs:
        run_starts.append(cursor)
        cursor += float(run["timings"].get("total_ms") or 0.0)
    return {"recorded": False, "warmup": warmup_starts, "runs": run_starts}


def _warmup_wall_ms(warmup: dict[str, Any]) -> float:
    if "wall_ms" in warmup:
        return float(warmup["wall_ms"])
    return float(warmup.get("setup_ms") or 0.0) + float(warmup.get("total_ms") or 0.0)


# ------------------------------------------------------------------------------------------------- events

def _contestant_events(pid: int, name: str, runs: list[tuple[int, dict[str, Any]]], warmup: dict[str, Any] | None,
                       starts: dict[str, Any], report: dict[str, Any]) -> Iterable[Event]:
    ranks = _device_ranks(run for _, run in runs)
    cpu = not ranks
    yield _meta(pid, RUNS_TID, "process_name", {"name": name})
    yield _meta(pid, RUNS_TID, "process_sort_index", {"sort_index": pid})
    yield _meta(pid, RUNS_TID, "thread_name", {"name": "runs"})
    host_name = "host (CPU: the device is the host, its step spans are the compute)" if cpu else "host"
    yield _meta(pid, HOST_TID, "thread_name", {"name": host_name})
    for rank in ranks:
        label = f"device rank {rank}" if len(ranks) > 1 else "device"
        yield _meta(pid, DEVICE_TID + rank, "thread_name", {"name": label})
    for tid in (RUNS_TID, HOST_TID, *(DEVICE_TID + rank for rank in ranks)):
        yield _meta(pid, tid, "thread_sort_index", {"sort_index": tid})
    if warmup is not None and name in starts["warmup"]:
        yield _span(pid, RUNS_TID, "warm-up (untimed)", "run", starts["warmup"][name], _warmup_wall_ms(warmup),
                    {"setup_ms": warmup.get("setup_ms"), "compile_ms": warmup.get("compile_ms")})
    for index, run in runs:
        yield from _run_events(pid, run, starts["runs"][index])
    audit = report["sync_audit"].get(name) if "sync_audit" in report else None
    if isinstance(audit, dict):
        yield from _audit_events(pid, audit)


def _device_ranks(runs: Iterable[dict[str, Any]]) -> list[int]:
    ranks: set[int] = set()
    for run in runs:
        timings = run["timings"]
        spans = timings.get("rank_device_spans") or []
        if spans:  # under gloo on the CPU every rank has an entry, with no device spans in it
            ranks.update(int(entry["rank"]) for entry in spans if entry.get("device_start_ms"))
        elif timings.get("device_start_ms"):
            ranks.add(0)
    return sorted(ranks)


def _run_events(pid: int, run: dict[str, Any], start_ms: float) -> Iterable[Event]:
    timings = run["timings"]
    total = float(timings.get("total_ms") or 0.0)
    yield _span(pid, RUNS_TID, f"trial {run.get('trial')}", "run", start_ms, total,
                {"tokens_per_s": timings.get("tokens_per_s"), "kept_steps": timings.get("kept_steps"),
                 "computed_steps": timings.get("computed_steps"),
                 "clock_sync_error_ms": timings.get("clock_sync_error_ms"), "order": run.get("order")})
    yield from _host_events(pid, timings, start_ms)
    spans = timings.get("rank_device_spans") or []
    if not spans and timings.get("device_start_ms"):
        spans = [{"rank": 0, "device_start_ms": timings["device_start_ms"], "device_end_ms": timings["device_end_ms"]}]
    kept = int(timings.get("kept_steps") or 0)
    for entry in spans:
        yield from _device_events(pid, DEVICE_TID + int(entry["rank"]), entry, start_ms, kept)


def _host_events(pid: int, timings: dict[str, Any], start_ms: float) -> Iterable[Event]:
    queued = timings.get("host_queued_ms") or []
    step_starts = timings.get("host_step_start_ms") or []
    known = timings.get("host_known_ms") or []
    waits = timings.get("host_wait_start_ms") or []
    if not queued and not known:  # HF generate: one call, no steps to show
        yield _span(pid, HOST_TID, "generate()", "host.step", start_ms, float(timings.get("total_ms") or 0.0), {})
        return
    for step, end in enumerate(queued):
        begin = step_starts[step] if step < len(step_starts) else end  # old reports: the moment queuing ended
        yield _span(pid, HOST_TID, _step_name(step, "queue"), "host.step", start_ms + begin, end - begin,
                    {"step": step})
    for step, at in enumerate(known):
        if step < len(waits):
            yield _span(pid, HOST_TID, f"wait for step {step}", "host.wait", start_ms + waits[step],
                        at - waits[step], {"step": step})
        yield {"ph": "i", "s": "t", "name": f"tokens of step {step} known", "cat": "host.known", "pid": pid,
               "tid": HOST_TID, "ts": _us(start_ms + at), "args": {"step": step}}


def _audit_events(pid: int, audit: dict[str, Any]) -> Iterable[Event]:
    """The audited run (core.audit.sync) on the runs track, and an instant per read on a track of its own,
    with the read's site in its args."""
    start = float(audit.get("started_ms") or 0.0)
    events = audit.get("events") or []
    sites = {site.get("index", i): site for i, site in enumerate(audit.get("sites") or []) if isinstance(site, dict)}
    yield _meta(pid, SYNC_TID, "thread_name", {"name": "syncs (audited run)"})
    yield _meta(pid, SYNC_TID, "thread_sort_index", {"sort_index": SYNC_TID})
    steps = audit.get("step_starts_ms") or []
    if steps:
        yield _span(pid, RUNS_TID, "audited run (sync audit)", "run", start, float(steps[-1]),
                    {"reads_per_decode_step": audit.get("reads_per_decode_step"), "steps": audit.get("steps")})
    for event in events:
        site = sites.get(event.get("site"), {})
        yield {"ph": "i", "s": "t", "name": f"sync: {site.get('kind', '?')}", "cat": "sync", "pid": pid,
               "tid": SYNC_TID, "ts": _us(start + float(event.get("t_ms") or 0.0)),
               "args": {"step": event.get("step"), "host_ms": event.get("host_ms"),
                        **{key: site.get(key) for key in ("file", "line", "code", "kind", "fix")}}}


def _device_events(pid: int, tid: int, entry: dict[str, Any], start_ms: float, kept: int) -> Iterable[Event]:
    previous_end = None
    for step, (begin, end) in enumerate(zip(entry["device_start_ms"], entry["device_end_ms"])):
        gap = None if previous_end is None else max(0.0, begin - previous_end)
        previous_end = end
        yield _span(pid, tid, _step_name(step), "device.step", start_ms + begin, end - begin,
                    {"step": step, "gap_before_ms": gap, "overshoot": step >= kept})


def _step_name(step: int, verb: str = "") -> str:
    return f"{verb} {'prefill' if step == 0 else f'step {step}'}".strip()


def _span(pid: int, tid: int, name: str, cat: str, start_ms: float, dur_ms: float, args: dict[str, Any]) -> Event:
    """A complete event; its end is rounded as its start is, so spans that touch never overlap by a rounding."""
    ts = _us(start_ms)
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts,
            "dur": max(0.0, round(_us(start_ms + max(0.0, dur_ms)) - ts, 3)), "args": args}


def _meta(pid: int, tid: int, name: str, args: dict[str, Any]) -> Event:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "ts": 0, "args": args}


def _us(ms: float) -> float:
    return round(ms * 1000, 3)


def _metadata(report: dict[str, Any], starts: dict[str, Any]) -> dict[str, Any]:
    data = {key: report.get(key) for key in ("schema", "created", "request", "environment", "model")}
    data["time_base"] = ("microseconds since the run began, host clock (perf_counter); device spans "
                         "placed on it through a reference CUDA event, see each trial's clock_sync_error_ms")
    if not starts["recorded"] or not any(run["timings"].get("host_step_start_ms") for run in report["runs"]):
        data["note"] = OLD_REPORT_NOTE
    return data


def build_trace(report: dict[str, Any], profiled: dict[str, Any] | None) -> dict[str, Any]:
    """The report's trace; with a profile, the profiler's events moved onto the report's time axis.

    Kineto stamps events on CLOCK_REALTIME (`ts` µs + `baseTimeNanoseconds`); the report counts from a perf_counter
    (CLOCK_MONOTONIC) origin. The offset between the two clocks, read right after the profiled run, moves one onto
    the other."""
    trace = chrome_trace(report)
    if profiled and profiled.get("trace_file") and "origin_perf_counter_s" in report:
        with gzip.open(profiled["trace_file"], "rt", encoding="utf-8") as handle:
            kineto = json.load(handle)
        base_ns = int(kineto.get("baseTimeNanoseconds", 0))
        clock = profiled["clock"]
        shift_us = (base_ns - clock["offset_ns"]) / 1000 - report["origin_perf_counter_s"] * 1e6
        merge_profiler_trace(trace, kineto, shift_us)
        trace["metadata"]["profiler"] = {"file": profiled["trace_file"], "shift_us": shift_us,
                                         "clock_offset_error_us": clock["error_ns"] / 1000}
    return trace

