"""Audit your own loop: which line of your program makes the GPU wait, on each decode step, and what it costs.

    python -m core.audit [--json PATH] [--trace PATH] [--steps-of NAME] [--fail-on-sync N] [--no-kernels] \
        -- SCRIPT [ARGS...]

SCRIPT runs as `__main__` (as `python -m cProfile` runs it), on whatever device it uses, under the sync audit
(core.measure.sync_audit): every host read of a device value, at its line, counted per decode step, on every thread.
A decode step is one call of the model's forward: on a thread, the outermost `nn.Module` forward, entered as
`model(...)` or as `model.forward(...)`, called again and again (watched by a profile function on every thread,
which torch.compile's code runs under unchanged), or each call of what `--steps-of` names: a class (its instances'
calls), a method or a function, as `package.module:QualName`, or `QualName` for one defined in SCRIPT. On CUDA each
read gets its cost (the host's time in it, the device's idle after it), and each step its kernel time (CUPTI, in the
same run: no second run of your program). On the CPU the report says what would block on a GPU; there it costs
nothing, and what the program compiled with fullgraph=True runs compiled, unseen (the report says so). A program that
fails still gets its report, its traceback and its exit status; `--fail-on-sync N` exits 1 when a decode step reads
more than N times, 2 when no decode step was seen.

For loops with no module call per step, or in your own tests:

    with core.audit.watch() as audit:        # from core.audit import watch, assert_no_syncs
        for _ in range(steps):
            audit.step()
            ...                               # one decode step
    print(audit.report()["reads_per_decode_step"])

    assert_no_syncs(decode_step, steps=8)     # AssertionError naming each site, for a test suite
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures.thread
import contextlib
import datetime as dt
import functools
import importlib.util
import inspect
import os
import platform
import runpy
import statistics
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from core.measure.kernel_trial import _clipped, _merged, _on_run_clock, device_intervals_ns
from core.measure.sync_audit import SyncAudit, short_path
from core.report_files import check_output_path, write_json

SCHEMA = "syncscope.audit/1"
PROG = "python -m core.audit"
THREADS_WAIT_S = 30.0  # how long the audit waits for threads the program left running


# ------------------------------------------------------------------------------------------------ the steps

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
                self.calls.append(StepCall(*opened[1:], self.audit._now_ms()))
                self._open.call = None
        elif opened is None:
            if self.watching:
                self._begin(frame, code)
            elif threading.get_ident() != self._main:
                sys.setprofile(None)  # the run is over: a thread it left running stops paying for the watcher

    def _begin(self, frame: Any, code: Any) -> None:
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


# ------------------------------------------------------------------------------------------------ the Python API

class Watch:
    """`core.audit.watch()`: the audit around a block of your own code, with the steps you mark."""

    def __init__(self, device: str | torch.device | None = None):
        self.audit = SyncAudit(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self._report: dict[str, Any] | None = None

    def step(self) -> None:
        """A decode step begins here."""
        self.audit.step(launch=True)
        self.audit.queued()

    def __enter__(self) -> Watch:
        self.audit.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.audit.end()
        self.audit.__exit__(*exc)
        self._report = describe(self.audit)

    def report(self) -> dict[str, Any]:
        """The audit (what `python -m core.audit --json` writes), once the block has ended."""
        if self._report is None:
            raise RuntimeError("the watched block has not ended yet")
        return self._report


def watch(device: str | torch.device | None = None) -> Watch:
    """Audit the block: `with watch() as audit:` ... `audit.step()` where each decode step begins."""
    return Watch(device)


def assert_no_syncs(step: Callable[[], Any], steps: int = 4, warmup: int = 1, allowed: int = 0,
                    device: str | torch.device | None = None) -> dict[str, Any]:
    """Call `step()` `warmup` times, then `steps` times under the audit; AssertionError, naming each site, when a
    call reads the device more than `allowed` times. Returns the audit. For pytest suites."""
    for _ in range(warmup):
        step()
    with watch(device) as audit:
        for _ in range(steps + 2):  # the first and last step are left out of the per-step figures (every loop
            audit.step()           # waits there), so two more calls than the steps checked
            step()
    report = audit.report()
    worst = report["most_reads_in_a_decode_step"] or 0
    if worst > allowed:
        sites = "\n".join(site_lines(report))
        raise AssertionError(f"{worst} device reads in one step (allowed: {allowed}):\n{sites}")
    return report


# ------------------------------------------------------------------------------------------------ the report

def describe(audit: SyncAudit, **extra: Any) -> dict[str, Any]:
    """The audit report of a program: the audit's result and the machine it ran on."""
    gpu = torch.cuda.get_device_name() if audit.cuda else None
    return {"schema": SCHEMA, "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "environment": {"device": "cuda" if audit.cuda else "cpu", "gpu": gpu, "torch": str(torch.__version__),
                            "python": platform.python_version()},
            **audit.result(), **extra}


