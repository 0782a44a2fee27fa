"""The server's side of the engine processes: start them, talk to them, notice when they die or hang.

One process per tensor-parallel rank (`world_size`), each started with `multiprocessing`'s spawn method, so this
process never initialises CUDA (it does not even import torch). Requests go to every rank; rank 0's messages go
to `on_message`. A rank that dies, stops beating its heartbeat, or does not finish a cancelled job within
`cancel_grace_s` takes the whole group down: `on_lost(job, loss)` says why (an EngineLoss: in words, and whether
this server chose it), and `restart()` starts a fresh group. Nothing here decides what to do about a loss; the
dashboard's engine supervisor does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from core.models.memory import oom_kill_count
from core.parallel.launch import child_environment, free_port, spawn_context
from engine.process import RESTART_EXIT_CODE, EngineConfig, serve
from engine.protocol import Failed, Hello, JobCancelled, JobEnd, JobRequest, Ready, Reply, Shutdown, Started

START_TIMEOUT_S = 300.0
HANG_S = 15.0
CANCEL_GRACE_S = 10.0
WATCH_S = 0.25
RANKS_APART_S = 10.0  # ranks run in lockstep; one that finished this long before another means the other is stuck


class EngineLost(Exception):
    """The engine processes are gone (died, hung, or were stopped); the message says why."""


@dataclass(frozen=True)
class EngineLoss:
    """Why a group went down. `chosen`: this server stopped it on purpose (a cancel that did not land within the
    grace period), which is no fault of the engine's; otherwise it died, hung or broke on its own."""

    reason: str  # completes "The engine process ...": "was killed by signal 9 (SIGKILL: ...)"
    chosen: bool = False
    signal: int | None = None  # the signal that ended a rank, when one did

    @property
    def short(self) -> str:
        """A few words for the banner and the log: "signal 9", "exit code 3", "hung", "cancel"."""
        if self.signal is not None:
            return f"signal {self.signal}"
        return self.reason.split(" (")[0]


@dataclass
class _Rank:
    process: Any
    conn: Any
    heartbeat: Any
    hello: Hello | None = None
    reader: threading.Thread | None = field(default=None, repr=False)


