"""The engine supervisor: runs the queue's jobs on the engine processes and keeps those processes going.

It sends each job to the engine (engine.client), turns the engine's replies into the job's state, and knows what
the engine has loaded. When the engine dies or hangs, the job it was running fails with the reason (or, if the
engine never received it, goes back to the queue), a new engine starts (at once when the server stopped it on
purpose, after a growing delay when it died on its own: RestartPolicy), the model is loaded again, and the queue
goes on. A model that keeps killing its engine is unloaded, and the default model is served instead.
No torch, gradio or plotly here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from core.models.specs import quote_spec
from dashboard.service.job_queue import JobQueue
from dashboard.service.jobs import (
    CANCELLED,
    COMPARE,
    DONE,
    FAILED,
    LOAD,
    LOADING,
    QUEUED,
    RUNNING,
    RUNS,
    UNDER_LOAD,
    Job,
)
from dashboard.service.limits import Limits
from dashboard.service.live_view import TextDecoder
from dashboard.service.model_policy import ModelPolicy
from engine.client import EngineClient, EngineLoss, EngineLost
from engine.inprocess import InProcessEngineClient
from engine.protocol import (
    Compare,
    Done,
    Events,
    Failed,
    FailureCategory,
    JobCancelled,
    JobRequest,
    Load,
    ModelFacts,
    Progress,
    Ready,
    Reply,
    Started,
    UnderLoad,
    job_of,
)

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0
HEALTHY_S = 120.0  # an engine that stays up this long after a restart ends the run of losses
RETRIES_ALLOWED = 3  # times a job that never reached the engine goes back to the queue
CULPRIT_LOSSES = 3  # losses in a row with one model (not the default) that unload it
SHUTDOWN_GRACE_S = 3.0  # how long a server shutting down waits for its engine to exit before killing it

logger = logging.getLogger("syncscope")

Schedule = Callable[[float, Callable[[], None]], None]


class RestartPolicy:
    """How long to wait before starting the engine again after a real loss: BACKOFF_FIRST_S, then twice as long
    after each loss in a row, at most BACKOFF_MAX_S; an engine that stays up `healthy_s` after its restart ends
    the run (`streak`). Restarts the server chose (a cancel the engine could not honour) never come here.
    A job that never reached the engine goes back to the queue at most `retries` times."""

    def __init__(self, first_s: float = BACKOFF_FIRST_S, max_s: float = BACKOFF_MAX_S,
                 healthy_s: float = HEALTHY_S, retries: int = RETRIES_ALLOWED,
                 clock: Callable[[], float] = time.monotonic):
        self.first_s, self.max_s, self.healthy_s, self.retries, self.clock = first_s, max_s, healthy_s, retries, clock
        self.streak = 0
        self._restart_at: float | None = None

    def lost(self) -> float:
        """Count a real loss of the engine; the seconds to wait before starting it again."""
        now = self.clock()
        if self._restart_at is not None and now - self._restart_at >= self.healthy_s:
            self.streak = 0
        self.streak += 1
        delay = min(self.max_s, self.first_s * 2 ** (self.streak - 1))
        self._restart_at = now + delay
        return delay

    def may_retry(self, job: Job) -> bool:
        """Count one more attempt to send `job`; False once it has had its share."""
        job.attempts += 1
        return job.attempts <= self.retries


def start_later(delay_s: float, work: Callable[[], None]) -> None:
    """Run `work` in `delay_s` seconds, on a timer thread (at once, in this thread, when there is no delay)."""
    if delay_s <= 0:
        work()
        return
    timer = threading.Timer(delay_s, work)
    timer.daemon = True
    timer.name = "engine-restart"
    timer.start()


class EngineSupervisor:
    """The engine processes as the queue sees them: what they have loaded, why they are down, and every job's end
    that the engine decides. `on_report(job)` is told of a run's report before the job is marked done.

    After a loss: a restart the server chose (a cancel that had to kill the engine) starts a new engine at once; a
    real loss starts one after the policy's backoff (`schedule(delay, start)`), and a model other than
    `default_model` that was in use for CULPRIT_LOSSES real losses in a row is unloaded, refused from then on, and the
    default loaded instead. `trouble` (the banner's line) and the log say which of these happened."""

    def __init__(self, queue: JobQueue, models: ModelPolicy, limits: Limits, on_report: Callable[[Job], None], *,
                 device: str | None = None, dtype: str | None = None, tp: int = 1, hf_modules: bool = False,
                 engine: dict[str, Any] | None = None, policy: RestartPolicy | None = None,
                 default_model: str | None = None, schedule: Schedule = start_later, in_process: bool = False):
        self.queue, self.models, self.limits, self.on_report, self.tp = queue, models, limits, on_report, tp
        self.policy = policy or RestartPolicy()
        self.default_model = default_model
        self.schedule = schedule
        self.model_facts: ModelFacts | None = None  # without its tokenizer_json: `decoder` holds that
        self.decoder: TextDecoder | None = None
        self.trouble: str | None = None  # why the engine is down, or was restarted
        self.last_load_error: str | None = None  # the startup load's (or a reload's) failure: the banner says it
        self.retired_note: str | None = None  # the latest model unloaded for killing its engine: the banner keeps it
        self._start_error: str | None = None  # the latest engine could not start: jobs waiting for it fail
        self._wanted_model: str | None = None  # loaded again after a restart
        self._culprit: tuple[str | None, int] = (None, 0)  # the model in use at the latest real losses, how many
        self._stop_causes: dict[int, str] = {}  # why the server asked a job to stop: "cancel", "run limit"
        client_type = InProcessEngineClient if in_process else EngineClient
        self.client: EngineClient | InProcessEngineClient = client_type(
            self._on_message, self._on_lost, device=device, dtype=dtype, world_size=tp, hf_modules=hf_modules,
            **(engine or {}))

    @property
    def model_spec(self) -> str | None:
        return self.model_facts.spec if self.model_facts else None

    def start(self) -> None:
        self.client.start()

    def load_refused(self, model: str, reason: str) -> None:
        """The startup model was refused before it was queued: the banner says why, as for a load that failed."""
        self.last_load_error = f"Could not load {model}: {reason}"

    def close(self) -> None:
        """The engine asked to shut down, and killed if it has not within SHUTDOWN_GRACE_S (one busy loading or
        compiling reads nothing until it is done)."""
        self.client.close(timeout=SHUTDOWN_GRACE_S)

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
        self._stop_causes.setdefault(job.id, "cancel")
        self.client.cancel(job.id)

    def _engine_ready(self, job: Job) -> bool:
        """Wait for the engine's hello (a fresh engine takes seconds to import torch, and one after a loss starts when
        its backoff is over); False if the job ended, or the engine cannot start."""
        while not self.client.hello_event.wait(0.25):
            if job.done:
                return False
            if self._start_error and not self.client.alive:
                self._fail(job, self._start_error)
                return False
        return not job.done

    def _retry_after_restart(self, job: Job, exc: EngineLost) -> None:
        """The engine died just before this job was sent: back to the queue it goes."""
        time.sleep(0.5)  # let the reader notice the death and schedule the new engine
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
            if limit and job.work in RUNS and time.perf_counter() - (job.t0 or 0) > limit:
                self._stop_causes[job.id] = "run limit"
                self.queue.cancel(job.id, reason=f"stopped after {limit:.0f} s: this server limits the length of a run")

    def _fail(self, job: Job, error: str) -> None:
        if job.done:
            return
        logger.error("%s %d (%s) failed: %s", job.work, job.id, _spec_for_log(job.model or self.model_spec), error)
        if job.work == LOAD and job.owner is None and job.model in self.models.named:
            self.last_load_error = f"Could not load {job.model}: {error}"  # the startup load, or a reload
        self.queue.finish(job, FAILED, error)

    # ---- what the engine says (its reader threads)

    def _on_message(self, message: Reply) -> None:
        if isinstance(message, Ready):
            logger.info("engine process ready in %.1f s (start and imports, %d rank(s))", message.start_s, self.tp)
            self._start_error = None
            return
        job_id = job_of(message)
        job = self.queue.get(job_id) if job_id is not None else None
        if isinstance(message, ModelFacts):
            logger.info("loaded %s on %s in %.1f s", _spec_for_log(message.spec), message.device, message.load_s)
            self._on_model_facts(message)
            if job is not None and job.work in RUNS:
                job.state = RUNNING
        if job is None:
            if isinstance(message, Failed):  # the engine could not start
                self.trouble = self._start_error = f"the engine process could not start: {message.error}"
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
            elif job.work == UNDER_LOAD:
                job.report = message.report
            self._stop_causes.pop(job.id, None)
            self.queue.finish(job, DONE, None)
        elif isinstance(message, JobCancelled):
            if job.work == COMPARE and message.report is not None:  # the rounds finished before the cancel
                job.report = message.report
                self.on_report(job)
            elif job.work == UNDER_LOAD:  # the points finished before the cancel, where the main one had
                job.report = message.report
            self._stop_causes.pop(job.id, None)
            self.queue.finish(job, CANCELLED, job.error)
        elif isinstance(message, Failed):
            self._failed(job, message)

    def _on_model_facts(self, message: ModelFacts) -> None:
        self.decoder = TextDecoder(message.tokenizer_json, message.tokenizer_cleanup)
        self.model_facts = replace(message, tokenizer_json=None)
        self._wanted_model, self.last_load_error = message.spec, None
        self.trouble = self.retired_note  # a model unloaded for killing its engine stays named on the banner

    def _failed(self, job: Job, message: Failed) -> None:
        error = message.error or "failed"
        if message.loaded is None and self.model_facts is not None:
            error += f"; the previous model ({self.model_spec}) was unloaded to make room, so none is loaded now"
            self.model_facts, self.decoder = None, None
        elif message.category == FailureCategory.INPUT and job.model and job.model != self.model_spec:
            error += f"; still using {self.model_spec}" if self.model_spec else "; no model is loaded"
        self._stop_causes.pop(job.id, None)
        self._fail(job, error)

    # ---- a loss of the engine (a reader or the watcher thread)

    def _on_lost(self, job_id: int | None, loss: EngineLoss) -> None:
        job = self.queue.get(job_id) if job_id is not None else None
        job = job if job is not None and not job.done else None
        self.model_facts, self.decoder = None, None
        if self.queue.closed:
            if job is not None:
                self._fail(job, f"the engine process {loss.reason}")
            return
        if loss.chosen:
            delay, retired = 0.0, None
            cause = self._stop_causes.pop(job_id, "cancel") if job_id is not None else "cancel"
            what = f"restarted on purpose ({cause})"
        else:
            delay, retired = self.policy.lost(), self._count_culprit(job)
            what = f"engine lost ({loss.short}), restarting in {delay:g} s"
        model = self._wanted_model
        then = f"; it loads {self.models.public_name(model)} again" if model else ""
        self.trouble = (f"{retired} " if retired else "") + f"{what[0].upper()}{what[1:]}: the engine process " \
            f"{loss.reason}{then}."
        if loss.chosen:
            logger.warning("engine %s (job %s): the engine process %s", what, job_id, loss.reason)
        else:
            logger.error("%s (job %s, real loss %d in a row): the engine process %s", what, job_id,
                         self.policy.streak, loss.reason)
        if job is not None:
            self._end_lost_job(job, loss, f"; {what}{then}")
        self.schedule(delay, lambda: self._restart(model))
        if model:
            self.queue.add(Job(id=self.queue.next_id(), work=LOAD, owner=None, model=model, internal=True,
                               progress=f"Loading model {model} again after an engine restart"), front=True)

    def _count_culprit(self, job: Job | None) -> str | None:
        """Count this real loss against the model in use; when that model (not the default) has now been in use for
        CULPRIT_LOSSES losses in a row, unload it: what the banner says about it, else None."""
        culprit = job.model if job is not None and job.model else self._wanted_model
        previous, count = self._culprit
        count = count + 1 if culprit == previous and self.policy.streak > 1 else 1
        self._culprit = (culprit, count)
        if culprit is None or culprit == self.default_model or count < CULPRIT_LOSSES:
            return None
        self._culprit = (None, 0)
        shown = f"Model {culprit}" if culprit in self.models.named else "A visitor's model"  # the banner is public
        default = self.models.public_name(self.default_model) if self.default_model else None
        said = self.retired_note = (f"{shown} unloaded after {count} losses of the engine in a row; "
                                    + (f"serving the default ({default})." if default else "no model is loaded."))
        self.models.retire(culprit, f"it was unloaded after the engine process was lost {count} times in a row "
                                    "while it was in use")
        self._wanted_model = self.default_model
        for queued in self.queue.take_waiting(lambda waiting: waiting.model == culprit):
            self._fail(queued, f"model {quote_spec(culprit)} was unloaded after {count} losses of the engine in a row")
        logger.error("model %s unloaded after %d losses in a row; serving the default (%s)", _spec_for_log(culprit),
                     count, self.default_model)
        return said

    def _restart(self, model: str | None) -> None:
        if self.queue.closed:
            return
        logger.warning("restarting the engine process%s", f"; then loading {_spec_for_log(model)}" if model else "")
        self.client.restart()

    def _end_lost_job(self, job: Job, loss: EngineLoss, after: str) -> None:
        culprit_gone = job.model is not None and job.model in self.models.retired
        if not job.started and not culprit_gone and self._requeue(job):
            return  # it never reached the engine: it runs on the new one
        if loss.chosen:
            self.queue.finish(job, CANCELLED, f"the engine process {loss.reason}")
        else:
            self._fail(job, f"the engine process {loss.reason} during this job{after}")


def _spec_for_log(spec: str | None) -> str:
    return quote_spec(spec) if spec and len(spec) > 80 else str(spec)


def _request(job: Job) -> JobRequest:
    """The engine's request for a job."""
    if job.work == LOAD:
        assert job.model is not None, "a load names its model"
        return Load(job=job.id, spec=job.model)
    if job.work == UNDER_LOAD:
        assert job.load_request is not None, "a run under load carries its request"
        return UnderLoad(job=job.id, spec=job.model, request=job.load_request)
    assert job.request is not None, "a run carries its request"
    return Compare(job=job.id, spec=job.model, request=job.request)
