"""The engine process: the model, the decode loops and everything that touches the device, away from the UI.

The dashboard's server starts one of these per GPU rank (`multiprocessing` spawn, so the server never initialises
CUDA) and talks to it over a pipe, the shape of vLLM V1's EngineCoreProc around its EngineCore. What travels is
engine.protocol's messages: Load, Compare, UnderLoad and Shutdown in; Hello, then per job Started, Progress, ModelFacts,
Events (batches of core.bench events, or core.load's) and one of Done (the report), JobCancelled or Failed out.

A run is `core.bench.compare`, the code path of `python -m core.bench --stream` (a run under load:
`core.load.protocol.run_load`, the code path of `python -m core.bench --requests N`), and the engine does little
else while one is timed: bench events are appended to a list and shipped as one message every FLUSH_S (a pipe write
every 50 ms instead of one per token). Cancel is a shared-memory integer that the per-token callback compares
with the running job's id; liveness is a heartbeat timestamp in shared memory, written by a thread every
HEARTBEAT_S. Neither needs the pipe. The same thread ends the process when its server is gone (killed with -9, say):
a pipe only tells an engine that reads or writes it, and one busy compiling or loading does neither for minutes.
Importing this module does not import torch; the process does.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from core.models.specs import loading_note
from core.request.load import LoadRequest
from core.request.options import BenchRequest, Cancelled
from core.tuning import Tuning
from engine.protocol import (
    Compare,
    Done,
    Events,
    Failed,
    FailureCategory,
    Hello,
    JobCancelled,
    JobEnd,
    Load,
    ModelFacts,
    Progress,
    Reply,
    Request,
    Shutdown,
    Started,
    UnderLoad,
    job_of,
)

FLUSH_S = 0.05
FLUSH_EVENTS = 512
# The events a timed loop sends often (tokens as they are learned), batched; the key of each one's time stamp.
FREQUENT_EVENTS = {"tokens": "host_time_s", "load-tokens": "t"}
HEARTBEAT_S = 0.5
CUDA_ERROR_MARKERS = ("CUDA error", "cuBLAS error", "CUBLAS_STATUS", "NCCL error", "device-side assert",
                      "illegal memory access", "unspecified launch failure")
RESTART_EXIT_CODE = 3  # the engine exits with this after an error that leaves the device unusable
SERVER_GONE_EXIT_CODE = 4  # the engine's parent, the server, died: nobody is left to read what it does

Send = Callable[[Reply], None]


@dataclass(frozen=True)
class EngineConfig:
    """What an engine process is started with."""

    device: str | None = None
    dtype: str | None = None
    rank: int = 0
    world_size: int = 1
    rendezvous: str | None = None  # tcp://host:port for torch.distributed when world_size > 1
    hf_modules: bool = False  # load_model(hf_modules=...): transformers' modules as they are


class EventBatcher:
    """Collects core.bench events of one job and sends them in batches; what a timed step pays is one append."""

    def __init__(self, send: Send, job: int, stream: bool = True):
        self.send = send
        self.job = job
        self.stream = stream
        self.pending: list[dict[str, Any]] = []
        self.last_flush = time.perf_counter()

    def __call__(self, event: dict[str, Any]) -> None:
        if not self.stream:
            return
        self.pending.append(event)
        stamp_key = FREQUENT_EVENTS.get(event["type"])
        if stamp_key is not None:
            stamp = event[stamp_key]
            if stamp - self.last_flush < FLUSH_S and len(self.pending) < FLUSH_EVENTS:
                return
            self.last_flush = stamp
        self.flush()

    def flush(self) -> None:
        if self.pending:
            batch, self.pending = self.pending, []
            self.send(Events(job=self.job, events=batch))


class EngineCore:
    """Loads models and does the runs of one rank; reports through `send`. Usable in-process (tests). The tuning
    switches are read from its environment (the server's, inherited) once, when it starts, and every model it loads
    is prepared with them."""

    def __init__(self, send: Send, config: EngineConfig, cancel_flag: Any = None):
        self.send = send
        self.config = config
        self.cancel_flag = cancel_flag
        self.tuning = Tuning.from_environment()
        self.loaded: Any = None
        self.must_restart = False

    @property
    def leader(self) -> bool:
        return self.config.rank == 0

    @property
    def loaded_spec(self) -> str | None:
        return self.loaded.spec if self.loaded is not None else None

    def handle(self, request: Request) -> None:
        job = job_of(request)
        if job is not None:
            self.send(Started(job=job))
        if isinstance(request, Load):
            self._guarded(request.job, lambda: self._load_reporting(request.spec, request.job))
        elif isinstance(request, Compare):
            self._guarded(request.job, lambda: self._compare(request.job, request.spec, request.request))
        elif isinstance(request, UnderLoad):
            self._guarded(request.job, lambda: self._under_load(request.job, request.spec, request.request))
        else:
            self.send(Failed(job=job, error=f"unknown request {request!r}", category=FailureCategory.BUG,
                             loaded=self.loaded_spec))

    # ---- jobs

    def _load_reporting(self, spec: str, job: int) -> None:
        self.send(self._load(spec, job))
        self.send(Done(job=job))

    def _load(self, spec: str, job: int) -> ModelFacts:
        """Load `spec` in place of the loaded model. A bad spec, or one that cannot fit, fails before the loaded
        model is let go; one that fits beside it is loaded first, so that a load failing later keeps it too."""
        from core.models.loading import load_model
        from core.models.sources import check_spec

        check_spec(spec)
        note, beside = self._check_room(spec)
        self._progress(job, f"Loading model {spec} ({loading_note(spec)}{note})")
        started = time.perf_counter()
        if not beside:
            self.loaded = None
            _free_memory()
        new = load_model(spec, device=self.config.device, dtype=self.config.dtype,
                         hf_modules=self.config.hf_modules, admitted=True, tuning=self.tuning, **self._tp())
        self.loaded = None
        _free_memory()
        self.loaded = new
        return model_facts_of(self.loaded, job, load_s=time.perf_counter() - started)

    def _check_room(self, spec: str) -> tuple[str, bool]:
        """ValueError (one line) when `spec` cannot fit where this rank would load it, with the memory the loaded
        model would give back counted as free. Else a note for the progress line (its size is unknown) and whether
        it also fits beside the loaded model (with one rank only: ranks must agree on what they hold)."""
        from core.models.loading import resolve_device, resolve_dtype
        from core.models.memory import admit

        if self.config.world_size > 1:
            from core.parallel.tensor_parallel import tp_device

            device = tp_device(self.config.device)
        else:
            device = resolve_device(self.config.device)
        held = self.loaded.weight_bytes // max(1, self.loaded.tp) if self.loaded is not None else 0
        admitted = admit(spec, device, resolve_dtype(self.config.dtype, device).itemsize, self.config.world_size, held)
        return admitted.note, admitted.beside and self.config.world_size == 1

    def _tp(self) -> dict[str, Any]:
        return {"tp": self.config.world_size} if self.config.world_size > 1 else {}

    def _compare(self, job: int, spec: str | None, request: BenchRequest) -> None:
        from core.compare import CancelledRun, compare

        if spec and self.loaded_spec != spec:
            self.send(self._load(spec, job))
        if self.loaded is None:
            raise ValueError("no model is loaded")
        batcher = EventBatcher(self.send, job, stream=self.leader)
        setups_before = set(self.loaded.setups)
        try:
            report = compare(self.loaded, request, on_event=batcher, should_stop=self._stop_check(job))
        except CancelledRun as cut:  # the finished rounds' report goes with the JobCancelled (_guarded)
            cut.report["engine_process"] = engine_facts()
            raise
        except BaseException:
            # A decode setup built by a failed run (an out-of-memory batch, say) would keep its buffers alive.
            for key in set(self.loaded.setups) - setups_before:
                del self.loaded.setups[key]
            raise
        finally:
            batcher.flush()
        report["engine_process"] = engine_facts()
        self.send(Done(job=job, report=report if self.leader else None))

    def _under_load(self, job: int, spec: str | None, request: LoadRequest) -> None:
        """A run under load: core.load's contestants on the request's workload, and its load report (the page words
        it with core.load.words)."""
        from core.load.protocol import CancelledLoad, run_load
        from core.load.report import build_load_report

        if spec and self.loaded_spec != spec:
            self.send(self._load(spec, job))
        if self.loaded is None:
            raise ValueError("no model is loaded")
        if self.config.world_size > 1:
            raise ValueError("under load the loops run on one device: this server runs tensor parallel")
        batcher = EventBatcher(self.send, job, stream=self.leader)
        setups_before = set(self.loaded.setups)
        started = time.perf_counter()
        try:
            section = run_load(self.loaded, request, on_event=batcher, should_stop=self._stop_check(job))
        except CancelledLoad as cut:  # the finished points' report goes with the JobCancelled (_guarded)
            cut.report = build_load_report(self.loaded, request, cut.section, load_command_of(self.loaded, request))
            cut.report["wall_s"] = time.perf_counter() - started
            raise
        except BaseException:
            for key in set(self.loaded.setups) - setups_before:  # as _compare: a failed run's buffers go
                del self.loaded.setups[key]
            raise
        finally:
            batcher.flush()
        report = build_load_report(self.loaded, request, section, load_command_of(self.loaded, request))
        report["wall_s"] = time.perf_counter() - started
        self.send(Done(job=job, report=report))

    def _stop_check(self, job: int) -> Callable[[], bool]:
        flag = self.cancel_flag
        if flag is None:
            return lambda: False
        return lambda: flag.value == job

    def _progress(self, job: int, text: str) -> None:
        if self.leader:
            self.send(Progress(job=job, text=text))

    def _guarded(self, job: int, work: Callable[[], None]) -> None:
        """Run a job; whatever it raises becomes one message, sent only after the failed run's memory is back."""
        outcome: JobEnd | None = None
        try:
            work()
        except Cancelled as exc:  # a cancel after the first round (point) keeps its report: CancelledRun, CancelledLoad
            kept = getattr(exc, "report", None)
            outcome = JobCancelled(job=job, report=kept if self.leader else None)
        except ValueError as exc:
            outcome = Failed(job=job, error=str(exc), category=FailureCategory.INPUT)
        except Exception as exc:  # the engine reports whatever a run throws, then decides whether it can go on
            outcome = self._failure(job, exc)
        if outcome is not None:
            # The exception's frames held the failed run's tensors; free them before anyone is told it ended.
            _free_memory()
            self.send(replace(outcome, loaded=self.loaded_spec))

    def _failure(self, job: int, exc: Exception) -> Failed:
        name = type(exc).__name__
        text = str(exc).strip()
        if "OutOfMemoryError" in name:
            return Failed(job=job, category=FailureCategory.OOM,
                          error="the device ran out of memory during this run (its memory was freed): "
                                "try a smaller batch, fewer tokens or a smaller model")
        if any(marker in text for marker in CUDA_ERROR_MARKERS):
            self.must_restart = True  # a CUDA error is sticky: this process's context cannot be used again
            return Failed(job=job, category=FailureCategory.DEVICE,
                          error=f"the GPU reported an error ({first_line(text)}); the engine process is restarting "
                                "with a fresh CUDA context")
        return Failed(job=job, category=FailureCategory.ERROR, error=f"{name}: {first_line(text)}" if text else name,
                      traceback=traceback.format_exc(limit=8))


def model_facts_of(loaded: Any, job: int, load_s: float) -> ModelFacts:
    """What the server needs to know of a loaded model: names, sizes, and a tokenizer it can decode with."""
    import torch

    device = loaded.device
    tokenizer = loaded.tokenizer
    backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    return ModelFacts(
        job=job, spec=loaded.spec, device=str(device), device_type=device.type,
        gpu=torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        dtype=str(loaded.dtype).replace("torch.", ""), parameters=loaded.num_parameters,
        weight_bytes=loaded.weight_bytes, context_length=loaded.context_length,
        tp=loaded.tp, all_reduce=loaded.all_reduce_text,
        transforms=tuple(loaded.transforms),
        tokenizer_json=backend.to_str() if backend is not None else None,
        tokenizer_cleanup=bool(getattr(tokenizer, "clean_up_tokenization_spaces", False))
        and type(backend.model).__name__ != "BPE" if backend is not None else False,
        load_s=load_s,
    )


def load_command_of(loaded: Any, request: Any) -> str:
    """The `python -m core.bench --requests ...` command that repeats a run under load, as the CLI writes it."""
    from core.report.build import DTYPE_FLAGS
    from core.request.load_schema import load_command

    device = loaded.device
    on_default_gpu = device.type == "cuda" and not device.index
    return load_command(request, loaded.spec, device=None if on_default_gpu else str(device),
                        dtype=DTYPE_FLAGS.get(loaded.dtype))


def engine_facts() -> dict[str, Any]:
    """This engine process's memory after a run, and how many graphs torch.compile has made in it so far."""
    import resource

    import torch

    from core.compare import compiled_graph_count

    facts: dict[str, Any] = {"pid": os.getpid(), "graphs_compiled_total": compiled_graph_count(),
                             "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    with contextlib.suppress(Exception), open(f"/proc/{os.getpid()}/statm") as handle:
        facts["rss_mib"] = int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        facts["gpu_allocated_mib"] = torch.cuda.memory_allocated() / 2**20
        facts["gpu_reserved_mib"] = torch.cuda.memory_reserved() / 2**20
    return facts


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _free_memory() -> None:
    gc.collect()
    with contextlib.suppress(Exception):
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------- the process

def serve(conn: Any, cancel_flag: Any, heartbeat: Any, config: EngineConfig) -> None:
    """The engine process's main: hello, then one request at a time until shutdown or the pipe closes."""
    _beat_forever(heartbeat)
    send = _locked_sender(conn)
    try:
        _start_distributed(config)
        core = EngineCore(send, config, cancel_flag)  # a malformed tuning switch fails the start, in one line
        send(hello_message(config))
    except Exception as exc:
        send(Failed(job=None, category=FailureCategory.START, error=f"{type(exc).__name__}: {exc}"))
        raise SystemExit(RESTART_EXIT_CODE) from exc
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            break  # the server went away
        if isinstance(request, Shutdown):
            break
        core.handle(request)
        if core.must_restart:
            raise SystemExit(RESTART_EXIT_CODE)
    _stop_distributed()


def _beat_forever(heartbeat: Any) -> None:
    """Write the heartbeat every HEARTBEAT_S, and end this process within one beat of its parent's death."""
    server = os.getppid()

    def beat() -> None:
        while True:
            if os.getppid() != server:  # reparented: the server that spawned this engine is gone
                os._exit(SERVER_GONE_EXIT_CODE)
            heartbeat.value = time.monotonic()
            time.sleep(HEARTBEAT_S)

    heartbeat.value = time.monotonic()
    threading.Thread(target=beat, name="engine-heartbeat", daemon=True).start()


def _locked_sender(conn: Any) -> Send:
    lock = threading.Lock()

    def send(message: Reply) -> None:
        with lock:
            conn.send(message)

    return send


def hello_message(config: EngineConfig) -> Hello:
    """The Hello an engine sends first: its pid, rank, and what torch sees of the device."""
    import torch

    cuda = torch.cuda.is_available() and not str(config.device or "").startswith("cpu")
    return Hello(pid=os.getpid(), rank=config.rank, world_size=config.world_size, cuda=cuda,
                 gpus=torch.cuda.device_count() if cuda else 0, torch=str(torch.__version__))


def _start_distributed(config: EngineConfig) -> None:
    if config.world_size <= 1:
        return
    from core.parallel.tensor_parallel import init_tensor_parallel

    init_tensor_parallel(config.rank, config.world_size, config.rendezvous, config.device)


def _stop_distributed() -> None:
    with contextlib.suppress(Exception):
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