def kernel_steps(intervals_ns: list[tuple[int, int]], audit: SyncAudit, clocks: dict[str, int]) -> dict[str, Any]:
    """Per decode step, how long kernels ran: the kernels (ns on the profiler's clock) between one step's start on
    the device and the next one's (the audit's step markers), merged."""
    starts = audit.step_device_starts_ms
    if len(starts) < 3 or not intervals_ns:
        return {}
    best: list[tuple[float, float]] = []
    for offset in clocks.values():  # the clock under which the kernels fall inside the run
        kernels = _merged(_on_run_clock(intervals_ns, offset, audit.started_s))
        inside = sum(b - a for a, b in _clipped(kernels, starts[0], starts[-1]))
        if inside > sum(b - a for a, b in _clipped(best, starts[0], starts[-1])):
            best = kernels
    busy = [sum(b - a for a, b in _clipped(best, starts[k], starts[k + 1])) for k in range(len(starts) - 1)]
    period = [starts[k + 1] - starts[k] for k in range(len(starts) - 1)]
    # The median step's share: a program's first steps can hold seconds of compiling, which a sum would count.
    shares = [busy[k] / period[k] for k in range(1, len(busy)) if period[k] > 0]
    return {"kernel_busy_ms_per_step": [round(b, 4) for b in busy],
            "kernel_busy_fraction": statistics.median(shares) if shares else None}


def site_lines(report: dict[str, Any], top: int = 8, every: float = 0.5) -> list[str]:
    """The sites read in at least `every` of the decode steps, most per step first, with what each costs and what to
    do; then, in one line, the sites read in fewer (a run's setup, a first or last step)."""
    sites = [s for s in report.get("sites", []) if s.get("in_decode_steps")]
    recurring = [s for s in sites if (s.get("per_step") or 0) >= every]
    lines = []
    for site in recurring[:top]:
        cost = ""
        if site.get("host_blocked_ms_per_step") is not None:
            cost = f"; host blocked {site['host_blocked_ms_per_step'] * 1000:.0f} us/step"
        if site.get("device_idle_after_ms_per_step") is not None:
            cost += f", device idle after {site['device_idle_after_ms_per_step'] * 1000:.0f} us/step (at most what " \
                    "removing it gives back)"
        thread = f" (thread {site['thread']})" if site.get("thread") not in (None, report.get("step_thread")) else ""
        lines.append(_wrapped(f"  {site['per_step']:.2f}/step  {site['kind']:<13} {site['file']}:{site['line']}  "
                              f"{site['code'][:80]}{thread}{cost}", 13))
        if site.get("callers") and site.get("where") == "inside a step" and os.path.isfile(site["file"]):
            lines.append(f"      called from {site['callers'][0]}")  # a helper of the program's forward, say
        if site.get("fix"):
            lines.append(_wrapped(f"      fix: {site['fix']}", 11))
    if len(recurring) > top:
        lines.append(f"  and {len(recurring) - top} more site(s) read as often (the report lists them all)")
    rare = [s for s in sites if s not in recurring]
    if rare:
        named = ", ".join(f"{s['file']}:{s['line']}" for s in rare[:4]) + (" ..." if len(rare) > 4 else "")
        lines.append(f"  and {len(rare)} site(s) read in fewer steps (a run's setup, its first or last step): {named}")
    return lines


