"""The sync audit: every host read of a device value in a run, found at its line, counted per decode step, and on
CUDA what it cost.

A read of a device value blocks the host until the device has computed it: `.item()` (and `float(t)`, `int(t)`),
`bool(t)` and `if t:` (`if t.any():` too), `.tolist()`, `.cpu()` / `.numpy()` / `.to("cpu")`, `print(t)`,
`nonzero` and masked indexing, `torch.equal`, a tensor built from device scalars. So do explicit waits
(`torch.cuda.synchronize()`, an Event's or a Stream's `synchronize()`), a `non_blocking=True` copy into pageable
host memory, which CUDA runs as a blocking one, and a copy the other way from pageable host memory (an "h2d-copy"):
`torch.tensor(data, device=...)`, indexing with a Python list or a host tensor, `.to(device)` / `.cuda()` / `copy_`
without non_blocking. While the host waits it queues nothing; once the device has drained its queue, it idles until
the host launches again.

How each is seen:
- For the audit's duration the Python entry points of those reads are wrapped (Tensor methods and torch functions).
  A wrapper costs a microsecond and changes nothing torch.compile made: compiled code does not call them, and the
  Python between compiled graphs calls them as before (checked: no recompile).
- On CUDA, PyTorch's own sync debug mode ("warn") reports every sync its C++ code makes, also inside compiled graphs
  and libraries (masked indexing among them): one outside any wrapped call is recorded at its line, its kind read
  from the line's text ("sync" where the text does not say).
- On the CPU a dispatch mode sees what has no Python entry point (masked indexing, reads inside PyTorch's C++). While
  it is active torch.compile's code does not run, so on the CPU a compiled forward is audited as its eager code.
- Every thread: the thread that enters the audit is watched, and so is every thread a watched thread starts while
  auditing (`Thread.start` is wrapped to wrap the new thread's `run`; on the CPU the new thread enters a dispatch mode
  of its own, as PyTorch's modes are per thread). A read on another thread than the first names it (`thread`).
- Each read goes to the innermost Python frame outside torch (file, line, the line's text), with up to two callers
  beyond it, and to the step it fell in: `step(index)` marks where a decode step begins (core.loops: the step clock;
  a user's loop: its model's forward calls), `queued()` where the host has queued the step's work. A read between
  those two is inside the step. Marks may come from any thread (they take a lock; a read takes none).

What is not counted as a read:
- host memory: on CUDA any tensor that is not on the device; on the CPU, where everything is host memory, the buffers
  marked with `host_memory()` (the pipelined loop's mirror), the targets of non_blocking copies from the device (a
  program's pinned mirror on a GPU), what `.cpu()` and `.to("cpu")` return (a copy, as on a GPU), and what is
  computed from host memory alone: on a GPU none of it would hold a device value;
- a wait on an event behind which more work was queued (the pipelined loop's): the device keeps working meanwhile, so
  these "lagged waits" are counted apart, with no cost;
- a non_blocking copy from (pinned) host memory to the device: it is queued, and the host goes on.

Cost, on CUDA: `host_ms` is the time the host spent in the call (where a wrapper brackets it); the device idle after a
read between steps runs from the moment the device drained its queue (an event recorded as the read began) to the
next launch the audit sees: a CUDA-graph replay in the next step's queuing, else the next step's start. A read
inside a step leaves idle that only the kernel measurement (core.measure.kernel_measurement) can see, and gets none
here.

On the CPU nothing blocks: the audit reports what would block on a GPU, and its costs are absent. What is for the
program's device there is told from what is host memory (above), and `.to(...)` / `torch.tensor(..., device=...)`
naming "cpu" in the line's text (not through a variable) as a copy to the host.

Its parts, in core/audit/: this module (the audit's state, its step marks, threads and CUDA costs), wrappers (the
wrapped entry points), dispatch (host memory and the CPU's dispatch mode), sites (where a read is placed, and the
records it makes), results (the result) and fixes (what to do about each read).
"""

