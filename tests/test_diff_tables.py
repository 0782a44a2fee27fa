"""Two runs side by side (dashboard.views.diff_tables): the settings that differ first and highlighted, the rates with
B / A and the call, the waits; and the page's handlers that find the two runs."""

from __future__ import annotations

import copy
import gzip
import json

import pytest

from core.report.diff import diff_reports, diff_text
from core.tuning import Tuning
from dashboard.views import diff_tables
from dashboard.views.report_text import plain
from tests.test_dashboard_client import text_of
from tests.test_ui import QuietRunner, h200_saved_report, quiet_page

pytestmark = pytest.mark.usefixtures("validated")  # figures are built with plotly's validation on


@pytest.fixture(scope="module")
def two_h200_runs():
    a = h200_saved_report().report
    b = copy.deepcopy(a)
    b["request"]["options"]["cache"] = "dynamic"
    for run in b["runs"]:
        if run["contestant"] == "pipelined":
            run["timings"]["decode_tokens_per_s"] *= 0.6
    b["summary"]["pipelined"]["decode_tokens_per_s"] *= 0.6
    return a, b


def test_the_settings_that_differ_come_first_highlighted_and_marked(two_h200_runs):
    result = diff_reports(*two_h200_runs)
    table = diff_tables.settings_table(result)
    assert table["headers"] == list(diff_tables.SETTINGS_HEADERS)
    assert table["data"][0] == ["cache", "static", "dynamic", "differs"]
    assert table["metadata"]["styling"][0] == [diff_tables.DIFFERS_STYLE] * 4
    assert all(row[3] == "" for row in table["data"][1:]) and all(not any(style) for style in
                                                                   table["metadata"]["styling"][1:])
    assert text_of(diff_tables.summary_md(result, plain)).startswith("1 setting differs: cache.")


@pytest.mark.parametrize(("field", "before", "after", "fact"), [
    ("step_commit", "argmax", "whole", True),  # what the greedy step compiled after the forward
    ("decode_swiglu", "down", "gate-up", False),  # a switch removed since: where the fused layer computed silu(g) * up
])
def test_each_step_graph_kernel_choice_is_a_setting_of_its_own(field, before, after, fact):
    """Old reports, which recorded each choice as a field of their environment: upgraded, the switch is a setting of
    its own, by its variable, and so is what ran where the environment still records it."""
    a = h200_saved_report().report
    a["request"]["options"] = {**a["request"]["options"], "compile": "step-graph", "do_sample": False}
    a["environment"] = {**a["environment"], "decode_layer": "fused"}
    a["environment"].pop(field, None)  # as a report from before the field was written: upgraded to `before`
    a["environment"].pop("tuning", None)
    b = copy.deepcopy(a)
    b["environment"][field] = after
    table = diff_tables.settings_table(diff_reports(a, b))
    differing = [[field, before, after, "differs"]] * fact + [[f"SYNCSCOPE_{field.upper()}", before, after, "differs"]]
    assert table["data"][:len(differing)] == differing
    assert all(row[3] == "" for row in table["data"][len(differing):])


def test_a_switch_of_todays_reports_is_a_setting_of_its_own():
    a = h200_saved_report().report
    a["environment"] = {**a["environment"], "tuning": Tuning().as_report()}
    b = copy.deepcopy(a)
    b["environment"]["tuning"]["step_commit"] = "whole"
    table = diff_tables.settings_table(diff_reports(a, b))
    assert table["data"][0] == ["SYNCSCOPE_STEP_COMMIT", "argmax", "whole", "differs"]
    assert all(row[3] == "" for row in table["data"][1:])


def test_the_rates_say_b_over_a_the_call_and_the_interval_it_was_judged_by(two_h200_runs):
    result = diff_reports(*two_h200_runs)
    rows = {row[0]: dict(zip(diff_tables.RATES_HEADERS, row)) for row in diff_tables.rates_table(result)["data"]}
    assert rows["pipelined"]["B / A"] == "0.600×" and rows["pipelined"]["call"] == "slower"
    assert rows["naive"]["B / A"] == "1.000×" and rows["naive"]["call"] == "within noise"
    assert rows["naive"]["A"] == "604.8" and rows["naive"]["interval judged by"].startswith("95% interval 0.")
    waits = {row[0]: row for row in diff_tables.waits_table(result)["data"]}
    assert waits["naive"] == ["naive", "946 µs", "946 µs", "564 µs", "564 µs"]


def test_the_page_says_what_the_cli_says(two_h200_runs):
    result = diff_reports(*two_h200_runs)
    shown = text_of(diff_tables.summary_md(result, plain))
    assert result["note"] in shown and all(f"- {row['sentence']}" in shown for row in result["contestants"])
    text = diff_text(result)
    table = diff_tables.rates_table(result)["data"]
    for row, cells in zip(result["contestants"], table):
        assert row["call"] == cells[5] and cells[6] in text


