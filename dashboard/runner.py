"""The dashboard's one door into core: owns the loaded model and runs comparisons one at a time, headless.

No gradio or plotly here, so the runner also works on a GPU server without a browser. A run is
`core.bench.compare`, the code path of `python -m core.bench --stream`, so every number the dashboard shows can be
reproduced from the command line (`cli_command` spells out the exact command).

Jobs (model loads and runs) go through one FIFO queue served by one worker thread: only one job touches the device
at a time, the loops of a run go one after the other, and a waiting job knows its place in the queue. The token
callback only appends to a list; decoding text, rates and chart data happen when someone asks for a snapshot.
"""

from __future__ import annotations

import collections
import csv
import gc
import io
import itertools
import json
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.bench import HF, HF_DEFERRED, BenchRequest, Cancelled, compare
from core.generation import COMPILE_MODES, LOOPS, NO_CHECK, GenerationOptions
from core.gpu_monitor import GpuMonitor, nvml_index
from core.models import BUILTIN_SPECS, DEFAULT_MODEL, LoadedModel, load_model

DEFAULT_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
MAX_PROMPT_CHARS = 20_000
MAX_NEW_TOKENS = 4096
MAX_BATCH = 64
MAX_TRIALS = 20
MAX_LAG = 64
MAX_QUEUE = 16
HISTORY_LIMIT = 500
RATE_WINDOW = 8          # steps per point of the live tokens/s curve
SERIES_MIN_DT_S = 0.02   # a point of the live curve every 20 ms ...
SERIES_MIN_STEPS = 4     # ... or every 4 steps, whichever comes first

QUEUED, LOADING, RUNNING, DONE, FAILED, CANCELLED = "queued", "loading", "running", "done", "failed", "cancelled"
FINISHED = (DONE, FAILED, CANCELLED)


# ------------------------------------------------------------------------------------------------ settings

@dataclass(frozen=True)
class RunSettings:
    """What a user asks for; numbers may arrive as floats or strings from a form and are checked by `to_request`."""

    prompt: str = DEFAULT_PROMPT
    model: str | None = None  # None: whatever is loaded
    max_new_tokens: Any = 128
    batch: Any = 1
    ignore_eos: bool = False
    sample: bool = False
    seed: Any = 0
    temperature: Any = 1.0
    top_k: Any = 0
    top_p: Any = 1.0
    static_cache: bool = False
    compile: str = "off"
    lag: Any = 1
    streams: Any = 1
    trials: Any = 1
    include_hf: bool = False
    include_no_check: bool = False

    def to_request(self, cuda: bool = False) -> tuple[BenchRequest, list[str]]:
        """The BenchRequest this asks for, plus notices about what was adjusted; ValueError with a clear message.

        On CUDA, "include HF generate()" also runs generate() with its DeferredStopCheck forced on."""
        notices: list[str] = []
        prompt = _checked_prompt(self.prompt)
        batch = whole("batch size", self.batch, 1, MAX_BATCH)
        compile_mode = str(self.compile or "off")
        if compile_mode not in COMPILE_MODES:
            raise ValueError(f"unknown compile mode {compile_mode!r}; use one of: {', '.join(COMPILE_MODES)}")
        static = bool(self.static_cache)
        if compile_mode != "off" and not static:
            static = True
            notices.append("compile needs StaticCache (a dynamic cache changes shape every step): turned it on")
        options = GenerationOptions(
            max_new_tokens=whole("max new tokens", self.max_new_tokens, 1, MAX_NEW_TOKENS),
            cache="static" if static else "dynamic", compile=compile_mode,
            lag=whole("pipeline lag", self.lag, 1, MAX_LAG), streams=whole("streams", self.streams, 1, 2),
            do_sample=bool(self.sample), temperature=real("temperature", self.temperature, 0.0, 100.0, open_low=True),
            top_k=whole("top-k", self.top_k, 0, 1_000_000), top_p=real("top-p", self.top_p, 0.0, 1.0, open_low=True),
            seed=whole("seed", self.seed, 0, 2**63 - 1), ignore_eos=bool(self.ignore_eos),
        )
        hf = ([HF, HF_DEFERRED] if cuda else [HF]) if self.include_hf else []
        contestants = (*LOOPS, *([NO_CHECK] if self.include_no_check else []), *hf)
        request = BenchRequest(prompt=[prompt] * batch if batch > 1 else prompt, options=options,
                               trials=whole("trials", self.trials, 1, MAX_TRIALS), contestants=contestants,
                               stream=True)
        request.validate()
        return request, notices


