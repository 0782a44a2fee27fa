"""The Under load tab (issue 58, item 6) and Replay of load reports: the settings' checks, the engine's UnderLoad job,
the live view, the report's view and charts from plain dicts, and a small run through the served page on tiny-random.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from gradio_client import handle_file

from core.documents.kinds import LOAD, kind_of
from core.documents.schema import load as load_document
from core.load.words import load_findings, load_text
from core.request.load import LoadRequest, WorkloadSpec
from core.request.run_schema import python_command
from dashboard.service.jobs import DONE, RUNNING, UNDER_LOAD, Job
from dashboard.service.limits import EXPOSED_LOAD_LIMITS
from dashboard.service.load_form import form_defaults, request_from_form
from dashboard.service.load_live import LoadLiveView
from dashboard.ui.tabs.compare import OUTPUTS as COMPARE_OUTPUTS
from dashboard.ui.tabs.load_panel import findings_md
from dashboard.ui.tabs.replay import REPLAY_OUTPUTS
from dashboard.ui.tabs.under_load import OUTPUTS
from dashboard.views import load_charts, load_view
from dashboard.views.report_text import as_text
from engine.process import EngineConfig, EngineCore
from engine.protocol import Done, Events, Failed, FailureCategory, JobCancelled, Started, UnderLoad
from tests.conftest import TINY, page_client, serving

SMALL = LoadRequest(workload=WorkloadSpec(requests=6, max_new_tokens=12, prompt_min=4, prompt_max=12), max_batch=2,
                    trials=1, sweep_batch=(1,), contestants=("naive", "pipelined", "no-check"), solo_checks=2,
                    audit=True)
# What the page's form sends for a small run (dashboard.service.load_form's names).
SMALL_FORM = {"requests": 6, "max_batch": 2, "max_new_tokens": 10, "prompt_lengths": "4-12", "trials": 1,
              "sweep_batch": "1", "contestants": ["naive", "pipelined", "no-check"], "solo_checks": 2, "audit": True}
EVIL = '<img src=x onerror=alert(1)> **bold** <a href="http://evil.example">link</a>'


class Recorder:
    def __init__(self):
        self.sent: list[Any] = []

    def __call__(self, message: Any) -> None:
        self.sent.append(message)

    def of(self, job: int, kind: type) -> list[Any]:
        return [m for m in self.sent if isinstance(m, kind) and m.job == job]


@pytest.fixture(scope="module")
def engine(tiny):
    """An engine core on this process with tiny-random loaded, and what it sent."""
    sent = Recorder()
    core = EngineCore(sent, EngineConfig(device="cpu"))
    core.loaded = tiny
    return core, sent


@pytest.fixture(scope="module")
def ran(engine) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One small run under load through the engine: its report and its events."""
    core, sent = engine
    core.handle(UnderLoad(job=7, spec=None, request=SMALL))
    (done,) = sent.of(7, Done)
    return done.report, [e for m in sent.of(7, Events) for e in m.events]


# ------------------------------------------------------------------------------------------------ the settings

def test_the_forms_defaults_are_the_requests_own_and_the_gpus_are_larger():
    assert request_from_form({}) == LoadRequest(), "one default per option: the table's, on a CPU page and the CLI"
    assert request_from_form(form_defaults()) == LoadRequest(), "the form's fields hold the defaults as text"
    gpu = form_defaults(gpu=True)
    assert gpu["requests"] > form_defaults()["requests"] and gpu["compile"] != "off" and gpu["sweep_batch"] == "1,4,16"
    assert request_from_form(gpu).points() == [(8, 0.0), (1, 0.0), (4, 0.0), (16, 0.0)]


