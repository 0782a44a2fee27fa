"""The timeline fields and the Chrome trace built from them (core.measure.trace), checked against the trace-event
format: every event has ph, ts, pid and tid; no negative durations; the spans of one track never overlap; device spans
come in step order, one per computed step; the naive loop's host waits add up to the time it spent in its sync."""

from __future__ import annotations

import copy
import gzip
import itertools
import json
import statistics
import time
from collections import defaultdict

import pytest

import core.loops.generation as generation
from core.bench import main
from core.compare import compare
from core.documents.files import write_json
from core.loops.generation import generate
from core.measure.trace import DEVICE_TID, HOST_TID, OLD_REPORT_NOTE, PROFILER_PID_BASE, RUNS_TID, chrome_trace
from core.request.options import BenchRequest, GenerationOptions
from tests.conftest import requires_cuda

STEPS = 10
NEW_FIELDS = ("host_step_start_ms", "host_wait_start_ms", "device_start_ms", "device_end_ms", "clock_sync_error_ms",
              "rank_device_spans")
TOUCHING = 1e-6  # µs: spans that touch may meet at the same float, never overlap by more


@pytest.fixture(scope="module")
def report(tiny):
    request = BenchRequest(prompt="Hello there", options=GenerationOptions(max_new_tokens=STEPS), trials=2,
                           contestants=("naive", "pipelined", "no-check", "hf"))
    return compare(tiny, request)


def check_trace_format(trace: dict) -> dict[tuple[int, int], list[dict]]:
    """Assert the format's rules; return each of our tracks' complete events, sorted by start. (torch.profiler's
    merged tracks nest operators inside operators, which the format allows: only ours must never overlap.)"""
    assert trace["displayTimeUnit"] == "ms" and isinstance(trace["metadata"], dict)
    json.dumps(trace)
    tracks: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for event in trace["traceEvents"]:
        assert {"ph", "ts", "pid", "tid"} <= set(event), event
        if event["ph"] == "X":
            assert event["dur"] >= 0, event
        if event["ph"] == "X" and event["pid"] < PROFILER_PID_BASE:
            tracks[(event["pid"], event["tid"])].append(event)
    for spans in tracks.values():
        spans.sort(key=lambda e: e["ts"])
        for before, after in itertools.pairwise(spans):
            assert before["ts"] + before["dur"] <= after["ts"] + TOUCHING, (before, after)
    return tracks


def trial_events(tracks, pid, tid, report, run):
    """The events of one run on one track: those inside its span on the runs track."""
    begin = run["started_ms"] * 1000
    end = begin + run["timings"]["total_ms"] * 1000
    return [e for e in tracks[(pid, tid)] if begin - TOUCHING <= e["ts"] <= end + TOUCHING]


# --------------------------------------------------------------------------------------------- the fields

def test_each_run_has_the_timeline_fields_with_one_entry_per_step(report):
    for run in report["runs"]:
        timings = run["timings"]
        if run["contestant"] == "hf":
            continue
        assert len(timings["host_step_start_ms"]) == len(timings["host_queued_ms"]) == timings["computed_steps"]
        assert len(timings["host_wait_start_ms"]) == len(timings["host_known_ms"]) == timings["kept_steps"]
        assert timings["device_start_ms"] == [] and timings["clock_sync_error_ms"] is None  # the CPU
        assert timings["rank_device_spans"] == []                                           # no TP
        for begin, end in zip(timings["host_step_start_ms"], timings["host_queued_ms"]):
            assert 0 <= begin <= end <= timings["total_ms"]
        for begin, end in zip(timings["host_wait_start_ms"], timings["host_known_ms"]):
            assert 0 <= begin <= end <= timings["total_ms"]


def test_runs_and_warmups_are_placed_in_the_order_they_ran(report):
    warmups = [report["warmup"][name] for name in report["request"]["contestants"]]
    placed = [(w["started_ms"], w["wall_ms"]) for w in warmups]
    placed += [(r["started_ms"], r["timings"]["total_ms"]) for r in report["runs"]]
    for (start, length), (next_start, _) in itertools.pairwise(placed):
        assert start + length <= next_start


