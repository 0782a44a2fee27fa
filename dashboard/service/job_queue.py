"""The job queue: the waiting jobs (model loads and runs) and the one worker thread that runs them in turn.

Only one job uses the device at a time, and a waiting job knows its place. The server's own jobs (a reload after an
engine restart) and jobs sent back go first; then clients take turns (`Job.share_key`, else the owner: a client's
n-th waiting job runs after every other client's (n-1)-th, and the client just served waits for the others), first
come first within a turn. What running a job means (the engine) and what stopping the running one means are given
to `start`; what happens when a job ends, to the constructor.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from collections.abc import Callable

from dashboard.service.jobs import CANCELLED, QUEUED, Job

MAX_QUEUE = 16
KEEP_FINISHED_JOBS = 64

JobHook = Callable[[Job], None]


def _nothing(job: Job) -> None:
    return None


_NOBODY = object()


def _turn_of(job: Job) -> object:
    return job.share_key if job.share_key is not None else job.owner


class JobQueue:
    """Jobs waiting, the one running, and the finished ones still remembered (the newest KEEP_FINISHED_JOBS)."""

    def __init__(self, max_queue: int = MAX_QUEUE, on_finish: JobHook = _nothing):
        self.max_queue = max_queue
        self._on_finish = on_finish  # called once per job as it ends, before anyone waiting on it wakes
        self._execute: JobHook = _nothing
        self._stop: JobHook = _nothing
        self._queue: collections.deque[Job] = collections.deque()
        self._active: Job | None = None
        self._last_turn: object = _NOBODY  # whose job the worker took last: it waits for the others' turns
        self._jobs: dict[int, Job] = {}
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._closed = False
        self._worker = threading.Thread(target=self._work, name="syncscope-runner", daemon=True)

    def start(self, execute: JobHook, stop: JobHook) -> None:
        """Run each job with `execute` (in the worker thread, one at a time); `stop` asks the running one to end."""
        self._execute, self._stop = execute, stop
        self._worker.start()

    def next_id(self) -> int:
        return next(self._ids)

    # ---- adding and removing

    def add(self, job: Job, front: bool = False) -> Job:
        """Queue `job` (at the front: before everyone else); ValueError when full or closed."""
        with self._cond:
            if self._closed:
                raise ValueError("the server is shutting down")
            if len(self._queue) >= self.max_queue and not job.internal:
                raise ValueError(f"the queue is full ({len(self._queue)} jobs waiting); try again in a minute")
            self._queue.appendleft(job) if front else self._queue.append(job)
            self._jobs[job.id] = job
            self._forget_old_jobs()
            self._cond.notify_all()
        return job

    def put_back(self, job: Job) -> None:
        """A job the engine never received goes back to the front (where a reload that follows overtakes it)."""
        with self._cond:
            job.state, job.t0 = QUEUED, None
            if job not in self._queue:
                self._queue.appendleft(job)
            self._cond.notify_all()

    def take_waiting(self, which: Callable[[Job], bool] | None = None) -> list[Job]:
        """The queued jobs (`which` of them, or all), removed from the queue (to fail them when they cannot run)."""
        with self._cond:
            taken = [job for job in self._queue if which is None or which(job)]
            for job in taken:
                self._queue.remove(job)
            return taken

    def cancel(self, job_id: int, owner: str | None = None, reason: str | None = None) -> bool:
        """Ask a job to stop (queued: dropped at once; running: `stop`). False if not found, done or not yours."""
        with self._cond:
            job = self._jobs.get(job_id)
            if job is None or job.done or (owner is not None and job.owner != owner):
                return False
            job.error = job.error or reason
            if job in self._queue:
                self._queue.remove(job)
                self.finish(job, CANCELLED, reason)
            elif job is self._active:
                self._stop(job)
            return True

    def finish(self, job: Job, state: str, error: str | None) -> None:
        """End a job (once; later calls do nothing)."""
        if job.done:
            return
        job.state, job.error = state, error
        job.t_end = job.t_end or time.perf_counter()
        self._on_finish(job)
        job.finished.set()

    def close(self, reason: str = "the server is shutting down", timeout: float = 30.0) -> None:
        """Cancel what waits, stop the running job and end it at once (the server does not wait for an engine that
        is inside a step it cannot leave, such as loading or compiling), and wait for the worker to end."""
        with self._cond:
            self._closed = True
            for job in self._queue:
                self.finish(job, CANCELLED, reason)
            self._queue.clear()
            if self._active is not None:
                self._stop(self._active)
                self.finish(self._active, CANCELLED, reason)
            self._cond.notify_all()
        if self._worker.is_alive():
            self._worker.join(timeout=timeout)

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- reading

    def get(self, job_id: int) -> Job | None:
        return self._jobs.get(job_id)

    def remembered(self) -> list[Job]:
        """Every job still remembered: queued, running, and the newest finished ones."""
        with self._cond:
            return list(self._jobs.values())

    def position(self, job: Job) -> int:
        """How many visitors' jobs run or wait ahead of this one (0: it is running or next); the server's own (a
        reload) are not counted."""
        with self._cond:
            if job is self._active or job.done:
                return 0
            order = self._ordered()
            ahead = order[:order.index(job)] if job in order else []
            active = self._active is not None and not self._active.done and not self._active.internal
            return sum(not j.internal for j in ahead) + active

    def pending(self) -> list[Job]:
        """The running job, then the queued ones in the order they will run (a job that just finished is no longer
        pending)."""
        with self._cond:
            return [job for job in (self._active, *self._ordered()) if job is not None and not job.done]

    # ---- the worker

    def _ordered(self) -> list[Job]:
        """The waiting jobs in the order they will run (see the module)."""
        turns: collections.Counter[object] = collections.Counter({self._last_turn: 1})
        ranked = []
        for arrival, job in enumerate(self._queue):
            if job.internal or job.attempts:
                ranked.append((-1, arrival, job))
                continue
            turn = _turn_of(job)
            ranked.append((turns[turn], arrival, job))
            turns[turn] += 1
        return [job for _, _, job in sorted(ranked, key=lambda rank: rank[:2])]

    def _forget_old_jobs(self) -> None:
        finished = [j for j in self._jobs.values() if j.done]
        for job in finished[: max(0, len(finished) - KEEP_FINISHED_JOBS)]:
            del self._jobs[job.id]

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                job = self._active = self._ordered()[0]
                self._queue.remove(job)
                self._last_turn = _turn_of(job)
            try:
                self._execute(job)
            finally:
                with self._cond:
                    self._active = None
                    self._cond.notify_all()
