"""Figures from plain data: the expected traces, shading, axes and clock labels, without a browser."""

from __future__ import annotations

import itertools
import json
import math
import statistics

import pytest

from core.compare import compare
from core.report.explain import report_device_type
from core.request.load import CONTESTANT_CHOICES
from core.request.options import BenchRequest, GenerationOptions
from dashboard.service.page_record import LiveSeries, PageRecord, live_series, page_report
from dashboard.service.rate_series import live_series_from_report
from dashboard.views import charts, live_charts, load_charts, run_charts, step_charts

pytestmark = pytest.mark.usefixtures("validated")  # figures are built with plotly's validation on


@pytest.fixture(scope="module")
def real_report(tiny):
    request = BenchRequest(prompt="Hello there", options=GenerationOptions(max_new_tokens=16), trials=2)
    return json.loads(json.dumps(compare(tiny, request)))


SPANS = [
    {"contestant": "naive", "phase": "warmup", "trial": None, "t0": 0.0, "t1": 0.5},
    {"contestant": "naive", "phase": "trial", "trial": 0, "t0": 0.5, "t1": 1.5},
    {"contestant": "pipelined", "phase": "trial", "trial": 0, "t0": 1.5, "t1": 2.2},
]
SERIES = {"naive": {"t": [0.6, 0.8, 1.0], "tokens_per_s": [90.0, 95.0, 92.0]},
          "pipelined": {"t": [1.6, 1.8, 2.0], "tokens_per_s": [140.0, 150.0, 148.0]}}
CONTESTANTS = ("naive", "pipelined", "no-check", "pipelined-again", "hf")


def nvml_samples(n: int = 5, gpu: int | None = 0) -> list[dict]:
    return [{"t": i * 0.5, "gpu": gpu, "util_pct": 40.0 + i, "mem_used_mb": 2048.0, "power_w": 200.0 + i,
             "sm_clock_mhz": 1980.0} for i in range(n)]


def nvml(samples: list[dict], **timeline) -> LiveSeries:
    return live_series(monitor={"source": "nvml", "description": "H200", "samples": samples}, **timeline)


def timings(clock: str, steps: list[float], gaps: list[float] | None = None, rate: float = 100.0) -> dict:
    return {"clock": clock, "tokens_per_s": rate, "step_ms": steps, "gpu_gap_ms": gaps or [],
            "host_known_ms": [], "total_ms": 10.0, "new_tokens": 4, "kept_steps": 4}


def run(name: str, trial: int, steps: list[float], gaps: list[float] | None = None, rate: float = 100.0,
        clock: str = "cuda-events") -> dict:
    return {"contestant": name, "trial": trial, "order": 0, "timings": timings(clock, steps, gaps, rate)}


def gpu_report() -> dict:
    runs = [run("naive", t, [2.0, 2.1, 2.2], [0.5, 0.6, 0.7], rate=r) for t, r in enumerate([100.0, 120.0, 110.0])]
    return {"runs": [*runs, run("pipelined", 0, [1.5, 1.5, 1.6], [0.0, 0.01, 0.0], rate=150.0)]}


def names(fig) -> list[str]:
    return [trace.name for trace in fig.data]


def busy_timeline() -> LiveSeries:
    """Five contestants with warm-ups, trials, tokens/s series and two GPUs: the most a chart has to show."""
    spans, cursor = [], 0.0
    for phase, trial, length in (("warmup", None, 0.4), ("trial", 0, 1.0), ("trial", 1, 1.0)):
        for name in CONTESTANTS:
            spans.append({"contestant": name, "phase": phase, "trial": trial, "t0": cursor, "t1": cursor + length})
            cursor += length
    series = {name: {"t": [s["t0"] + 0.5 for s in spans if s["contestant"] == name and s["phase"] == "trial"],
                     "tokens_per_s": [100.0, 110.0]} for name in CONTESTANTS[:4]}
    samples = nvml_samples(20, gpu=0) + nvml_samples(20, gpu=1)
    return nvml(samples, series=series, spans=spans, t_end=cursor)


def busy_report() -> dict:
    return {"runs": [run(name, trial, [2.0 + i, 2.1 + i], [0.1, 0.2]) for trial in range(2)
                     for i, name in enumerate(CONTESTANTS)]}


