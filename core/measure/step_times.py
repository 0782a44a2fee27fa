"""Per-step timings of one run: CUDA events recorded in-stream (no sync added) plus host timestamps.

On CUDA every step gets a start and an end event on the compute stream. When the device is busy, a start event
completes the moment the previous step's work ends (gap 0); when the device waits for the host, it completes
when the host finally queues the step: the difference is the device's idle gap. Elapsed times are read once,
after the run. On the CPU only host timestamps exist, and the timings say so (`clock == "host"`).

Device spans are put on the host clock through two reference events: after the start's synchronize (and again
after the stop's) the host reads perf_counter, records a reference event, waits for it, and reads perf_counter again.
The device stamped the event inside that interval, so its midpoint stands for the event's host time and half its
width bounds the error. The GPU's timer and perf_counter drift apart (benchmarks/clock_alignment.py measures it;
docs/MEASUREMENT.md, "Timeline and trace", has the rate), so an event's host time is interpolated between the two
references: the start reference's host time plus `elapsed_time` from it, scaled by the ratio of the two clocks over
the run.
"""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from core.measure.stats import percentile


@dataclass
class Timings:
    clock: str                      # "cuda-events" (device clock) or "host" (host clock only)
    total_ms: float                 # host wall time from the start to all tokens known on the host
    ttft_ms: float | None           # host: start to the first token known on the host (None: not observable)
    tokens_per_s: float             # new tokens (all sequences, through EOS) / total time
    new_tokens: int
    kept_steps: int                 # decode steps whose tokens are in the result
    computed_steps: int             # steps the device ran; the difference is overshoot, discarded
    step_ms: list[float]            # per kept step after the first: time between step completions
    ms_per_token_p50: float | None
    ms_per_token_p95: float | None
    host_queued_ms: list[float]     # per computed step: when the host finished queuing it (from the start)
    host_known_ms: list[float]      # per kept step: when its tokens were known on the host
    setup_ms: float = 0.0           # the shape's untimed setup run before this run (0 once the shape is set up)
    compile_ms: float = 0.0         # that setup run, when it compiled (the first run of a compiled shape)
    ttft_gpu_ms: float | None = None        # device: prefill start to the first token computed
    gpu_step_ms: list[float] = field(default_factory=list)   # device span of each kept step
    gpu_gap_ms: list[float] = field(default_factory=list)    # device idle gap before each kept step after the first
    # Share of the device's time from the first step's start to the last one's end spent inside a step's span. A span
    # includes any wait for the host *within* the step (eager mode launches kernels one by one), so this measures the
    # waits between steps, not how busy the device was: the kernel measurement (core.measure.kernel_measurement)
    # measures that.
    device_span_fraction: float | None = None
    # The decode phase: tokens after each sequence's first, over the host time after the first token was known.
    # Prefill is shared code, so this is where the loops differ; None where the first token is not observed apart.
    # Both loops learn the first token before step 1 is queued, so both decode windows hold every decode step.
    decode_tokens: int | None = None
    decode_ms: float | None = None
    decode_tokens_per_s: float | None = None
    # When each step happened: ms since this run's start, on the host clock (device spans: see the module docstring).
    host_step_start_ms: list[float] = field(default_factory=list)  # per computed step: the host began queuing it
    host_wait_start_ms: list[float] = field(default_factory=list)  # per kept step: the host began blocking for it
    device_start_ms: list[float] = field(default_factory=list)     # per computed step (overshoot included)
    device_end_ms: list[float] = field(default_factory=list)
    clock_sync_error_ms: float | None = None                       # bound on the device-to-host alignment
    rank_device_spans: list[dict[str, Any]] = field(default_factory=list)  # per TP rank, on rank 0's time base

    @property
    def overshoot_steps(self) -> int:
        return self.computed_steps - self.kept_steps

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["overshoot_steps"] = self.overshoot_steps
        return data


