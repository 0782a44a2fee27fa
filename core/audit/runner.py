"""Audit your own loop: which line of your program makes the GPU wait, on each decode step, and what it costs.

    python -m core.audit [--json PATH] [--trace PATH] [--steps-of NAME] [--fail-on-sync N] [--no-kernels] \
        [--timeout SECONDS] -- SCRIPT [ARGS...]

SCRIPT runs as `__main__` (as `python -m cProfile` runs it), on whatever device it uses, under the sync audit
(core.audit.sync): every host read of a device value, at its line, counted per decode step, on every thread.
A decode step is one call of the model's forward: on a thread, the outermost `nn.Module` forward, entered as
`model(...)` or as `model.forward(...)`, called again and again (watched by a profile function on every thread,
which torch.compile's code runs under unchanged), or each call of what `--steps-of` names: a class (its instances'
calls), a method or a function, as `package.module:QualName`, or `QualName` for one defined in SCRIPT. On CUDA each
read gets its cost (the host's time in it, the device's idle after it), and each step its kernel time (CUPTI, in the
same run: no second run of your program). On the CPU the report says what would block on a GPU; there it costs
nothing, and what the program compiled with fullgraph=True runs compiled, unseen (the report says so). A program that
fails still gets its report, its traceback and its exit status (and its sys.exit message); `--fail-on-sync N` exits 1
when a decode step reads more than N times, 2 when no decode step was seen. Ctrl-C, SIGTERM and `--timeout SECONDS`
stop the program and report what it ran and the line it was at, without a traceback (core.audit.stop: one that
will not stop is cut off and reported all the same); a program that calls os._exit gets its report before it exits;
a process it forks reports nothing. A SCRIPT that is a directory, or not a Python program, is one line and exit 2.

For loops with no module call per step, or in your own tests:

    with core.audit.watch() as audit:        # from core.audit import watch, assert_no_syncs
        for _ in range(steps):
            audit.step()
            ...                               # one decode step
    print(audit.report()["reads_per_decode_step"])

    assert_no_syncs(decode_step, steps=8)     # AssertionError naming each site, for a test suite

This module (core.audit.runner; `python -m core.audit` runs its `main`, through core/audit/__main__.py) parses the
command line and runs the script; core.audit.steps finds its decode steps, core.audit.compile handles what it
compiles, and core.audit.report writes the report, the summary and the trace.
"""

from __future__ import annotations

import argparse
import concurrent.futures.thread
import contextlib
import os
import runpy
import signal
import sys
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from core.caches import usable_compile_caches

CACHE_NOTICES = usable_compile_caches()  # before torch is imported, which reads inductor's cache folder

import torch  # noqa: E402

from core.audit.compile import audited_compiles  # noqa: E402
from core.audit.report import audit_trace, describe, kernel_steps, prog, site_lines, summary_text  # noqa: E402
from core.audit.sites import in_program, path_from_root  # noqa: E402
from core.audit.steps import StepsOf, StepWatcher  # noqa: E402
from core.audit.stop import Stops  # noqa: E402
from core.audit.sync import SyncAudit  # noqa: E402
from core.documents.files import check_output_path, write_json  # noqa: E402
from core.measure.kernel_measurement import device_intervals_ns  # noqa: E402
from core.text import clip, escaped, printable  # noqa: E402

