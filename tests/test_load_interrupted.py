"""An interrupted run under load keeps what finished (issue 66, item 9): SIGINT or SIGTERM during the second point of
a batch sweep leaves the CLI's report with the first point whole, a Cancel at the same place through the engine
keeps it in the job's report, and the cut report loads and is worded as Replay shows it; on tiny-random on the CPU."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
from dataclasses import replace
from typing import Any

import pytest

from cli.load import plan_line
from core.bench import main
from core.documents.kinds import LOAD, ReportError
from core.documents.schema import load as load_document
from core.load.words import load_findings, load_text
from core.request.load import LoadRequest, WorkloadSpec
from core.request.options import GenerationOptions
from dashboard.service.jobs import CANCELLED, UNDER_LOAD
from dashboard.views import load_view
from dashboard.views.run_html import run_html
from engine.process import EngineConfig, EngineCore
from engine.protocol import Done, Events, JobCancelled, UnderLoad
from tests.test_supervisor import Supervised, add, model_facts

CONTESTANTS = ("naive", "pipelined")
FLAGS = ["--model", "tiny-random", "--device", "cpu", "--requests", "6", "--max-batch", "4", "--sweep-batch", "2",
         "--trials", "2", "--max-new-tokens", "8", "--solo-checks", "2", "--contestants", ",".join(CONTESTANTS)]


def signal_at_second_points_trials(signum: int) -> Any:
    """A --progress listener that sends this process `signum` as the second point's first trial begins."""
    points = []

    def listen(event: dict[str, Any]) -> None:
        if event["type"] == "point":
            points.append(event["slots"])
        elif len(points) == 2 and event["type"] == "phase" and event["phase"] == "trial":
            os.kill(os.getpid(), signum)

    return listen


