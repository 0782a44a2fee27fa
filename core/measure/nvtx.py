"""NVTX ranges for Nsight Systems: one range around each run of a contestant and one per decode step, named by
contestant and step, so that a capture (`nsys profile -t cuda,nvtx ...`) lines up with the page's timeline and the
`--trace` file (docs/MEASUREMENT.md, "NVTX ranges and Nsight Systems").

A step's range is one iteration of its loop: it opens just before the host begins to queue step `i` (the host mark
behind `Timings.host_step_start_ms[i]`, the timeline's and the trace's step `i`; step 0 is prefill) and closes where
step `i + 1`'s opens, or where the loop ends. So it holds the step's queuing and what the loop waits for before the
next one: the naive loop's `.item()` on step `i`, the pipelined loop's read of step `i - lag`.

Ranges are host calls into NVTX and nothing else: nothing read from the device, nothing queued on it, no tensor made.
Off, a loop checks `ranges is None` once a step; on, a step costs one pop and one push of a name made before the
run. NVTX needs CUDA (torch's CPU build raises from every nvtx call): elsewhere nothing here calls it, and
`core.request.options.adapt_to_device` turns the option off with one notice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace

import torch

from core.request.options import BenchRequest, GenerationOptions


def can_range(device_type: str) -> bool:
    """Whether NVTX ranges exist for a run on this kind of device."""
    return device_type == "cuda"


def wanted(options: GenerationOptions, device_type: str) -> bool:
    """Whether a run of `options` on this kind of device gets NVTX ranges: asked for, and where they exist."""
    return options.nvtx and can_range(device_type)


def with_ranges(request: BenchRequest, device_type: str) -> BenchRequest:
    """`request` with NVTX ranges on where they exist (the audited runs, and every run of `core.bench --trace`);
    elsewhere as it is, so that nobody who did not ask for ranges is told that they need CUDA."""
    if request.options.nvtx or not can_range(device_type):
        return request
    return replace(request, options=replace(request.options, nvtx=True))


class StepRanges:
    """The step ranges of one run of `contestant`: "<contestant> prefill", then "<contestant> step <i>" for
    1 <= i < `steps`. Made before the run (the names too), so that a step only pops and pushes."""

    def __init__(self, contestant: str, steps: int) -> None:
        self.names = [f"{contestant} prefill", *(f"{contestant} step {i}" for i in range(1, steps))]
        self._push, self._pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
        self._open = False

    def step(self, index: int) -> None:
        """Close the open step's range, and open step `index`'s."""
        if self._open:
            self._pop()
        self._push(self.names[index])
        self._open = True

    def close(self) -> None:
        """Close the open step's range, if one is open (the run ended, was cancelled or failed)."""
        if self._open:
            self._open = False
            self._pop()


@contextlib.contextmanager
def run_range(name: str, on: bool) -> Iterator[None]:
    """One NVTX range named `name` around the block when `on`; closed however the block ends."""
    if not on:
        yield
        return
    torch.cuda.nvtx.range_push(name)
    try:
        yield
    finally:
        torch.cuda.nvtx.range_pop()
