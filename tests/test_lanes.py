"""The timeline chart (dashboard.lanes) from hand-built reports that follow the timeline contract: the lanes of both
loops, the waits and gaps drawn, the first view's steps, the stated means, the CPU and TP cases, old reports."""

from __future__ import annotations

import copy
import json
import re
import statistics
import time
from pathlib import Path

import numpy as np
import pytest

from core.report import summarize
from dashboard import charts, lanes
from tests import lanes_reports

pytestmark = pytest.mark.usefixtures("validated")  # figures are built with plotly's validation on


def lane_labels(fig) -> list[str]:
    return [re.sub(r"<[^>]+>", "", text) for text in fig.layout.yaxis.ticktext]


def trace(fig, name: str):
    matches = [t for t in fig.data if t.name == name]
    assert len(matches) == 1, f"{name!r} in {[t.name for t in fig.data]}"
    return matches[0]


def rectangles(bars) -> list[tuple[float, float]]:
    """(start, end) of each rectangle of a filled bar trace: a comb of four corners per rectangle."""
    x = np.asarray(bars.x, dtype=np.float64).reshape(-1, 4)
    y = np.asarray(bars.y, dtype=np.float64).reshape(-1, 4)
    assert (x[:, 0] == x[:, 1]).all() and (x[:, 2] == x[:, 3]).all()
    assert (y[:, 0] == y[:, 3]).all() and (y[:, 1] == y[:, 2]).all() and (y[:, 0] != y[:, 1]).all()
    return [(float(a), float(b)) for a, b in x[:, 1:3]]


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


def stated(fig) -> dict[str, dict[str, list[str]]]:
    """The statistics block as {loop: {"host wait" | "device gap" | "steps": [window, trial]}}."""
    table: dict[str, dict[str, list[str]]] = {}
    loop = None
    for html_line in fig.layout.annotations[0].text.split("<br>"):
        line = re.sub(r"<[^>]+>", "", html_line).replace(lanes.NBSP, " ")
        match = re.match(r"^(naive|pipelined)?\s*(host wait|device gap|steps)\s+(\S+)\s+(\S+)$", line)
        if match:
            loop = match.group(1) or loop
            table.setdefault(loop, {})[match.group(2)] = [match.group(3), match.group(4)]
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
    fig = lanes.lanes_figure(cuda_report)
    assert lane_labels(fig) == ["naive · host", "naive · GPU", "pipelined · host", "pipelined · GPU"]
    ticktext, tickvals = fig.layout.yaxis.ticktext, fig.layout.yaxis.tickvals
    assert all(charts.COLORS["naive"] in t for t in ticktext[:2])
    assert all(charts.COLORS["pipelined"] in t for t in ticktext[2:])
    top, bottom = fig.layout.yaxis.range
    assert top > bottom and list(tickvals) == sorted(tickvals), "y runs downwards: naive's lanes on top"
    bands = [s for s in fig.layout.shapes if s.type == "rect"]
    assert [b.fillcolor for b in bands] == [charts.COLORS["naive"], charts.COLORS["pipelined"]]
    assert fig.layout.showlegend is False, "the lane labels and colours tell the loops apart"
    key = fig.layout.annotations[0].text
    assert all(line in key for line in lanes.SPAN_KEY) and lanes.QUEUED_KEY not in key


def test_the_host_lane_has_every_queue_span_wait_and_known_tick(cuda_report):
    fig = lanes.lanes_figure(cuda_report)
    for name in ("naive", "pipelined"):
        t = charts.representative_run(cuda_report, name)["timings"]
        queued = rectangles(trace(fig, f"{name} · host queues a step"))
        assert same_spans(queued, t["host_step_start_ms"], t["host_queued_ms"])
        waits = rectangles(trace(fig, f"{name} · host blocked waiting"))
        assert same_spans(waits, t["host_wait_start_ms"], t["host_known_ms"])
        assert trace(fig, f"{name} · host blocked waiting").fillpattern.shape == "/"
        assert tick_times(fig, f"{name} · tokens known") == pytest.approx(t["host_known_ms"], abs=1e-3)