@pytest.mark.parametrize(("changes", "said"), [
    ({"requests": 500}, "requests must be between 1 and 128, got 500 (this server's limit: a run under load here may "
                        "ask for at most: requests 128, max batch 32, max new tokens 512"),
    ({"max_batch": 2.5}, "max batch must be a whole number, got 2.5"),
    ({"max_batch": 33}, "max batch must be between 1 and 32, got 33 (this server's limit"),
    ({"max_new_tokens": ""}, "max new tokens is empty: enter a number"),
    ({"sweep_batch": "1,2,x"}, "a value of the batch sweep must be a number, got 'x'"),
    ({"sweep_batch": "1,2,4,8,16,32"}, "the sweeps add 5 points to the main one, more than 4"),
    ({"prompt_lengths": "32-8"}, "prompt lengths must be MIN-MAX with 1 <= MIN <= MAX, got '32-8'"),
    ({"prompt_lengths": "8-5000"}, "prompt lengths must be at most 1024 (MAX), got 5000 (this server's limit"),
    ({"rate": -1}, "the arrival rate must be between 0 and 10000, got -1"),
    ({"contestants": []}, "choose at least one of the contestants"),
    ({"contestants": ["naive", "fast"]}, "unknown contestants 'fast'"),
    ({"compile": "warp"}, "unknown compile mode 'warp'"),
    ({"output_median": 99}, "the median output length must be between 0 and 64 (max new tokens), got 99"),
    ({"audit": "no"}, "audit must be true or false, got 'no'"),
])
def test_each_setting_is_checked_in_one_line_naming_the_servers_limits(changes, said):
    with pytest.raises(ValueError) as caught:
        request_from_form(changes, EXPOSED_LOAD_LIMITS)
    assert str(caught.value).startswith(said) and "\n" not in str(caught.value)


# ------------------------------------------------------------------------------------------------ the engine

def test_the_engine_runs_a_load_job_streams_its_events_and_its_report_says_what_it_shows(engine, ran):
    _, sent = engine
    report, events = ran
    assert sent.of(7, Started) and kind_of(report) == LOAD and load_document(json.dumps(report), expect=LOAD)
    assert [(p["slots"], p["rate"]) for p in report["load"]["points"]] == [(2, 0.0), (1, 0.0)]
    assert report["command"] == (f"{python_command()} -m core.bench --model tiny-random --device cpu --dtype fp32 "
                                 "--requests 6 --max-batch 2 --max-new-tokens 12 --prompts synthetic --prompt-lengths "
                                 "4-12 --output-lengths lognormal --trials 1 --sweep-batch 1 --contestants "
                                 "naive,pipelined,no-check --audit --solo-checks 2")
    kinds = {e["type"] for e in events}
    assert {"solo", "point", "phase", "load-run", "load-tokens"} <= kinds
    runs = [e for e in events if e["type"] == "load-run"]
    assert len(runs) == 2 * 3 and all(e["tokens_per_s"] > 0 for e in runs), "a trial of each contestant at each point"
    assert len(sent.of(7, Events)) < len(events) / 4, "the tokens' events travel in batches"
    assert load_text(report)[0].startswith("tiny-random on cpu (float32), 2 slots")
    assert any("sync audit" in sentence for sentence in load_findings(report))


def test_a_request_the_load_protocol_refuses_fails_as_input_in_one_line(engine):
    core, sent = engine
    too_long = LoadRequest(workload=WorkloadSpec(requests=2, max_new_tokens=10**6))
    core.handle(UnderLoad(job=8, spec=None, request=too_long))
    (failed,) = sent.of(8, Failed)
    assert failed.category == FailureCategory.INPUT and failed.loaded == TINY
    assert "exceeds" in failed.error and "\n" not in failed.error, failed.error


def test_a_cancelled_load_job_ends_cancelled_with_no_report(engine):
    core, sent = engine
    core.cancel_flag = SimpleNamespace(value=9)
    try:
        core.handle(UnderLoad(job=9, spec=None, request=SMALL))
    finally:
        core.cancel_flag = None
    (cancelled,) = sent.of(9, JobCancelled)
    assert cancelled.report is None and not sent.of(9, Done)


# ------------------------------------------------------------------------------------------------ the live view

def test_the_status_line_names_the_point_the_phase_the_contestant_and_the_trial(ran):
    _, events = ran
    job = Job(id=1, work=UNDER_LOAD, owner="a", model=None, load_request=SMALL, state=RUNNING)
    view = LoadLiveView(job, lambda j: 0)
    job.add_events([e for e in events if e["type"] == "solo"][:1])
    assert view.snapshot()["status"].startswith("Decoding request 1 of 2 alone")
    upto = next(i for i, e in enumerate(events) if e["type"] == "phase" and e["phase"] == "trial"
                and e["contestant"] == "pipelined")
    job.add_events(events[:upto + 1])
    snap = view.snapshot()
    assert snap["status"].startswith("B=2, all at once (point 1 of 2): Timing pipelined: trial 1 of 1"), snap
    assert snap["phase"] == "trial", "the phase's id: the tab keeps quiet while a trial is timed on a CPU host"
    job.add_events(events[upto + 1:])
    snap = view.snapshot()
    assert len(snap["runs"]) == 6 and snap["runs"][0]["tokens_per_s"] > 0
    assert "B=1, all at once (point 2 of 2)" in snap["status"]
    job.state = DONE
    assert view.snapshot()["status"].startswith("Done in")


