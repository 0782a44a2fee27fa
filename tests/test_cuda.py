"""GPU tests: skipped without CUDA; run on the H200 with `python -m pytest -q -m cuda tests/test_cuda.py`.

The models are shared with the other CUDA modules (conftest.cuda_models), and so is what they compiled; tiny-random's
compiles skip autotuning (conftest.TINY_GPU_COMPILE). Cases marked cuda_long repeat a behaviour that another case
checks in the default CUDA run (`-m "cuda and not cuda_long"`)."""

import warnings

import pytest
import torch

from core.compare import compare
from core.loops.generation import generate
from core.loops.hf_generate import hf_generate
from core.request.options import BenchRequest, GenerationOptions
from tests.conftest import requires_cuda
from tests.helpers import eos_for_steps, first_token_runs, free_run, ids_not_in

pytestmark = [pytest.mark.cuda, requires_cuda]

BATCH = ["Hi", "Tell me about the sea and the ships on it.", "What is two plus two?"]


@pytest.fixture
def tiny_gpu(cuda_models, fast_tiny_compiles):
    return cuda_models("tiny-random", "fp32")


@pytest.fixture
def smol_gpu(cuda_models):
    return cuda_models("synthetic:smollm2-135m", "bf16")


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("batch", [1, 3])
def test_loops_equal_hf_generate_on_cuda(tiny_gpu, cache, batch):
    prompt = BATCH[:batch] if batch > 1 else BATCH[1]
    rows = free_run(tiny_gpu, prompt, 24)
    eos, _ = eos_for_steps(rows, [3, 9, 16][:batch])
    expected, _ = hf_generate(tiny_gpu, prompt, GenerationOptions(max_new_tokens=24, cache=cache, eos_token_id=eos))
    for loop, lag, streams in (("naive", 1, 1), ("pipelined", 1, 1), ("pipelined", 3, 1), ("pipelined", 2, 2)):
        result = generate(tiny_gpu, prompt, loop=loop, cache=cache, max_new_tokens=24, eos_token_id=eos, lag=lag,
                          streams=streams)
        assert result.token_ids == expected, (loop, lag, streams)


@pytest.mark.parametrize("compile_mode", ["reduce-overhead", pytest.param("default", marks=pytest.mark.cuda_long)])
def test_compiled_static_loops_agree_and_compile_once(tiny_gpu, compile_mode):
    """On tiny-random: compiling the 135M shape's 30 layers took 30-43 s a mode (call 20) and checked nothing more.
    Real shapes run reduce-overhead in every headline run (benchmarks/headline.py) and in test_cuda_real_model.py."""
    tiny_gpu.setups.clear()  # another file's test may have compiled this shape on the shared model
    common = dict(cache="static", compile=compile_mode, max_new_tokens=32, ignore_eos=True)
    first = generate(tiny_gpu, BATCH[1], loop="naive", **common)
    again = generate(tiny_gpu, BATCH[1], loop="naive", **common)
    piped = generate(tiny_gpu, BATCH[1], loop="pipelined", lag=2, **common)
    eager = generate(tiny_gpu, BATCH[1], loop="naive", cache="static", max_new_tokens=32, ignore_eos=True)
    assert first.timings.compile_ms > 0 and again.timings.compile_ms == 0 and again.timings.setup_ms == 0
    assert first.token_ids == again.token_ids == piped.token_ids
    # Compiled kernels may round differently from eager; most of the sequence must still agree.
    agree = sum(a == b for a, b in zip(first.token_ids[0], eager.token_ids[0]))
    assert agree >= 8


def test_device_timeline(smol_gpu):
    result = generate(smol_gpu, BATCH[1], loop="naive", cache="static", max_new_tokens=40, ignore_eos=True)
    t = result.timings
    assert t.clock == "cuda-events"
    assert len(t.gpu_step_ms) == 40 and len(t.gpu_gap_ms) == 39 and len(t.step_ms) == 39
    assert all(ms > 0 for ms in t.gpu_step_ms) and all(g >= 0 for g in t.gpu_gap_ms)
    assert 0 < t.device_span_fraction <= 1
    assert 0 < t.ttft_gpu_ms <= t.ttft_ms