def whole(name: str, value: Any, low: int, high: int) -> int:
    """A whole number in [low, high] from an int, an integral float or a numeric string."""
    number = _number(name, value)
    if number != int(number):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if not low <= number <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {int(number)}")
    return int(number)


def real(name: str, value: Any, low: float, high: float, *, open_low: bool = False) -> float:
    """A finite number in [low, high], or (low, high] with open_low."""
    number = _number(name, value)
    if (number <= low if open_low else number < low) or number > high:
        bracket = "(" if open_low else "["
        raise ValueError(f"{name} must be in {bracket}{low:g}, {high:g}], got {number:g}")
    return number


def _number(name: str, value: Any) -> float:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"{name} is empty: enter a number")
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return number


def _checked_prompt(prompt: Any) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("the prompt is empty: type something for the model to answer")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"the prompt is {len(prompt)} characters long; the limit here is {MAX_PROMPT_CHARS}")
    return prompt


def cli_command(settings: RunSettings, model: str, device: str | None = None, dtype: str | None = None,
                cuda: bool = False) -> str:
    """The `python -m core.bench` command that reproduces a dashboard run."""
    request, _ = settings.to_request(cuda)
    o = request.options
    batch = len(request.prompt) if isinstance(request.prompt, list) else 1
    parts = ["python", "-m", "core.bench", "--model", model]
    parts += ["--device", device] if device else []
    parts += ["--dtype", dtype] if dtype else []
    parts += ["--prompt", settings.prompt, "--batch", str(batch),
              "--max-new-tokens", str(o.max_new_tokens), "--cache", o.cache, "--compile", o.compile,
              "--lag", str(o.lag), "--streams", str(o.streams), "--seed", str(o.seed)]
    if o.do_sample:
        parts += ["--sample", "--temperature", f"{o.temperature:g}", "--top-k", str(o.top_k), "--top-p", f"{o.top_p:g}"]
    parts += ["--ignore-eos"] if o.ignore_eos else []
    parts += ["--trials", str(request.trials), *(["--no-check"] if NO_CHECK in request.contestants else []),
              *(["--hf"] if HF in request.contestants else []),
              *(["--hf-deferred"] if HF_DEFERRED in request.contestants else []), "--stream"]
    return shlex.join(parts)


# ---------------------------------------------------------------------------------------------------- jobs

@dataclass
class Job:
    """One queued unit of device work: a model load, or a comparison (which may load its model first)."""

    id: int
    kind: str  # "load" or "run"
    owner: str | None
    model: str | None
    settings: RunSettings | None = None
    request: BenchRequest | None = None
    notices: list[str] = field(default_factory=list)
    state: str = QUEUED
    error: str | None = None
    report: dict[str, Any] | None = None
    t0: float | None = None
    t_end: float | None = None
    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list, repr=False)
    stop: threading.Event = field(default_factory=threading.Event, repr=False)
    finished: threading.Event = field(default_factory=threading.Event, repr=False)
    view: LiveView | None = field(default=None, repr=False)

    @property
    def done(self) -> bool:
        return self.state in FINISHED

    def wait(self, timeout: float | None = None) -> bool:
        return self.finished.wait(timeout)

    def on_event(self, event: dict[str, Any]) -> None:
        """The only code on the generation loop's path: stamp and append."""
        self.events.append((time.perf_counter(), event))


