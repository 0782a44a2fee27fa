"""The engine supervisor: runs the queue's jobs on the engine processes and keeps those processes going.

It sends each job to the engine (engine.client), turns the engine's replies into the job's state, and knows what
the engine has loaded. When the engine dies or hangs, the job it was running fails with the reason (or, if the
engine never received it, goes back to the queue), a new engine starts, the model is loaded again, and the queue
goes on; an engine that keeps dying (RestartPolicy) is given up on, and the jobs waiting for it fail with the reason.
No torch, gradio or plotly here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from dashboard.job_queue import JobQueue
from dashboard.jobs import CANCELLED, COMPARE, DONE, FAILED, LOAD, LOADING, QUEUED, RUNNING, Job
from dashboard.limits import Limits
from dashboard.live_view import TextDecoder
from dashboard.model_policy import ModelPolicy
from engine.client import EngineClient, EngineLost
from engine.protocol import (
    Compare,
    Done,
    Events,
    Failed,
    FailureCategory,
    JobCancelled,
    Load,
    Loaded,
    Progress,
    Ready,
    Reply,
    Started,
    job_of,
)

RESTARTS_ALLOWED = 3
RESTART_WINDOW_S = 300.0

logger = logging.getLogger("syncscope")


class RestartPolicy:
    """At most `allowed` restarts within `window_s` seconds; a job goes back to the queue at most `allowed` times."""

    def __init__(self, allowed: int = RESTARTS_ALLOWED, window_s: float = RESTART_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic):
        self.allowed, self.window_s, self.clock = allowed, window_s, clock
        self._losses: list[float] = []

    def lost(self) -> bool:
        """Count a loss of the engine; True if it may be restarted."""
        now = self.clock()
        self._losses = [t for t in self._losses if now - t < self.window_s] + [now]
        return len(self._losses) <= self.allowed

    @property
    def recent_losses(self) -> int:
        return len(self._losses)

    def may_retry(self, job: Job) -> bool:
        """Count one more attempt to send `job`; False once it has had its share."""
        job.attempts += 1
        return job.attempts <= self.allowed


class EngineSupervisor:
    """The engine processes as the queue sees them: what they have loaded, why they are down, and every job's end
    that the engine decides. `on_report(job)` is told of a comparison's report before the job is marked done."""

    def __init__(self, queue: JobQueue, models: ModelPolicy, limits: Limits, on_report: Callable[[Job], None], *,
                 device: str | None = None, dtype: str | None = None, tp: int = 1, hf_modules: bool = False,
                 engine: dict[str, Any] | None = None, policy: RestartPolicy | None = None):
        self.queue, self.models, self.limits, self.on_report, self.tp = queue, models, limits, on_report, tp
        self.policy = policy or RestartPolicy()
        self.loaded: Loaded | None = None  # without its tokenizer_json: `decoder` holds that
        self.decoder: TextDecoder | None = None
        self.trouble: str | None = None  # why the engine is down, or was restarted
        self.last_load_error: str | None = None  # the startup load's (or a reload's) failure: the banner says it
        self._wanted_model: str | None = None  # loaded again after a restart
        self._cancel_requested: set[int] = set()
        self.client = EngineClient(self._on_message, self._on_lost, device=device, dtype=dtype, world_size=tp,
                                   hf_modules=hf_modules, **(engine or {}))

    @property
    def model_spec(self) -> str | None:
        return self.loaded.spec if self.loaded else None

    def start(self) -> None:
        self.client.start()

    def close(self) -> None:
        self.client.close()

    # ---- running a job (the queue's worker thread)

    def execute(self, job: Job) -> None:
        """Send `job` to the engine and wait until it ends (or goes back to the queue)."""
        job.t0 = time.perf_counter()
        job.state = LOADING if job.work == LOAD or (job.model and job.model != self.model_spec) else RUNNING
        if not self._engine_ready(job):
            return
        try:
            self.client.submit(_request(job))
        except EngineLost as exc:
            self._retry_after_restart(job, exc)
            return
        self._await(job)

    def stop(self, job: Job) -> None:
        """Ask the running job to stop within one decode step (the engine is restarted if it does not)."""
        self._cancel_requested.add(job.id)
        self.client.cancel(job.id)

    def _engine_ready(self, job: Job) -> bool:
        """Wait for the engine's hello (a fresh engine takes seconds to import torch); False if the job ended."""
        while not self.client.hello_event.wait(0.25):
            if job.done:
                return False
            if self.trouble and not self.client.alive:
                self._fail(job, self.trouble)
                return False
        return not job.done

    def _retry_after_restart(self, job: Job, exc: EngineLost) -> None:
        """The engine died just before this job was sent: back to the queue it goes."""
        time.sleep(0.5)  # let the reader notice the death and start the new engine
        if not self._requeue(job):
            self._fail(job, self.trouble or f"the engine process is not running ({exc})")

    def _requeue(self, job: Job) -> bool:
        if not self.policy.may_retry(job):
            return False
        self.queue.put_back(job)
        return True

    def _await(self, job: Job) -> None:
        limit = self.limits.max_run_s
        while not job.wait(0.25):
            if job.state == QUEUED:  # sent back to the queue after the engine it was sent to died
                return
            if limit and job.work == COMPARE and time.perf_counter() - (job.t0 or 0) > limit:
                self.queue.cancel(job.id, reason=f"stopped after {limit:.0f} s: this server limits the length of a run")

    def _fail(self, job: Job, error: str) -> None:
        if job.done:
            return
        logger.error("%s %d (%s) failed: %s", job.work, job.id, job.model or self.model_spec, error)
        if job.work == LOAD and job.owner is None and job.model in self.models.named:
            self.last_load_error = f"Could not load {job.model}: {error}"  # the startup load, or a reload
        self.queue.finish(job, FAILED, error)

    # ---- what the engine says (its reader threads)

    def _on_message(self, message: Reply) -> None:
        if isinstance(message, Ready):
            logger.info("engine process ready in %.1f s (start and imports, %d rank(s))", message.start_s, self.tp)
            return
        job_id = job_of(message)
        job = self.queue.get(job_id) if job_id is not None else None
        if isinstance(message, Loaded):
            logger.info("loaded %s on %s in %.1f s", message.spec, message.device, message.load_s)
            self._loaded(message)
            if job is not None and job.work == COMPARE:
                job.state = RUNNING
        if job is None:
            if isinstance(message, Failed):  # the engine could not start
                self.trouble = f"the engine process could not start: {message.error}"
                logger.error("%s", self.trouble)
            return
        if isinstance(message, Started):
            job.started = True
        elif isinstance(message, Progress):
            job.progress, job.state = message.text, LOADING
        elif isinstance(message, Events):
            job.state = RUNNING
            job.add_events(message.events)
        elif isinstance(message, Done):
            if job.work == COMPARE:
                job.report = message.report
                self.on_report(job)
            self.queue.finish(job, DONE, None)
        elif isinstance(message, JobCancelled):
            self.queue.finish(job, CANCELLED, job.error)
        elif isinstance(message, Failed):
            self._failed(job, message)

    def _loaded(self, message: Loaded) -> None:
        self.decoder = TextDecoder(message.tokenizer_json, message.tokenizer_cleanup)
        self.loaded = replace(message, tokenizer_json=None)
        self._wanted_model, self.trouble, self.last_load_error = message.spec, None, None

    def _failed(self, job: Job, message: Failed) -> None:
        error = message.error or "failed"
        if message.loaded is None and self.loaded is not None:
            error += f"; the previous model ({self.model_spec}) was unloaded to make room, so none is loaded now"
            self.loaded, self.decoder = None, None
        elif message.category == FailureCategory.INPUT and job.model and job.model != self.model_spec:
            error += f"; still using {self.model_spec}" if self.model_spec else "; no model is loaded"
        self._fail(job, error)

    def _on_lost(self, job_id: int | None, reason: str) -> None:
        restarting = self.policy.lost() and not self.queue.closed
        model = self._wanted_model
        self.loaded, self.decoder = None, None
        shown = self.models.public_name(model)
        after = (f"; a new engine was started and is loading {shown} again" if restarting and model else
                 "; a new engine was started" if restarting else
                 f"; it failed {self.policy.recent_losses} times in {self.policy.window_s:.0f} s, so it was not "
                 "restarted")
        self.trouble = f"The engine process {reason}{after}."
        cancelling = job_id is not None and job_id in self._cancel_requested
        logger.error("engine process lost%s (job %s): %s%s", " after a cancel" if cancelling else "", job_id,
                     reason, after)
        job = self.queue.get(job_id) if job_id is not None else None
        if job is not None and not job.done:
            self._end_lost_job(job, reason, after, restarting, cancelling)
        if restarting:
            logger.warning("restarting the engine process (restart %d of %d allowed in %.0f s)",
                           self.policy.recent_losses, self.policy.allowed, self.policy.window_s)
            self.client.restart()
            if model:
                self.queue.add(Job(id=self.queue.next_id(), work=LOAD, owner=None, model=model, internal=True,
                                   progress=f"Loading model {model} again after an engine restart"), front=True)
        else:
            for queued in self.queue.take_waiting():
                self._fail(queued, self.trouble)

    def _end_lost_job(self, job: Job, reason: str, after: str, restarting: bool, cancelling: bool) -> None:
        if not job.started and restarting and self._requeue(job):
            return  # it never reached the engine: it runs on the new one
        if cancelling:
            self.queue.finish(job, CANCELLED, f"the engine process {reason}")
        else:
            self._fail(job, f"the engine process {reason} during this job{after}")


def _request(job: Job) -> Load | Compare:
    """The engine's request for a job."""
    if job.work == LOAD:
        assert job.model is not None, "a load names its model"
        return Load(job=job.id, spec=job.model)
    assert job.request is not None, "a comparison carries its request"
    return Compare(job=job.id, spec=job.model, request=job.request)