THREADS_WAIT_S = 30.0  # how long the audit waits for threads the program left running
_EXIT = os._exit  # the real one: the program's is replaced while it runs (_exits_kept)


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
    from core.request.run_schema import OneLineParser

    name = prog()
    p = OneLineParser(prog=name, description=__doc__.split("\n\n")[0],
                      usage=f"{name} [--json PATH] [--trace PATH] [--steps-of NAME] [--fail-on-sync N] [--no-kernels] "
                            "[--timeout SECONDS] -- SCRIPT [ARGS...]")
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
    p.add_argument("--timeout", type=float, metavar="SECONDS", default=None,
                   help="stop the program after SECONDS and report what it ran (as Ctrl-C does; exit status 124)")
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
    for notice in CACHE_NOTICES:
        sys.stderr.write(f"{prog()}: note: {printable(notice)}\n")
    try:
        check_output_path(args.json_path)
        check_output_path(args.trace_path, "--trace")
        check_script(args.script)
        if args.fail_on_sync is not None and args.fail_on_sync < 0:
            raise ValueError(f"--fail-on-sync must be 0 or more, got {args.fail_on_sync}")
        if args.timeout is not None and not args.timeout > 0:
            raise ValueError(f"--timeout must be more than 0 seconds, got {args.timeout:g}")
        steps_of = StepsOf(args.steps_of, args.script) if args.steps_of else None
    except ValueError as exc:
        sys.stderr.write(f"{prog()}: error: {escaped(exc)}\n")
        return 2

    def keep(report: dict[str, Any], exit_code: int) -> int:
        return _print_and_write(args, report, exit_code)

    report, exit_code = audit_script(args.script, program_args, steps_of, kernels=not args.no_kernels,
                                     timeout_s=args.timeout, keep=keep)
    _ignore_interrupts()  # the program is done: a Ctrl-C now would only lose its report
    status = keep(report, exit_code)
    if report.get("stopped_by") and _threads_left():
        _exit_quietly(status)  # stopped from outside: Python's exit would wait on the threads it left, for ever
    return status


def check_script(script: str) -> None:
    """ValueError in one line where `script` is not a program Python can run: missing, a directory, or a source
    file Python cannot compile (a README, a binary, a script with a syntax error), named by its first problem.
    What runpy runs other than source (a .pyc, a zip archive) is left to run."""
    if os.path.isdir(script):
        raise ValueError(f"{script} is a directory: give the Python file to run (its __main__.py, say)")
    if not os.path.isfile(script):
        raise ValueError(f"{script}: no such file")
    if script.endswith((".pyc", ".pyo")) or zipfile.is_zipfile(script):
        return
    try:
        with open(script, "rb") as file:
            compile(file.read(), script, "exec", dont_inherit=True)
    except OSError as exc:
        raise ValueError(f"{script} cannot be read: {exc.strerror or exc}") from None
    except SyntaxError as exc:
        where = f"line {exc.lineno}: " if exc.lineno else ""
        raise ValueError(f"{script} is not a Python program: {where}{exc.msg}") from None
    except ValueError as exc:  # null bytes, where Python raises them as a ValueError
        raise ValueError(f"{script} is not a Python program: {exc}") from None


def _threads_left() -> bool:
    return any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.current_thread())


def _ignore_interrupts() -> None:
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)


def _print_and_write(args: argparse.Namespace, report: dict[str, Any], exit_code: int) -> int:
    """The summary, the files asked for and the last line; the exit status."""
    print(printable(summary_text(report)))
    written = not args.json_path or write_json(args.json_path, report, "audit report", indent=1) == args.json_path
    if args.trace_path:
        written = write_json(args.trace_path, audit_trace(report), "trace") == args.trace_path and written
    if report.get("stopped_by"):
        at = f" at {escaped(report['stopped_at'])}" if report.get("stopped_at") else ""
        print(printable(f"{prog()}: {args.script} ended early ({report['stopped_by']}){at}, exit status {exit_code}; "
                        "the audit covers what it ran until then"))
    elif exit_code:
        message = f": {escaped(report['exit_message'])}" if report.get("exit_message") else ""
        print(printable(f"{prog()}: {args.script} exited with {exit_code}{message}; the audit covers what it ran"))
    sys.stdout.flush()
    return ci_gate(report, args.fail_on_sync) or (exit_code if written else 1)


def ci_gate(report: dict[str, Any], limit: int | None) -> int:
    """`--fail-on-sync N`: 2 (and a line saying so) when no decode step was seen, so nothing was checked; 1 when a
    decode step read the device more than N times; else 0."""
    if limit is None:
        return 0
    if report.get("reads_per_decode_step") is None:
        print(f"{prog()}: FAIL: no decode step was seen, so --fail-on-sync {limit} checked nothing: pass --steps-of "
              "NAME (what each step calls: package.module:QualName, or a function or class of the script)")
        return 2
    worst = report.get("most_reads_in_a_decode_step") or 0
    if worst > limit:
        print(f"{prog()}: FAIL: a decode step reads the device {worst} times (--fail-on-sync {limit})")
        return 1
    return 0


