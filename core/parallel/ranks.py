"""`python -m core.bench --tp N` without torchrun: start N ranks, wait for all, and leave none behind.

Each rank is a spawned process running the same command line with the environment torchrun would give it
(RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). When one rank fails, the others would wait in their
next collective forever, so they are killed; the failing rank has already said why on stderr.

An interrupt (Ctrl-C, or SIGTERM to the launcher or, under torchrun, to the ranks) cannot stop one rank where it
stands: the others would wait for it in a collective. The launcher passes the signal on in shared memory, and the
ranks agree, through one all-reduce at each point where they all stand at the same place (before the warm-ups, after
each warm-up and before each round), to stop there together (`agreed_stop`); the same all-reduce makes them agree on
whether `--min-seconds` wants another round. Rank 0 then writes the report of the finished rounds, as a one-process
run does. A second signal to the launcher ends every rank at once.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import wait
from typing import Any

from core.parallel.launch import child_environment, free_port, spawn_context

INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM)
INTERRUPTED_EXIT_CODES = {128 + signum for signum in INTERRUPT_SIGNALS}  # 130, 143: a rank that stopped as asked
INTERRUPTED_GRACE_S = 120.0  # after the first rank stopped as asked, how long the others get to do the same

_launcher_stop: Any = None  # in a rank this launcher started: the shared integer the launcher writes a signal into


def run_ranks(world_size: int, argv: list[str], entry: Callable[[list[str]], int]) -> int:
    """Run `entry(argv)` (core.bench's main) on `world_size` ranks; the exit code of the first rank that failed, else
    0 (or 130/143 after an interrupt). `entry` must be a module-level function: each spawned rank imports it by
    name."""
    ctx = spawn_context()
    port = free_port()
    stop = ctx.Value("i", 0)  # the signal that asked the ranks to stop; 0 while none has
    ranks = [ctx.Process(target=_rank_main, args=(rank, world_size, port, argv, entry, stop),
                         name=f"core.bench-rank{rank}")
             for rank in range(world_size)]
    # Started with the signals ignored (a child inherits that): a Ctrl-C during a rank's imports reaches us alone.
    with child_environment(), interrupts_handled(signal.SIG_IGN):
        for process in ranks:
            process.start()
    try:
        with _launcher_interrupts(stop):
            return _wait_all(ranks, stop)
    except KeyboardInterrupt:
        _end(ranks)  # first, so that what a rank wrote while it went stands before this last line
        sys.stderr.write("core.bench: interrupted again: every rank was ended; no report written\n")
        return 128 + (stop.value or signal.SIGINT)
    finally:
        _end(ranks)


def _end(ranks: list[Any]) -> None:
    """Kill the ranks still running, all before waiting for any, and wait for each."""
    for process in ranks:
        if process.is_alive():
            process.kill()
    for process in ranks:
        process.join(10)


def agreed_stop(received: list[int], device: Any) -> Callable[[bool], bool]:
    """For core.compare's `between_rounds`, in a rank: raises KeyboardInterrupt on every rank at once when any rank
    was interrupted (`received`, its own signals) or the launcher asked (its shared integer); else whether any rank
    wants another round. One all-reduce of two integers, between timed runs."""
    import torch
    import torch.distributed as dist

    def check(wanted: bool) -> bool:
        asked = received[0] if received else (_launcher_stop.value if _launcher_stop is not None else 0)
        flags = torch.tensor([asked, int(wanted)], dtype=torch.int32, device=device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        agreed_signal, agreed_wanted = (int(value) for value in flags.tolist())
        if agreed_signal:
            if not received:
                received.append(agreed_signal)
            raise KeyboardInterrupt
        return bool(agreed_wanted)

    return check


@contextlib.contextmanager
def noted_interrupts(rank: int) -> Iterator[list[int]]:
    """In a rank: SIGINT and SIGTERM are only noted (in the list yielded), for `agreed_stop` to act on. Rank 0 says
    once, under torchrun (this launcher says it itself), that the ranks stop together."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def note(signum: int, frame: Any) -> None:
        if not received and rank == 0 and _launcher_stop is None:
            sys.stderr.write(f"core.bench: {signal.Signals(signum).name}: {STOPPING}\n")
        received.append(signum)

    with interrupts_handled(note):
        yield received


STOPPING = "the ranks stop together after the warm-up or round they are in, and rank 0 writes what finished"


@contextlib.contextmanager
def interrupts_handled(handler: Any) -> Iterator[None]:
    """SIGINT and SIGTERM go to `handler` (a function, or signal.SIG_IGN) while inside; afterwards as before."""
    before = {signum: signal.signal(signum, handler) for signum in INTERRUPT_SIGNALS}
    try:
        yield
    finally:
        for signum, previous in before.items():
            signal.signal(signum, previous)


@contextlib.contextmanager
def _launcher_interrupts(stop: Any) -> Iterator[None]:
    """The first SIGINT or SIGTERM is passed on to the ranks (`stop`); the second raises KeyboardInterrupt."""
    def interrupt(signum: int, frame: Any) -> None:
        if stop.value:
            raise KeyboardInterrupt
        stop.value = signum
        sys.stderr.write(f"core.bench: {signal.Signals(signum).name}: {STOPPING}; interrupt once more to end them "
                         "at once, without a report\n")

    with interrupts_handled(interrupt):
        yield


def _wait_all(ranks: list[multiprocessing.Process], stop: Any) -> int:
    running = {process.sentinel: (index, process) for index, process in enumerate(ranks)}
    deadline: float | None = None  # once a rank stopped as asked: when the others must have too
    while running:
        ready = wait(list(running), timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        if not ready:
            return _end_stragglers(running, len(ranks))
        for sentinel in ready:
            index, process = running.pop(sentinel)
            process.join()
            if process.exitcode in INTERRUPTED_EXIT_CODES:
                deadline = deadline or time.monotonic() + INTERRUPTED_GRACE_S
                continue
            if process.exitcode != 0:
                for _, other in running.values():
                    other.kill()
                sys.stderr.write(f"core.bench: error: rank {index} of {len(ranks)} {_how(process.exitcode)}; "
                                 f"the other ranks were stopped\n")
                return process.exitcode if process.exitcode and process.exitcode > 0 else 1
    return 128 + (stop.value or signal.SIGINT) if stop.value or deadline is not None else 0


def _end_stragglers(running: dict[Any, tuple[int, multiprocessing.Process]], world_size: int) -> int:
    late = sorted(index for index, _ in running.values())
    for _, process in running.values():
        process.kill()
    sys.stderr.write(f"core.bench: error: rank{'s' if len(late) > 1 else ''} {', '.join(map(str, late))} of "
                     f"{world_size} did not stop within {INTERRUPTED_GRACE_S:.0f} s of the others; ended\n")
    return 1


def _how(code: int | None) -> str:
    if code is not None and code < 0:
        return f"was killed by signal {-code}"
    return f"failed (exit code {code})"


def _rank_main(rank: int, world_size: int, port: int, argv: list[str], entry: Callable[[list[str]], int],
               stop: Any) -> None:
    global _launcher_stop
    _launcher_stop = stop
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    if rank:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - rank 0 alone prints the table
    code = entry(argv)
    sys.stdout.flush()
    os._exit(code)  # skip interpreter teardown, where a rank's NCCL/gloo threads can hang