def summary_text(report: dict[str, Any]) -> str:
    """What the terminal shows after the program ran."""
    steps, per_step = report.get("decode_steps", 0), report.get("reads_per_decode_step")
    where = report.get("step_module") or "none found"
    lines = [_wrapped(f"{PROG}: {report.get('script', '?')}: {report.get('steps', 0)} steps of {where} "
                      f"({steps} decode steps counted: the first and last are left out, where every loop waits)", 2)]
    if per_step is None:
        lines.append("  no decode steps found: give --steps-of the function or module each step calls, or mark "
                     "steps with core.audit.watch()")
    else:
        lines.append(f"  device reads per decode step: {per_step:.2f} (at most {report['most_reads_in_a_decode_step']}"
                     f" in one step), {report.get('lagged_waits', 0)} lagged waits not counted")
        lines += site_lines(report)
    if report.get("kernel_busy_fraction") is not None:
        lines.append(f"  kernel-busy: {report['kernel_busy_fraction']:.0%} of the median decode step's device time "
                     "(CUPTI, this run)")
    lines += [_wrapped(f"  not seen: {what}", 4) for what in report.get("not_seen") or []]
    if report.get("note"):
        lines.append(_wrapped(f"  ({report['note']})", 3))
    return "\n".join(lines)


def _wrapped(line: str, indent: int, width: int = 116) -> str:
    """A line of the summary, wrapped at spaces for a terminal; what follows its first line indented by `indent`."""
    return textwrap.fill(line, width, subsequent_indent=" " * indent, break_long_words=False, break_on_hyphens=False,
                         drop_whitespace=True, replace_whitespace=False)


# ------------------------------------------------------------------------------------------------ the CLI

def build_parser() -> argparse.ArgumentParser:
    from core.run_schema import OneLineParser

    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0],
                      usage=f"{PROG} [--json PATH] [--trace PATH] [--steps-of NAME] [--fail-on-sync N] [--no-kernels] "
                            "-- SCRIPT [ARGS...]")
    p.add_argument("--json", dest="json_path", metavar="PATH",
                   help="write the audit report here (the page's Your loop tab opens it)")
    p.add_argument("--trace", dest="trace_path", metavar="PATH",
                   help="write a Chrome trace-event JSON: the steps and an instant per read (ui.perfetto.dev)")
    p.add_argument("--steps-of", metavar="NAME", help="what one decode step calls: a class, method or function, as "
                                                      "package.module:QualName, or QualName of one in SCRIPT "
                                                      "(default: the outermost nn.Module forward, called again and "
                                                      "again)")
    p.add_argument("--fail-on-sync", type=int, metavar="N", default=None,
                   help="exit 1 when a decode step reads the device more than N times, 2 when no step was seen "
                        "(for CI)")
    p.add_argument("--no-kernels", action="store_true", help="on CUDA, do not trace kernels (CUPTI) for kernel-busy")
    p.add_argument("script", metavar="SCRIPT", help="the program to run as __main__")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="its arguments")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        split = argv.index("--")
        own, program = argv[:split], argv[split + 1:]
    else:
        own, program = argv, []
    args = build_parser().parse_args([*own, *program[:1]])
    program_args = program[1:] if program else args.args
    try:
        check_output_path(args.json_path)
        check_output_path(args.trace_path, "--trace")
        if not os.path.isfile(args.script):
            raise ValueError(f"{args.script}: no such file")
        if args.fail_on_sync is not None and args.fail_on_sync < 0:
            raise ValueError(f"--fail-on-sync must be 0 or more, got {args.fail_on_sync}")
        steps_of = StepsOf(args.steps_of, args.script) if args.steps_of else None
    except ValueError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return 2
    report, exit_code = audit_script(args.script, program_args, steps_of, kernels=not args.no_kernels)
    print(summary_text(report))
    written = not args.json_path or write_json(args.json_path, report, "audit report", indent=1) == args.json_path
    if args.trace_path:
        written = write_json(args.trace_path, audit_trace(report), "trace") == args.trace_path and written
    if exit_code:
        print(f"{PROG}: {args.script} exited with {exit_code}; the audit covers what it ran")
    return ci_gate(report, args.fail_on_sync) or (exit_code if written else 1)