def test_the_no_check_loop_still_forgets_what_it_cannot_see(report):
    run = next(r for r in report["runs"] if r["contestant"] == "no-check")
    assert run["timings"]["ttft_ms"] is None and run["timings"]["step_ms"] == []
    waits = run["timings"]["host_wait_start_ms"]
    assert waits[0] >= run["timings"]["host_queued_ms"][-1]  # its one wait comes after every step was queued


def test_the_naive_loops_host_waits_add_up_to_the_time_spent_in_its_sync(tiny, monkeypatch):
    """Measured sync time: perf_counter around the blocking read itself (generation.read_stop_flag), timed by this
    test and not by the clock. Made longer by a sleep that stands for a device still busy, so the sum means
    something on the CPU. Each wait encloses its call, so it is never shorter; what it holds beyond the call is the
    clock's own reads and a function call, under 5% of the median step's (so a busy machine, whose steps are slower,
    gets the margin its steps get) on the median step (a step preempted in between does not decide it)."""
    spent: list[float] = []
    real = generation.read_stop_flag

    def timed(state, index):
        began = time.perf_counter()
        time.sleep(0.002)
        flag = real(state, index)
        spent.append(time.perf_counter() - began)
        return flag

    generate(tiny, "Hello", loop="naive", max_new_tokens=STEPS, ignore_eos=True)  # its setup run, not timed here
    monkeypatch.setattr(generation, "read_stop_flag", timed)
    timings = generate(tiny, "Hello", loop="naive", max_new_tokens=STEPS, ignore_eos=True).timings
    waits = [known - begin for begin, known in zip(timings.host_wait_start_ms, timings.host_known_ms)]
    measured_ms = sum(spent) * 1000
    assert len(waits) == len(spent) == STEPS
    assert measured_ms <= sum(waits)
    assert_waits_hold_the_read_and_little_else(timings, waits, spent)


def assert_waits_hold_the_read_and_little_else(timings, waits: list[float], spent: list[float]) -> None:
    """Each wait (ms) encloses its read (s); the median step's excess is under 5% of the median step's queuing."""
    excess = [wait - read * 1000 for wait, read in zip(waits, spent)]
    assert min(excess) >= 0, excess
    step_ms = statistics.median(q - s for s, q in zip(timings.host_step_start_ms, timings.host_queued_ms))
    assert statistics.median(excess) <= 0.05 * step_ms, (excess, step_ms)


@pytest.mark.parametrize("loop", ["naive", "pipelined", "no-check"])
def test_a_slow_streamer_is_not_counted_as_waiting(tiny, loop):
    """The watcher's callback runs after the step is marked known: a wait span is the wait, not the streaming. A
    wait that held the callback would hold its whole sleep, so the median wait is checked against the sleep (a
    wait preempted on a busy machine does not decide it)."""
    sleep_ms = 5.0
    timings = generate(tiny, "Hello", loop=loop, max_new_tokens=STEPS, ignore_eos=True,
                       on_tokens=lambda event: time.sleep(sleep_ms / 1000)).timings
    waits = [known - begin for begin, known in zip(timings.host_wait_start_ms, timings.host_known_ms)]
    assert len(waits) == STEPS and statistics.median(waits[1:]) < sleep_ms, waits


# ---------------------------------------------------------------------------------------------- the trace

