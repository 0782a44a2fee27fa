"""SYNCSCOPE_KERNEL_PDL on the CPU: the choice, the `PDL` flag and launch option each of the project's kernels gets
(with the GPU check stubbed), inductor's generated source given `launch_pdl`, the kernels' PTX for Hopper, and the
interpreter falling back to today's kernels. On a Hopper GPU: tests/test_cuda_kernel_pdl.py."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from core.kernels import pdl
from core.kernels.pdl import (
    KERNEL_PDL_ENV,
    kernel_pdl_arguments,
    kernel_pdl_choice,
    kernel_pdl_in_effect,
    kernel_pdl_level,
    with_launch_pdl,
)
from core.options import STEP_GRAPH, check_tuning_environment

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs the triton package")


@pytest.fixture
def hopper(monkeypatch):
    """supports_pdl answers yes, and the kernels are not in Triton's interpreter."""
    monkeypatch.setattr(pdl, "supports_pdl", lambda device: True)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def test_off_by_default_and_a_typo_is_refused(monkeypatch):
    monkeypatch.delenv(KERNEL_PDL_ENV, raising=False)
    assert kernel_pdl_choice() == "off"
    monkeypatch.setenv(KERNEL_PDL_ENV, " Prefetch ")
    assert kernel_pdl_choice() == "prefetch"
    with pytest.raises(ValueError, match="SYNCSCOPE_KERNEL_PDL must be one of off, wait, prefetch, got 'always'"):
        check_tuning_environment({KERNEL_PDL_ENV: "always"})


@pytest.mark.parametrize(("choice", "level"), [("off", 0), ("wait", 1), ("prefetch", 2)])
def test_the_level_follows_the_choice_where_pdl_works(monkeypatch, hopper, choice, level):
    monkeypatch.setenv(KERNEL_PDL_ENV, choice)
    assert kernel_pdl_level("cuda") == level
    assert kernel_pdl_arguments("cuda", traced=False) == {"PDL": level, **({"launch_pdl": True} if level else {})}
    assert kernel_pdl_in_effect("cuda", STEP_GRAPH) == choice
    assert kernel_pdl_in_effect("cuda", "off") == "off"


def test_the_flag_stays_off_on_the_cpu_below_hopper_and_in_the_interpreter(monkeypatch):
    monkeypatch.setenv(KERNEL_PDL_ENV, "prefetch")
    assert kernel_pdl_level("cpu") == 0 and kernel_pdl_arguments("cpu", traced=False) == {"PDL": 0}
    assert kernel_pdl_in_effect("cpu", STEP_GRAPH) == "unsupported"
    monkeypatch.setattr(pdl, "supports_pdl", lambda device: False)  # an Ampere GPU
    assert kernel_pdl_level("cuda") == 0
    monkeypatch.setattr(pdl, "supports_pdl", lambda device: True)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert kernel_pdl_level("cuda") == 0


class FakeKernel:
    """Stands in for one of the kernels: a launch records its keywords instead of running it."""

    def __init__(self, name: str, calls: list) -> None:
        self.name, self.calls = name, calls

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((self.name, kwargs))


class Traced:
    """What `wrap_triton` gives inside a compile's trace: not the kernel itself."""

    def __init__(self, kernel: FakeKernel) -> None:
        self.kernel = kernel

    def __getitem__(self, grid):
        return self.kernel[grid]


def _launch_every_kernel(monkeypatch, launch) -> list:
    from core.kernels import decode_layer, triton_attention, triton_gemv

    calls: list = []
    gemv, qkv, attend, combine = (FakeKernel(name, calls) for name in ("gemv", "qkv_gemv", "attend", "combine"))
    monkeypatch.setattr(triton_gemv, "_kernel", lambda: gemv)
    monkeypatch.setattr(decode_layer, "_kernels", lambda: (gemv, qkv))
    x = torch.randn(1, 1, 64)
    triton_gemv.launch_gemv(x, torch.randn(128, 64), None, False, launch)
    keys, values = torch.zeros(1, 2, 128, 16), torch.zeros(1, 2, 128, 16)
    decode_layer.launch_qkv(x, torch.ones(64), 1e-5, torch.randn(128, 64), None, torch.ones(16), torch.zeros(16),
                            keys, values, torch.tensor(3), 4, launch)
    triton_attention._launch(torch.randn(1, 4, 1, 16), keys, values, None, 0.25, launch, (attend, combine),
                             split_keys=64)
    assert [name for name, _ in calls] == ["gemv", "qkv_gemv", "attend", "combine"]
    return calls