def test_with_only_lag_differing_the_page_shows_naive_as_the_control(two_h200_runs):
    a = two_h200_runs[0]
    b = copy.deepcopy(a)
    b["request"]["options"]["lag"] = 2
    for run in b["runs"]:  # the machine 10% slower for every contestant
        if run["timings"].get("decode_tokens_per_s"):
            run["timings"]["decode_tokens_per_s"] *= 0.9
    result = diff_reports(a, b)
    table = diff_tables.rates_table(result)
    rows = {row[0]: dict(zip(diff_tables.RATES_HEADERS, row)) for row in table["data"]}
    assert rows["naive"]["call"] == "control" and rows["pipelined"]["call"] == "within noise"
    assert "of the ratio to the control" in rows["pipelined"]["interval judged by"]
    assert table["metadata"]["styling"][0][5] == diff_tables.CALL_STYLES["control"]
    assert "Control: naive (lag cannot change it)" in text_of(diff_tables.summary_md(result, plain))


def test_a_contestant_in_one_run_only_and_an_old_report_fill_the_table():
    from tests.test_drift import STEADY, report

    a = report({"naive": STEADY, "pipelined": STEADY, "hf": STEADY})
    b = report({"naive": STEADY, "pipelined": STEADY})
    del b["runs"]
    table = diff_tables.rates_table(diff_reports(a, b))
    assert [row[5] for row in table["data"]] == ["noise unknown", "noise unknown", "only in A"]
    assert all(len(row) == len(diff_tables.RATES_HEADERS) for row in table["data"])
    assert [row[6] for row in table["data"]] == ["–", "–", ""]


def test_two_report_files_diff_and_a_bad_one_says_which(two_h200_runs):
    page = quiet_page().replay
    a, b = (gzip.compress(json.dumps(r).encode()) for r in two_h200_runs)
    shown = page.diff_files(a, b)
    assert text_of(shown["status"]).startswith("1 setting differs: cache.")
    assert shown["settings"]["data"][0][3] == "differs" and shown["timeline"].data
    assert text_of(page.diff_files(a, b"")["status"]) == "Cannot open report B: the file is empty (0 bytes)"
    assert text_of(page.diff_files(None, b)["status"]) == "Choose two report files, A and B."


def test_two_history_runs_diff_by_their_numbers_on_the_page(two_h200_runs, monkeypatch):
    from dashboard.service.jobs import COMPARE

    jobs = {7: type("Job", (), {"owner": "me", "work": COMPARE, "report": two_h200_runs[0]})(),
            9: type("Job", (), {"owner": "me", "work": COMPARE, "report": two_h200_runs[1]})(),
            11: type("Job", (), {"owner": "me", "work": COMPARE, "report": None})()}
    runner = QuietRunner(rows=[{"run": 7, "status": "done"}, {"run": 9, "status": "done"},
                               {"run": 11, "status": "failed"}, {"run": 3, "status": "done"}])
    runner.queue = type("Queue", (), {"get": lambda self, job_id: jobs.get(job_id)})()
    page = quiet_page(runner)
    monkeypatch.setattr(page.context, "owner", lambda request: "me")
    page = page.history
    choices = page.run_choices("me")
    assert [value for _, value in choices["run_a"]["choices"]] == [1, 2, 3, 4]
    assert choices["run_a"]["value"] == 2 and choices["run_b"]["value"] == 4, "run 3 failed: it has no report"
    shown = page.diff_runs(1, 2, None)
    assert shown["settings"]["data"][0] == ["cache", "static", "dynamic", "differs"]
    assert text_of(page.diff_runs(1, 3, None)["status"]) == "Cannot diff: run 3 has no report: it failed"
    assert "no longer kept on this server" in text_of(page.diff_runs(4, 1, None)["status"])
    assert text_of(page.diff_runs(1, 9, None)["status"]) == "Cannot diff: there is no run 9 in your history"


def test_two_committed_h200_runs_differing_in_the_product_kernel_say_so_first():
    folder = "benchmarks/lab/results/h200-2026-12-02c"

    def opened(name: str) -> dict:
        with gzip.open(f"{folder}/sg-llama-8b-{name}.json.gz", "rt") as f:
            return json.load(f)

    result = diff_reports(opened("default-2"), opened("triton-1"))
    table = diff_tables.settings_table(result)
    # what ran, then the switch that asked for it (before "auto", the default was inductor's products everywhere)
    assert table["data"][:2] == [["decode_products", "inductor", "triton", "differs"],
                                 ["SYNCSCOPE_DECODE_PRODUCTS", "inductor", "triton", "differs"]]
    assert text_of(diff_tables.summary_md(result, plain)).startswith(
        "2 settings differ: decode_products, SYNCSCOPE_DECODE_PRODUCTS.")
