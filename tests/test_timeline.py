"""The timeline chart (dashboard.views.timeline) from hand-built reports that follow the timeline contract: the lanes of
both loops, the waits and gaps drawn, the first view's steps, the stated means, the legend and hovers, the colours, the
CPU and TP cases, old reports, two reports on one axis."""

from __future__ import annotations

import copy
import html
import itertools
import json
import re
import statistics
from pathlib import Path

import numpy as np
import pytest

from core.documents.files import read_report_bytes
from core.report.build import summarize
from core.report.explain import contestant_waits
from dashboard.views import charts, step_charts, timeline, timeline_trials
from tests import timeline_reports

MAX_LINE = 50  # characters: a line of the statistics block that fits a phone's chart
NO_MEANS = timeline_trials.Means(None, None, None, None)


def timeline_means(report: dict) -> dict[str, dict[str, timeline_trials.Means]]:
    """Per loop, the means the chart states: over the first view ("window") and the whole trial ("trial")."""
    trials = timeline_trials.loop_trials(report)
    view = timeline_trials.first_view(trials)
    return {t.name: {"window": timeline_trials.window_means(t, view) if view else NO_MEANS,
                     "trial": timeline_trials.window_means(t, None)} for t in trials}

pytestmark = pytest.mark.usefixtures("validated")  # figures are built with plotly's validation on


def lane_labels(fig) -> list[str]:
    return [re.sub(r"<[^>]+>", "", text) for text in fig.layout.yaxis.ticktext]


def trace(fig, name: str):
    matches = [t for t in fig.data if t.name == name]
    assert len(matches) == 1, f"{name!r} in {[t.name for t in fig.data]}"
    return matches[0]


def rectangles(bars) -> list[tuple[float, float]]:
    """(start, end) of each rectangle of a filled bar trace: a comb of four corners per rectangle, five (a hover
    point in the middle of its far edge) where the bars have a hover."""
    corners = 5 if bars.customdata is not None else 4
    x = np.asarray(bars.x, dtype=np.float64).reshape(-1, corners)
    y = np.asarray(bars.y, dtype=np.float64).reshape(-1, corners)
    assert (x[:, 0] == x[:, 1]).all() and (x[:, -2] == x[:, -1]).all()
    assert (y[:, 0] == y[:, -1]).all() and (y[:, 1:-1] == y[:, 1:2]).all() and (y[:, 0] != y[:, 1]).all()
    if corners == 5:
        assert np.allclose(x[:, 2], (x[:, 1] + x[:, 3]) / 2, atol=1e-3), "the hover point halfway along"
    return [(float(a), float(b)) for a, b in x[:, [1, -2]]]


def hover_numbers(bars) -> tuple[list[int], list[float]]:
    """Each rectangle's (step, µs) from its hover data: the same on its five corners."""
    data = np.asarray(bars.customdata, dtype=np.float64).reshape(-1, 5, 2)
    assert (data == data[:, :1, :]).all()
    return [int(v) for v in data[:, 0, 0]], [float(v) for v in data[:, 0, 1]]


def tick_times(fig, name: str) -> list[float]:
    """The time of each vertical tick of the tick shape `name` ("M<t>,<low>V<high>" each)."""
    shapes = [s for s in fig.layout.shapes if s.name == name]
    assert len(shapes) == 1, name
    ticks = re.findall(r"M([-\d.]+),([-\d.]+)V([-\d.]+)", shapes[0].path)
    assert "".join(f"M{t},{a}V{b}" for t, a, b in ticks) == shapes[0].path
    return [float(t) for t, _, _ in ticks]


def same_spans(drawn: list[tuple[float, float]], starts: list[float], ends: list[float]) -> bool:
    """The drawn rectangles are these spans, to float32's precision."""
    expected = list(zip(starts, ends))
    return len(drawn) == len(expected) and np.allclose(np.array(drawn).reshape(-1, 2), np.array(expected), atol=1e-3)


