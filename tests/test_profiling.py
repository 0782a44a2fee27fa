"""core.measure.profiling and the CLI options for looking inside a step: kernel kinds, the per-step table, `--profile`,
inductor options."""

from __future__ import annotations

import json

import pytest

from core.bench import main
from core.measure.kernel_measurement import kinds_per_step
from core.measure.profiling import format_summary, kernel_kind, summarize_kernels
from core.report.build import step_time_lines

H200_NAMES = {  # names seen in the fifth H200 run's profiles (Llama-8B, TP=2, step-graph)
    "void (anonymous namespace)::one_shot_all_reduce_kernel<c10::BFloat16, 16, 2>(c10::BFloat16**)": "all-reduce",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "all-reduce",
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "all-gather",
    "triton_red_fused__unsafe_view_all_reduce_mm_mul_silu_split_with_sizes_t_view_11": "matrix products",
    "triton_red_fused__to_copy__unsafe_view_add_all_gather_into_tensor_mean_mm_mul_pow_rsqrt_slice_t_view_18":
        "matrix products",
    "triton_red_fused__to_copy_add_mean_pow_16": "normalisation and rotary",
    "triton_poi_fused__to_copy__unsafe_view_add_cat_cos_mm_mul_neg_sin_slice_transpose_unsqueeze_view_4":
        "normalisation and rotary",
    "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35_16x128x128_1x4x1_cga1x1x1_kernel0_0":
        "attention",
    "nvjet_sm90_tst_64x32_64x16_4x1_v_bz_TNT": "matrix products",
    "Memcpy DtoH (Device -> Pinned)": "copies",
    # core.kernels.tp_kernels: a Triton kernel keeps its name
    "fused_all_reduce_add_rms_norm": "all-reduce + add + norm",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::ArgMaxOps<float>>":
        "sampling",
}
ONE_H200_NAMES = {  # names seen in a one-H200 profile (Llama-1B, step-graph; h200-2026-12-01-b, call 2)
    "triton_red_fused__unsafe_view_mm_mul_silu_split_with_sizes_t_view_10": "matrix products",
    "triton_red_fused__to_copy__unsafe_view_add_embedding_mean_mm_mul_pow_rsqrt_t_view_16": "matrix products",
    "attend": "attention",
    "combine": "attention",
    "triton_poi_fused__to_copy__unsafe_view_add_arange_bitwise_and_cat_cos_expand_index_mul_neg_sin_slice_2":
        "normalisation and rotary",
    "triton_red_fused__to_copy_mean_pow_15": "normalisation and rotary",
    "triton_per_fused_add_argmax_gather_mul_1": "sampling",
    "triton_poi_fused_index_copy_3": "copies",
    "triton_poi_fused_add_4": "elementwise",
    "void at::native::vectorized_elementwise_kernel<2, at::native::CUDAFunctorOnSelf_add<long>>": "elementwise",
    "triton_per_fused_max_view_0": "other",
}


@pytest.mark.parametrize("name", sorted({**H200_NAMES, **ONE_H200_NAMES}))
def test_kernels_are_sorted_into_kinds_by_name(name):
    assert kernel_kind(name) == {**H200_NAMES, **ONE_H200_NAMES}[name]


def test_each_decode_step_s_kernel_time_is_split_by_kind():
    # Two decode steps after the prefill (step 0), spans in ms since the run began; kernels in ns on a clock that is
    # perf_counter + offset. A kernel outside every decode step's span (in the prefill, or after) is not counted.
    started_s, offset_ns = 10.0, 5_000
    base = started_s * 1e9 + offset_ns
    timings = {"device_start_ms": [0.0, 1.0, 2.0], "device_end_ms": [0.9, 1.9, 2.9], "kept_steps": 3}

    def kernel(start_ms, length_ms, name):
        return int(base + start_ms * 1e6), int(base + (start_ms + length_ms) * 1e6), name

    named = [kernel(0.1, 0.5, "triton_red_fused_mm_t_view_1"),  # in the prefill
             kernel(1.0, 0.6, "triton_red_fused_mm_t_view_1"), kernel(1.7, 0.1, "attend"),
             kernel(2.0, 0.6, "triton_red_fused_mm_t_view_1"), kernel(2.7, 0.1, "attend"),
             kernel(2.8, 0.05, "triton_poi_fused_add_4"), kernel(3.5, 1.0, "attend")]  # after the last step
    split = kinds_per_step(named, timings, started_s, offset_ns, top=2)
    kinds = split["kinds"]
    assert [k["kind"] for k in kinds] == ["matrix products", "attention", "elementwise"]
    assert kinds[0]["ms_per_step"] == pytest.approx(0.6) and kinds[0]["kernels_per_step"] == 1
    assert kinds[1]["ms_per_step"] == pytest.approx(0.1) and kinds[2]["ms_per_step"] == pytest.approx(0.025)
    assert [(k["name"], k["calls_per_step"]) for k in split["top_kernels"]] == [
        ("triton_red_fused_mm_t_view_1", 1), ("attend", 1)]
    assert kinds_per_step(named, {"device_start_ms": [0.0], "device_end_ms": [0.9], "kept_steps": 1}, started_s,
                          offset_ns) == {"kinds": [], "top_kernels": []}


def test_the_cli_table_says_where_the_step_went():
    report = {"kernel_measurement": {"pipelined": {
        "kinds": [{"kind": "matrix products", "ms_per_step": 3.89, "kernels_per_step": 225.0},
                  {"kind": "attention", "ms_per_step": 0.19, "kernels_per_step": 64.0}],
        "idle_inside_ms_per_step": 0.17}, "naive": {"kernel_busy_fraction": 0.9}}}
    assert step_time_lines(report) == ["pipelined step on the device, us (kernels): matrix products 3890 (225), "
                                       "attention 190 (64), gaps between kernels 170"]
    assert step_time_lines({}) == []


def test_the_summary_is_per_step_and_sorted_by_cost():
    kernels = [("triton_red_fused_mm_t_view_1", 20, 400.0), ("ncclDevKernel_AllReduce_Sum", 40, 200.0),
               ("triton_poi_fused_add_2", 20, 20.0)]
    summary = summarize_kernels(kernels, steps=10)
    assert summary["kernels_per_step"] == 8 and summary["kernel_us_per_step"] == 62
    assert [row["kind"] for row in summary["kinds"]] == ["matrix products", "all-reduce", "elementwise"]
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