class EngineClient:
    """A group of engine processes (one per rank) and the threads that read from them and watch them."""

    def __init__(self, on_message: Callable[[Reply], None], on_lost: Callable[[int | None, EngineLoss], None], *,
                 device: str | None = None, dtype: str | None = None, world_size: int = 1,
                 hf_modules: bool = False, hang_s: float = HANG_S, cancel_grace_s: float = CANCEL_GRACE_S,
                 start_timeout_s: float = START_TIMEOUT_S):
        self.on_message = on_message
        self.on_lost = on_lost
        self.device, self.dtype, self.world_size, self.hf_modules = device, dtype, world_size, hf_modules
        self.hang_s, self.cancel_grace_s, self.start_timeout_s = hang_s, cancel_grace_s, start_timeout_s
        self._ctx = spawn_context()
        self._cancel = self._ctx.RawValue("q", 0)
        self._lock = threading.RLock()
        self._ranks: list[_Rank] = []
        self._generation = 0
        self._started_at = 0.0
        self._cancel_asked_at: float | None = None
        self._active_job: int | None = None
        self._outcomes: dict[int, JobEnd] = {}
        self._partial_since: float | None = None
        self._started: set[int] = set()
        self._closed = False
        self.hello_event = threading.Event()
        self.starts = 0
        self.start_s: float | None = None  # spawn to every rank's hello (imports included), of the latest start
        self._oom_kills_at_start: int | None = None
        self._watcher = threading.Thread(target=self._watch, name="engine-watch", daemon=True)

    # ---- life cycle

    def start(self) -> None:
        """Start the processes (returns at once; `hello_event` is set when every rank has said hello)."""
        with self._lock:
            self._spawn_group()
        if not self._watcher.is_alive():
            self._watcher.start()

    def restart(self) -> None:
        with self._lock:
            self._kill_group()
            if not self._closed:
                self._spawn_group()

    def close(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._closed = True
            ranks = list(self._ranks)
            for rank in ranks:
                _send_quietly(rank.conn, Shutdown())
        deadline = time.monotonic() + timeout
        for rank in ranks:
            rank.process.join(max(0.1, deadline - time.monotonic()))
        with self._lock:
            self._kill_group()

    @property
    def pids(self) -> list[int]:
        with self._lock:
            return [rank.process.pid for rank in self._ranks if rank.process.pid is not None]

    @property
    def hello(self) -> Hello | None:
        """Rank 0's hello (pid, cuda, gpus, torch version), once it has arrived."""
        with self._lock:
            return self._ranks[0].hello if self._ranks else None

    @property
    def alive(self) -> bool:
        with self._lock:
            return bool(self._ranks) and all(rank.process.is_alive() for rank in self._ranks)

    # ---- work

    def submit(self, request: JobRequest) -> None:
        """Send a job to every rank; raises EngineLost if the group is down."""
        with self._lock:
            if not self.alive:
                raise EngineLost("the engine process is not running")
            self._active_job, self._cancel_asked_at = request.job, None
            self._outcomes, self._partial_since, self._started = {}, None, set()
            for rank in self._ranks:
                try:
                    rank.conn.send(request)
                except (OSError, ValueError) as exc:  # a rank died after the check above: its pipe is closed
                    raise EngineLost(f"an engine process exited ({type(exc).__name__})") from exc

    def cancel(self, job: int) -> None:
        """Ask the running job to stop at its next step; kill the group if it has not within cancel_grace_s."""
        with self._lock:
            self._cancel.value = job
            if self._active_job == job and self._cancel_asked_at is None:
                self._cancel_asked_at = time.monotonic()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send a signal to every rank (tests, and giving up on a hung group)."""
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    # ---- internals

    def _spawn_group(self) -> None:
        self._generation += 1
        self.starts += 1
        self.hello_event.clear()
        self._cancel.value = 0
        self._active_job, self._cancel_asked_at = None, None
        self._outcomes, self._partial_since = {}, None
        self._started_at = time.monotonic()
        self._oom_kills_at_start = oom_kill_count()
        rendezvous = f"tcp://127.0.0.1:{free_port()}" if self.world_size > 1 else None
        with child_environment():
            self._ranks = [self._spawn_rank(rank, rendezvous) for rank in range(self.world_size)]
        for rank in self._ranks:
            rank.reader = threading.Thread(target=self._read, args=(rank, self._generation),
                                           name=f"engine-read-{rank.process.pid}", daemon=True)
            rank.reader.start()

    def _spawn_rank(self, rank: int, rendezvous: str | None) -> _Rank:
        ours, theirs = self._ctx.Pipe(duplex=True)
        heartbeat = self._ctx.RawValue("d", 0.0)
        config = EngineConfig(device=self.device, dtype=self.dtype, rank=rank, world_size=self.world_size,
                              rendezvous=rendezvous, hf_modules=self.hf_modules)
        process = self._ctx.Process(target=serve, args=(theirs, self._cancel, heartbeat, config),
                                    name=f"syncscope-engine-{rank}", daemon=True)
        process.start()
        theirs.close()
        return _Rank(process=process, conn=ours, heartbeat=heartbeat)

    def _kill_group(self) -> None:
        ranks, self._ranks = self._ranks, []
        self._generation += 1  # readers of the old group stop reporting
        self.hello_event.clear()  # a job waits for the next group's hello, not the dead one's
        for rank in ranks:
            if rank.process.is_alive():
                rank.process.kill()
        for rank in ranks:
            rank.process.join(5)
            rank.conn.close()

    def _read(self, rank: _Rank, generation: int) -> None:
        while True:
            try:
                message = rank.conn.recv()
            except (EOFError, OSError):
                break
            except Exception as exc:  # a message that does not unpickle: treat the engine as broken
                reason = f"sent a message this server could not read ({type(exc).__name__}: {exc})"
                self._lose(generation, EngineLoss(reason[:300]))
                return
            self._deliver(rank, generation, message)
        rank.process.join(2)
        code = rank.process.exitcode
        self._lose(generation, EngineLoss(describe_exit(code, self._oom_killed()),
                                          signal=-code if code is not None and code < 0 else None))

    def _oom_killed(self) -> bool | None:
        """Whether the cgroup's OOM-kill count grew since this group started (None: it cannot be read here)."""
        now = oom_kill_count()
        if now is None or self._oom_kills_at_start is None:
            return None
        return now > self._oom_kills_at_start

    def _deliver(self, rank: _Rank, generation: int, message: Reply) -> None:
        with self._lock:
            if generation != self._generation:
                return
            index = self._ranks.index(rank)
            if isinstance(message, Hello):
                rank.hello = message
                if not all(r.hello for r in self._ranks):
                    return
                self.start_s = time.monotonic() - self._started_at
                self.hello_event.set()
                message = Ready(start_s=self.start_s)
            elif isinstance(message, Started):
                self._started.add(index)
                if len(self._started) < len(self._ranks):
                    return  # a job has started when every rank has it: one rank alone cannot run it
            elif isinstance(message, JobEnd) and message.job is not None:
                settled = self._settle(index, message)
                if settled is None:
                    return
                message = settled
            elif index != 0:
                return
        self.on_message(message)

    def _settle(self, index: int, message: JobEnd) -> JobEnd | None:
        """Collect one rank's outcome of the active job; the group's outcome once every rank has reported."""
        if isinstance(message, Failed) and index:
            message = replace(message, error=f"rank {index}: {message.error}")
        self._outcomes[index] = message
        if len(self._outcomes) < len(self._ranks):
            self._partial_since = self._partial_since or time.monotonic()
            return None
        outcomes = [self._outcomes[i] for i in sorted(self._outcomes)]
        self._outcomes, self._partial_since = {}, None
        self._active_job, self._cancel_asked_at = None, None
        for kind in (Failed, JobCancelled):
            found = next((o for o in outcomes if isinstance(o, kind)), None)
            if found:
                return found
        return outcomes[0]

    def _lose(self, generation: int, loss: EngineLoss) -> None:
        with self._lock:
            if generation != self._generation or self._closed:
                return
            job = self._active_job
            self._kill_group()
        self.on_lost(job, loss)

    def _watch(self) -> None:
        while not self._closed:
            time.sleep(WATCH_S)
            loss = self._trouble()
            if loss:
                self._lose(self._generation, loss)

    def _trouble(self) -> EngineLoss | None:
        with self._lock:
            if not self._ranks:
                return None
            now = time.monotonic()
            if not self.hello_event.is_set():
                if now - self._started_at > self.start_timeout_s:
                    return EngineLoss(f"did not start within {self.start_timeout_s:.0f} s")
                return None
            for index, rank in enumerate(self._ranks):
                if now - rank.heartbeat.value > self.hang_s:
                    return EngineLoss(f"stopped responding (rank {index}: no heartbeat for {self.hang_s:.0f} s)")
            if self._partial_since is not None and now - self._partial_since > RANKS_APART_S:
                first = next(iter(self._outcomes.values()))
                return EngineLoss(f"rank {next(iter(self._outcomes))} ended the job ({first.type}: "
                                  f"{getattr(first, 'error', '')[:200]}) while the others kept running for "
                                  f"{RANKS_APART_S:.0f} s")
            if self._cancel_asked_at is not None and now - self._cancel_asked_at > self.cancel_grace_s:
                return EngineLoss(f"did not stop within {self.cancel_grace_s:.0f} s of the cancel (it was inside a "
                                  "long uninterruptible step such as compilation), so it was stopped and restarted",
                                  chosen=True)
        return None


def describe_exit(code: int | None, oom_killed: bool | None = None) -> str:
    """Why a process ended, in words, from its exit code; for SIGKILL, whether the cgroup recorded an OOM kill
    (`oom_killed`; None: this machine does not say, and the words say both causes)."""
    if code is None:
        return "closed its connection but is still running"
    if code == 0:
        return "exited"
    if code == RESTART_EXIT_CODE:
        return "exited after a device error, to start again with a fresh CUDA context"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        meaning = {"SIGKILL": _sigkill_meaning(oom_killed),
                   "SIGSEGV": " (a segmentation fault: a crash in native code)",
                   "SIGABRT": " (aborted by native code)", "SIGTERM": " (asked to terminate)"}.get(name, "")
        return f"was killed by signal {-code}, {name}{meaning}"
    return f"exited with code {code}"


def _sigkill_meaning(oom_killed: bool | None) -> str:
    if oom_killed:
        return " (the kernel's out-of-memory killer: the cgroup's oom_kill count went up; host memory ran out)"
    if oom_killed is False:
        return (" (not the out-of-memory killer: the cgroup's oom_kill count did not change, so most likely "
                "someone's kill -9)")
    return " (the out-of-memory killer or someone's kill -9: this machine's cgroup does not say which)"


def _send_quietly(conn: Any, message: Shutdown) -> None:
    with contextlib.suppress(OSError, ValueError, BrokenPipeError):
        conn.send(message)
