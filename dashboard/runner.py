"""The job queue: the dashboard's one door to the engine processes.

Jobs (model loads and comparisons) wait in one FIFO queue; one worker thread hands them to the engine one at a
time, so only one job uses the device and a waiting job knows its place. The engine runs in its own process
(`dashboard.engine_client`), so nothing the page does in this process can stall a decode step. When the engine
dies or hangs, the job it was running fails with the reason, a new engine starts, the model is loaded again, and
the queue goes on. No torch, gradio or plotly here.
"""

from __future__ import annotations

import collections
import itertools
import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from core.gpu_monitor import GpuMonitor, nvml_index
from core.run_schema import Limits, request_from_values
from core.specs import BUILTIN_SPECS, DEFAULT_MODEL, loading_note
from dashboard.engine_client import EngineClient, EngineLost
from dashboard.jobs import CANCELLED, DONE, FAILED, LOAD, LOADING, QUEUED, RUN, RUNNING, Job
from dashboard.live_view import LiveView, TextDecoder
from dashboard.reports import history_csv, history_row, nvml_means
from dashboard.settings import LOCAL_LIMITS

MAX_QUEUE = 16
HISTORY_LIMIT = 500
KEEP_FINISHED_JOBS = 64
RESTARTS_ALLOWED = 3
RESTART_WINDOW_S = 300.0

logger = logging.getLogger("syncscope")


class Cancelled(Exception):
    """A job the caller waited for was cancelled."""


