"""What the Under load tab shows while a run under load goes: its status line (the point, the phase, the contestant and
the trial, as core.phases words them) and each timed trial's numbers as its `load-run` event arrives.

The engine's events (core.load.protocol.run_load) are read here, in the server, as dashboard.service.live_view reads a
Compare run's: `solo` while the reference decodes run, `point` as each (slots, rate) begins, `phase` as each
contestant's warm-up, trial, audit or kernel measurement begins, `load-run` after each timed trial, `load-tokens` as
a loop learns a request's tokens. No torch, gradio or plotly here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from core.phases import WARMUP, phase_named
from dashboard.service.jobs import RUNNING, Job
from dashboard.service.live_view import status_line

# What the live chart and the tab keep of each load-run event (core.load.stats.run_summary's keys among them).
RUN_KEYS = ("contestant", "trial", "slots", "rate", "tokens_per_s", "requests_per_s", "ttft_ms_p50", "ttft_ms_p99",
            "tpot_ms_p50", "wasted_slot_steps")


class LoadLiveView:
    """Turns a run under load's events into its status line and its trials so far."""

    def __init__(self, job: Job, position: Callable[[Job], int]):
        self.job = job
        self.position = position
        self.cursor = 0
        self.points = job.load_request.points() if job.load_request is not None else []
        self.point: dict[str, Any] | None = None
        self.phase: dict[str, Any] | None = None
        self.solo: dict[str, Any] | None = None
        self.tokens = 0  # tokens the current pass's loop has learned so far (its warm-up and first trial stream them)
        self.runs: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            self._consume()
            job = self.job
            ahead = self.position(job)
            status = self._running_line() if job.state == RUNNING else status_line(job, ahead)
            return {"id": job.id, "state": job.state, "status": status, "position": ahead, "error": job.error,
                    "model": job.model, "phase": (self.phase or {}).get("phase"), "runs": list(self.runs),
                    "report": job.report}

    def _consume(self) -> None:
        events = self.job.events
        new, self.cursor = events[self.cursor:], len(events)
        for _, event in new:
            self._apply(event)

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "solo":
            self.solo = event
        elif kind == "point":
            self.point, self.phase, self.solo = event, None, None
        elif kind == "phase":
            self.phase, self.tokens = event, 0
        elif kind == "load-tokens":
            self.tokens += len(event.get("tokens") or ())
        elif kind == "load-run":
            self.runs.append({key: event.get(key) for key in RUN_KEYS})

    def _running_line(self) -> str:
        if self.phase is None and self.solo is not None:
            return (f"Decoding request {self.solo.get('request', 0) + 1} of {self.solo.get('of', '?')} alone (the "
                    "reference each contestant's tokens are checked against; untimed)…")
        if self.phase is None:
            where = f" {self._where()}" if self.point else ""
            return f"Starting{where}…"
        return f"{self._where()}: {self._doing()}"

    def _where(self) -> str:
        """The point running, and its place among the run's points: "B=4, all at once (point 1 of 3)"."""
        point = self.point or {}
        slots, rate = point.get("slots"), point.get("rate")
        said = f"B={slots}, {'all at once' if not rate else f'{rate:g} requests/s'}"
        if len(self.points) > 1 and (slots, rate) in self.points:
            said += f" (point {self.points.index((slots, rate)) + 1} of {len(self.points)})"
        return said

    def _doing(self) -> str:
        """The phase as core.phases words it, with how many tokens the pass has learned so far."""
        event = self.phase or {}
        phase = phase_named(event.get("phase"))
        name = str(event.get("contestant", "?"))
        if phase is None:  # an engine newer than this page: say what it said, plainly
            return f"running {name}: {event.get('phase')}…"
        request = self.job.load_request
        trials = request.trials if request is not None else 1
        trial = event.get("trial") if isinstance(event.get("trial"), int) else 0
        learned = f", {self.tokens:,} tokens so far" if self.tokens and phase.streams else ""
        if phase is WARMUP:  # core.phases' line speaks of the Compare tab's text panes, which this tab has not
            compiling = request is not None and request.options.compile != "off"
            detail = "compiling can take a minute" if compiling else "compilation and set-up stay out of the timings"
            return f"Warming up {name} (untimed: {detail}{learned})…"
        text = phase.doing.format(contestant=name, trial=trial + 1, trials=max(trials, trial + 1), detail="")
        return f"{text.removesuffix('…')}{f' ({learned[2:]})' if learned else ''}…"