# ------------------------------------------------------------------------------------------------ tokens/s

def test_tokens_per_s_has_one_line_per_loop_and_shaded_spans():
    fig = live_charts.tokens_per_s_figure(live_series(series=SERIES, spans=SPANS))
    assert names(fig) == ["naive", "pipelined"]
    assert list(fig.data[1].y) == [140.0, 150.0, 148.0]
    rects = [s for s in fig.layout.shapes if s.type == "rect"]
    assert [(r.x0, r.x1) for r in rects] == [(0.0, 0.5), (0.5, 1.5), (1.5, 2.2)]
    assert rects[0].fillcolor == live_charts.WARMUP_COLOR and rects[2].fillcolor == charts.COLORS["pipelined"]
    assert [a.text for a in fig.layout.annotations] == ["warm-up", "naive", "pipelined"]


def test_a_long_warm_up_is_left_out_of_view_but_not_out_of_the_data():
    spans = [{"contestant": "naive", "phase": "warmup", "trial": None, "t0": 0.0, "t1": 20.0},
             {"contestant": "naive", "phase": "trial", "trial": 0, "t0": 20.0, "t1": 21.0},
             {"contestant": "pipelined", "phase": "trial", "trial": 0, "t0": 21.0, "t1": 22.0}]
    fig = live_charts.tokens_per_s_figure(live_series(series=SERIES, spans=spans, t_end=22.0))
    assert fig.layout.xaxis.range[0] == pytest.approx(19.96) and fig.layout.xaxis.range[1] == 22.0
    assert len(fig.layout.shapes) == 3
    short = live_charts.tokens_per_s_figure(live_series(series=SERIES, spans=SPANS, t_end=2.2))
    assert tuple(short.layout.xaxis.range) == (0.0, 2.2)


def test_contestants_without_token_times_get_a_legend_entry_for_their_span():
    spans = [*SPANS, {"contestant": "hf", "phase": "trial", "trial": 0, "t0": 2.2, "t1": 3.0}]
    fig = live_charts.tokens_per_s_figure(live_series(series=SERIES, spans=spans))
    assert names(fig) == ["naive", "pipelined", "hf (span only)"]
    assert list(fig.data[2].x) == [2.6]


def test_open_span_is_not_drawn_until_it_ends():
    fig = live_charts.tokens_per_s_figure(live_series(series=SERIES, spans=[{**SPANS[1], "t1": None}]))
    assert not fig.layout.shapes


def test_the_a_a_control_has_its_own_lighter_dashed_colour():
    series = {**SERIES, "pipelined-again": {"t": [2.3, 2.4], "tokens_per_s": [150.0, 149.0]}}
    again = live_charts.tokens_per_s_figure(live_series(series=series, spans=SPANS)).data[2]
    assert again.name == "pipelined-again" and again.line.dash == "dash"
    assert again.line.color == charts.color("pipelined-again") != charts.color("pipelined")
    assert charts.color("pipelined-again") != charts.color("unknown")


# ------------------------------------------------------------------------------------------------ layout

def test_legends_sit_below_the_plot_and_never_on_the_title():
    figures = [*run_charts.all_figures(busy_timeline(), busy_report()), charts.empty_figure("Nothing", "yet")]
    for fig in figures:
        legend, title = fig.layout.legend, fig.layout.title
        assert legend.yref == title.yref == "container"
        assert (legend.y, legend.yanchor) == (0, "bottom") and legend.orientation == "h"
        assert (title.y, title.yanchor) == (1, "top")


def test_the_busiest_charts_show_every_contestant_and_metric():
    tokens, device, steps, gap = run_charts.all_figures(busy_timeline(), busy_report())
    assert names(tokens) == [*CONTESTANTS[:4], "hf (span only)"]
    assert tokens.layout.annotations[0].text == "warm-up"  # five short warm-ups in a row share one label
    assert len(device.data) == 8
    assert names(steps) == names(gap) == list(CONTESTANTS)
    assert device.layout.height > live_charts.device_figure(nvml(nvml_samples())).layout.height  # room for the legend


# ------------------------------------------------------------------------------------------------ time axis