@pytest.mark.parametrize("traced", [False, True])
def test_each_kernel_gets_the_flag_and_where_triton_launches_it_the_option(monkeypatch, hopper, traced):
    monkeypatch.setattr(pdl, "install_user_kernel_pdl", lambda: None)
    for choice, level in (("wait", 1), ("prefetch", 2), ("off", 0)):
        monkeypatch.setenv(KERNEL_PDL_ENV, choice)
        for name, kwargs in _launch_every_kernel(monkeypatch, Traced if traced else lambda kernel: kernel):
            assert kwargs["PDL"] == level, (choice, name)
            assert kwargs.get("launch_pdl", False) is (bool(level) and not traced), (choice, name)


def test_on_the_cpu_every_kernel_is_launched_as_today(monkeypatch):
    monkeypatch.setenv(KERNEL_PDL_ENV, "prefetch")
    calls = _launch_every_kernel(monkeypatch, lambda kernel: kernel)
    assert all(kwargs["PDL"] == 0 and "launch_pdl" not in kwargs for _, kwargs in calls)


def test_a_traced_launch_installs_the_source_edit(monkeypatch, hopper):
    installed = []
    monkeypatch.setattr(pdl, "install_user_kernel_pdl", lambda: installed.append(True))
    monkeypatch.setenv(KERNEL_PDL_ENV, "wait")
    assert kernel_pdl_arguments("cuda", traced=True) == {"PDL": 1} and installed
    monkeypatch.setenv(KERNEL_PDL_ENV, "off")
    installed.clear()
    assert kernel_pdl_arguments("cuda", traced=True) == {"PDL": 0} and not installed


def test_inductors_source_for_a_user_kernel_gets_launch_pdl():
    source = "async_compile.triton('gemv_0', '''\n@triton_heuristics.user_autotune(\n    configs=[],\n" \
             "    triton_meta={'signature': {'x_ptr': '*bf16'}, 'constants': {'PDL': 1}},\n)\n'''"
    edited = with_launch_pdl(source)
    assert "triton_meta={'launch_pdl': True, 'signature': {'x_ptr': '*bf16'}" in edited
    assert edited.replace("'launch_pdl': True, ", "") == source
    with pytest.raises(RuntimeError, match="SYNCSCOPE_KERNEL_PDL=off"):
        with_launch_pdl("async_compile.triton('gemv_0', '''...''')")


def test_only_kernels_launched_with_pdl_have_their_source_edited(monkeypatch):
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    def original(self, kernel, configs, kwargs, *rest):
        self.define_kernel("k", "triton_meta={'signature': {}}")
        return "name"

    monkeypatch.setattr(PythonWrapperCodegen, "define_user_defined_triton_kernel", original)
    pdl.install_user_kernel_pdl()
    installed = PythonWrapperCodegen.define_user_defined_triton_kernel
    pdl.install_user_kernel_pdl()
    assert PythonWrapperCodegen.define_user_defined_triton_kernel is installed and installed._syncscope_pdl

    class Wrapper:
        def __init__(self) -> None:
            self.sources: list[str] = []

        def define_kernel(self, name, body, *rest):
            self.sources.append(body)

    wrapper = Wrapper()
    for level in (0, 1, 2):
        assert installed(wrapper, None, [], {"x_ptr": None, "PDL": level}, [], [], [[1, 1, 1]], None) == "name"
    edited = "triton_meta={'launch_pdl': True, 'signature': {}}"
    assert wrapper.sources == ["triton_meta={'signature': {}}", edited, edited]
    assert "define_kernel" not in vars(wrapper)  # the edit lasts one kernel's definition


# Strides of 1, which a launch passes as constants (Triton specializes an integer argument equal to 1): the rows the
# kernels read along are contiguous, so their loads can be wide
UNIT_STRIDES = {"sqd": 1, "skd": 1, "svd": 1, "snkd": 1, "snvd": 1, "scd": 1}


