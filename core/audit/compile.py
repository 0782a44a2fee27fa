"""What a program run under core.audit compiles, as the audit needs it: dynamo kept off the step watcher, and on
the CPU a fullgraph=True compile run compiled, outside the audit's dispatch mode, and said to be unseen."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Iterator
from typing import Any

import torch

from core.audit.sites import path_from_root
from core.audit.steps import StepWatcher
from core.audit.sync import SyncAudit


@contextlib.contextmanager
def audited_compiles(audit: SyncAudit, watcher: StepWatcher, not_seen: list[str]) -> Iterator[None]:
    """What the program compiles, as the audit needs it:
    - dynamo never traces the step watcher: on Python 3.11 dynamo's frame hook also gets the frames a profile function
      runs (3.12 leaves them alone), and tracing it breaks a compile with fullgraph=True. Marked as torch.compile
      first runs (it imports dynamo), before any compiled code has run.
    - on the CPU, what is compiled with fullgraph=True runs compiled, with the audit's dispatch mode off around each
      call: under a dispatch mode torch.compile runs a function as its eager code (so the audit sees what it does),
      but with fullgraph=True it raises "found no compiled frames" instead, and the program would die. What such a
      function does is then not seen on the CPU, and `not_seen` says so. On CUDA there is no dispatch mode, and
      PyTorch's sync debug mode sees inside compiled code."""
    original = torch.compile

    def compile(model: Any = None, **options: Any) -> Any:
        if model is None:  # @torch.compile(fullgraph=True)
            return functools.partial(compile, **options)
        compiled = original(model, **options)
        _outside_dynamo(watcher)
        if audit.cuda or not options.get("fullgraph") or options.get("disable"):
            return compiled
        return _without_dispatch_modes(compiled, _compiled_name(model), not_seen)

    if "torch._dynamo" in sys.modules:
        _outside_dynamo(watcher)
    torch.compile = functools.wraps(original)(compile)
    try:
        yield
    finally:
        torch.compile = original


def _outside_dynamo(watcher: StepWatcher) -> None:
    """Mark the watcher's code so that dynamo's frame hook skips it and all it calls (Python 3.11: from 3.12 on,
    dynamo leaves a profile function's frames alone)."""
    if sys.version_info >= (3, 12):
        return
    try:
        from torch._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy
    except ImportError:  # a torch without code execution strategies: nothing to mark with
        return
    skipped = FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP)
    for method in (type(watcher).__call__, type(watcher).begin_step):
        set_code_exec_strategy(method.__code__, skipped)


def _without_dispatch_modes(compiled: Any, name: str, not_seen: list[str]) -> Any:
    """`compiled` (a function, or the OptimizedModule torch.compile makes of a module), called with no dispatch mode
    active; the first call adds its line to `not_seen`."""
    from torch.utils._python_dispatch import _disable_current_modes

    run = compiled.forward if isinstance(compiled, torch.nn.Module) else compiled

    said = False

    def call(*args: Any, **kwargs: Any) -> Any:
        nonlocal said
        if not said:
            said = True
            not_seen.append(f"{name}, compiled with fullgraph=True: on the CPU the audit cannot see inside compiled "
                            "code, so its reads are not counted here (on CUDA, PyTorch's sync debug mode sees them)")
        with _disable_current_modes():
            return run(*args, **kwargs)

    if isinstance(compiled, torch.nn.Module):
        compiled.forward = call
        return compiled
    return functools.wraps(compiled)(call)


def _compiled_name(model: Any) -> str:
    """What was compiled, as `name (file:line)`."""
    owner = getattr(model, "__self__", None)
    if isinstance(owner, torch.nn.Module) and getattr(model, "__name__", "") == "_call_impl":
        model = owner  # module.compile(): torch.compile of its _call_impl
    function = model.forward if isinstance(model, torch.nn.Module) else model
    code = getattr(inspect_unwrap(getattr(function, "__func__", function)), "__code__", None)
    name = type(model).__name__ if isinstance(model, torch.nn.Module) else getattr(model, "__qualname__", repr(model))
    if code is None:
        return name
    return f"{name} ({path_from_root(os.path.abspath(code.co_filename))}:{code.co_firstlineno})"


def inspect_unwrap(function: Any) -> Any:
    while hasattr(function, "__wrapped__"):
        function = function.__wrapped__
    return function
