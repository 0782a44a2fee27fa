"""core.kernels.decode_layer on a GPU: the fused step of one layer against transformers' layer at Llama's shapes, and
the compiled step-graph decode with fused layers (the default) giving eager's tokens and the unfused compile's in
fp32, repeating bitwise in bf16, and the two loops agreeing; the same with silu(gate) * up in the gate/up kernel,
and attention asking L2 for the output projection changing no bit.
Skipped without CUDA; the arithmetic is also checked on the CPU, in Triton's interpreter
(tests/test_triton_layer.py)."""

import pytest
import torch

from core.kernels import decode_layer
from core.kernels.decode_layer import DecodeLayer
from core.loops.generation import generate
from core.models import load_model
from tests.conftest import requires_cuda
from tests.test_triton_layer import LAYER_CASES, check_layer_errors, layer_errors

pytestmark = [pytest.mark.cuda, requires_cuda]

# Llama-8B's attention layout and Llama-1B's, beside the small cases the interpreter runs
GPU_LAYER_CASES = [*LAYER_CASES, (4096, 32, 8, 128, False), (2048, 32, 8, 64, False)]
PROMPT = "Tell me about the sea and the ships on it."


@pytest.mark.parametrize("swiglu", ["down", "gate-up"])
def test_the_fused_step_computes_transformers_layer(monkeypatch, swiglu):
    monkeypatch.setenv("SYNCSCOPE_DECODE_SWIGLU", swiglu)
    check_layer_errors(layer_errors(GPU_LAYER_CASES, device="cuda", ops=torch.ops.syncscope), GPU_LAYER_CASES)


def _traced_launches(monkeypatch) -> list[str]:
    """The names of the layer's kernels as a compile traces them (once per compiled graph)."""
    import core.kernels.triton_gemv as triton_gemv

    traced: list[str] = []
    qkv, gemv = decode_layer.launch_qkv, decode_layer.launch_gemv
    monkeypatch.setattr(decode_layer, "launch_qkv", lambda *a, **k: traced.append("qkv") or qkv(*a, **k))

    def launch_gemv(*args, around=triton_gemv.Around(), **kwargs):
        name = "norm" if around.norm is not None else "advance" if around.length is not None else "residual"
        traced.append(f"{name}-swiglu" if around.swiglu else name)
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
    monkeypatch.setenv("SYNCSCOPE_DECODE_LAYER", "off")
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


def test_swiglu_in_gate_up_gives_eager_tokens_in_fp32_and_repeats_in_bf16(monkeypatch, fast_tiny_compiles):
    monkeypatch.setenv("SYNCSCOPE_DECODE_SWIGLU", "gate-up")
    for dtype in ("fp32", "bf16"):
        torch._dynamo.reset()
        traced = _traced_launches(monkeypatch)
        loaded = load_model("tiny-random", device="cuda", dtype=dtype)
        common = dict(cache="static", max_new_tokens=24, ignore_eos=True)
        eager = generate(loaded, PROMPT, loop="naive", **common)
        first = generate(loaded, PROMPT, loop="pipelined", compile="step-graph", lag=2, **common)
        again = generate(loaded, PROMPT, loop="pipelined", compile="step-graph", lag=2, **common)
        assert "norm-swiglu" in traced and "norm" not in traced, dtype
        assert first.token_ids == again.token_ids, dtype
        if dtype == "fp32":
            assert first.token_ids == eager.token_ids


@pytest.mark.parametrize("option", ["SYNCSCOPE_ATTENTION_PREFETCH", "SYNCSCOPE_PRODUCT_PREFETCH"])
def test_prefetching_the_next_weight_changes_no_bit(monkeypatch, fast_tiny_compiles, option):
    """Asking L2 for the next kernel's weight (attention for the output projection's, each product for the next
    product's) changes no value: the same bf16 tokens as off, and the kernels were launched with it."""
    from core.kernels import triton_attention, triton_gemv

    asked = []
    module = triton_attention if option == "SYNCSCOPE_ATTENTION_PREFETCH" else triton_gemv
    pieces = module.prefetch_pieces
    monkeypatch.setattr(module, "prefetch_pieces", lambda ahead, *args: asked.append(
        (ahead is not None, pieces(ahead, *args)[0])) or pieces(ahead, *args))
    common = dict(cache="static", max_new_tokens=24, ignore_eos=True, loop="pipelined", compile="step-graph", lag=2)
    for dtype in ("bf16",):  # bf16: where a changed order of any sum would show
        tokens = {}
        for choice in ("off", "on"):
            monkeypatch.setenv(option, choice)
            torch._dynamo.reset()
            asked.clear()
            tokens[choice] = generate(load_model("tiny-random", device="cuda", dtype=dtype), PROMPT, **common).token_ids
            given = [piece for weight, piece in asked if weight]
            assert (len(given) > 0 and all(given)) if choice == "on" else not given, (dtype, choice, asked)
        assert tokens["on"] == tokens["off"], dtype


def _direct(kernel):  # launched by Triton itself, outside a compile
    return kernel


def test_the_kernels_give_the_same_bits_with_the_prefetch_at_llama_1b():
    from core.kernels import triton_attention
    from core.kernels.triton_gemv import Around, launch_gemv
    from tests.test_triton_attention import _case

    query, key, value, mask = _case(torch.bfloat16, 1, 32, 8, 512, 64, "bool", device="cuda")
    weight = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    plain = triton_attention._launch(query, key, value, mask, 0.125, _direct, triton_attention._kernels())
    ahead = triton_attention._launch(query, key, value, mask, 0.125, _direct, triton_attention._kernels(), ahead=weight)
    assert triton_attention.prefetch_pieces(weight, 64, triton_attention.PREFETCH_PIECES)[0] > 0
    assert torch.equal(plain, ahead)
    x, residual = (torch.randn(1, 1, 2048, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    gate_up = torch.randn(16384, 2048, device="cuda", dtype=torch.bfloat16)
    plain = launch_gemv(x, weight, None, False, _direct, around=Around(residual=residual))
    ahead = launch_gemv(x, weight, None, False, _direct, around=Around(residual=residual, ahead=gate_up))
    assert torch.equal(plain, ahead)