class Clock:
    """A job that ends after `polls` waits, each moving the clock it tells the tab's time by."""

    def __init__(self, polls: int):
        self.now, self.polls, self.id, self.done = 1000.0, polls, 1, False

    def wait(self, timeout: float) -> bool:
        self.now += timeout
        self.polls -= 1
        return self.polls < 0

    def monotonic(self) -> float:
        return self.now


def live_updates(monkeypatch: pytest.MonkeyPatch, phase: str, cuda: bool, seconds: float) -> list[dict[str, Any]]:
    """What the Under load tab yields while a run stays `seconds` in `phase`, polled every 0.25 s."""
    from dashboard.ui import tabs
    from dashboard.ui.page import PageConfig, PageContext
    from dashboard.ui.tabs.load_panel import PANEL_OUTPUTS, LoadReportPanel
    from dashboard.ui.tabs.under_load import UnderLoadTab

    job = Clock(int(seconds / 0.25))
    monkeypatch.setattr(tabs.under_load.time, "monotonic", job.monotonic)
    snap = {"state": RUNNING, "phase": phase, "status": "B=2, all at once: Timing naive: trial 1 of 3…",
            "runs": [{"contestant": "naive", "trial": 0, "slots": 2, "rate": None, "tokens_per_s": 50.0}]}
    runner = SimpleNamespace(uses_cuda=cuda, snapshot=lambda job: snap, cancel=lambda *a, **k: None)
    page = PageContext(runner, PageConfig(defaults={}, replay_files={}, live_interval_s=0.25),  # type: ignore[arg-type]
                       banner=None, banner_md="banner", browser_state="browser_state")  # type: ignore[arg-type]
    names = ("status", "throughput_plot", "run_note", "text", "report_view", "report_file", "html_file")
    tab = UnderLoadTab(page, {name: name for name in names},
                       LoadReportPanel({name: name for name in (*PANEL_OUTPUTS, "color_by", "report")}))
    return list(tab._while_going(job))  # type: ignore[arg-type]


def test_on_a_cpu_host_the_tab_redraws_seldom_and_no_chart_while_a_trial_is_timed(monkeypatch):
    """As the Compare tab: the page's redraws would share the processor with the loops it times (issue 67, item 1)."""
    quiet = live_updates(monkeypatch, "trial", cuda=False, seconds=6)
    assert len(quiet) == 2, "every 3 s, not at each of the 24 polls"
    assert all("throughput_plot" not in update for update in quiet)
    assert all("redraws every 3 s, without its charts, while a trial is timed" in update["status"] for update in quiet)
    live = live_updates(monkeypatch, "warmup", cuda=False, seconds=6)
    assert len(live) == 24 and "throughput_plot" in live[0], "an untimed warm-up is shown as it goes"
    assert len(live_updates(monkeypatch, "trial", cuda=True, seconds=6)) == 24, "a GPU's loops do not share the CPU"


# ------------------------------------------------------------------------------------------------ the view

def test_the_tables_come_from_the_report_alone(ran):
    report, _ = ran
    rows = load_view.contestant_rows(report["load"]["contestants"])
    assert [row[0] for row in rows] == ["naive", "pipelined", "ceiling (no-check)"]
    assert all(len(row) == len(load_view.TABLE_HEADERS) for row in rows)
    assert [row[-2] for row in rows] == ["yes", "yes", "yes"], "every request checked gave its solo decode's tokens"
    assert load_view.sweep_headers(report)[0] == "point"
    sweep = load_view.sweep_rows(report)
    assert [row[0] for row in sweep] == ["B=1, all at once", "B=2, all at once"] and sweep[0][-1].endswith("x")
    assert load_view.point_names(report) == ["B=2, all at once", "B=1, all at once"]


def test_the_slots_bars_hold_each_request_and_the_steps_past_its_stop(ran):
    report, _ = ran
    point = report["load"]["points"][0]
    assert load_view.slotted(point) == ["naive", "pipelined", "no-check"]
    assert load_view.default_slotted(point) == ["naive", "pipelined"]
    naive, pipelined = (load_view.slot_bars(point["contestants"][n]) for n in ("naive", "pipelined"))
    assert len(naive) == len(pipelined) == 6
    assert all(bar["released"] == bar["last"] for bar in naive), "the naive loop frees a slot at the stop"
    assert any(bar["released"] > bar["last"] for bar in pipelined), "the pipelined loop learns a stop late"
    assert sum(b["released"] - b["last"] for b in pipelined) == point["contestants"]["pipelined"]["wasted_slot_steps"]


