"""The engine process on a GPU: runs, a real CUDA error, a killed engine, and tensor parallelism over two GPUs.

Skipped without CUDA (two-GPU tests without two GPUs); run on the device machine with
`python -m pytest -q -m cuda tests/test_cuda_engine.py`. The engines' compiles of tiny-random skip autotuning
(conftest.TINY_GPU_COMPILE): these tests check the engine process, not the kernels.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dashboard.service.jobs import DONE, FAILED
from dashboard.service.runner import Runner
from tests.conftest import TINY, TINY_GPU_COMPILE, fast_settings, requires_cuda

pytestmark = [pytest.mark.cuda, requires_cuda]
REPO = Path(__file__).resolve().parent.parent
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")


@pytest.fixture(scope="module")
def gpu_runner():
    """One runner for the one-GPU tests: they kill or break its engine on purpose, and it starts a new one, as the app
    does (each test then checks that the next run works)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SYNCSCOPE_INDUCTOR_OPTIONS", TINY_GPU_COMPILE)  # inherited by every engine it starts
        runner = Runner(TINY, device="cuda", dtype="fp32", monitor=False)
        yield runner
        runner.close()


def broken_model_dir(tmp_path: Path) -> Path:
    """A Llama whose vocabulary (100 ids) is smaller than its tokenizer's: the embedding reads out of bounds."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from core.models.sources import default_tokenizer

    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, vocab_size=100, max_position_embeddings=512)
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    default_tokenizer().save_pretrained(tmp_path)
    return tmp_path


def test_a_run_on_the_gpu_is_timed_with_cuda_events(gpu_runner):
    report = gpu_runner.run(fast_settings(cache="static", compile="step-graph"))
    assert report["all_identical"] and report["environment"]["gpu"]
    assert {r["timings"]["clock"] for r in report["runs"]} == {"cuda-events"}
    assert report["engine_process"]["gpu_allocated_mib"] > 0


def test_a_cuda_error_restarts_the_engine_and_the_next_run_works(gpu_runner, tmp_path):
    broken = str(broken_model_dir(tmp_path))
    job = gpu_runner.submit(fast_settings(model=broken))
    assert job.wait(180)
    assert job.state == FAILED and "GPU reported an error" in job.error, job.error
    first_engine = job  # the engine exits after reporting; a fresh one starts with a clean CUDA context
    assert gpu_runner.run(fast_settings())["all_identical"], first_engine.error


def test_a_killed_engine_gives_its_gpu_memory_back(gpu_runner):
    gpu_runner.run(fast_settings(cache="static"))
    pid = gpu_runner.engine_client.pids[0]
    long = fast_settings(max_new_tokens=1500, ignore_eos=True, trials=5)
    job = gpu_runner.submit(long)
    time.sleep(3)
    os.kill(pid, signal.SIGKILL)
    assert job.wait(10) and job.state == FAILED and "SIGKILL" in job.error
    listed = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.split()
    assert str(pid) not in listed
    assert gpu_runner.run(fast_settings())["all_identical"]


@two_gpus
@pytest.mark.parametrize("sampling", [[], pytest.param(["--sample", "--seed", "7"], marks=pytest.mark.cuda_long)],
                         ids=["greedy", "sampled"])
def test_two_gpus_give_the_tokens_of_one(tmp_path, sampling):
    reports = {}
    for tp in (1, 2):
        out = tmp_path / f"tp{tp}.json"
        command = [sys.executable, "-m", "core.bench", "--model", TINY, "--dtype", "fp32", "--tp", str(tp),
                   "--max-new-tokens", "24", "--trials", "2", "--cache", "static",
                   "--no-check", *sampling, "--json", str(out)]
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        reports[tp] = json.loads(out.read_text())
    tokens = {tp: [r["token_ids"] for r in report["runs"]] for tp, report in reports.items()}
    assert reports[2]["all_identical"] and reports[2]["environment"]["tp"] == 2
    assert tokens[1] == tokens[2]


@two_gpus
def test_the_dashboard_runs_one_engine_per_gpu(fast_tiny_compiles):
    runner = Runner(TINY, device="cuda", dtype="fp32", tp=2, monitor=False)
    try:
        runner.load(TINY, timeout=300)
        assert len(runner.engine_client.pids) == 2 and runner.model_facts.tp == 2
        report = runner.run(fast_settings(cache="static", compile="step-graph"))
        assert report["all_identical"]
        os.kill(runner.engine_client.pids[1], signal.SIGKILL)  # one rank dies: the whole group is replaced
        assert runner.run(fast_settings())["all_identical"]
        assert runner.history()[-1]["status"] == DONE
    finally:
        runner.close()