def kernels_ptx_for_hopper(level: int, aligned: bool = False) -> dict[str, str]:
    """Each of the project's kernels at PDL `level`, compiled for an sm_90 target (tests.test_triton_layer)."""
    from functools import partial

    from core.kernels import decode_layer, triton_decode_kernels
    from tests import test_triton_layer

    _compile_for_hopper = partial(test_triton_layer._compile_for_hopper, aligned=aligned)
    gemv, qkv = decode_layer._kernels()
    pointers = {name: "*bf16" for name in ("x_ptr", "w_ptr", "bias_ptr", "out_ptr", "norm_ptr", "residual_ptr")}
    ptx = {}
    for name, swiglu in (("gemv", False), ("gemv-swiglu", True)):
        ptx[name] = _compile_for_hopper(
            gemv, {**pointers, "length_ptr": "*i64", "ahead_ptr": "*bf16"},
            {"k": 2048, "HAS_BIAS": False, "ACT_MUL": False, "NORM": True, "RESIDUAL": False, "ADVANCE": False,
             "SWIGLU": swiglu, "EVEN_N": True, "EVEN_K": True, "BLOCK_N": 2, "BLOCK_K": 1024, "PDL": level,
             "AHEAD_PIECE": 0, "AHEAD_PIECES": 256},
            {"eps": "fp64", "ahead_last": "i64"})
    pointers = {name: "*bf16" for name in ("x_ptr", "norm_ptr", "w_ptr", "bias_ptr", "cos_ptr", "sin_ptr", "q_ptr",
                                          "key_ptr", "value_ptr")}
    ptx["qkv_gemv"] = _compile_for_hopper(
        qkv, {**pointers, "length_ptr": "*i64"},
        {"cos_stride": 1, "k": 2048, "HEADS": 32, "KV_HEADS": 8, "HEAD_DIM": 64, "HAS_BIAS": False, "EVEN_K": True,
         "BLOCK_P": 2, "BLOCK_K": 1024, "PDL": level}, {"eps": "fp64"})
    ptx["combine"] = _compile_for_hopper(triton_decode_kernels.combine,
                                         {"partial_ptr": "*fp32", "stats_ptr": "*fp32", "out_ptr": "*bf16"},
                                         {"SPLITS_PAD": 8, "HEAD_DIM": 64, "PDL": level}, {})
    attend_pointers = {name: "*bf16" for name in ("q_ptr", "k_ptr", "v_ptr", "mask_ptr", "out_ptr", "new_k_ptr",
                                                  "new_v_ptr", "cos_ptr", "sin_ptr", "ahead_ptr")}
    attend_pointers.update(partial_ptr="*fp32", stats_ptr="*fp32", slot_ptr="*i64", semaphore_ptr="*i32")
    for append in (False, True):
        ptx[f"attend{'-append' * append}"] = _compile_for_hopper(
            triton_decode_kernels.attend, attend_pointers,
            {**UNIT_STRIDES, "SPLIT_LEN": 64, "KV_HEADS": 8, "GROUP": 4, "GROUP_PAD": 16, "HEAD_DIM": 64,
             "BLOCK_KEYS": 64, "HAS_MASK": False, "MASK_IS_BOOL": False, "SINGLE": False, "PRECISION": "tf32",
             "UPCAST": False, "APPEND": append, "SPLITS_PAD": 8, "GROUP_POW2": 4, "PDL": level, "AHEAD_PIECE": 0,
             "AHEAD_PIECES": 128}, {"scale": "fp32", "ahead_last": "i64"})
    return ptx


@needs_triton
@pytest.mark.parametrize("level", [0, 1, 2])
def test_the_kernels_ptx_for_hopper_waits_once_and_only_prefetch_reads_before(level):
    for name, code in kernels_ptx_for_hopper(level).items():
        assert code.count("griddepcontrol.wait") == code.count("griddepcontrol.launch_dependents") == min(level, 1)
        prefetches = code.count("prefetch.global.L2")
        reads_weights = name in ("gemv", "gemv-swiglu", "qkv_gemv")
        assert (prefetches > 0) is (level == 2 and reads_weights), name
        if level:  # before the wait: no load and no store (the prefetches feed the wait with no load between)
            before = code[: code.index("griddepcontrol.wait")]
            assert "st.global" not in before, name
            assert "ld.global" not in before, name
            assert before.count("prefetch.global.L2") == prefetches, name