from __future__ import annotations

import bisect
import contextlib
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from core.audit.dispatch import CpuReads
from core.audit.fixes import FIXES, KNOWN_SITES
from core.audit.results import AuditReport
from core.audit.sites import CALLERS, Caller, Marker, Read, Site, site_at, sync_kind, user_frames
from core.audit.wrappers import TensorMethodWrappers
from core.measure.step_times import StepClock

__all__ = ["FIXES", "KINDS", "KNOWN_SITES", "SyncAudit", "loop_steps"]

# Kinds of read, one word each (the report's `kind`), and what each is.
KINDS = {
    "item": "a scalar read: .item(), float(t), int(t)",
    "bool": "a truth test: bool(t), `if t:`, `if t.any():`",
    "tolist": ".tolist()",
    "copy": "a blocking copy from the device to the host: .cpu(), .numpy(), .to('cpu'), copy_ into host memory "
            "without non_blocking",
    "h2d-copy": "a blocking copy from host memory to the device: torch.tensor(data, device=...), indexing with a "
                "Python list or a host tensor, .to(device) / .cuda() / copy_ from host memory without non_blocking",
    "pageable-copy": "a non_blocking copy into pageable host memory, which blocks anyway",
    "print": "printing or formatting a tensor",
    "nonzero": "nonzero / argwhere: an output whose size depends on the data",
    "masked-index": "masked indexing t[mask] / masked_select: an output whose size depends on the data",
    "equal": "torch.equal, which returns a Python bool",
    "scalar": "a new tensor built from device scalars",
    "synchronize": "torch.cuda.synchronize()",
    "event-synchronize": "Event.synchronize() with nothing queued behind the event",
    "stream-synchronize": "Stream.synchronize()",
    "sync": "a synchronizing operation inside PyTorch or a library (PyTorch's sync debug mode)",
}
SYNC_WARNING = "synchronizing CUDA operation"  # PyTorch's sync debug mode, "warn"


@dataclass
class _Call:
    """A wrapped call in progress on a thread: at most one at a time (calls inside it are part of it)."""

    read: Read | None
    warned: bool = False


class _ThreadState(threading.local):
    """What the audit keeps per thread: whether it is watched (it entered the audit, or a watched thread started it
    while auditing), and the wrapped call in progress on it."""

    watched = False
    call: _Call | None = None


# ------------------------------------------------------------------------------------------------ the audit

