"""How a program run under core.audit is stopped from outside, keeping what the audit saw: Ctrl-C (SIGINT), SIGTERM,
`--timeout`, and the program's own os._exit.

The first signal (or the timeout) raises KeyboardInterrupt in the program's main thread (the timeout:
ProgramTimedOut, one), so that the program ends as Python ends it (its finally blocks and context managers run), and
the audit reports what it saw and the line the program was at (core.audit prints no traceback for a stop it asked
for). A program that goes on all the same (it caught the exception, or it is stuck in native code) is
ended by the next signal or after GRACE_S: what was seen is kept at once (`keep`: the report written, then os._exit).
Once the program has ended, a signal only hurries the audit (it stops waiting for threads left running); another one
after that quits at once. In a process the program forked, none of this applies: a signal there does what it does to
any Python program, and nothing is kept."""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

GRACE_S = 10.0  # how long a program told to stop may take to end before what was seen is kept without it
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal's number, as a shell reports it
TIMEOUT_CODE = 124  # as timeout(1) exits
_HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)  # SIGALRM: the timeout, raised by interrupt_main


class ProgramTimedOut(KeyboardInterrupt):
    """Raised in the program's main thread when `--timeout` has passed."""


class Stops:
    """The stops of one audited run (see the module's docstring). `keep(status, why)` writes what was seen and never
    returns; `reason` and `code` say what stopped the program (None and 0 when nothing did)."""

    def __init__(self, keep: Callable[[int, str], NoReturn], timeout_s: float | None = None,
                 grace_s: float | None = None):
        self.keep, self.timeout_s = keep, timeout_s
        self.grace_s = GRACE_S if grace_s is None else grace_s
        self.reason: str | None = None
        self.code = 0
        self.hurry = threading.Event()  # set by a signal once the program has ended: stop waiting for its threads
        self.pid = os.getpid()
        self._asked, self._ended = threading.Event(), threading.Event()
        self._kept = threading.Lock()
        self._saved: dict[int, Any] = {}

    @contextlib.contextmanager
    def active(self) -> Iterator[Stops]:
        """The handlers and the timeout's watchdog, while inside; outside the main thread only the watchdog, which
        then keeps what was seen when the timeout passes."""
        if threading.current_thread() is threading.main_thread():
            self._saved = {signum: signal.signal(signum, self._on_signal) for signum in _HANDLED}
        watchdog = threading.Thread(target=self._watch, name="core.audit timeout", daemon=True)
        watchdog.start()
        try:
            yield self
        finally:
            self._ended.set()
            self._asked.set()
            for signum, handler in self._saved.items():
                signal.signal(signum, handler)

    def program_ended(self) -> None:
        """The program's main thread is back: what follows is the audit's own work."""
        self._ended.set()

    def keep_now(self, status: int, why: str) -> NoReturn:
        """Keep what was seen and exit with `status` (once: a second caller waits for the first to exit)."""
        self._kept.acquire()
        self.keep(status, why)
        raise AssertionError("keep returned")  # pragma: no cover: keep ends the process

    def _on_signal(self, signum: int, frame: Any) -> None:
        if os.getpid() != self.pid:  # a process the program forked: as Python would, without the audit
            raise ProgramTimedOut if signum == signal.SIGALRM else KeyboardInterrupt
        if self._ended.is_set():
            self._hurry(signum)
        elif signum == signal.SIGALRM:  # the watchdog's, which noted the timeout
            raise ProgramTimedOut
        elif self.reason is None:
            self._note(signum)
            raise KeyboardInterrupt
        else:
            self.keep_now(self.code, f"{self.reason}, and then {_name(signum)} while the program went on")

    def _note(self, signum: int) -> None:
        if signum == signal.SIGALRM:
            self.reason, self.code = f"--timeout {self.timeout_s:g}", TIMEOUT_CODE
        else:
            self.reason, self.code = _name(signum), EXIT_CODES.get(signum, 130)
        self._asked.set()

    def _hurry(self, signum: int) -> None:
        if self.hurry.is_set():
            os._exit(self.code or EXIT_CODES.get(signum, 130))
        self.hurry.set()
        self.reason, self.code = self.reason or _name(signum), self.code or EXIT_CODES.get(signum, 130)
        sys.stderr.write("python -m core.audit: keeping what was seen; interrupt once more to quit without it\n")

    def _watch(self) -> None:
        """The timeout, then the grace a stopped program gets to end."""
        if self.timeout_s is not None and not self._asked.wait(self.timeout_s) and not self._ended.is_set():
            self._note(signal.SIGALRM)
            if not self._saved:  # no handler to stop the program with: keep what was seen now
                self.keep_now(TIMEOUT_CODE, f"{self.reason} passed")
            _thread.interrupt_main(signal.SIGALRM)  # runs _on_signal in the main thread
        self._asked.wait()
        if not self._ended.wait(self.grace_s):
            self.keep_now(self.code, f"{self.reason}, and the program had not ended {self.grace_s:g} s later")


def _name(signum: int) -> str:
    return signal.Signals(signum).name