def test_naive_has_a_device_gap_at_every_step_and_pipelined_none(cuda_report):
    fig = lanes.lanes_figure(cuda_report)
    naive = charts.representative_run(cuda_report, "naive")["timings"]
    busy = rectangles(trace(fig, "naive · GPU busy"))
    assert same_spans(busy, naive["device_start_ms"], naive["device_end_ms"])
    idle = rectangles(trace(fig, "naive · GPU idle"))
    assert len(idle) == naive["computed_steps"] - 1
    assert same_spans(idle, naive["device_end_ms"], naive["device_start_ms"][1:])
    assert trace(fig, "naive · GPU idle").fillpattern.shape == "/", "gaps are hatched"
    assert rectangles(trace(fig, "pipelined · GPU idle")) == []
    pipelined = charts.representative_run(cuda_report, "pipelined")["timings"]
    assert len(rectangles(trace(fig, "pipelined · GPU busy"))) == pipelined["computed_steps"], "overshoot included"


# ------------------------------------------------------------------------------------------------ first view

@pytest.mark.parametrize("kept", [64, 256, 4096])
def test_the_first_view_holds_10_to_20_decode_steps_of_each_loop_from_the_middle(kept):
    report = lanes_reports.report(kept, trials=1)
    fig = lanes.lanes_figure(report)
    view = list(fig.layout.xaxis.range)
    for name in ("naive", "pipelined"):
        run = charts.representative_run(report, name)
        steps = steps_in_view(run, view)
        assert 10 <= len(steps) <= 20, (name, len(steps))
        assert 0.25 * kept <= statistics.median(steps) <= 0.75 * kept, "from the middle of the trial"
    assert fig.layout.xaxis.rangeslider.visible, "the range slider reaches the whole trial"
    last_known = max(run["timings"]["host_known_ms"][-1] for run in report["runs"])
    drawn_to = max(np.max(np.asarray(t.x, dtype=float)) for t in fig.data if len(t.x))
    assert drawn_to >= last_known - 1e-3, "all steps drawn"


def test_a_4096_step_trial_is_a_few_traces_and_builds_fast(monkeypatch):
    report = lanes_reports.report(4096, trials=3)
    fig = lanes.lanes_figure(report)
    assert len(fig.data) == 10, "per loop: queue and wait bars; busy, idle and still-queued bars per device lane"
    assert len(fig.layout.shapes) == 4, "per loop: a band and one path of token-known ticks"
    for bars in fig.data:  # plotly.js draws one SVG path per gap-separated segment: 4096 of them took seconds
        assert not np.isnan(np.asarray(bars.x, dtype=float)).any(), bars.name
    monkeypatch.setattr(charts, "VALIDATE", False)
    lanes.lanes_figure(report)
    best = min(_seconds(lambda: lanes.lanes_figure(report)) for _ in range(3))
    assert best < 0.1, f"{best * 1000:.0f} ms to build the figure of a 4096-step run"