def test_the_trace_follows_the_format_with_a_process_per_contestant(report):
    trace = chrome_trace(report)
    tracks = check_trace_format(trace)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert sorted(names.values()) == sorted(report["request"]["contestants"])
    threads = {(e["pid"], e["tid"]) for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert all((pid, HOST_TID) in threads and (pid, RUNS_TID) in threads for pid in names)
    assert trace["metadata"]["request"] == report["request"] and "note" not in trace["metadata"]
    for pid in names:
        runs = tracks[(pid, RUNS_TID)]
        assert [e["name"] for e in runs] == ["warm-up (untimed)", "trial 0", "trial 1"]


def test_on_the_cpu_the_host_step_spans_are_the_compute_one_per_step(report):
    trace = chrome_trace(report)
    tracks = check_trace_format(trace)
    pids = process_ids(trace)
    for run in report["runs"]:
        if run["contestant"] == "hf":
            continue
        events = trial_events(tracks, pids[run["contestant"]], HOST_TID, report, run)
        steps = [e for e in events if e["cat"] == "host.step"]
        assert [e["args"]["step"] for e in steps] == list(range(run["timings"]["computed_steps"]))
        waits = [e for e in events if e["cat"] == "host.wait"]
        assert len(waits) == run["timings"]["kept_steps"]
        assert not any(tid >= DEVICE_TID for pid, tid in tracks if pid == pids[run["contestant"]])
    instants = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    assert len(instants) == sum(r["timings"]["kept_steps"] for r in report["runs"] if r["contestant"] != "hf")


def process_ids(trace: dict) -> dict[str, int]:
    """Each contestant's process id in a trace, by name."""
    return {e["args"]["name"]: e["pid"] for e in trace["traceEvents"] if e["name"] == "process_name"}


def with_device_spans(report: dict, ranks: int) -> dict:
    """The CPU report with device spans as CUDA would give them (each rank a little later than rank 0)."""
    faked = copy.deepcopy(report)
    for run in faked["runs"]:
        timings = run["timings"]
        if not timings["host_queued_ms"]:
            continue
        timings["device_start_ms"] = [t + 0.01 for t in timings["host_step_start_ms"]]
        timings["device_end_ms"] = [t + 0.01 for t in timings["host_queued_ms"]]
        timings["clock_sync_error_ms"] = 0.003
        if ranks > 1:
            timings["rank_device_spans"] = [
                {"rank": rank, "device_start_ms": [t + rank * 0.001 for t in timings["device_start_ms"]],
                 "device_end_ms": [t + rank * 0.001 for t in timings["device_end_ms"]]} for rank in range(ranks)]
    return faked


@pytest.mark.parametrize("ranks", [1, 2])
def test_device_lanes_hold_one_span_per_computed_step_in_step_order(report, ranks):
    faked = with_device_spans(report, ranks)
    trace = chrome_trace(faked)
    tracks = check_trace_format(trace)
    pids = process_ids(trace)
    for run in faked["runs"]:
        if run["contestant"] == "hf":
            continue
        for rank in range(ranks):
            spans = trial_events(tracks, pids[run["contestant"]], DEVICE_TID + rank, faked, run)
            assert [e["args"]["step"] for e in spans] == list(range(run["timings"]["computed_steps"]))
            assert spans[0]["args"]["gap_before_ms"] is None
            gaps = [e["args"]["gap_before_ms"] for e in spans[1:]]
            expected = [max(0.0, b - a) for a, b in zip(run["timings"]["device_end_ms"],
                                                        run["timings"]["device_start_ms"][1:])]
            assert gaps == pytest.approx(expected)


def test_cpu_ranks_without_device_spans_get_no_device_lanes(report):
    cpu_tp = copy.deepcopy(report)
    for run in cpu_tp["runs"]:
        run["timings"]["rank_device_spans"] = [{"rank": r, "device_start_ms": [], "device_end_ms": []} for r in (0, 1)]
    trace = chrome_trace(cpu_tp)
    check_trace_format(trace)
    lanes = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"]
    assert not any(name.startswith("device") for name in lanes) and any("the device is the host" in n for n in lanes)


def test_an_old_report_gives_the_host_spans_and_a_note(report):
    old = copy.deepcopy(report)
    for run in old["runs"]:
        run.pop("started_ms")
        for name in (*NEW_FIELDS, "host_step_start_ms"):
            run["timings"].pop(name, None)
    for warmup in old["warmup"].values():
        warmup.pop("started_ms")
        warmup.pop("wall_ms")
        warmup["engine_warmup_ms"] = warmup.pop("setup_ms")  # setup_ms's name in older reports
    trace = chrome_trace(old)
    tracks = check_trace_format(trace)
    assert trace["metadata"]["note"] == OLD_REPORT_NOTE
    warmups = [e for spans in tracks.values() for e in spans if e["name"] == "warm-up (untimed)"]
    entries = old["warmup"].values()
    assert sorted(e["args"]["setup_ms"] for e in warmups) == sorted(w["engine_warmup_ms"] for w in entries)
    assert sorted(e["dur"] for e in warmups) == pytest.approx(
        sorted((w["engine_warmup_ms"] + w["total_ms"]) * 1000 for w in entries), abs=0.01)
    assert any(e["cat"] == "host.step" for spans in tracks.values() for e in spans)
    assert not any(e["cat"] == "host.wait" for spans in tracks.values() for e in spans)
    check_trace_format(chrome_trace({}))  # nothing at all: still a trace


# ---------------------------------------------------------------------------------------------- the CLI

CLI = ["--model", "tiny-random", "--device", "cpu", "--max-new-tokens", "6", "--trials", "1"]


def test_the_cli_writes_a_trace_that_loads(tmp_path):
    out = tmp_path / "run.trace.json"
    assert main([*CLI, "--trace", str(out)]) == 0
    trace = json.loads(out.read_text())
    check_trace_format(trace)
    assert {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"} == {"naive", "pipelined"}


def test_an_unwritable_trace_path_is_refused_before_any_work(tmp_path, capsys):
    assert main([*CLI, "--trace", str(tmp_path / "missing" / "t.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("core.bench: error: --trace") and len(err.strip().splitlines()) == 1


def test_a_write_that_fails_at_the_end_saves_to_a_named_fallback(tmp_path, capsys):
    written = write_json(str(tmp_path / "gone" / "t.json"), {"traceEvents": []}, "trace")
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"the trace was saved to {written} instead" in err and "Traceback" not in err
    with open(written, encoding="utf-8") as handle:
        assert json.load(handle) == {"traceEvents": []}


def test_with_profile_the_profilers_events_land_after_the_trials_on_the_same_axis(tmp_path):
    out, folder = tmp_path / "t.json", tmp_path / "prof"
    started = time.perf_counter()
    assert main([*CLI, "--trace", str(out), "--profile", str(folder)]) == 0
    elapsed_us = (time.perf_counter() - started) * 1e6
    trace = json.loads(out.read_text())
    check_trace_format(trace)
    ours = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] < PROFILER_PID_BASE]
    profiled = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] >= PROFILER_PID_BASE]
    with gzip.open(folder / "profile-rank0-trace.json.gz", "rt", encoding="utf-8") as handle:
        kineto = json.load(handle)
    assert profiled and len(profiled) == len([e for e in kineto["traceEvents"] if e.get("ph") == "X"])
    last_trial_end = max(e["ts"] + e["dur"] for e in ours)
    assert last_trial_end <= min(e["ts"] for e in profiled) <= max(e["ts"] for e in profiled) <= elapsed_us


# ---------------------------------------------------------------------------------------------- on a GPU

@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("loop", ["naive", "pipelined"])
def test_on_cuda_every_computed_step_has_a_device_span_on_the_host_clock(loop):
    from core.models.loading import load_model

    loaded = load_model("tiny-random", device="cuda", dtype="fp32")
    rows = generate(loaded, "Hello", max_new_tokens=24, ignore_eos=True).token_ids
    eos = rows[0][5]
    result = generate(loaded, "Hello", loop=loop, max_new_tokens=24, lag=2, eos_token_id=eos)
    timings = result.timings
    starts, ends = timings.device_start_ms, timings.device_end_ms
    assert len(starts) == len(ends) == timings.computed_steps
    assert loop == "naive" or timings.computed_steps > timings.kept_steps  # overshoot steps have spans too
    assert 0 <= timings.clock_sync_error_ms < 1.0
    for begin, end in zip(starts, ends):
        assert -timings.clock_sync_error_ms <= begin <= end <= timings.total_ms + timings.clock_sync_error_ms
    for end, following in zip(ends, starts[1:]):
        assert end <= following + 1e-3
    # A step cannot start on the device before the host began queuing it (within the alignment's bound).
    for host_begin, device_begin in zip(timings.host_step_start_ms, starts):
        assert device_begin >= host_begin - timings.clock_sync_error_ms - 0.05
    assert timings.gpu_step_ms == pytest.approx([e - b for b, e in zip(starts, ends)][: timings.kept_steps],
                                                abs=2e-3)


@pytest.mark.slow
def test_the_clock_alignment_script_runs_on_the_cpu_and_says_what_it_skipped(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "clock.json"
    done = subprocess.run([sys.executable, "benchmarks/clock_alignment.py", "--seconds", "0.3", "--out", str(out)],
                          cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    if result["device"] == "cpu":
        assert "no CUDA device" in done.stdout and "reference" not in result
    assert result["drift"]["samples"] and result["drift"]["kineto_bracket_us"] >= 0


@pytest.mark.cuda
@requires_cuda
def test_on_cuda_the_naive_loops_waits_add_up_to_its_item_calls_and_fit_the_device_spans(monkeypatch):
    """The real sync: each .item() timed by this test. Waits enclose it, and hold little else (the median step's
    excess under 5% of its queuing: assert_waits_hold_the_read_and_little_else). On the device, within the
    alignment's bound: a step ends before the host learns its tokens, and the next one starts only after the host
    began queuing it."""
    from core.models.loading import load_model

    loaded = load_model("tiny-random", device="cuda", dtype="fp32")
    spent: list[float] = []
    real = generation.read_stop_flag

    def timed(state, index):
        began = time.perf_counter()
        flag = real(state, index)
        spent.append(time.perf_counter() - began)
        return flag

    generate(loaded, "Hello", loop="naive", max_new_tokens=8, ignore_eos=True)  # warm
    monkeypatch.setattr(generation, "read_stop_flag", timed)
    timings = generate(loaded, "Hello", loop="naive", max_new_tokens=32, ignore_eos=True).timings
    waits = [known - begin for begin, known in zip(timings.host_wait_start_ms, timings.host_known_ms)]
    assert sum(spent) * 1000 <= sum(waits)
    assert_waits_hold_the_read_and_little_else(timings, waits, spent)
    bound = timings.clock_sync_error_ms
    for step in range(len(waits) - 1):
        # The device finished step `step` before the host learned it, and began the next one only once queued.
        assert timings.device_end_ms[step] <= timings.host_known_ms[step] + bound
        assert timings.device_start_ms[step + 1] >= timings.host_step_start_ms[step + 1] - bound


def test_an_audited_report_marks_each_read_with_its_site(tiny):
    report = compare(tiny, BenchRequest(prompt="Hello", options=GenerationOptions(max_new_tokens=6, ignore_eos=True),
                                        trials=1, audit=True))
    trace = chrome_trace(report)
    syncs = [e for e in trace["traceEvents"] if e.get("cat") == "sync"]
    naive_pid = next(e["pid"] for e in trace["traceEvents"] if e.get("name") == "process_name"
                     and e["args"]["name"] == "naive")
    naive = [e for e in syncs if e["pid"] == naive_pid]
    assert len(naive) >= 4 and all(e["ph"] == "i" for e in syncs)
    assert {(e["args"]["file"], e["args"]["kind"]) for e in naive} >= {("core/loops/generation.py", "item")}
    assert any(e.get("name") == "audited run (sync audit)" for e in trace["traceEvents"])
    start = report["sync_audit"]["naive"]["started_ms"] * 1000
    assert all(e["ts"] >= start for e in syncs)
