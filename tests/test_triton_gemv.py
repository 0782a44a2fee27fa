"""core.kernels.triton_gemv and core.kernels.products on the CPU: the kernel's arithmetic in Triton's interpreter
(where the triton package is installed), its configuration table and rule, the operator traced as a compile traces
it, and which products the kernel is given. On a GPU: tests/test_cuda_gemv.py."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from core.kernels import products
from core.kernels.products import DecodeLinear, decode_product, gemv_takes, route_output_layer, traced_with
from core.kernels.triton_gemv import CONFIG_FILE, GemvConfig, config_for, heuristic_config, shape_key, takes
from core.models.loading import load_model

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs the triton package")

# (outputs, inputs, act_mul, bias, config): a tile that divides the shape, ragged rows and columns, the activation
CASES = [(64, 256, False, False, GemvConfig(4, 64, 4, 1)), (70, 200, False, True, GemvConfig(8, 64, 4, 1)),
         (64, 256, True, False, GemvConfig(4, 128, 4, 1)), (33, 96, True, True, None)]


def interpreter_errors() -> dict[str, list[float]]:
    """Run in a process of its own with TRITON_INTERPRET=1: per case and dtype, the largest difference from the
    product in fp64 (relative to the largest output), and whether a second launch gave the same bits."""
    from core.kernels.triton_gemv import launch_gemv

    generator = torch.Generator().manual_seed(0)
    errors = {}
    for dtype in (torch.float32, torch.bfloat16):
        for n, k, act_mul, bias, config in CASES:
            weight = torch.randn(n, k, generator=generator).to(dtype)
            x = torch.randn(1, 1, 2 * k if act_mul else k, generator=generator).to(dtype)
            b = torch.randn(n, generator=generator).to(dtype) if bias else None
            got = launch_gemv(x, weight, b, act_mul, lambda kernel: kernel, config)
            again = launch_gemv(x, weight, b, act_mul, lambda kernel: kernel, config)
            inputs = x.double()
            if act_mul:
                gate, up = x.float().split(k, dim=-1)
                inputs = (nn.functional.silu(gate) * up).to(dtype).double()
            expected = nn.functional.linear(inputs, weight.double(), None if b is None else b.double())
            assert got.shape == (1, 1, n) and got.dtype == dtype
            error = ((got.double() - expected).abs().max() / expected.abs().max()).item()
            errors[f"{dtype} {n}x{k} act={act_mul} bias={bias}"] = [error, float(torch.equal(got, again))]
    return errors


def interpreted() -> dict[str, dict[str, list[float]]]:
    """The interpreter's checks, in one process (TRITON_INTERPRET=1): it takes seconds to start."""
    return {"products": interpreter_errors()}


@pytest.fixture(scope="module")
def interpreted_results() -> dict[str, dict[str, list[float]]]:
    script = "import json; from tests.test_triton_gemv import interpreted; print(json.dumps(interpreted()))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TRITON_INTERPRET": "1"}, cwd=Path(__file__).parent.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.slow
@needs_triton
def test_the_kernel_computes_the_product_in_tritons_interpreter(interpreted_results):
    errors = interpreted_results["products"]
    assert len(errors) == 2 * len(CASES)
    for name, (error, repeated) in errors.items():
        # fp32: rounding of the sums; bf16: the interpreter rounds to bf16 by truncation (a GPU rounds to nearest),
        # the output and, with the activation, each of its inputs to the product: a few bf16 steps
        assert error <= (1e-6 if "float32" in name else 2 ** -6), (name, error)
        assert repeated == 1.0, name


@needs_triton
def test_the_operator_traces_with_fake_tensors_as_inside_a_compile():
    from torch.fx.experimental.proxy_tensor import make_fx

    from core.kernels.triton_gemv import register_gemv

    register_gemv()  # at import on a GPU build (again is harmless); asked for on a CPU one
    weight, x = torch.randn(96, 64), torch.randn(1, 1, 128)
    graph = make_fx(lambda x, w: torch.ops.syncscope.gemv(x, w, None, True), tracing_mode="fake")(x, weight)
    assert "torch.ops.syncscope.gemv.default" in graph.code


def test_the_table_holds_a_configuration_for_every_product_of_the_measured_shapes():
    table = json.loads(CONFIG_FILE.read_text())["devices"]["NVIDIA H200"]
    for n, k, act_mul in [(6144, 4096, False), (4096, 4096, False), (28672, 4096, False), (4096, 14336, True),
                          (128256, 4096, False), (3072, 2048, False), (2048, 8192, True), (128256, 2048, False)]:
        assert shape_key(n, k, act_mul) in table
        assert config_for(n, k, act_mul, "NVIDIA H200") == GemvConfig(**table[shape_key(n, k, act_mul)])
    for config in table.values():
        assert set(config) == {"block_n", "block_k", "num_warps", "num_stages"}


def test_a_shape_or_gpu_the_table_lacks_gets_the_rule():
    assert config_for(4096, 4096, False, "NVIDIA A100-SXM4-80GB") == heuristic_config(4096, 4096, False)
    assert config_for(576, 576, False, "NVIDIA H200") == GemvConfig(2, 1024, 8, 1)
    assert heuristic_config(4096, 14336, True) == GemvConfig(8, 512, 8, 1)
    assert heuristic_config(100, 96, False).block_k == 128  # never wider than the next power of 2 of the inputs