def audit_script(script: str, args: Sequence[str], steps_of: StepsOf | str | None = None, kernels: bool = True, *,
                 timeout_s: float | None = None,
                 keep: Callable[[dict[str, Any], int], int] | None = None) -> tuple[dict[str, Any], int]:
    """Run `script` as __main__ with `args` under the audit; (the report, the program's exit status). The report
    covers what ran, also when the program failed (its traceback is printed as Python prints it) or was stopped
    (Ctrl-C, SIGTERM, `timeout_s`: core.audit.stop). Where the run must end at once (a program that does not stop,
    or calls os._exit), `keep(report, status)` is given the report of what was seen and returns the exit status,
    and the process exits with it. A process the program forks exits where the program ends there, reporting
    nothing."""
    if isinstance(steps_of, str):
        steps_of = StepsOf(steps_of, script)
    _import_what_torch_imports_later()
    run = _AuditedRun(script, args, steps_of, keep)
    stops = run.stops = Stops(run.keep_now, timeout_s)
    with stops.active(), _as_main(script, args), run.audit, _exits_kept(stops):
        with _profiling(run.audit.cuda and kernels) as run.profiler, \
                audited_compiles(run.audit, run.watcher, run.not_seen), _watching(run.watcher):
            before = set(threading.enumerate())
            exit_code, run.exit_message, run.stopped_at = _run(script, stops)
            if os.getpid() != stops.pid:  # the program forked, and this is the child, whose program has ended
                _exit_quietly(exit_code)
            stops.program_ended()
            running = _join_threads_left(before, stops.hurry)
        intervals = device_intervals_ns(run.profiler) if run.profiler is not None else []
        run.profiler = None
        if running:
            run.not_seen.append(f"threads still running {THREADS_WAIT_S:.0f} s after the program's end (or when the "
                                f"audit was hurried): {', '.join(running)}; what they did after that is not counted")
        run.settle()
    return run.report(stops.code or exit_code, intervals), stops.code or exit_code


def _import_what_torch_imports_later() -> None:
    """torch imports dynamo on first use (under the audit, at the program's first nn.Module): seconds of import that,
    under the audit's profile function, would count against the program's `--timeout` and delay its first step.
    Imported here, before the program's clock starts."""
    import torch._dynamo  # noqa: F401


class _AuditedRun:
    """What one audited run has seen so far, made into its report: at the run's end, or at once (keep_now)."""

    def __init__(self, script: str, args: Sequence[str], steps_of: StepsOf | None,
                 keep: Callable[[dict[str, Any], int], int] | None):
        self.script, self.args, self.steps_of, self.keep = script, list(args), steps_of, keep
        self.audit = SyncAudit("cuda" if torch.cuda.is_available() else "cpu")
        self.watcher = StepWatcher(self.audit, steps_of)
        self.not_seen: list[str] = []
        self.profiler: Any = None
        self.exit_message: str | None = None
        self.stopped_at: str | None = None  # where the program was when stopped from outside
        self.stops: Stops | None = None
        self._step_facts: tuple[str | None, str | None] = (None, None)

    def settle(self) -> None:
        """The steps found, the reads assigned to them, the run over."""
        name, thread, starts, ends = self.watcher.steps()
        self.audit.assign_steps(starts, ends)
        self.audit.end()
        self._step_facts = (name, thread)
        if self.steps_of is not None and self.steps_of.file() is None:
            self.not_seen.append(f"--steps-of {self.steps_of.spec}: the program never imported {self.steps_of.module}")

    def report(self, exit_code: int, intervals: list[tuple[int, int]]) -> dict[str, Any]:
        clocks = {"realtime": time.time_ns() - time.perf_counter_ns(), "monotonic": time.monotonic_ns()
                  - time.perf_counter_ns()}
        name, thread = self._step_facts
        stopped = {"stopped_by": self.stops.reason} if self.stops is not None and self.stops.reason else {}
        if stopped and self.stopped_at:
            stopped["stopped_at"] = self.stopped_at
        said = {"exit_message": clip(self.exit_message)} if self.exit_message else {}
        return describe(self.audit, script=path_from_root(os.path.abspath(self.script)), argv=self.args,
                        step_module=f"{name} on thread {thread}" if name and thread else name, step_thread=thread,
                        **kernel_steps(intervals, self.audit, clocks), exit_code=exit_code, not_seen=self.not_seen,
                        **stopped, **said)

    def keep_now(self, status: int, why: str) -> Any:
        """The report of what was seen, now, given to `keep`; then the process exits (core.audit.stop calls it)."""
        sys.setprofile(None)
        threading.setprofile(None)
        self.watcher.stop()
        if self.stops is not None and not self.stops.reason:
            self.stops.reason = why
        if self.profiler is not None:
            self.not_seen.append("the kernel time per step: the run ended before its kernel trace was collected")
        self.not_seen.append(f"the run ended at once ({why}): threads still running then, open files and what the "
                             "program would have done at its exit are not in the audit")
        self.settle()
        with contextlib.suppress(Exception):  # its patches undone; on CUDA, the reads' costs settled
            self.audit.__exit__(None, None, None)
        report = self.report(status, [])
        _exit_quietly(self.keep(report, status) if self.keep is not None else status)


