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
inside a step leaves idle that only the kernel trial (core.measure.kernel_trial) can see, and gets none here.

On the CPU nothing blocks: the audit reports what would block on a GPU, and its costs are absent. What is for the
program's device there is told from what is host memory (above), and `.to(...)` / `torch.tensor(..., device=...)`
naming "cpu" in the line's text (not through a variable) as a copy to the host.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import functools
import linecache
import os
import re
import runpy
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from core.measure.step_times import StepClock
from core.measure.sync_fixes import FIXES, KNOWN_SITES, suggest

__all__ = ["FIXES", "KINDS", "KNOWN_SITES", "SyncAudit", "fix_for", "host_memory", "loop_steps", "short_path"]

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
MAX_EVENTS = 20_000  # reads kept one by one (for timeline markers and the trace); the counts cover all of them
CALLERS = 2  # frames kept beyond a read's own, outermost last
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_CORE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # this repository's core/
_SKIPPED_FILES = {__file__, contextlib.__file__, functools.__file__, warnings.__file__, threading.__file__,
                  runpy.__file__, os.path.join(_CORE_DIR, "audit.py")}
_HOST_MEMORY: set[int] = set()  # data_ptr of each storage marked as host memory, while the storage lives


def host_memory(tensor: torch.Tensor) -> torch.Tensor:
    """Mark `tensor`'s storage as host memory, for as long as the storage lives: reading it (or a view of it) reads
    no device value (on the CPU, where everything is host memory, the audit cannot tell otherwise). Returns the
    tensor."""
    _mark(tensor, _HOST_MEMORY)
    return tensor


def _storage_pointer(tensor: torch.Tensor) -> int | None:
    if isinstance(tensor, FakeTensor):  # torch.compile tracing: it has no memory (and asking warns, later raises)
        return None
    try:
        return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError, AttributeError):
        return None


# ------------------------------------------------------------------------------------------------ what was seen

@dataclass(frozen=True)
class Site:
    file: str
    line: int
    code: str
    function: str
    path: str = field(default="", compare=False)  # the file's absolute path


Caller = tuple[Any, int]  # (code object, line): a frame that led to a read


@dataclass
class Read:
    kind: str
    site: Site
    step: int | None          # the step it fell in (None: before the first)
    inside_step: bool         # between the step's start and the end of its queuing
    t_ms: float               # host time since the audit began
    host_ms: float | None = None  # CUDA: time the host spent in the call
    drained: Any = None       # CUDA: an event recorded as the read began; it completes when the queue has drained
    idle_after_ms: float | None = None
    thread: str | None = None  # the thread's name, where it is not the one that entered the audit
    callers: tuple[Caller, ...] = ()  # up to CALLERS frames beyond the site, innermost first
    what: str | None = None   # an h2d-copy's source: "list-index", "host-index", "built" or "to-device"


@dataclass
class _Marker:
    kind: str     # "step" or "replay"
    t_ms: float
    step: int | None
    event: Any


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

