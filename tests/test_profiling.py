"""core.measure.profiling and the CLI options for looking inside a step: kernel kinds, the per-step table, `--profile`,
inductor options."""

from __future__ import annotations

import json

import pytest

from core.bench import main
from core.measure.profiling import format_summary, kernel_kind, summarize_kernels

H200_NAMES = {  # names seen in the fifth H200 run's profiles (Llama-8B, TP=2, step-graph)
    "void (anonymous namespace)::one_shot_all_reduce_kernel<c10::BFloat16, 16, 2>(c10::BFloat16**)": "all-reduce",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "all-reduce",
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "all-gather",
    "triton_red_fused__unsafe_view_all_reduce_mm_mul_silu_split_with_sizes_t_view_11": "matmul (inductor)",
    "triton_red_fused__to_copy__unsafe_view_add_all_gather_into_tensor_mean_mm_mul_pow_rsqrt_slice_t_view_18":
        "matmul (inductor)",
    "triton_red_fused__to_copy_add_mean_pow_16": "reduction (inductor)",
    "triton_poi_fused__to_copy__unsafe_view_add_cat_cos_mm_mul_neg_sin_slice_transpose_unsqueeze_view_4":
        "elementwise (inductor)",
    "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35_16x128x128_1x4x1_cga1x1x1_kernel0_0":
        "attention",
    "nvjet_sm90_tst_64x32_64x16_4x1_v_bz_TNT": "matmul (library)",
    "Memcpy DtoH (Device -> Pinned)": "copy / fill",
    # core.kernels.tp_kernels: a Triton kernel keeps its name
    "fused_all_reduce_add_rms_norm": "all-reduce + add + norm",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::ArgMaxOps<float>>": "other",
}


@pytest.mark.parametrize("name", sorted(H200_NAMES))
def test_kernels_are_sorted_into_kinds_by_name(name):
    assert kernel_kind(name) == H200_NAMES[name]


def test_the_summary_is_per_step_and_sorted_by_cost():
    kernels = [("triton_red_fused_mm_t_view_1", 20, 400.0), ("ncclDevKernel_AllReduce_Sum", 40, 200.0),
               ("triton_poi_fused_add_2", 20, 20.0)]
    summary = summarize_kernels(kernels, steps=10)
    assert summary["kernels_per_step"] == 8 and summary["kernel_us_per_step"] == 62
    assert [row["kind"] for row in summary["kinds"]] == ["matmul (inductor)", "all-reduce", "elementwise (inductor)"]
    assert summary["kernels"][1]["us_per_call"] == 5 and summary["kernels"][1]["calls_per_step"] == 4
    table = format_summary(summary, step_ms=0.1)
    assert "62% of it" in table and "all-reduce" in table


def test_the_cli_writes_a_profile_per_rank(tmp_path, capsys):
    folder = tmp_path / "prof"
    code = main(["--model", "tiny-random", "--device", "cpu", "--max-new-tokens", "6", "--trials", "1",
                 "--profile", str(folder)])
    assert code == 0
    summary = json.loads((folder / "profile-rank0.json").read_text())
    assert summary["steps"] == 5 and summary["kernels"]  # on the CPU: aten operators
    assert (folder / "profile-rank0-trace.json.gz").stat().st_size > 0
    assert "profile of one more pipelined run" in capsys.readouterr().out


def test_an_unusable_profile_folder_is_refused_before_any_work(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["--model", "tiny-random", "--profile", str(blocker / "sub")]) == 2
    assert "--profile" in capsys.readouterr().err


def test_malformed_inductor_options_are_refused_before_any_work(monkeypatch, capsys):
    monkeypatch.setenv("SYNCSCOPE_INDUCTOR_OPTIONS", "{combo_kernels: true}")
    assert main(["--model", "tiny-random", "--device", "cpu"]) == 2
    assert "SYNCSCOPE_INDUCTOR_OPTIONS is not valid JSON" in capsys.readouterr().err
    monkeypatch.setenv("SYNCSCOPE_INDUCTOR_OPTIONS", "[1]")
    assert main(["--model", "tiny-random", "--device", "cpu"]) == 2
    assert "must be a JSON object" in capsys.readouterr().err