class Runner:
    """Owns one loaded model and a queue of jobs; see the module docstring."""

    def __init__(self, model: str | None = DEFAULT_MODEL, device: str | None = None, dtype: str | None = None, *,
                 allowed_models: set[str] | None = None, monitor: GpuMonitor | bool = True,
                 loader: Callable[..., LoadedModel] = load_model, max_queue: int = MAX_QUEUE):
        self.device = device
        self.dtype = dtype
        self.allowed_models = allowed_models
        self.max_queue = max_queue
        self._loader = loader
        self._loaded: LoadedModel | None = None
        self.last_load_error: str | None = None
        self._queue: collections.deque[Job] = collections.deque()
        self._active: Job | None = None
        self._jobs: dict[int, Job] = {}
        self._history: collections.deque[tuple[str | None, dict[str, Any]]] = collections.deque(maxlen=HISTORY_LIMIT)
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._closed = False
        self.monitor = monitor if isinstance(monitor, GpuMonitor) else (self._new_monitor() if monitor else None)
        self._worker = threading.Thread(target=self._work, name="syncscope-runner", daemon=True)
        self._worker.start()
        if model:
            self.submit_load(model)

    # ---- public API

    @property
    def loaded(self) -> LoadedModel | None:
        return self._loaded

    @property
    def model_spec(self) -> str | None:
        return self._loaded.spec if self._loaded else None

    @property
    def uses_cuda(self) -> bool:
        """Whether runs go to a CUDA device (the loaded model's, else the one models will load on)."""
        if self._loaded is not None:
            return self._loaded.device.type == "cuda"
        import torch

        return str(self.device or "cuda").startswith("cuda") and torch.cuda.is_available()

    @property
    def allow_any_model(self) -> bool:
        return self.allowed_models is None

    def model_choices(self) -> list[str]:
        extra = sorted(self.allowed_models - set(BUILTIN_SPECS)) if self.allowed_models else []
        return [*BUILTIN_SPECS, *extra]

    def device_label(self) -> str:
        loaded = self._loaded
        if loaded is None:
            return "no model loaded"
        label = str(loaded.device)
        if loaded.device.type == "cuda":
            import torch

            label += f" ({torch.cuda.get_device_name(loaded.device)})"
        return f"{label}, {str(loaded.dtype).replace('torch.', '')}"

    def check_model(self, spec: Any) -> str:
        """The stripped spec if this runner may load it; ValueError otherwise."""
        spec = spec.strip() if isinstance(spec, str) else ""
        if not spec:
            raise ValueError("no model chosen; pick one of: " + ", ".join(self.model_choices()))
        if self.allowed_models is not None and spec not in self.allowed_models:
            raise ValueError(f"model {spec!r} is not allowed on this dashboard; choose one of: "
                             + ", ".join(self.model_choices()))
        return spec

    def submit_load(self, spec: str, owner: str | None = None) -> Job:
        return self._enqueue(Job(id=next(self._ids), kind="load", owner=owner, model=self.check_model(spec)))

    def load(self, spec: str, timeout: float | None = None) -> LoadedModel:
        """Load (queued behind running work); ValueError if it fails, and the previous model stays loaded."""
        job = self.submit_load(spec)
        job.wait(timeout)
        if job.state != DONE:
            raise ValueError(job.error or f"loading {spec!r} did not finish")
        assert self._loaded is not None
        return self._loaded

    def submit(self, settings: RunSettings, owner: str | None = None) -> Job:
        """Validate and queue a comparison; ValueError with a readable message for bad settings."""
        request, notices = settings.to_request(self.uses_cuda)
        model = self.check_model(settings.model) if settings.model else None
        if owner is not None and any(j.owner == owner and not j.done for j in self.pending()):
            raise ValueError("you already have a run queued or in progress: wait for it, or cancel it")
        job = Job(id=next(self._ids), kind="run", owner=owner, model=model, settings=settings, request=request,
                  notices=notices)
        job.view = LiveView(job, self)
        return self._enqueue(job)

    def run(self, settings: RunSettings, timeout: float | None = None) -> dict[str, Any]:
        """Submit and wait: the report, or ValueError (failed) / Cancelled."""
        job = self.submit(settings)
        if not job.wait(timeout):
            self.cancel(job.id)
            job.wait(60)  # a warm-up pass finishes before it sees the cancel
        if job.state == CANCELLED:
            raise Cancelled("cancelled")
        if job.state != DONE:
            raise ValueError(job.error or "the run did not finish")
        assert job.report is not None
        return job.report

    def cancel(self, job_id: int, owner: str | None = None) -> bool:
        """Ask a job to stop (queued: dropped at once; running: within one decode step). False if not yours/found."""
        with self._cond:
            job = self._jobs.get(job_id)
            if job is None or job.done or (owner is not None and job.owner != owner):
                return False
            job.stop.set()
            if job in self._queue:
                self._queue.remove(job)
                self._finish(job, CANCELLED, None)
            return True

    def position(self, job: Job) -> int:
        """How many jobs run or wait ahead of this one (0: it is running or next)."""
        with self._cond:
            if job is self._active or job.done:
                return 0
            ahead = list(self._queue).index(job) if job in self._queue else 0
            return ahead + (1 if self._active is not None and not self._active.done else 0)

    def snapshot(self, job: Job) -> dict[str, Any]:
        """Plain data for the UI: state, status line, per-contestant text and tok/s, chart series, report."""
        if job.view is None:
            return {"id": job.id, "state": job.state, "status": status_line(job, self), "error": job.error}
        return job.view.snapshot()

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
                self._finish(job, CANCELLED, None)
            self._queue.clear()
            if self._active is not None:
                self._active.stop.set()
            self._cond.notify_all()
        # A daemon thread still inside torch when the interpreter exits aborts the process.
        self._worker.join(timeout=30)
        if self.monitor is not None:
            self.monitor.stop()

    # ---- queue and worker

    def _new_monitor(self) -> GpuMonitor:
        device = str(self.device or "")
        index = int(device.split(":")[1]) if device.startswith("cuda:") else 0
        return GpuMonitor(device_index=nvml_index(index)).start()

    def pending(self) -> list[Job]:
        """The running job, then the queued ones (a job that just finished is no longer pending)."""
        with self._cond:
            return [job for job in (self._active, *self._queue) if job is not None and not job.done]

    def _enqueue(self, job: Job) -> Job:
        with self._cond:
            if self._closed:
                raise ValueError("the runner is shut down")
            if len(self._queue) >= self.max_queue:
                raise ValueError(f"the queue is full ({len(self._queue)} jobs waiting); try again in a minute")
            self._queue.append(job)
            self._jobs[job.id] = job
            self._forget_old_jobs()
            self._cond.notify_all()
        return job

    def _forget_old_jobs(self, keep: int = 64) -> None:
        finished = [j for j in self._jobs.values() if j.done]
        for job in finished[: max(0, len(finished) - keep)]:
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
        state, error = self._attempt(job)
        if state != DONE:
            # The exception's frames held the failed run's tensors; free them before anyone is told it ended,
            # so the next run (or a caller reading memory) finds the memory back.
            _free_memory()
        self._finish(job, state, error)

    def _attempt(self, job: Job) -> tuple[str, str | None]:
        try:
            if job.model and (self._loaded is None or job.model != self._loaded.spec):
                job.state = LOADING
                self._load(job.model)
            if job.kind == "run":
                job.state = RUNNING
                job.report = self._compare(job)
            return DONE, None
        except Cancelled:
            return CANCELLED, None
        except ValueError as exc:
            return FAILED, str(exc)
        except Exception as exc:  # the app keeps serving whatever a run throws
            return FAILED, describe_failure(exc)

    def _load(self, spec: str) -> None:
        try:
            loaded = self._loader(spec, device=self.device, dtype=self.dtype)
        except Exception as exc:
            message = str(exc) if isinstance(exc, ValueError) else f"could not load model {spec!r}: {exc}"
            kept = f"; still using {self._loaded.spec}" if self._loaded else ""
            self.last_load_error = message + kept
            raise ValueError(message + kept) from exc
        self._loaded, self.last_load_error = loaded, None

    def _compare(self, job: Job) -> dict[str, Any]:
        loaded = self._loaded
        if loaded is None:
            raise ValueError(self.last_load_error or "no model is loaded")
        assert job.request is not None
        engines_before = set(loaded.engines)
        try:
            report = compare(loaded, job.request, on_event=job.on_event, should_stop=job.stop.is_set)
        except BaseException:
            # An engine built by a failed run (an out-of-memory batch, say) would keep its buffers alive.
            for key in set(loaded.engines) - engines_before:
                del loaded.engines[key]
            raise
        job.t_end = time.perf_counter()
        report["dashboard"] = job.view.timeline(final=True) if job.view else {}
        report["dashboard"]["notices"] = [*job.notices, *_report_notices(report)]
        return report

    def _finish(self, job: Job, state: str, error: str | None) -> None:
        job.state, job.error = state, error
        job.t_end = job.t_end or time.perf_counter()
        if job.kind == "run" and job.t0 is not None:  # runs cancelled while queued never ran
            self._history.append((job.owner, history_row(job, self)))
        job.finished.set()