def block_lines(fig) -> list[str]:
    """The statistics block's lines as they read."""
    return [re.sub(r"<[^>]+>", "", line).replace(timeline.NBSP, " ") for line in fig.layout.annotations[0].text.split(
        "<br>")]


def stated(fig) -> dict[str, dict[str, str]]:
    """The statistics block's table as {row: {column: cell}}, a row per loop (in a comparison "label · loop"); and
    the steps its means cover under "steps" where it names them."""
    lines = block_lines(fig)
    header = next(i for i, line in enumerate(lines) if line.split() and line.split()[0] == "host")
    columns = re.findall(r"host wait|device gap|idle inside", lines[header])
    table: dict[str, dict[str, str]] = {}
    steps = re.search(r"mean of steps (\d+-\d+)", lines[header - 1])
    group = None
    for line in lines[header + 1:]:
        cells = line.split()
        if cells and cells[0] in ("naive", "pipelined") and len(cells) == len(columns) + 1:
            row = f"{group} · {cells[0]}" if group and line.startswith("  ") else cells[0]
            table[row] = dict(zip(columns, cells[1:]))
            if steps:
                table[row]["steps"] = steps.group(1)
        elif len(cells) != len(columns) + 1 and not line.startswith("  ") and "=" not in line:
            group = line.strip()
    return table


def steps_in_view(run: dict, view: list[float]) -> list[int]:
    starts = run["timings"]["host_step_start_ms"]
    kept = run["timings"]["kept_steps"]
    return [i for i in range(1, kept) if view[0] <= starts[i] < view[1]]


def expected_means(run: dict, steps: list[int]) -> tuple[float, float]:
    """Mean host wait and device gap in µs over `steps`, straight from the contract's fields."""
    t = run["timings"]
    starts, ends = (t["device_start_ms"], t["device_end_ms"]) if t["device_start_ms"] else \
        (t["host_step_start_ms"], t["host_queued_ms"])
    wait = statistics.fmean(t["host_known_ms"][i] - t["host_wait_start_ms"][i] for i in steps)
    gap = statistics.fmean(max(0.0, starts[i] - ends[i - 1]) for i in steps)
    return wait * 1000, gap * 1000


# ------------------------------------------------------------------------------------------------ lanes

def test_each_loop_has_a_host_lane_and_a_device_lane_naive_above(cuda_report):
    fig = timeline.timeline_figure(cuda_report)
    assert lane_labels(fig) == ["naive · host", "naive · GPU", "pipelined · host", "pipelined · GPU"]
    ticktext, tickvals = fig.layout.yaxis.ticktext, fig.layout.yaxis.tickvals
    assert all(timeline.LOOP_COLORS["naive"] in t for t in ticktext[:2])
    assert all(timeline.LOOP_COLORS["pipelined"] in t for t in ticktext[2:])
    top, bottom = fig.layout.yaxis.range
    assert top > bottom and list(tickvals) == sorted(tickvals), "y runs downwards: naive's lanes on top"
    bands = [s for s in fig.layout.shapes if s.type == "rect"]
    assert [b.fillcolor for b in bands] == [timeline.LOOP_COLORS["naive"], timeline.LOOP_COLORS["pipelined"]]
    assert fig.layout.showlegend is False, "the lane labels and colours tell the loops apart"
    legend = block_lines(fig)
    assert timeline.SPAN_KEY in legend and timeline.LAUNCH_KEY in legend and timeline.QUEUED_KEY not in legend


def test_the_host_lane_has_every_queue_span_wait_and_known_tick(cuda_report):
    fig = timeline.timeline_figure(cuda_report)
    for name in ("naive", "pipelined"):
        t = step_charts.representative_run(cuda_report, name)["timings"]
        queued = rectangles(trace(fig, f"{name} · host queues a step"))
        assert same_spans(queued, t["host_step_start_ms"], t["host_queued_ms"])
        waits = rectangles(trace(fig, f"{name} · host blocked waiting"))
        assert same_spans(waits, t["host_wait_start_ms"], t["host_known_ms"])
        assert trace(fig, f"{name} · host blocked waiting").fillpattern.shape == "/"
        assert tick_times(fig, f"{name} · tokens known") == pytest.approx(t["host_known_ms"], abs=1e-3)