def test_time_axis_shows_plain_seconds_and_at_least_one_second():
    samples = [{**s, "t": s["t"] * 1e-7} for s in nvml_samples()]
    device = live_charts.device_figure(live_series(monitor={"source": "cpu", "samples": samples}))
    series = {"naive": {"t": [1e-7, 2e-7], "tokens_per_s": [1.0, 2.0]}}
    tokens = live_charts.tokens_per_s_figure(live_series(series=series))
    for axis in (device.layout.xaxis2, tokens.layout.xaxis):
        assert axis.exponentformat == "none" and axis.tickformat.endswith("f")
        assert axis.range[0] == 0 and axis.range[1] - axis.range[0] >= live_charts.MIN_TIME_SPAN_S


def test_time_axis_follows_the_data_when_the_run_has_no_end_yet():
    fig = live_charts.device_figure(nvml(nvml_samples(9)))  # samples up to 4 s
    assert tuple(fig.layout.xaxis2.range) == (0.0, 4.0)


def test_span_labels_are_left_out_rather_than_run_together():
    spans, cursor = [], 0.0
    for name in ("naive", "pipelined", "no-check") * 3:
        spans.append({"contestant": name, "phase": "trial", "trial": 0, "t0": cursor, "t1": cursor + 0.1})
        cursor += 0.1
    spans.append({"contestant": "naive", "phase": "trial", "trial": 1, "t0": cursor, "t1": 10.0})
    fig = live_charts.tokens_per_s_figure(live_series(series=SERIES, spans=spans, t_end=10.0))
    assert len(fig.layout.shapes) == len(spans)
    assert [a.text for a in fig.layout.annotations] == ["naive"] and fig.layout.annotations[0].x == pytest.approx(0.9)


@pytest.mark.parametrize("length", [0.05, 0.2, 0.4, 0.8, 2.0])
def test_no_two_span_labels_overlap(length):
    spans = [{"contestant": name, "phase": "trial", "trial": 0, "t0": i * length, "t1": (i + 1) * length}
             for i, name in enumerate(["naive", "pipelined", "no-check", "pipelined-again", "hf-deferred", "hf"])]
    fig = live_charts.tokens_per_s_figure(live_series(series=SERIES, spans=spans, t_end=6 * length))
    view = fig.layout.xaxis.range
    notes = sorted(fig.layout.annotations, key=lambda a: a.x)
    seconds_per_char = 7 / 600 * (view[1] - view[0])  # a generous estimate of a 10 px character
    for a, b in itertools.pairwise(notes):
        assert a.x + len(a.text) * seconds_per_char <= b.x
    for note in notes:
        span = next(s for s in spans if s["t0"] <= note.x < s["t1"])
        assert note.x + len(note.text) * seconds_per_char <= span["t1"]
    if length >= 0.8:
        assert {"naive", "pipelined", "no-check", "hf"} <= {note.text for note in notes}


# ------------------------------------------------------------------------------------------------ device

def test_device_figure_with_nvml_shows_util_clock_memory_power():
    fig = live_charts.device_figure(nvml(nvml_samples(), spans=SPANS))
    assert names(fig) == ["GPU util %", "SM clock MHz", "memory used MiB", "power W"]
    assert list(fig.data[0].y) == [40.0, 41.0, 42.0, 43.0, 44.0]
    assert "NVML" in fig.layout.title.text and "coarse" in fig.layout.title.text
    subtitle = fig.layout.title.subtitle.text.replace("<br>", " ")
    assert "share of each ~1/6 s sample period in which any kernel ran" in subtitle
    assert len([s for s in fig.layout.shapes if s.type == "rect"]) == 2 * len(SPANS)  # both rows
    assert len(fig.layout.annotations) == len(SPANS)  # labelled once


def test_samples_without_a_gpu_key_are_one_gpu():
    samples = [{k: v for k, v in s.items() if k != "gpu"} for s in nvml_samples()]
    assert names(live_charts.device_figure(nvml(samples)))[0] == "GPU util %"


def test_constant_clock_is_a_flat_line_on_an_axis_from_zero():
    axis = live_charts.device_figure(nvml(nvml_samples())).layout.yaxis2
    assert axis.range[0] == 0 and axis.range[1] >= 1.1 * 1980.0