def never_emitted(loaded, steps=64):
    """32 EOS ids inside the vocabulary that a free run of `steps` does not produce: checked, never hit."""
    return ids_not_in(free_run(loaded, BATCH[1], steps, cache="static") + free_run(loaded, BATCH, steps), 32)


def _sync_warnings(loaded, loop, steps, eos):
    stop = dict(ignore_eos=True) if eos is None else dict(eos_token_id=eos)
    generate(loaded, BATCH[1], loop=loop, cache="static", max_new_tokens=steps, **stop)  # warm
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            generate(loaded, BATCH[1], loop=loop, cache="static", max_new_tokens=steps, **stop)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return len([w for w in caught if "synchroniz" in str(w.message).lower()])


@pytest.mark.parametrize("many_eos", [False, True], ids=["ignore-eos", "32-eos-ids"])
def test_pipelined_loop_does_not_sync_per_step(tiny_gpu, many_eos):
    """Per-run set-up and the final read may sync; what must not grow with the number of steps does not. (The loop's
    syncs do not depend on the model: tiny-random's eager steps take 2 layers, not the 135M shape's 30.)"""
    eos = never_emitted(tiny_gpu) if many_eos else None
    naive_growth = _sync_warnings(tiny_gpu, "naive", 64, eos) - _sync_warnings(tiny_gpu, "naive", 32, eos)
    piped_growth = _sync_warnings(tiny_gpu, "pipelined", 64, eos) - _sync_warnings(tiny_gpu, "pipelined", 32, eos)
    assert naive_growth >= 32
    assert piped_growth == 0


def test_bench_on_cuda_with_hf_contestants(smol_gpu):
    request = BenchRequest(prompt=BATCH[1], options=GenerationOptions(max_new_tokens=16, cache="static"),
                           trials=2, contestants=("naive", "pipelined", "hf", "hf-deferred"))
    report = compare(smol_gpu, request)
    assert report["environment"]["gpu"]
    assert report["identical"]["pipelined"] and report["identical"]["hf"]
    assert report["summary"]["hf-deferred"]["tokens_per_s"] > 0


def test_fp32_loops_and_compiled_generate_are_identical_past_256_keys(tiny_gpu):
    """In fp32 both loops, the no-check loop and generate() with its own compile give the same tokens, in every trial,
    over a 512-key static cache: test_cuda_real_model.py's fp32 cases (cuda_long) on the real model."""
    contestants = ("naive", "pipelined", "no-check", "hf")
    request = BenchRequest(prompt=BATCH[1], options=GenerationOptions(max_new_tokens=300, cache="static",
                                                                      compile="step-graph", ignore_eos=True),
                           trials=3, contestants=contestants)
    report = compare(tiny_gpu, request)
    assert report["identity"]["keys"] == 512
    assert report["self_consistent"] == dict.fromkeys(contestants, True), report["identity"]
    assert report["all_identical"], report["identical"]
    assert all(len(run["token_ids"][0]) == 300 for run in report["runs"])


@pytest.mark.parametrize("batch", [1, 3])
def test_step_graph_equals_eager_in_fp32_and_stops_exactly_at_eos(tiny_gpu, batch):
    prompt = BATCH[:batch] if batch > 1 else BATCH[1]
    rows = free_run(tiny_gpu, prompt, 24, cache="static")
    eos, stops = eos_for_steps(rows, [4, 10, 17][:batch])
    eager = generate(tiny_gpu, prompt, loop="naive", cache="static", max_new_tokens=24, eos_token_id=eos)
    assert [len(ids) for ids in eager.token_ids] == [s + 1 for s in stops]
    for loop, lag in (("naive", 1), ("pipelined", 1), ("pipelined", 3), ("no-check", 1)):
        result = generate(tiny_gpu, prompt, loop=loop, cache="static", compile="step-graph", max_new_tokens=24,
                          eos_token_id=eos, lag=lag)
        assert result.token_ids == eager.token_ids, (loop, lag)


