"""The project's decode kernels read everything a program needs before its arithmetic: in their PTX for sm_90 no load
follows the product's reduction (the products) or the first matrix multiply (attention), so a program waits for
memory once, not once more at its end. The reads were moved, not the arithmetic, so results are unchanged (the
interpreter tests of tests/test_triton_layer.py and tests/test_triton_attention.py). Without spills: checked by ptxas,
which Triton ships."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from core.kernels import decode_layer

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs the triton package")

GEMV_POINTERS = {**{name: "*bf16" for name in ("x_ptr", "w_ptr", "bias_ptr", "out_ptr", "norm_ptr", "residual_ptr")},
                 "length_ptr": "*i64"}
GEMV_VARIANTS = {  # each place the decode step uses the product kernel
    "residual": {"RESIDUAL": True},
    "residual-bias": {"RESIDUAL": True, "HAS_BIAS": True},
    "act-residual": {"RESIDUAL": True, "ACT_MUL": True},
    "norm": {"NORM": True},
    "norm-bias": {"NORM": True, "HAS_BIAS": True},
}
# Strides of 1, which a launch passes as constants (Triton specializes an integer argument equal to 1): the rows the
# kernels read along are contiguous, so their loads can be wide
UNIT_STRIDES = {"sqd": 1, "skd": 1, "svd": 1}


def gemv_ptx(reads_first: bool = True, **changes) -> str:
    from tests.test_triton_layer import _compile_for_hopper

    gemv, _ = decode_layer._kernels()
    constants = {"k": 2048, "HAS_BIAS": False, "ACT_MUL": False, "NORM": False, "RESIDUAL": False, "ADVANCE": False,
                 "EVEN_N": True, "EVEN_K": True, "BLOCK_N": 2, "BLOCK_K": 1024, "READS_FIRST": reads_first,
                 **changes}
    return _compile_for_hopper(gemv, GEMV_POINTERS, constants, {"eps": "fp64"}, aligned=True)


def qkv_ptx(reads_first: bool = True) -> str:
    """The q/k/v kernel as a Llama-1B layer launches it, compiled for sm_90."""
    from tests.test_triton_layer import _compile_for_hopper

    _, qkv = decode_layer._kernels()
    pointers = {name: "*bf16" for name in ("x_ptr", "norm_ptr", "w_ptr", "bias_ptr", "cos_ptr", "sin_ptr", "q_ptr",
                                          "key_ptr", "value_ptr")}
    return _compile_for_hopper(
        qkv, {**pointers, "length_ptr": "*i64"},
        {"cos_stride": 1, "k": 2048, "HEADS": 32, "KV_HEADS": 8, "HEAD_DIM": 64, "HAS_BIAS": False, "EVEN_K": True,
         "BLOCK_P": 2, "BLOCK_K": 1024, "READS_FIRST": reads_first}, {"eps": "fp64"}, aligned=True)


def attend_ptx(head_dim: int = 64, split: int = 64, reads_first: bool = True) -> str:
    """The attend kernel as a Llama-1B layer launches it (or with `head_dim` and keys a program, `split`), compiled for
    sm_90, with pointers and strides aligned as a launch specializes them."""
    from core.kernels import triton_decode_kernels
    from tests.test_triton_layer import _compile_for_hopper

    pointers = {name: "*bf16" for name in ("q_ptr", "k_ptr", "v_ptr", "mask_ptr", "out_ptr")}
    pointers.update(partial_ptr="*fp32", stats_ptr="*fp32")
    constants = {**UNIT_STRIDES, "SPLIT_LEN": split, "KV_HEADS": 8, "GROUP": 4, "GROUP_PAD": 16,
                 "HEAD_DIM": head_dim, "BLOCK_KEYS": 64, "HAS_MASK": True, "MASK_IS_BOOL": False, "SINGLE": False,
                 "PRECISION": "tf32", "UPCAST": False, "READS_FIRST": reads_first}
    return _compile_for_hopper(triton_decode_kernels.attend, pointers, constants, {"scale": "fp32"}, aligned=True)


def combine_ptx() -> str:
    from core.kernels import triton_decode_kernels
    from tests.test_triton_layer import _compile_for_hopper

    return _compile_for_hopper(triton_decode_kernels.combine,
                               {"partial_ptr": "*fp32", "stats_ptr": "*fp32", "out_ptr": "*bf16"},
                               {"SPLITS_PAD": 8, "HEAD_DIM": 64}, {}, aligned=True)


def loads_after_the_last_shuffle(code: str) -> int:
    """Global loads after the kernel's last warp shuffle, the end of its last reduction."""
    last = max(match.start() for match in re.finditer(r"shfl\.sync", code))
    return len(re.findall(r"\bld\.global", code[last:]))


@needs_triton
@pytest.mark.parametrize("variant", list(GEMV_VARIANTS))
def test_no_product_reads_memory_after_its_sum(variant):
    assert loads_after_the_last_shuffle(gemv_ptx(**GEMV_VARIANTS[variant])) == 0


@needs_triton
def test_the_qkv_kernel_reads_its_bias_rotary_and_cache_length_before_its_sum():
    assert loads_after_the_last_shuffle(qkv_ptx()) == 0


@needs_triton
def test_attention_reads_its_keys_values_and_mask_before_its_first_product():
    code = attend_ptx()
    first = code.index("mma.sync")
    assert len(re.findall(r"\bld\.global", code[:first])) >= 4  # the query, keys, values and mask
    assert not re.search(r"\bld\.global", code[first:])


@needs_triton
def test_reading_late_reads_after_the_arithmetic_as_before_8725825():
    # the `kernel_reads` switch's other order (core.kernels.reads): each read where it is used
    assert loads_after_the_last_shuffle(gemv_ptx(reads_first=False, **GEMV_VARIANTS["residual-bias"])) >= 2
    assert loads_after_the_last_shuffle(qkv_ptx(reads_first=False)) >= 1
    code = attend_ptx(reads_first=False)
    assert re.search(r"\bld\.global", code[code.index("mma.sync"):])


def _ptxas() -> Path | None:
    spec = importlib.util.find_spec("triton")
    if spec is None or spec.origin is None:
        return None
    binary = Path(spec.origin).parent / "backends" / "nvidia" / "bin" / "ptxas"
    return binary if binary.exists() else None


@needs_triton
@pytest.mark.skipif(_ptxas() is None, reason="needs the ptxas that Triton ships")
def test_reading_early_spills_no_register(tmp_path):
    kernels = {"attend": attend_ptx(), "attend-8b-long": attend_ptx(head_dim=128, split=512), "qkv_gemv": qkv_ptx(),
               "combine": combine_ptx(), "attend-late": attend_ptx(reads_first=False),
               "attend-8b-long-late": attend_ptx(head_dim=128, split=512, reads_first=False),
               "qkv_gemv-late": qkv_ptx(reads_first=False),
               **{f"gemv-{name}": gemv_ptx(**changes) for name, changes in GEMV_VARIANTS.items()},
               **{f"gemv-{name}-late": gemv_ptx(False, **changes) for name, changes in GEMV_VARIANTS.items()}}
    for name, code in kernels.items():
        source = tmp_path / f"{name}.ptx"
        source.write_text(code)
        info = subprocess.run([str(_ptxas()), "-arch=sm_90a", "-v", str(source), "-o", str(tmp_path / "out.cubin")],
                              capture_output=True, text=True, timeout=120)
        assert info.returncode == 0, info.stderr[-2000:]
        assert "0 bytes spill stores" in info.stderr + info.stdout, (name, info.stderr[-2000:])