def test_memory_and_power_axes_start_at_zero_and_show_at_least_a_gib():
    samples = [{**s, "mem_used_mb": 300.0 + 0.06 * (i % 2)} for i, s in enumerate(nvml_samples())]
    layout = live_charts.device_figure(nvml(samples)).layout
    assert layout.yaxis3.range[0] == 0 and layout.yaxis3.range[1] >= 1024
    assert layout.yaxis4.range[0] == 0 and layout.yaxis4.range[1] >= 204.0
    big = live_charts.device_figure(nvml([{**s, "mem_used_mb": 80_000.0} for s in nvml_samples()])).layout.yaxis3
    assert tuple(big.range) == (0, pytest.approx(88_000.0))


def test_several_gpus_get_a_line_per_gpu_and_metric():
    fig = live_charts.device_figure(nvml(nvml_samples(gpu=1) + nvml_samples(gpu=0)))
    assert names(fig) == [f"GPU {i} {m}" for m in ("util %", "SM clock MHz", "memory used MiB", "power W")
                          for i in (0, 1)]
    assert fig.data[0].line.color != fig.data[1].line.color
    assert all(list(trace.x) == [0.0, 0.5, 1.0, 1.5, 2.0] for trace in fig.data)


def test_each_metric_is_drawn_through_the_samples_that_have_it():
    util = [{"t": 0.1 * i, "gpu": 0, "util_pct": 50.0 + i, "mem_used_mb": None, "power_w": None,
             "sm_clock_mhz": None} for i in range(4)]
    polls = [{"t": 0.25 * i, "gpu": 0, "util_pct": None, "mem_used_mb": 1000.0, "power_w": None,
              "sm_clock_mhz": None} for i in range(3)]
    fig = live_charts.device_figure(nvml(sorted(util + polls, key=lambda s: s["t"])))
    assert names(fig) == ["GPU util %", "memory used MiB"]
    assert list(fig.data[0].x) == [0.0, 0.1, 0.2, 0.30000000000000004] and None not in fig.data[0].y
    assert list(fig.data[1].x) == [0.0, 0.25, 0.5] and list(fig.data[1].y) == [1000.0] * 3


def test_device_figure_without_gpu_says_so_and_shows_cpu():
    samples = [{**s, "gpu": None, "power_w": None, "sm_clock_mhz": None} for s in nvml_samples()]
    monitor = {"source": "cpu", "description": "No NVIDIA GPU", "samples": samples}
    fig = live_charts.device_figure(live_series(monitor=monitor))
    assert names(fig) == ["engine CPU % (of all cores)", "engine RSS MiB (all ranks)"]
    assert "no NVIDIA GPU" in fig.layout.title.text
    assert fig.layout.yaxis3.range[0] == 0


def test_device_figure_without_samples_shows_the_reason():
    fig = live_charts.device_figure(live_series(monitor={"source": "none", "description": "no samples in this report"}))
    assert fig.layout.annotations[0].text == "no samples in this report"


# ------------------------------------------------------------------------------------------------ empty states

def test_empty_states_say_what_will_appear():
    for fig in (live_charts.tokens_per_s_figure(live_series()), step_charts.step_latency_figure({}),
                step_charts.gap_figure({})):
        assert not fig.data and fig.layout.annotations[0].text


def test_long_empty_messages_wrap_at_word_boundaries():
    message = ("No NVIDIA GPU found (NVML Shared Library Not Found). Showing CPU utilization and host memory "
               "instead, sampled every half second while a run goes.")
    text = charts.empty_figure("Device utilization", message).layout.annotations[0].text
    lines = text.split("<br>")
    assert len(lines) > 1 and all(len(line) <= charts.MESSAGE_WIDTH for line in lines)
    assert " ".join(lines) == message


# ------------------------------------------------------------------------------------------------ step latency

def test_step_latency_on_the_gpu_clock():
    fig = step_charts.step_latency_figure(gpu_report())
    assert names(fig) == ["naive", "pipelined"] and fig.data[0].type == "histogram"
    assert len(fig.data[0].x) == 9  # all three naive trials
    assert "CUDA events" in fig.layout.title.text
    assert not fig.layout.annotations  # nothing left out


