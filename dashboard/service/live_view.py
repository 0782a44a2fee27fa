"""What the page shows while a job runs: streaming text, live tokens/s, spans, device samples, a status line.

Everything here happens in the server process, on events the engine already sent; none of it touches the decode
loop. Times are `time.perf_counter()` values, which on one machine are the same clock in every process, so the
engine's event stamps, the server's job start and the NVML samples share one time axis.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.phases import WARMUP, phase_named
from core.request.options import NO_CHECK
from dashboard.service.jobs import CANCELLED, DONE, LOAD, LOADING, QUEUED, RUNNING, Job
from dashboard.service.page_record import LiveSeries
from dashboard.service.rate_series import RATE_WINDOW, window_rate

SERIES_MIN_DT_S = 0.02   # a point of the live curve every 20 ms ...
SERIES_MIN_STEPS = 4     # ... or every 4 steps, whichever comes first


class TextDecoder:
    """Decodes token ids in the server with the engine's tokenizer (sent as tokenizer.json), without transformers."""

    def __init__(self, tokenizer_json: str | None, cleanup: bool = False):
        self.tokenizer: Any = None
        self.cleanup = cleanup
        if tokenizer_json:
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_str(tokenizer_json)

    @property
    def available(self) -> bool:
        return self.tokenizer is not None

    def count_tokens(self, text: str) -> int:
        """How many tokens `text` is without a chat template (0 when only the engine can tokenize): the least a
        prompt of this text takes, since a template only adds tokens."""
        if self.tokenizer is None:
            return 0
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return f"[{len(ids)} tokens; this tokenizer can only be decoded by the engine, after each trial]"
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return _clean_up_spaces(text) if self.cleanup else text


