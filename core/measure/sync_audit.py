"""The sync audit: every host read of a device value in a run, found at its line, counted per decode step, and on
CUDA what it cost.

A read of a device value blocks the host until the device has computed it: `.item()` (and `float(t)`, `int(t)`),
`bool(t)` and `if t:` (`if t.any():` too), `.tolist()`, `.cpu()` / `.numpy()` / `.to("cpu")`, `print(t)`,
`nonzero` and masked indexing, `torch.equal`, a tensor built from device scalars. So do explicit waits
(`torch.cuda.synchronize()`, an Event's or a Stream's `synchronize()`), and a `non_blocking=True` copy into pageable
host memory, which CUDA runs as a blocking one. While the host waits it queues nothing; once the device has drained its
queue, it idles until the host launches again.

How each is seen:
- For the audit's duration the Python entry points of those reads are wrapped (Tensor methods and torch functions).
  A wrapper costs a microsecond and changes nothing torch.compile made: compiled code does not call them, and the
  Python between compiled graphs calls them as before (checked: no recompile).
- On CUDA, PyTorch's own sync debug mode ("warn") reports every sync its C++ code makes, also inside compiled graphs
  and libraries (masked indexing among them): one outside any wrapped call is recorded at its line, its kind read
  from the line's text ("sync" where the text does not say).
- On the CPU a dispatch mode sees what has no Python entry point (masked indexing, reads inside PyTorch's C++). While
  it is active torch.compile's code does not run, so on the CPU a compiled forward is audited as its eager code.
- Each read goes to the innermost Python frame outside torch (file, line, the line's text), and to the step it fell
  in: `step(index)` marks where a decode step begins (core.loops: the step clock; a user's loop: its model's forward
  calls), `queued()` where the host has queued the step's work. A read between those two is inside the step.

What is not counted as a read:
- host memory: on CUDA any tensor that is not on the device; on the CPU, where everything is host memory, the buffers
  marked with `host_memory()` (the pipelined loop's mirror) and the targets of non_blocking copies (a program's
  pinned mirror on a GPU), which on a GPU would not hold device values;
- a wait on an event behind which more work was queued (the pipelined loop's): the device keeps working meanwhile, so
  these "lagged waits" are counted apart, with no cost.

Cost, on CUDA: `host_ms` is the time the host spent in the call (where a wrapper brackets it); the device idle after a
read between steps runs from the moment the device drained its queue (an event recorded as the read began) to the
next launch the audit sees: a CUDA-graph replay in the next step's queuing, else the next step's start. A read
inside a step leaves idle that only the kernel trial (core.measure.kernel_trial) can see, and gets none here.

On the CPU nothing blocks: the audit reports what would block on a GPU, and its costs are absent.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import linecache
import os
import re
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from core.measure.step_times import StepClock

# Kinds of read, one word each (the report's `kind`), and what each is.
KINDS = {
    "item": "a scalar read: .item(), float(t), int(t)",
    "bool": "a truth test: bool(t), `if t:`, `if t.any():`",
    "tolist": ".tolist()",
    "copy": "a blocking copy between host and device: .cpu(), .numpy(), .to('cpu'), copy_ without non_blocking",
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
# What to do about each kind, in one line; KNOWN_SITES refines it for the sites the loops meet in libraries.
FIXES = {
    "item": "copy the value with non_blocking=True into pinned memory and read it a step later, after a CUDA event "
            "says it landed, as the pipelined loop does (core/loops/generation.py, HostMirror)",
    "bool": "keep the decision on the device (torch.where, masks), or read a pinned copy of the flag a step later "
            "(core/loops/generation.py, HostMirror)",
    "tolist": "copy into a pinned buffer with non_blocking=True and read it once a CUDA event says it landed",
    "copy": "copy into a pinned buffer with non_blocking=True and read it once a CUDA event says it landed",
    "pageable-copy": "allocate the destination with pin_memory=True: non_blocking=True into pageable memory blocks",
    "print": "log a pinned copy read later, or print outside the decode loop",
    "nonzero": "use a fixed-size form (torch.where with a fill value, masked_fill, nonzero_static(size=...))",
    "masked-index": "use torch.where / masked_fill, which keep the shape, instead of t[mask]",
    "equal": "compare on the device ((a == b).all()) and read the result a step later, or not at all in the loop",
    "scalar": "build the tensor on the device (torch.stack, torch.cat) instead of from Python numbers read back",
    "synchronize": "wait on an event recorded a step or more earlier instead of emptying the whole queue",
    "event-synchronize": "record the event a step or more before waiting on it, so work is still queued behind it",
    "stream-synchronize": "wait on an event recorded a step or more earlier instead of emptying the stream",
    "sync": "the operation named at this line synchronizes inside PyTorch; look for a form whose output size "
            "or control flow does not depend on device values",
}
# (path suffix, text in the line) -> what it is and what to do, for sites in libraries the loops use.
KNOWN_SITES = (
    ("transformers/masking_utils.py", "fast_all", "transformers reads the attention mask on the host to decide whether "
     "a mask is needed: pass attention_mask=None when no row is padded (as generate() does), and for a padded batch "
     "a mask function that does not try to skip it (core/kernels/attention.py)"),
    ("transformers/generation/utils.py", "unfinished_sequences.max() == 0", "generate()'s StopCheck reads the stop "
     "flag every step; its DeferredStopCheck reads it a step late (transformers enables it on mps only: "
     "core/loops/hf_generate.py forces it on for CUDA)"),
)
SYNC_WARNING = "synchronizing CUDA operation"  # PyTorch's sync debug mode, "warn"
MAX_EVENTS = 20_000  # reads kept one by one (for timeline markers and the trace); the counts cover all of them
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_SKIPPED_FILES = {__file__, contextlib.__file__, functools.__file__, warnings.__file__}
_HOST_MEMORY: dict[int, int] = {}  # data_ptr of a storage marked as host memory -> how many tensors marked it


def host_memory(tensor: torch.Tensor) -> torch.Tensor:
    """Mark `tensor`'s storage as host memory: reading it reads no device value (on the CPU, where everything is host
    memory, the audit cannot tell otherwise). Returns the tensor."""
    pointer = tensor.untyped_storage().data_ptr()
    _HOST_MEMORY[pointer] = _HOST_MEMORY.get(pointer, 0) + 1
    weakref.finalize(tensor, _forget_host_memory, pointer)
    return tensor


def _forget_host_memory(pointer: int) -> None:
    left = _HOST_MEMORY.get(pointer, 0) - 1
    if left > 0:
        _HOST_MEMORY[pointer] = left
    else:
        _HOST_MEMORY.pop(pointer, None)


# ------------------------------------------------------------------------------------------------ what was seen

@dataclass(frozen=True)
class Site:
    file: str
    line: int
    code: str
    function: str


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


@dataclass
class _Marker:
    kind: str     # "step" or "replay"
    t_ms: float
    step: int | None
    event: Any


@dataclass
class _Call:
    """A wrapped call in progress: at most one at a time (calls inside it are part of it)."""

    read: Read | None
    warned: bool = False


# ------------------------------------------------------------------------------------------------ the audit

class SyncAudit:
    """Records the reads of one run. Use as a context manager around the run; call `step(index)` where each decode
    step begins and `queued()` where its work is queued (or let `loop_steps()` do it for core.loops), then `result()`.
    """

    def __init__(self, device: torch.device | str):
        self.cuda = torch.device(device).type == "cuda"
        self.reads: list[Read] = []
        self.lagged_waits = 0
        self.step_index: int | None = None
        self.steps = 0
        self.step_starts_ms: list[float] = []
        self.step_ends_ms: list[float | None] = []  # where each step's host work ended (queued), where known
        self.inside_step = False
        self.ended = False
        self._markers: list[_Marker] = []
        self._candidates: list[_Marker] = []  # launch points that assign_steps may make steps
        self.step_device_starts_ms: list[float] = []  # CUDA: each step's marker on the device, ms since the audit began
        self._reference: Any = None
        self._reference_ms = 0.0
        self._call: _Call | None = None
        self._t0 = 0.0
        self._thread = threading.get_ident()
        self._restore: list[Callable[[], None]] = []
        self._event_order: dict[int, int] = {}  # id(event) -> self._launches when it was recorded
        self._launches = 0  # steps begun, events recorded and graphs replayed so far: work queued behind an event

    # ---- the run's shape

    def step(self, index: int | None = None, launch: bool = True) -> None:
        """A decode step begins (index: its number; default the next one). `launch`: its work is launched right
        after this mark (False for a mark placed elsewhere in the step, as generate()'s stopping criteria are), so
        that a read's device idle can be measured up to it."""
        if self.ended:
            return
        self.step_index = self.steps if index is None else index
        self.steps = max(self.steps, self.step_index + 1)
        now = self._now_ms()
        self.step_starts_ms.append(now)
        self.step_ends_ms.append(None)
        self.inside_step = True
        self._launches += 1
        if self.cuda and launch:
            self._markers.append(_Marker("step", now, self.step_index, self._record_event()))

    def queued(self) -> None:
        """The host has queued the current step's work: what follows is between steps."""
        self.inside_step = False
        if self.step_ends_ms and self.step_ends_ms[-1] is None:
            self.step_ends_ms[-1] = self._now_ms()

    def launch_point(self) -> int:
        """A place where work may be launched right after (an outermost module call, say): a CUDA event there, kept
        if `assign_steps` later makes it a step's start. Returns its index for that call."""
        self._candidates.append(_Marker("step", self._now_ms(), None, self._record_event() if self.cuda else None))
        return len(self._candidates) - 1

    def assign_steps(self, starts: list[int], ends_ms: list[float]) -> None:
        """Steps found after the run (core.audit: the calls of the model's forward): step k began at launch point
        `starts[k]` and its host work ended at `ends_ms[k]`; each read goes to the step it fell in. Call it before
        the audit's context ends (the device idle is measured from the steps' markers there)."""
        markers = [self._candidates[i] for i in starts]
        for index, marker in enumerate(markers):
            marker.step = index
        self._markers = sorted([*markers, *(m for m in self._markers if m.kind == "replay")], key=lambda m: m.t_ms)
        self.step_starts_ms = [m.t_ms for m in markers]
        self.step_ends_ms = list(ends_ms)
        self.steps = len(markers)
        begins = self.step_starts_ms
        for read in self.reads:
            step = bisect.bisect_right(begins, read.t_ms) - 1
            read.step = step if step >= 0 else None
            read.inside_step = step >= 0 and read.t_ms < ends_ms[step]

    def end(self) -> None:
        """The run is over: nothing after this belongs to a step."""
        self.ended = True
        self.inside_step = False

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
        if self.cuda:
            self._watch_sync_warnings()
        else:
            self._watch_dispatch()
        return self

    def __exit__(self, *exc: Any) -> None:
        while self._restore:
            self._restore.pop()()
        if self.cuda:
            self._settle_costs()

    # ---- recording

    def _now_ms(self) -> float:
        return (time.perf_counter() - self._t0) * 1000

    def _record(self, kind: str) -> Read:
        read = Read(kind=kind, site=_caller_site(), step=self.step_index if not self.ended else None,
                    inside_step=self.inside_step, t_ms=self._now_ms())
        if self.cuda:
            read.drained = self._record_event()
        self.reads.append(read)
        return read

    def _record_event(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        _ORIGINAL_RECORD(event)
        return event

    def _mine(self) -> bool:
        return self._call is None and threading.get_ident() == self._thread

    @contextlib.contextmanager
    def _bracket(self, kind: str | None) -> Iterator[None]:
        """A wrapped call: record it as a read of `kind` (None: not a read), time it, and let nothing inside it count
        again."""
        call = self._call = _Call(self._record(kind) if kind else None)
        started = time.perf_counter()
        try:
            yield
        finally:
            self._call = None
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
        try:
            return tensor.untyped_storage().data_ptr() not in _HOST_MEMORY
        except (RuntimeError, NotImplementedError):  # a tensor without a plain storage (a subclass): a device value
            return True

    def _wrappers(self) -> list[tuple[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]]]:
        reads_self = {"item": "item", "__bool__": "bool", "__float__": "item", "__int__": "item",
                      "__index__": "item", "tolist": "tolist", "cpu": "copy", "numpy": "copy", "__repr__": "print",
                      "__format__": "print", "nonzero": "nonzero", "masked_select": "masked-index"}
        wrappers: list[tuple[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]]] = [
            (torch.Tensor, name, functools.partial(self._reading_self, kind)) for name, kind in reads_self.items()]
        wrappers += [(torch, name, functools.partial(self._reading_arg, kind))
                     for name, kind in (("nonzero", "nonzero"), ("argwhere", "nonzero"), ("equal", "equal"),
                                        ("masked_select", "masked-index"))]
        wrappers += [(torch, name, self._from_scalars) for name in ("tensor", "as_tensor")]
        wrappers.append((torch.Tensor, "copy_", self._copy))
        if self.cuda:  # on the CPU `.to(device)` of the run's device names the host too: only CUDA tells copies apart
            wrappers.append((torch.Tensor, "to", self._to))
            wrappers += [(torch.cuda, "synchronize", functools.partial(self._waiting, "synchronize")),
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

    def _to(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._mine() or not self._device_value(tensor) or not _to_host(args, kwargs):
                return original(tensor, *args, **kwargs)
            pageable = kwargs.get("non_blocking") or any(a is True for a in args)
            with self._bracket("pageable-copy" if pageable else "copy"):
                return original(tensor, *args, **kwargs)
        return wrapper

    def _copy(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(target: Any, source: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.cuda and self._mine() and (kwargs.get("non_blocking") or any(a is True for a in args)):
                # On the CPU a non_blocking copy's target is the program's host mirror (on a GPU, pinned memory)
                host_memory(target)
            kind = None
            if self._mine() and self.cuda and isinstance(source, torch.Tensor) and source.is_cuda \
                    and not target.is_cuda:
                non_blocking = kwargs.get("non_blocking") or any(a is True for a in args)
                if not non_blocking:
                    kind = "copy"
                elif not target.is_pinned():
                    kind = "pageable-copy"
            if kind is None:
                return original(target, source, *args, **kwargs)
            with self._bracket(kind):
                return original(target, source, *args, **kwargs)
        return wrapper

    def _from_scalars(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(data: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._mine() or not isinstance(data, list | tuple) \
                    or not any(self._device_value(x) for x in _flat(data)):
                return original(data, *args, **kwargs)
            with self._bracket("scalar"):
                return original(data, *args, **kwargs)
        return wrapper

    def _waiting(self, kind: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not self._mine():
                return original(*args, **kwargs)
            with self._bracket(kind):
                return original(*args, **kwargs)
        return wrapper

    def _event_record(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(event: Any, *args: Any, **kwargs: Any) -> Any:
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
                self.lagged_waits += 1
                return original(event)
            with self._bracket("event-synchronize"):
                return original(event)
        return wrapper

    def _replay(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(graph: Any, *args: Any, **kwargs: Any) -> Any:
            if self._mine():
                self._launches += 1
                self._markers.append(_Marker("replay", self._now_ms(), self.step_index, self._record_event()))
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

    def _dispatched(self, kind: str | None, args: tuple[Any, ...]) -> None:
        if kind and self._mine() and any(self._device_value(a) for a in args if isinstance(a, torch.Tensor)):
            self._record(kind)

    # ---- PyTorch's sync debug mode (CUDA)

    def _watch_sync_warnings(self) -> None:
        mode_before = torch.cuda.get_sync_debug_mode()
        catcher = warnings.catch_warnings()
        catcher.__enter__()
        warnings.filterwarnings("always", message=f".*{SYNC_WARNING}")
        shown = warnings.showwarning

        def showwarning(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
            if SYNC_WARNING not in str(message):
                shown(message, category, *args, **kwargs)
            elif self._call is not None:
                self._call.warned = True
            elif threading.get_ident() == self._thread:
                read = self._record("sync")
                read.kind = _kind_from_code(read.site.code)

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

    def _site_order(self) -> list[Site]:
        """Sites in the order first seen: the `site` index of the report's events."""
        return list(dict.fromkeys(read.site for read in self.reads))

    def _sites(self, decode: set[int], order: list[Site]) -> list[dict[str, Any]]:
        """One row per site (in `order`, its `index` the events' `site`), the most reads per decode step first."""
        steps = max(1, len(decode))
        rows = []
        for index, site in enumerate(order):
            reads = [r for r in self.reads if r.site == site]
            kinds = list(dict.fromkeys(r.kind for r in reads))
            row: dict[str, Any] = {
                "index": index, "file": site.file, "line": site.line, "code": site.code, "function": site.function,
                "kind": kinds[0] if len(kinds) == 1 else "/".join(kinds), "count": len(reads),
                "in_decode_steps": sum(1 for r in reads if r.step in decode),
                "where": "inside a step" if any(r.inside_step for r in reads) else "between steps",
                "fix": fix_for(site, kinds[0]),
            }
            row["per_step"] = row["in_decode_steps"] / steps if decode else None
            if self.cuda:
                blocked = [r.host_ms for r in reads if r.host_ms is not None]
                idle = [r.idle_after_ms for r in reads if r.idle_after_ms is not None]
                decode_idle = [r.idle_after_ms for r in reads if r.idle_after_ms is not None and r.step in decode]
                decode_blocked = [r.host_ms for r in reads if r.host_ms is not None and r.step in decode]
                row.update(host_blocked_ms=_round(sum(blocked)) if blocked else None,
                           host_blocked_ms_per_step=_round(sum(decode_blocked) / steps) if decode_blocked else None,
                           device_idle_after_ms=_round(sum(idle)) if idle else None,
                           device_idle_after_ms_per_step=_round(sum(decode_idle) / steps) if decode_idle else None)
            rows.append(row)
        return sorted(rows, key=lambda r: (-r["in_decode_steps"], -r["count"]))


_ORIGINAL_RECORD = torch.cuda.Event.record
_ORIGINAL_SYNCHRONIZE = torch.cuda.synchronize


def fix_for(site: Site, kind: str) -> str:
    """What a read at `site` is and what to do about it, in one line."""
    for suffix, text, fix in KNOWN_SITES:
        if site.file.endswith(suffix) and text in site.code:
            return fix
    return FIXES.get(kind, "")


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


def _caller_site() -> Site:
    """The innermost frame outside torch and this module: where the program asked for the read."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith(_TORCH_DIR) or filename in _SKIPPED_FILES or filename.startswith("<frozen")):
            break
        frame = frame.f_back
    if frame is None:
        return Site("?", 0, "", "?")
    filename, line = frame.f_code.co_filename, frame.f_lineno
    return Site(short_path(filename), line, linecache.getline(filename, line).strip(), frame.f_code.co_name)


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


class _CpuReads(TorchDispatchMode):
    """The reads the CPU's Python entry points do not show: masked indexing (aten.index / index_put_ with a boolean
    index), and scalar reads, truth tests and data-dependent shapes that PyTorch's C++ makes on its own."""

    def __init__(self, audit: SyncAudit):
        super().__init__()
        self.audit = audit

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        name = func.overloadpacket._qualified_op_name.replace("::", ".")
        kind = _DISPATCHED_READS.get(name)
        if name in ("aten.index", "aten.index_put", "aten.index_put_") and len(args) > 1 \
                and any(_is_mask(i) for i in args[1] or ()) and not _fills_a_mask(name, args):
            kind = "masked-index"
        self.audit._dispatched(kind, args[:1])
        return func(*args, **(kwargs or {}))


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
    (re.compile(r"\.(cpu|numpy|cuda)\(|\.to\(|copy_\("), "copy"),
    (re.compile(r"\w\[[^\]]+\]"), "masked-index"),
    (re.compile(r"^\s*(if|elif|while|assert)\b|\bbool\(|\b(and|or|not)\b"), "bool"),
)


def _kind_from_code(code: str) -> str:
    return next((kind for pattern, kind in _CODE_KINDS if pattern.search(code)), "sync")


def _to_host(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether Tensor.to's arguments name the CPU as the target device."""
    for value in (*args, kwargs.get("device")):
        if isinstance(value, str | torch.device) and torch.device(value).type == "cpu":
            return True
        if isinstance(value, torch.Tensor) and value.device.type == "cpu":
            return True
    return False


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