def describe_failure(exc: BaseException) -> str:
    """One readable line for an unexpected failure."""
    name = type(exc).__name__
    if "OutOfMemoryError" in name:
        return "the device ran out of memory during this run (its memory was freed): try a smaller batch or model"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{name}: {text}" if text else name


def _free_memory() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:
        pass


def _report_notices(report: dict[str, Any]) -> list[str]:
    seen: list[str] = []
    for run in report.get("runs", []):
        seen.extend(n for n in run.get("notices", []) if n not in seen)
    return seen


# ------------------------------------------------------------------------------------------ live view data

@dataclass
class PaneState:
    """One contestant's stream, rebuilt from the job's events."""

    trial: int | None = None
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
    """Turns a job's raw events into what the page shows; all the work happens here, off the generation loop."""

    def __init__(self, job: Job, runner: Runner):
        self.job = job
        self.runner = runner
        self.cursor = 0
        self.panes: dict[str, PaneState] = {name: PaneState() for name in job.request.contestants} \
            if job.request else {}
        self.spans: list[dict[str, Any]] = []
        self.phase: dict[str, Any] | None = None
        self.lock = threading.Lock()

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            self._consume()
            job = self.job
            return {
                "id": job.id, "state": job.state, "status": status_line(job, self.runner, self.phase),
                "position": self.runner.position(job), "error": job.error, "notices": list(job.notices),
                "model": job.model or self.runner.model_spec, "panes": self._panes(),
                "report": job.report, **self.timeline(final=job.done, locked=True),
            }

    def timeline(self, final: bool = False, locked: bool = False) -> dict[str, Any]:
        """Series, spans and monitor samples, with times in seconds since the job started."""
        if not locked:
            with self.lock:
                self._consume()
                return self.timeline(final, locked=True)
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
                               "trial": event.get("trial"), "t0": stamp - self.job.t0, "t1": None})
            if event["phase"] == "trial":
                self._start_trial(event["contestant"], event["trial"], stamp)
        elif kind == "run":
            self._close_span(stamp)
            pane = self.panes.setdefault(event["contestant"], PaneState())
            pane.final_text = event["texts"][0] if event.get("texts") else ""
            pane.final_rate = event["timings"]["tokens_per_s"]

    def _close_span(self, stamp: float) -> None:
        if self.spans and self.spans[-1]["t1"] is None:
            self.spans[-1]["t1"] = stamp - self.job.t0

    def _start_trial(self, name: str, trial: int, stamp: float) -> None:
        pane = self.panes.setdefault(name, PaneState())
        if pane.series_t:
            pane.series_t.append(None)
            pane.series_rate.append(None)
        pane.trial, pane.ids, pane.tokens = trial, [], 0
        pane.t_start, pane.t_last, pane.final_text = stamp, None, None
        pane.window.clear()
        pane.window.append((stamp, 0))

    def _on_tokens(self, event: dict[str, Any]) -> None:
        if event["contestant"] == NO_CHECK:  # it hands over all its tokens at the end: no live rate to show
            return
        pane = self.panes.setdefault(event["contestant"], PaneState())
        tokens = event["tokens"]
        count = sum(1 for token in tokens if token is not None)
        if tokens and tokens[0] is not None:
            pane.ids.append(tokens[0])
        pane.tokens += count
        stamp = event["host_time_s"]
        pane.t_last = stamp
        pane.window.append((stamp, count))
        first_t = pane.window[0][0]
        last_point = pane.series_t[-1] if pane.series_t else None
        now = stamp - self.job.t0
        pane.since_point += 1
        due = last_point is None or now - last_point >= SERIES_MIN_DT_S or pane.since_point >= SERIES_MIN_STEPS
        if stamp > first_t and due:
            pane.since_point = 0
            counted = sum(c for _, c in itertools.islice(pane.window, 1, None))
            pane.series_t.append(now)
            pane.series_rate.append(counted / (stamp - first_t))

    def _panes(self) -> dict[str, dict[str, Any]]:
        out = {}
        for name, pane in self.panes.items():
            live = pane.final_text is None and pane.trial is not None
            rate = pane.final_rate
            if live and pane.t_last and pane.t_start and pane.t_last > pane.t_start:
                rate = pane.tokens / (pane.t_last - pane.t_start)
            out[name] = {"text": pane.final_text if pane.final_text is not None else self._decode(pane),
                         "tokens_per_s": rate, "trial": pane.trial, "live": live, "tokens": pane.tokens}
        report = self.job.report
        if report:
            for name, summary in report["summary"].items():
                out.setdefault(name, {"text": "", "trial": None, "live": False, "tokens": 0})
                out[name]["tokens_per_s"] = summary["tokens_per_s"]
        return out

    def _decode(self, pane: PaneState) -> str:
        loaded = self.runner.loaded
        if loaded is None or not pane.ids:
            return ""
        if pane.decoded_len != len(pane.ids):
            pane.decoded = loaded.tokenizer.decode(pane.ids, skip_special_tokens=True)
            pane.decoded_len = len(pane.ids)
        return pane.decoded

    def _series(self) -> dict[str, dict[str, list[float | None]]]:
        return {name: {"t": list(p.series_t), "tokens_per_s": list(p.series_rate)}
                for name, p in self.panes.items() if p.series_t}

    def _monitor(self, t0: float, end: float) -> dict[str, Any]:
        monitor = self.runner.monitor
        if monitor is None:
            return {"kind": "none", "description": "no monitor", "samples": []}
        samples = [{**s, "t": s["t"] - t0} for s in monitor.samples(since=t0 - 1.0) if s["t"] - t0 <= end + 0.5]
        return {"kind": monitor.kind, "description": monitor.description, "samples": samples}


