"""Reports as the page reads and shows them: summary rows and the headline, NVML means, history rows and CSV, and
replaying saved reports."""

from __future__ import annotations

import copy
import csv
import functools
import io
import json
import random
import re
from pathlib import Path

import pytest

from core.compare import compare
from core.documents.files import MAX_REPORT_BYTES, read_report_bytes
from core.documents.kinds import PAGE_REPORT_SCHEMA
from core.request.options import BenchRequest, GenerationOptions
from dashboard.service.page_record import (
    PageRecord,
    open_report,
    page_report,
    parse_report,
    report_notices,
    split_report,
)
from dashboard.service.rate_series import live_series_from_report
from dashboard.service.run_history import history_row
from dashboard.views.report_text import headline_md
from dashboard.views.summary_table import SUMMARY_HEADERS, summary_rows
from tests.conftest import TINY, bench_report, fast_settings, page_request
from tests.test_dashboard_client import text_of

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def step_graph_on_cpu(tiny):
    """A run that asked for step-graph (CUDA graphs) on the CPU, with generate() as a contestant."""
    request = BenchRequest(prompt="Hello there", trials=1, contestants=("naive", "pipelined", "hf"),
                           options=GenerationOptions(max_new_tokens=6, cache="static", compile="step-graph"))
    return request, json.loads(json.dumps(compare(tiny, request)))


def test_the_report_records_what_each_contestant_ran_with(step_graph_on_cpu):
    _, report = step_graph_on_cpu
    assert report["request"]["options"]["compile"] == "step-graph"  # what was asked stays recorded
    loops = report["effective"]["pipelined"]
    assert loops["options"]["compile"] == "off" and "needs an NVIDIA GPU" in loops["notices"][0]
    assert report["effective"]["hf"]["options"]["compile"] == "off"
    assert "generate() compiles only on GPUs" in report["effective"]["hf"]["notices"][0]


def test_a_history_row_records_the_compile_mode_that_ran_with_the_note(step_graph_on_cpu):
    request, report = step_graph_on_cpu
    row = history_row(1, "done", request, TINY, report, None)
    assert row["compile"] == "off" and row["compile_asked"] == "step-graph"
    assert "running without compile (mode 'off') on the CPU" in row["notes"]
    assert "generate() compiles only on GPUs" in row["notes"]


def test_a_run_stopped_before_its_report_records_what_the_device_made_of_the_request():
    request, _ = page_request(dict(compile="reduce-overhead", streams=2))
    row = history_row(2, "cancelled", request, TINY, None, "cancelled", device_type="cpu")
    assert (row["compile"], row["compile_asked"], row["streams"]) == ("default", "reduce-overhead", 1)
    assert "CUDA graphs" in row["notes"] and "streams=1" in row["notes"]
    on_gpu = history_row(3, "cancelled", request, TINY, None, "cancelled", device_type="cuda")
    assert (on_gpu["compile"], on_gpu["streams"], on_gpu["notes"]) == ("reduce-overhead", 2, None)


def test_the_history_csv_and_json_of_a_served_run_say_what_ran(tiny_runner):
    job = tiny_runner.submit(fast_settings(compile="step-graph", cache="static"), owner="compile-check")
    job.wait(300)
    row = next(csv.DictReader(io.StringIO(tiny_runner.history_csv("compile-check"))))
    assert (row["compile"], row["compile_asked"]) == ("off", "step-graph")
    assert "CUDA graph" in row["notes"]
    saved = json.loads(tiny_runner.history_json("compile-check"))["runs"][0]
    assert saved["compile"] == "off" and "CUDA graph" in saved["notes"]


# ------------------------------------------------------------------------------------------------ replay

@pytest.fixture(scope="module")
def saved(tiny):
    """A report as core.bench --json writes it (two trials)."""
    return json.loads(json.dumps(bench_report(tiny, trials=2)))


