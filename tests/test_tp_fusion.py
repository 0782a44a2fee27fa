"""core.kernels.tp_fusion: the decoder layers rewired so each all-reduce comes with its residual add and RMSNorm.

On the CPU the rewired model runs the op's PyTorch path (gloo, then the add and the norm), which must give exactly
the logits and tokens of the model as transformers shards it; that checks the rewiring (partial projections, the
packed residual and norm between layers, the final norm). The kernel itself runs on two GPUs (test_cuda_tp_fusion).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

import core.kernels.tp_fusion as tp_fusion
from core.kernels.tp_fusion import PackedRMSNorm, PartialLinear, why_not_fusable
from core.models.loading import load_model
from tests.helpers import on_two_ranks

PROMPT = "The quick brown fox"


def _rank(rank: int, init_method: str) -> dict:
    from core.kernels.tp_fusion import FusedAllReduceDecoderLayer, fuse_all_reduce
    from core.loops.generation import generate
    from core.parallel.tensor_parallel import init_tensor_parallel

    torch.set_num_threads(1)
    init_tensor_parallel(rank, 2, init_method, "cpu")
    loaded = load_model("tiny-random", device="cpu", tp=2)
    ids = loaded.tokenizer(PROMPT, return_tensors="pt").input_ids
    options = {"max_new_tokens": 10, "cache": "static", "ignore_eos": True}
    with torch.inference_mode():
        logits_before = loaded.model(ids).logits
    tokens_before = [generate(loaded, PROMPT, loop=loop, **options).token_ids for loop in ("naive", "pipelined")]
    parameters_before = loaded.num_parameters
    problem = fuse_all_reduce(loaded.model, symmetric=False)
    loaded.setups.clear()
    with torch.inference_mode():
        logits_after = loaded.model(ids).logits
    tokens_after = [generate(loaded, PROMPT, loop=loop, **options).token_ids for loop in ("naive", "pipelined")]
    layers = loaded.model.model.layers
    return {
        "problem": problem,
        "logits_equal": bool(torch.equal(logits_before, logits_after)),
        "tokens_before": tokens_before, "tokens_after": tokens_after,
        "layers_fused": all(isinstance(layer, FusedAllReduceDecoderLayer) for layer in layers),
        "partials": sum(isinstance(m, PartialLinear) for m in loaded.model.modules()),
        "final_norm_packed": isinstance(loaded.model.model.norm, PackedRMSNorm),
        "parameters": [parameters_before, loaded.num_parameters],  # the HBM floor's weights, counted whole
        "again": fuse_all_reduce(loaded.model, symmetric=False),
    }


@pytest.mark.slow
def test_the_rewired_model_gives_transformers_logits_and_tokens_on_two_cpu_ranks(tmp_path):
    result = on_two_ranks(_rank, tmp_path)
    assert result["problem"] is None and result["layers_fused"] and result["final_norm_packed"]
    assert result["partials"] == 2 * 2  # tiny-random has 2 layers: o_proj and down_proj each
    assert result["logits_equal"]
    assert result["parameters"][0] == result["parameters"][1]
    assert result["tokens_after"] == result["tokens_before"]
    assert result["tokens_before"][0] == result["tokens_before"][1]
    assert result["again"] == "already fused"


def test_a_model_without_tensor_parallelism_is_left_as_it_is_with_the_reason():
    loaded = load_model("tiny-random", device="cpu")
    assert why_not_fusable(loaded.model) == "not tensor-parallel"


def test_unsharded_projections_and_other_layouts_are_named():
    llama = load_model("tiny-random", device="cpu").model
    llama._device_mesh = object()  # as if sharded, but the projections are plain Linears
    assert why_not_fusable(llama) == "o_proj / down_proj are not sharded by rows without a bias"
    gpt2 = load_model("tiny-random:gpt2", device="cpu").model
    gpt2._device_mesh = object()
    assert why_not_fusable(gpt2) == "no decoder layers under model.model"
    gemma = load_model("tiny-random:gemma", device="cpu").model
    gemma._device_mesh = object()
    assert "is not one this fusion knows" in why_not_fusable(gemma)


def _hopper_ptx(kernel, scalars: dict, constants: dict) -> str:
    """Triton and ptxas build `kernel` for sm_90 without a GPU (Llama-8B's width, bf16, rank 1 of 2), with the
    16-byte alignment Triton assumes at run time of the tensors and of integers that are multiples of 16."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = kernel.arg_names
    pointers = {name: "*bf16" for name in ("partial_ptr", "residual_ptr", "weight_ptr", "out_ptr")}
    signature = {name: pointers.get(name) or scalars.get(name) or "constexpr" for name in names}
    aligned = [*pointers, "residual_row_stride", "slot_offset"]
    source = ASTSource(fn=kernel, signature=signature,
                       constexprs={(names.index(name),): value for name, value in constants.items()},
                       attrs={(names.index(name),): [["tt.divisibility", 16]] for name in aligned})
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8}).asm["ptx"]


