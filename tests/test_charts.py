"""Figures from plain data: the expected traces, shading and clock labels, without a browser."""

from __future__ import annotations

import json

import pytest

from dashboard import charts
from dashboard.runner import timeline_from_report
from tests.conftest_dashboard import FAST, bench_report, running_tiny


@pytest.fixture(autouse=True)
def validated(monkeypatch):
    """Build every figure with plotly's validation on: the specs must be valid plotly."""
    monkeypatch.setattr(charts, "VALIDATE", True)


@pytest.fixture(scope="module")
def tiny_runner():
    yield from running_tiny()


SPANS = [
    {"contestant": "naive", "phase": "warmup", "trial": None, "t0": 0.0, "t1": 0.5},
    {"contestant": "naive", "phase": "trial", "trial": 0, "t0": 0.5, "t1": 1.5},
    {"contestant": "pipelined", "phase": "trial", "trial": 0, "t0": 1.5, "t1": 2.2},
]
SERIES = {"naive": {"t": [0.6, 0.8, 1.0], "tokens_per_s": [90.0, 95.0, 92.0]},
          "pipelined": {"t": [1.6, 1.8, 2.0], "tokens_per_s": [140.0, 150.0, 148.0]}}


def nvml_samples(n: int = 5) -> list[dict]:
    return [{"t": i * 0.5, "util_pct": 40.0 + i, "mem_used_mb": 2048.0, "power_w": 200.0 + i,
             "sm_clock_mhz": 1980.0} for i in range(n)]


def timings(clock: str, steps: list[float], gaps: list[float] | None = None, rate: float = 100.0) -> dict:
    return {"clock": clock, "tokens_per_s": rate, "step_ms": steps, "gpu_gap_ms": gaps or [],
            "host_known_ms": [], "total_ms": 10.0, "new_tokens": 4, "kept_steps": 4}


def gpu_report() -> dict:
    runs = [{"contestant": "naive", "trial": t, "order": 0,
             "timings": timings("cuda-events", [2.0, 2.1, 2.2], [0.5, 0.6, 0.7], rate=r)} for t, r in
            enumerate([100.0, 120.0, 110.0])]
    runs += [{"contestant": "pipelined", "trial": 0, "order": 1,
              "timings": timings("cuda-events", [1.5, 1.5, 1.6], [0.0, 0.01, 0.0], rate=150.0)}]
    return {"runs": runs}


def names(fig) -> list[str]:
    return [trace.name for trace in fig.data]


def test_tokens_per_s_has_one_line_per_loop_and_shaded_spans():
    fig = charts.tokens_per_s_figure({"series": SERIES, "spans": SPANS})
    assert names(fig) == ["naive", "pipelined"]
    assert list(fig.data[1].y) == [140.0, 150.0, 148.0]
    rects = [s for s in fig.layout.shapes if s.type == "rect"]
    assert [(r.x0, r.x1) for r in rects] == [(0.0, 0.5), (0.5, 1.5), (1.5, 2.2)]
    assert rects[0].fillcolor == charts.WARMUP_COLOR and rects[2].fillcolor == charts.COLORS["pipelined"]
    assert [a.text for a in fig.layout.annotations] == ["warm-up", "naive", "pipelined"]


def test_a_long_warm_up_is_left_out_of_view_but_not_out_of_the_data():
    spans = [{"contestant": "naive", "phase": "warmup", "trial": None, "t0": 0.0, "t1": 20.0},
             {"contestant": "naive", "phase": "trial", "trial": 0, "t0": 20.0, "t1": 21.0},
             {"contestant": "pipelined", "phase": "trial", "trial": 0, "t0": 21.0, "t1": 22.0}]
    fig = charts.tokens_per_s_figure({"series": SERIES, "spans": spans, "t_end": 22.0})
    assert fig.layout.xaxis.range[0] == pytest.approx(19.96) and fig.layout.xaxis.range[1] == 22.0
    assert len(fig.layout.shapes) == 3
    short = charts.tokens_per_s_figure({"series": SERIES, "spans": SPANS, "t_end": 2.2})
    assert tuple(short.layout.xaxis.range) == (0.0, 2.2)


def test_contestants_without_token_times_get_a_legend_entry_for_their_span():
    spans = [*SPANS, {"contestant": "hf", "phase": "trial", "trial": 0, "t0": 2.2, "t1": 3.0}]
    fig = charts.tokens_per_s_figure({"series": SERIES, "spans": spans})
    assert names(fig) == ["naive", "pipelined", "hf (span only)"]
    assert list(fig.data[2].x) == [2.6]