def ci_gate(report: dict[str, Any], limit: int | None) -> int:
    """`--fail-on-sync N`: 2 (and a line saying so) when no decode step was seen, so nothing was checked; 1 when a
    decode step read the device more than N times; else 0."""
    if limit is None:
        return 0
    if report.get("reads_per_decode_step") is None:
        print(f"{PROG}: FAIL: no decode step was seen, so --fail-on-sync {limit} checked nothing: pass --steps-of NAME "
              "(what each step calls: package.module:QualName, or a function or class of the script)")
        return 2
    worst = report.get("most_reads_in_a_decode_step") or 0
    if worst > limit:
        print(f"{PROG}: FAIL: a decode step reads the device {worst} times (--fail-on-sync {limit})")
        return 1
    return 0


def audit_script(script: str, args: Sequence[str], steps_of: StepsOf | str | None = None,
                 kernels: bool = True) -> tuple[dict[str, Any], int]:
    """Run `script` as __main__ with `args` under the audit; (the report, the program's exit status). The report
    covers what ran, also when the program failed (its traceback is printed as Python prints it)."""
    if isinstance(steps_of, str):
        steps_of = StepsOf(steps_of, script)
    audit = SyncAudit("cuda" if torch.cuda.is_available() else "cpu")
    watcher = StepWatcher(audit, steps_of)
    not_seen: list[str] = []
    intervals: list[tuple[int, int]] = []
    with _as_main(script, args), audit:
        with _profiling(audit.cuda and kernels) as profiler, _compiles(audit, watcher, not_seen), \
                _watching(watcher):
            before = set(threading.enumerate())
            exit_code = _run(script)
            running = _join_threads_left(before)
        if profiler is not None:
            intervals = device_intervals_ns(profiler)
        name, thread, starts, ends = watcher.steps()
        audit.assign_steps(starts, ends)
        audit.end()
        if running:
            not_seen.append(f"threads still running {THREADS_WAIT_S:.0f} s after the program's end: "
                            f"{', '.join(running)}; what they did after that is not counted")
        if steps_of is not None and steps_of.file() is None:
            not_seen.append(f"--steps-of {steps_of.spec}: the program never imported {steps_of.module}")
    clocks = {"realtime": time.time_ns() - time.perf_counter_ns(), "monotonic": time.monotonic_ns()
              - time.perf_counter_ns()}
    step_module = f"{name} on thread {thread}" if name and thread else name
    report = describe(audit, script=short_path(os.path.abspath(script)), argv=list(args), step_module=step_module,
                      step_thread=thread, **kernel_steps(intervals, audit, clocks), exit_code=exit_code,
                      not_seen=not_seen)
    return report, exit_code


@contextlib.contextmanager
def _as_main(script: str, args: Sequence[str]) -> Iterator[None]:
    """The interpreter as `python SCRIPT ARGS` sets it up: argv, and the script's folder first on the path."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _run(script: str) -> int:
    """Run the script as __main__; its exit status as Python's would be. A failure's traceback is printed as Python
    prints it, from the script's first frame on."""
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        return _exit_status(exc.code)
    except BaseException as exc:  # the program failed: what it ran is still reported
        exc = exc.with_traceback(_from_script(exc.__traceback__, script))  # Python prints __traceback__
        sys.excepthook(type(exc), exc, exc.__traceback__)
        return 130 if isinstance(exc, KeyboardInterrupt) else 1
    return 0


