"""Under load on a GPU (core.load): the slots in every compile mode, transformers' continuous batching sync and async,
and the sync audit on CUDA. Skipped without CUDA; run on the device machine with
`python -m pytest -q -m cuda tests/test_cuda_load.py`. tiny-random's compiles skip autotuning
(conftest.TINY_GPU_COMPILE): these tests check the loops, not the kernels."""

from __future__ import annotations

import pytest

from core.load.batching import run_batched
from core.load.hf_batching import HF_BATCH, HF_BATCH_ASYNC, run_hf_batching
from core.load.protocol import run_load
from core.load.slots import Slots
from core.loops.generation import run as solo_run
from core.loops.prompt import resolve_eos_ids
from core.models.loading import load_model
from core.request.load import LoadRequest, WorkloadSpec
from core.request.options import GenerationOptions, static_cache_length
from tests.conftest import TINY_GPU_COMPILE, requires_cuda

pytestmark = [pytest.mark.cuda, requires_cuda]
SPEC = WorkloadSpec(requests=12, max_new_tokens=20, seed=4)


@pytest.fixture(scope="module")
def fp32():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SYNCSCOPE_INDUCTOR_OPTIONS", TINY_GPU_COMPILE)
        yield load_model("tiny-random", device="cuda", dtype="fp32")


@pytest.fixture(scope="module")
def solo(fp32):
    workload = SPEC.build()
    prompts = [list(r.prompt) for r in workload.requests]
    tokens = [solo_run(fp32, [ids], GenerationOptions(cache="static", max_new_tokens=r.max_new_tokens)).token_ids[0]
              for ids, r in zip(prompts, workload.requests)]
    return workload, prompts, tokens


@pytest.mark.parametrize("compile_mode", ["off", "reduce-overhead", "step-graph"])
def test_every_loop_gives_each_request_its_tokens_in_every_compile_mode(fp32, solo, compile_mode):
    workload, prompts, tokens = solo
    options = GenerationOptions(cache="static", compile=compile_mode)
    slots = Slots(fp32, 4, static_cache_length(max(map(len, prompts)), workload.longest_output, 2), 130, options)
    eos = resolve_eos_ids(fp32, None)
    for loop, lag in (("naive", 1), ("pipelined", 1), ("pipelined", 2), ("no-check", 1)):
        run = run_batched(loop, slots, workload, prompts, eos_ids=eos, ignore_eos=False, lag=lag,
                          known_lengths=[len(t) for t in tokens])
        got = [r.tokens for r in run.requests]
        same = sum(a == b for a, b in zip(got, tokens))
        # fp32 on a GPU: a batch's products may round otherwise than one row's; nearly every request still agrees
        assert same >= 10, (loop, compile_mode, same)
        assert [r.wasted_steps for r in run.requests] == [lag if loop == "pipelined" else 0] * 12


def test_transformers_batching_sync_and_async_run_the_workload(fp32, solo):
    workload, prompts, tokens = solo
    for name in (HF_BATCH, HF_BATCH_ASYNC):
        run = run_hf_batching(fp32, name, workload, prompts, slots=4, eos_ids=resolve_eos_ids(fp32, None),
                              ignore_eos=False, compiled=False)
        assert len(run.requests) == 12 and all(r.tokens for r in run.requests), name
        assert sum(r.tokens == t for r, t in zip(run.requests, tokens)) >= 10, name


def test_on_cuda_the_audit_finds_the_naive_read_and_none_in_the_pipelined_steps(fp32):
    request = LoadRequest(workload=SPEC, max_batch=4, trials=1, audit=True, contestants=("naive", "pipelined"),
                          options=GenerationOptions(cache="static", compile="reduce-overhead"), solo_checks=2)
    section = run_load(fp32, request)
    entries = section["contestants"]
    assert entries["pipelined"]["reads_per_decode_step"] == 0
    assert entries["naive"]["reads_per_decode_step"] >= 1
    assert entries["naive"]["host_wait_us_per_step"] > 0 and entries["pipelined"]["device_idle_us_per_step"] >= 0
    assert entries["naive"]["kernel_busy_fraction"] is not None
    measured = entries["pipelined"]["kernel_measurement"]  # as a single run's: per decode step, and by kind of kernel
    assert measured["decode_steps"] > 0 and measured["kinds"] and measured["kernel_busy_ms_per_step"] > 0
    assert measured["run_busy_fraction"] == entries["pipelined"]["kernel_busy_fraction"]
    assert entries["naive"]["repeatable"] and entries["pipelined"]["identical_to"]["identical"]


def test_bf16_under_load_repeats_and_both_loops_agree(fp32):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SYNCSCOPE_INDUCTOR_OPTIONS", TINY_GPU_COMPILE)
        bf16 = load_model("tiny-random", device="cuda", dtype="bf16")
    request = LoadRequest(workload=SPEC, max_batch=4, trials=2, contestants=("naive", "pipelined"), solo_checks=0,
                          options=GenerationOptions(cache="static", compile="step-graph"), no_kernel_measurement=True)
    entries = run_load(bf16, request)["contestants"]
    assert entries["naive"]["repeatable"] and entries["pipelined"]["repeatable"]
    assert entries["pipelined"]["identical_to"] == {"contestant": "naive", "identical": True}