def test_histograms_share_bins_and_leave_a_far_outlier_out_of_view():
    report = {"runs": [run("naive", 0, [2.0 + 0.01 * i for i in range(20)] + [400.0]),
                       run("pipelined", 0, [1.5 + 0.01 * i for i in range(20)])]}
    fig = step_charts.step_latency_figure(report)
    bins = [trace.xbins.to_plotly_json() for trace in fig.data]
    assert bins[0] == bins[1] and bins[0]["size"] > 0
    low, high = fig.layout.xaxis.range
    assert low <= 1.5 and 2.19 < high < 10
    assert high == pytest.approx(bins[0]["end"])
    assert fig.layout.annotations[0].text == f"1 step > {charts.readable(high)} ms not shown"


def test_histogram_window_always_holds_every_median():
    report = {"runs": [run("naive", 0, [1.0] * 200), run("pipelined", 0, [1.0] * 197 + [50.0] * 3),
                       run("pipelined-again", 0, [30.0] * 3)]}
    fig = step_charts.step_latency_figure(report)
    assert fig.layout.xaxis.range[1] > 30.0 and fig.layout.xaxis.range[0] < 1.0


def test_histogram_includes_every_contestant_with_step_times():
    report = {"runs": [run(name, 0, [1.0 + i, 1.2 + i]) for i, name in enumerate(CONTESTANTS)]}
    report["runs"][-1]["timings"]["step_ms"] = []  # generate() is timed only as a whole
    fig = step_charts.step_latency_figure(report)
    assert names(fig) == ["naive", "pipelined", "no-check", "pipelined-again"]
    assert [trace.marker.color for trace in fig.data] == [charts.color(n) for n in names(fig)]


def test_long_runs_are_subsampled():
    report = {"runs": [run("naive", 0, [1.0] * (charts.MAX_POINTS * 3), clock="host")]}
    assert len(step_charts.step_latency_figure(report).data[0].x) <= charts.MAX_POINTS


# ------------------------------------------------------------------------------------------------ idle gap

def test_gap_uses_cuda_events_of_the_median_trial():
    report = gpu_report()
    assert step_charts.representative_run(report, "naive")["timings"]["tokens_per_s"] == 110.0
    fig = step_charts.gap_figure(report)
    assert names(fig) == ["naive", "pipelined"]
    assert list(fig.data[0].y) == [0.5, 0.6, 0.7] and list(fig.data[0].x) == [1, 2, 3]
    assert "GPU idle gap" in fig.layout.title.text
    assert fig.layout.yaxis.range[0] == 0 and fig.layout.yaxis.range[1] >= 0.7


def test_representative_run_prefers_decode_tokens_per_s():
    report = gpu_report()
    for r, decode in zip(report["runs"], [300.0, 100.0, 200.0]):
        r["timings"]["decode_tokens_per_s"] = decode
    assert step_charts.representative_run(report, "naive")["trial"] == 2


def test_a_gap_outlier_does_not_flatten_the_rest():
    gaps = [0.5 + 0.01 * (i % 7) for i in range(30)]
    gaps[12] = 50.0
    runs = [run("naive", 0, [2.0] * 30, gaps), run("pipelined", 0, [1.5] * 30, [0.0] * 30)]
    fig = step_charts.gap_figure({"runs": runs})
    low, high = fig.layout.yaxis.range
    assert low == 0 and 0.56 < high < 5
    assert fig.layout.annotations[0].text == f"1 point > {charts.readable(high)} ms not shown"


def test_gap_of_the_a_a_control_is_dashed():
    report = {"runs": [run("pipelined", 0, [1.0, 1.1], [0.1, 0.2]), run("pipelined-again", 0, [1.0, 1.1], [0.1, 0.1])]}
    fig = step_charts.gap_figure(report)
    assert names(fig) == ["pipelined", "pipelined-again"] and fig.data[1].line.dash == "dash"


def test_all_zero_gaps_still_get_an_axis():
    fig = step_charts.gap_figure({"runs": [run("naive", 0, [1.0, 1.0], [0.0, 0.0])]})
    assert fig.layout.yaxis.range[1] > 0


# ------------------------------------------------------------------------------------------------ clocks, reports

def test_host_clock_is_labelled_as_such():
    report = {"runs": [run("naive", 0, [3.0, 4.0], clock="host")]}
    assert "host clock" in step_charts.step_latency_figure(report).layout.title.text
    gap = step_charts.gap_figure(report)
    assert "host clock" in gap.layout.title.text and list(gap.data[0].y) == [3.0, 4.0]


