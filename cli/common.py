"""What the single-run and the load command lines share: the signals that interrupt a run, one-line errors and
output, and --html, the run as one self-contained HTML file (dashboard.views.run_html, in this process)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from core.parallel.ranks import interrupts_handled
from core.request.run_schema import BENCH_MODULE
from core.text import escaped, printable

PROG = BENCH_MODULE  # how the command names itself on stderr
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal's number, as a shell reports it
NEEDS_DASHBOARD = ("exporting a run as HTML needs {missing} (the dashboard extra), which is not installed here: run "
                   "pip install \".[dashboard]\" in the syncscope checkout")


@contextlib.contextmanager
def interrupt_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM both raise KeyboardInterrupt while inside, so that an interrupted run can keep its finished
    trials; a second signal is not let to cut that short (it says so), a third ends the process at once. Yields the
    signals received, in order. Outside the main thread (where handlers cannot be set) a no-op."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def interrupt(signum: int, frame: Any) -> None:
        received.append(signum)
        if len(received) == 1:
            raise KeyboardInterrupt
        if len(received) == 2:
            sys.stderr.write(f"{PROG}: keeping what finished; interrupt once more to quit without it\n")
            return
        os._exit(EXIT_CODES.get(received[0], 130))

    with interrupts_handled(interrupt):
        yield received


def ignore_interrupts() -> None:
    """While an interrupted run's report is written: a second Ctrl-C would leave it unwritten."""
    if threading.current_thread() is threading.main_thread():
        for signum in EXIT_CODES:
            signal.signal(signum, signal.SIG_IGN)


def signal_name(received: Sequence[int]) -> str:
    return signal.Signals(received[0]).name if received else "SIGINT"


def interrupted_code(received: Sequence[int]) -> int:
    return EXIT_CODES.get(received[0], 130) if received else 130


def fail(rank: int, message: str, code: int) -> int:
    """One line on stderr, whatever it quotes; `code` back, for the command's exit."""
    where = f"rank {rank}: " if rank else ""
    sys.stderr.write(f"{PROG}: error: {where}{escaped(message)}\n")
    return code


def failure_line(exc: Exception) -> str:
    """An unexpected exception as a command line answers it: its name and its message's first line."""
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first_line}"


def say(text: str) -> None:
    """A line (or lines) of the CLI's output: a model's name or a report's field cannot act on the terminal."""
    print(printable(text))


def write_html(path: str, report: dict[str, Any]) -> bool:
    """--html: the report as one self-contained HTML file (dashboard.views.run_html, which words a load report
    itself). False after one line on stderr when it could not be written (plotly not installed, a full disk)."""
    try:  # plotly is the dashboard extra's: its absence is one line, not a traceback
        from dashboard.views.run_html import run_html
        from dashboard.views.run_html import write_html as write_file
    except ImportError as missing:
        fail(0, f"--html {path}: {NEEDS_DASHBOARD.format(missing=missing.name or 'plotly')}", 1)
        return False
    try:
        write_file(path, run_html(report))
    except OSError as exc:
        fail(0, f"--html {path}: could not write it ({exc.strerror or exc}); nothing was written", 1)
        return False
    print(f"wrote {path}")
    return True
