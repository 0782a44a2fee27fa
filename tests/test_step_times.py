"""core.measure.step_times: what one run's clock records, and the timings it makes of them (on the host clock here;
the CUDA-event side runs in tests/test_cuda.py and test_trace.py)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch

import core.measure.step_times as step_times
from core.measure.step_times import StepClock


@pytest.fixture
def ticking(monkeypatch):
    """perf_counter advancing 1 ms per read, so every recorded moment is known exactly."""
    ticks = itertools.count()
    monkeypatch.setattr(step_times.time, "perf_counter", lambda: next(ticks) / 1000)


def run_steps(clock: StepClock, steps: int) -> None:
    clock.start()
    for index in range(steps):
        clock.before_step(index)
        clock.after_step(index)
        clock.waiting(index)
        clock.known(index)
    clock.stop()


def test_on_the_cpu_the_timings_are_the_hosts_moments(ticking):
    clock = StepClock(torch.device("cpu"), 4)
    run_steps(clock, 4)
    timings = clock.summary(kept_steps=4, computed_steps=4, new_tokens=4, setup_ms=12.0, compile_ms=0.0)
    assert timings.clock == "host" and timings.total_ms == pytest.approx(17.0)
    assert timings.host_step_start_ms == pytest.approx([1, 5, 9, 13])
    assert timings.host_queued_ms == pytest.approx([2, 6, 10, 14])
    assert timings.host_wait_start_ms == pytest.approx([3, 7, 11, 15])
    assert timings.host_known_ms == pytest.approx([4, 8, 12, 16]) and timings.ttft_ms == pytest.approx(4)
    assert timings.step_ms == pytest.approx([4, 4, 4]) and timings.ms_per_token_p50 == pytest.approx(4)
    assert timings.gpu_step_ms == [] and timings.device_span_fraction is None and timings.setup_ms == 12.0


def test_the_decode_phase_is_the_tokens_after_each_rows_first_over_the_time_after_it(ticking):
    clock = StepClock(torch.device("cpu"), 4)
    run_steps(clock, 4)
    timings = clock.summary(kept_steps=4, computed_steps=4, new_tokens=8, setup_ms=0.0, compile_ms=0.0, rows=2)
    assert timings.decode_tokens == 6 and timings.decode_ms == pytest.approx(13.0)
    assert timings.decode_tokens_per_s == pytest.approx(6 / 0.013)
    assert timings.tokens_per_s == pytest.approx(8 / 0.017)


def test_overshoot_is_computed_minus_kept_and_travels_in_the_dict(ticking):
    clock = StepClock(torch.device("cpu"), 6)
    run_steps(clock, 6)
    timings = clock.summary(kept_steps=4, computed_steps=6, new_tokens=4, setup_ms=0.0, compile_ms=0.0)
    assert timings.overshoot_steps == 2 and timings.to_dict()["overshoot_steps"] == 2
    assert len(timings.host_queued_ms) == 6 and len(timings.host_known_ms) == 4


def test_a_decode_setup_reuses_its_clock_for_runs_of_one_length():
    setup = SimpleNamespace(reusables={}, device=torch.device("cpu"))
    first = StepClock.for_run(setup, 8)
    assert StepClock.for_run(setup, 8) is first and StepClock.for_run(setup, 9) is not first


def test_a_run_too_short_to_tell_the_clocks_apart_keeps_them_one_to_one():
    clock = StepClock(torch.device("cpu"), 1)
    clock.end_reference = None
    clock.reference = SimpleNamespace(elapsed_time=lambda end: 1.0)
    clock.reference_host_s, clock.end_reference_host_s = 10.0, 10.0011
    clock.reference_error_s = clock.end_reference_error_s = 0.0001
    assert clock.host_per_device_ms() == 1.0  # 1 ms against a 0.2 ms bound: not known better than the bound
    clock.reference = SimpleNamespace(elapsed_time=lambda end: 1000.0)
    clock.end_reference_host_s = 11.0000135
    assert clock.host_per_device_ms() == pytest.approx(1.0000135)