def status_line(job: Job, runner: Runner, phase: dict[str, Any] | None = None) -> str:
    """One sentence on where a job stands."""
    if job.state == QUEUED:
        ahead = runner.position(job)
        return f"Waiting for the device: {ahead} job{'s' if ahead != 1 else ''} ahead of yours in the queue."
    if job.state == LOADING:
        return (f"Loading model {job.model} (the first load of the default model converts its GGUF, ~20 s; "
                "later loads take about a second)…")
    if job.state == RUNNING:
        return _running_line(job, phase)
    if job.state == DONE:
        took = (job.t_end or 0) - (job.t0 or 0)
        return f"Done in {took:.1f} s." if job.kind == "run" else f"Loaded {job.model}."
    if job.state == CANCELLED:
        return "Cancelled."
    return f"Failed: {job.error}"


def _running_line(job: Job, phase: dict[str, Any] | None) -> str:
    if phase is None:
        return "Starting…"
    name = phase["contestant"]
    if phase["phase"] == "warmup":
        compiling = job.request is not None and job.request.options.compile != "off"
        extra = " compiling can take a minute" if compiling else " compilation and set-up stay out of the timings"
        return f"Warming up {name} (untimed;{extra})…"
    trials = job.request.trials if job.request else 1
    return f"Timing {name}: trial {phase['trial'] + 1} of {trials}…"


