"""Every phase the engine can send (core.phases.PHASES) reaches the page and is rendered there: its status line, the
live view, the charts and the timeline, the page's final update, and the saved page record that Replay opens again.
A phase added to core.phases is covered here by itself: nothing below names one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.phases import PHASE, PHASES, TRIAL, WARMUP, phase_named
from dashboard.service.jobs import COMPARE, DONE, RUNNING, Job
from dashboard.service.live_view import LiveView, status_line
from dashboard.service.page_record import PageRecord, open_report, page_report
from dashboard.views import live_charts, run_charts
from tests.conftest import TINY, bench_report, fast_settings, page_request
from tests.test_dashboard_client import text_of
from tests.test_timeline import lane_labels
from tests.test_ui import QuietRunner, quiet_page

pytestmark = pytest.mark.usefixtures("validated")  # figures are built with plotly's validation on

CONTESTANTS = ("naive", "pipelined")


def every_phase(t0: float) -> list[dict]:
    """The events of one run through every phase, in compare()'s order: each phase for both contestants, a streaming
    phase with a token and (a trial) its run's end."""
    events, t = [], t0
    for phase in PHASES:
        for name in CONTESTANTS:
            t += 0.1
            events.append(phase.event(name, t, 0 if phase is TRIAL else None))
            if phase.streams:
                events.append({"type": "tokens", "contestant": name, "trial": 0 if phase is TRIAL else None,
                               "step": 0, "tokens": (5,), "host_time_s": t + 0.01})
            if phase is TRIAL:
                events.append({"type": "run", "t": t + 0.05, "contestant": name, "trial": 0, "order": 0,
                               "texts": [f"{name} text"], "timings": {"tokens_per_s": 90.0,
                                                                      "decode_tokens_per_s": 100.0}})
    return events


@pytest.fixture(scope="module")
def audited_report(tiny):
    return bench_report(tiny, audit=True)


def running_job(request=None) -> Job:
    request = request or page_request(fast_settings(audit=True))[0]
    return Job(id=1, work=COMPARE, owner="someone", model=TINY, request=request, state=RUNNING, t0=100.0)


def test_every_phase_has_a_name_the_events_and_reports_use_and_words_for_the_page():
    assert [phase.id for phase in PHASES][:2] == [WARMUP.id, TRIAL.id]
    for phase in PHASE.values():
        assert phase_named(phase.id) is phase and phase.noun and "{contestant}" in phase.doing
        event = phase.event("naive", 1.0, 3)
        assert event["type"] == "phase" and event["phase"] == phase.id and ("trial" in event) == (phase is TRIAL)
    assert phase_named("sync audit") is PHASE["audit"] and phase_named("trials") is TRIAL, "old reports' names"
    assert phase_named("no such phase") is None and phase_named(None) is None


@pytest.mark.parametrize("phase", PHASES, ids=lambda phase: phase.id)
def test_the_status_line_says_what_each_phase_does(phase):
    job = running_job()
    line = status_line(job, 0, phase.event("pipelined", 100.5, 1 if phase is TRIAL else None))
    assert "pipelined" in line and line.endswith("…")
    if phase is TRIAL:
        assert f"trial 2 of {max(job.request.trials, 2)}" in line
    if phase.after_trials:
        assert "untimed" in line


def test_a_phase_this_page_does_not_know_is_said_plainly_not_a_crash():
    line = status_line(running_job(), 0, {"type": "phase", "phase": "a newer measurement", "contestant": "naive"})
    assert line == "Running naive: a newer measurement…"


def test_the_live_view_keeps_the_trials_texts_through_the_untimed_runs_after_them():
    job = running_job()
    job.add_events(every_phase(100.0))
    view = LiveView(job, lambda: None, None, lambda j: 0)
    snap = view.snapshot()
    assert [span["phase"] for span in snap["spans"]] == [p.id for p in PHASES for _ in CONTESTANTS]
    last_phase = [event for event in job.events if event[1]["type"] == "phase"][-1][1]
    assert snap["status"] == status_line(job, 0, last_phase)
    for name in CONTESTANTS:
        pane = snap["panes"][name]
        assert pane["text"] == f"{name} text" and pane["tokens_per_s"] == 100.0, "the audit did not blank the pane"
    for figure in run_charts.all_figures(snap, None):
        assert figure is not None
    shapes = live_charts.span_shapes(snap["spans"], [0.0, 10.0])[0]
    timed = [s for s, span in zip(shapes, snap["spans"]) if phase_named(span["phase"]).timed]
    assert timed and all(s["fillcolor"] != live_charts.WARMUP_COLOR for s in timed)
    assert all(s["fillcolor"] == live_charts.WARMUP_COLOR for s, span in zip(shapes, snap["spans"])
               if not phase_named(span["phase"]).timed), "untimed runs are grey"


def test_the_final_update_and_the_saved_page_record_hold_every_phase(audited_report, tmp_path):
    job = running_job()
    job.add_events(every_phase(100.0))
    job.view = LiveView(job, lambda: None, None, lambda j: 0)
    job.state, job.t_end, job.report = DONE, 102.0, audited_report
    job.page = PageRecord.of_run(job.view.live_series(final=True), [])

    class Runner(QuietRunner):
        def snapshot(self, j):
            return j.view.snapshot()

        def latest_run(self, owner):
            return job

    page = quiet_page(Runner())
    page.context.downloads.root = tmp_path
    update = page.compare._final_update(job, "someone")
    assert text_of(update["status"]).startswith("Done in")
    assert "pipelined/naive" in text_of(update["headline"]) and update["summary"]
    assert "What this run shows" in text_of(update["shows"]) and lane_labels(update["timeline_plot"])
    saved = json.loads(Path(update["report_file"]).read_text(encoding="utf-8"))
    reopened = open_report(json.dumps(saved))
    assert [span["phase"] for span in reopened.page.spans] == [span["phase"] for span in job.page.spans]
    assert reopened.report["sync_audit"], "the audit is in the report Replay opens"
    assert json.dumps(page_report(audited_report, job.page))
