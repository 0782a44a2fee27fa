"""The phases of a run, defined once (torch-free).

`core.compare.compare` sends `{"type": "phase", "phase": <id>, "contestant": ..., "t": ...}` as each phase of a
contestant begins (a trial's event also carries "trial": its round). Everything that names a phase reads this list:
the page's status line, its live view and spans, the charts' shading, the check of a saved page record, the CLI's
`--progress` lines, and an interrupted report's `interruption.phase`. A phase added here must say how the page
words it (`doing`), so a new measurement cannot reach the page unrendered (tests/test_phases.py renders each).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Phase:
    """One phase. `doing` is the page's status line while it runs ({contestant}, {trial}, {trials} and {detail}
    are filled in); `after_trials`: an untimed extra run after every round of trials, so a cut there keeps them."""

    id: str
    noun: str
    timed: bool
    after_trials: bool
    doing: str
    streams: bool = False  # its run streams tokens to the page's panes

    def event(self, contestant: str, t: float, trial: int | None = None) -> dict[str, Any]:
        """The event compare() sends as this phase of `contestant` begins."""
        event: dict[str, Any] = {"type": "phase", "phase": self.id, "contestant": contestant, "t": t}
        if self.id == TRIAL_ID:
            event["trial"] = trial
        return event


TRIAL_ID = "trial"
WARMUP = Phase("warmup", "warm-up", timed=False, after_trials=False, streams=True,
               doing="Warming up {contestant} (untimed warm-up: {detail}; its text streams, its speed is not "
                     "counted)…")
TRIAL = Phase(TRIAL_ID, "trial", timed=True, after_trials=False, streams=True,
              doing="Timing {contestant}: trial {trial} of {trials}{detail}…")
AUDIT = Phase("audit", "sync audit", timed=False, after_trials=True,
              doing="Finding {contestant}'s syncs: one more run under the sync audit (untimed; every round of "
                    "trials is done)…")
KERNEL_MEASUREMENT = Phase("kernel measurement", "kernel measurement", timed=False, after_trials=True,
                           doing="Measuring {contestant}'s kernels: one more run under CUPTI (untimed; every "
                                 "round of trials is done)…")
PROFILE = Phase("profile", "profile", timed=False, after_trials=True,  # `core.bench --profile` only, after compare
                doing="Profiling {contestant}: one more run under torch.profiler (untimed)…")

# what compare() sends, in the order it runs them
PHASES: tuple[Phase, ...] = (WARMUP, TRIAL, AUDIT, KERNEL_MEASUREMENT)
PHASE = {phase.id: phase for phase in (*PHASES, PROFILE)}
# interruption.phase of older reports: the trials were "trials", the audit "sync audit" (before this list), the kernel
# measurement "kernel trial".
_OLD_IDS = {"trials": TRIAL_ID, "sync audit": AUDIT.id, "kernel trial": KERNEL_MEASUREMENT.id}


def phase_named(name: Any) -> Phase | None:
    """The phase an event or a report names (old reports' names too), or None for a name no phase has."""
    if not isinstance(name, str):
        return None
    return PHASE.get(_OLD_IDS.get(name, name))