def _exit_quietly(status: int) -> Any:
    """Exit now, with what was printed flushed: no handler, no atexit, nothing of the audit's own to unwind."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    _EXIT(status)


@contextlib.contextmanager
def _exits_kept(stops: Stops) -> Iterator[None]:
    """The program's os._exit, while it runs: in this process, the report of what was seen first, then the exit;
    in a process it forked (multiprocessing's children end with os._exit), the exit alone."""
    def exit_now(status: int) -> Any:
        if os.getpid() != stops.pid:
            _EXIT(status)
        stops.keep_now(status, f"the program called os._exit({status})")

    os._exit = exit_now
    try:
        yield
    finally:
        os._exit = _EXIT


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


def _run(script: str, stops: Stops) -> tuple[int, str | None, str | None]:
    """Run the script as __main__; its exit status as Python's would be, its sys.exit message (None without one),
    and where it was when stopped from outside (None where it was not). A failure's traceback is printed as Python
    prints it, from the script's first frame on; a stop from outside (Ctrl-C, SIGTERM, --timeout) prints none: the
    summary's last line says where the program was."""
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        return (*_exit_status(exc.code), None)
    except BaseException as exc:  # the program failed, or was stopped: what it ran is still reported
        code = 130 if isinstance(exc, KeyboardInterrupt) else 1
        if isinstance(exc, KeyboardInterrupt) and stops.reason:
            return code, None, _where_stopped(exc.__traceback__)
        exc = exc.with_traceback(_from_script(exc.__traceback__, script))  # Python prints __traceback__
        sys.excepthook(type(exc), exc, exc.__traceback__)
        return code, None, None
    return 0, None, None


def _where_stopped(tb: Any) -> str | None:
    """The innermost line of the program's own code (not torch's, nor the audit's) in a traceback, as "file:line"."""
    where = None
    while tb is not None:
        if in_program(tb.tb_frame.f_code.co_filename):
            where = f"{path_from_root(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def _join_threads_left(before: set[threading.Thread], hurry: threading.Event | None = None) -> list[str]:
    """Wait, as Python does when a program ends, for the threads it started and left running (a generate() thread
    it did not join, say), at most THREADS_WAIT_S in all, or until `hurry` is set (a signal); the names of those
    still running. Not waited for, as Python does not: daemon threads, and the idle workers of thread pools (Python's
    exit stops those)."""
    deadline = time.monotonic() + THREADS_WAIT_S
    left = [t for t in threading.enumerate() if t not in before and not t.daemon
            and getattr(t, "_target", None) is not concurrent.futures.thread._worker]
    for thread in left:
        while thread.is_alive() and time.monotonic() < deadline and not (hurry and hurry.is_set()):
            thread.join(min(0.1, max(0.0, deadline - time.monotonic())))
    return [t.name for t in left if t.is_alive()]


def _exit_status(code: Any) -> tuple[int, str | None]:
    if code is None or isinstance(code, int):
        return code or 0, None
    print(code, file=sys.stderr)  # sys.exit("message"): Python prints it and exits with 1
    return 1, str(code)


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