def test_naive_has_a_device_gap_at_every_step_and_pipelined_none(cuda_report):
    fig = timeline.timeline_figure(cuda_report)
    naive = step_charts.representative_run(cuda_report, "naive")["timings"]
    busy = rectangles(trace(fig, "naive · GPU busy"))
    assert same_spans(busy, naive["device_start_ms"], naive["device_end_ms"])
    idle = rectangles(trace(fig, "naive · GPU idle"))
    assert len(idle) == naive["computed_steps"] - 1
    assert same_spans(idle, naive["device_end_ms"], naive["device_start_ms"][1:])
    assert trace(fig, "naive · GPU idle").fillpattern.shape == "/", "gaps are hatched"
    assert rectangles(trace(fig, "pipelined · GPU idle")) == []
    pipelined = step_charts.representative_run(cuda_report, "pipelined")["timings"]
    assert len(rectangles(trace(fig, "pipelined · GPU busy"))) == pipelined["computed_steps"], "overshoot included"


# ------------------------------------------------------------------------------------------------ first view

@pytest.mark.parametrize("kept", [64, 256, 4096])
def test_the_first_view_holds_10_to_20_decode_steps_of_each_loop_from_the_middle(kept):
    report = timeline_reports.report(kept, trials=1)
    fig = timeline.timeline_figure(report)
    view = list(fig.layout.xaxis.range)
    for name in ("naive", "pipelined"):
        run = step_charts.representative_run(report, name)
        steps = steps_in_view(run, view)
        assert 10 <= len(steps) <= 20, (name, len(steps))
        assert 0.25 * kept <= statistics.median(steps) <= 0.75 * kept, "from the middle of the trial"
    assert fig.layout.xaxis.rangeslider.visible, "the range slider reaches the whole trial"
    last_known = max(run["timings"]["host_known_ms"][-1] for run in report["runs"])
    drawn_to = max(np.max(np.asarray(t.x, dtype=float)) for t in fig.data if len(t.x))
    assert drawn_to >= last_known - 1e-3, "all steps drawn"


def test_a_4096_step_trial_is_a_few_traces_of_typed_arrays(monkeypatch):
    """What keeps a long trial's figure fast, checked as structure rather than timed (a busy machine times anything
    slowly): a fixed number of traces and shapes, no gap-separated segments, and coordinates and hover data as
    float32 arrays, which go to the page as base64 without per-number Python work."""
    report = timeline_reports.report(4096, trials=3)
    fig = timeline.timeline_figure(report)
    assert len(fig.data) == 10, "per loop: queue and wait bars; busy, idle and still-queued bars per device lane"
    assert len(fig.layout.shapes) == 4, "per loop: a band and one path of token-known ticks"
    for bars in fig.data:  # plotly.js draws one SVG path per gap-separated segment: 4096 of them took seconds
        assert not np.isnan(np.asarray(bars.x, dtype=float)).any(), bars.name
    monkeypatch.setattr(charts, "VALIDATE", False)  # as the page builds it
    for bars in timeline.timeline_figure(report).data:
        for values in (bars.x, bars.y, bars.customdata):
            assert isinstance(values, np.ndarray) and values.dtype == np.float32, bars.name


# ------------------------------------------------------------------------------------------------ stated means

