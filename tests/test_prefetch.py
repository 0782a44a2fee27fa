"""SYNCSCOPE_ATTENTION_PREFETCH and SYNCSCOPE_PRODUCT_PREFETCH on the CPU: how a kernel's programs share the L2
prefetch of the next weight, where nothing is asked, the kernels' PTX for Hopper (the prefetches after every load of
the program's own, its loads as wide as without), torch's analysis of what the kernels write, and the fused layer
handing each kernel the weight read after it only when asked. On a GPU: tests/test_cuda_layer.py."""

from __future__ import annotations

import importlib.util
import re
import warnings
from types import SimpleNamespace

import pytest
import torch

from core.kernels import decode_layer, prefetch
from core.kernels.prefetch import PREFETCH_ALIGN, prefetch_pieces
from core.kernels.triton_attention import PREFETCH_PIECES
from core.options import ATTENTION_PREFETCH_ENV, PRODUCT_PREFETCH_ENV

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs the triton package")


@pytest.fixture
def hopper(monkeypatch):
    """hopper_or_newer answers yes, and the kernels are not in Triton's interpreter."""
    monkeypatch.setattr(prefetch, "hopper_or_newer", lambda device: True)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


@pytest.mark.parametrize(("shape", "dtype", "programs", "limit"), [
    ((2048, 2048), torch.bfloat16, 64, None),      # Llama-1B's output projection, 8 KV heads x 8 splits
    ((4096, 4096), torch.bfloat16, 64, None),      # Llama-8B's
    ((300, 64), torch.bfloat16, 24, None),         # pieces past the end
    ((40, 10), torch.float32, 7, None),            # fewer elements than pieces
    ((16384, 2048), torch.bfloat16, 132, 8 << 20),  # Llama-1B's gate/up after its output projection: 8 MiB of 64
    ((8, 64), torch.bfloat16, 132, 8 << 20),        # a weight under the limit: all of it
])
def test_the_programs_pieces_cover_the_weight_in_aligned_pieces_inside_it(hopper, shape, dtype, programs, limit):
    weight = torch.empty(shape, dtype=dtype)
    piece, last = prefetch_pieces(weight, programs, PREFETCH_PIECES, limit)
    size = weight.element_size()
    wanted = weight.numel() if limit is None else min(weight.numel(), limit // size)
    assert piece > 0 and piece * size % PREFETCH_ALIGN == 0 and last == wanted - piece >= 0
    covered = torch.zeros(weight.numel(), dtype=torch.bool)
    for index in range(programs * PREFETCH_PIECES):  # what the kernel computes for each program and thread
        start = min(index * piece, last)
        assert start * size % PREFETCH_ALIGN == 0
        covered[start: start + piece] = True
    assert covered[:wanted].all() and not covered[wanted:].any()


def test_nothing_is_asked_without_a_weight_below_hopper_in_the_interpreter_or_unaligned(monkeypatch, hopper):
    weight = torch.empty(64, 64, dtype=torch.bfloat16)

    def asked(ahead: torch.Tensor | None) -> bool:
        return prefetch_pieces(ahead, 64, PREFETCH_PIECES) != (0, 0)

    assert asked(weight)
    assert not asked(None)
    assert not asked(weight.t())  # not contiguous
    assert not asked(torch.empty(3, dtype=torch.bfloat16))  # 6 bytes: no 16-byte pieces
    assert not asked(weight.view(-1)[1:4097])  # starts 2 bytes into an aligned buffer
    assert prefetch_pieces(weight, 64, PREFETCH_PIECES, limit_bytes=8) == (0, 0)  # under 16 bytes asked
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the interpreter runs no inline assembly
    assert not asked(weight)
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(prefetch, "hopper_or_newer", lambda device: False)  # no bulk prefetch before sm_90
    assert not asked(weight)


def attend_ptx(piece: int, head_dim: int = 64, split: int = 64) -> str:
    """The attend kernel as a Llama-1B layer launches it (or with `head_dim` and keys a program, `split`), compiled for
    sm_90, with pointers and strides aligned as a launch specializes them."""
    from core.kernels import triton_decode_kernels
    from tests.test_kernel_pdl import UNIT_STRIDES
    from tests.test_triton_layer import _compile_for_hopper

    pointers = {name: "*bf16" for name in ("q_ptr", "k_ptr", "v_ptr", "mask_ptr", "out_ptr", "new_k_ptr", "new_v_ptr",
                                           "cos_ptr", "sin_ptr", "ahead_ptr")}
    pointers.update(partial_ptr="*fp32", stats_ptr="*fp32", slot_ptr="*i64", semaphore_ptr="*i32")
    constants = {**UNIT_STRIDES, "SPLIT_LEN": split, "KV_HEADS": 8, "GROUP": 4, "GROUP_PAD": 16,
                 "HEAD_DIM": head_dim, "BLOCK_KEYS": 64, "HAS_MASK": True, "MASK_IS_BOOL": False, "SINGLE": False,
                 "PRECISION": "tf32", "UPCAST": False, "APPEND": False, "SPLITS_PAD": 8, "GROUP_POW2": 4, "PDL": 0,
                 "AHEAD_PIECE": piece, "AHEAD_PIECES": PREFETCH_PIECES}
    return _compile_for_hopper(triton_decode_kernels.attend, pointers, constants,
                               {"scale": "fp32", "ahead_last": "i64"}, aligned=True)


def _accesses(code: str) -> list[str]:
    return re.findall(r"\b(?:ld|st)\.global\S*", code)


@needs_triton
def test_attentions_prefetches_come_after_every_load_and_leave_the_loads_as_they_were():
    without, code = attend_ptx(0), attend_ptx(512)
    assert "cp.async.bulk.prefetch" not in without
    first = code.index("cp.async.bulk.prefetch.L2.global")
    assert not re.search(r"\bld\.global", code[first:])  # the program's own reads are all issued before
    assert not re.search(r"\bst\.global", code[:first])
    assert sorted(_accesses(code)) == sorted(_accesses(without))  # as many, as wide
    assert "mov.b32" in code[first - 200: first] and ", 1024;" in code[first - 200: first]  # 512 bf16: 1,024 bytes


@needs_triton
@pytest.mark.parametrize("variant", ["residual-advance", "norm", "norm-swiglu", "act-residual"])
def test_a_products_prefetch_comes_after_its_weights_and_before_its_store(variant):
    """The output projection (residual, cache length), gate/up (norm; or norm and swiglu), the down projection."""
    from tests.test_kernel_reads import gemv_ptx

    changes = {"residual-advance": {"RESIDUAL": True, "ADVANCE": True}, "norm": {"NORM": True},
               "norm-swiglu": {"NORM": True, "SWIGLU": True}, "act-residual": {"RESIDUAL": True, "ACT_MUL": True}}
    without, code = gemv_ptx(**changes[variant]), gemv_ptx(**changes[variant], AHEAD_PIECE=256)
    assert "cp.async.bulk.prefetch" not in without
    first = code.index("cp.async.bulk.prefetch.L2.global")
    after = re.findall(r"\bld\.global\S*", code[first:])
    assert after == (["ld.global.b64"] if variant == "residual-advance" else [])  # program 0's cache length only
    assert not re.search(r"\bst\.global", code[:first])
    weights = [access for access in _accesses(code) if "evict_first" in access]
    assert weights == [access for access in _accesses(without) if "evict_first" in access]  # as many, as wide


def _hopper_target(monkeypatch) -> None:
    import triton
    from triton.backends.compiler import GPUTarget

    class Hopper:
        def get_current_target(self) -> GPUTarget:
            return GPUTarget("cuda", 90, 32)

    monkeypatch.setattr(type(triton.runtime.driver), "active", property(lambda self: Hopper()))


def _written(kernel, arguments: dict) -> set[str]:
    from torch._higher_order_ops import triton_kernel_wrap

    accessed = triton_kernel_wrap.identify_accessed_tensors(kernel, arguments, {})
    return {dep.name for dep in accessed.read_writes.writes}


@needs_triton
def test_torchs_analysis_takes_the_next_weight_for_not_written(monkeypatch):
    """Inside a compile torch analyses what a user-defined kernel writes: a weight it took for written would be
    copied every step, or break the step's compile."""
    from core.kernels import triton_decode_kernels

    _hopper_target(monkeypatch)
    tensors = {name: torch.empty(16, dtype=torch.bfloat16) for name in (
        "q_ptr", "k_ptr", "v_ptr", "mask_ptr", "out_ptr", "new_k_ptr", "new_v_ptr", "cos_ptr", "sin_ptr", "ahead_ptr")}
    tensors.update(partial_ptr=torch.empty(16), stats_ptr=torch.empty(16),
                   slot_ptr=torch.empty(1, dtype=torch.int64), semaphore_ptr=torch.empty(4, dtype=torch.int32))
    strides = {name: 1 for name in ("sqb", "sqh", "sqd", "skb", "skh", "skl", "skd", "svb", "svh", "svl", "svd", "smb",
                                    "smh", "sml", "snkb", "snkh", "snkd", "snvb", "snvh", "snvd", "scb", "scd")}
    attend = {**tensors, **strides, "length": 512, "scale": 0.125, "ahead_last": 4096, "SPLIT_LEN": 64,
              "KV_HEADS": 8, "GROUP": 4, "GROUP_PAD": 16, "HEAD_DIM": 64, "BLOCK_KEYS": 64, "HAS_MASK": True,
              "MASK_IS_BOOL": False, "SINGLE": False, "PRECISION": "tf32", "UPCAST": False, "APPEND": False,
              "SPLITS_PAD": 8, "GROUP_POW2": 4, "PDL": 0, "AHEAD_PIECES": PREFETCH_PIECES}
    kernel = triton_decode_kernels.attend
    assert _written(kernel, {**attend, "AHEAD_PIECE": 512}) == _written(kernel, {**attend, "AHEAD_PIECE": 0}) == {
        "partial_ptr", "stats_ptr"}
    gemv, _ = decode_layer._kernels()
    tensors = {name: torch.empty(16, dtype=torch.bfloat16) for name in (
        "x_ptr", "w_ptr", "bias_ptr", "out_ptr", "norm_ptr", "residual_ptr", "ahead_ptr")}
    product = {**tensors, "length_ptr": torch.empty(1, dtype=torch.int64), "n": 2048, "w_row_stride": 2048,
               "eps": 1e-5, "ahead_first": 892, "ahead_last": 4096, "k": 2048, "HAS_BIAS": False, "ACT_MUL": False,
               "NORM": False, "RESIDUAL": True, "ADVANCE": True, "SWIGLU": False, "EVEN_N": True, "EVEN_K": True,
               "BLOCK_N": 2, "BLOCK_K": 1024, "PDL": 0, "AHEAD_PIECES": 256}
    assert _written(gemv, {**product, "AHEAD_PIECE": 512}) == _written(gemv, {**product, "AHEAD_PIECE": 0}) == {
        "out_ptr", "length_ptr"}


class RecordingOps:
    """The layer's operators as stand-ins of the right shapes, recording the weight each is asked to prefetch."""

    def __init__(self, heads: int, head_dim: int) -> None:
        self.heads, self.head_dim, self.ahead = heads, head_dim, {}

    def qkv_gemv(self, x, *rest):
        return torch.zeros(1, self.heads, 1, self.head_dim)

    def triton_decode_attention(self, query, keys, values, mask, scale, ahead):
        self.ahead["attention"] = ahead
        return torch.zeros_like(query)

    def gemv_add_advance(self, attended, weight, bias, residual, length, ahead):
        self.ahead["output"] = ahead
        return residual

    def gemv_norm(self, x, norm, eps, weight, bias, ahead):
        self.ahead["gate/up"] = ahead
        return torch.zeros(1, 1, 64)

    def gemv_add(self, x, weight, bias, act_mul, residual, ahead):
        self.ahead["down"] = ahead
        return residual


def _linear(rows: int, columns: int) -> SimpleNamespace:
    return SimpleNamespace(weight=torch.empty(rows, columns), bias=None)


@pytest.mark.parametrize(("attention", "products"), [("off", "off"), ("on", "off"), ("off", "on"), ("on", "on")])
def test_the_fused_layer_hands_each_kernel_the_weight_read_after_it_only_when_asked(monkeypatch, attention,
                                                                                    products):
    monkeypatch.setenv(ATTENTION_PREFETCH_ENV, attention)
    monkeypatch.setenv(PRODUCT_PREFETCH_ENV, products)
    norm = SimpleNamespace(weight=torch.ones(64), variance_epsilon=1e-5)
    following = torch.empty(96, 64)  # the next layer's q/k/v weight
    layer = SimpleNamespace(
        self_attn=SimpleNamespace(qkv_proj=_linear(96, 64), o_proj=_linear(64, 64), scaling=0.125,
                                  config=SimpleNamespace(num_attention_heads=4)),
        mlp=SimpleNamespace(gate_up_proj=_linear(64, 64), down_proj=_linear(64, 32)), input_layernorm=norm,
        post_attention_layernorm=norm, next_weight=(following,))
    cache = SimpleNamespace(keys=torch.zeros(1, 2, 8, 16), values=torch.zeros(1, 2, 8, 16),
                            cumulative_length=torch.zeros((), dtype=torch.long))
    ops = RecordingOps(heads=4, head_dim=16)
    hidden = torch.zeros(1, 1, 64)
    out = decode_layer.fused_step(layer, hidden, torch.ones(1, 1, 1, 8, dtype=torch.bool), cache,
                                  (torch.ones(1, 16), torch.zeros(1, 16)), ops)
    assert out is hidden
    assert ops.ahead["attention"] is (layer.self_attn.o_proj.weight if attention == "on" else None)
    on = products == "on"
    assert ops.ahead["output"] is (layer.mlp.gate_up_proj.weight if on else None)
    assert ops.ahead["gate/up"] is (layer.mlp.down_proj.weight if on else None)
    assert ops.ahead["down"] is (following if on else None)


def test_each_layer_is_linked_to_the_next_layers_qkv_weight_and_the_last_to_the_output_layer():
    from core.models import load_model

    model = load_model("tiny-random", device="cpu").model
    layers = model.model.layers
    assert len(layers) > 1
    decode_layer.link_next_weights(model)
    assert [layer.next_weight[0] for layer in layers[:-1]] == [layer.self_attn.qkv_proj.weight for layer in layers[1:]]
    assert layers[-1].next_weight[0] is model.lm_head.weight
    parameters = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    assert not any("next_weight" in name for name in parameters)  # not a parameter of the layer


def test_a_compiles_fake_tensors_get_the_same_pieces_as_real_ones(hopper):
    """Inside a compile the kernels are launched on fake tensors, which have no address."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    weight = torch.empty(2048, 2048, dtype=torch.bfloat16)
    real = prefetch_pieces(weight, 132, 256, 8 << 20)
    sixteen_bytes_in, two_bytes_in = weight.view(-1)[8:4104], weight.view(-1)[1:4097]
    with FakeTensorMode() as mode, warnings.catch_warnings():
        warnings.simplefilter("error")  # a fake tensor's address: a warning here, an error in later torch
        assert prefetch_pieces(mode.from_tensor(weight), 132, 256, 8 << 20) == real != (0, 0)
        assert prefetch_pieces(mode.from_tensor(sixteen_bytes_in), 132, 256) != (0, 0)
        assert prefetch_pieces(mode.from_tensor(two_bytes_in), 132, 256) == (0, 0)


@needs_triton
def test_the_operators_trace_with_fake_tensors_with_the_prefetches_asked(monkeypatch, hopper):
    """What a compile does with the operators on a Hopper GPU, with fake tensors: the launches ask for the prefetch
    (the pieces are worked out from the fake weights) and trace."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from core.kernels import triton_attention, triton_gemv
    from core.kernels.decode_layer import register_decode_layer_ops

    _hopper_target(monkeypatch)
    register_decode_layer_ops()
    triton_attention.register_triton_decode_attention()
    monkeypatch.setattr(triton_gemv, "_sm_count", lambda device: 132)
    asked = []
    for module in (triton_attention, triton_gemv):
        pieces = module.prefetch_pieces
        monkeypatch.setattr(module, "prefetch_pieces", lambda *args, pieces=pieces: asked.append(pieces(*args)) or
                            asked[-1])
    x, weight, ahead = torch.randn(1, 1, 64), torch.randn(64, 64), torch.randn(128, 64)
    query, keys = torch.randn(1, 4, 1, 16), torch.randn(1, 2, 16, 16)
    length = torch.tensor(3)

    def step(x, weight, ahead, query, keys, length):
        attended = torch.ops.syncscope.triton_decode_attention(query, keys, keys, None, 0.25, weight)
        return torch.ops.syncscope.gemv_add_advance(attended.reshape(1, 1, 64), weight, None, x, length, ahead)

    graph = make_fx(step, tracing_mode="fake")(x, weight, ahead, query, keys, length)
    assert "torch.ops.syncscope.gemv_add_advance.default" in graph.code
    assert len(asked) == 2 and all(piece > 0 for piece, _ in asked), asked