class Runner:
    """Owns the engine processes, the queue of jobs, the NVML sampler and the run history."""

    def __init__(self, model: str | None = DEFAULT_MODEL, device: str | None = None, dtype: str | None = None, *,
                 tp: int = 1, hf_modules: bool = False, allowed_models: set[str] | None = None,
                 monitor: GpuMonitor | bool = True,
                 max_queue: int = MAX_QUEUE, limits: Limits = LOCAL_LIMITS, engine: dict[str, Any] | None = None,
                 named_models: Iterable[str] = ()):
        self.device, self.dtype, self.tp, self.hf_modules = device, dtype, tp, hf_modules
        self.allowed_models = allowed_models
        # Specs the operator named at startup: the banner, which every visitor sees, names these and built-ins only.
        self.named_models = {*BUILTIN_SPECS, *named_models, *([model] if model else []), *(allowed_models or ())}
        self.max_queue = max_queue
        self.limits = limits
        self.loaded_info: dict[str, Any] | None = None
        self.decoder: TextDecoder | None = None
        self.engine_trouble: str | None = None
        self._queue: collections.deque[Job] = collections.deque()
        self._active: Job | None = None
        self._jobs: dict[int, Job] = {}
        self._history: collections.deque[tuple[str | None, dict[str, Any]]] = collections.deque(maxlen=HISTORY_LIMIT)
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._closed = False
        self._losses: list[float] = []
        self._wanted_model: str | None = None
        self._cancel_requested: set[int] = set()
        self.last_load_error: str | None = None  # the startup load's (or a reload's) failure: the banner says it
        self.engine = EngineClient(self._on_message, self._on_lost, device=device, dtype=dtype, world_size=tp,
                                   hf_modules=hf_modules, **(engine or {}))
        self.monitor = monitor if isinstance(monitor, GpuMonitor) else (self._new_monitor() if monitor else None)
        self.engine.start()
        self._worker = threading.Thread(target=self._work, name="syncscope-runner", daemon=True)
        self._worker.start()
        if model:
            self.submit_load(model)

    # ---- what is loaded, and where

    @property
    def model_spec(self) -> str | None:
        return self.loaded_info["spec"] if self.loaded_info else None

    @property
    def uses_cuda(self) -> bool:
        """Whether runs go to a CUDA device: the engine's word once it has started, else NVML's guess."""
        if self.loaded_info is not None:
            return self.loaded_info["device_type"] == "cuda"
        hello = self.engine.hello
        if hello is not None:
            return bool(hello["cuda"])
        return not str(self.device or "").startswith("cpu") and self.monitor is not None and self.monitor.available

    @property
    def allow_any_model(self) -> bool:
        return self.allowed_models is None

    def model_choices(self) -> list[str]:
        extra = sorted(self.allowed_models - set(BUILTIN_SPECS)) if self.allowed_models else []
        return [*BUILTIN_SPECS, *extra]

    def public_name(self, spec: str | None) -> str:
        """`spec` as the shared banner may show it: built-ins and the startup specs by name, anything else
        (another visitor's HF id or local path) as a neutral phrase."""
        if spec is None:
            return "no model"
        return spec if spec in self.named_models else "a model a visitor chose"

    def device_label(self) -> str:
        info = self.loaded_info
        if info is None:
            return "no model loaded"
        label = info["device"] + (f" ({info['gpu']})" if info.get("gpu") else "")
        tp = f", tensor parallel over {info['tp']} GPUs" if info.get("tp", 1) > 1 else ""
        if tp and info.get("all_reduce"):
            tp += f" (all-reduce: {info['all_reduce']})"
        transforms = f"; {', '.join(info['transforms'])}" if info.get("transforms") else ""
        return f"{label}, {info['dtype']}{tp}{transforms}"

    def check_model(self, spec: Any) -> str:
        """The stripped spec if this runner may load it; ValueError otherwise."""
        spec = spec.strip() if isinstance(spec, str) else ""
        if not spec:
            raise ValueError("no model chosen; pick one of: " + ", ".join(self.model_choices()))
        if self.allowed_models is not None and spec not in self.allowed_models:
            raise ValueError(f"model {spec!r} is not allowed on this dashboard; choose one of: "
                             + ", ".join(self.model_choices()))
        return spec

    # ---- submitting work

    def submit_load(self, spec: str, owner: str | None = None) -> Job:
        spec = self.check_model(spec)
        return self._enqueue(Job(id=next(self._ids), kind=LOAD, owner=owner, model=spec,
                                 progress=f"Loading model {spec} ({loading_note(spec)})"))

    def load(self, spec: str, timeout: float | None = None) -> dict[str, Any]:
        """Load (queued behind running work): what was loaded, or ValueError if it failed."""
        job = self.submit_load(spec)
        job.wait(timeout)
        if job.state != DONE:
            raise ValueError(job.error or f"loading {spec!r} did not finish")
        assert self.loaded_info is not None
        return self.loaded_info

    def submit(self, form: Mapping[str, Any], owner: str | None = None) -> Job:
        """Check and queue a comparison; ValueError with a readable message for a bad form. `form` holds the run
        options by name (core.options.RUN_OPTIONS; missing ones take their defaults) and `model` (None or missing:
        whatever is loaded)."""
        request, notices = request_from_values(form, limits=self.limits, deferred_with_hf=self.uses_cuda)
        model = self.check_model(form["model"]) if form.get("model") else None
        if owner is not None and any(j.owner == owner and j.kind == RUN for j in self.pending()):
            raise ValueError("you already have a run queued or in progress: wait for it, or cancel it")
        job = Job(id=next(self._ids), kind=RUN, owner=owner, model=model, request=request, notices=notices)
        job.view = LiveView(job, lambda: self.decoder, self.monitor, self.position)
        return self._enqueue(job)

    def run(self, form: Mapping[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """Submit and wait: the report, or ValueError (failed) / Cancelled."""
        job = self.submit(form)
        if not job.wait(timeout):
            self.cancel(job.id)
            job.wait(60)
        if job.state == CANCELLED:
            raise Cancelled(job.error or "cancelled")
        if job.state != DONE:
            raise ValueError(job.error or "the run did not finish")
        assert job.report is not None
        return job.report

    def cancel(self, job_id: int, owner: str | None = None, reason: str | None = None) -> bool:
        """Ask a job to stop (queued: dropped at once; running: within one decode step). False if not yours/found."""
        with self._cond:
            job = self._jobs.get(job_id)
            if job is None or job.done or (owner is not None and job.owner != owner):
                return False
            job.error = job.error or reason
            if job in self._queue:
                self._queue.remove(job)
                self._finish(job, CANCELLED, reason)
            elif job is self._active:
                self._cancel_requested.add(job.id)
                self.engine.cancel(job.id)
            return True

    # ---- reading state

    def position(self, job: Job) -> int:
        """How many jobs run or wait ahead of this one (0: it is running or next)."""
        with self._cond:
            if job is self._active or job.done:
                return 0
            ahead = list(self._queue).index(job) if job in self._queue else 0
            return ahead + (1 if self._active is not None and not self._active.done else 0)

    def pending(self) -> list[Job]:
        """The running job, then the queued ones (a job that just finished is no longer pending)."""
        with self._cond:
            return [job for job in (self._active, *self._queue) if job is not None and not job.done]

    def snapshot(self, job: Job) -> dict[str, Any]:
        """Plain data for the UI: state, status line, per-contestant text and tok/s, chart series, report."""
        if job.view is None:
            from dashboard.live_view import status_line

            return {"id": job.id, "state": job.state, "status": status_line(job, self.position(job)),
                    "error": job.error}
        return job.view.snapshot()

    def latest_run(self, owner: str) -> Job | None:
        """`owner`'s newest comparison that the runner still remembers (queued, running or finished)."""
        with self._cond:
            runs = [j for j in self._jobs.values() if j.owner == owner and j.kind == RUN]
        return max(runs, key=lambda j: j.id, default=None)

    def history(self, owner: str | None = None) -> list[dict[str, Any]]:
        """Finished runs (newest last); with `owner`, only that owner's."""
        return [dict(row) for who, row in list(self._history) if owner is None or who == owner]

    def history_csv(self, owner: str | None = None) -> str:
        return history_csv(self.history(owner))

    def history_json(self, owner: str | None = None) -> str:
        return json.dumps({"schema": "syncscope.history/1", "runs": self.history(owner)}, indent=1)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            for job in list(self._queue):
                self._finish(job, CANCELLED, "the server is shutting down")
            self._queue.clear()
            if self._active is not None:
                self.engine.cancel(self._active.id)
            self._cond.notify_all()
        self._worker.join(timeout=30)
        self.engine.close()
        if self.monitor is not None:
            self.monitor.stop()

    # ---- the queue

    def _new_monitor(self) -> GpuMonitor:
        device = str(self.device or "")
        index = int(device.split(":")[1]) if device.startswith("cuda:") else 0
        indices = [nvml_index(index + rank) for rank in range(self.tp)]
        return GpuMonitor(device_indices=indices, host_pids=lambda: self.engine.pids).start()

    def _enqueue(self, job: Job, front: bool = False) -> Job:
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
                job = self._active = self._queue.popleft()
            try:
                self._execute(job)
            finally:
                with self._cond:
                    self._active = None
                    self._cond.notify_all()

    def _execute(self, job: Job) -> None:
        job.t0 = time.perf_counter()
        job.state = LOADING if job.kind == LOAD or (job.model and job.model != self.model_spec) else RUNNING
        if not self._engine_ready(job):
            return
        request = {"op": job.kind, "job": job.id, "spec": job.model, "request": job.request}
        try:
            self.engine.submit(request)
        except EngineLost as exc:
            self._retry_after_restart(job, exc)
            return
        self._await(job)

    def _retry_after_restart(self, job: Job, exc: EngineLost) -> None:
        """The engine died just before this job was sent: back to the queue it goes."""
        time.sleep(0.5)  # let the reader notice the death and start the new engine
        if not self._requeue(job):
            self._finish(job, FAILED, self.engine_trouble or f"the engine process is not running ({exc})")

    def _requeue(self, job: Job) -> bool:
        """Put a job the engine never received back at the front of the queue (where a reload that follows a
        restart overtakes it); False after a few attempts."""
        job.attempts += 1
        if job.attempts > RESTARTS_ALLOWED:
            return False
        with self._cond:
            job.state, job.t0 = QUEUED, None
            if job not in self._queue:
                self._queue.appendleft(job)
            self._cond.notify_all()
        return True

    def _engine_ready(self, job: Job) -> bool:
        """Wait for the engine's hello (a fresh engine takes seconds to import torch); False if the job ended."""
        while not self.engine.hello_event.wait(0.25):
            if job.done:
                return False
            if self.engine_trouble and not self.engine.alive:
                self._finish(job, FAILED, self.engine_trouble)
                return False
        return not job.done

    def _await(self, job: Job) -> None:
        limit = self.limits.max_run_s
        while not job.wait(0.25):
            if job.state == QUEUED:  # sent back to the queue after the engine it was sent to died
                return
            if limit and job.kind == RUN and time.perf_counter() - (job.t0 or 0) > limit:
                self.cancel(job.id, reason=f"stopped after {limit:.0f} s: this server limits the length of a run")

    # ---- what the engine says

    def _on_message(self, message: dict[str, Any]) -> None:
        job = self._jobs.get(message.get("job")) if message.get("job") is not None else None
        kind = message["kind"]
        if kind == "ready":
            logger.info("engine process ready in %.1f s (start and imports, %d rank(s))", message["start_s"], self.tp)
            return
        if kind == "loaded":
            logger.info("loaded %s on %s in %.1f s", message["spec"], message["device"], message["load_s"])
            self._loaded(message)
            if job is not None:
                job.state = RUNNING if job.kind == RUN else job.state
        if job is None:
            if kind == "failed":  # the engine could not start
                self.engine_trouble = f"the engine process could not start: {message.get('error')}"
                logger.error("%s", self.engine_trouble)
            return
        if kind == "started":
            job.started = True
        elif kind == "progress":
            job.progress, job.state = message["text"], LOADING
        elif kind == "events":
            job.state = RUNNING
            job.add_events(message["events"])
        elif kind == "done":
            if job.kind == RUN:
                job.report = self._with_dashboard_section(job, message["report"])
            self._finish(job, DONE, None)
        elif kind == "cancelled":
            self._finish(job, CANCELLED, job.error)
        elif kind == "failed":
            self._failed(job, message)

    def _loaded(self, message: dict[str, Any]) -> None:
        info = {k: v for k, v in message.items() if k not in ("kind", "job", "tokenizer_json")}
        self.decoder = TextDecoder(message.get("tokenizer_json"), message.get("tokenizer_cleanup", False))
        self.loaded_info, self._wanted_model, self.engine_trouble = info, info["spec"], None
        self.last_load_error = None

    def _failed(self, job: Job, message: dict[str, Any]) -> None:
        error = message.get("error") or "failed"
        if "loaded" in message and message["loaded"] is None and self.loaded_info is not None:
            error += f"; the previous model ({self.model_spec}) was unloaded to make room, so none is loaded now"
            self.loaded_info, self.decoder = None, None
        elif message.get("category") == "input" and job.model and job.model != self.model_spec:
            error += f"; still using {self.model_spec}" if self.model_spec else "; no model is loaded"
        self._finish(job, FAILED, error)

    def _on_lost(self, job_id: int | None, reason: str) -> None:
        now = time.monotonic()
        self._losses = [t for t in self._losses if now - t < RESTART_WINDOW_S] + [now]
        restarting = len(self._losses) <= RESTARTS_ALLOWED and not self._closed
        model = self._wanted_model
        self.loaded_info, self.decoder = None, None
        shown = self.public_name(model)
        after = (f"; a new engine was started and is loading {shown} again" if restarting and model else
                 "; a new engine was started" if restarting else
                 f"; it failed {len(self._losses)} times in {RESTART_WINDOW_S:.0f} s, so it was not restarted")
        self.engine_trouble = f"The engine process {reason}{after}."
        cancelling = job_id is not None and job_id in self._cancel_requested
        logger.error("engine process lost%s (job %s): %s%s", " after a cancel" if cancelling else "", job_id,
                     reason, after)
        job = self._jobs.get(job_id) if job_id is not None else None
        if job is not None and not job.done and not job.started and restarting:
            self._requeue(job)  # it never reached the engine: it runs on the new one
        elif job is not None and not job.done:
            if job.id in self._cancel_requested:
                self._finish(job, CANCELLED, f"the engine process {reason}")
            else:
                self._finish(job, FAILED, f"the engine process {reason} during this job{after}")
        if restarting:
            logger.warning("restarting the engine process (restart %d of %d allowed in %.0f s)",
                           len(self._losses), RESTARTS_ALLOWED, RESTART_WINDOW_S)
            self.engine.restart()
            if model:
                reload = Job(id=next(self._ids), kind=LOAD, owner=None, model=model, internal=True,
                             progress=f"Loading model {model} again after an engine restart")
                self._enqueue(reload, front=True)
        else:
            with self._cond:
                for queued in list(self._queue):
                    self._queue.remove(queued)
                    self._finish(queued, FAILED, self.engine_trouble)

    def restart_engine(self) -> None:
        """Start a fresh engine after it was given up on (the page's Restart button)."""
        self._losses.clear()
        self.engine_trouble = None
        logger.warning("restarting the engine process on request")
        self.engine.restart()
        if self._wanted_model:
            self._enqueue(Job(id=next(self._ids), kind=LOAD, owner=None, model=self._wanted_model, internal=True,
                              progress=f"Loading model {self._wanted_model}"), front=True)

    def _with_dashboard_section(self, job: Job, report: dict[str, Any]) -> dict[str, Any]:
        job.t_end = time.perf_counter()
        if self.monitor is not None:
            self.monitor.sample_now()  # the utilization line reaches the run's end, not the last periodic poll
        timeline = job.view.timeline(final=True) if job.view else {}
        monitor = timeline.get("monitor", {})
        # On the CPU fallback the samples are the engine's CPU %, not NVML's: the NVML column gets a dash.
        nvml = nvml_means(monitor.get("samples", []), timeline.get("spans", [])) if monitor.get("kind") == "nvml" \
            else {}
        report["dashboard"] = {**timeline, "notices": [*job.notices, *_report_notices(report)],
                               "nvml_by_contestant": nvml}
        return report

    def _finish(self, job: Job, state: str, error: str | None) -> None:
        if job.done:
            return
        job.state, job.error = state, error
        job.t_end = job.t_end or time.perf_counter()
        if state == FAILED:
            logger.error("%s %d (%s) failed: %s", job.kind, job.id, job.model or self.model_spec, error)
        if state == FAILED and job.kind == LOAD and job.owner is None and job.model in self.named_models:
            self.last_load_error = f"Could not load {job.model}: {error}"  # the startup load, or a reload
        if job.kind == RUN and job.t0 is not None and not job.internal:  # runs cancelled while queued never ran
            device_type = self.loaded_info["device_type"] if self.loaded_info else None
            self._history.append((job.owner, history_row(job.id, state, job.request, job.model or self.model_spec,
                                                         job.report, error, device_type)))
        job.finished.set()


def _report_notices(report: dict[str, Any]) -> list[str]:
    seen: list[str] = []
    for run in report.get("runs", []):
        seen.extend(n for n in run.get("notices", []) if n not in seen)
    return seen

