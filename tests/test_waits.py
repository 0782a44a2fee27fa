"""core.measure.waits: per decode step, the host's wait, the device's gap and its idle inside a step's span."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.documents.files import read_report_bytes
from core.measure.waits import KERNEL_MEASUREMENT, STEP_EVENTS, step_waits, step_work_ms, trial_waits
from core.report.explain import contestant_waits

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "lab" / "results"


def timings(spans: list[tuple[float, float]], waits: list[tuple[float, float]]) -> dict:
    return {"kept_steps": len(spans), "device_start_ms": [a for a, _ in spans], "device_end_ms": [b for _, b in spans],
            "host_wait_start_ms": [a for a, _ in waits], "host_known_ms": [b for _, b in waits]}


def test_each_wait_is_read_from_the_steps_timestamps():
    # three steps of 1 ms of work: step 1's span opens 0.5 ms before its work could start, step 2 has a 0.25 ms gap
    t = timings([(0.0, 1.0), (1.0, 2.5), (2.75, 3.75)], [(0.5, 1.0), (2.0, 2.5), (3.0, 3.75)])
    waits = step_waits(t, work_ms=1.0)
    assert waits.host_wait_ms == pytest.approx((0.5 + 0.75) / 2)
    assert waits.device_gap_ms == pytest.approx((0.0 + 0.25) / 2)
    assert waits.idle_inside_ms == pytest.approx((0.5 + 0.0) / 2)
    assert waits.device_idle_ms == pytest.approx(0.125 + 0.25)
    assert step_waits(t, work_ms=None).idle_inside_ms is None


def test_on_the_cpu_only_the_host_wait_exists():
    t = {"kept_steps": 3, "host_wait_start_ms": [0.0, 1.0, 2.0], "host_known_ms": [0.5, 1.5, 2.5]}
    assert trial_waits([{"timings": t}], None) == {"host_wait_ms": 0.5, "device_gap_ms": None,
                                                     "idle_inside_ms": None, "device_idle_ms": None}


def test_a_steps_work_is_the_kernel_measurements_else_the_quickest_loops_span():
    slow = [{"timings": timings([(0, 1), (1, 3), (3, 5)], [(0, 1)] * 3)}]
    quick = [{"timings": timings([(0, 1), (1, 2.2), (2.2, 3.4)], [(0, 1)] * 3)}]
    assert step_work_ms([slow, quick]) == (pytest.approx(1.2), STEP_EVENTS)
    assert step_work_ms([slow, quick], kernel_busy_ms=0.9) == (0.9, KERNEL_MEASUREMENT)
    assert step_work_ms([[{"timings": {}}]]) == (None, None)


def test_the_h200_1b_reduce_overhead_reports_waits_account_for_its_step_difference():
    """The committed report (call 19): the naive loop waits about 0.8 ms a step in .item(), and the device idles
    about 0.7 ms a step more than in the pipelined loop, which is the difference of their steps."""
    report = json.loads(read_report_bytes(RESULTS / "h200-2026-11-30-b" / "call19-ro-1b.json.gz"))
    waits = {name: contestant_waits(report, name) for name in ("naive", "pipelined")}
    step = {name: 1000 / report["summary"][name]["decode_tokens_per_s"] for name in waits}
    assert waits["naive"]["host_wait_ms"] == pytest.approx(0.8, abs=0.1)
    idle = waits["naive"]["device_idle_ms"] - waits["pipelined"]["device_idle_ms"]
    assert idle == pytest.approx(step["naive"] - step["pipelined"], rel=0.10)