# ---------------------------------------------------------------------------------------- summaries, history

SUMMARY_HEADERS = ("contestant", "tok/s", "spread %", "TTFT ms", "ms/tok p50", "ms/tok p95", "GPU busy %",
                   "idle gap ms", "compile ms", "same tokens")


def summary_rows(report: dict[str, Any]) -> list[list[Any]]:
    """One row per contestant, in SUMMARY_HEADERS order; None where a number does not exist (e.g. on the CPU)."""
    rows = []
    for name, s in report.get("summary", {}).items():
        warm = report.get("warmup", {}).get(name, {})
        busy = s.get("gpu_busy_fraction")
        rows.append([name, _r(s.get("tokens_per_s"), 1), _r(_pct(s.get("spread")), 1), _r(s.get("ttft_ms"), 1),
                     _r(s.get("ms_per_token_p50"), 3), _r(s.get("ms_per_token_p95"), 3), _r(_pct(busy), 1),
                     _r(s.get("gpu_gap_ms_mean"), 3), _r(warm.get("compile_ms"), 0),
                     sameness(report, name)])
    return rows


def sameness(report: dict[str, Any], name: str) -> str:
    """yes; NO; or NO* when the contestant's own trials differ (run-to-run numerics at near-ties, not the loop)."""
    if report.get("identical", {}).get(name):
        return "yes"
    return "NO*" if report.get("self_consistent", {}).get(name) is False else "NO"


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """The few facts a run is about: speedup, identical outputs, which clock measured the steps."""
    ratio = report.get("ratios", {}).get("pipelined/naive")
    clocks = {r["timings"].get("clock") for r in report.get("runs", []) if r["contestant"] in LOOPS}
    return {"speedup": ratio, "identical": bool(report.get("all_identical")),
            "clock": "cuda-events" if clocks == {"cuda-events"} else "host"}