@pytest.mark.parametrize("saved_from", ["bench", "page", "old page"])
def test_real_reports_draw_all_four_charts(real_report, saved_from):
    document = real_report
    samples = [{"t": 0.01 * i, "gpu": None, "util_pct": 30.0, "mem_used_mb": 900.0, "power_w": None,
                "sm_clock_mhz": None} for i in range(5)]
    if saved_from == "page":  # the page saves its live timeline and the monitor's samples next to the report
        page = PageRecord.of_run({**live_series_from_report(real_report),
                                  "monitor": {"source": "cpu", "samples": samples}}, [])
        document = json.loads(json.dumps(page_report(real_report, page)))
    elif saved_from == "old page":  # up to 2026-11 it saved them inside the report, the monitor's source as "kind"
        recorded = {**live_series_from_report(real_report), "monitor": {"kind": "cpu", "samples": samples}}
        document = {**real_report, "dashboard": recorded}
    timeline = live_series_from_report(document)
    tokens, device, steps, gap = run_charts.all_figures(timeline, document)
    assert names(tokens) == ["naive", "pipelined"]
    assert names(steps) == ["naive", "pipelined"] and names(gap) == ["naive", "pipelined"]
    cpu_lines = ["engine CPU % (of all cores)", "engine RSS MiB (all ranks)"]
    assert names(device) == (cpu_lines if saved_from != "bench" else [])
    assert tokens.layout.xaxis.range[1] >= live_charts.MIN_TIME_SPAN_S
    drawn = [v for t in steps.data for v in t.x]  # on the host clock without the pipelined loop's late reads
    assert steps.layout.xaxis.range[1] >= max(statistics.median(t.x) for t in steps.data)
    assert steps.layout.xaxis.range[0] <= min(drawn) and len(drawn) < sum(len(r["timings"]["step_ms"])
                                                                          for r in real_report["runs"])
    for fig in (tokens, device, steps, gap):
        json.loads(fig.to_json())


def test_unvalidated_figures_match_validated_ones(monkeypatch):
    timeline = busy_timeline()
    validated = [json.loads(f.to_json()) for f in run_charts.all_figures(timeline, gpu_report())]
    monkeypatch.setattr(charts, "VALIDATE", False)
    assert [json.loads(f.to_json()) for f in run_charts.all_figures(timeline, gpu_report())] == validated


def test_prebuild_builds_every_figure():
    built = [json.loads(figure) for figure in run_charts.prebuild()]
    assert len(built) == len(run_charts.all_figures(live_series(), None)) and all(figure["data"] for figure in built)


def test_long_titles_are_broken_to_fit_a_phones_chart():
    report = {"runs": [], "summary": {}}
    figures = [*run_charts.all_figures(live_series(), report), step_charts.step_latency_figure(report),
               step_charts.gap_figure(report), live_charts.device_figure(nvml(nvml_samples(), spans=SPANS))]
    for fig in figures:
        lines = fig.layout.title.text.split("<br>")
        assert all(len(line) <= charts.TITLE_WIDTH for line in lines), lines
        if len(lines) > 1:
            assert fig.layout.margin.t > charts.MARGIN["t"], "a wrapped title gets the room of its extra lines"


# ------------------------------------------------------------------------------------------------ legibility

def test_the_a_a_controls_spans_are_labelled_where_their_name_would_not_fit():
    spans = [{"contestant": name, "phase": "trial", "trial": trial, "t0": (3 * trial + i) * 0.6,
              "t1": (3 * trial + i + 1) * 0.6}
             for trial in range(3) for i, name in enumerate(["naive", "pipelined", "pipelined-again"])]
    fig = live_charts.tokens_per_s_figure(live_series(series=SERIES, spans=spans, t_end=5.4))
    labels = [note.text for note in fig.layout.annotations]
    assert labels.count("pipelined") == 3 and labels.count("A/A") == 3, labels