def _clean_up_spaces(text: str) -> str:
    """transformers' clean_up_tokenization, for the WordPiece-style tokenizers that ask for it."""
    for before, after in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                          (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(before, after)
    return text


@dataclass
class PaneState:
    """One contestant's stream, rebuilt from the job's events."""

    trial: int | None = None
    warmup: bool = False
    ids: list[int] = field(default_factory=list)       # sequence 0 of the current trial
    tokens: int = 0                                     # all sequences of the current trial
    t_start: float | None = None
    t_last: float | None = None
    final_text: str | None = None
    final_rate: float | None = None
    window: collections.deque = field(default_factory=lambda: collections.deque(maxlen=RATE_WINDOW + 1))
    series_t: list[float | None] = field(default_factory=list)
    series_rate: list[float | None] = field(default_factory=list)
    since_point: int = 0
    decoded_len: int = -1
    decoded: str = ""


class LiveView:
    """Turns a job's raw events into what the page shows."""

    def __init__(self, job: Job, decoder: Callable[[], TextDecoder | None], monitor: Any,
                 position: Callable[[Job], int]):
        self.job = job
        self.decoder = decoder
        self.monitor = monitor
        self.position = position
        self.cursor = 0
        self.panes: dict[str, PaneState] = {name: PaneState() for name in job.request.contestants} \
            if job.request else {}
        self.spans: list[dict[str, Any]] = []
        self.runs: list[dict[str, Any]] = []  # each timed trial's run as it ends: the timeline chart's input
        self.phase: dict[str, Any] | None = None
        self.lock = threading.Lock()

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            self._consume()
            job = self.job
            return {
                "id": job.id, "state": job.state, "status": status_line(job, self.position(job), self.phase),
                "position": self.position(job), "error": job.error, "notices": list(job.notices),
                "model": job.model, "panes": self._panes(), "report": job.report, "runs": list(self.runs),
                "batch": job.request.batch if job.request else 1,
                "phase": self.phase.get("phase") if self.phase and not job.done else None,
                **self.live_series(final=job.done, locked=True),
            }

    def live_series(self, final: bool = False, locked: bool = False) -> LiveSeries:
        """Series, spans and monitor samples, with times in seconds since the job started."""
        if not locked:
            with self.lock:
                self._consume()
                return self.live_series(final, locked=True)
        t0 = self.job.t0 or time.perf_counter()
        end = (self.job.t_end if final and self.job.t_end else time.perf_counter()) - t0
        spans = [{**s, "t1": s["t1"] if s["t1"] is not None else end} for s in self.spans]
        return {"t_end": end, "series": self._series(), "spans": spans, "monitor": self._monitor(t0, end)}

    def _consume(self) -> None:
        events = self.job.events
        new, self.cursor = events[self.cursor:], len(events)
        for stamp, event in new:
            self._apply(stamp, event)

    def _apply(self, stamp: float, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "tokens":
            self._on_tokens(event)
        elif kind == "phase":
            self._close_span(stamp)
            self.phase = event
            self.spans.append({"contestant": event["contestant"], "phase": event["phase"],
                               "trial": event.get("trial"), "t0": stamp - self._t0(), "t1": None})
            phase = phase_named(event["phase"])
            if phase is not None and phase.streams:  # an untimed extra run leaves the panes as its trials did
                self._start_pass(event["contestant"], event.get("trial"), stamp, warmup=phase is WARMUP)
        elif kind == "run":
            self._close_span(stamp)
            pane = self.panes.setdefault(event["contestant"], PaneState())
            pane.final_text = event["texts"][0] if event.get("texts") else ""
            pane.final_rate = event["timings"].get("decode_tokens_per_s") or event["timings"]["tokens_per_s"]
            self.runs.append({key: event.get(key) for key in ("contestant", "trial", "order", "timings")})

    def _t0(self) -> float:
        return self.job.t0 or 0.0

    def _close_span(self, stamp: float) -> None:
        if self.spans and self.spans[-1]["t1"] is None:
            self.spans[-1]["t1"] = stamp - self._t0()

    def _start_pass(self, name: str, trial: int | None, stamp: float, warmup: bool) -> None:
        pane = self.panes.setdefault(name, PaneState())
        if pane.series_t and not warmup:
            pane.series_t.append(None)
            pane.series_rate.append(None)
        pane.trial, pane.warmup, pane.ids, pane.tokens = trial, warmup, [], 0
        pane.t_start, pane.t_last, pane.final_text = stamp, None, None
        # The window opens at the trial's first token, not at its start: prefill would make each curve ramp up.
        pane.window.clear()

    def _on_tokens(self, event: dict[str, Any]) -> None:
        pane = self.panes.setdefault(event["contestant"], PaneState())
        tokens = event["tokens"]
        count = sum(1 for token in tokens if token is not None)
        if tokens and tokens[0] is not None:
            pane.ids.append(tokens[0])
        pane.tokens += count
        stamp = event["host_time_s"]
        pane.t_last = stamp
        if pane.warmup or event["contestant"] == NO_CHECK:  # untimed, or all tokens at the end: no live rate
            return
        pane.window.append((stamp, count))
        last_point = pane.series_t[-1] if pane.series_t else None
        now = stamp - self._t0()
        pane.since_point += 1
        due = last_point is None or now - last_point >= SERIES_MIN_DT_S or pane.since_point >= SERIES_MIN_STEPS
        rate = window_rate(list(pane.window)) if due else None
        if rate is not None:
            pane.since_point = 0
            pane.series_t.append(now)
            pane.series_rate.append(rate)

    def _panes(self) -> dict[str, dict[str, Any]]:
        out = {}
        for name, pane in self.panes.items():
            # A cancelled or failed job streams no more: its panes are no longer live (nor warming up).
            live = pane.final_text is None and (pane.trial is not None or pane.warmup) and not self.job.done
            rate = None if pane.warmup else pane.final_rate
            if live and not pane.warmup and pane.t_last and pane.t_start and pane.t_last > pane.t_start:
                rate = pane.tokens / (pane.t_last - pane.t_start)
            out[name] = {"text": pane.final_text if pane.final_text is not None else self._decode(pane),
                         "tokens_per_s": rate, "trial": pane.trial, "live": live, "warmup": pane.warmup,
                         "tokens": pane.tokens}
        report = self.job.report
        if report:
            for name, summary in report["summary"].items():
                out.setdefault(name, {"text": "", "trial": None, "live": False, "warmup": False, "tokens": 0})
                out[name]["tokens_per_s"] = summary.get("decode_tokens_per_s") or summary["tokens_per_s"]
        return out

    def _decode(self, pane: PaneState) -> str:
        decoder = self.decoder()
        if decoder is None or not pane.ids:
            return ""
        if pane.decoded_len != len(pane.ids):
            pane.decoded = decoder.decode(pane.ids)
            pane.decoded_len = len(pane.ids)
        return pane.decoded

    def _series(self) -> dict[str, dict[str, list[float | None]]]:
        return {name: {"t": list(p.series_t), "tokens_per_s": list(p.series_rate)}
                for name, p in self.panes.items() if p.series_t}

    def _monitor(self, t0: float, end: float) -> dict[str, Any]:
        monitor = self.monitor
        if monitor is None:
            return {"source": "none", "description": "Utilization monitoring is off.", "samples": []}
        samples = [{**s, "t": s["t"] - t0} for s in monitor.samples(since=t0 - 1.0) if s["t"] - t0 <= end + 0.5]
        return {"source": monitor.source, "description": monitor.description, "samples": samples}


def status_line(job: Job, ahead: int, phase: dict[str, Any] | None = None) -> str:
    """One sentence on where a job stands (plain text: the page escapes it)."""
    if job.state == QUEUED:
        return f"Waiting for the device: {ahead} job{'s' if ahead != 1 else ''} ahead of yours in the queue."
    if job.state == LOADING:
        return f"{job.progress or f'Loading model {job.model}'}…"
    if job.state == RUNNING:
        return _running_line(job, phase)
    if job.state == DONE:
        took = (job.t_end or 0) - (job.t0 or 0)
        return f"Loaded {job.model}." if job.work == LOAD else f"Done in {took:.1f} s."
    if job.state == CANCELLED:
        said = f"Cancelled: {job.error}" if job.error else "Cancelled."
        return f"{said} {_kept_rounds(job.report)}" if job.report else said
    return f"Failed: {job.error}"


def _running_line(job: Job, event: dict[str, Any] | None) -> str:
    """What the running job does, from the last phase event (core.phases words every phase)."""
    if event is None:
        return "Starting…"
    phase = phase_named(event.get("phase"))
    name = event.get("contestant", "?")
    if phase is None:  # an engine newer than this page: say what it said, plainly
        return f"Running {name}: {event.get('phase')}…"
    trial = event.get("trial") if isinstance(event.get("trial"), int) else 0
    trials = job.request.trials if job.request else 1
    if phase is WARMUP:
        compiling = job.request is not None and job.request.options.compile != "off"
        detail = "compiling can take a minute" if compiling else "compilation and set-up stay out of the timings"
    else:
        more = job.request is not None and job.request.min_seconds and trial + 1 >= trials
        detail = " (more rounds follow until each contestant has run the minimum time)" if more else ""
    return phase.doing.format(contestant=name, trial=trial + 1, trials=max(trials, trial + 1), detail=detail)


def _kept_rounds(report: dict[str, Any]) -> str:
    """What a run cancelled after its first round keeps (core.compare.CancelledRun)."""
    facts = report["interruption"]
    done, planned = facts.get("trials_done"), facts.get("trials_planned")
    rounds = f"{done} of {planned} rounds" if isinstance(done, int) and isinstance(planned, int) else "the rounds"
    phase = phase_named(facts.get("phase"))
    if phase is not None and phase.after_trials:
        return f"Every round of trials had finished ({rounds}); the {phase.noun} had not, and is left out."
    return f"The trials of the {rounds} that had finished are kept: the summary is drawn from them."