def test_the_stated_means_are_the_datas_over_the_trial_and_the_windows_over_the_view(cuda_report):
    fig = timeline.timeline_figure(cuda_report)
    table = stated(fig)
    view = list(fig.layout.xaxis.range)
    means = timeline_means(cuda_report)
    for name in ("naive", "pipelined"):
        run = step_charts.representative_run(cuda_report, name)
        summary = cuda_report["summary"][name]  # the table states the summary's figures: one per loop on the page
        assert table[name]["host wait"] == f"{summary['host_wait_ms_per_step'] * 1000:,.1f}"
        assert table[name]["device gap"] == f"{summary['device_gap_ms_per_step'] * 1000:,.1f}"
        assert "steps" not in table[name]
        window = steps_in_view(run, view)
        wait, gap = expected_means(run, window)
        assert means[name]["window"].wait_us == pytest.approx(wait) and means[name]["window"].gap_us == \
            pytest.approx(gap)
        assert (means[name]["window"].first, means[name]["window"].last) == (window[0], window[-1])
    assert float(table["naive"]["host wait"]) > 100 and float(table["naive"]["device gap"]) > 100
    assert float(table["pipelined"]["host wait"]) < 10 and table["pipelined"]["device gap"] == "0.0"


def test_the_trials_mean_gap_is_the_summarys_idle_gap_for_that_trial(cuda_report):
    means = timeline_means(cuda_report)
    for name in ("naive", "pipelined"):
        run = step_charts.representative_run(cuda_report, name)
        assert means[name]["trial"].gap_us == pytest.approx(summarize([run])["gpu_gap_ms_mean"] * 1000, abs=1e-6)
    single = timeline_reports.report(128, trials=1)
    for name in ("naive", "pipelined"):
        assert timeline_means(single)[name]["trial"].gap_us == \
            pytest.approx(single["summary"][name]["gpu_gap_ms_mean"] * 1000, abs=1e-6)


# ------------------------------------------------------------------------------------------------ CPU, TP, old

def test_on_the_cpu_each_loop_has_one_lane_and_no_device_gap_and_says_why():
    """The host is the device there: a device lane would repeat the host's compute, and the "gap" between its
    spans would be the host's own work (it differs between the loops, which would read like a real difference)."""
    report = timeline_reports.report(64, cpu=True)
    fig = timeline.timeline_figure(report)
    assert lane_labels(fig) == ["naive · host", "pipelined · host"]
    assert timeline.CPU_LINE in block_lines(fig) and timeline.LAUNCH_KEY not in block_lines(fig)
    run = step_charts.representative_run(report, "naive")
    t = run["timings"]
    compute = rectangles(trace(fig, "naive · host computes a step"))
    assert same_spans(compute, t["host_step_start_ms"], t["host_queued_ms"])
    assert stated(fig)["naive"] == {"host wait": f"{report['summary']['naive']['host_wait_ms_per_step'] * 1000:,.1f}"}
    assert not any("gap" in line or "idle" in line for line in block_lines(fig))
    assert not any("idle" in bars.name or "GPU" in bars.name for bars in fig.data)
    assert "device gap:" not in fig.layout.annotations[0].hovertext, "no column of it to define"
    assert all(means["trial"].gap_us is None for means in timeline_means(report).values())


def test_cpu_is_decided_by_the_reports_device_and_by_the_clock_where_it_names_none(cuda_report):
    cpu = timeline_reports.report(64, cpu=True)
    # A CPU report whose runs carry device-like spans is still drawn as the CPU it ran on ...
    spans = copy.deepcopy(cpu)
    for run in spans["runs"]:
        t = run["timings"]
        t["device_start_ms"], t["device_end_ms"] = list(t["host_step_start_ms"]), list(t["host_queued_ms"])
    assert lane_labels(timeline.timeline_figure(spans)) == ["naive · host", "pipelined · host"]
    assert timeline_trials.report_on_cpu(spans) is True and timeline_trials.report_on_cpu(cuda_report) is False
    # ... and a live run's runs, which come without an environment, by their own clock.
    assert timeline_trials.report_on_cpu({"runs": cpu["runs"]}) is None
    assert lane_labels(timeline.timeline_figure({"runs": cpu["runs"]})) == ["naive · host", "pipelined · host"]
    assert lane_labels(timeline.timeline_figure({"runs": cuda_report["runs"]}))[1] == "naive · GPU"


