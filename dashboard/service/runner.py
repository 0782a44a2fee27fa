"""The runner: the dashboard's one door to the engine processes, and the one object the page talks to.

It puts together the parts that each do one thing: the job queue (dashboard.service.job_queue: one FIFO, one worker, so
only one job uses the device), the engine supervisor (dashboard.service.supervisor: sends jobs to the engine process,
and restarts and reloads it after a loss), the model policy (dashboard.service.model_policy: what may be loaded, what
the banner may name), the run history (dashboard.service.run_history) and the NVML sampler. The engine runs in its own
process (engine.client), so nothing the page does in this process can stall a decode step. No torch, gradio or plotly
here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from core.measure.gpu_monitor import GpuMonitor, nvml_index
from core.models.memory import admission_problem, bytes_per_element, free_gpu_bytes, free_host_bytes, memory_need
from core.models.specs import DEFAULT_MODEL, loading_note
from core.request.load import LoadRequest
from core.request.load_schema import LoadLimits
from core.request.options import BenchRequest, Cancelled
from core.request.run_schema import Limits, request_from_values
from dashboard.service.fair_share import LOCAL_SHARING, Client, FairShare, ShareRule
from dashboard.service.job_queue import MAX_QUEUE, JobQueue
from dashboard.service.jobs import CANCELLED, COMPARE, DONE, LOAD, RUNS, UNDER_LOAD, Job
from dashboard.service.limits import LOCAL_LIMITS, LOCAL_LOAD_LIMITS
from dashboard.service.live_view import LiveView, TextDecoder
from dashboard.service.load_form import request_from_form
from dashboard.service.load_live import LoadLiveView
from dashboard.service.model_policy import ModelPolicy
from dashboard.service.page_record import PageRecord, live_series
from dashboard.service.run_history import RunHistory, history_row
from dashboard.service.supervisor import EngineSupervisor, RestartPolicy
from engine.client import EngineClient
from engine.inprocess import InProcessEngineClient
from engine.protocol import ModelFacts


class Runner:
    """Owns the engine processes, the queue of jobs, the NVML sampler and the run history."""

    def __init__(self, model: str | None = DEFAULT_MODEL, device: str | None = None, dtype: str | None = None, *,
                 tp: int = 1, hf_modules: bool = False, allowed_models: set[str] | None = None,
                 monitor: GpuMonitor | bool = True,
                 max_queue: int = MAX_QUEUE, limits: Limits = LOCAL_LIMITS, load_limits: LoadLimits = LOCAL_LOAD_LIMITS,
                 engine: dict[str, Any] | None = None,
                 named_models: Iterable[str] = (), free_memory: Callable[[], int | None] | None = None,
                 in_process_engine: bool = False, sharing: ShareRule = LOCAL_SHARING,
                 restart_policy: RestartPolicy | None = None):
        """`free_memory()`: bytes free for a model where runs go (default: measured, host or GPU memory).
        `in_process_engine`: the engine on a thread of this process (engine.inprocess: tests and debugging).
        `sharing`: how much of the queue one client may hold (dashboard.service.fair_share).
        `restart_policy`: the backoff after a real loss of the engine (default: dashboard.service.supervisor's).
        `load_limits`: what a run under load may ask for (`limits.max_run_s` stops it too)."""
        self.device, self.dtype, self.tp, self.hf_modules = device, dtype, tp, hf_modules
        self.limits, self.load_limits = limits, load_limits
        self._free_memory = free_memory or self._measured_free_memory
        # Specs the operator named at startup: the banner, which every visitor sees, names these and built-ins only.
        self.models = ModelPolicy(allowed_models, [*named_models, *([model] if model else [])])
        self.run_history = RunHistory()
        self.fair_share = FairShare(sharing)
        self._submitting = threading.Lock()  # a client's admission and its job's place in the queue, as one step
        self.queue = JobQueue(max_queue, on_finish=self._finished)
        self.supervisor = EngineSupervisor(self.queue, self.models, limits, self._record_page, device=device,
                                           dtype=dtype, tp=tp, hf_modules=hf_modules, engine=engine,
                                           default_model=model, in_process=in_process_engine,
                                           policy=restart_policy)
        self.monitor = monitor if isinstance(monitor, GpuMonitor) else (self._new_monitor() if monitor else None)
        self.models.leave_out_unfit(self.memory_problem)  # an exposed server offers only what fits
        self.supervisor.start()
        self.queue.start(self.supervisor.execute, self.supervisor.stop)
        if model:
            try:
                self.submit_load(model)
            except ValueError as exc:  # the startup model cannot be loaded here: the banner says why
                self.supervisor.load_refused(model, str(exc))

    # ---- the parts, as the page reads them

    @property
    def engine_client(self) -> EngineClient | InProcessEngineClient:
        return self.supervisor.client

    @property
    def model_facts(self) -> ModelFacts | None:
        """What the engine has loaded (None: nothing, or the engine is restarting)."""
        return self.supervisor.model_facts

    @property
    def decoder(self) -> TextDecoder | None:
        return self.supervisor.decoder

    @property
    def engine_trouble(self) -> str | None:
        return self.supervisor.trouble

    @property
    def last_load_error(self) -> str | None:
        """The startup load's (or a reload's) failure; the banner says it, and the form stops offering that model."""
        return self.supervisor.last_load_error

    @property
    def max_queue(self) -> int:
        return self.queue.max_queue

    # ---- what is loaded, and where

    @property
    def model_spec(self) -> str | None:
        return self.supervisor.model_spec

    @property
    def uses_cuda(self) -> bool:
        """Whether runs go to a CUDA device: the engine's word once it has started, else NVML's guess."""
        if self.model_facts is not None:
            return self.model_facts.device_type == "cuda"
        hello = self.engine_client.hello
        if hello is not None:
            return hello.cuda
        return not str(self.device or "").startswith("cpu") and self.monitor is not None and self.monitor.available

    @property
    def allow_any_model(self) -> bool:
        return self.models.allow_any

    def model_choices(self) -> list[str]:
        return self.models.choices()

    def public_name(self, spec: str | None) -> str:
        return self.models.public_name(spec)

    def check_model(self, spec: Any) -> str:
        """The spec if it may be loaded and fits; ValueError (one line) before anything is queued otherwise."""
        spec = self.models.check(spec)
        if spec != self.model_spec:
            problem = self.memory_problem(spec)
            if problem:
                raise ValueError(problem)
        return spec

    def memory_problem(self, spec: str) -> str | None:
        """Why `spec` cannot fit where runs go, with what the loaded model holds counted as free (it is let go
        first); None when it fits or its size is unknown (the engine checks again, on its device, at the load)."""
        cuda = self.uses_cuda
        need = memory_need(spec, bytes_per_element(self.dtype, cuda), self.tp)
        if need is None:
            return None
        room = self._free_memory()
        if room is not None and self.model_facts is not None:
            room += self.model_facts.weight_bytes // max(1, self.model_facts.tp)
        return admission_problem(need, room, "GPU memory" if cuda else "host memory")

    def _measured_free_memory(self) -> int | None:
        if not self.uses_cuda:
            return free_host_bytes()
        return free_gpu_bytes((self.monitor.gpus if self.monitor is not None else []) or [nvml_index(0)])

    def device_label(self) -> str:
        info = self.model_facts
        if info is None:
            return "no model loaded"
        label = info.device + (f" ({info.gpu})" if info.gpu else "")
        tp = f", tensor parallel over {info.tp} GPUs" if info.tp > 1 else ""
        if tp and info.all_reduce:
            tp += f" (all-reduce: {info.all_reduce})"
        transforms = f"; {', '.join(info.transforms)}" if info.transforms else ""
        return f"{label}, {info.dtype}{tp}{transforms}"

    # ---- submitting work

    def submit_load(self, spec: str, owner: str | None = None) -> Job:
        spec = self.check_model(spec)
        return self.queue.add(Job(id=self.queue.next_id(), work=LOAD, owner=owner, model=spec,
                                  progress=f"Loading model {spec} ({loading_note(spec)})"))

    def load(self, spec: str, timeout: float | None = None) -> ModelFacts:
        """Load (queued behind running work): what was loaded, or ValueError if it failed."""
        job = self.submit_load(spec)
        job.wait(timeout)
        if job.state != DONE:
            raise ValueError(job.error or f"loading {spec!r} did not finish")
        assert self.model_facts is not None
        return self.model_facts

    def submit(self, form: Mapping[str, Any], owner: str | None = None, address: str | None = None) -> Job:
        """Check and queue a run; ValueError with a readable message for a bad form, or when this client may not
        queue one now (dashboard.service.fair_share). `form` holds the run options by name
        (core.request.options.RUN_OPTIONS; missing ones take their defaults) and `model` (None or missing: whatever is
        loaded); `address` is the client's (None: a caller in this process)."""
        request, notices = request_from_values(form, limits=self.limits, deferred_with_hf=self.uses_cuda)
        model = self.check_model(form["model"]) if form.get("model") else None
        self._check_context(request, model)
        job = Job(id=self.queue.next_id(), work=COMPARE, owner=owner, model=model, request=request, notices=notices)
        job.view = LiveView(job, lambda: self.decoder, self.monitor, self.position)
        return self._queue_run(job, owner, address)

    def submit_under_load(self, values: Mapping[str, Any], owner: str | None = None,
                          address: str | None = None) -> Job:
        """Check and queue a run under load (the Under load tab); ValueError in one line for bad settings (within
        `load_limits`), or when this client may not queue a run now. `values`: the tab's settings by name
        (dashboard.service.load_form) and `model` (None or missing: whatever is loaded)."""
        if self.tp > 1:
            raise ValueError(f"under load the loops run on one device, and this server runs tensor parallel over "
                             f"{self.tp} GPUs: run python -m core.bench --requests N on one GPU instead")
        request = request_from_form(values, self.load_limits)
        model = self.check_model(values["model"]) if values.get("model") else None
        self._check_load_context(request, model)
        job = Job(id=self.queue.next_id(), work=UNDER_LOAD, owner=owner, model=model, load_request=request)
        job.view = LoadLiveView(job, self.position)
        return self._queue_run(job, owner, address)

    def _queue_run(self, job: Job, owner: str | None, address: str | None) -> Job:
        """Queue a visitor's run: one at a time per visitor, and as much of the queue as dashboard.service.fair_share
        lets its client hold."""
        with self._submitting:
            pending = self.pending()
            going = next((j for j in pending if owner is not None and j.owner == owner and j.work in RUNS), None)
            if going is not None:
                where = " (in the Under load tab)" if going.work == UNDER_LOAD else ""
                raise ValueError(f"you already have a run{where} queued or in progress: wait for it, or cancel it")
            client = Client(owner, address) if owner is not None else None
            if client is not None:
                self.fair_share.admit(client, pending)
                self.fair_share.stamp(job, client)
            self.queue.add(job)
            if client is not None:
                self.fair_share.seen(client)
            return job

    def _check_context(self, request: BenchRequest, model: str | None) -> None:
        """Refuse, before it is queued, a run that cannot fit the loaded model's context (the engine checks again,
        exactly, with the chat template)."""
        loaded, decoder = self.model_facts, self.decoder
        if loaded is None or (model is not None and model != loaded.spec):
            return
        prompt = request.value("prompt")
        least = decoder.count_tokens(prompt) if decoder is not None and isinstance(prompt, str) else 0
        needed = least + request.options.max_new_tokens
        if needed > loaded.context_length:
            raise ValueError(f"prompt ({'at least ' if least else ''}{least} tokens) + max new tokens "
                             f"({request.options.max_new_tokens}) = {needed} exceeds the model's context of "
                             f"{loaded.context_length} tokens")

    def _check_load_context(self, request: LoadRequest, model: str | None) -> None:
        """Refuse, before it is queued, a run under load whose longest synthetic prompt and output cannot fit the
        loaded model's context (the engine checks each request exactly)."""
        loaded, workload = self.model_facts, request.workload
        if loaded is None or (model is not None and model != loaded.spec) or workload.prompts != "synthetic":
            return
        needed = workload.prompt_max + workload.max_new_tokens
        if needed > loaded.context_length:
            raise ValueError(f"the longest prompt ({workload.prompt_max} tokens) + max new tokens "
                             f"({workload.max_new_tokens}) = {needed} exceeds the model's context of "
                             f"{loaded.context_length} tokens")

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
        return self.queue.cancel(job_id, owner, reason)

    def cancel_pending(self, owner: str, work: str) -> int:
        """Cancel `owner`'s queued and running jobs of `work` (COMPARE or UNDER_LOAD); how many were asked to stop."""
        jobs = [job for job in self.pending() if job.owner == owner and job.work == work]
        return sum(self.cancel(job.id, owner=owner) for job in jobs)

    # ---- reading state

    def position(self, job: Job) -> int:
        """How many jobs run or wait ahead of this one (0: it is running or next)."""
        return self.queue.position(job)

    def pending(self) -> list[Job]:
        """The running job, then the queued ones (a job that just finished is no longer pending)."""
        return self.queue.pending()

    def snapshot(self, job: Job) -> dict[str, Any]:
        """Plain data for the UI: state, status line, per-contestant text and tok/s, chart series, report."""
        if job.view is None:
            from dashboard.service.live_view import status_line

            return {"id": job.id, "state": job.state, "status": status_line(job, self.position(job)),
                    "error": job.error, **live_series()}  # nothing streamed yet
        return job.view.snapshot()

    def latest_run(self, owner: str, work: str = COMPARE) -> Job | None:
        """`owner`'s newest run (of `work`: COMPARE or UNDER_LOAD) that the runner still remembers (queued, running
        or finished)."""
        runs = [j for j in self.queue.remembered() if j.owner == owner and j.work == work]
        return max(runs, key=lambda j: j.id, default=None)

    def history(self, owner: str | None = None) -> list[dict[str, Any]]:
        """Finished runs (newest last); with `owner`, only that owner's."""
        return self.run_history.rows(owner)

    def history_csv(self, owner: str | None = None) -> str:
        return self.run_history.csv(owner)

    def history_json(self, owner: str | None = None) -> str:
        return self.run_history.json(owner)

    def close(self) -> None:
        self.queue.close()
        self.supervisor.close()
        if self.monitor is not None:
            self.monitor.stop()

    # ---- internals

    def _new_monitor(self) -> GpuMonitor:
        device = str(self.device or "")
        index = int(device.split(":")[1]) if device.startswith("cuda:") else 0
        indices = [nvml_index(index + rank) for rank in range(self.tp)]
        return GpuMonitor(device_indices=indices, host_pids=lambda: self.engine_client.pids).start()

    def _record_page(self, job: Job) -> None:
        """What the page saw of a run whose report just arrived, kept next to that report (PageRecord)."""
        job.t_end = time.perf_counter()
        if self.monitor is not None:
            self.monitor.sample_now()  # the utilization line reaches the run's end, not the last periodic poll
        job.page = PageRecord.of_run(job.view.live_series(final=True) if job.view else live_series(), job.notices)

    def _finished(self, job: Job) -> None:
        """A job ended: a run that started gets its history row (one cancelled while queued never ran)."""
        self.fair_share.finished(job)
        if job.work == COMPARE and job.t0 is not None and not job.internal:
            device_type = self.model_facts.device_type if self.model_facts else None
            self.run_history.add(job.owner, history_row(job.id, job.state, job.request, job.model or self.model_spec,
                                                        job.report, job.error, device_type))
