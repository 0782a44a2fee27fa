"""The engine in this process: EngineCore on a thread, behind the same interface as engine.client.EngineClient.

The shape of vLLM V1's InprocClient beside its multiprocess client. The server's side (supervisor, queue, page)
cannot tell the two apart: requests go in through `submit`, replies come out through `on_message` in the order
EngineCore sends them (Hello becomes Ready, as a group's does), a cancel is the same shared integer the per-token
callback compares with its job's id. What it gives up is what a process boundary buys: the page and the decode loop
share one interpreter (and its GIL), a hung step cannot be killed, and nothing watches a heartbeat. So it is for
tests and debugging (`app.py --engine-in-process`), one rank only; `kill()` ends the engine as a death would, by
telling `on_lost`, and a fresh EngineCore serves the next `restart()`.

Importing this module imports no torch; starting the engine does (the first Hello asks torch about the device).
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.client import EngineLoss, EngineLost
from engine.process import EngineConfig, EngineCore, hello_message
from engine.protocol import Failed, FailureCategory, Hello, JobEnd, JobRequest, Ready, Reply, Shutdown


@dataclass
class CancelFlag:
    """What the engine process reads from shared memory: the id of the job asked to stop (0: none)."""

    value: int = 0


class InProcessEngineClient:
    """One EngineCore on a worker thread of this process; the interface of EngineClient (one rank)."""

    def __init__(self, on_message: Callable[[Reply], None], on_lost: Callable[[int | None, EngineLoss], None], *,
                 device: str | None = None, dtype: str | None = None, world_size: int = 1,
                 hf_modules: bool = False, **_process_only: Any):
        """`_process_only`: EngineClient's timing options (hang_s, cancel_grace_s, start_timeout_s), which mean
        nothing without a process to watch."""
        if world_size != 1:
            raise ValueError("an in-process engine runs one rank: tensor parallel needs engine processes")
        self.on_message = on_message
        self.on_lost = on_lost
        self.config = EngineConfig(device=device, dtype=dtype, hf_modules=hf_modules)
        self.world_size = 1
        self.hello_event = threading.Event()
        self.starts = 0
        self.start_s: float | None = None
        self._cancel = CancelFlag()
        self._lock = threading.RLock()
        self._generation = 0
        self._requests: queue.Queue[JobRequest | Shutdown] | None = None
        self._worker: threading.Thread | None = None
        self._hello: Hello | None = None
        self._active_job: int | None = None
        self._closed = False

    # ---- life cycle

    def start(self) -> None:
        """Start the engine's thread (returns at once; `hello_event` is set when it has said hello)."""
        with self._lock:
            self._start_worker()

    def restart(self) -> None:
        with self._lock:
            self._stop_worker()
            if not self._closed:
                self._start_worker()

    def close(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._closed = True
            worker = self._worker
            self._stop_worker()
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout)

    @property
    def pids(self) -> list[int]:
        return [os.getpid()] if self.alive else []

    @property
    def hello(self) -> Hello | None:
        with self._lock:
            return self._hello

    @property
    def alive(self) -> bool:
        with self._lock:
            return self._worker is not None and self._worker.is_alive()

    # ---- work

    def submit(self, request: JobRequest) -> None:
        """Queue a job for the engine's thread; raises EngineLost if the engine is down."""
        with self._lock:
            if not self.alive or self._requests is None:
                raise EngineLost("the in-process engine is not running")
            self._active_job = request.job
            self._requests.put(request)

    def cancel(self, job: int) -> None:
        """Ask the running job to stop at its next step (nothing can stop a step that does not return)."""
        self._cancel.value = job

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """End the engine as a death of its process would: its job's replies are dropped and `on_lost` is told.
        The thread finishes the step it is in, and its EngineCore (and model) go with it."""
        with self._lock:
            if self._worker is None:
                return
            job = self._active_job
            self._stop_worker()
        self.on_lost(job, EngineLoss(f"was stopped (in-process engine, signal {int(sig)})", signal=int(sig)))

    # ---- internals

    def _start_worker(self) -> None:
        self._generation += 1
        self.starts += 1
        self.hello_event.clear()
        self._cancel.value = 0
        self._active_job, self._hello = None, None
        self._requests = queue.Queue()
        self._worker = threading.Thread(target=self._serve, args=(self._generation, self._requests, time.monotonic()),
                                        name="engine-in-process", daemon=True)
        self._worker.start()

    def _stop_worker(self) -> None:
        """Retire the running generation: its thread ends after its current request, and its replies are dropped."""
        if self._requests is not None:
            self._requests.put(Shutdown())
        self._generation += 1
        self._requests, self._worker = None, None
        self._hello, self._active_job = None, None
        self.hello_event.clear()

    def _serve(self, generation: int, requests: queue.Queue, started_at: float) -> None:
        """engine.process.serve, on a thread: hello, then one request at a time until shutdown."""

        def send(message: Reply) -> None:
            self._deliver(generation, message, started_at)

        try:
            send(hello_message(self.config))
        except Exception as exc:
            send(Failed(job=None, category=FailureCategory.START, error=f"{type(exc).__name__}: {exc}"))
            return
        core = EngineCore(send, self.config, self._cancel)
        while True:
            request = requests.get()
            if isinstance(request, Shutdown) or generation != self._generation:
                return
            core.handle(request)
            if core.must_restart:
                with self._lock:
                    if generation != self._generation:
                        return
                    job = self._active_job
                    self._stop_worker()
                self.on_lost(job, EngineLoss("stopped after a device error (in-process engine)"))
                return

    def _deliver(self, generation: int, message: Reply, started_at: float) -> None:
        with self._lock:
            if generation != self._generation:
                return
            if isinstance(message, Hello):
                self._hello = message
                self.start_s = time.monotonic() - started_at
                self.hello_event.set()
                message = Ready(start_s=self.start_s)
            elif isinstance(message, JobEnd) and message.job is not None and message.job == self._active_job:
                self._active_job = None
        self.on_message(message)
