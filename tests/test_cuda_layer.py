"""core.kernels.decode_layer on a GPU: the fused step of one layer against transformers' layer at Llama's shapes, and
the compiled step-graph decode with fused layers (the default) giving eager's tokens and the unfused compile's in
fp32, repeating bitwise in bf16, and the two loops agreeing.
Skipped without CUDA; the arithmetic is also checked on the CPU, in Triton's interpreter
(tests/test_triton_layer.py)."""

import pytest
import torch

from core.kernels import decode_layer
from core.kernels.decode_layer import DecodeLayer
from core.loops.generation import generate
from core.models.loading import load_model
from tests.conftest import requires_cuda
from tests.test_triton_layer import LAYER_CASES, check_layer_errors, layer_errors

pytestmark = [pytest.mark.cuda, requires_cuda]

# Llama-8B's attention layout and Llama-1B's, beside the small cases the interpreter runs
GPU_LAYER_CASES = [*LAYER_CASES, (4096, 32, 8, 128, False), (2048, 32, 8, 64, False)]
PROMPT = "Tell me about the sea and the ships on it."


def test_the_fused_step_computes_transformers_layer():
    check_layer_errors(layer_errors(GPU_LAYER_CASES, device="cuda", ops=torch.ops.syncscope), GPU_LAYER_CASES)


def test_the_fused_step_reading_late_computes_transformers_layer_too():
    from core.kernels.reads import reading

    with reading("late"):  # the operators called eagerly: each launch reads the order it is called in
        errors = layer_errors(GPU_LAYER_CASES, device="cuda", ops=torch.ops.syncscope)
    check_layer_errors(errors, GPU_LAYER_CASES)


def _traced_launches(monkeypatch) -> list[str]:
    """The names of the layer's kernels as a compile traces them (once per compiled graph)."""
    import core.kernels.triton_gemv as triton_gemv

    traced: list[str] = []
    qkv, gemv = decode_layer.launch_qkv, decode_layer.launch_gemv
    monkeypatch.setattr(decode_layer, "launch_qkv", lambda *a, **k: traced.append("qkv") or qkv(*a, **k))

    def launch_gemv(*args, around=triton_gemv.Around(), **kwargs):
        name = "norm" if around.norm is not None else "advance" if around.length is not None else "residual"
        traced.append(name)
        return gemv(*args, around=around, **kwargs)

    monkeypatch.setattr(decode_layer, "launch_gemv", launch_gemv)
    return traced


def test_fused_layers_give_eager_tokens_and_the_unfused_compiles_in_fp32(monkeypatch, fast_tiny_compiles):
    torch._dynamo.reset()
    traced = _traced_launches(monkeypatch)
    loaded = load_model("tiny-random", device="cuda", dtype="fp32")
    assert loaded.decode_layers and all(type(layer) is DecodeLayer for layer in loaded.model.model.layers)
    common = dict(cache="static", max_new_tokens=24, ignore_eos=True)
    eager = generate(loaded, PROMPT, loop="naive", **common)
    naive = generate(loaded, PROMPT, loop="naive", compile="step-graph", **common)
    piped = generate(loaded, PROMPT, loop="pipelined", compile="step-graph", lag=2, **common)
    assert {"qkv", "norm", "advance", "residual"} <= set(traced)
    assert naive.token_ids == piped.token_ids == eager.token_ids
    torch._dynamo.reset()
    traced.clear()
    monkeypatch.setenv("SYNCSCOPE_DECODE_LAYER", "off")  # read when the model loads (core.tuning)
    loaded = load_model("tiny-random", device="cuda", dtype="fp32")
    assert not loaded.decode_layers
    unfused = generate(loaded, PROMPT, loop="pipelined", compile="step-graph", lag=2, **common)
    assert not traced
    assert unfused.token_ids == eager.token_ids


def test_fused_layers_repeat_bitwise_in_bf16_and_the_loops_agree(monkeypatch, fast_tiny_compiles):
    torch._dynamo.reset()
    traced = _traced_launches(monkeypatch)
    loaded = load_model("tiny-random", device="cuda", dtype="bf16")
    assert loaded.decode_layers
    common = dict(cache="static", max_new_tokens=40, ignore_eos=True, compile="step-graph")
    first = generate(loaded, PROMPT, loop="pipelined", lag=2, **common)
    again = generate(loaded, PROMPT, loop="pipelined", lag=2, **common)
    naive = generate(loaded, PROMPT, loop="naive", **common)
    assert "qkv" in traced
    assert first.token_ids == again.token_ids == naive.token_ids
