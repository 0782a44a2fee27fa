"""`python -m core.bench --tp N` without torchrun: start N ranks, wait for all, and leave none behind.

Each rank is a spawned process running the same command line with the environment torchrun would give it
(RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). When one rank fails, the others would wait in their
next collective forever, so they are killed; the failing rank has already said why on stderr.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable
from multiprocessing.connection import wait

from core.parallel.launch import child_environment, free_port, spawn_context


def run_ranks(world_size: int, argv: list[str], entry: Callable[[list[str]], int]) -> int:
    """Run `entry(argv)` (core.bench's main) on `world_size` ranks; the exit code of the first rank that failed, else
    0. `entry` must be a module-level function: each spawned rank imports it by name."""
    ctx = spawn_context()
    port = free_port()
    ranks = [ctx.Process(target=_rank_main, args=(rank, world_size, port, argv, entry),
                         name=f"core.bench-rank{rank}")
             for rank in range(world_size)]
    with child_environment():
        for process in ranks:
            process.start()
    try:
        return _wait_all(ranks)
    except KeyboardInterrupt:
        sys.stderr.write("core.bench: interrupted\n")
        return 130
    finally:
        for process in ranks:
            if process.is_alive():
                process.kill()
            process.join(10)


def _wait_all(ranks: list[multiprocessing.Process]) -> int:
    running = {process.sentinel: (index, process) for index, process in enumerate(ranks)}
    while running:
        for sentinel in wait(list(running)):
            index, process = running.pop(sentinel)
            process.join()
            if process.exitcode != 0:
                others = [p for _, p in running.values()]
                for other in others:
                    other.kill()
                sys.stderr.write(f"core.bench: error: rank {index} of {len(ranks)} {_how(process.exitcode)}; "
                                 f"the other ranks were stopped\n")
                return process.exitcode if process.exitcode and process.exitcode > 0 else 1
    return 0


def _how(code: int | None) -> str:
    if code is not None and code < 0:
        return f"was killed by signal {-code}"
    return f"failed (exit code {code})"


def _rank_main(rank: int, world_size: int, port: int, argv: list[str], entry: Callable[[list[str]], int]) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    if rank:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - rank 0 alone prints the table
    code = entry(argv)
    sys.stdout.flush()
    os._exit(code)  # skip interpreter teardown, where a rank's NCCL/gloo threads can hang