HISTORY_FIELDS = ("run", "finished", "status", "model", "device", "dtype", "max_new_tokens", "batch", "cache",
                  "compile", "lag", "streams", "sampling", "ignore_eos", "trials", "naive_tok_s",
                  "pipelined_tok_s", "hf_tok_s", "speedup", "naive_ttft_ms", "pipelined_ttft_ms", "naive_p50_ms",
                  "pipelined_p50_ms", "naive_p95_ms", "pipelined_p95_ms", "naive_gpu_busy_pct",
                  "pipelined_gpu_busy_pct", "compile_ms", "identical", "clock", "error")


def history_row(job: Job, runner: Runner) -> dict[str, Any]:
    """Run data only: options and numbers, no prompt text, host names or paths."""
    row: dict[str, Any] = dict.fromkeys(HISTORY_FIELDS)
    options = job.request.options if job.request else None
    row.update(run=job.id, finished=time.strftime("%Y-%m-%dT%H:%M:%S"), status=job.state,
               model=job.model or runner.model_spec, error=job.error)
    if options is not None:
        batch = len(job.request.prompt) if isinstance(job.request.prompt, list) else 1
        row.update(max_new_tokens=options.max_new_tokens, batch=batch, cache=options.cache,
                   compile=options.compile, lag=options.lag, streams=options.streams,
                   sampling=f"seed {options.seed}, T={options.temperature:g}" if options.do_sample else "greedy",
                   ignore_eos=options.ignore_eos, trials=job.request.trials)
    if job.report:
        _add_report_numbers(row, job.report)
    return row


def _add_report_numbers(row: dict[str, Any], report: dict[str, Any]) -> None:
    env, summary = report.get("environment", {}), report.get("summary", {})
    row.update(model=report.get("model", {}).get("spec", row["model"]), device=env.get("gpu") or env.get("device"),
               dtype=env.get("dtype"), identical="yes" if report.get("all_identical") else "no",
               speedup=_r(report.get("ratios", {}).get("pipelined/naive"), 3), clock=headline(report)["clock"])
    for name, prefix in (("naive", "naive"), ("pipelined", "pipelined"), (HF, "hf")):
        s = summary.get(name)
        if not s:
            continue
        row[f"{prefix}_tok_s"] = _r(s["tokens_per_s"], 2)
        if prefix != "hf":
            row[f"{prefix}_ttft_ms"] = _r(s.get("ttft_ms"), 2)
            row[f"{prefix}_p50_ms"] = _r(s.get("ms_per_token_p50"), 3)
            row[f"{prefix}_p95_ms"] = _r(s.get("ms_per_token_p95"), 3)
            row[f"{prefix}_gpu_busy_pct"] = _r(_pct(s.get("gpu_busy_fraction")), 1)
    row["compile_ms"] = _r(max((w.get("compile_ms") or 0 for w in report.get("warmup", {}).values()), default=0), 0)