def test_step_graph_with_many_eos_ids_captures_and_stops_each_row(tiny_gpu):
    rows = free_run(tiny_gpu, BATCH, 24, cache="static")
    eos, stops = eos_for_steps(rows, [4, 10, 17])
    many = [*eos, *never_emitted(tiny_gpu)]  # a batch-32 benchmark row had 32 EOS ids: capture must survive that
    eager = generate(tiny_gpu, BATCH, loop="naive", cache="static", max_new_tokens=24, eos_token_id=many)
    assert [len(ids) for ids in eager.token_ids] == [s + 1 for s in stops]
    graph = generate(tiny_gpu, BATCH, loop="pipelined", cache="static", compile="step-graph", max_new_tokens=24,
                     eos_token_id=many)
    assert graph.token_ids == eager.token_ids


def test_step_graph_bf16_loops_agree_and_graph_is_reused(smol_gpu):
    common = dict(cache="static", compile="step-graph", max_new_tokens=48, ignore_eos=True)
    naive = generate(smol_gpu, BATCH[1], loop="naive", **common)
    piped = generate(smol_gpu, BATCH[1], loop="pipelined", lag=2, streams=2, **common)
    bound = generate(smol_gpu, BATCH[1], loop="no-check", **common)
    assert naive.token_ids == piped.token_ids == bound.token_ids
    assert naive.timings.compile_ms > 0 and piped.timings.compile_ms == 0


def test_step_graph_seeded_sampling(smol_gpu):
    common = dict(cache="static", compile="step-graph", max_new_tokens=24, ignore_eos=True, do_sample=True,
                  temperature=1.0)
    a = generate(smol_gpu, BATCH[1], loop="naive", seed=3, **common)
    b = generate(smol_gpu, BATCH[1], loop="pipelined", seed=3, **common)
    c = generate(smol_gpu, BATCH[1], loop="naive", seed=4, **common)
    assert a.token_ids == b.token_ids != c.token_ids


def test_step_graph_follows_changed_eos_and_options_between_runs(tiny_gpu):
    prompt = BATCH[1]
    row = free_run(tiny_gpu, prompt, 24, cache="static")[0]
    common = dict(cache="static", max_new_tokens=24)
    for extra in (dict(eos_token_id=row[5]), dict(eos_token_id=row[11]), dict(ignore_eos=True),
                  dict(eos_token_id=row[5]), dict(do_sample=True, seed=1, ignore_eos=True)):
        graph = generate(tiny_gpu, prompt, loop="pipelined", compile="step-graph", **common, **extra)
        if extra.get("do_sample"):
            again = generate(tiny_gpu, prompt, loop="naive", compile="step-graph", **common, **extra)
            assert graph.token_ids == again.token_ids
            continue
        eager = generate(tiny_gpu, prompt, loop="naive", **common, **extra)
        assert graph.token_ids == eager.token_ids, extra


def test_out_of_memory_run_fails_cleanly_frees_its_memory_and_the_next_run_works():
    from core.request.run_schema import Limits
    from dashboard.service.runner import Runner

    # The form caps batch at 64, which cannot fill the H200 with an 8B model; lift the cap to provoke the fault.
    runner = Runner(None, device="cuda", monitor=False, limits=Limits(batch=4096, max_new_tokens=4096))
    try:
        runner.load("synthetic:llama-8b", timeout=600)
        small = dict(prompt="Hello", max_new_tokens=8, ignore_eos=True, cache="static")
        baseline = runner.run(small, timeout=300)["engine_process"]["gpu_allocated_mib"]
        huge = dict(prompt="Hello", max_new_tokens=4096, batch=4096, ignore_eos=True, cache="static")
        with pytest.raises(ValueError, match="ran out of memory"):
            runner.run(huge, timeout=300)
        report = runner.run(small, timeout=300)
        assert report["engine_process"]["gpu_allocated_mib"] - baseline < 64  # MiB: the failed run's cache is gone
        assert report["identical"]["pipelined"] and report["summary"]["pipelined"]["new_tokens"] == 8
        assert runner.history()[-2]["status"] == "failed"
    finally:
        runner.close()