def _join_threads_left(before: set[threading.Thread]) -> list[str]:
    """Wait, as Python does when a program ends, for the threads it started and left running (a generate() thread
    it did not join, say), at most THREADS_WAIT_S in all; the names of those still running. Not waited for, as
    Python does not: daemon threads, and the idle workers of thread pools (Python's exit stops those)."""
    deadline = time.monotonic() + THREADS_WAIT_S
    left = [t for t in threading.enumerate() if t not in before and not t.daemon
            and getattr(t, "_target", None) is not concurrent.futures.thread._worker]
    for thread in left:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in left if t.is_alive()]


def _exit_status(code: Any) -> int:
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)  # sys.exit("message"): Python prints it and exits with 1
    return 1


def _from_script(tb: Any, script: str) -> Any:
    """The traceback from the script's module frame on (without runpy's and the audit's frames), where it has one."""
    target, here = os.path.abspath(script), tb
    while here is not None and os.path.abspath(here.tb_frame.f_code.co_filename) != target:
        here = here.tb_next
    return here or tb


@contextlib.contextmanager
def _watching(watcher: StepWatcher) -> Iterator[None]:
    """The watcher as the profile function of this thread and of every thread the program starts."""
    before, before_threads = sys.getprofile(), threading.getprofile()
    threading.setprofile(watcher)
    sys.setprofile(watcher)
    try:
        yield
    finally:
        sys.setprofile(before)
        threading.setprofile(before_threads)
        watcher.stop()


@contextlib.contextmanager
def _compiles(audit: SyncAudit, watcher: StepWatcher, not_seen: list[str]) -> Iterator[None]:
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
    for method in (type(watcher).__call__, type(watcher)._begin):
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
    return f"{name} ({short_path(os.path.abspath(code.co_filename))}:{code.co_firstlineno})"


def inspect_unwrap(function: Any) -> Any:
    while hasattr(function, "__wrapped__"):
        function = function.__wrapped__
    return function


@contextlib.contextmanager
def _profiling(enabled: bool) -> Iterator[Any]:
    if not enabled:
        yield None
        return
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        yield profiler


def audit_trace(report: dict[str, Any]) -> dict[str, Any]:
    """The audit as Chrome trace-event JSON: each step a span on the host, each read an instant with its site."""
    starts = report.get("step_starts_ms") or []
    sites = {s["index"]: s for s in report.get("sites", [])}
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "ts": 0, "args": {"name": report.get("script")}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "ts": 0, "args": {"name": "steps"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "ts": 0, "args": {"name": "syncs"}}]
    for index, (begin, end) in enumerate(zip(starts, [*starts[1:], None])):
        if end is not None:
            events.append({"ph": "X", "name": f"step {index}", "pid": 1, "tid": 1, "ts": round(begin * 1000, 3),
                           "dur": round((end - begin) * 1000, 3), "args": {"step": index}})
    for event in report.get("events", []):
        site = sites.get(event["site"], {})
        events.append({"ph": "i", "s": "t", "name": f"sync: {site.get('kind')}", "pid": 1, "tid": 2,
                       "ts": round(event["t_ms"] * 1000, 3),
                       "args": {"step": event["step"], **{k: site.get(k) for k in ("file", "line", "code", "fix")}}})
    return {"traceEvents": events, "displayTimeUnit": "ms", "metadata": {"schema": report.get("schema")}}


def cli() -> None:
    """The `syncscope-audit` command."""
    raise SystemExit(main())


if __name__ == "__main__":
    raise SystemExit(main())