@needs_triton
@pytest.mark.parametrize("level", [1, 2])
def test_waiting_keeps_every_load_and_store_as_wide_as_without(level):
    """The wait's zero is added to the pointers it must come before: unless the compiler knows it is a multiple of
    16, the pointers lose their alignment and every load of the input, the cache or the partial results becomes a
    2-byte one (measured on the H200: attention 3.5x slower with PDL)."""
    import re

    def widths(code: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for op in re.findall(r"\b((?:ld|st)\.global\S*)", code):
            kind = op.split(".")[0] + (".v" + op.split(".v")[-1] if ".v" in op else "." + op.split(".")[-1])
            counts[kind] = counts.get(kind, 0) + 1
        return counts

    without = kernels_ptx_for_hopper(0, aligned=True)
    for name, code in kernels_ptx_for_hopper(level, aligned=True).items():
        assert widths(code) == widths(without[name]), name


def interpreted_layer_errors() -> dict[str, list[float]]:
    """tests.test_triton_layer.layer_errors with the kernels asked for PDL where it would work (run with
    TRITON_INTERPRET=1, where it must not)."""
    pdl.supports_pdl = lambda device: True
    assert kernel_pdl_level("cuda") == 0
    from tests.test_triton_layer import LAYER_CASES, layer_errors

    return layer_errors(LAYER_CASES[:1])


@pytest.mark.slow
@needs_triton
def test_the_interpreter_runs_todays_kernels_with_the_option_set():
    script = ("import json; from tests.test_kernel_pdl import interpreted_layer_errors; "
              "print(json.dumps(interpreted_layer_errors()))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TRITON_INTERPRET": "1", KERNEL_PDL_ENV: "prefetch"},
                            cwd=Path(__file__).parent.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    from tests.test_triton_layer import LAYER_CASES, check_layer_errors

    check_layer_errors(json.loads(result.stdout.splitlines()[-1]), LAYER_CASES[:1])


@needs_triton
@pytest.mark.parametrize("level", [1, 2])
def test_torchs_analysis_finds_the_same_written_arguments_at_every_level(monkeypatch, level):
    """Inside a compile torch analyses what a user-defined kernel writes; inline assembly it cannot analyse, or a
    weight it takes for written, would break the step's compile (or copy the weights every step)."""
    import triton
    from torch._higher_order_ops import triton_kernel_wrap
    from triton.backends.compiler import GPUTarget

    from core.kernels import decode_layer, triton_decode_kernels

    class Hopper:
        def get_current_target(self) -> GPUTarget:
            return GPUTarget("cuda", 90, 32)

    monkeypatch.setattr(type(triton.runtime.driver), "active", property(lambda self: Hopper()))

    def tensor(dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        return torch.empty(16, dtype=dtype)

    gemv, qkv = decode_layer._kernels()
    pointers = ("x_ptr", "w_ptr", "bias_ptr", "out_ptr", "norm_ptr", "residual_ptr")
    gemv_args = {**{name: tensor() for name in pointers}, "length_ptr": tensor(torch.int64), "ahead_ptr": tensor(),
                 "n": 4096, "w_row_stride": 2048, "eps": 1e-5, "ahead_first": 0, "ahead_last": 0, "k": 2048,
                 "HAS_BIAS": False, "ACT_MUL": False, "NORM": True, "RESIDUAL": True, "ADVANCE": True,
                 "SWIGLU": False, "EVEN_N": True, "EVEN_K": True, "BLOCK_N": 2, "BLOCK_K": 1024, "AHEAD_PIECE": 0,
                 "AHEAD_PIECES": 256}
    pointers = ("x_ptr", "norm_ptr", "w_ptr", "bias_ptr", "cos_ptr", "sin_ptr", "q_ptr", "key_ptr", "value_ptr")
    qkv_args = {**{name: tensor() for name in pointers}, "length_ptr": tensor(torch.int64), "w_row_stride": 2048,
                "cos_stride": 1, "cache_head_stride": 4096, "cache_slot_stride": 64, "eps": 1e-5, "k": 2048,
                "HEADS": 32, "KV_HEADS": 8, "HEAD_DIM": 64, "HAS_BIAS": False, "EVEN_K": True, "BLOCK_P": 2,
                "BLOCK_K": 1024}
    combine_args = {"partial_ptr": tensor(torch.float32), "stats_ptr": tensor(torch.float32), "out_ptr": tensor(),
                    "splits": 5, "SPLITS_PAD": 8, "HEAD_DIM": 64}

    def written(kernel, arguments: dict, pdl_level: int) -> set[str]:
        accessed = triton_kernel_wrap.identify_accessed_tensors(kernel, {**arguments, "PDL": pdl_level}, {})
        return {dep.name for dep in accessed.read_writes.writes}

    for kernel, arguments in ((gemv, gemv_args), (qkv, qkv_args), (triton_decode_kernels.combine, combine_args)):
        assert written(kernel, arguments, level) == written(kernel, arguments, 0), kernel.fn.__name__
    assert written(gemv, gemv_args, level) == {"out_ptr", "length_ptr"}
    swiglu_args = {**gemv_args, "SWIGLU": True, "RESIDUAL": False, "ADVANCE": False}
    assert written(gemv, swiglu_args, level) == written(gemv, swiglu_args, 0) == {"out_ptr"}
