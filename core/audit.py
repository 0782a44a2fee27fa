"""Audit your own loop: which line of your program makes the GPU wait, on each decode step, and what it costs.

    python -m core.audit [--json PATH] [--trace PATH] [--steps-of NAME] [--fail-on-sync N] [--no-kernels] \
        -- SCRIPT [ARGS...]

SCRIPT runs as `__main__` (as `python -m cProfile` runs it), on whatever device it uses, under the sync audit
(core.measure.sync_audit): every host read of a device value, at its line, counted per decode step. A decode step is
one call of the model's forward: the outermost `nn.Module` called again and again (watched with `sys.setprofile`,
which torch.compile's code runs under unchanged), or each call of the function or module `--steps-of` names
(`package.module:QualName`, or `QualName` for one defined in SCRIPT). On CUDA each read gets its cost (the host's time
in it, the device's idle after it), and each step its kernel time (CUPTI, in the same run: no second run of your
program). On the CPU the report says what would block on a GPU; there it costs nothing.

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
import contextlib
import datetime as dt
import functools
import importlib
import os
import platform
import runpy
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from core.measure.kernel_trial import _clipped, _merged, _on_run_clock, device_intervals_ns
from core.measure.sync_audit import SyncAudit, short_path
from core.report_files import check_output_path, write_json

SCHEMA = "syncscope.audit/1"
PROG = "python -m core.audit"


# ------------------------------------------------------------------------------------------------ the steps

class ModuleCalls:
    """The outermost `nn.Module` calls of a run, each a possible step: which module, where it began (an audit launch
    point) and when its host work ended. Watched with sys.setprofile on Module._call_impl, not with module hooks,
    which torch.compile would trace (graph breaks) where a profile function it leaves alone."""

    def __init__(self, audit: SyncAudit, only: type | None = None):
        self.audit = audit
        # A class named by --steps-of, by its name and file: the script runs as __main__, so its classes are not the
        # ones an import of it makes.
        self.only = (only.__qualname__, _defined_in(only)) if only is not None else None
        self.calls: list[tuple[int, str, int, float]] = []  # (module id, class name, launch point, end ms)
        self._depth = 0
        self._open: tuple[int, str, int, int] | None = None  # the call being watched, and the depth it began at
        self._code = torch.nn.Module._call_impl.__code__

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if frame.f_code is not self._code or event not in ("call", "return"):
            return
        if event == "call":
            module = frame.f_locals.get("self")
            if self._open is None and (self._named(module) if self.only else self._depth == 0):
                self._open = (id(module), type(module).__name__, self.audit.launch_point(), self._depth)
            self._depth += 1
            return
        self._depth = max(0, self._depth - 1)
        if self._open is not None and self._depth == self._open[3]:
            self.calls.append((*self._open[:3], self.audit._now_ms()))
            self._open = None

    def _named(self, module: Any) -> bool:
        return any((cls.__qualname__, _defined_in(cls)) == self.only for cls in type(module).__mro__)

    def steps(self) -> tuple[str | None, list[int], list[float]]:
        """The module called most often at the top, and its calls' launch points and end times: the decode steps."""
        counts: dict[int, int] = {}
        for module, *_ in self.calls:
            counts[module] = counts.get(module, 0) + 1
        if not counts or max(counts.values()) < 2:
            return None, [], []
        chosen = max(counts, key=counts.get)
        mine = [c for c in self.calls if c[0] == chosen]
        return mine[0][1], [c[2] for c in mine], [c[3] for c in mine]


class FunctionCalls:
    """The outermost calls of one function, by its code's file and qualified name: the decode steps."""

    def __init__(self, audit: SyncAudit, filename: str | None, qualname: str):
        self.audit, self.filename, self.qualname = audit, filename, qualname
        self.starts: list[int] = []
        self.ends: list[float] = []
        self._depth = 0

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        code = frame.f_code
        if event not in ("call", "return") or code.co_qualname != self.qualname \
                or (self.filename is not None and os.path.abspath(code.co_filename) != self.filename):
            return
        if event == "call":
            if self._depth == 0:
                self.starts.append(self.audit.launch_point())
            self._depth += 1
        elif self._depth:
            self._depth -= 1
            if self._depth == 0:
                self.ends.append(self.audit._now_ms())

    def steps(self) -> tuple[str | None, list[int], list[float]]:
        count = min(len(self.starts), len(self.ends))
        return (self.qualname if count else None), self.starts[:count], self.ends[:count]