def test_tensor_parallel_gets_one_device_lane_per_rank():
    report = timeline_reports.report(64, ranks=2)
    fig = timeline.timeline_figure(report)
    assert lane_labels(fig) == ["naive · host", "naive · GPU 0", "naive · GPU 1", "pipelined · host",
                                "pipelined · GPU 0", "pipelined · GPU 1"]
    rank1 = step_charts.representative_run(report, "naive")["timings"]["rank_device_spans"][1]
    assert same_spans(rectangles(trace(fig, "naive · GPU 1 busy")), rank1["device_start_ms"], rank1["device_end_ms"])
    assert len(rectangles(trace(fig, "naive · GPU 1 idle"))) == 63
    # The stated gap is rank 0's, the one the summary's idle gap measures.
    run = step_charts.representative_run(report, "naive")
    assert timeline_means(report)["naive"]["trial"].gap_us == \
        pytest.approx(summarize([run])["gpu_gap_ms_mean"] * 1000, abs=1e-6)


def test_an_old_report_draws_queued_and_known_ticks_and_says_what_is_missing(cuda_report):
    old = timeline_reports.without_new_fields(cuda_report)
    assert timeline.timeline_note(cuda_report) is None
    note = timeline.timeline_note(old)
    assert note == timeline.OLD_REPORT_NOTE and "\n" not in note
    fig = timeline.timeline_figure(old)
    assert lane_labels(fig) == ["naive · host", "pipelined · host"]
    t = step_charts.representative_run(old, "naive")["timings"]
    assert tick_times(fig, "naive · step queued") == pytest.approx(t["host_queued_ms"], abs=1e-3)
    assert tick_times(fig, "naive · tokens known") == pytest.approx(t["host_known_ms"], abs=1e-3)
    table = stated(fig)
    assert table["naive"]["host wait"] == "–"
    assert table["naive"]["device gap"] == f"{statistics.fmean(t['gpu_gap_ms']) * 1000:,.1f}"
    assert fig.layout.xaxis.range is not None, "a first view from the known times"
    legend = block_lines(fig)
    assert timeline.QUEUED_KEY in legend and timeline.SPAN_KEY not in legend


def test_timestamps_that_do_not_fit_together_are_treated_as_missing(cuda_report):
    broken = copy.deepcopy(cuda_report)
    for run in broken["runs"]:
        run["timings"]["host_step_start_ms"] = run["timings"]["host_step_start_ms"][:-3]
    assert timeline.timeline_note(broken) == timeline.OLD_REPORT_NOTE
    assert lane_labels(timeline.timeline_figure(broken)) == ["naive · host", "pipelined · host"]


def test_no_loop_runs_give_a_placeholder_and_one_loop_is_drawn_alone():
    empty = timeline.timeline_figure({})
    assert not empty.data and "after each loop's first trial" in empty.layout.annotations[0].text
    report = timeline_reports.report(32, trials=1, loops=("naive",))
    assert lane_labels(timeline.timeline_figure({"runs": report["runs"]})) == ["naive · host", "naive · GPU"]
    assert timeline.timeline_note({"runs": []}) is None


def test_on_the_h200_the_naive_steps_spans_open_long_before_the_host_has_queued_them():
    """reduce-overhead, call 19: naive's device spans open ~0.6 ms before its work starts (the device waits for the
    launch inside the step, which the gap between steps does not show); pipelined's next to none. The chart states
    the mean as 'idle inside' and draws that part of each span pale."""
    path = Path(__file__).resolve().parents[1] / "benchmarks/lab/results/h200-2026-11-30-b/call19-ro-1b.json.gz"
    report = json.loads(read_report_bytes(path))
    means = timeline_means(report)
    assert means["naive"]["trial"].inside_us > 500 and means["pipelined"]["trial"].inside_us < 50
    fig = timeline.timeline_figure(report)
    assert float(stated(fig)["naive"]["idle inside"].replace(",", "")) == pytest.approx(
        contestant_waits(report, "naive")["idle_inside_ms"] * 1000, abs=0.05), "the summary's figure"
    assert any(t.name == "naive · GPU waiting inside the step" for t in fig.data)