class SyncAudit:
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
        self._markers: list[_Marker] = []
        self._candidates: list[_Marker] = []  # launch points that assign_steps may make steps
        self.step_device_starts_ms: list[float] = []  # CUDA: each step's marker on the device, ms since the audit began
        self._reference: Any = None
        self._reference_ms = 0.0
        self._state = _ThreadState()
        self._active = False
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
            now = self._now_ms()
            self.step_starts_ms.append(now)
            self.step_ends_ms.append(None)
            self._position = (current, True)
            self._launches += 1
            if self.cuda and launch:
                self._markers.append(_Marker("step", now, current, self._record_event()))

    def queued(self) -> None:
        """The host has queued the current step's work: what follows is between steps."""
        with self._marks:
            self._position = (self._position[0], False)
            if self.step_ends_ms and self.step_ends_ms[-1] is None:
                self.step_ends_ms[-1] = self._now_ms()

    def launch_point(self) -> int:
        """A place where work may be launched right after (an outermost module call, say): a CUDA event there, kept
        if `assign_steps` later makes it a step's start. Returns its index for that call. Any thread may call it."""
        with self._marks:
            self._candidates.append(_Marker("step", self._now_ms(), None, self._record_event() if self.cuda else None))
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
            self._reference_ms = self._now_ms()
        for owner, name, make in self._wrappers():
            self._patch(owner, name, make)
        self._patch(threading.Thread, "start", self._starting)
        if self.cuda:
            self._watch_sync_warnings()
        else:
            self._watch_dispatch()
        self._state.watched = self._active = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self._state.watched = self._active = False
        while self._restore:
            self._restore.pop()()
        if self.cuda:
            self._settle_costs()

    # ---- threads

    def _starting(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def start(thread: threading.Thread, *args: Any, **kwargs: Any) -> Any:
            if self._active and self._state.watched:
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
        if not self._active:
            return None
        self._state.watched = True
        if self.cuda:  # PyTorch's sync debug mode and the warnings filter are the process's, not a thread's
            return None
        mode = _CpuReads(self)
        mode.__enter__()
        return mode

    def _leave_thread(self, mode: Any) -> None:
        self._state.watched = False
        self._state.call = None
        if mode is not None:
            mode.__exit__(None, None, None)

    # ---- recording

    def _now_ms(self) -> float:
        return (time.perf_counter() - self._t0) * 1000

    def _record(self, kind: str, what: str | None = None) -> Read:
        step, inside = self._position
        site, callers = self._where()
        thread = None if threading.get_ident() == self._thread else threading.current_thread().name
        read = Read(kind=kind, site=site, step=step, inside_step=inside, t_ms=self._now_ms(), thread=thread,
                    callers=callers, what=what)
        if self.cuda:
            read.drained = self._record_event()
        self.reads.append(read)
        return read

    def _where(self) -> tuple[Site, tuple[Caller, ...]]:
        """The read's site (the innermost frame outside torch and the audit) and up to CALLERS frames beyond it."""
        frames = _user_frames(sys._getframe(1), 1 + CALLERS)
        if not frames:
            return Site("?", 0, "", "?"), ()
        site = self._site_cache.get(frames[0])
        if site is None:
            site = self._site_cache[frames[0]] = _site(*frames[0])
        return site, tuple(frames[1:])

    def _record_event(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        _ORIGINAL_RECORD(event)
        return event

    def _mine(self) -> bool:
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

    # ---- what each wrapper treats as a read

    def _device_value(self, tensor: Any) -> bool:
        if not isinstance(tensor, torch.Tensor):
            return False
        if self.cuda:
            return tensor.is_cuda
        if tensor.device.type == "meta":
            return False
        pointer = _storage_pointer(tensor)
        return pointer is None or pointer not in _HOST_MEMORY  # no plain storage (a subclass): a device value

    def _host(self, tensor: torch.Tensor) -> bool:
        """Host memory, from which a copy to the device waits (CUDA: any CPU tensor; CPU: what is marked so)."""
        if self.cuda:
            return tensor.device.type == "cpu"
        return _storage_pointer(tensor) in _HOST_MEMORY

    def _wrappers(self) -> list[tuple[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]]]:
        reads_self = {"item": "item", "__bool__": "bool", "__float__": "item", "__int__": "item",
                      "__index__": "item", "tolist": "tolist", "numpy": "copy", "__repr__": "print",
                      "__format__": "print", "nonzero": "nonzero", "masked_select": "masked-index"}
        wrappers: list[tuple[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]]] = [
            (torch.Tensor, name, functools.partial(self._reading_self, kind)) for name, kind in reads_self.items()]
        wrappers += [(torch, name, functools.partial(self._reading_arg, kind))
                     for name, kind in (("nonzero", "nonzero"), ("argwhere", "nonzero"), ("equal", "equal"),
                                        ("masked_select", "masked-index"))]
        wrappers += [(torch, name, functools.partial(self._from_data, name == "tensor"))
                     for name in ("tensor", "as_tensor")]
        wrappers += [(torch, "asarray", functools.partial(self._from_data, True)),
                     (torch.Tensor, "new_tensor", self._new_tensor)]
        wrappers += [(torch.Tensor, "cpu", self._cpu), (torch.Tensor, "to", self._to),
                     (torch.Tensor, "copy_", self._copy)]
        if self.cuda:
            wrappers += [(torch.Tensor, "cuda", self._cuda),
                         (torch.cuda, "synchronize", functools.partial(self._waiting, "synchronize")),
                         (torch.cuda.Stream, "synchronize", functools.partial(self._waiting, "stream-synchronize")),
                         (torch.cuda.Event, "synchronize", self._event_wait),
                         (torch.cuda.Event, "record", self._event_record),
                         (torch.cuda.CUDAGraph, "replay", self._replay)]
        return wrappers

    def _patch(self, owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        had_own = name in vars(owner)
        original = getattr(owner, name)
        setattr(owner, name, functools.wraps(original)(make(original)))

        def restore() -> None:
            if had_own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)

        self._restore.append(restore)

    def _reading_self(self, kind: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._mine():
                return original(tensor, *args, **kwargs)
            with self._bracket(kind if self._device_value(tensor) else None):
                return original(tensor, *args, **kwargs)
        return wrapper

    def _reading_arg(self, kind: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not self._mine():
                return original(*args, **kwargs)
            reads = any(self._device_value(a) for a in (*args, *kwargs.values()))
            with self._bracket(kind if reads else None):
                return original(*args, **kwargs)
        return wrapper

    def _cpu(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """`.cpu()` of a device value: one read, and (on the CPU) a host copy, as a GPU's would be."""
        def wrapper(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._mine() or not self._device_value(tensor):
                return original(tensor, *args, **kwargs)
            with self._bracket("copy"):
                return self._host_copy(tensor, original(tensor, *args, **kwargs))
        return wrapper

    def _host_copy(self, source: torch.Tensor, result: Any) -> Any:
        """On the CPU, what a copy to the host returns: host memory of its own (`.cpu()` of a CPU tensor is the
        tensor itself, so it is cloned: on a GPU it would be a copy too)."""
        if self.cuda or not isinstance(result, torch.Tensor):
            return result
        if _storage_pointer(result) == _storage_pointer(source):
            result = result.clone()
        return host_memory(result)

    def _device_copy(self, source: torch.Tensor, result: Any) -> Any:
        """On the CPU, what a copy from host memory to the device returns: memory of its own, not host memory."""
        if self.cuda or not isinstance(result, torch.Tensor):
            return result
        return result.clone() if _storage_pointer(result) in _HOST_MEMORY else result

    def _to(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            target = _target_device(args, kwargs) if self._mine() else None
            if target is None:
                return original(tensor, *args, **kwargs)
            non_blocking = _non_blocking(args, kwargs)
            direction = self._direction(tensor, target)
            if direction == "d2h":
                with self._bracket("pageable-copy" if non_blocking else "copy"):
                    return self._host_copy(tensor, original(tensor, *args, **kwargs))
            if direction == "h2d":
                with self._bracket(None if non_blocking else "h2d-copy", "to-device"):
                    return self._device_copy(tensor, original(tensor, *args, **kwargs))
            return original(tensor, *args, **kwargs)
        return wrapper

    def _direction(self, tensor: torch.Tensor, target: torch.device) -> str | None:
        """"d2h", "h2d" or None (a copy within one side) for `tensor.to(target)`. On the CPU both sides are the CPU:
        a line that names "cpu" copies to the host, any other `.to(device)` of host memory to the device."""
        if self.cuda:
            if tensor.is_cuda and target.type == "cpu":
                return "d2h"
            return "h2d" if tensor.device.type == "cpu" and target.type == "cuda" and tensor.numel() else None
        if target.type != "cpu" or not tensor.numel():
            return None
        host = self._host(tensor)
        names_cpu = _names_cpu(self._where()[0].code)
        if not host and names_cpu:
            return "d2h"
        return "h2d" if host and not names_cpu else None

    def _cuda(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._mine() or tensor.is_cuda or _non_blocking(args, kwargs) or not tensor.numel():
                return original(tensor, *args, **kwargs)
            with self._bracket("h2d-copy", "to-device"):
                return original(tensor, *args, **kwargs)
        return wrapper

    def _copy(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(target: Any, source: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._mine() or not isinstance(source, torch.Tensor):
                return original(target, source, *args, **kwargs)
            kind = self._copy_kind(target, source, _non_blocking(args, kwargs))
            if kind is None:
                return original(target, source, *args, **kwargs)
            with self._bracket(kind, "to-device" if kind == "h2d-copy" else None):
                return original(target, source, *args, **kwargs)
        return wrapper

    def _copy_kind(self, target: torch.Tensor, source: torch.Tensor, non_blocking: bool) -> str | None:
        """target.copy_(source): "copy" (to the host), "pageable-copy", "h2d-copy" (from host memory) or None."""
        if self.cuda:
            if not (target.is_cuda or source.is_cuda):
                return None
            to_host, from_host = not target.is_cuda, not source.is_cuda
        else:
            to_host, from_host = self._host(target), self._host(source)
            if non_blocking and not from_host:
                # On the CPU a non_blocking copy from the device fills the program's host mirror (on a GPU, pinned
                # memory)
                host_memory(target)
                return None
        if to_host and not from_host:
            if not non_blocking:
                return "copy"
            return "pageable-copy" if self.cuda and not target.is_pinned() else None
        return "h2d-copy" if from_host and not to_host and not non_blocking and source.numel() else None

    def _from_data(self, copies: bool, original: Callable[..., Any]) -> Callable[..., Any]:
        """torch.tensor / torch.as_tensor (`copies`: torch.tensor): from device scalars, a read of each; from host
        data onto the device, an h2d-copy."""
        def wrapper(data: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._mine():
                return original(data, *args, **kwargs)
            if isinstance(data, list | tuple) and any(self._device_value(x) for x in _flat(data)):
                with self._bracket("scalar"):
                    return original(data, *args, **kwargs)
            if not self._builds_on_device(data, args if not copies else (), kwargs):
                if self.cuda:
                    return original(data, *args, **kwargs)
                with self._bracket(None):  # so that the dispatch mode does not take it for a list PyTorch converts
                    return original(data, *args, **kwargs)
            with self._bracket("h2d-copy", "built"):
                return self._device_copy(data, original(data, *args, **kwargs))
        return wrapper

    def _new_tensor(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """`t.new_tensor(data)`: from host data onto t's device (or the one named), an h2d-copy."""
        def wrapper(tensor: Any, data: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._mine():
                return original(tensor, data, *args, **kwargs)
            if kwargs.get("device") is not None:
                onto_device = self._builds_on_device(data, (), kwargs)
            else:  # onto t's own device
                onto_device = self._device_value(tensor) and not _empty(data) and \
                    not (isinstance(data, torch.Tensor) and self._device_value(data))
            with self._bracket("h2d-copy" if onto_device else None, "built"):
                made = original(tensor, data, *args, **kwargs)
                return made if onto_device or self.cuda else host_memory(made)
        return wrapper

    def _builds_on_device(self, data: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether torch.tensor / as_tensor copies host data to the device (`args`: as_tensor's dtype, device)."""
        device = kwargs.get("device", args[1] if len(args) > 1 else None)
        if _empty(data) or (isinstance(data, torch.Tensor) and self._device_value(data)):
            return False  # nothing to copy, or nothing on the host
        if self.cuda:
            target = torch.device(device) if device is not None else torch.get_default_device()
            return target.type == "cuda"
        # On the CPU: a device named, and not as "cpu" in the line's text (a program's host tensor)
        return device is not None and torch.device(device).type == "cpu" and not _names_cpu(self._where()[0].code)

    def _waiting(self, kind: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not self._mine():
                return original(*args, **kwargs)
            with self._bracket(kind):
                return original(*args, **kwargs)
        return wrapper

    def _event_record(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(event: Any, *args: Any, **kwargs: Any) -> Any:
            with self._marks:
                self._launches += 1
                self._event_order[id(event)] = self._launches
            return original(event, *args, **kwargs)
        return wrapper

    def _event_wait(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(event: Any) -> Any:
            if not self._mine():
                return original(event)
            behind = self._launches > self._event_order.get(id(event), self._launches)
            if behind:  # more work is queued after this event: the device keeps working while the host waits
                with self._marks:
                    self.lagged_waits += 1
                return original(event)
            with self._bracket("event-synchronize"):
                return original(event)
        return wrapper

    def _replay(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(graph: Any, *args: Any, **kwargs: Any) -> Any:
            if self._mine():
                with self._marks:
                    self._launches += 1
                    self._markers.append(_Marker("replay", self._now_ms(), self._position[0], self._record_event()))
            return original(graph, *args, **kwargs)
        return wrapper

    # ---- the CPU: what has no Python entry point, seen where PyTorch dispatches it

    def _watch_dispatch(self) -> None:
        """Masked indexing (and scalar reads made inside PyTorch's C++) have no Python entry point to wrap: on the
        CPU a dispatch mode sees them. While one is active torch.compile's code does not run (PyTorch falls back to
        the eager code), so on the CPU a compiled forward is audited as eager."""
        mode = _CpuReads(self)
        mode.__enter__()
        self._restore.append(lambda: mode.__exit__(None, None, None))

    def _dispatched(self, kind: str | None, args: tuple[Any, ...], what: str | None = None) -> None:
        if kind and self._mine() and any(self._device_value(a) for a in args if isinstance(a, torch.Tensor)):
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
            elif state.watched and self._active:
                self._record(*_sync_kind(sys._getframe(1)))

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

    # ---- the report

    def result(self, **extra: Any) -> dict[str, Any]:
        """The audit as the report holds it (JSON-ready); `extra` is added as it is (the audited run's rate, say)."""
        decode = set(range(1, self.steps - 1))  # not the prefill, not the last step (every loop's final wait)
        per_step = [0] * self.steps
        for read in self.reads:
            if read.step is not None and read.step < self.steps:
                per_step[read.step] += 1
        in_decode = [per_step[i] for i in sorted(decode)]
        order = {site: index for index, site in enumerate(self._site_order())}
        out: dict[str, Any] = {
            "device": "cuda" if self.cuda else "cpu", "steps": self.steps, "decode_steps": len(decode),
            "reads": len(self.reads), "reads_per_step": per_step,
            "reads_per_decode_step": sum(in_decode) / len(in_decode) if in_decode else None,
            "most_reads_in_a_decode_step": max(in_decode, default=None),
            "lagged_waits": self.lagged_waits, "sites": self._sites(decode, list(order)),
            "threads": self._thread_reads(),
            "events": [{"step": r.step, "t_ms": round(r.t_ms, 4), "site": order[r.site], "host_ms": _round(r.host_ms)}
                       for r in self.reads[:MAX_EVENTS]],
            "step_starts_ms": [round(t, 4) for t in self.step_starts_ms],
            "step_ends_ms": [None if t is None else round(t, 4) for t in self.step_ends_ms],
            "step_device_starts_ms": [round(t, 4) for t in self.step_device_starts_ms],
        }
        if not self.cuda:
            out["note"] = ("on the CPU host and device are one processor, so these reads cost nothing here; on a GPU "
                           "each would block the host until the device caught up")
        return {**out, **extra}

    def _thread_reads(self) -> dict[str, int]:
        """Each thread started while auditing, by name, and its reads."""
        counts = {thread.name: 0 for thread in self._threads}
        for read in self.reads:
            if read.thread is not None:
                counts[read.thread] = counts.get(read.thread, 0) + 1
        return counts

    def _site_order(self) -> list[Site]:
        """Sites in the order first seen: the `site` index of the report's events."""
        return list(dict.fromkeys(read.site for read in self.reads))

    def _sites(self, decode: set[int], order: list[Site]) -> list[dict[str, Any]]:
        """One row per site (in `order`, its `index` the events' `site`), the most reads per decode step first."""
        steps = max(1, len(decode))
        by_site: dict[Site, list[Read]] = {site: [] for site in order}
        for read in self.reads:
            by_site[read.site].append(read)
        rows = []
        for index, site in enumerate(order):
            reads = by_site[site]
            kinds = list(dict.fromkeys(r.kind for r in reads))
            what = _most_common(r.what for r in reads if r.what)
            fix, fix_code = suggest(site.file, site.code, kinds[0], what, site.path.startswith(_CORE_DIR),
                                    site.function)
            row: dict[str, Any] = {
                "index": index, "file": site.file, "line": site.line, "code": site.code, "function": site.function,
                "kind": kinds[0] if len(kinds) == 1 else "/".join(kinds), "count": len(reads),
                "in_decode_steps": sum(1 for r in reads if r.step in decode),
                "where": "inside a step" if any(r.inside_step for r in reads) else "between steps",
                "thread": _thread_of(reads), "callers": _callers_text(_most_common(r.callers for r in reads) or ()),
                "fix": fix, "fix_code": fix_code,
            }
            row["per_step"] = row["in_decode_steps"] / steps if decode else None
            if self.cuda:
                row.update(_costs(reads, decode, steps))
            rows.append(row)
        return sorted(rows, key=lambda r: (-r["in_decode_steps"], -r["count"]))


_ORIGINAL_RECORD = torch.cuda.Event.record
_ORIGINAL_SYNCHRONIZE = torch.cuda.synchronize


def fix_for(site: Site, kind: str) -> str:
    """What a read at `site` is and what to do about it, in one line."""
    return suggest(site.file, site.code, kind, None, site.path.startswith(_CORE_DIR), site.function)[0]


def _costs(reads: list[Read], decode: set[int], steps: int) -> dict[str, float | None]:
    blocked = [r.host_ms for r in reads if r.host_ms is not None]
    idle = [r.idle_after_ms for r in reads if r.idle_after_ms is not None]
    decode_idle = [r.idle_after_ms for r in reads if r.idle_after_ms is not None and r.step in decode]
    decode_blocked = [r.host_ms for r in reads if r.host_ms is not None and r.step in decode]
    return {"host_blocked_ms": _round(sum(blocked)) if blocked else None,
            "host_blocked_ms_per_step": _round(sum(decode_blocked) / steps) if decode_blocked else None,
            "device_idle_after_ms": _round(sum(idle)) if idle else None,
            "device_idle_after_ms_per_step": _round(sum(decode_idle) / steps) if decode_idle else None}


def _most_common(values: Iterator[Any]) -> Any:
    counts = collections.Counter(values)
    return counts.most_common(1)[0][0] if counts else None


def _thread_of(reads: list[Read]) -> str | None:
    """The threads other than the audit's own that read at a site, most reads first; None for none."""
    named = collections.Counter(r.thread for r in reads if r.thread is not None)
    return ", ".join(name for name, _ in named.most_common()) or None


def _callers_text(callers: tuple[Caller, ...]) -> list[str]:
    return [f"{short_path(code.co_filename)}:{line} {code.co_name}" for code, line in callers]


def _next_launch(markers: list[_Marker], read: Read) -> _Marker | None:
    """The first launch the audit saw after `read`: a graph replay in the next step's queuing, else that step's
    start (eager work follows it at once)."""
    boundary = next((m for m in markers if m.kind == "step" and m.t_ms > read.t_ms), None)
    if boundary is None:
        return None
    after = next((m for m in markers if m.kind == "step" and m.t_ms > boundary.t_ms), None)
    replay = next((m for m in markers if m.kind == "replay" and m.t_ms > boundary.t_ms
                   and (after is None or m.t_ms < after.t_ms)), None)
    return replay or boundary


@functools.lru_cache(maxsize=4096)
def _skipped(filename: str) -> bool:
    """torch's files, the audit's own and the machinery around a program (threading, runpy, core/audit.py)."""
    return filename.startswith(_TORCH_DIR) or filename in _SKIPPED_FILES or filename.startswith("<frozen")


def _user_frames(frame: Any, limit: int) -> list[Caller]:
    found: list[Caller] = []
    while frame is not None and len(found) < limit:
        if not _skipped(frame.f_code.co_filename):
            found.append((frame.f_code, frame.f_lineno))
        frame = frame.f_back
    return found


def _site(code: Any, line: int) -> Site:
    filename = code.co_filename
    return Site(short_path(filename), line, linecache.getline(filename, line).strip(), code.co_name,
                os.path.abspath(filename))


def _caller_site() -> Site:
    """The innermost frame outside torch and this module: where the program asked for the read."""
    frames = _user_frames(sys._getframe(1), 1)
    return _site(*frames[0]) if frames else Site("?", 0, "", "?")


def short_path(filename: str) -> str:
    """A path as a reader finds it: an installed package's file from the package on (transformers/masking_utils.py),
    wherever it is installed; the program's own files relative to the working folder; else relative to the import
    root that holds it, or whole."""
    roots = [root for root in sys.path if root and os.path.isabs(root)]
    holding = [root for root in roots if filename.startswith(root.rstrip(os.sep) + os.sep)]
    installed = [root for root in holding if os.path.basename(root.rstrip(os.sep)) in ("site-packages",
                                                                                       "dist-packages")]
    if installed:
        return os.path.relpath(filename, max(installed, key=len))
    here = os.getcwd()
    if filename.startswith(here.rstrip(os.sep) + os.sep):
        return os.path.relpath(filename, here)
    return os.path.relpath(filename, max(holding, key=len)) if holding else filename


def _is_mask(index: Any) -> bool:
    return isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8)


_DISPATCHED_READS = {"aten._local_scalar_dense": "item", "aten.is_nonzero": "bool", "aten.nonzero": "nonzero",
                     "aten.masked_select": "masked-index", "aten.equal": "equal"}
_INDEX_OPS = frozenset({"aten.index", "aten.index_put", "aten.index_put_"})
_LIFTS = frozenset({"aten.lift_fresh", "aten.lift_fresh_copy"})  # a tensor PyTorch's C++ made from Python data
_OP_NAMES: dict[Any, str] = {}
_FROM_PYTHON: set[int] = set()  # storages of the tensors PyTorch made of a Python list (an index, a value), alive


class _CpuReads(TorchDispatchMode):
    """The reads the CPU's Python entry points do not show: masked indexing (aten.index / index_put_ with a boolean
    index), and scalar reads, truth tests and data-dependent shapes that PyTorch's C++ makes on its own. It also
    carries host memory: what an op computes from host memory alone is host memory (a clone of a pinned copy, say).
    One per watched thread (PyTorch's dispatch modes are per thread)."""

    def __init__(self, audit: SyncAudit):
        super().__init__()
        self.audit = audit

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        audit = self.audit
        if not audit._active:  # a thread that outlived the audit
            return func(*args, **kwargs)
        name = _OP_NAMES.get(func)
        if name is None:
            name = _OP_NAMES[func] = func.overloadpacket._qualified_op_name.replace("::", ".")
        kind, what = _DISPATCHED_READS.get(name), None
        if name in _INDEX_OPS and len(args) > 1:
            if any(_is_mask(i) for i in args[1] or ()) and not _fills_a_mask(name, args):
                kind = "masked-index"
            elif (what := _host_indices(args)) is not None:
                kind = "h2d-copy"
        elif name == "aten.copy_" and len(args) > 1 and not _non_blocking(args[2:], kwargs):
            what = _from_host(args[1])
            kind = "h2d-copy" if what else None
        audit._dispatched(kind, args[:1], what)
        out = func(*args, **kwargs)
        if name in _LIFTS:
            if audit._mine():  # not inside torch.tensor and its kin: a list PyTorch turns into an index or a value
                _mark(out, _FROM_PYTHON)
                host_memory(out)
        elif _HOST_MEMORY and args and audit._mine():
            _carry_host_memory(args, kwargs, out)
        return out


def _from_host(tensor: Any) -> str | None:
    """What a copy from `tensor` to the device copies, where `tensor` is host memory: "built" (a Python list made a
    tensor) or "to-device"; None where it is not host memory."""
    if not isinstance(tensor, torch.Tensor) or not tensor.numel():
        return None
    pointer = _storage_pointer(tensor)
    if pointer not in _HOST_MEMORY:
        return None
    return "built" if pointer in _FROM_PYTHON else "to-device"


def _host_indices(args: tuple[Any, ...]) -> str | None:
    """aten.index / index_put_ with an index in host memory (a Python list, a host tensor) or, for index_put_, a
    value there: on a GPU it is copied to the device first, and the host waits."""
    for index in args[1] or ():
        if isinstance(index, torch.Tensor) and index.dim() > 0 and _storage_pointer(index) in _HOST_MEMORY:
            return "list-index" if _storage_pointer(index) in _FROM_PYTHON else "host-index"
    value = args[2] if len(args) > 2 else None
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return _from_host(value)
    return None


def _mark(tensor: Any, registry: set[int]) -> None:
    """Put `tensor`'s storage in `registry` for as long as the storage lives."""
    if not isinstance(tensor, torch.Tensor):
        return
    pointer = _storage_pointer(tensor)
    if pointer and pointer not in registry:  # 0: an empty storage, which every empty tensor shares
        registry.add(pointer)
        weakref.finalize(tensor.untyped_storage(), registry.discard, pointer)


def _carry_host_memory(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
    """Mark what an op made from host memory alone as host memory (checked on its first argument first: cheap)."""
    first = args[0][0] if isinstance(args[0], list | tuple) and args[0] else args[0]
    if not isinstance(first, torch.Tensor) or _storage_pointer(first) not in _HOST_MEMORY:
        return
    inputs = [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
    if all(_storage_pointer(t) in _HOST_MEMORY for t in inputs):
        for made in pytree.tree_leaves(out):
            if isinstance(made, torch.Tensor):
                host_memory(made)


def _fills_a_mask(name: str, args: tuple[Any, ...]) -> bool:
    """`t[mask] = scalar`: PyTorch runs it as masked_fill_ (canDispatchToMaskedFill: one mask, a one-element value on
    the CPU), which needs no count of the mask, so it reads nothing."""
    if not name.startswith("aten.index_put") or len(args) < 3:
        return False
    value = args[2]
    masks = [i for i in args[1] if i is not None]
    return isinstance(value, torch.Tensor) and value.numel() == 1 and value.device.type == "cpu" and len(masks) == 1


_CODE_KINDS = (  # the kind of a read that only PyTorch's sync debug mode saw, from the text of its line
    (re.compile(r"\.item\(\)"), "item"), (re.compile(r"\.tolist\(\)"), "tolist"),
    (re.compile(r"torch\.equal\("), "equal"), (re.compile(r"\bprint\("), "print"),
    (re.compile(r"nonzero|argwhere|unique|repeat_interleave|bincount"), "nonzero"),
    (re.compile(r"\w\[(?:[^\[\]]*,)?\s*\[\s*-?\w|\.cuda\("), "h2d-copy"),  # a list index (x[:, [-1]]), .cuda()
    (re.compile(r"\.(cpu|numpy)\(|\.to\(|copy_\("), "copy"),
    (re.compile(r"\w\[[^\]]+\]"), "masked-index"),
    (re.compile(r"^\s*(if|elif|while|assert)\b|\bbool\(|\b(and|or|not)\b"), "bool"),
)


def _kind_from_code(code: str) -> str:
    return next((kind for pattern, kind in _CODE_KINDS if pattern.search(code)), "sync")


def _sync_kind(frame: Any) -> tuple[str, str | None]:
    """The kind (and an h2d-copy's `what`) of a sync only PyTorch's sync debug mode saw, from its line's text and,
    for a subscript, from what the names inside it hold: a list or a host tensor there is copied to the device (as is
    one assigned into a device tensor), where a device mask is counted."""
    while frame is not None and _skipped(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return "sync", None
    code = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    kind = _kind_from_code(code)
    if kind == "h2d-copy":
        return kind, "to-device" if ".cuda(" in code else "list-index"
    if kind == "masked-index":
        what = _host_operand(frame, code)
        if what is not None:
            return "h2d-copy", what
    return kind, None


_SUBSCRIPT = re.compile(r"(?:\w|\])\[([^\[\]]*)\]")
_ASSIGNED = re.compile(r"^\s*[\w.]+\[.*\]\s*=(?!=)\s*(.+)$")
_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def _host_operand(frame: Any, code: str) -> str | None:
    """What a line's subscripts (and, for `t[...] = v`, v) hold that lives in host memory: "list-index" /
    "host-index" for an index, "built" / "to-device" for a value; None where nothing does."""
    assigned = _ASSIGNED.match(code)
    parts = [(inner, "list-index", "host-index") for inner in _SUBSCRIPT.findall(code)]
    if assigned:
        parts.append((assigned.group(1), "built", "to-device"))
    for text, from_list, from_tensor in parts:
        for name in _NAME.findall(text):
            value = _resolve(frame, name)
            if isinstance(value, list | tuple) and value:
                return from_list
            if isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.dim() > 0:
                return from_tensor
            if type(value).__module__ == "numpy" and getattr(value, "ndim", 0) > 0:
                return from_tensor
    return None


def _resolve(frame: Any, name: str) -> Any:
    """A (dotted) name's value in `frame`, from its locals and globals and the objects' own attributes only (no
    property runs); None where it has none."""
    first, *rest = name.split(".")
    value = frame.f_locals.get(first, frame.f_globals.get(first))
    for part in rest:
        value = getattr(value, "__dict__", {}).get(part)
    return value


_NAMES_CPU = re.compile(r"""["']cpu(:\d+)?["']""")


def _names_cpu(code: str) -> bool:
    """Whether a line names the CPU in its text ("cpu"): on the CPU, `.to("cpu")` copies to the host, where
    `.to(device)` moves to the program's device."""
    return bool(_NAMES_CPU.search(code))


def _target_device(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.device | None:
    """The device Tensor.to's arguments name (None: a dtype only)."""
    value = kwargs.get("device")
    if value is None:
        for arg in args:
            if isinstance(arg, torch.Tensor):
                return arg.device
            if isinstance(arg, str | torch.device) or type(arg) is int:
                value = arg
                break
    if value is None:
        return None
    try:
        return torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        return None


def _non_blocking(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return bool(kwargs.get("non_blocking")) or any(a is True for a in args)


def _empty(data: Any) -> bool:
    """Data with no element (torch.tensor([]), say): PyTorch copies nothing."""
    if isinstance(data, list | tuple):
        return not any(True for _ in _flat(data))
    size = data.numel() if isinstance(data, torch.Tensor) else getattr(data, "size", None)
    return size == 0


def _flat(data: Any) -> Iterator[Any]:
    for item in data:
        if isinstance(item, list | tuple):
            yield from _flat(item)
        else:
            yield item


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


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