def test_open_span_is_not_drawn_until_it_ends():
    fig = charts.tokens_per_s_figure({"series": SERIES, "spans": [{**SPANS[1], "t1": None}]})
    assert not fig.layout.shapes


def test_empty_states_say_what_will_appear():
    for fig in (charts.tokens_per_s_figure({}), charts.step_latency_figure({}), charts.gap_figure({})):
        assert not fig.data and fig.layout.annotations[0].text


def test_device_figure_with_nvml_shows_util_clock_memory_power():
    timeline = {"monitor": {"kind": "nvml", "description": "H200", "samples": nvml_samples()}, "spans": SPANS}
    fig = charts.device_figure(timeline)
    assert names(fig) == ["GPU util %", "SM clock MHz", "memory used MiB", "power W"]
    assert list(fig.data[0].y) == [40.0, 41.0, 42.0, 43.0, 44.0]
    assert "NVML" in fig.layout.title.text and "coarse" in fig.layout.title.text
    assert len([s for s in fig.layout.shapes if s.type == "rect"]) == 2 * len(SPANS)  # both rows
    assert len(fig.layout.annotations) == len(SPANS)  # labelled once


def test_device_figure_without_gpu_says_so_and_shows_cpu():
    samples = [{**s, "power_w": None, "sm_clock_mhz": None} for s in nvml_samples()]
    fig = charts.device_figure({"monitor": {"kind": "cpu", "description": "No NVIDIA GPU", "samples": samples}})
    assert names(fig) == ["CPU util %", "process RSS MiB"]
    assert "no NVIDIA GPU" in fig.layout.title.text


def test_device_figure_without_samples_shows_the_reason():
    fig = charts.device_figure({"monitor": {"kind": "none", "description": "no samples in this report"}})
    assert fig.layout.annotations[0].text == "no samples in this report"


def test_step_latency_on_the_gpu_clock():
    fig = charts.step_latency_figure(gpu_report())
    assert names(fig) == ["naive", "pipelined"] and fig.data[0].type == "histogram"
    assert len(fig.data[0].x) == 9  # all three naive trials
    assert "CUDA events" in fig.layout.title.text


def test_gap_uses_cuda_events_of_the_median_trial():
    report = gpu_report()
    assert charts.representative_run(report, "naive")["timings"]["tokens_per_s"] == 110.0
    fig = charts.gap_figure(report)
    assert names(fig) == ["naive", "pipelined"]
    assert list(fig.data[0].y) == [0.5, 0.6, 0.7] and list(fig.data[0].x) == [1, 2, 3]
    assert "GPU idle gap" in fig.layout.title.text


def test_host_clock_is_labelled_as_such():
    report = {"runs": [{"contestant": "naive", "trial": 0, "order": 0, "timings": timings("host", [3.0, 4.0])}]}
    assert "host clock" in charts.step_latency_figure(report).layout.title.text
    gap = charts.gap_figure(report)
    assert "host clock" in gap.layout.title.text and list(gap.data[0].y) == [3.0, 4.0]


def test_long_runs_are_subsampled():
    report = {"runs": [{"contestant": "naive", "trial": 0, "order": 0,
                        "timings": timings("host", [1.0] * (charts.MAX_POINTS * 3))}]}
    assert len(charts.step_latency_figure(report).data[0].x) <= charts.MAX_POINTS


@pytest.mark.parametrize("source", ["bench", "dashboard"])
def test_real_reports_draw_all_four_charts(tiny_runner, source):
    if source == "bench":
        report = json.loads(json.dumps(bench_report(tiny_runner, trials=2)))
    else:
        report = json.loads(json.dumps(tiny_runner.run(FAST)))
    timeline = timeline_from_report(report)
    tokens, device, steps, gap = charts.all_figures(timeline, report)
    assert names(tokens) == ["naive", "pipelined"]
    assert names(steps) == ["naive", "pipelined"] and names(gap) == ["naive", "pipelined"]
    if source == "dashboard":
        assert names(device)[0] in ("CPU util %", "GPU util %")
    for fig in (tokens, device, steps, gap):
        json.loads(fig.to_json())


def test_unvalidated_figures_match_validated_ones(monkeypatch):
    timeline = {"series": SERIES, "spans": SPANS,
                "monitor": {"kind": "nvml", "description": "H200", "samples": nvml_samples()}}
    validated = [json.loads(f.to_json()) for f in charts.all_figures(timeline, gpu_report())]
    monkeypatch.setattr(charts, "VALIDATE", False)
    assert [json.loads(f.to_json()) for f in charts.all_figures(timeline, gpu_report())] == validated
