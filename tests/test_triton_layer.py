"""core.kernels.decode_layer on the CPU: the fused decode step of a layer against transformers' layer in Triton's
interpreter (where the triton package is installed), its kernels compiled for Hopper, its operators traced as a
compile traces them (and what torch's analysis finds they write), and which layers it takes. On a GPU:
tests/test_cuda_layer.py."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from core.kernels import decode_layer
from core.kernels.decode_layer import DecodeLayer, fuse_decode_layers, why_not_fusable
from core.models.loading import load_model
from core.tuning import Tuning

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs the triton package")

# (hidden, heads, KV heads, head size, bias): Llama's layout; a width the column block does not divide, four query
# heads on one KV head and biases (Qwen2's q/k/v have them)
LAYER_CASES = [(64, 4, 2, 16, False), (80, 4, 1, 32, True)]
PROMPT = 5  # tokens in the cache before the step


def _tiny_model(
    hidden: int, heads: int, kv_heads: int, head_dim: int, bias: bool, dtype: torch.dtype, device: str = "cpu"
) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    from core.kernels.fusion import fuse_projections

    config = LlamaConfig(
        vocab_size=64,
        hidden_size=hidden,
        intermediate_size=96,
        num_hidden_layers=1,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=64,
        attention_bias=bias,
        rms_norm_eps=1e-5,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa").eval()
    with torch.no_grad():
        for module in model.modules():
            if hasattr(module, "variance_epsilon"):  # norms whose weights are not all ones
                module.weight.uniform_(0.5, 1.5)
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.normal_(0, 0.1)
    model.to(device=device, dtype=dtype)
    assert fuse_projections(model) == ["qkv", "gate_up"]
    return model


class DirectOps:
    """The layer's operators as plain launches of their kernels (in Triton's interpreter on the CPU)."""

    @staticmethod
    def qkv_gemv(x, norm, eps, weight, bias, cos, sin, keys, values, length, heads):
        return decode_layer.launch_qkv(x, norm, eps, weight, bias, cos, sin, keys, values, length, heads, _direct)

    @staticmethod
    def triton_decode_attention(query, keys, values, mask, scale):
        from core.kernels import triton_attention

        return triton_attention._launch(query, keys, values, mask, scale, _direct, triton_attention._kernels())

    @staticmethod
    def gemv_add_advance(x, weight, bias, residual, length):
        from core.kernels.triton_gemv import Around, launch_gemv

        return launch_gemv(x, weight, bias, False, _direct, around=Around(residual=residual, length=length))

    @staticmethod
    def gemv_norm(x, norm, eps, weight, bias):
        from core.kernels.triton_gemv import Around, launch_gemv

        return launch_gemv(x, weight, bias, False, _direct, around=Around(norm=norm, eps=eps))

    @staticmethod
    def gemv_add(x, weight, bias, act_mul, residual):
        from core.kernels.triton_gemv import Around, launch_gemv

        return launch_gemv(x, weight, bias, act_mul, _direct, around=Around(residual=residual))


def _direct(kernel):
    return kernel


def layer_errors(cases=LAYER_CASES, device: str = "cpu", ops=None) -> dict[str, list[float]]:
    """Per case and dtype, the fused step's largest differences from transformers' layer (output, relative to its
    largest entry; the cache's new key and value), whether the cache's length moved on by one in both, and whether
    the rest of the cache was left alone. On the CPU run it in a process of its own with TRITON_INTERPRET=1; `ops`
    are the step's operators (DirectOps by default)."""
    from transformers import StaticCache

    errors = {}
    for dtype in (torch.float32, torch.bfloat16):
        for case in cases:
            model = _tiny_model(*case, dtype, device)
            cache = StaticCache(config=model.config, max_cache_len=16)
            with torch.no_grad():
                model(torch.arange(1, PROMPT + 1, device=device)[None], cache=cache, use_cache=True)
                layer = model.model.layers[0]
                x = model.model.embed_tokens(torch.tensor([[7]], device=device))
                positions = torch.tensor([[PROMPT]], device=device)
                embeddings = model.model.rotary_emb(x, position_ids=positions)
                mask = (torch.arange(16, device=device) <= PROMPT)[None, None, None, :]
                reference_cache = copy.deepcopy(cache)
                expected = layer(
                    x,
                    attention_mask=mask,
                    position_ids=positions,
                    cache=reference_cache,
                    use_cache=True,
                    position_embeddings=embeddings,
                )
                ours, theirs = cache.layers[0], reference_cache.layers[0]
                before = ours.keys.clone(), ours.values.clone()
                layer.__class__ = DecodeLayer
                got = decode_layer.fused_step(layer, x, mask, ours, embeddings, ops or DirectOps)
            assert got.shape == expected.shape and got.dtype == dtype
            untouched = all(
                torch.equal(
                    torch.cat([a[:, :, :PROMPT], a[:, :, PROMPT + 1 :]], 2),
                    torch.cat([b[:, :, :PROMPT], b[:, :, PROMPT + 1 :]], 2),
                )
                for a, b in zip(before, (ours.keys, ours.values), strict=True)
            )
            output = ((got.double() - expected.double()).abs().max() / expected.double().abs().max()).item()
            key = (ours.keys[:, :, PROMPT].double() - theirs.keys[:, :, PROMPT].double()).abs().max().item()
            value = (ours.values[:, :, PROMPT].double() - theirs.values[:, :, PROMPT].double()).abs().max().item()
            moved = int(ours.cumulative_length) == int(theirs.cumulative_length) == PROMPT + 1
            errors[f"{dtype} {case}"] = [output, key, value, float(moved), float(untouched)]
    return errors


@pytest.mark.slow
@needs_triton
def test_the_fused_step_computes_transformers_layer_in_tritons_interpreter():
    script = "import json; from tests.test_triton_layer import layer_errors; print(json.dumps(layer_errors()))"
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TRITON_INTERPRET": "1"},
        cwd=Path(__file__).parent.parent,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    check_layer_errors(json.loads(result.stdout.splitlines()[-1]), LAYER_CASES)


def layer_errors_by_order() -> dict[str, dict[str, list[float]]]:
    """layer_errors with the kernels reading first and reading late (core.kernels.reads), by order."""
    from core.kernels.reads import ORDERS, reading

    by_order = {}
    for order in ORDERS:
        with reading(order):
            by_order[order] = layer_errors(LAYER_CASES[:1])
    return by_order


@pytest.mark.slow
@needs_triton
def test_the_fused_step_reading_late_computes_what_it_computes_reading_first():
    script = ("import json; from tests.test_triton_layer import layer_errors_by_order; "
              "print(json.dumps(layer_errors_by_order()))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TRITON_INTERPRET": "1"}, cwd=Path(__file__).parent.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    by_order = json.loads(result.stdout.splitlines()[-1])
    check_layer_errors(by_order["late"], LAYER_CASES[:1])
    assert by_order["late"] == by_order["first"]  # the same differences from transformers' layer, to the last bit


def check_layer_errors(errors: dict[str, list[float]], cases: list) -> None:
    assert len(errors) == 2 * len(cases)
    for name, (output, key, value, moved, untouched) in errors.items():
        assert moved == 1.0 and untouched == 1.0, name
        # fp32: sums in another order; bf16: the interpreter rounds by truncation, a few steps of bf16 through
        # the layer's products, norms and rotary
        assert output <= (1e-5 if "float32" in name else 2**-4), (name, output)
        assert max(key, value) <= (1e-5 if "float32" in name else 0.1), (name, key, value)


def _compile_for_hopper(
    kernel, pointers: dict[str, str], constants: dict, scalars: dict[str, str], aligned: bool = False
) -> str:
    """The kernel's PTX for an sm_90 target; `aligned`: every pointer and integer argument divisible by 16, as a
    launch specializes them for tensors and strides that are (so the loads can be vectorised)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = kernel.arg_names
    signature = {
        name: pointers.get(name) or scalars.get(name) or ("constexpr" if name in constants else "i32") for name in names
    }
    divisible = [["tt.divisibility", 16]]
    widened = ("i32", *pointers.values())
    attrs = {(i,): divisible for i, name in enumerate(names) if aligned and signature[name] in widened}
    source = ASTSource(
        fn=kernel,
        signature=signature,
        constexprs={(names.index(name),): value for name, value in constants.items()},
        attrs=attrs,
    )
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": 1})
    return compiled.asm["ptx"]


@needs_triton
@pytest.mark.parametrize("variant", ["norm", "residual-act", "residual-advance"])
def test_the_product_kernels_compile_for_hopper_with_what_a_launch_passes(variant):
    """Triton compiles for an sm_90 target without a GPU: type errors the interpreter lets through surface here."""
    gemv, _ = decode_layer._kernels()
    pointers = {name: "*bf16" for name in ("x_ptr", "w_ptr", "bias_ptr", "out_ptr", "norm_ptr", "residual_ptr")}
    pointers["length_ptr"] = "*i64"
    constants = {
        "k": 4096,
        "HAS_BIAS": False,
        "ACT_MUL": variant == "residual-act",
        "NORM": variant.startswith("norm"),
        "RESIDUAL": not variant.startswith("norm"),
        "ADVANCE": variant == "residual-advance",
        "EVEN_N": True,
        "EVEN_K": True,
        "BLOCK_N": 2,
        "BLOCK_K": 1024,
        "READS_FIRST": True,
    }
    ptx = _compile_for_hopper(gemv, pointers, constants, {"eps": "fp64"})  # a compile passes a Python float as fp64
    assert ".target sm_90" in ptx and f".entry {gemv.fn.__name__}" in ptx


@needs_triton
def test_the_qkv_kernel_compiles_for_hopper_with_what_a_launch_passes():
    _, qkv = decode_layer._kernels()
    pointers = {
        name: "*bf16"
        for name in ("x_ptr", "norm_ptr", "w_ptr", "bias_ptr", "cos_ptr", "sin_ptr", "q_ptr", "key_ptr", "value_ptr")
    }
    pointers["length_ptr"] = "*i64"
    constants = {
        "k": 4096,
        "HEADS": 32,
        "KV_HEADS": 8,
        "HEAD_DIM": 128,
        "HAS_BIAS": False,
        "EVEN_K": True,
        "BLOCK_P": 1,
        "BLOCK_K": 1024,
        "READS_FIRST": True,
    }
    ptx = _compile_for_hopper(qkv, pointers, constants, {"eps": "fp64"})
    assert ".target sm_90" in ptx and f".entry {qkv.fn.__name__}" in ptx


@needs_triton
def test_the_operators_trace_with_fake_tensors_as_inside_a_compile():
    from torch.fx.experimental.proxy_tensor import make_fx

    from core.kernels.decode_layer import register_decode_layer_ops

    register_decode_layer_ops()  # at import on a GPU build (again is harmless); asked for on a CPU one
    x, norm, weight = torch.randn(1, 1, 64), torch.ones(64), torch.randn(128, 64)
    keys, values, length = torch.zeros(1, 2, 16, 16), torch.zeros(1, 2, 16, 16), torch.tensor(3)
    cos, sin = torch.ones(1, 1, 16), torch.zeros(1, 1, 16)

    def step(x, norm, weight, cos, sin, keys, values, length):
        query = torch.ops.syncscope.qkv_gemv(x, norm, 1e-5, weight, None, cos, sin, keys, values, length, 4)
        out = torch.ops.syncscope.gemv_add_advance(query.reshape(1, 1, 64), weight[:64], None, x, length)
        return torch.ops.syncscope.gemv_add(
            torch.ops.syncscope.gemv_norm(out, norm, 1e-5, weight, None), weight[:64, :64], None, True, out
        )

    graph = make_fx(step, tracing_mode="fake")(x, norm, weight, cos, sin, keys, values, length)
    for name in ("qkv_gemv", "gemv_add_advance", "gemv_norm", "gemv_add"):
        assert f"torch.ops.syncscope.{name}.default" in graph.code


@needs_triton
def test_torchs_analysis_finds_what_each_kernel_writes(monkeypatch):
    """Inside a compile torch analyses what a user-defined kernel writes: a weight it took for written would be
    copied every step (or break the step's compile), a write it missed would be reordered."""
    import triton
    from torch._higher_order_ops import triton_kernel_wrap
    from triton.backends.compiler import GPUTarget

    from core.kernels import triton_decode_kernels

    class Hopper:
        def get_current_target(self) -> GPUTarget:
            return GPUTarget("cuda", 90, 32)

    monkeypatch.setattr(type(triton.runtime.driver), "active", property(lambda self: Hopper()))

    def tensor(dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        return torch.empty(16, dtype=dtype)

    def written(kernel, arguments: dict) -> set[str]:
        accessed = triton_kernel_wrap.identify_accessed_tensors(kernel, arguments, {})
        return {dep.name for dep in accessed.read_writes.writes}

    gemv, qkv = decode_layer._kernels()
    pointers = ("x_ptr", "w_ptr", "bias_ptr", "out_ptr", "norm_ptr", "residual_ptr")
    gemv_args = {**{name: tensor() for name in pointers}, "length_ptr": tensor(torch.int64), "n": 4096,
                 "w_row_stride": 2048, "eps": 1e-5, "k": 2048, "HAS_BIAS": False, "ACT_MUL": False, "NORM": True,
                 "RESIDUAL": True, "ADVANCE": True, "EVEN_N": True, "EVEN_K": True, "BLOCK_N": 2, "BLOCK_K": 1024,
                 "READS_FIRST": True}
    assert written(gemv, gemv_args) == {"out_ptr", "length_ptr"}
    assert written(gemv, {**gemv_args, "ADVANCE": False}) == {"out_ptr"}
    pointers = ("x_ptr", "norm_ptr", "w_ptr", "bias_ptr", "cos_ptr", "sin_ptr", "q_ptr", "key_ptr", "value_ptr")
    qkv_args = {**{name: tensor() for name in pointers}, "length_ptr": tensor(torch.int64), "w_row_stride": 2048,
                "cos_stride": 1, "cache_head_stride": 4096, "cache_slot_stride": 64, "eps": 1e-5, "k": 2048,
                "HEADS": 32, "KV_HEADS": 8, "HEAD_DIM": 64, "HAS_BIAS": False, "EVEN_K": True, "BLOCK_P": 2,
                "BLOCK_K": 1024, "READS_FIRST": True}
    assert written(qkv, qkv_args) == {"q_ptr", "key_ptr", "value_ptr"}
    attend_args = {**{name: tensor() for name in ("q_ptr", "k_ptr", "v_ptr", "mask_ptr", "out_ptr")},
                   "partial_ptr": tensor(torch.float32), "stats_ptr": tensor(torch.float32),
                   **dict.fromkeys(("sqb", "sqh", "sqd", "skb", "skh", "skl", "skd", "svb", "svh", "svl", "svd", "smb",
                                    "smh", "sml"), 1),
                   "length": 512, "scale": 0.125, "SPLIT_LEN": 64, "KV_HEADS": 8, "GROUP": 4, "GROUP_PAD": 16,
                   "HEAD_DIM": 64, "BLOCK_KEYS": 64, "HAS_MASK": True, "MASK_IS_BOOL": False, "SINGLE": False,
                   "PRECISION": "tf32", "UPCAST": False, "READS_FIRST": True}
    assert written(triton_decode_kernels.attend, attend_args) == {"partial_ptr", "stats_ptr"}
    assert written(triton_decode_kernels.attend, {**attend_args, "SINGLE": True}) == {"out_ptr"}
    combine_args = {"partial_ptr": tensor(torch.float32), "stats_ptr": tensor(torch.float32), "out_ptr": tensor(),
                    "splits": 5, "SPLITS_PAD": 8, "HEAD_DIM": 64}
    assert written(triton_decode_kernels.combine, combine_args) == {"out_ptr"}


def test_llama_layers_qualify_and_the_cpu_keeps_transformers_layers():
    loaded = load_model("tiny-random", device="cpu")
    assert not loaded.decode_layers and not any(isinstance(m, DecodeLayer) for m in loaded.model.modules())
    if importlib.util.find_spec("triton") is None:
        assert why_not_fusable(loaded.model) == "the triton package is not installed"
        return
    assert why_not_fusable(loaded.model) is None
    assert fuse_decode_layers(loaded.model) is None
    assert all(type(layer) is DecodeLayer for layer in loaded.model.model.layers)
    assert why_not_fusable(loaded.model) == "already fused"
    # outside a compile (and on the CPU) the layer is transformers' own
    assert torch.equal(
        loaded.model(torch.tensor([[1, 2, 3]])).logits,
        load_model("tiny-random", device="cpu").model(torch.tensor([[1, 2, 3]])).logits,
    )


def test_layers_it_does_not_know_are_left_with_the_reason():
    if importlib.util.find_spec("triton") is None:
        pytest.skip("needs the triton package")
    unfused = load_model("tiny-random", device="cpu", hf_modules=True).model
    assert "attention is not a fused one" in why_not_fusable(unfused)
    assert why_not_fusable(load_model("tiny-random", device="cpu").model, "off") == "SYNCSCOPE_DECODE_LAYER=off"


@pytest.mark.parametrize("switch", ["on", "off"])
def test_the_switch_is_read_once_when_the_model_is_prepared(monkeypatch, switch):
    """The `decode_layer` switch reaches prepare_for_decode with the tuning: off, no layer is fused and the model
    says why (on the CPU, where nothing is fused, nothing is said: here the model looks like a CUDA one)."""
    from core.models.loading import prepare_for_decode

    if importlib.util.find_spec("triton") is None:
        pytest.skip("needs the triton package")
    model = load_model("tiny-random", device="cpu", hf_modules=True).model
    monkeypatch.setattr(type(model), "device", property(lambda self: torch.device("cuda")))
    prepared = prepare_for_decode(model, Tuning(decode_layer=switch))
    assert prepared.decode_attention == "triton" and prepared.decode_layers is (switch == "on")
    fused = [type(layer) is DecodeLayer for layer in model.model.layers]
    assert fused == [switch == "on"] * len(fused)
    assert ("decoder layers not fused: SYNCSCOPE_DECODE_LAYER=off" in prepared.not_prepared) is (switch == "off")


def _loaded(decode_layers: bool, device: str, hidden_size: int, **switches) -> SimpleNamespace:
    """What step_facts reads of a LoadedModel."""
    config = SimpleNamespace(hidden_size=hidden_size)
    config.get_text_config = lambda: config
    return SimpleNamespace(device=torch.device(device), decode_layers=decode_layers, tuning=Tuning(**switches),
                           model=SimpleNamespace(config=config))


def test_the_kernels_read_late_from_llama_8bs_width_on_unless_the_switch_says_and_the_report_says_which():
    from core.report.build import step_facts

    def reads(hidden_size: int, mode: str = "step-graph", device: str = "cuda", **switches) -> str | None:
        return step_facts(_loaded(True, device, hidden_size, **switches), mode)["kernel_reads"]

    assert reads(2048) == "first"  # Llama-1B
    assert reads(4096) == "late"  # Llama-8B
    assert reads(4096, kernel_reads="first") == "first"
    assert reads(2048, kernel_reads="late") == "late"
    assert reads(4096, mode="off") is None and reads(4096, device="cpu") is None


def test_the_report_says_where_the_fused_layers_ran():
    from core.report.build import step_facts

    def ran(decode_layers: bool, mode: str, device: str = "cuda", **switches) -> str | None:
        return step_facts(_loaded(decode_layers, device, 2048, **switches), mode)["decode_layer"]

    assert ran(True, "step-graph") == "fused"
    assert ran(True, "reduce-overhead") == "off"  # the layers run transformers' code there
    assert ran(True, "off") is None
    assert ran(False, "step-graph", device="cpu") is None
    assert ran(False, "step-graph") == "off"
    assert ran(True, "step-graph", decode_products="inductor") == "off"  # the fused path needs the kernel's products