class SyncAudit(TensorMethodWrappers, AuditReport):
    """Records the reads of one run. Use as a context manager around the run; call `step(index)` where each decode
    step begins and `queued()` where its work is queued (or let `loop_steps()` do it for core.loops), then `result()`.
    Threads that the run starts are audited too; `wait_for_threads()` joins them before the steps are settled.
    """

    def __init__(self, device: torch.device | str):
        self.cuda = torch.device(device).type == "cuda"
        self.reads: list[Read] = []
        self.lagged_waits = 0
        self.steps = 0
        self.step_starts_ms: list[float] = []
        self.step_ends_ms: list[float | None] = []  # where each step's host work ended (queued), where known
        self.ended = False
        self._position: tuple[int | None, bool] = (None, False)  # (step, inside it): one object, read without a lock
        self._marks = threading.RLock()  # step marks may come from any thread (and from a profile function in one)
        self._markers: list[Marker] = []
        self._candidates: list[Marker] = []  # launch points that assign_steps may make steps
        self.step_device_starts_ms: list[float] = []  # CUDA: each step's marker on the device, ms since the audit began
        self._reference: Any = None
        self._reference_ms = 0.0
        self._state = _ThreadState()
        self.active = False
        self._t0 = 0.0
        self._thread = threading.get_ident()
        self._threads: list[threading.Thread] = []  # started by watched threads while auditing
        self._restore: list[Callable[[], None]] = []
        self._event_order: dict[int, int] = {}  # id(event) -> self._launches when it was recorded
        self._launches = 0  # steps begun, events recorded and graphs replayed so far: work queued behind an event
        self._site_cache: dict[Caller, Site] = {}

    @property
    def step_index(self) -> int | None:
        """The step the next read falls in (None: before the first, or after the end)."""
        return self._position[0]

    @property
    def inside_step(self) -> bool:
        return self._position[1]

    # ---- the run's shape

    def step(self, index: int | None = None, launch: bool = True) -> None:
        """A decode step begins (index: its number; default the next one). `launch`: its work is launched right
        after this mark (False for a mark placed elsewhere in the step, as generate()'s stopping criteria are), so
        that a read's device idle can be measured up to it."""
        with self._marks:
            if self.ended:
                return
            current = self.steps if index is None else index
            self.steps = max(self.steps, current + 1)
            now = self.now_ms()
            self.step_starts_ms.append(now)
            self.step_ends_ms.append(None)
            self._position = (current, True)
            self._launches += 1
            if self.cuda and launch:
                self._markers.append(Marker("step", now, current, self._record_event()))

    def queued(self) -> None:
        """The host has queued the current step's work: what follows is between steps."""
        with self._marks:
            self._position = (self._position[0], False)
            if self.step_ends_ms and self.step_ends_ms[-1] is None:
                self.step_ends_ms[-1] = self.now_ms()

    def launch_point(self) -> int:
        """A place where work may be launched right after (an outermost module call, say): a CUDA event there, kept
        if `assign_steps` later makes it a step's start. Returns its index for that call. Any thread may call it."""
        with self._marks:
            self._candidates.append(Marker("step", self.now_ms(), None, self._record_event() if self.cuda else None))
            return len(self._candidates) - 1

    def assign_steps(self, starts: list[int], ends_ms: list[float]) -> None:
        """Steps found after the run (core.audit: the calls of the model's forward): step k began at launch point
        `starts[k]` and its host work ended at `ends_ms[k]`; each read goes to the step it fell in, by time, whichever
        thread made it. Call it before the audit's context ends (the device idle is measured from the steps' markers
        there), once the run's threads are done (`wait_for_threads`)."""
        with self._marks:
            markers = [self._candidates[i] for i in starts]
            for index, marker in enumerate(markers):
                marker.step = index
            self._markers = sorted([*markers, *(m for m in self._markers if m.kind == "replay")],
                                   key=lambda m: m.t_ms)
            self.step_starts_ms = [m.t_ms for m in markers]
            self.step_ends_ms = list(ends_ms)
            self.steps = len(markers)
            begins = self.step_starts_ms
            for read in list(self.reads):
                step = bisect.bisect_right(begins, read.t_ms) - 1
                read.step = step if step >= 0 else None
                read.inside_step = step >= 0 and read.t_ms < ends_ms[step]

    def end(self) -> None:
        """The run is over: nothing after this belongs to a step."""
        with self._marks:
            self.ended = True
            self._position = (None, False)

    def wait_for_threads(self, timeout_s: float = 30.0) -> list[str]:
        """Join the threads started while auditing, all within `timeout_s`; the names of those still running."""
        deadline = time.monotonic() + timeout_s
        for thread in list(self._threads):
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
        return [thread.name for thread in self._threads if thread.is_alive()]

    # ---- context

    @property
    def started_s(self) -> float:
        """perf_counter when the audit began: its reads' `t_ms` count from here."""
        return self._t0

    def __enter__(self) -> SyncAudit:
        self._t0 = time.perf_counter()
        self._thread = threading.get_ident()
        if self.cuda:  # where the device's clock stands on the host's (one wait, before anything is audited)
            self._reference = self._record_event()
            self._reference.synchronize()
            self._reference_ms = self.now_ms()
        for owner, name, make in self._wrappers():
            self._patch(owner, name, make)
        self._patch(threading.Thread, "start", self._starting)
        if self.cuda:
            self._watch_sync_warnings()
        else:
            self._watch_dispatch()
        self._state.watched = self.active = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self._state.watched = self.active = False
        while self._restore:
            self._restore.pop()()
        if self.cuda:
            self._settle_costs()

    # ---- threads

    def _starting(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def start(thread: threading.Thread, *args: Any, **kwargs: Any) -> Any:
            if self.active and self._state.watched:
                self._adopt(thread)
            return original(thread, *args, **kwargs)
        return start

    def _adopt(self, thread: threading.Thread) -> None:
        """Watch `thread` from its first line: its `run` (whatever a subclass made it) is wrapped on the instance."""
        run, own = thread.run, "run" in vars(thread)

        def watched_run() -> None:
            mode = self._enter_thread()
            try:
                run()
            finally:
                self._leave_thread(mode)
                if own:
                    thread.run = run  # type: ignore[method-assign]
                else:
                    vars(thread).pop("run", None)

        thread.run = watched_run  # type: ignore[method-assign]
        self._threads.append(thread)

    def _enter_thread(self) -> Any:
        if not self.active:
            return None
        self._state.watched = True
        if self.cuda:  # PyTorch's sync debug mode and the warnings filter are the process's, not a thread's
            return None
        mode = CpuReads(self)
        mode.__enter__()
        return mode

    def _leave_thread(self, mode: Any) -> None:
        self._state.watched = False
        self._state.call = None
        if mode is not None:
            mode.__exit__(None, None, None)

    # ---- recording

    def now_ms(self) -> float:
        """Milliseconds since the audit began, the clock of its reads, markers and steps (core.audit.steps' too)."""
        return (time.perf_counter() - self._t0) * 1000

    def _record(self, kind: str, what: str | None = None) -> Read:
        step, inside = self._position
        site, callers = self._where()
        thread = None if threading.get_ident() == self._thread else threading.current_thread().name
        read = Read(kind=kind, site=site, step=step, inside_step=inside, t_ms=self.now_ms(), thread=thread,
                    callers=callers, what=what)
        if self.cuda:
            read.drained = self._record_event()
        self.reads.append(read)
        return read

    def _where(self) -> tuple[Site, tuple[Caller, ...]]:
        """The read's site (the innermost frame outside torch and the audit) and up to CALLERS frames beyond it."""
        frames = user_frames(sys._getframe(1), 1 + CALLERS)
        if not frames:
            return Site("?", 0, "", "?"), ()
        site = self._site_cache.get(frames[0])
        if site is None:
            site = self._site_cache[frames[0]] = site_at(*frames[0])
        return site, tuple(frames[1:])

    def _record_event(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        _ORIGINAL_RECORD(event)
        return event

    def counts_reads_here(self) -> bool:
        """Whether a read here is the audit's: on a watched thread, outside any wrapped call."""
        state = self._state
        return state.watched and state.call is None

    @contextlib.contextmanager
    def _bracket(self, kind: str | None, what: str | None = None) -> Iterator[None]:
        """A wrapped call: record it as a read of `kind` (None: not a read), time it, and let nothing inside it count
        again (nor make host memory: the wrapper says what it returns)."""
        state = self._state
        call = state.call = _Call(self._record(kind, what) if kind else None)
        started = time.perf_counter()
        try:
            yield
        finally:
            state.call = None
            if call.read is not None and self.cuda:
                call.read.host_ms = (time.perf_counter() - started) * 1000

    # ---- the CPU: what has no Python entry point, seen where PyTorch dispatches it

    def _watch_dispatch(self) -> None:
        """Masked indexing (and scalar reads made inside PyTorch's C++) have no Python entry point to wrap: on the
        CPU a dispatch mode sees them. While one is active torch.compile's code does not run (PyTorch falls back to
        the eager code), so on the CPU a compiled forward is audited as eager."""
        mode = CpuReads(self)
        mode.__enter__()
        self._restore.append(lambda: mode.__exit__(None, None, None))

    def record_dispatched(self, kind: str | None, args: tuple[Any, ...], what: str | None = None) -> None:
        """The dispatch mode (core.audit.dispatch) saw an op that reads `args`: a read of `kind` (None:
        none), where it is the audit's and reads a device value."""
        if kind and self.counts_reads_here() and \
                any(self._device_value(a) for a in args if isinstance(a, torch.Tensor)):
            self._record(kind, what)

    # ---- PyTorch's sync debug mode (CUDA)

    def _watch_sync_warnings(self) -> None:
        mode_before = torch.cuda.get_sync_debug_mode()
        catcher = warnings.catch_warnings()
        catcher.__enter__()
        warnings.filterwarnings("always", message=f".*{SYNC_WARNING}")
        shown = warnings.showwarning

        def showwarning(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
            state = self._state
            if SYNC_WARNING not in str(message):
                shown(message, category, *args, **kwargs)
            elif state.call is not None:
                state.call.warned = True
            elif state.watched and self.active:
                self._record(*sync_kind(sys._getframe(1)))

        warnings.showwarning = showwarning
        torch.cuda.set_sync_debug_mode("warn")

        def restore() -> None:
            torch.cuda.set_sync_debug_mode(mode_before)
            catcher.__exit__(None, None, None)

        self._restore.append(restore)

    def _settle_costs(self) -> None:
        """Each read's device idle after it, from the events, once the device has finished the run; and where each
        step began on the device, on the audit's clock."""
        _ORIGINAL_SYNCHRONIZE()
        markers = self._markers
        self.step_device_starts_ms = [self._reference_ms + self._reference.elapsed_time(m.event)
                                      for m in markers if m.kind == "step" and m.event is not None]
        for read in self.reads:
            if read.drained is None or read.inside_step or read.step is None:
                continue
            resume = _next_launch(markers, read)
            if resume is not None:
                read.idle_after_ms = max(0.0, read.drained.elapsed_time(resume.event))
        for read in self.reads:
            read.drained = None
        for marker in markers:
            marker.event = None


_ORIGINAL_RECORD = torch.cuda.Event.record
_ORIGINAL_SYNCHRONIZE = torch.cuda.synchronize


def _next_launch(markers: list[Marker], read: Read) -> Marker | None:
    """The first launch the audit saw after `read`: a graph replay in the next step's queuing, else that step's
    start (eager work follows it at once)."""
    boundary = next((m for m in markers if m.kind == "step" and m.t_ms > read.t_ms), None)
    if boundary is None:
        return None
    after = next((m for m in markers if m.kind == "step" and m.t_ms > boundary.t_ms), None)
    replay = next((m for m in markers if m.kind == "replay" and m.t_ms > boundary.t_ms
                   and (after is None or m.t_ms < after.t_ms)), None)
    return replay or boundary


# ------------------------------------------------------------------------------------------------ core.loops' steps

@contextlib.contextmanager
def loop_steps(audit: SyncAudit) -> Iterator[None]:
    """The loops' step clock marks the audit's steps: a step begins where the clock marks its start, its queuing
    ends where the clock marks it queued, and the run ends where the clock stops."""
    before_step, after_step, stop = StepClock.before_step, StepClock.after_step, StepClock.stop

    def begin(clock: StepClock, index: int) -> None:
        audit.step(index)
        before_step(clock, index)

    def queued(clock: StepClock, index: int) -> None:
        after_step(clock, index)
        audit.queued()

    def end(clock: StepClock) -> None:
        audit.end()
        stop(clock)

    StepClock.before_step, StepClock.after_step, StepClock.stop = begin, queued, end
    try:
        yield
    finally:
        StepClock.before_step, StepClock.after_step, StepClock.stop = before_step, after_step, stop