def test_every_figure_is_valid_plotly_and_draws_what_the_report_holds(ran, validated):
    report, _ = ran
    figures = load_charts.report_figures(report)
    slots = figures["slots"]
    bars = [t for t in slots.data if t.name != load_charts.PAST_STOP]
    past = [t for t in slots.data if t.name == load_charts.PAST_STOP]
    assert [t.name for t in bars] == ["naive", "pipelined"] and all(len(t.x) == 6 for t in bars)
    assert len(past) == 1 and past[0].marker.pattern.shape == "/" and past[0].yaxis == "y2"
    by_request = load_charts.slots_figure(report["load"]["points"][0], ["pipelined"], load_charts.BY_REQUEST)
    assert len(set(by_request.data[0].marker.color)) > 1
    assert [t.name for t in figures["sweep"].data] == ["naive", "pipelined", "ceiling (no-check)"]
    assert list(figures["sweep"].data[0].x) == [1, 2]
    assert not figures["rate"].data, "no rate sweep: a placeholder that says how to get one"
    assert len(figures["throughput"].data) == 3 and len(figures["throughput"].data[0].x) == 2
    assert load_charts.slots_figure(report["load"]["points"][0], ["hf-batch"]).layout.annotations


def test_the_rate_sweep_draws_ttft_against_the_rate(validated):
    entry = {"tokens_per_s": 1.0, "ttft_ms_p99": 5.0, "requests": []}
    points = [{"slots": 4, "rate": rate, "contestants": {"naive": {**entry, "ttft_ms_p99": 5.0 + rate},
                                                         "no-check": {**entry, "ttft_ms_p99": None}}}
              for rate in (0.0, 2.0, 8.0)]
    figure = load_charts.rate_figure(load_view.sweep_series({"load": {"points": points}}))
    assert [t.name for t in figure.data] == ["naive"] and list(figure.data[0].y) == [5.0, 7.0, 13.0]


def test_text_from_the_report_is_shown_as_text(ran):
    report, _ = ran
    hostile = {**report, "model": {**report["model"], "spec": EVIL},
               "load": {**report["load"], "notices": [EVIL]}}
    shown = findings_md(hostile, load_view.Sentences(findings=[EVIL], text=[]))
    assert "<img" not in shown and "<a " not in shown and "&lt;img" in shown
    assert as_text(shown).count(EVIL) == 3
    cannot = load_view.Sentences(findings=[], text=[], why_not="its findings could not be worded")
    assert as_text(findings_md(report, cannot)).endswith("\nNo findings: its findings could not be worded")


def test_replay_words_a_report_in_its_own_process_as_the_cli_does(ran):
    report, _ = ran
    said = load_view.sentences(json.loads(json.dumps(report)))
    assert said == load_view.Sentences(findings=load_findings(report), text=load_text(report))
    assert said.findings and said.why_not is None


def test_a_report_that_lacks_what_a_sentence_reads_is_shown_without_findings_saying_why(ran):
    report, _ = ran
    damaged = {**report, "load": {key: value for key, value in report["load"].items() if key != "solo_checked"}}
    said = load_view.sentences(damaged)
    assert said == load_view.Sentences(findings=[], text=[], why_not="its findings could not be worded (KeyError: "
                                       "'solo_checked'); its tables and charts are shown")
    assert as_text(findings_md(damaged, said)).endswith(f"\nNo findings: {said.why_not}")
    main = report["load"]["points"][0]
    endless = {**main, "contestants": {"naive": {**main["contestants"]["naive"], "reads_per_decode_step": math.inf}}}
    said = load_view.sentences({**report, "load": {**report["load"], "points": [endless]}})
    assert said.why_not is not None and said.why_not.startswith("its findings could not be worded (OverflowError")


# ------------------------------------------------------------------------------------------------ the served page

@pytest.fixture(scope="module")
def served_app(tiny_runner):
    yield from serving(tiny_runner)


def run_load(url: str, **changes: Any) -> dict[str, Any]:
    client = page_client(url)
    return dict(zip(OUTPUTS, client.predict(**{**SMALL_FORM, **changes}, api_name="/run_load")))


