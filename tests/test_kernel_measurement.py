"""core.measure.kernel_measurement: kernels read per decode step, on the host's clock (synthetic kernels here;
the measured run itself goes under CUPTI in tests/test_cuda_audit.py)."""

from __future__ import annotations

import pytest

from core.measure.kernel_measurement import read_kernels

STARTED_S = 100.0
OFFSET_NS = 1_000_000_000_000  # the profiler's clock minus perf_counter


def on_profiler_clock(ms_since_start: float) -> int:
    return int((STARTED_S * 1000 + ms_since_start) * 1e6) + OFFSET_NS


def test_per_step_busy_idle_inside_and_gaps_come_from_merged_kernels():
    # prefill 0-1 ms; step 1 spans 1-3 ms with kernels 1.0-1.5 and 2.0-2.5 (overlapping 2.4-2.6 on a second stream);
    # step 2 spans 3.5-4.5 (a 0.5 ms gap) with one kernel 3.5-4.5
    kernels = [(0.0, 1.0), (1.0, 1.5), (2.0, 2.5), (2.4, 2.6), (3.5, 4.5)]
    timings = {"kept_steps": 3, "device_start_ms": [0.0, 1.0, 3.5], "device_end_ms": [1.0, 3.0, 4.5]}
    result = read_kernels([(on_profiler_clock(a), on_profiler_clock(b)) for a, b in kernels], timings, STARTED_S,
                          {"realtime": OFFSET_NS, "monotonic": 0})
    assert result["clock"] == "realtime" and result["alignment"] == pytest.approx(1.0)
    assert result["per_step"]["busy_ms"] == pytest.approx([1.1, 1.0])
    assert result["per_step"]["idle_inside_ms"] == pytest.approx([0.9, 0.0])
    assert result["per_step"]["gap_ms"] == pytest.approx([0.0, 0.5])
    assert result["kernel_busy_fraction"] == pytest.approx(2.1 / 3.5)
    assert result["intervals"]["steps"][0] == {"step": 1, "span_ms": 2.0, "busy": [[0.0, 0.5], [1.0, 1.6]]}


def test_generates_kernels_give_a_busy_share_of_the_whole_call():
    kernels = [(on_profiler_clock(a), on_profiler_clock(b)) for a, b in ((0.0, 1.0), (3.0, 4.0))]
    result = read_kernels(kernels, {"kept_steps": 4}, STARTED_S, {"realtime": OFFSET_NS})
    assert result["kernel_busy_fraction"] == pytest.approx(0.5)
