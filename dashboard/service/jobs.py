"""A job: one queued unit of device work (a model load, a run, or a run under load) and what happened to it."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from core.request.load import LoadRequest
from core.request.options import BenchRequest
from dashboard.service.page_record import PageRecord
from engine.protocol import MessageType

QUEUED, LOADING, RUNNING, DONE, FAILED, CANCELLED = "queued", "loading", "running", "done", "failed", "cancelled"
FINISHED = (DONE, FAILED, CANCELLED)


# What a job asks of the engine process: the type of the request it becomes (engine.protocol's Load, Compare or
# UnderLoad). RUNS: the visitors' runs, which take turns in the queue and are stopped past the run limit.
LOAD, COMPARE, UNDER_LOAD = MessageType.LOAD, MessageType.COMPARE, MessageType.UNDER_LOAD
RUNS = (COMPARE, UNDER_LOAD)


@dataclass
class Job:
    """A model load, a run or a run under load; `events` are the engine's events as (engine clock time, event).

    `report` is core.bench's report (or the load report) exactly as the engine sent it; `page` is what the page itself
    saw of a run (its live series, the device samples, its notices), kept apart so that each has one author. A run
    under load carries its `load_request`."""

    id: int
    work: MessageType
    owner: str | None
    model: str | None
    request: BenchRequest | None = None
    load_request: LoadRequest | None = None
    notices: list[str] = field(default_factory=list)
    state: str = QUEUED
    error: str | None = None
    report: dict[str, Any] | None = None
    page: PageRecord | None = None
    progress: str | None = None
    t0: float | None = None
    t_end: float | None = None
    internal: bool = False  # a reload after an engine restart: not in anyone's history
    attempts: int = 0  # times it was sent to an engine that turned out to be gone
    started: bool = False  # the engine said it received the job
    address: str | None = None  # the client address that asked for it (None: the server, or a caller in-process)
    share_key: str | None = None  # whose turn it takes in the queue (dashboard.service.fair_share); None: its owner's
    newcomer: bool = False  # asked for by a visitor with no finished run yet
    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list, repr=False)
    finished: threading.Event = field(default_factory=threading.Event, repr=False)
    view: Any = field(default=None, repr=False)

    @property
    def done(self) -> bool:
        return self.state in FINISHED

    def wait(self, timeout: float | None = None) -> bool:
        return self.finished.wait(timeout)

    def add_events(self, events: list[dict[str, Any]]) -> None:
        arrived = time.perf_counter()
        self.events.extend((event.get("t") or event.get("host_time_s") or arrived, event) for event in events)
