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

This module parses the command line and runs the script; core.audit_steps finds its decode steps, core.audit_compile
handles what it compiles, and core.audit_report writes the report, the summary and the trace.
"""

from __future__ import annotations

import argparse
import concurrent.futures.thread
import contextlib
import os
import runpy
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from core.audit_compile import audited_compiles
from core.audit_report import PROG, audit_trace, describe, kernel_steps, site_lines, summary_text
from core.audit_steps import StepsOf, StepWatcher
from core.measure.kernel_measurement import device_intervals_ns
from core.measure.sync_audit import SyncAudit
from core.measure.sync_sites import path_from_root
from core.report_files import check_output_path, write_json

THREADS_WAIT_S = 30.0  # how long the audit waits for threads the program left running


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
        with _profiling(audit.cuda and kernels) as profiler, audited_compiles(audit, watcher, not_seen), \
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
    report = describe(audit, script=path_from_root(os.path.abspath(script)), argv=list(args), step_module=step_module,
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
def _profiling(enabled: bool) -> Iterator[Any]:
    if not enabled:
        yield None
        return
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        yield profiler


def cli() -> None:
    """The `syncscope-audit` command."""
    raise SystemExit(main())


if __name__ == "__main__":
    raise SystemExit(main())
