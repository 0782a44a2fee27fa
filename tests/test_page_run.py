"""A run on the page and what a script gets of it: the named API (`/run`'s outputs, `/report`, typed pickers), a
Cancel that keeps the finished trials, and the downloads of a run that a reload picked up."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from gradio_client import Client

from dashboard.jobs import COMPARE, DONE, RUNNING, Job
from dashboard.ui import OUTPUTS
from tests.conftest import TINY, bench_report, fast_settings, page_request, serving
from tests.helpers import wait_until
from tests.test_dashboard_client import form, text_of
from tests.test_ui import QuietRunner, quiet_page


@pytest.fixture(scope="module")
def served(tiny_runner):
    yield from serving(tiny_runner)


def endpoint(url: str, name: str) -> dict:
    return Client(url, verbose=False).view_api(return_format="dict", print_info=False)["named_endpoints"][name]


def test_the_runs_outputs_are_named_and_the_pickers_and_streams_typed_as_they_are_accepted(served):
    returns = endpoint(served.url, "/run")["returns"]
    assert len(returns) == len(OUTPUTS) + 1
    labels = [r["label"] for r in returns]
    assert all(label and not label.startswith("value_") for label in labels), labels
    assert {"status", "verdict", "timeline", "what this run shows"} <= set(labels)
    streams = next(p for p in endpoint(served.url, "/run")["parameters"] if p["parameter_name"] == "streams")
    assert streams["type"]["type"] == "integer" and streams["python_type"]["type"] == "int"
    for parameter in endpoint(served.url, "/compare_runs")["parameters"]:
        assert parameter["python_type"]["type"] == "int", parameter
    report = endpoint(served.url, "/report")
    assert [p["parameter_name"] for p in report["parameters"]] == ["run"]
    assert report["parameters"][0]["parameter_default"] == 0


def test_the_run_shows_no_gradio_queue_timer_over_its_own_status_line(served):
    run_event = next(d for d in served.demo.config["dependencies"] if d.get("api_name") == "run")
    assert run_event["show_progress"] == "hidden", "the status line says where the run is; the queue ETA guessed"


def test_report_returns_the_runs_report_by_name_and_refuses_with_a_reason(served):
    client = Client(served.url, verbose=False)
    with pytest.raises(Exception, match="no run on this server yet"):
        client.predict(api_name="/report")
    out = dict(zip(OUTPUTS, client.predict(**form(), api_name="/run")))
    latest = client.predict(api_name="/report")
    downloaded = json.loads(Path(out["report_file"]).read_text(encoding="utf-8"))
    assert latest == downloaded and latest["report"]["verdict"]["contender"] == "pipelined"
    assert client.predict(1, api_name="/report") == latest
    with pytest.raises(Exception, match="there is no run 7 in your history"):
        client.predict(7, api_name="/report")
    with pytest.raises(Exception, match="no run on this server yet"):
        Client(served.url, verbose=False).predict(api_name="/report"), "another visitor's runs are not yours"


def test_the_documented_ten_line_client_runs_waits_and_reads_the_verdict(served, tmp_path):
    """The client of docs/DASHBOARD.md, as a script elsewhere runs it: gradio_client and the URL alone."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "DASHBOARD.md").read_text(encoding="utf-8")
    script = docs.split("```python\n# the 10-line client\n", 1)[1].split("```", 1)[0]
    assert len(script.strip().splitlines()) <= 10
    done = subprocess.run([sys.executable, "-I", "-c", script, served.url], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pipelined/naive" in done.stdout and "call:" in done.stdout, done.stdout


@pytest.mark.slow
def test_cancel_keeps_the_finished_trials_and_the_page_shows_them_cut_short(served):
    client = Client(served.url, verbose=False)
    # Rounds go on until each loop has run a minute, so the cancel lands mid-run however fast the machine.
    pending = client.submit(**form(trials=3, min_seconds=60.0, max_new_tokens=16), api_name="/run")
    runner = served.runner

    def rounds_done() -> int:
        job = next((j for j in runner.pending() if j.work == COMPARE), None)
        return sum(1 for _, e in job.events if e["type"] == "run") // 2 if job else 0

    assert wait_until(lambda: rounds_done() >= 2, timeout=180), "two rounds of trials in 3 minutes"
    assert client.predict(api_name="/cancel").startswith("Cancelling")
    out = {key: value for key, value in zip([*OUTPUTS, "lanes_plot"], pending.result(timeout=180))}
    status = text_of(out["status"])
    assert status.startswith("Cancelled") and "are kept: the summary is drawn from them" in status, status
    assert [row[0] for row in out["summary"]["data"]][:2] == ["naive", "pipelined"]
    report = json.loads(Path(out["report_file"]).read_text(encoding="utf-8"))["report"]
    assert report["interrupted"] is True and report["interruption"]["by"] == "cancel"
    done = report["interruption"]["trials_done"]
    assert done >= 2 and report["summary"]["naive"]["trials"] == done
    assert "cut short after" in text_of(out["shows"])
    assert client.predict(api_name="/report")["report"]["interruption"] == report["interruption"]
    history = out["history"]["data"][-1]
    assert "cancelled" in history and history[history.index("cancelled") + 1:] != [], "its numbers in the history"


def test_a_page_that_picked_a_run_up_on_reload_enables_its_downloads_when_it_ends(tmp_path, tiny):
    """A reload mid-run streams the run again (on_load); when it ends, "Last run's report" is enabled there too (the
    run's own page enables it in a step after /run, which a reloaded page does not have)."""
    request, _ = page_request(fast_settings())
    job = Job(id=1, work=COMPARE, owner="browser", model=TINY, request=request, state=RUNNING, t0=100.0)
    answers = itertools.chain([False, False], itertools.repeat(True))

    def wait(timeout: float) -> bool:
        finished = next(answers)
        if finished:
            job.state, job.t_end, job.report = DONE, 101.0, bench_report(tiny)
        return finished

    job.wait = wait  # type: ignore[method-assign]

    class Runner(QuietRunner):
        def snapshot(self, j):
            return {"status": "Timing…", "runs": [], "panes": {}}

        def latest_run(self, owner):
            return job

        def cancel(self, *args, **kwargs):
            return None

    page = quiet_page(Runner())
    page.downloads.root = tmp_path
    page.browser_state = "browser_state"
    page.c = {key: key for key in (*OUTPUTS, "lanes_plot", "banner")}
    updates = list(page.on_load("b" * 32, SimpleNamespace(session_hash="session")))
    last = updates[-1]["report_file"]
    path = last.value["path"] if isinstance(last.value, dict) else last.value  # Gradio may keep it as its FileData
    assert last.interactive is True and path and Path(path).is_file()
    assert updates[-1]["trace_file"].visible is True



def test_the_summarys_ratio_is_computed_from_the_rates_not_from_the_cells_rounding(tiny):
    """Rates of 1.04 and 1.02 tok/s show as 1.0 each; their ratio is 0.981, as the verdict's, not 1.000."""
    from dashboard.ui import EVIDENCE_HEADERS, summary_tables

    report = bench_report(tiny, trials=3)
    report["summary"]["naive"]["decode_tokens_per_s"] = 1.04
    report["summary"]["pipelined"]["decode_tokens_per_s"] = 1.02
    evidence, _ = summary_tables(report)
    pipelined = dict(zip(EVIDENCE_HEADERS, next(row for row in evidence if row[0] == "pipelined")))
    assert pipelined["× naive (decode)"] == f"{1.02 / 1.04:.3f}×" == "0.981×"