@pytest.fixture(scope="module", params=[(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def cut_by_signal(request, tmp_path_factory) -> tuple[int, dict[str, Any], str, int]:
    """(the signal, the report written, the text printed, the exit code) of a `--sweep-batch 2` run cut by a signal
    during the second point's trials."""
    signum, _ = request.param
    out = tmp_path_factory.mktemp("cut") / "R.json"
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(printed):
        patch.setattr("cli.load._load_progress", signal_at_second_points_trials(signum))
        code = main([*FLAGS, "--progress", "--json", str(out)])
    assert out.exists(), f"no report written (exit {code})"
    return request.param, json.loads(out.read_text()), printed.getvalue(), code


def test_a_signal_during_the_second_point_keeps_the_first_whole_and_exits_as_the_signal_says(cut_by_signal):
    (signum, exit_code), report, _, code = cut_by_signal
    assert code == exit_code
    section = report["load"]
    assert [(p["slots"], p["rate"]) for p in section["points"]] == [(4, 0.0)]
    for name in CONTESTANTS:
        entry = section["points"][0]["contestants"][name]
        assert entry["trials"] == 2 and len(entry["requests"]) == 6 and entry["identical_to_solo"] is True, name
    assert section["contestants"] == section["points"][0]["contestants"]
    assert section["interrupted"] == {"by": "interrupt", "signal": signal.Signals(signum).name,
                                      "point": {"slots": 2, "rate": 0.0}, "phase": "trial", "contestant": "naive",
                                      "points_done": 1, "points_planned": 2,
                                      "points_left_out": [{"slots": 2, "rate": 0.0}]}


def test_the_cut_reports_text_and_findings_say_it_was_cut_and_what_the_numbers_cover(cut_by_signal):
    (signum, _), report, printed, _ = cut_by_signal
    said = (f"This run was cut short by {signal.Signals(signum).name} during the trial of naive at B=2, all at once: "
            "the numbers cover the 1 of 2 points that finished (B=4, all at once), each with every contestant's "
            "trials; B=2, all at once was not run to the end and left out.")
    assert f"note: {said}" in printed.splitlines()
    assert load_findings(report)[0] == said and f"note: {said}" in load_text(report)


def test_the_cut_report_loads_and_renders_in_replay(cut_by_signal, tmp_path):
    _, report, _, _ = cut_by_signal
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(report))
    loaded = load_document(path, expect=LOAD)
    assert loaded["load"]["interrupted"]["points_done"] == 1
    said = load_view.sentences(loaded)
    assert said.why_not is None and said.findings[0].startswith("This run was cut short by SIG")
    assert "This run was cut short" in load_view.findings_md(loaded, said)
    assert "This run was cut short" in run_html(loaded), "the HTML export words it as Replay does"
    assert load_view.point_names(loaded) and load_view.sweep_rows(loaded) is not None
    damaged = {**report, "load": {**report["load"], "interrupted": {"by": "power cut"}}}
    with pytest.raises(ReportError, match=r"load\.interrupted does not say what cut the run"):
        load_document(json.dumps(damaged), expect=LOAD)


# ------------------------------------------------------------------------------------------------ the page's Cancel

class CancelAtSecondPoint:
    """The engine's cancel flag, raised for `job` once the engine has sent the second point's event."""

    def __init__(self, job: int) -> None:
        self.job, self.sent = job, []

    def __call__(self, message: Any) -> None:
        self.sent.append(message)

    @property
    def value(self) -> int:
        points = [e for m in self.sent if isinstance(m, Events) for e in m.events if e["type"] == "point"]
        return self.job if len(points) >= 2 else 0


def test_a_cancel_during_the_second_point_keeps_the_first_in_the_jobs_report(tiny):
    request = LoadRequest(workload=WorkloadSpec(requests=6, max_new_tokens=8), max_batch=4, trials=1,
                          sweep_batch=(2,), contestants=CONTESTANTS, solo_checks=2)
    flag = CancelAtSecondPoint(job=3)
    core = EngineCore(flag, EngineConfig(device="cpu"), cancel_flag=flag)
    core.loaded = tiny
    core.handle(UnderLoad(job=3, spec=None, request=request))
    assert not [m for m in flag.sent if isinstance(m, Done)]
    (cancelled,) = [m for m in flag.sent if isinstance(m, JobCancelled)]
    report = cancelled.report
    assert report is not None, "the finished point's report goes with the cancel"
    section = load_document(json.dumps(report), expect=LOAD)["load"]
    assert [p["slots"] for p in section["points"]] == [4]
    assert all(entry["trials"] == 1 for entry in section["points"][0]["contestants"].values())
    assert section["interrupted"]["by"] == "cancel" and section["interrupted"]["phase"] == "warmup"
    assert load_findings(report)[0].startswith("This run was cut short by the page's Cancel during the warm-up of "
                                               "naive at B=2, all at once")


def test_the_supervisor_keeps_a_cancelled_load_jobs_report():
    supervisor = Supervised()
    supervisor._on_message(model_facts())
    job = add(supervisor, work=UNDER_LOAD)
    kept = {"schema": "syncscope.load/1", "load": {"interrupted": {"by": "cancel"}}}
    supervisor._on_message(JobCancelled(job=job.id, report=kept))
    assert job.state == CANCELLED and job.report == kept


# ------------------------------------------------------------------------------------------------ the plan

def test_the_cli_says_before_a_run_how_many_runs_of_the_workload_it_makes():
    request = LoadRequest(workload=WorkloadSpec(requests=6), max_batch=4, trials=2, sweep_batch=(2,), audit=True,
                          contestants=("naive", "pipelined", "hf-batch"))
    assert plan_line(request, request.contestants, "cpu") == (
        "under load: 18 runs of 6 requests (2 point(s) x 3 contestant(s) x 1 warm-up + 2 trial(s)), and at B=4 2 "
        "under the sync audit")
    graphed = replace(request, options=GenerationOptions(cache="static", compile="step-graph"), audit=False)
    assert plan_line(graphed, ("naive",), "cuda") == (
        "under load: 6 runs of 6 requests (2 point(s) x 1 contestant(s) x 1 warm-up + 2 trial(s)), and at B=4 1 "
        "under CUPTI; each B's warm-up compiles and captures its step first, untimed")