def test_the_audits_reads_are_marked_on_the_host_lane_at_their_place_in_the_step():
    report = timeline_reports.report(32, trials=1)
    run = next(r for r in report["runs"] if r["contestant"] == "naive")
    starts = [t + 1000.0 for t in run["timings"]["host_step_start_ms"]]  # the audited run began later
    report["sync_audit"] = {"naive": {"step_starts_ms": starts, "events": [
        {"step": step, "t_ms": starts[step] + 0.25, "site": 0} for step in range(1, 31)],
        "sites": [{"index": 0, "kind": "item", "file": "loop.py", "line": 7, "code": "flag.item()"}]}}
    marks = next(t for t in timeline.timeline_figure(report).data if t.name == "naive · sync (audit)")
    expected = [t + 0.25 for t in run["timings"]["host_step_start_ms"][1:31]]
    assert list(marks.x) == pytest.approx(expected, abs=1e-3)
    assert "item at loop.py:7" in marks.text[0] and "flag.item()" in marks.text[0]


def test_a_replayed_reports_audit_sites_are_escaped_and_clipped_in_their_hovers_and_their_marks_bounded(monkeypatch):
    evil = '<a href="http://evil.example">link</a><img src=x onerror=alert(1)>' * 20_000
    report = timeline_reports.report(32, trials=1)
    starts = next(r for r in report["runs"] if r["contestant"] == "naive")["timings"]["host_step_start_ms"]
    report["sync_audit"] = {"naive": {"step_starts_ms": starts, "events": [
        {"step": step % 31 + 1, "t_ms": starts[step % 31 + 1] + 0.25, "site": 0} for step in range(100)],
        "sites": [{"index": 0, "kind": evil, "file": evil, "line": evil, "code": evil}]}}
    monkeypatch.setattr(timeline_trials, "MAX_SYNC_MARKS", 40)
    marks = next(t for t in timeline.timeline_figure(report).data if t.name == "naive · sync (audit)")
    assert len(marks.text) == len(marks.x) == 40, "at most MAX_SYNC_MARKS reads drawn"
    for text in marks.text:
        assert "<a " not in text and "<img" not in text and "&lt;a href" in text and len(text) < 1_500, text[:200]
        assert "characters in all" in text and ":?<br>" in text, "a line that is not a number is a question mark"


def test_the_kernel_measurements_kernels_are_drawn_inside_the_steps_they_cover():
    report = timeline_reports.report(32, trials=1)
    naive = next(r for r in report["runs"] if r["contestant"] == "naive")["timings"]
    report["kernel_measurement"] = {"naive": {"kernel_busy_ms_per_step": 0.1, "intervals": {"first_step": 5, "steps": [
        {"step": step, "span_ms": 2.0, "busy": [[0.0, 0.5], [1.5, 2.0]]} for step in (5, 6)]}}}
    fig = timeline.timeline_figure(report)
    kernels = next(t for t in fig.data if t.name == "naive · GPU kernels (kernel measurement)")
    start, end = naive["device_start_ms"][5], naive["device_end_ms"][5]
    scale = (end - start) / 2.0
    assert rectangles(kernels)[0] == pytest.approx((start, start + 0.5 * scale), abs=1e-3)
    assert "kernels drawn in steps 5-6 (kernel measurement)" in block_lines(fig)
    assert "kernel measurement:" in fig.layout.annotations[0].hovertext
    assert hover_numbers(kernels)[0] == [5, 5, 6, 6]


# ------------------------------------------------------------------------------------------------ reading it

