"""core.kernels.triton_gemv on a GPU: the kernel against the BLAS library's product, bitwise repeatable, and the
compiled decode steps that use it (SYNCSCOPE_DECODE_PRODUCTS=triton) giving eager's tokens in fp32. Skipped without
CUDA; the kernel's arithmetic is also checked on the CPU, in Triton's interpreter (tests/test_triton_gemv.py)."""

import pytest
import torch

from core.loops.generation import generate
from core.models.loading import load_model
from tests.conftest import requires_cuda

pytestmark = [pytest.mark.cuda, requires_cuda]

SHAPES = [(6144, 4096, False), (4096, 14336, True), (1000, 3000, False), (77, 96, True)]


@pytest.mark.parametrize("n, k, act_mul", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_kernel_gives_the_library_product_and_repeats_bitwise(n, k, act_mul, dtype):
    from core.kernels.triton_gemv import launch_gemv

    generator = torch.Generator(device="cuda").manual_seed(0)
    weight = torch.randn(n, k, device="cuda", dtype=dtype, generator=generator) * k ** -0.5
    bias = torch.randn(n, device="cuda", dtype=dtype, generator=generator)
    x = torch.randn(1, 1, 2 * k if act_mul else k, device="cuda", dtype=dtype, generator=generator)
    if act_mul:
        gate, up = x.float().split(k, dim=-1)
        product_input = (torch.nn.functional.silu(gate) * up).to(dtype)
    else:
        product_input = x
    reference = torch.nn.functional.linear(product_input.double(), weight.double(), bias.double())
    first = launch_gemv(x, weight, bias, act_mul, lambda kernel: kernel)
    again = launch_gemv(x, weight, bias, act_mul, lambda kernel: kernel)
    assert first.shape == (1, 1, n) and first.dtype == dtype
    assert torch.equal(first, again)
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2
    assert (first.double() - reference).abs().max() <= tolerance * reference.abs().max()


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_compiled_steps_with_the_kernel_give_eager_tokens_and_the_loops_agree(monkeypatch, fast_tiny_compiles,
                                                                             dtype):
    import core.kernels.triton_gemv as triton_gemv

    torch._dynamo.reset()
    monkeypatch.setenv("SYNCSCOPE_DECODE_PRODUCTS", "triton")
    monkeypatch.setenv("SYNCSCOPE_DECODE_LAYER", "off")  # every product a Linear's (tests/test_cuda_layer.py: fused)
    traced = []
    launch = triton_gemv.launch_gemv
    monkeypatch.setattr(triton_gemv, "launch_gemv", lambda *a, **k: traced.append(a[1].shape) or launch(*a, **k))
    loaded = load_model("tiny-random", device="cuda", dtype=dtype)
    prompt = "Tell me about the sea and the ships on it."
    common = dict(cache="static", max_new_tokens=24, ignore_eos=True)
    eager = generate(loaded, prompt, loop="naive", **common)
    naive = generate(loaded, prompt, loop="naive", compile="step-graph", **common)
    piped = generate(loaded, prompt, loop="pipelined", compile="step-graph", lag=2, **common)
    assert naive.token_ids == piped.token_ids
    if dtype == "fp32":
        assert naive.token_ids == eager.token_ids
    widths = {tuple(shape) for shape in traced}
    config = loaded.model.config
    assert (config.vocab_size, config.hidden_size) in widths  # the output layer
    assert (config.hidden_size, config.intermediate_size) in widths  # the down projection, with its activation
