"""Reports as the page reads them: history rows and replaying saved reports."""

from __future__ import annotations

import csv
import io
import json

import pytest

from core.bench import compare
from core.options import BenchRequest, GenerationOptions
from dashboard.reports import history_row
from dashboard.settings import RunSettings
from tests.conftest import TINY, fast_settings


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
    request, _ = RunSettings(compile="reduce-overhead", streams=2).to_request()
    row = history_row(2, "cancelled", request, TINY, None, "cancelled", device_type="cpu")
    assert (row["compile"], row["compile_asked"], row["streams"]) == ("default", "reduce-overhead", 1)
    assert "CUDA graphs" in row["notes"] and "streams=1" in row["notes"]
    on_gpu = history_row(3, "cancelled", request, TINY, None, "cancelled", device_type="cuda")
    assert (on_gpu["compile"], on_gpu["streams"], on_gpu["notes"]) == ("reduce-overhead", 2, None)


def test_the_history_csv_and_json_of_a_served_run_say_what_ran(tiny_runner):
    job = tiny_runner.submit(fast_settings(compile="step-graph", static_cache=True), owner="compile-check")
    job.wait(300)
    row = next(csv.DictReader(io.StringIO(tiny_runner.history_csv("compile-check"))))
    assert (row["compile"], row["compile_asked"]) == ("off", "step-graph")
    assert "CUDA graph" in row["notes"]
    saved = json.loads(tiny_runner.history_json("compile-check"))["runs"][0]
    assert saved["compile"] == "off" and "CUDA graph" in saved["notes"]
