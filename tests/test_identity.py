"""Why outputs differ: the report names the measured cause (bf16 attention past 256 keys on CUDA), and says when it
cannot, instead of a bare NO."""

from dataclasses import replace

from core.measure.identity import (
    GENERATE_KERNELS,
    HALF_PRECISION_ATTENTION,
    INDUCTOR_PDL,
    UNKNOWN,
    attended_keys,
    difference_note,
    explain,
    footnote,
    sameness,
)
from core.report.build import build_report, format_table
from core.request.options import BenchRequest, GenerationOptions

BOTH = ("naive", "pipelined")


def drifting_pipelined(**overrides):
    facts = dict(device_type="cuda", dtype="bfloat16", keys=512, compile_mode="step-graph") | overrides
    return explain({"naive": True, "pipelined": False}, {"naive": True, "pipelined": False}, **facts)


def test_a_static_cache_attends_over_its_whole_bucketed_length():
    static = GenerationOptions(cache="static", max_new_tokens=128)
    assert attended_keys(46, static, longest_output=10) == 256  # 46 + 128 + lag 1 fits one bucket
    assert attended_keys(46, GenerationOptions(cache="static", max_new_tokens=300), 10) == 512
    assert attended_keys(46, GenerationOptions(cache="dynamic", max_new_tokens=300), longest_output=20) == 66


def test_bf16_on_cuda_past_256_keys_is_named_as_the_attention_kernel():
    entry = drifting_pipelined()
    assert entry["cause"] == HALF_PRECISION_ATTENTION and entry["drifting"] == ["pipelined"]
    assert "512 keys" in entry["reason"] and "fp32" in entry["reason"]
    assert "SYNCSCOPE_DECODE_ATTENTION=auto, triton or reduce" in entry["reason"]
    assert footnote(entry).startswith("NO* for pipelined: ")


def test_what_was_not_measured_is_not_explained_away():
    assert drifting_pipelined(keys=256)["cause"] == UNKNOWN
    assert drifting_pipelined(dtype="float32")["cause"] == UNKNOWN
    assert drifting_pipelined(device_type="cpu")["cause"] == UNKNOWN
    assert drifting_pipelined(fused_attention=False)["cause"] == UNKNOWN  # the reduction attention repeated
    assert "not identified" in drifting_pipelined(dtype="float32")["reason"]


def test_drift_with_inductors_pdl_placement_names_it_at_any_length_and_precision():
    for facts in ({}, {"keys": 256}, {"dtype": "float32"}, {"fused_attention": False}):
        entry = drifting_pipelined(pdl="inductor", **facts)
        assert entry["cause"] == INDUCTOR_PDL and "SYNCSCOPE_PDL=safe or off" in entry["reason"], facts
    assert drifting_pipelined(pdl="safe", keys=256)["cause"] == UNKNOWN  # the safe placement waits for everything


def test_a_loop_that_differs_consistently_gets_no_excuse():
    entry = explain({"naive": True, "pipelined": False}, dict.fromkeys(BOTH, True), device_type="cuda",
                    dtype="bfloat16", keys=512, compile_mode="step-graph")
    assert entry["cause"] is None and entry["differing"] == ["pipelined"] and footnote(entry) is None


def test_generate_in_step_graph_mode_runs_other_kernels():
    entry = explain({"naive": True, "hf": False}, {"naive": True, "hf": True}, device_type="cuda",
                    dtype="bfloat16", keys=512, compile_mode="step-graph")
    assert entry["cause"] == GENERATE_KERNELS and footnote(entry).startswith("NO for hf: ")


def test_all_identical_needs_no_note():
    entry = explain(dict.fromkeys(BOTH, True), dict.fromkeys(BOTH, True), device_type="cuda", dtype="bfloat16",
                    keys=512, compile_mode="off")
    assert entry["cause"] is None and footnote(entry) is None


def test_the_cli_table_prints_the_reason(tiny):
    request = BenchRequest(prompt="Hello", options=GenerationOptions(max_new_tokens=6), trials=2)
    timings = {"tokens_per_s": 1.0, "step_ms": [], "total_ms": 1.0, "ttft_ms": 1.0, "new_tokens": 2}
    runs = [{"contestant": name, "trial": trial, "token_ids": [[1, 2 + (name == "pipelined") * trial]],
             "timings": timings, "prompt_tokens": 3} for trial in (0, 1) for name in BOTH]
    report = build_report(tiny, request, runs, warmups={}, effective={name: (request.options, []) for name in BOTH},
                          loops_ran=request.options)
    assert report["identity"]["cause"] == UNKNOWN  # tiny-random runs in fp32 on the CPU: nothing measured
    assert "NO* for pipelined: the same code gave different tokens" in format_table(report)


def test_one_note_explains_the_no_star_cells_of_new_and_old_reports():
    report = {"identical": {"naive": True, "pipelined": False}, "self_consistent": {"naive": True, "pipelined": False},
              "identity": drifting_pipelined()}
    assert [sameness(report, name) for name in BOTH] == ["yes", "NO*"]
    assert difference_note(report) == footnote(report["identity"])
    old = {key: value for key, value in report.items() if key != "identity"}  # from before the identity entry
    assert difference_note(old) == ("NO* for pipelined: its own trials differ from each other (this report does not "
                                    "say why: it predates the identity check)")
    assert difference_note({"self_consistent": {"naive": True}}) is None
    assert sameness({}, "naive") == "NO"  # a report that says nothing about it is not called self-inconsistent


def test_the_page_says_why_instead_of_a_bare_no():
    from dashboard.views.report_text import identity_notes

    report = {"self_consistent": {"naive": True, "pipelined": False}, "identity": drifting_pipelined()}
    [note] = identity_notes(report)
    assert note.startswith("NO* for pipelined: ") and "more than 256 keys" in note
    old = {"self_consistent": {"naive": True, "pipelined": False}}  # a report from before the identity entry
    assert "does not say why" in identity_notes(old)[0]
    assert identity_notes({"self_consistent": {"naive": True}}) == []


def test_the_report_knows_which_attention_ran(tiny):
    from core.report.build import _fused_attention

    assert tiny.transforms[-1] == "compiled decode attention: reduce"
    assert _fused_attention(tiny, "off") and not _fused_attention(tiny, "step-graph")
    for kernel, fused in (("split", False), ("sdpa", True), ("triton", False), (None, True)):
        other = replace(tiny, decode_attention=kernel)
        assert _fused_attention(other, "step-graph") is fused, kernel