def test_cli_out_of_memory_is_one_line_and_exit_3(capsys):
    from core.bench import main

    code = main(["--model", "synthetic:smollm2-135m", "--device", "cuda", "--prompt-tokens", "8", "--batch",
                 "65536", "--max-new-tokens", "4096", "--cache", "static", "--trials", "1", "--ignore-eos"])
    err = capsys.readouterr().err.strip()
    assert code == 3 and len(err.splitlines()) == 1 and "out of memory" in err


def test_compiled_blockwise_argmax_is_argmax_on_cuda():
    from core.loops.step import compiled_argmax

    logits = torch.randn(3, 128256, device="cuda").to(torch.bfloat16)
    logits[1, 40000] = logits[1, 128000] = logits[1].max() + 1  # a tie across blocks: the first wins
    assert torch.equal(compiled_argmax()(logits), logits.argmax(-1))


@pytest.mark.parametrize("kernel", ["sdpa", "reduce", "split", "triton"])
def test_compiled_decode_attention_matches_sdpa_on_cuda(kernel):
    from core.kernels.attention import decode_sdpa

    class Attention(torch.nn.Module):
        num_key_value_groups = 8

    module = Attention().eval()
    query = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
    key, value = (torch.randn(1, 4, 512, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    mask = torch.zeros(1, 1, 1, 512, dtype=torch.bool, device="cuda")
    mask[..., :300] = True
    expected = torch.nn.functional.scaled_dot_product_attention(query.float(), key.float(), value.float(),
                                                                attn_mask=mask, enable_gqa=True).transpose(1, 2)
    got, _ = torch.compile(lambda q, k, v, m: decode_sdpa(module, q, k, v, m, kernel=kernel),
                           dynamic=False)(query, key, value, mask)
    assert torch.allclose(got.float(), expected, atol=2e-2)


@pytest.mark.parametrize("lag", [1, 3])
@pytest.mark.parametrize("stream", [False, True])
def test_pipelined_knows_the_first_token_as_soon_as_naive_does_on_cuda(tiny_gpu, lag, stream):
    results = first_token_runs(tiny_gpu, BATCH[1], lag=lag, stream=stream, max_new_tokens=32)
    assert results["pipelined"].token_ids == results["naive"].token_ids


@pytest.mark.parametrize("batch", [1, 3])
def test_the_whole_commit_gives_eagers_tokens_and_stops_exactly_at_eos(monkeypatch, fast_tiny_compiles, batch):
    """SYNCSCOPE_STEP_COMMIT=whole: the step's token choice and bookkeeping in one compile, inside the step's graph."""
    from core.models.loading import load_model

    monkeypatch.setenv("SYNCSCOPE_STEP_COMMIT", "whole")  # read when the model loads (core.tuning)
    loaded = load_model("tiny-random", device="cuda", dtype="fp32")
    prompt = BATCH[:batch] if batch > 1 else BATCH[1]
    rows = free_run(loaded, prompt, 24, cache="static")
    eos, stops = eos_for_steps(rows, [4, 10, 17][:batch])
    eager = generate(loaded, prompt, loop="naive", cache="static", max_new_tokens=24, eos_token_id=eos)
    assert [len(ids) for ids in eager.token_ids] == [s + 1 for s in stops]
    for loop, lag in (("naive", 1), ("pipelined", 3)):
        result = generate(loaded, prompt, loop=loop, cache="static", compile="step-graph", max_new_tokens=24,
                          eos_token_id=eos, lag=lag)
        assert result.token_ids == eager.token_ids, (loop, lag)
    assert any(setup.whole_commit is not None for setup in loaded.setups.values())
