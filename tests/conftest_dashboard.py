"""Fixtures for the dashboard tests: a runner on tiny-random, and the app served in-process on a free port.

Each test module wraps the generators below in its own fixture (tests/conftest.py belongs to the core tests).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from dashboard.runner import Runner, RunSettings

TINY = "tiny-random"
FAST = RunSettings(prompt="Hello there", model=TINY, max_new_tokens=16)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_runner(**kwargs: Any) -> Runner:
    runner = Runner(None, device="cpu", **kwargs)
    runner.load(TINY, timeout=120)
    return runner


@dataclass
class ServedApp:
    url: str
    runner: Runner
    demo: Any


def serve(runner: Runner, defaults: RunSettings = FAST, **build: Any) -> ServedApp:
    from dashboard.ui import CSS, build_demo

    demo = build_demo(runner, defaults=defaults, **build)
    demo.queue(default_concurrency_limit=4)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, ssr_mode=False,
                css=CSS, max_file_size="20mb")
    return ServedApp(url=f"http://127.0.0.1:{port}/", runner=runner, demo=demo)


def running_tiny() -> Iterator[Runner]:
    """Body of a `tiny_runner` fixture: a runner with tiny-random loaded on the CPU."""
    runner = make_runner()
    yield runner
    runner.close()


def serving_app(**build: Any) -> Iterator[ServedApp]:
    """Body of a `served_app` fixture: the page for a tiny-random runner, served on a free port."""
    runner = make_runner()
    app = serve(runner, **build)
    yield app
    app.demo.close()
    runner.close()


def bench_report(loaded_runner: Runner, **settings: Any) -> dict[str, Any]:
    """A report straight from core.bench.compare (no dashboard timeline), as `python -m core.bench --json` writes."""
    from core.bench import compare

    request, _ = RunSettings(**{**FAST.__dict__, **settings}).to_request()
    assert loaded_runner.loaded is not None
    return compare(loaded_runner.loaded, request)