def step_watcher(audit: SyncAudit, steps_of: str | None, script: str) -> ModuleCalls | FunctionCalls:
    """What marks the decode steps: the outermost repeated module call, or what `steps_of` names."""
    if not steps_of:
        return ModuleCalls(audit)
    module_name, _, qualname = steps_of.rpartition(":")
    if not module_name:
        return FunctionCalls(audit, os.path.abspath(script), steps_of)
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--steps-of {steps_of}: cannot find it ({type(exc).__name__}: {exc})") from None
    if isinstance(target, type) and issubclass(target, torch.nn.Module):
        return ModuleCalls(audit, only=target)
    function = getattr(target, "__func__", target)
    code = getattr(inspect_unwrap(function), "__code__", None)
    if code is None:
        raise ValueError(f"--steps-of {steps_of}: it names neither a function nor an nn.Module class")
    return FunctionCalls(audit, os.path.abspath(code.co_filename), code.co_qualname)


@functools.cache
def _defined_in(cls: type) -> str | None:
    module = sys.modules.get(cls.__module__)
    filename = getattr(module, "__file__", None)
    return os.path.abspath(filename) if filename else None


def inspect_unwrap(function: Any) -> Any:
    while hasattr(function, "__wrapped__"):
        function = function.__wrapped__
    return function


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
        lines.append(f"  {site['per_step']:.2f}/step  {site['kind']:<13} {site['file']}:{site['line']}  "
                     f"{site['code'][:80]}{cost}")
        if site.get("fix"):
            lines.append(f"      fix: {site['fix']}")
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
    lines = [f"{PROG}: {report.get('script', '?')}: {report.get('steps', 0)} steps of {where} "
             f"({steps} decode steps counted: the first and last are left out, where every loop waits)"]
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
    if report.get("note"):
        lines.append(f"  ({report['note']})")
    return "\n".join(lines)


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
    p.add_argument("--steps-of", metavar="NAME", help="what one decode step calls: package.module:QualName, or "
                                                      "QualName of a function in SCRIPT (default: the outermost "
                                                      "nn.Module called again and again)")
    p.add_argument("--fail-on-sync", type=int, metavar="N", default=None,
                   help="exit 1 when a decode step reads the device more than N times (for CI)")
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
    except ValueError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return 2
    try:
        report, exit_code = audit_script(args.script, program_args, args.steps_of, kernels=not args.no_kernels)
    except ValueError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return 2
    print(summary_text(report))
    written = not args.json_path or write_json(args.json_path, report, "audit report", indent=1) == args.json_path
    if args.trace_path:
        written = write_json(args.trace_path, audit_trace(report), "trace") == args.trace_path and written
    if exit_code:
        print(f"{PROG}: {args.script} exited with {exit_code}; the audit covers what it ran")
    too_many = args.fail_on_sync is not None and (report.get("most_reads_in_a_decode_step") or 0) > args.fail_on_sync
    if too_many:
        print(f"{PROG}: FAIL: a decode step reads the device {report['most_reads_in_a_decode_step']} times "
              f"(--fail-on-sync {args.fail_on_sync})")
    return 1 if too_many or not written else exit_code


def audit_script(script: str, args: Sequence[str], steps_of: str | None = None,
                 kernels: bool = True) -> tuple[dict[str, Any], int]:
    """Run `script` as __main__ with `args` under the audit; (the report, the program's exit code)."""
    audit = SyncAudit("cuda" if torch.cuda.is_available() else "cpu")
    watcher = step_watcher(audit, steps_of, script) if not steps_of or ":" not in steps_of else None
    exit_code, intervals = 0, []
    with _as_main(script, args), audit:
        if watcher is None:
            watcher = step_watcher(audit, steps_of, script)  # after the script's folder is on the path
        with _profiling(audit.cuda and kernels) as profiler, _setprofile(watcher):
            exit_code = _run(script)
        if profiler is not None:
            intervals = device_intervals_ns(profiler)
        name, starts, ends = watcher.steps()
        audit.assign_steps(starts, ends)
        audit.end()
    clocks = {"realtime": time.time_ns() - time.perf_counter_ns(), "monotonic": time.monotonic_ns()
              - time.perf_counter_ns()}
    report = describe(audit, script=short_path(os.path.abspath(script)), argv=list(args), step_module=name,
                      **kernel_steps(intervals, audit, clocks), exit_code=exit_code)
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
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


@contextlib.contextmanager
def _setprofile(watcher: Callable[[Any, str, Any], None]) -> Iterator[None]:
    before = sys.getprofile()
    sys.setprofile(watcher)
    try:
        yield
    finally:
        sys.setprofile(before)


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