def _seconds(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


# ------------------------------------------------------------------------------------------------ stated means

def test_the_stated_means_are_the_datas_over_the_window_and_the_trial(cuda_report):
    fig = lanes.lanes_figure(cuda_report)
    table = stated(fig)
    view = list(fig.layout.xaxis.range)
    for name in ("naive", "pipelined"):
        run = charts.representative_run(cuda_report, name)
        window = steps_in_view(run, view)
        whole = list(range(1, run["timings"]["kept_steps"]))
        for column, steps in ((0, window), (1, whole)):
            wait, gap = expected_means(run, steps)
            assert table[name]["host wait"][column] == f"{wait:,.1f}"
            assert table[name]["device gap"][column] == f"{gap:,.1f}"
            assert table[name]["steps"][column] == f"{steps[0]}-{steps[-1]}"
    assert float(table["naive"]["host wait"][0]) > 100 and float(table["naive"]["device gap"][0]) > 100
    assert float(table["pipelined"]["host wait"][0]) < 10 and table["pipelined"]["device gap"] == ["0.0", "0.0"]


def test_the_trials_mean_gap_is_the_summarys_idle_gap_for_that_trial(cuda_report):
    means = lanes.lanes_means(cuda_report)
    for name in ("naive", "pipelined"):
        run = charts.representative_run(cuda_report, name)
        assert means[name]["trial"].gap_us == pytest.approx(summarize([run])["gpu_gap_ms_mean"] * 1000, abs=1e-6)
    single = lanes_reports.report(128, trials=1)
    for name in ("naive", "pipelined"):
        assert lanes.lanes_means(single)[name]["trial"].gap_us == \
            pytest.approx(single["summary"][name]["gpu_gap_ms_mean"] * 1000, abs=1e-6)


# ------------------------------------------------------------------------------------------------ CPU, TP, old

def test_on_the_cpu_the_device_lane_is_the_hosts_compute_and_says_so():
    report = lanes_reports.report(64, cpu=True)
    fig = lanes.lanes_figure(report)
    assert lane_labels(fig) == ["naive · host", "naive · CPU", "pipelined · host", "pipelined · CPU"]
    assert "device = host (CPU)" in fig.layout.annotations[0].text.replace(lanes.NBSP, " ")
    run = charts.representative_run(report, "naive")
    t = run["timings"]
    compute = rectangles(trace(fig, "naive · host computes (device = host)"))
    assert same_spans(compute, t["host_step_start_ms"], t["host_queued_ms"])
    wait, gap = expected_means(run, list(range(1, t["kept_steps"])))
    assert stated(fig)["naive"]["host wait"][1] == f"{wait:,.1f}"
    assert stated(fig)["naive"]["device gap"][1] == f"{gap:,.1f}"
    assert not any("GPU" in label for label in lane_labels(fig))


def test_tensor_parallel_gets_one_device_lane_per_rank():
    report = lanes_reports.report(64, ranks=2)
    fig = lanes.lanes_figure(report)
    assert lane_labels(fig) == ["naive · host", "naive · GPU 0", "naive · GPU 1", "pipelined · host",
                                "pipelined · GPU 0", "pipelined · GPU 1"]
    rank1 = charts.representative_run(report, "naive")["timings"]["rank_device_spans"][1]
    assert same_spans(rectangles(trace(fig, "naive · GPU 1 busy")), rank1["device_start_ms"], rank1["device_end_ms"])
    assert len(rectangles(trace(fig, "naive · GPU 1 idle"))) == 63
    # The stated gap is rank 0's, the one the summary's idle gap measures.
    run = charts.representative_run(report, "naive")
    assert lanes.lanes_means(report)["naive"]["trial"].gap_us == \
        pytest.approx(summarize([run])["gpu_gap_ms_mean"] * 1000, abs=1e-6)


def test_an_old_report_draws_queued_and_known_ticks_and_says_what_is_missing(cuda_report):
    old = lanes_reports.without_new_fields(cuda_report)
    assert lanes.lanes_note(cuda_report) is None
    note = lanes.lanes_note(old)
    assert note == lanes.OLD_REPORT_NOTE and "\n" not in note
    fig = lanes.lanes_figure(old)
    assert lane_labels(fig) == ["naive · host", "pipelined · host"]
    t = charts.representative_run(old, "naive")["timings"]
    assert tick_times(fig, "naive · step queued") == pytest.approx(t["host_queued_ms"], abs=1e-3)
    assert tick_times(fig, "naive · tokens known") == pytest.approx(t["host_known_ms"], abs=1e-3)
    table = stated(fig)
    assert table["naive"]["host wait"] == ["–", "–"]
    assert table["naive"]["device gap"] == ["–", f"{statistics.fmean(t['gpu_gap_ms']) * 1000:,.1f}"]
    assert fig.layout.xaxis.range is not None, "a first view from the known times"
    key = fig.layout.annotations[0].text
    assert lanes.QUEUED_KEY in key and lanes.SPAN_KEY[0] not in key


def test_timestamps_that_do_not_fit_together_are_treated_as_missing(cuda_report):
    broken = copy.deepcopy(cuda_report)
    for run in broken["runs"]:
        run["timings"]["host_step_start_ms"] = run["timings"]["host_step_start_ms"][:-3]
    assert lanes.lanes_note(broken) == lanes.OLD_REPORT_NOTE
    assert lane_labels(lanes.lanes_figure(broken)) == ["naive · host", "pipelined · host"]


def test_no_loop_runs_give_a_placeholder_and_one_loop_is_drawn_alone():
    empty = lanes.lanes_figure({})
    assert not empty.data and "after each loop's first trial" in empty.layout.annotations[0].text
    report = lanes_reports.report(32, trials=1, loops=("naive",))
    assert lane_labels(lanes.lanes_figure({"runs": report["runs"]})) == ["naive · host", "naive · GPU"]
    assert lanes.lanes_note({"runs": []}) is None


def test_on_the_h200_the_naive_steps_spans_open_long_before_the_host_has_queued_them():
    """reduce-overhead, call 19: naive's device spans open ~0.6 ms before its work starts (the device waits for the
    launch inside the step, which the gap between steps does not show); pipelined's next to none. The chart states
    the mean as 'idle inside' and draws that part of each span pale."""
    path = Path(__file__).resolve().parents[1] / "benchmarks/results/h200-2026-11-30-b/call19-ro-1b.json"
    report = json.loads(path.read_text(encoding="utf-8"))
    means = lanes.lanes_means(report)
    assert means["naive"]["trial"].inside_us > 500 and means["pipelined"]["trial"].inside_us < 50
    fig = lanes.lanes_figure(report)
    assert "idle\xa0inside" in fig.layout.annotations[0].text
    assert any(t.name == "naive · GPU waiting inside the step" for t in fig.data)


def test_the_audits_reads_are_marked_on_the_host_lane_at_their_place_in_the_step():
    report = lanes_reports.report(32, trials=1)
    run = next(r for r in report["runs"] if r["contestant"] == "naive")
    starts = [t + 1000.0 for t in run["timings"]["host_step_start_ms"]]  # the audited run began later
    report["sync_audit"] = {"naive": {"step_starts_ms": starts, "events": [
        {"step": step, "t_ms": starts[step] + 0.25, "site": 0} for step in range(1, 31)],
        "sites": [{"index": 0, "kind": "item", "file": "loop.py", "line": 7, "code": "flag.item()"}]}}
    marks = next(t for t in lanes.lanes_figure(report).data if t.name == "naive · sync (audit)")
    expected = [t + 0.25 for t in run["timings"]["host_step_start_ms"][1:31]]
    assert list(marks.x) == pytest.approx(expected, abs=1e-3)
    assert "item at loop.py:7" in marks.text[0] and "flag.item()" in marks.text[0]


def test_the_kernel_trials_kernels_are_drawn_inside_the_steps_they_cover():
    report = lanes_reports.report(32, trials=1)
    naive = next(r for r in report["runs"] if r["contestant"] == "naive")["timings"]
    report["kernel_trial"] = {"naive": {"kernel_busy_ms_per_step": 0.1, "intervals": {"first_step": 5, "steps": [
        {"step": step, "span_ms": 2.0, "busy": [[0.0, 0.5], [1.5, 2.0]]} for step in (5, 6)]}}}
    fig = lanes.lanes_figure(report)
    kernels = next(t for t in fig.data if t.name == "naive · GPU kernels (kernel trial)")
    start, end = naive["device_start_ms"][5], naive["device_end_ms"][5]
    scale = (end - start) / 2.0
    assert kernels.x[:4].tolist() == pytest.approx([start, start, start + 0.5 * scale, start + 0.5 * scale],
                                                   abs=1e-3)
    assert "steps 5-6: the kernel trial's kernels" in fig.layout.annotations[0].text.replace(
        "\xa0", " ")
    lines = re.sub(r"<[^>]+>", "", fig.layout.annotations[0].text.replace("<br>", "\n")).splitlines()
    assert max(map(len, lines)) <= 50, "every line of the block fits a phone's chart"