def test_a_part_of_a_layer_not_measured_gets_the_parts_rule_not_its_products_configuration(monkeypatch):
    from core.kernels import triton_gemv

    plain = {"block_n": 1, "block_k": 1024, "num_warps": 8, "num_stages": 1}
    norm = {"block_n": 4, "block_k": 512, "num_warps": 8, "num_stages": 1}
    table = {"NVIDIA H200": {"28672x4096": plain, "28672x4096-norm": norm, "6144x4096": plain}}
    monkeypatch.setattr(triton_gemv, "_table", lambda: table)
    assert shape_key(6144, 4096, False, "qkv") == "6144x4096-qkv"
    assert shape_key(64, 32, True, "norm") == "64x32-act-norm"
    assert config_for(28672, 4096, False, "NVIDIA H200", "norm") == GemvConfig(**norm)
    assert config_for(28672, 4096, False, "NVIDIA H200") == GemvConfig(**plain)
    assert config_for(6144, 4096, False, "NVIDIA H200", "qkv") == GemvConfig(4, 1024, 4, 3)
    assert config_for(6144, 4096, False, "NVIDIA A100", "qkv") == heuristic_config(6144, 4096, False, "qkv")
    assert config_for(2048, 2048, False, "NVIDIA A100", "norm") == GemvConfig(2, 2048, 8, 1)
    assert heuristic_config(100, 96, False, "norm").block_k == 128
    with pytest.raises(ValueError, match="no product part 'rope'"):
        config_for(6144, 4096, False, "NVIDIA H200", "rope")


def test_the_table_holds_the_fused_layers_parts_for_the_measured_shapes():
    table = json.loads(CONFIG_FILE.read_text())["devices"]["NVIDIA H200"]
    for n, k, part in [(28672, 4096, "norm"), (6144, 4096, "qkv"), (16384, 2048, "norm"), (3072, 2048, "qkv")]:
        assert config_for(n, k, False, "NVIDIA H200", part) == GemvConfig(**table[shape_key(n, k, False, part)])


def test_the_kernel_takes_one_row_of_a_matching_width_and_type():
    weight = torch.randn(8, 16)
    assert takes(torch.randn(1, 1, 16), weight) and takes(torch.randn(16), weight)
    assert takes(torch.randn(1, 1, 32), weight, act_mul=True) and not takes(torch.randn(1, 1, 16), weight, True)
    assert not takes(torch.randn(2, 1, 16), weight)  # two rows: the prefill or a batch
    assert not takes(torch.randn(1, 1, 16, dtype=torch.bfloat16), weight)
    assert not takes(torch.randn(1, 1, 16), weight.t().contiguous().t()[:, :16].t())  # columns not contiguous


def test_the_output_layer_is_routed_and_computes_what_it_did():
    loaded = load_model("tiny-random", device="cpu")
    head = loaded.model.lm_head
    assert type(head) is DecodeLinear and not route_output_layer(loaded.model)  # load_model routed it already
    x = torch.randn(1, 1, head.in_features)
    assert torch.equal(head(x), nn.functional.linear(x, head.weight))


def test_the_kernel_is_given_nothing_outside_a_compile_on_the_cpu_or_by_default(monkeypatch):
    linear = nn.Linear(16, 8, bias=False)
    x = torch.randn(1, 1, 16)
    with traced_with("triton", "library"):
        assert not gemv_takes(linear, x, act_mul=False)  # not compiling, and on the CPU
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    with traced_with("triton", "library"):
        assert gemv_takes(linear, x, act_mul=False) == hasattr(torch.ops.syncscope, "gemv")
        linear.register_forward_hook(lambda *args: None)
        assert not gemv_takes(linear, x, act_mul=False)  # a hook would be skipped
    assert not gemv_takes(nn.Linear(16, 8), x, act_mul=False)  # by default (no compile says), inductor's
    with traced_with("inductor", "library"):
        assert not gemv_takes(nn.Linear(16, 8), x, act_mul=False)
    assert torch.equal(decode_product(linear, x), linear(x))


def test_what_a_compile_is_traced_with_is_undone_when_it_ends():
    with traced_with("triton", "inductor"):
        with traced_with("inductor", "library"):
            assert (products._products, products.library_o_proj()) == ("inductor", True)
        assert (products._products, products.library_o_proj()) == ("triton", False)
    assert (products._products, products.library_o_proj()) == ("inductor", True)  # the defaults


def test_the_activation_is_fused_only_when_it_is_silu():
    from transformers.activations import ACT2FN

    assert products.silu(ACT2FN["silu"]) and products.silu(nn.SiLU())
    assert not products.silu(ACT2FN["gelu_pytorch_tanh"])



@needs_triton
@pytest.mark.parametrize("module", ["core.kernels.triton_gemv_kernel", "core.kernels.triton_decode_kernels",
                                    "core.kernels.tp_kernels"])
def test_no_kernel_source_has_a_backslash(module):
    """Inductor pastes a user-defined kernel's source, and every jit function it calls, into a ''' string of the code it
    generates; torch before 2.13 (2.11 on the H200) does not escape backslashes there (pytorch issue 183420), so a
    "\\n" in a kernel became a newline inside a string literal, and every step-graph compile failed to load the kernel
    (h200-2026-12-04/call1)."""
    import triton

    kernels = importlib.import_module(module)
    functions = [value for value in vars(kernels).values() if isinstance(value, triton.runtime.jit.JITFunction)]
    assert functions
    assert [f.__name__ for f in functions if "\\" in f.src] == []