def test_a_small_load_run_through_the_page_gives_its_report_and_replays(served_app):
    out = run_load(served_app.url)
    assert out["text"]["status"].startswith("Done in"), out["status"]
    assert "What this run shows" in out["text"]["findings"]
    assert [row[0] for row in out["table"]["data"]] == ["naive", "pipelined", "ceiling (no-check)"]
    assert [row[0] for row in out["sweep_table"]["data"]] == ["B=1, all at once", "B=2, all at once"]
    slots = json.loads(out["slots_plot"]["plot"])
    assert {t["name"] for t in slots["data"]} >= {"naive", "pipelined", load_charts.PAST_STOP}
    assert out["command"].startswith(f"{python_command()} -m core.bench --model tiny-random --device cpu")
    assert out["cli_text"].startswith("tiny-random on cpu")
    saved = load_document(Path(out["report_file"]), expect=LOAD)
    assert "host" not in saved["environment"]

    replayed = dict(zip(REPLAY_OUTPUTS, page_client(served_app.url).predict(handle_file(out["report_file"]),
                                                                             api_name="/replay")))
    assert as_text(replayed["status"]).startswith("Showing the uploaded file, a load report: tiny-random on cpu")
    assert replayed["summary"]["data"] == [] and replayed["headline"] == ""


def test_a_setting_past_the_limits_is_refused_before_any_work(served_app):
    before = len(served_app.runner.queue.remembered())
    out = run_load(served_app.url, requests=10**6)
    assert as_text(out["status"]).startswith("Not started: requests must be between 1 and 4096, got 1000000")
    assert out["text"]["status"] == as_text(out["status"])
    assert len(served_app.runner.queue.remembered()) == before


def test_the_run_endpoint_gives_api_callers_plain_text(served_app):
    client = page_client(served_app.url)
    out = dict(zip(COMPARE_OUTPUTS, client.predict(prompt="Hi", model=TINY, max_new_tokens=8, trials=1,
                                                   api_name="/run")))
    text = out["text"]
    assert re.fullmatch(r"Done in \d+\.\d s\.", text["status"]), text
    assert out["status"].startswith("**Done in"), "the page keeps its Markdown"
    assert not any("\\" in said or "**" in said for said in text.values()), text
    assert text["naive_rate"].startswith("naive · ") and "outputs identical: yes" in text["headline"]


# The page's workload against the CLI's (issue 67, item 1): long enough that a trial is not a few timer ticks.
MEASURED_FORM = {**SMALL_FORM, "requests": 8, "max_batch": 4, "max_new_tokens": 32, "trials": 5, "sweep_batch": "",
                 "audit": False, "contestants": ["naive", "pipelined", "no-check", "hf-batch"]}


def contestant_rates(report: dict[str, Any]) -> dict[str, float]:
    """Each contestant's output tokens/s at the run's first point (the median over its trials)."""
    point = load_view.section(report)["points"][0]
    return {name: entry["tokens_per_s"] for name, entry in point["contestants"].items()}


@pytest.mark.slow
def test_the_page_measures_the_loops_as_the_cli_does(served_app, tmp_path):
    """The same workload through the page's API and through the page's own reproduce line, in turns: no contestant's
    output tokens/s on the page is more than 15% below the CLI's. Each side's best of two runs' medians: on a busy
    2-core machine a run's trials spread 10-60% (2026-12-06), and another process can only slow a run down; a page
    faster than the CLI is that noise, not something the page did, so only the page's cost is held to 15%."""
    from core.bench import main

    pages, clis = [], []
    for turn in range(2):
        out = run_load(served_app.url, **MEASURED_FORM)
        assert out["text"]["status"].startswith("Done in"), out["status"]
        pages.append(contestant_rates(load_document(Path(out["report_file"]), expect=LOAD)))
        argv = shlex.split(out["command"])
        path = tmp_path / f"cli{turn}.json"
        assert main([*argv[argv.index("core.bench") + 1:], "--json", str(path)]) == 0
        clis.append(contestant_rates(load_document(path, expect=LOAD)))
    names = set(MEASURED_FORM["contestants"])
    assert all(rates.keys() == names for rates in pages + clis)
    page_over_cli = {name: max(p[name] for p in pages) / max(c[name] for c in clis) for name in names}
    assert all(ratio >= 0.85 for ratio in page_over_cli.values()), (page_over_cli, pages, clis)
