"""The pages that stream a run, counted per job: when the last one goes away (a closed tab, a lost connection) and
none comes back within the grace period, the run is cancelled and the device freed for others; a reload reconnects
in time and the run goes on. Gradio-free: the Compare and Under load tabs share one rule."""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from dashboard.service.jobs import Job

RECONNECT_GRACE_S = 15.0


class Cancels(Protocol):
    def cancel(self, job_id: int, owner: str | None = None, reason: str | None = None) -> bool: ...


class JobWatchers:
    """How many pages stream each job; `watching(job)` is one page's stream of it."""

    def __init__(self, runner: Cancels, grace_s: float = RECONNECT_GRACE_S):
        self.runner = runner
        self.grace_s = grace_s
        self._pages: collections.Counter[int] = collections.Counter()  # job id -> pages streaming it
        self._leaves: collections.Counter[int] = collections.Counter()  # job id -> times its last page left
        self._lock = threading.Lock()

    def count(self, job: Job) -> int:
        with self._lock:
            return self._pages[job.id]

    @contextmanager
    def watching(self, job: Job) -> Iterator[None]:
        with self._lock:
            self._pages[job.id] += 1
        try:
            yield
        finally:
            self._release(job)

    def _release(self, job: Job) -> None:
        """A page stopped streaming `job`; if none streams it `grace_s` later, cancel it."""
        with self._lock:
            self._pages[job.id] -= 1
            if self._pages[job.id] > 0:
                return
            if job.done:
                self._forget(job)
                return
            self._leaves[job.id] += 1
            leave = self._leaves[job.id]
        timer = threading.Timer(self.grace_s, self._cancel_if_unwatched, args=(job, leave))
        timer.daemon = True
        timer.start()

    def _cancel_if_unwatched(self, job: Job, leave: int) -> None:
        """Cancel `job` unless a page streams it now, or came and left again since `leave` (its own timer runs)."""
        with self._lock:
            if self._pages[job.id] > 0 or self._leaves[job.id] != leave:
                return
            self._forget(job)
        if not job.done:
            self.runner.cancel(job.id, reason=f"its page was closed and not opened again within {self.grace_s:.0f} "
                                              f"s, so the device was freed for others")

    def _forget(self, job: Job) -> None:
        self._pages.pop(job.id, None)
        self._leaves.pop(job.id, None)