_SCALARS = {"residual_row_stride": "i32", "buffer_ptrs": "i64", "signal_pad_ptrs": "i64", "slot_offset": "i32",
            "eps": "fp32"}
_CONSTANTS = {"HIDDEN": 4096, "BLOCK": 4096, "RANK": 1, "WORLD": 2}


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs the triton package")
def test_the_flag_kernel_compiles_for_hopper_with_its_barrier_in_ptx():
    """The meeting is the release / acquire compare-and-swap pair at system scope between two CTA barriers."""
    from core.kernels.tp_kernels import fused_all_reduce_add_rms_norm

    ptx = _hopper_ptx(fused_all_reduce_add_rms_norm, _SCALARS, {**_CONSTANTS, "ATOMIC_BARRIER": False})
    assert "atom.global.release.sys.cas.b32" in ptx and "atom.global.acquire.sys.cas.b32" in ptx
    assert ptx.count("bar.sync") >= 2


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs the triton package")
def test_the_push_kernel_compiles_for_hopper_with_wide_stores_and_volatile_polls():
    """No atomics: the row goes to the peer in 16-byte stores, and the own buffer is polled with 16-byte volatile
    loads (a load the compiler may not cache or hoist out of the loop), then marked empty in 16-byte stores."""
    from core.kernels.tp_kernels import fused_all_reduce_add_rms_norm_push

    ptx = _hopper_ptx(fused_all_reduce_add_rms_norm_push, _SCALARS, {**_CONSTANTS, "ROWS": 8})
    assert "atom." not in ptx
    assert "ld.volatile.global.v4.b32" in ptx and "ld.volatile.global.b16" not in ptx
    assert "st.global.b16" not in ptx and ptx.count("st.global.v4.b32") >= 4


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_an_empty_slot_holds_negative_zero_and_push_is_the_default_kernel(dtype):
    from core.kernels.tp_fusion import Workspace, _mark_empty

    buffer = torch.ones(64, dtype=dtype)
    _mark_empty(buffer)
    assert torch.equal(buffer, torch.zeros(64, dtype=dtype)) and torch.signbit(buffer).all()
    assert Workspace(None, 2, 0, 64, 2).barrier == "push"  # the `tp_barrier` switch's default (tests/test_tuning.py)


def test_a_fusion_that_fails_keeps_the_one_shot_all_reduce_and_says_why(monkeypatch):
    from core.kernels.tp_fusion import fuse_decoder_all_reduces
    from core.parallel.tensor_parallel import FUSED, ONE_SHOT

    def no_buffer(model, **_):
        raise RuntimeError("CUDA out of memory. Tried to allocate 40.00 MiB\nmore detail")

    monkeypatch.setattr(tp_fusion, "fuse_all_reduce", no_buffer)
    assert fuse_decoder_all_reduces(object(), ONE_SHOT) == (
        ONE_SHOT, "not fused with the norms: RuntimeError: CUDA out of memory. Tried to allocate 40.00 MiB")
    barriers = []
    monkeypatch.setattr(tp_fusion, "fuse_all_reduce", lambda model, barrier, **_: barriers.append(barrier))
    assert fuse_decoder_all_reduces(object(), ONE_SHOT) == (FUSED, "SYNCSCOPE_TP_BARRIER=push")
    assert fuse_decoder_all_reduces(object(), ONE_SHOT, barrier="asm") == (FUSED, "SYNCSCOPE_TP_BARRIER=asm")
    assert barriers == ["push", "asm"]  # the workspace's kernel learns the peers' rows are there the switch's way
    assert fuse_decoder_all_reduces(object(), ONE_SHOT, all_reduce="one-shot") == (ONE_SHOT, "")
    assert fuse_decoder_all_reduces(object(), "gloo") == ("gloo", "")
