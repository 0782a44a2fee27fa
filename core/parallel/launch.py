"""What every process this project spawns for the device shares: its environment defaults, a free port, and the
spawn start method (the server must never initialise CUDA, and a forked CUDA context is unusable in a child)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import socket
from collections.abc import Iterator
from multiprocessing.context import SpawnContext

# Set in every engine process and every `core.bench --tp` rank, unless the environment already says otherwise.
CHILD_ENV_DEFAULTS = {
    # NVLink multicast off (the lent H200 hosts require it; it costs nothing elsewhere)
    "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
    # tokenizers' own thread pool next to our processes warns, and can deadlock after a fork
    "TOKENIZERS_PARALLELISM": "false",
}


def spawn_context() -> SpawnContext:
    return multiprocessing.get_context("spawn")


@contextlib.contextmanager
def child_environment() -> Iterator[None]:
    """CHILD_ENV_DEFAULTS in this process's environment while children are started (a spawned child inherits the
    environment at `start()`, before it imports anything); afterwards the environment is as it was."""
    added = [key for key in CHILD_ENV_DEFAULTS if key not in os.environ]
    for key in added:
        os.environ[key] = CHILD_ENV_DEFAULTS[key]
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (a rendezvous, or a test server)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
