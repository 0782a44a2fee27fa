"""SYNCSCOPE_ATTENTION_PREFETCH on the CPU: how attention's programs share the output projection's weight, where
nothing is asked, the attend kernel's PTX for Hopper (the prefetches after every load, the loads as wide as
without), torch's analysis of what the kernel writes, and the fused layer passing the weight only when asked. On a GPU:
tests/test_cuda_layer.py."""

from __future__ import annotations

import importlib.util
import re
from types import SimpleNamespace

import pytest
import torch

from core.kernels import decode_layer, triton_attention
from core.kernels.triton_attention import PREFETCH_ALIGN, PREFETCH_PIECES, prefetch_pieces
from core.options import ATTENTION_PREFETCH_ENV

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs the triton package")


@pytest.fixture
def hopper(monkeypatch):
    """hopper_or_newer answers yes, and the kernels are not in Triton's interpreter."""
    monkeypatch.setattr(triton_attention, "hopper_or_newer", lambda device: True)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


@pytest.mark.parametrize(("shape", "dtype", "programs"), [
    ((2048, 2048), torch.bfloat16, 64),   # Llama-1B's output projection, 8 KV heads x 8 splits
    ((4096, 4096), torch.bfloat16, 64),   # Llama-8B's
    ((300, 64), torch.bfloat16, 24),      # pieces past the end
    ((40, 10), torch.float32, 7),         # fewer elements than pieces
])
def test_the_programs_pieces_cover_the_weight_in_aligned_pieces_inside_it(hopper, shape, dtype, programs):
    weight = torch.empty(shape, dtype=dtype)
    piece, last = prefetch_pieces(weight, programs)
    size = weight.element_size()
    assert piece > 0 and piece * size % PREFETCH_ALIGN == 0 and last == weight.numel() - piece >= 0
    covered = torch.zeros(weight.numel(), dtype=torch.bool)
    for index in range(programs * PREFETCH_PIECES):  # what the kernel computes for each program and thread
        start = min(index * piece, last)
        assert start * size % PREFETCH_ALIGN == 0
        covered[start: start + piece] = True
    assert covered.all()
    assert -(-weight.numel() // piece) <= programs * PREFETCH_PIECES  # nothing left for a next round


def test_nothing_is_asked_without_a_weight_below_hopper_in_the_interpreter_or_unaligned(monkeypatch, hopper):
    weight = torch.empty(64, 64, dtype=torch.bfloat16)
    assert prefetch_pieces(None, 64) == (0, 0)
    assert prefetch_pieces(weight.t(), 64) == (0, 0)  # not contiguous
    assert prefetch_pieces(torch.empty(3, dtype=torch.bfloat16), 64) == (0, 0)  # 6 bytes: no 16-byte pieces
    assert prefetch_pieces(weight.view(-1)[1:4097], 64) == (0, 0)  # starts 2 bytes into an aligned buffer
    assert prefetch_pieces(weight, 64) != (0, 0)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the interpreter runs no inline assembly
    assert prefetch_pieces(weight, 64) == (0, 0)
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(triton_attention, "hopper_or_newer", lambda device: False)  # no bulk prefetch before sm_90
    assert prefetch_pieces(weight, 64) == (0, 0)


def attend_ptx(piece: int) -> str:
    """The attend kernel as a Llama-1B layer launches it, compiled for sm_90, with pointers and strides aligned as a
    launch specializes them."""
    from core.kernels import triton_decode_kernels
    from tests.test_kernel_pdl import UNIT_STRIDES
    from tests.test_triton_layer import _compile_for_hopper

    pointers = {name: "*bf16" for name in ("q_ptr", "k_ptr", "v_ptr", "mask_ptr", "out_ptr", "new_k_ptr", "new_v_ptr",
                                           "cos_ptr", "sin_ptr", "ahead_ptr")}
    pointers.update(partial_ptr="*fp32", stats_ptr="*fp32", slot_ptr="*i64", semaphore_ptr="*i32")
    constants = {**UNIT_STRIDES, "SPLIT_LEN": 64, "KV_HEADS": 8, "GROUP": 4, "GROUP_PAD": 16, "HEAD_DIM": 64,
                 "BLOCK_KEYS": 64, "HAS_MASK": True, "MASK_IS_BOOL": False, "SINGLE": False, "PRECISION": "tf32",
                 "UPCAST": False, "APPEND": False, "SPLITS_PAD": 8, "GROUP_POW2": 4, "PDL": 0, "AHEAD_PIECE": piece,
                 "AHEAD_PIECES": PREFETCH_PIECES}
    return _compile_for_hopper(triton_decode_kernels.attend, pointers, constants,
                               {"scale": "fp32", "ahead_last": "i64"}, aligned=True)


def _accesses(code: str) -> list[str]:
    return re.findall(r"\b(?:ld|st)\.global\S*", code)


@needs_triton
def test_the_prefetches_come_after_every_load_and_leave_the_loads_as_they_were():
    without, code = attend_ptx(0), attend_ptx(512)
    assert "cp.async.bulk.prefetch" not in without
    first = code.index("cp.async.bulk.prefetch.L2.global")
    assert not re.search(r"\bld\.global", code[first:])  # the program's own reads are all issued before
    assert not re.search(r"\bst\.global", code[:first])
    assert sorted(_accesses(code)) == sorted(_accesses(without))  # as many, as wide
    assert "mov.b32" in code[first - 200: first] and ", 1024;" in code[first - 200: first]  # 512 bf16: 1,024 bytes


@needs_triton
def test_torchs_analysis_takes_the_weight_for_neither_written_nor_changed(monkeypatch):
    """Inside a compile torch analyses what a user-defined kernel writes: a weight it took for written would be
    copied every step, or break the step's compile."""
    import triton
    from torch._higher_order_ops import triton_kernel_wrap
    from triton.backends.compiler import GPUTarget

    from core.kernels import triton_decode_kernels

    class Hopper:
        def get_current_target(self) -> GPUTarget:
            return GPUTarget("cuda", 90, 32)

    monkeypatch.setattr(type(triton.runtime.driver), "active", property(lambda self: Hopper()))
    tensors = {name: torch.empty(16, dtype=torch.bfloat16) for name in (
        "q_ptr", "k_ptr", "v_ptr", "mask_ptr", "out_ptr", "new_k_ptr", "new_v_ptr", "cos_ptr", "sin_ptr", "ahead_ptr")}
    tensors.update(partial_ptr=torch.empty(16), stats_ptr=torch.empty(16),
                   slot_ptr=torch.empty(1, dtype=torch.int64), semaphore_ptr=torch.empty(4, dtype=torch.int32))
    strides = {name: 1 for name in ("sqb", "sqh", "sqd", "skb", "skh", "skl", "skd", "svb", "svh", "svl", "svd", "smb",
                                    "smh", "sml", "snkb", "snkh", "snkd", "snvb", "snvh", "snvd", "scb", "scd")}
    arguments = {**tensors, **strides, "length": 512, "scale": 0.125, "ahead_last": 4096, "SPLIT_LEN": 64,
                 "KV_HEADS": 8, "GROUP": 4, "GROUP_PAD": 16, "HEAD_DIM": 64, "BLOCK_KEYS": 64, "HAS_MASK": True,
                 "MASK_IS_BOOL": False, "SINGLE": False, "PRECISION": "tf32", "UPCAST": False, "APPEND": False,
                 "SPLITS_PAD": 8, "GROUP_POW2": 4, "PDL": 0, "AHEAD_PIECES": PREFETCH_PIECES}

    def written(piece: int) -> set[str]:
        accessed = triton_kernel_wrap.identify_accessed_tensors(
            triton_decode_kernels.attend, {**arguments, "AHEAD_PIECE": piece}, {})
        return {dep.name for dep in accessed.read_writes.writes}

    assert written(512) == written(0) == {"partial_ptr", "stats_ptr"}


class RecordingOps:
    """The layer's operators as stand-ins of the right shapes, recording what attention is asked to prefetch."""

    def __init__(self, heads: int, head_dim: int) -> None:
        self.heads, self.head_dim, self.ahead = heads, head_dim, "not called"

    def qkv_gemv(self, x, *rest):
        return torch.zeros(1, self.heads, 1, self.head_dim)

    def triton_decode_attention(self, query, keys, values, mask, scale, ahead):
        self.ahead = ahead
        return torch.zeros_like(query)

    def gemv_add_advance(self, attended, weight, bias, residual, length):
        return residual

    def gemv_norm(self, x, *rest):
        return torch.zeros(1, 1, 64)

    def gemv_norm_swiglu(self, x, *rest):
        return torch.zeros(1, 1, 32)

    def gemv_add(self, x, weight, bias, act_mul, residual):
        return residual


@pytest.mark.parametrize("choice", ["off", "on"])
def test_the_fused_layer_hands_attention_the_output_projection_only_when_asked(monkeypatch, choice):
    monkeypatch.setenv(ATTENTION_PREFETCH_ENV, choice)
    linear = SimpleNamespace(weight=torch.empty(64, 64), bias=None)
    o_proj = SimpleNamespace(weight=torch.empty(64, 64), bias=None)
    norm = SimpleNamespace(weight=torch.ones(64), variance_epsilon=1e-5)
    layer = SimpleNamespace(
        self_attn=SimpleNamespace(qkv_proj=linear, o_proj=o_proj, scaling=0.125,
                                  config=SimpleNamespace(num_attention_heads=4)),
        mlp=SimpleNamespace(gate_up_proj=linear, down_proj=linear), input_layernorm=norm,
        post_attention_layernorm=norm)
    cache = SimpleNamespace(keys=torch.zeros(1, 2, 8, 16), values=torch.zeros(1, 2, 8, 16),
                            cumulative_length=torch.zeros((), dtype=torch.long))
    ops = RecordingOps(heads=4, head_dim=16)
    hidden = torch.zeros(1, 1, 64)
    out = decode_layer.fused_step(layer, hidden, torch.ones(1, 1, 1, 8, dtype=torch.bool), cache,
                                  (torch.ones(1, 16), torch.zeros(1, 16)), ops)
    assert out is hidden
    assert ops.ahead is (o_proj.weight if choice == "on" else None)