def history_csv(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=HISTORY_FIELDS, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_cell(v) for k, v in row.items()})
    return out.getvalue()


def _csv_cell(value: Any) -> Any:
    # A cell starting with = + - @ is a formula to spreadsheet programs.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@"):
        return "'" + value
    return value


def public_report(report: dict[str, Any]) -> dict[str, Any]:
    """The report as offered for download: run data, without the server's host name."""
    out = dict(report)
    out["environment"] = {k: v for k, v in report.get("environment", {}).items() if k != "host"}
    return out


def _r(value: float | None, digits: int) -> float | None:
    return None if value is None else round(float(value), digits)


def _pct(fraction: float | None) -> float | None:
    return None if fraction is None else fraction * 100


# ------------------------------------------------------------------------------- replaying a saved report

def timeline_from_report(report: dict[str, Any]) -> dict[str, Any]:
    """Chart data for a saved report: the recorded timeline when the dashboard made it, else one rebuilt from
    the per-step host timestamps, with the runs laid end to end in the order they ran."""
    recorded = report.get("dashboard")
    if isinstance(recorded, dict) and "series" in recorded and "spans" in recorded:
        return {"t_end": recorded.get("t_end"), "series": recorded["series"], "spans": recorded["spans"],
                "monitor": recorded.get("monitor") or _no_monitor()}
    cursor, spans = 0.0, []
    series: dict[str, dict[str, list[float | None]]] = {}
    for name, warm in report.get("warmup", {}).items():
        length = (warm.get("total_ms") or 0) / 1000
        spans.append({"contestant": name, "phase": "warmup", "trial": None, "t0": cursor, "t1": cursor + length})
        cursor += length
    for run in sorted(report.get("runs", []), key=lambda r: (r["trial"], r["order"])):
        timings = run["timings"]
        length = timings["total_ms"] / 1000
        spans.append({"contestant": run["contestant"], "phase": "trial", "trial": run["trial"], "t0": cursor,
                      "t1": cursor + length})
        if run["contestant"] != NO_CHECK:  # its tokens all become known at the end: no rate curve
            _append_rates(series.setdefault(run["contestant"], {"t": [], "tokens_per_s": []}), timings, cursor)
        cursor += length
    series = {name: s for name, s in series.items() if s["t"]}
    return {"t_end": cursor, "series": series, "spans": spans, "monitor": _no_monitor()}


def _append_rates(target: dict[str, list[float | None]], timings: dict[str, Any], offset: float) -> None:
    known = [ms / 1000 for ms in timings.get("host_known_ms", [])]
    if len(known) < 2:
        return
    per_step = timings["new_tokens"] / max(1, timings["kept_steps"])
    if target["t"]:
        target["t"].append(None)
        target["tokens_per_s"].append(None)
    for i in range(1, len(known)):
        first = max(0, i - RATE_WINDOW)
        if known[i] > known[first]:
            target["t"].append(offset + known[i])
            target["tokens_per_s"].append((i - first) * per_step / (known[i] - known[first]))


def _no_monitor() -> dict[str, Any]:
    return {"kind": "none", "description": "No utilization samples in this report:<br>core.bench does not record "
                                           "them; reports saved from the dashboard do.", "samples": []}


def parse_report(data: bytes | str, max_bytes: int = 50 * 2**20) -> dict[str, Any]:
    """A report from JSON text; ValueError when it is not one. Only parses: never opens paths."""
    if isinstance(data, bytes | bytearray):
        if len(data) > max_bytes:
            raise ValueError(f"the file is {len(data) / 2**20:.0f} MB; reports here are limited to "
                             f"{max_bytes // 2**20} MB")
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("the file is not UTF-8 text, so not a report written by core.bench --json") from None
    try:
        report = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the file is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(report, dict) or not str(report.get("schema", "")).startswith("syncscope.bench/"):
        raise ValueError("this JSON is not a syncscope benchmark report (no \"schema\": \"syncscope.bench/1\"); "
                         "write one with python -m core.bench ... --json results.json")
    for key in ("summary", "runs"):
        if not isinstance(report.get(key), dict if key == "summary" else list):
            raise ValueError(f"the report has no valid {key!r} section")
    return report