class StepClock:
    """Collects the timestamps of one run; cheap on the hot path (an event record and a perf_counter)."""

    def __init__(self, device: torch.device, capacity: int):
        self.cuda = device.type == "cuda"
        self.device = device
        self.capacity = capacity
        if self.cuda:
            self.starts = [torch.cuda.Event(enable_timing=True) for _ in range(capacity)]
            self.ends = [torch.cuda.Event(enable_timing=True) for _ in range(capacity)]
            self.reference = torch.cuda.Event(enable_timing=True)
            self.end_reference = torch.cuda.Event(enable_timing=True)
        self.step_started = [0.0] * capacity
        self.queued = [0.0] * capacity
        self.wait_started = [0.0] * capacity
        self.known_at = [0.0] * capacity
        self.t0 = self.t_end = 0.0
        self.reference_host_s = 0.0    # host time standing for the reference event (midpoint of its interval)
        self.reference_error_s = 0.0   # half that interval's width
        self.end_reference_host_s = 0.0
        self.end_reference_error_s = 0.0

    @classmethod
    def for_run(cls, setup: Any, max_steps: int) -> StepClock:
        """Event objects are reused across runs of one decode setup (core.loops.step.DecodeSetup): creating
        hundreds per run would cost host time."""
        key = ("clock", max_steps)
        clock = setup.reusables.get(key)
        if clock is None:
            clock = setup.reusables[key] = cls(setup.device, max_steps)
        return clock

    def start(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self.reference_host_s, self.reference_error_s = _stamp(self.reference)
        self.t0 = time.perf_counter()

    def before_step(self, index: int) -> None:
        self.step_started[index] = time.perf_counter()
        if self.cuda:
            self.starts[index].record()

    def after_step(self, index: int) -> None:
        if self.cuda:
            self.ends[index].record()
        self.queued[index] = time.perf_counter()

    def waiting(self, index: int) -> None:
        """The host is about to block until step `index`'s tokens are on the host."""
        self.wait_started[index] = time.perf_counter()

    def known(self, index: int) -> None:
        self.known_at[index] = time.perf_counter()

    def stop(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)
        self.t_end = time.perf_counter()
        if self.cuda:
            self.end_reference_host_s, self.end_reference_error_s = _stamp(self.end_reference)

    def summary(self, *, kept_steps: int, computed_steps: int, new_tokens: int, setup_ms: float,
                compile_ms: float, rows: int = 1) -> Timings:
        total_ms = (self.t_end - self.t0) * 1000
        known = self._since_start(self.known_at[:kept_steps])
        queued = self._since_start(self.queued[:computed_steps])
        timings = Timings(
            clock="cuda-events" if self.cuda else "host", total_ms=total_ms, ttft_ms=known[0],
            tokens_per_s=new_tokens / (total_ms / 1000) if total_ms > 0 else 0.0, new_tokens=new_tokens,
            kept_steps=kept_steps, computed_steps=computed_steps, step_ms=[], ms_per_token_p50=0.0,
            ms_per_token_p95=0.0, host_queued_ms=queued, host_known_ms=known, setup_ms=setup_ms,
            compile_ms=compile_ms, host_step_start_ms=self._since_start(self.step_started[:computed_steps]),
            host_wait_start_ms=self._since_start(self.wait_started[:kept_steps]),
        )
        if self.cuda:
            self._add_device_step_times(timings, kept_steps)
            self._add_device_spans(timings, computed_steps)
        else:
            timings.step_ms = [b - a for a, b in itertools.pairwise(known)]
        if timings.step_ms:
            timings.ms_per_token_p50 = statistics.median(timings.step_ms)
            timings.ms_per_token_p95 = percentile(timings.step_ms, 95)
        timings.decode_tokens, timings.decode_ms = new_tokens - rows, total_ms - known[0]
        if timings.decode_ms > 0 and timings.decode_tokens > 0:
            timings.decode_tokens_per_s = timings.decode_tokens / (timings.decode_ms / 1000)
        return timings

    def _since_start(self, host_times: list[float]) -> list[float]:
        return [(t - self.t0) * 1000 for t in host_times]

    def _add_device_spans(self, timings: Timings, computed: int) -> None:
        """Each computed step's device span on the host clock, in ms since the start (read after the run)."""
        offset_ms = (self.reference_host_s - self.t0) * 1000
        scale = self.host_per_device_ms()
        timings.device_start_ms = [offset_ms + scale * self.reference.elapsed_time(e) for e in self.starts[:computed]]
        timings.device_end_ms = [offset_ms + scale * self.reference.elapsed_time(e) for e in self.ends[:computed]]
        timings.clock_sync_error_ms = max(self.reference_error_s, self.end_reference_error_s) * 1000

    def host_per_device_ms(self) -> float:
        """Host milliseconds per device millisecond over this run, from the two references (1.0 when the run was
        too short for the ratio to be known better than the references themselves)."""
        device_ms = self.reference.elapsed_time(self.end_reference)
        host_ms = (self.end_reference_host_s - self.reference_host_s) * 1000
        bound_ms = (self.reference_error_s + self.end_reference_error_s) * 1000
        return host_ms / device_ms if device_ms > 100 * bound_ms else 1.0

    def _add_device_step_times(self, timings: Timings, kept: int) -> None:
        starts, ends = self.starts[:kept], self.ends[:kept]
        timings.ttft_gpu_ms = starts[0].elapsed_time(ends[0])
        timings.gpu_step_ms = [s.elapsed_time(e) for s, e in zip(starts, ends)]
        timings.step_ms = [a.elapsed_time(b) for a, b in itertools.pairwise(ends)]
        timings.gpu_gap_ms = [max(0.0, e.elapsed_time(s)) for e, s in zip(ends, starts[1:])]
        span = starts[0].elapsed_time(ends[-1])
        timings.device_span_fraction = min(1.0, sum(timings.gpu_step_ms) / span) if span > 0 else None


def _stamp(event: Any) -> tuple[float, float]:
    """Record `event` on an idle device and wait for it: the device stamps it between the record call and the
    wait's return, so (midpoint, half-width) of that host interval are its host time and the error bound."""
    before = time.perf_counter()
    event.record()
    event.synchronize()
    after = time.perf_counter()
    return (before + after) / 2, (after - before) / 2