# Machado, Oliveira and Fernandes (2009), severity 1: what each colour-vision deficiency sees, in linear RGB.
COLOR_VISION = {
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                   [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                     [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                   [0.004733, 0.691367, 0.303900]],
    "typical": np.eye(3).tolist(),
}
TOLD_APART = 40.0  # CIE76 ΔE: the old red and green were 7 apart under deuteranopia


def _seen(hex_color: str, vision: str) -> np.ndarray:
    """The CIELAB colour that a viewer with `vision` sees."""
    c = np.array([int(hex_color[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    linear = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    r, g, b = np.clip(np.array(COLOR_VISION[vision]) @ linear, 0, 1)
    xyz = ((0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047, 0.2126 * r + 0.7152 * g + 0.0722 * b,
           (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883)
    fx, fy, fz = (t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in xyz)
    return np.array([116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)])


def _apart(a: str, b: str) -> dict[str, float]:
    return {vision: float(np.linalg.norm(_seen(a, vision) - _seen(b, vision))) for vision in COLOR_VISION}


def test_the_two_loops_colours_are_told_apart_without_red_green_vision(cuda_report):
    naive, pipelined = timeline.LOOP_COLORS["naive"], timeline.LOOP_COLORS["pipelined"]
    assert min(_apart(naive, pipelined).values()) >= TOLD_APART, _apart(naive, pipelined)
    assert _apart("#d62728", "#2ca02c")["deuteranopia"] < TOLD_APART, "the measure tells the old pair apart"
    for a, b in itertools.combinations([naive, pipelined, timeline.pale(naive), timeline.pale(pipelined)], 2):
        assert min(_apart(a, b).values()) >= 15, (a, b)  # a loop's pale bars stay apart from its solid ones too
    fig = timeline.timeline_figure(cuda_report)
    fills = {bars.fillcolor for bars in fig.data if bars.fillcolor and not bars.fillcolor.startswith("rgba")}
    assert fills == {naive, pipelined, timeline.pale(naive), timeline.pale(pipelined)}


def test_a_second_cue_names_the_loop_on_every_lane_and_every_row(cuda_report):
    for report in (cuda_report, timeline_reports.report(64, cpu=True)):
        fig = timeline.timeline_figure(report)
        labels = lane_labels(fig)
        for name in ("naive", "pipelined"):
            own = [label for label in labels if label.split(" · ")[0] == name]
            assert own and all(timeline.LOOP_COLORS[name] in text for text in fig.layout.yaxis.ticktext
                               if re.sub(r"<[^>]+>", "", text) in own)
            assert name in stated(fig), "the table names each loop too"
        assert all(bars.name.split(" · ")[0] in ("naive", "pipelined") for bars in fig.data)


def test_the_legend_says_in_words_what_solid_hatched_and_pale_mean(cuda_report):
    legend = block_lines(timeline.timeline_figure(cuda_report))
    assert "solid = working · hatched = waiting" in legend
    assert "pale = the device waiting for its launch" in legend
    fig = timeline.timeline_figure(cuda_report)
    for name in ("naive", "pipelined"):
        assert trace(fig, f"{name} · host queues a step").fillpattern.shape is None
        assert trace(fig, f"{name} · host blocked waiting").fillpattern.shape == "/"
        assert trace(fig, f"{name} · GPU idle").fillpattern.shape == "/"
        pale = timeline.pale(timeline.LOOP_COLORS[name])
        assert trace(fig, f"{name} · GPU waiting inside the step").fillcolor == pale
    assert len(legend) <= 9, "the table and the legend in a few lines, not fourteen"
    for word in ("window", "trial ", "launch wait", "GPU spans on the host clock"):
        assert not any(word in line for line in legend), word


def test_each_bars_hover_names_its_step_and_defines_its_number(cuda_report):
    fig = timeline.timeline_figure(cuda_report)
    naive = step_charts.representative_run(cuda_report, "naive")["timings"]
    steps, waits = hover_numbers(trace(fig, "naive · host blocked waiting"))
    assert steps == list(range(naive["kept_steps"]))
    assert waits == pytest.approx([(k - w) * 1000 for w, k in zip(naive["host_wait_start_ms"],
                                                                  naive["host_known_ms"])], abs=0.05)
    steps, gaps = hover_numbers(trace(fig, "naive · GPU idle"))
    assert steps == list(range(1, naive["computed_steps"]))
    assert gaps == pytest.approx([(b - e) * 1000 for e, b in zip(naive["device_end_ms"],
                                                                 naive["device_start_ms"][1:])], abs=0.05)
    for bars in fig.data:
        if bars.customdata is None:
            assert bars.name.endswith("sync (audit)") and bars.text, bars.name  # the reads have their own text
            continue
        template = bars.hovertemplate
        assert "step %{customdata[0]:d}" in template and "%{customdata[1]:,.1f} µs: " in template, template
        assert bars.hoveron == "points"
    definitions = fig.layout.annotations[0].hovertext
    for column in ("host wait", "device gap", "idle inside"):
        assert f"{column}:" in definitions
    assert "±2.1 µs" in definitions, "how far the GPU's times can be off the host's, defined"
    assert fig.layout.hoverdistance >= 30


def test_every_line_of_the_block_fits_a_phones_chart(cuda_report):
    """The browser test at phone width caught longer lines; each variant of the block is checked here."""
    kernels = timeline_reports.report(32, trials=1)
    kernels["kernel_measurement"] = {"naive": {"kernel_busy_ms_per_step": 0.1, "intervals": {"steps": [
        {"step": step, "span_ms": 2.0, "busy": [[0.0, 0.5]]} for step in range(1000, 1002)]}}}
    kernels["sync_audit"] = {"naive": {"step_starts_ms": [0.0, 1.0], "events": [{"step": 1, "t_ms": 1.2, "site": 0}],
                                       "sites": [{"index": 0, "kind": "item", "file": "x.py", "line": 1}]}}
    old = timeline_reports.without_new_fields(cuda_report)
    cpu = timeline_reports.report(64, cpu=True)
    two_ranks = timeline_reports.report(64, ranks=2)
    figures = [timeline.timeline_figure(r) for r in (cuda_report, old, cpu, kernels, two_ranks)]
    figures.append(timeline.diff_timelines(cuda_report, cpu, "a very long label for run A", "run 7"))
    for fig in figures:
        assert max(map(len, block_lines(fig))) <= MAX_LINE, block_lines(fig)


def test_two_reports_are_drawn_on_one_axis_each_lane_and_row_named_by_its_label(cuda_report):
    other = timeline_reports.report(128, trials=1)
    fig = timeline.diff_timelines(cuda_report, other, "static", "dyn <b>x</b>")
    assert [html.unescape(label) for label in lane_labels(fig)] == [
        f"{label} · {lane}" for label in ("static", "dyn <b>x</b>")
                                for lane in ("naive · host", "naive · GPU", "pipelined · host", "pipelined · GPU")]
    assert "<b>x</b>" not in "".join(fig.layout.yaxis.ticktext), "a label is shown as text"
    table = stated(fig)
    for label, report in (("static", cuda_report), ("dyn <b>x</b>", other)):
        for name in ("naive", "pipelined"):
            run = step_charts.representative_run(report, name)
            wait, gap = expected_means(run, list(range(1, run["timings"]["kept_steps"])))
            row = table[f"{html.escape(label, quote=False)} · {name}"]
            assert row["host wait"] == f"{wait:,.1f}" and row["device gap"] == f"{gap:,.1f}"
    ys = sorted(fig.layout.yaxis.tickvals)
    assert list(fig.layout.yaxis.tickvals) == ys and len(set(ys)) == 8, "one y axis, lanes apart"
    assert "xaxis2" not in fig.layout.to_plotly_json(), "one shared time axis"
    cut = lane_labels(timeline.diff_timelines(cuda_report, other, "x" * 30, "b"))[0]
    assert cut == "x" * (timeline.DIFF_LABEL - 1) + "… · naive · host", "a long label is cut"
    names = [bars.name for bars in fig.data]
    assert len(names) == len(set(names)), "every trace named by its run"
    assert timeline.diff_timelines({}, {}, "a", "b").layout.annotations[0].text.startswith("The timeline appears")