def _lab(hex_color: str, opacity: float) -> tuple[float, float, float]:
    """CIELAB of `hex_color` laid over white at `opacity` (sRGB, D65)."""
    rgb = [1 - opacity + opacity * int(hex_color[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb)
    xyz = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047, 0.2126 * r + 0.7152 * g + 0.0722 * b, \
        (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    fx, fy, fz = (t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in xyz)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def test_every_contestants_span_tint_is_told_apart_from_the_others():
    def tint(name: str) -> tuple[float, float, float]:
        shape = live_charts.span_shapes([{"contestant": name, "phase": "trial", "t0": 0, "t1": 1}], None)[0][0]
        return _lab(shape["fillcolor"], shape["opacity"])

    for a, b in itertools.combinations(charts.COLORS, 2):
        assert math.dist(tint(a), tint(b)) >= 6.0, (a, b)


def test_notes_write_numbers_out_never_in_scientific_notation():
    report = {"runs": [run("naive", 0, [900.0 + i for i in range(300)] + [40_000.0])]}
    note = step_charts.step_latency_figure(report).layout.annotations[0].text
    assert "e+" not in note and note.endswith(" ms not shown") and "," in note
    assert [charts.readable(v) for v in (1351.7, 0.01234, 12.0, 0.5)] == ["1,352", "0.0123", "12", "0.5"]


def test_a_reports_device_chart_draws_only_samples_of_its_own_device():
    samples = [{"t": 0.1 * i, "gpu": 0, "util_pct": 50.0, "mem_used_mb": 100.0, "power_w": 80.0,
                "sm_clock_mhz": 1900.0} for i in range(5)]
    live = live_series(spans=SPANS, t_end=2.2, monitor={"source": "nvml", "samples": samples})
    cpu_report = {"environment": {"device": "cpu", "gpu": None}}
    gpu_report = {"environment": {"device": "cuda:0", "gpu": "NVIDIA H200"}}
    assert report_device_type(cpu_report) == "cpu" and report_device_type(gpu_report) == "cuda"
    assert report_device_type({}) is None
    refused = run_charts.all_figures(live, cpu_report)[1]
    assert live_charts.NVML_TITLE not in refused.layout.title.text and not refused.data
    assert "measured on the CPU, yet it holds NVML" in refused.layout.annotations[0].text.replace("<br>", " ")
    drawn = run_charts.all_figures(live, gpu_report)[1]
    assert drawn.layout.title.text.startswith("GPU utilization (NVML") and drawn.data
    cpu_samples = {**live, "monitor": {"source": "cpu", "samples": [{**s, "gpu": None} for s in samples]}}
    assert not live_charts.device_figure(cpu_samples, "cuda").data
    assert live_charts.device_figure(cpu_samples, "cpu").layout.title.text == live_charts.CPU_TITLE
    assert live_charts.device_figure(live).data, "a live run's samples are the server's own: drawn"


def test_on_the_host_clock_a_pipelined_loops_late_read_steps_are_left_out_and_said_why():
    """Issue 60: on the CPU the pipelined loop's last `lag` steps showed ~0 ms (their tokens are read together at the
    end) and its first one held `lag` steps' work."""
    pipelined = [6.0] + [1.2] * 20 + [0.01] * 4
    report = {"runs": [run("naive", 0, [1.3] * 25, clock="host"), run("pipelined", 0, pipelined, clock="host")],
              "request": {"options": {"lag": 4}}}
    latency, gap = step_charts.step_latency_figure(report), step_charts.gap_figure(report)
    shown = {trace.name: list(trace.x) for trace in latency.data}
    assert shown["pipelined"] == [1.2] * 20 and len(shown["naive"]) == 25, "naive reads every step: all of it"
    drawn = {trace.name: trace for trace in gap.data}
    assert list(drawn["pipelined"].y) == [1.2] * 20 and list(drawn["pipelined"].x) == list(range(2, 22))
    for fig in (latency, gap):
        assert fig.layout.title.subtitle.text.replace("<br>", " ").startswith(
            "Left out of pipelined: the first step and the last 4 steps. It reads tokens 4 steps late")
    on_gpu = {"runs": [run("pipelined", 0, pipelined)], "request": {"options": {"lag": 4}}}
    assert len(step_charts.step_latency_figure(on_gpu).data[0].x) == len(pipelined), "CUDA events time every step"


def test_every_contestant_under_load_has_a_colour_of_its_own():
    colours = [load_charts.COLORS.get(name) for name in CONTESTANT_CHOICES]
    assert None not in colours and len(set(colours)) == len(colours)