def test_a_report_with_the_schema_but_empty_sections_is_refused_in_one_line(saved):
    hollow = {**saved, "summary": {}, "runs": [], "model": {}, "environment": {}}
    with pytest.raises(ValueError, match="holds no measured run") as refused:
        parse_report(json.dumps(hollow))
    assert "\n" not in str(refused.value)
    with pytest.raises(ValueError, match="does not name its model"):
        parse_report(json.dumps({**saved, "model": {}}))


@pytest.mark.parametrize("path", [("summary", "naive", "decode_tokens_per_s"), ("summary", "pipelined", "ttft_ms"),
                                  ("warmup", "naive", "compile_ms"), ("warmup", "naive", "setup_ms"),
                                  ("warmup", "naive", "engine_warmup_ms"), ("ratios", "pipelined/naive"),
                                  ("verdict", "ratio"), ("runs", 0, "timings", "decode_tokens_per_s")])
def test_a_field_that_is_not_a_number_is_named(saved, path):
    damaged = copy.deepcopy(saved)
    parent = functools.reduce(lambda node, key: node[key], path[:-1], damaged)
    parent[path[-1]] = "fast"
    dotted = ".".join(f"[{k}]" if isinstance(k, int) else k for k in path).replace(".[", "[")
    with pytest.raises(ValueError, match=re.escape(f'{dotted} is "fast", not a number')):
        parse_report(json.dumps(damaged))


def test_one_trial_in_the_old_format_shows_no_spread(saved):
    old = copy.deepcopy(saved)
    old["runs"] = [r for r in old["runs"] if r["trial"] == 0]
    for entry in old["summary"].values():
        entry.update(trials=1, spread=0.0, decode_spread=0.0)  # what older versions wrote for one trial
    spread = SUMMARY_HEADERS.index("decode spread %")
    assert [row[spread] for row in summary_rows(old)] == [None, None]
    assert all(row[spread] is not None for row in summary_rows(saved))


