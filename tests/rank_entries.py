"""What the ranks of tests/test_ranks.py run: small functions in place of core.bench's main, in a module that imports
nothing heavy, since every spawned rank imports it. argv[0] is the test's folder, where a rank writes what it saw."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from core.parallel import ranks
from core.parallel.launch import CHILD_ENV_DEFAULTS


def rank() -> int:
    return int(os.environ["RANK"])


def note(folder: str, name: str, value: object = None) -> None:
    (Path(folder) / f"{name}-{rank()}.json").write_text(json.dumps(value))


def report_environment(argv: list[str]) -> int:
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", *CHILD_ENV_DEFAULTS)
    note(argv[0], "env", {key: os.environ.get(key) for key in keys})
    print(f"rank {rank()} prints")
    return 0


def rank_1_fails(argv: list[str]) -> int:
    if rank() == 1:
        if argv[1] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        return 3
    time.sleep(120)  # what a rank does while it waits for the failed one in a collective: never stops
    note(argv[0], "finished")
    return 0


def stop_when_asked(argv: list[str]) -> int:
    """Wait for the launcher's signal in shared memory (as agreed_stop reads it), then stop as asked."""
    deadline = time.monotonic() + 60
    while ranks._launcher_stop.value == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    asked = ranks._launcher_stop.value
    note(argv[0], "asked", asked)
    if argv[1] == "ignore":
        time.sleep(120)
    return 128 + asked if asked else 0


def one_stops_one_hangs(argv: list[str]) -> int:
    if rank() == 0:
        return 128 + signal.SIGINT
    time.sleep(120)
    return 0
