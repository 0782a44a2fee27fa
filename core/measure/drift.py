"""How far two processes that run the same settings drift apart, per device kind. Torch-free.

A diff of two runs (core.report.diff.diff_reports; docs/MEASUREMENT.md, "Diffing two runs") widens its
interval by these figures: two processes of one command differ by more than either run's trials show (another
compile's kernels, another machine of the same kind, the clocks, other work on the machine).

Each figure is the largest max/min - 1 between the processes of one command (rounded up), measured by
benchmarks/process_drift.py (its "largest" and "largest_against_control"):
- `rates`: of a contestant's median decode rate. It widens a contestant's interval where no control ran.
- `against_control`: of a contestant's rate over the control's (the naive loop's, trial by trial in one process).
  A control takes out what moves both loops alike; this is what it leaves, and it widens the judgement against it.
To update a figure, run the script on that device kind, put the figure here and its numbers and file in
docs/MEASUREMENT.md ("Diffing two runs").

The CPU has no figure: what moves a CPU process is the load of whatever else runs on that machine, which no figure
measured elsewhere says (this project's shared CPU gave a factor of 17 between processes, 2.9 against the control).
Two CPU runs are not called faster or slower than each other (NOT_COMPARABLE says why, and how to measure one's own
machine); a run's own verdict, which pairs its loops' trials, is where the CPU compares loops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ProcessDrift:
    rates: float
    against_control: float
    measured: str  # where, how, and the file that holds the numbers


PROCESS_DRIFT: dict[str, ProcessDrift] = {
    # Committed GPU reports of identical settings from separate processes, the same command one process at a time
    # (`process_drift.py --reports benchmarks/lab/results/h200-*`), and a fresh measurement at the page's GPU defaults
    # (`process_drift.py -n 6 -- --model synthetic:smollm2-135m --cache static --compile reduce-overhead
    # --max-new-tokens 256 --trials 5 --ignore-eos`). Each figure is rounded up from the largest seen: the largest of
    # a few pairs understates the next pair (the pair that set the rates' figure was itself still called).
    # against_control is set by the default model's shape, where the host's share of a step moves the two loops
    # differently. The figures, the runs and their files: docs/MEASUREMENT.md, "Diffing two runs".
    "cuda": ProcessDrift(
        rates=0.25, against_control=0.12,
        measured="one H200: committed reports of identical settings from separate processes (process_drift.py "
                 "--reports benchmarks/lab/results/h200-*), 2026-11-29 to 2026-12-01, and 5 + 4 processes of the "
                 "page's GPU defaults (benchmarks/lab/results/h200-2026-12-01-c/drift*.json)"),
}
DEVICE_WORDS = {"cuda": "on a GPU", "cpu": "on the CPU"}
DRIFT_COMMAND = "python benchmarks/process_drift.py -n 6 -- <the run's core.bench flags>"
# Why two runs without a measured drift are not called, by where they ran.
NOT_COMPARABLE = {
    "cpu": ("two CPU processes cannot be compared at this precision: the load of everything else on the machine comes "
            "and goes between them, by more than either run's trials show (compare loops inside one run, by its "
            f"verdict; `{DRIFT_COMMAND}` measures how far this machine's processes drift)"),
    None: ("only a GPU's drift between two processes is measured, and the two reports do not both say they ran on "
           "one"),
}


def device_kind(environment: Any) -> str | None:
    """"cuda" or "cpu" from a report's environment, else None (as core.report.explain.report_device_type reads it)."""
    env = environment if isinstance(environment, dict) else {}
    device = env.get("device")
    if env.get("gpu") or (isinstance(device, str) and device.startswith("cuda")):
        return "cuda"
    return "cpu" if isinstance(device, str) and device.startswith("cpu") else None


def drift_between(environment_a: Any, environment_b: Any) -> tuple[str | None, ProcessDrift | None]:
    """The device kind two reports share ("cuda", "cpu", or None where they differ or do not say) and its measured
    drift; None for the drift where there is no figure (the CPU, different or unknown kinds: not_comparable says
    why)."""
    kinds = {device_kind(environment_a), device_kind(environment_b)}
    kind = kinds.pop() if len(kinds) == 1 else None
    return kind, PROCESS_DRIFT.get(kind or "")


def not_comparable(environment_a: Any, environment_b: Any) -> str:
    """Why two runs with no drift figure are not called, in one clause (NOT_COMPARABLE): the CPU's where either ran
    there."""
    on_cpu = "cpu" in {device_kind(environment_a), device_kind(environment_b)}
    return NOT_COMPARABLE["cpu" if on_cpu else None]


def drift_words(drift: float, up_to: bool = False) -> str:
    """A drift as a sentence says it after "the" ("±25%", from 100% up "factor of 3"), or after "up to" ("25%",
    "a factor of 3")."""
    if drift >= 1:
        return f"{'a ' if up_to else ''}factor of {1 + drift:.{0 if drift >= 9 else 1}f}"
    text = f"{drift:.1%}" if drift < 0.1 else f"{drift:.0%}"
    return text if up_to else f"±{text}"


def device_words(kind: str | None) -> str:
    """Where two runs ran, as a sentence says it: "on a GPU", "on the CPU", "on these devices"."""
    return DEVICE_WORDS.get(kind or "", "on these devices")