def largest_report(saved: dict) -> dict:
    """The largest report the page makes: 4096 tokens, 20 trials, 5 contestants, every per-step list (CUDA's
    included), and the page's record with a curve point every 4 steps and device samples at 4 Hz for 20 ms
    steps."""
    rng = random.Random(0)
    steps, trials, names = 4096, 20, ("naive", "pipelined", "no-check", "pipelined-again", "hf")

    def floats(count: int) -> list[float]:
        return [rng.uniform(0.5, 9.5) for _ in range(count)]

    def run(name: str, trial: int) -> dict:
        timings = {**saved["runs"][0]["timings"], **{k: floats(steps) for k in (
            "step_ms", "host_queued_ms", "host_known_ms", "gpu_step_ms", "gpu_gap_ms")}}
        return {**saved["runs"][0], "contestant": name, "trial": trial, "timings": timings, "texts": ["word " * steps],
                "token_ids": [[rng.randrange(50_000) for _ in range(steps)]]}

    samples = [{"t": t, "gpu": 0, "util_pct": 50.0, "mem_used_mb": 1e4, "power_w": 300.0, "sm_clock_mhz": 1980.0}
               for t in floats(int(4 * steps * 0.020 * trials * len(names)))]
    page = PageRecord(t_end=1.0, series={n: {"t": floats(trials * steps // 4), "tokens_per_s": floats(
        trials * steps // 4)} for n in names}, monitor={"source": "nvml", "description": "", "samples": samples})
    return page_report({**saved, "runs": [run(n, t) for t in range(trials) for n in names]}, page)


@pytest.mark.slow
def test_the_upload_limit_holds_the_largest_report_the_page_makes(saved):
    text = json.dumps(largest_report(saved), indent=1)
    assert 20 * 2**20 < len(text) < MAX_REPORT_BYTES  # 65 MiB when measured; Gradio's old limit was 20 MB
    assert parse_report(text.encode())["runs"]
    with pytest.raises(ValueError, match="limited to 100 MiB"):
        parse_report(b" " * (MAX_REPORT_BYTES + 1))


def test_contestant_names_in_a_report_are_plain_names():
    report = {"schema": "syncscope.bench/1", "summary": {"<b>x</b>": {"tokens_per_s": 1.0}}, "runs": []}
    with pytest.raises(ValueError, match="contestant name"):
        parse_report(json.dumps(report))


def test_numbers_that_mean_nothing_are_dashes(tiny):
    report = bench_report(tiny, no_check=True, trials=1)
    rows = {row[0]: row for row in summary_rows(report)}
    no_check = dict(zip(SUMMARY_HEADERS, rows["no-check"]))
    naive = dict(zip(SUMMARY_HEADERS, rows["naive"]))
    assert no_check["TTFT ms"] is None and no_check["decode tok/s"] is None
    assert naive["decode spread %"] is None, "one trial has no spread (it is not 0%)"
    assert naive["compile ms"] is None, "nothing was compiled: no compile time"


def test_nvml_means_per_contestant_come_from_its_timed_spans():
    from dashboard.service.page_record import nvml_means

    spans = [{"contestant": "naive", "phase": "warmup", "t0": 0.0, "t1": 1.0},
             {"contestant": "naive", "phase": "trial", "t0": 1.0, "t1": 2.0},
             {"contestant": "pipelined", "phase": "trial", "t0": 2.0, "t1": 3.0}]
    samples = [{"t": 0.5, "util_pct": 0.0}, {"t": 1.5, "util_pct": 60.0, "power_w": 300.0},
               {"t": 2.5, "util_pct": 90.0}, {"t": 2.6, "util_pct": 100.0}]
    means = nvml_means(samples, spans)
    assert means["naive"]["util_pct"] == 60.0 and means["naive"]["power_w"] == 300.0
    assert means["pipelined"] == {"util_pct": 95.0, "samples": 2}


def test_decode_phase_leads_and_prefill_is_beside_it(tiny):
    report = bench_report(tiny, trials=3, ignore_eos=True, max_new_tokens=24)
    for run in report["runs"]:
        t = run["timings"]
        assert t["decode_tokens"] == t["new_tokens"] - 1
        assert t["decode_ms"] == pytest.approx(t["total_ms"] - t["ttft_ms"])
        # Prefill is left out of it: the rate is the decode tokens over the decode time alone. (Whether it is above
        # the whole-run rate depends on whether prefill took longer than a decode step, which a tiny CPU model
        # need not do.)
        assert t["decode_tokens_per_s"] == pytest.approx(t["decode_tokens"] / t["decode_ms"] * 1000)
    assert report["verdict"]["metric"] == "decode_tokens_per_s"
    text = text_of(headline_md(report))
    assert text.startswith("pipelined/naive") and "decode-phase tokens/s" in text and "TTFT" in text
    assert summary_rows(report)[0][1] == round(report["summary"]["naive"]["decode_tokens_per_s"], 1)


def test_csv_cells_cannot_become_formulas():
    from dashboard.service.run_history import history_csv

    text = history_csv([{"run": 1, "model": "=HYPERLINK(\"x\")", "error": "-1+1"}])
    row = next(csv.DictReader(io.StringIO(text)))
    assert row["model"].startswith("'=") and row["error"].startswith("'-")


def test_a_bench_report_replays_as_a_timeline(tiny):
    report = json.loads(json.dumps(bench_report(tiny, trials=2)))
    timeline = live_series_from_report(parse_report(json.dumps(report).encode()))
    spans = timeline["spans"]
    assert [s["phase"] for s in spans] == ["warmup", "warmup", "trial", "trial", "trial", "trial"]
    assert set(timeline["series"]) == {"naive", "pipelined"}
    assert timeline["monitor"]["samples"] == []


@pytest.mark.parametrize(("data", "message"), [
    (b"\xff\xfe", "not UTF-8"),
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "not a syncscope benchmark report"),
    (b'{"schema": "syncscope.bench/1", "summary": {}, "runs": "x"}', "no valid 'runs'"),
])
def test_replay_refuses_what_is_not_a_report(data, message):
    with pytest.raises(ValueError, match=message):
        parse_report(data)


def test_a_contestant_that_disagrees_with_itself_is_marked():
    from dashboard.views.summary_table import summary_rows

    report = {"summary": {"naive": {"tokens_per_s": 1.0}, "pipelined": {"tokens_per_s": 1.0}},
              "identical": {"naive": False, "pipelined": False}, "self_consistent": {"naive": False,
                                                                                     "pipelined": True}}
    assert [row[3] for row in summary_rows(report)] == ["NO*", "NO"]
    del report["self_consistent"]
    assert [row[3] for row in summary_rows(report)] == ["NO", "NO"]


# ---------------------------------------------------------------------------------- the page's saved document

OLD_PAGE_DOWNLOAD = REPO / "benchmarks/lab/results/h200-2026-11-29-c/live-dashboard-llama-1b-step-graph.json.gz"


def recorded_page(saved: dict) -> PageRecord:
    timeline = {**live_series_from_report(saved), "monitor": {"source": "nvml", "description": "H200", "samples": [
        {"t": s["t0"], "gpu": 0, "util_pct": 80.0, "mem_used_mb": 1e3, "power_w": 300.0, "sm_clock_mhz": 1980.0}
        for s in live_series_from_report(saved)["spans"]]}}
    return PageRecord.of_run(timeline, ["compile needs StaticCache: turned on"])


def test_the_page_saves_the_report_as_the_engine_wrote_it_next_to_its_own_record(saved):
    page = recorded_page(saved)
    document = json.loads(json.dumps(page_report({**saved, "environment": {**saved["environment"], "host": "x"}},
                                                 page)))
    assert set(document) == {"schema", "report", "page"} and document["schema"] == PAGE_REPORT_SCHEMA
    assert document["report"] == {**saved, "environment": {k: v for k, v in saved["environment"].items()
                                                           if k != "host"}}
    assert "dashboard" not in document["report"], "the report has one author: the engine"
    assert set(page.nvml_by_contestant) == {"naive", "pipelined"}, "NVML means of each contestant's trials"
    opened = open_report(json.dumps(document))
    assert opened.page == page and opened.report == document["report"]
    assert parse_report(json.dumps(document)) == document["report"]
    assert live_series_from_report(document) == page.live_series()
    nvml = SUMMARY_HEADERS.index("NVML util %")
    assert [row[nvml] for row in summary_rows(document)] == [80.0, 80.0]
    assert report_notices(document) == ["compile needs StaticCache: turned on"]


def test_a_page_download_without_a_record_opens_as_the_bare_report(saved):
    document = json.loads(json.dumps(page_report(saved, None)))
    assert document["page"] is None and open_report(json.dumps(document)).page is None
    assert live_series_from_report(document) == live_series_from_report(saved)


def test_old_page_downloads_still_open_with_their_recorded_timeline():
    text = read_report_bytes(OLD_PAGE_DOWNLOAD)
    old = json.loads(text)
    opened = open_report(text)
    assert "dashboard" not in opened.report and opened.report["runs"] == old["runs"]
    assert opened.page.spans == old["dashboard"]["spans"] and opened.page.t_end == old["dashboard"]["t_end"]
    assert opened.page.monitor["source"] == "nvml" and "kind" not in opened.page.monitor, "the old name is read"
    assert live_series_from_report(old) == opened.page.live_series()
    assert split_report(old) == opened
    assert report_notices(old) == list(dict.fromkeys(old["dashboard"]["notices"])), "old notices, each once"


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.update(report={"schema": "nope"}), "not a syncscope benchmark report"),
    (lambda d: d.update(page=[1]), "its 'page' section is not an object"),
    (lambda d: d["page"].update(notices=[3]), "'page.notices' are not a list of sentences"),
    (lambda d: d["page"]["monitor"]["samples"].append({"t": "soon"}), "device samples are malformed"),
])
def test_a_damaged_page_document_is_refused_in_one_line(saved, change, message):
    document = json.loads(json.dumps(page_report(saved, recorded_page(saved))))
    change(document)
    with pytest.raises(ValueError, match=re.escape(message)) as refused:
        open_report(json.dumps(document))
    assert "\n" not in str(refused.value)
