"""The decode steps of a program run under core.audit: on each thread, the outermost call of a model's forward, or
of what `--steps-of` names, watched by a profile function."""

from __future__ import annotations

import collections
import functools
import importlib.util
import inspect
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

import torch

from core.audit.sync import SyncAudit


@dataclass(frozen=True)
class StepCall:
    """One outermost call of what marks a step: what was called (its key), its name, the thread it ran on (None: the
    thread that runs the script), its audit launch point and when its host work ended."""

    key: tuple[int, int]
    name: str
    thread: str | None
    start: int
    end_ms: float


class StepsOf:
    """What `--steps-of` names: `package.module:QualName`, or `QualName` of something SCRIPT defines; a class (each
    call of an instance, through `__call__` or `.forward()`), a method or a function. Matched by qualified name and the
    file that defines it, not by the object: the script runs as `__main__` (its classes are not the ones an import of
    it makes), and the module is found only once the program has set up its `sys.path`."""

    def __init__(self, spec: str, script: str):
        module, _, qualname = spec.rpartition(":")
        if not qualname or any(not part.isidentifier() for part in qualname.split(".")):
            raise ValueError(f"--steps-of {spec}: give package.module:QualName, or QualName of something in SCRIPT")
        self.spec, self.module, self.qualname = spec, module or None, qualname
        self.name = qualname.rpartition(".")[2]   # what its code is called
        self.owner = qualname.rpartition(".")[0]  # "Model" of "Model.forward": a method, maybe inherited
        self._file = os.path.abspath(script) if not module else None
        self._modules_when_tried = -1
        self._classes: dict[tuple[type, str], bool] = {}
        self._codes: dict[Any, bool] = {}

    def file(self) -> str | None:
        """The file that defines it, once its module is imported (or, for a top-level module, can be found)."""
        if self._file is None and len(sys.modules) != self._modules_when_tried:
            self._modules_when_tried = len(sys.modules)
            self._file = _module_file(self.module)
        return self._file

    def names_class(self, cls: type, qualname: str | None = None) -> bool:
        """Whether `cls` is the class named (or a subclass of it)."""
        qualname = qualname or self.qualname
        known = self._classes.get((cls, qualname))
        if known is None:
            file = self.file()
            if file is None:
                return False
            known = self._classes[(cls, qualname)] = any(
                c.__qualname__ == qualname and _defined_in(c) == file for c in cls.__mro__)
        return known

    def names_code(self, code: Any, frame: Any) -> bool:
        """Whether a frame runs the function or method named: its own code, or (`Model.forward`) a method of that name
        called on an instance of the class, where the class inherits it."""
        known = self._codes.get(code)
        if known is None:
            file = self.file()
            if file is None:
                return False
            known = self._codes[code] = bool(code.co_flags & inspect.CO_OPTIMIZED) and \
                code.co_qualname == self.qualname and os.path.abspath(code.co_filename) == file
        if known:
            return True
        owner = _first_argument(frame, code) if self.owner and code.co_name == self.name else None
        return owner is not None and self.names_class(type(owner), self.owner)


class StepWatcher:
    """The decode steps of a run: on each thread, the outermost call of a model's forward (an nn.Module called through
    `__call__`, `_call_impl`, or its `.forward()` called directly), or of what `--steps-of` names. A profile function
    on every thread (sys.setprofile, and threading.setprofile for the threads the program starts) watches them, not
    module hooks, which torch.compile would trace (graph breaks) where it leaves a profile function alone."""

    def __init__(self, audit: SyncAudit, steps_of: StepsOf | None = None):
        self.audit, self.steps_of = audit, steps_of
        self.calls: list[StepCall] = []
        self.watching = True
        self._names = frozenset({"forward", "_call_impl", *([steps_of.name] if steps_of else [])})
        self._open = threading.local()  # per thread: (the frame that began the step, key, name, thread, start)
        self._main = threading.get_ident()

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        code = frame.f_code
        if code.co_name not in self._names or event not in ("call", "return"):
            return
        opened = getattr(self._open, "call", None)
        if event == "return":
            if opened is not None and opened[0] is frame:
                self.calls.append(StepCall(*opened[1:], self.audit.now_ms()))
                self._open.call = None
        elif opened is None:
            if self.watching:
                self.begin_step(frame, code)
            elif threading.get_ident() != self._main:
                sys.setprofile(None)  # the run is over: a thread it left running stops paying for the watcher

    def begin_step(self, frame: Any, code: Any) -> None:
        """A call that may open a step on this thread: open one where `frame` is a model's forward (or what
        `--steps-of` names). core.audit.compile keeps dynamo off it, with `__call__`."""
        module = _first_argument(frame, code) if code.co_name in ("forward", "_call_impl") else None
        module = module if isinstance(module, torch.nn.Module) else None
        if self.steps_of is None:
            if module is None:
                return
            key, name = id(module), _model_name(module)
        elif module is not None and self.steps_of.names_class(type(module)):
            key, name = id(module), _model_name(module)
        elif self.steps_of.names_code(code, frame):
            key, name = id(code), self.steps_of.qualname
        else:
            return
        thread = threading.get_ident()
        named = None if thread == self._main else threading.current_thread().name
        self._open.call = (frame, (key, thread), name, named, self.audit.launch_point())

    def stop(self) -> None:
        """The run is over: no more steps begin."""
        self.watching = False

    def steps(self) -> tuple[str | None, str | None, list[int], list[float]]:
        """What was called most often at the top, on one thread: its name, its thread (None: the script's), and its
        calls' launch points and end times: the decode steps."""
        counts = collections.Counter(call.key for call in self.calls)
        if not counts or max(counts.values()) < 2:
            return None, None, [], []
        chosen = counts.most_common(1)[0][0]
        mine = sorted((c for c in self.calls if c.key == chosen), key=lambda c: c.start)
        return mine[0].name, mine[0].thread, [c.start for c in mine], [c.end_ms for c in mine]


def _first_argument(frame: Any, code: Any) -> Any:
    return frame.f_locals.get(code.co_varnames[0]) if code.co_argcount else None


def _model_name(module: torch.nn.Module) -> str:
    """A module's class name; a torch.compile'd module (OptimizedModule) is named after the module it compiled."""
    if type(module).__name__ == "OptimizedModule":
        module = getattr(module, "_orig_mod", module)
    return type(module).__name__


def _module_file(name: str | None) -> str | None:
    """Where module `name` is: its file once imported; a top-level module's, found on sys.path, before."""
    module = sys.modules.get(name) if name else None
    if module is not None:
        file = getattr(module, "__file__", None)
        return os.path.abspath(file) if file else None
    if not name or "." in name:  # finding a submodule would import its package: wait until the program does
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return os.path.abspath(spec.origin) if spec is not None and spec.origin and os.path.isfile(spec.origin) else None


@functools.cache
def _defined_in(cls: type) -> str | None:
    module = sys.modules.get(cls.__module__)
    filename = getattr(module, "__file__", None)
    return os.path.abspath(filename) if filename else None
