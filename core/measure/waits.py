"""Where a loop's time goes per decode step, from its trials' step timestamps (core.measure.step_times): how long the
host sat blocked learning a step's tokens, how long the device idled between steps, and how long it sat inside a
step's span with nothing to run, waiting for the host to launch the step's work. Torch-free: the page computes the
same for a replayed report.

- host wait: from the host beginning to wait for a step's tokens to their being known (the naive loop's `.item()`;
  the pipelined loop waits for a step it queued `lag` steps earlier, while the device works);
- device gap: from one step's device end to the next one's start, both CUDA events on the device's clock;
- idle inside the step: the step's device span less the device work the step holds. A span opens at the step's first
  marker, so where the host is still queuing the step (a CUDA-graph step's launch comes after about a millisecond of
  host work), the device waits inside the span. The work is the kernel measurement's kernel time per step where it ran
  (core.measure.kernel_measurement), else the shortest median span of the report's loops: they run the same decode step,
  and the one a step ahead has the device busy through its span;
- device idle = gap + idle inside: what waiting for the host costs the device per step, so that the difference of two
  loops' device idle accounts for the difference of their steps.
On the CPU there is no separate device: only the host wait exists.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

KERNEL_MEASUREMENT = "kernel measurement"
STEP_EVENTS = "step events"


@dataclass(frozen=True)
class StepWaits:
    """Means per decode step over one trial, in ms (None where the trial cannot say)."""

    host_wait_ms: float | None
    device_gap_ms: float | None
    idle_inside_ms: float | None

    @property
    def device_idle_ms(self) -> float | None:
        if self.device_gap_ms is None:
            return None
        return self.device_gap_ms + (self.idle_inside_ms or 0.0)

    def to_dict(self) -> dict[str, float | None]:
        return {**asdict(self), "device_idle_ms": self.device_idle_ms}


WAIT_KEYS = ("host_wait_ms", "device_gap_ms", "idle_inside_ms", "device_idle_ms")


def host_waits_ms(timings: dict[str, Any]) -> list[float] | None:
    """Per kept step, how long the host sat blocked before learning its tokens."""
    known, waits = timings.get("host_known_ms") or [], timings.get("host_wait_start_ms") or []
    if not known or len(waits) != len(known):
        return None
    return [max(0.0, k - w) for k, w in zip(known, waits)]


def device_gaps_ms(timings: dict[str, Any]) -> list[float | None] | None:
    """Per kept step, the device's idle time before it (None for the prefill)."""
    starts, ends, kept = _spans(timings)
    if starts is None:
        return None
    return [None, *(max(0.0, starts[i] - ends[i - 1]) for i in range(1, kept))]


def spans_ms(timings: dict[str, Any]) -> list[float] | None:
    """Per kept step, its device span (end event minus start event)."""
    starts, ends, kept = _spans(timings)
    return None if starts is None else [ends[i] - starts[i] for i in range(kept)]


def step_waits(timings: dict[str, Any], work_ms: float | None, steps: Sequence[int] | None = None) -> StepWaits:
    """The means over `steps` (default: every decode step, 1 .. kept-1) of one trial, with `work_ms` the device work a
    step holds (None: no idle inside is known)."""
    kept = int(timings.get("kept_steps") or len(timings.get("host_known_ms") or []))
    chosen = list(range(1, kept)) if steps is None else list(steps)
    spans = spans_ms(timings)
    inside = [max(0.0, span - work_ms) for span in spans] if spans is not None and work_ms is not None else None
    return StepWaits(_mean_at(host_waits_ms(timings), chosen), _mean_at(device_gaps_ms(timings), chosen),
                     _mean_at(inside, chosen))


def trial_waits(runs: Sequence[dict[str, Any]], work_ms: float | None) -> dict[str, float | None]:
    """Per decode step, the median over a contestant's trials of each trial's means (WAIT_KEYS)."""
    each = [step_waits(run["timings"], work_ms).to_dict() for run in runs]
    return {key: statistics.median(values) if (values := [w[key] for w in each if w[key] is not None]) else None
            for key in WAIT_KEYS}


def step_work_ms(loop_runs: Iterable[Sequence[dict[str, Any]]], kernel_busy_ms: float | None = None
                 ) -> tuple[float | None, str | None]:
    """The device work of one decode step and where it comes from: the kernel measurement's kernel time per step where
    given, else the shortest of the loops' median spans (each loop's runs in `loop_runs`)."""
    if kernel_busy_ms is not None:
        return kernel_busy_ms, KERNEL_MEASUREMENT
    medians = []
    for runs in loop_runs:
        per_trial = [statistics.median(s[1:]) for r in runs if (s := spans_ms(r["timings"])) and len(s) > 1]
        if per_trial:
            medians.append(statistics.median(per_trial))
    return (min(medians), STEP_EVENTS) if medians else (None, None)


def _spans(timings: dict[str, Any]) -> tuple[list[float] | None, list[float] | None, int]:
    starts, ends = timings.get("device_start_ms") or [], timings.get("device_end_ms") or []
    kept = int(timings.get("kept_steps") or 0)
    if not starts or len(ends) != len(starts) or len(starts) < kept:
        return None, None, kept
    return starts, ends, kept


def _mean_at(values: Sequence[float | None] | None, steps: Sequence[int]) -> float | None:
    if values is None:
        return None
    chosen = [values[i] for i in steps if i < len(values) and values[i] is not None]
    return statistics.fmean(chosen) if chosen else None
