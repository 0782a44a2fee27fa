"""What travels over the pipe between the server and an engine process: one frozen dataclass per message.

    server -> engine   Load(job, spec)   Compare(job, spec, request)   UnderLoad(job, spec, request)   Shutdown()
    engine -> server   Hello (once, at start)   Started   Progress   ModelFacts   Events (a batch of core.bench events,
                       or of core.load's under load) and one of Done (the report), JobCancelled, Failed (with a
                       FailureCategory) to end each job
    client -> runner   Ready (every rank has said hello; made by the client, never sent by an engine)

Every message's `type` is a MessageType. The messages are pickled by `multiprocessing`, so both ends must import
this module: it imports no torch. The bench events inside Events stay plain dicts: their schema is core.bench's (and
core.load.protocol's, for a run under load).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from core.request.load import LoadRequest
from core.request.options import BenchRequest


class MessageType(StrEnum):
    # requests
    LOAD = "load"
    COMPARE = "compare"
    UNDER_LOAD = "under_load"
    SHUTDOWN = "shutdown"
    # replies
    HELLO = "hello"
    READY = "ready"
    STARTED = "started"
    PROGRESS = "progress"
    MODEL_FACTS = "model_facts"
    EVENTS = "events"
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"


class FailureCategory(StrEnum):
    INPUT = "input"    # the request cannot run (bad spec, prompt too long): the engine is fine
    OOM = "oom"        # the device ran out of memory; the run's memory was freed, the engine goes on
    DEVICE = "device"  # a sticky CUDA error: the engine process exits to start again with a fresh context
    ERROR = "error"    # anything else a run raised
    START = "start"    # the engine process could not start (no job)
    BUG = "bug"        # a request this engine does not know


# ------------------------------------------------------------------------------------------------ requests

@dataclass(frozen=True)
class Load:
    """Load `spec` (the loaded model, if any, is let go first)."""

    type: ClassVar[MessageType] = MessageType.LOAD
    job: int
    spec: str


@dataclass(frozen=True)
class Compare:
    """Run core.bench.compare on `spec` (loaded first when another model, or none, is loaded)."""

    type: ClassVar[MessageType] = MessageType.COMPARE
    job: int
    spec: str | None
    request: BenchRequest


@dataclass(frozen=True)
class UnderLoad:
    """Run core.load.protocol.run_load on `spec` (loaded first when another model, or none, is loaded) and build its
    load report (core.load.report)."""

    type: ClassVar[MessageType] = MessageType.UNDER_LOAD
    job: int
    spec: str | None
    request: LoadRequest


@dataclass(frozen=True)
class Shutdown:
    """Stop after the current job."""

    type: ClassVar[MessageType] = MessageType.SHUTDOWN


Request = Load | Compare | UnderLoad | Shutdown
JobRequest = Load | Compare | UnderLoad


# ------------------------------------------------------------------------------------------------ replies

@dataclass(frozen=True)
class Hello:
    """An engine process has started (torch imported, its process group joined)."""

    type: ClassVar[MessageType] = MessageType.HELLO
    pid: int
    rank: int
    world_size: int
    cuda: bool
    gpus: int
    torch: str


@dataclass(frozen=True)
class Ready:
    """Every rank of a group has said hello, `start_s` after the group was spawned (imports included)."""

    type: ClassVar[MessageType] = MessageType.READY
    start_s: float


@dataclass(frozen=True)
class Started:
    """The engine received the job."""

    type: ClassVar[MessageType] = MessageType.STARTED
    job: int


@dataclass(frozen=True)
class Progress:
    type: ClassVar[MessageType] = MessageType.PROGRESS
    job: int
    text: str


@dataclass(frozen=True)
class ModelFacts:
    """The server's description of the model an engine loaded (the model itself, in the engine, is
    core.models.loading.LoadedModel): names, sizes, what ran, and a tokenizer it can decode with."""

    type: ClassVar[MessageType] = MessageType.MODEL_FACTS
    job: int
    spec: str
    device: str               # "cuda:0", "cpu"
    device_type: str          # "cuda", "cpu"
    gpu: str | None           # the GPU's name, on CUDA
    dtype: str                # "bfloat16"
    parameters: int
    weight_bytes: int
    context_length: int       # the most tokens a run may hold: prompt and new tokens together
    tp: int                   # tensor-parallel ranks
    all_reduce: str           # how the ranks all-reduce, as the page says it ("" with one rank)
    transforms: tuple[str, ...]  # what the decode path changed in the model, as the page says it
    tokenizer_json: str | None  # a fast tokenizer's tokenizer.json; None when only the engine can decode
    tokenizer_cleanup: bool   # apply transformers' clean_up_tokenization after decoding
    load_s: float


@dataclass(frozen=True)
class Events:
    """A batch of core.bench events of one job (dicts in core.bench's schema), sent every FLUSH_S."""

    type: ClassVar[MessageType] = MessageType.EVENTS
    job: int
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Done:
    """The job ended; `report` is core.bench's report of a run, or the load report of a run under load (None for a
    load, and on ranks other than 0)."""

    type: ClassVar[MessageType] = MessageType.DONE
    job: int
    report: dict[str, Any] | None = None


@dataclass(frozen=True)
class JobCancelled:
    """The job stopped when asked (its name is not `Cancelled`: that is core.request.options' exception)."""

    type: ClassVar[MessageType] = MessageType.CANCELLED
    job: int
    loaded: str | None = None  # the spec the engine holds after the job
    report: dict[str, Any] | None = None  # a run cancelled after a full round: the finished rounds' report


@dataclass(frozen=True)
class Failed:
    """A job failed (or, with `job` None, the engine could not start); `error` is one readable sentence."""

    type: ClassVar[MessageType] = MessageType.FAILED
    job: int | None
    error: str
    category: FailureCategory
    loaded: str | None = None  # the spec the engine holds after the job: None when the failed load let it go
    traceback: str | None = None


Reply = Hello | Ready | Started | Progress | ModelFacts | Events | Done | JobCancelled | Failed
JobEnd = Done | JobCancelled | Failed


def job_of(message: Request | Reply) -> int | None:
    """The job a message is about; None for those about the process (hello, ready, shutdown, a failed start)."""
    return getattr(message, "job", None)
