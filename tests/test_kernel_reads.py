"""The project's decode kernels read everything a program needs before its arithmetic: in their PTX for sm_90 no load
follows the product's reduction (the products) or the first matrix multiply (attention), so a program waits for
memory once, not once more at its end. The reads were moved, not the arithmetic, so results are unchanged (the
interpreter tests of tests/test_triton_layer.py and tests/test_triton_attention.py). Without spills, with or
without the next weight's prefetch: checked by ptxas, which Triton ships."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from core.kernels import decode_layer

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs the triton package")

GEMV_POINTERS = {**{name: "*bf16" for name in ("x_ptr", "w_ptr", "bias_ptr", "out_ptr", "norm_ptr", "residual_ptr")},
                 "length_ptr": "*i64", "ahead_ptr": "*bf16"}
GEMV_VARIANTS = {  # each place the decode step uses the product kernel
    "residual": {"RESIDUAL": True},
    "residual-bias": {"RESIDUAL": True, "HAS_BIAS": True},
    "act-residual": {"RESIDUAL": True, "ACT_MUL": True},
    "norm": {"NORM": True},
    "norm-swiglu-bias": {"NORM": True, "SWIGLU": True, "HAS_BIAS": True},
}


def gemv_ptx(**changes) -> str:
    from tests.test_triton_layer import _compile_for_hopper

    gemv, _ = decode_layer._kernels()
    constants = {"k": 2048, "HAS_BIAS": False, "ACT_MUL": False, "NORM": False, "RESIDUAL": False, "ADVANCE": False,
                 "SWIGLU": False, "EVEN_N": True, "EVEN_K": True, "BLOCK_N": 2, "BLOCK_K": 1024, "PDL": 0,
                 "AHEAD_PIECE": 0, "AHEAD_PIECES": 256, **changes}
    return _compile_for_hopper(gemv, GEMV_POINTERS, constants, {"eps": "fp64", "ahead_last": "i64"}, aligned=True)


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
    from tests.test_kernel_pdl import kernels_ptx_for_hopper

    assert loads_after_the_last_shuffle(kernels_ptx_for_hopper(0, aligned=True)["qkv_gemv"]) == 0


@needs_triton
@pytest.mark.parametrize("piece", [0, 512])
def test_attention_reads_its_keys_values_and_mask_before_its_first_product(piece):
    from tests.test_prefetch import attend_ptx

    code = attend_ptx(piece)
    first = code.index("mma.sync")
    assert len(re.findall(r"\bld\.global", code[:first])) >= 4  # the query, keys, values and mask
    assert not re.search(r"\bld\.global", code[first:])


def _ptxas() -> Path | None:
    spec = importlib.util.find_spec("triton")
    if spec is None or spec.origin is None:
        return None
    binary = Path(spec.origin).parent / "backends" / "nvidia" / "bin" / "ptxas"
    return binary if binary.exists() else None


@needs_triton
@pytest.mark.skipif(_ptxas() is None, reason="needs the ptxas that Triton ships")
def test_reading_early_spills_no_register(tmp_path):
    from tests.test_kernel_pdl import kernels_ptx_for_hopper
    from tests.test_prefetch import attend_ptx

    kernels = {"attend": attend_ptx(512), "attend-8b-long": attend_ptx(2048, head_dim=128, split=512),
               "qkv_gemv": kernels_ptx_for_hopper(0, aligned=True)["qkv_gemv"],
               **{f"gemv-{name}": gemv_ptx(**changes) for name, changes in GEMV_VARIANTS.items()},
               **{f"gemv-{name}-prefetch": gemv_ptx(**changes, AHEAD_PIECE=256)
                  for name, changes in GEMV_VARIANTS.items()}}
    for name, code in kernels.items():
        source = tmp_path / f"{name}.ptx"
        source.write_text(code)
        info = subprocess.run([str(_ptxas()), "-arch=sm_90a", "-v", str(source), "-o", str(tmp_path / "out.cubin")],
                              capture_output=True, text=True, timeout=120)
        assert info.returncode == 0, info.stderr[-2000:]
        assert "0 bytes spill stores" in info.stderr + info.stdout, (name, info.stderr[-2000:])
