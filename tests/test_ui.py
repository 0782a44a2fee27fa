"""The page (dashboard.ui, its tabs in dashboard.ui.tabs, its form and banner) built in-process, without serving it:
what its text and its updates say."""

from __future__ import annotations

import gzip
import itertools
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from dashboard.service.jobs import COMPARE, DONE, RUNNING, Job
from dashboard.service.limits import EXPOSED_LIMITS
from dashboard.service.page_record import live_series
from tests.conftest import TINY, bench_report, fast_settings, page_request
from tests.test_dashboard_client import text_of
from tests.test_timeline import lane_labels

pytestmark = pytest.mark.usefixtures("validated")  # figures are built with plotly's validation on


def test_the_form_says_what_a_shared_server_allows(tiny_runner):
    from dashboard.ui import build_demo

    saved = tiny_runner.limits
    tiny_runner.limits = EXPOSED_LIMITS
    try:
        demo = build_demo(tiny_runner, defaults=fast_settings())
        texts = [b.value for b in demo.blocks.values() if getattr(b, "elem_id", None) == "limits"]
        assert texts and "at most 1024 new tokens, batch 8" in text_of(texts[0])
    finally:
        tiny_runner.limits = saved


def test_the_compare_tab_redraws_the_timeline_each_time_a_trial_ends(cuda_report):
    class FakeJob:
        id, done = 1, False

        def __init__(self, polls: int):
            self.answers = iter([False] * polls + [True])

        def wait(self, timeout: float) -> bool:
            return next(self.answers)

    trials = [[], cuda_report["runs"][:1], cuda_report["runs"][:1], cuda_report["runs"][:2]]
    snapshots = iter({"status": "Timing…", "runs": runs} for runs in trials)
    runner = type("FakeRunner", (), {"model_spec": TINY, "snapshot": lambda self, job: next(snapshots),
                                     "cancel": lambda self, job_id, **reason: None, "uses_cuda": True})()
    app = quiet_page(runner, chart_interval_s=1e9)
    following = app.compare._follow(FakeJob(len(trials)), "someone")
    updates = list(itertools.islice(following, len(trials)))
    following.close()
    redrawn = [i for i, update in enumerate(updates) if "timeline_plot" in update]
    assert redrawn == [1, 3], "drawn when a trial's run arrives, not at every poll"
    assert lane_labels(updates[3]["timeline_plot"]) == ["naive · host", "naive · GPU", "pipelined · host",
                                                     "pipelined · GPU"]


# ---- issue 33: a page that describes what it shows

H200_REPORT = "benchmarks/lab/results/h200-2026-12-01/audit-ro-1b.json.gz"


def h200_saved_report():
    """The committed 1B reduce-overhead H200 report, with its sync audit and kernel measurement."""
    from core.documents.files import read_report_bytes
    from dashboard.service.page_record import open_report
    from tests.test_dashboard_browser import REPO

    return open_report(read_report_bytes(REPO / H200_REPORT))


@pytest.fixture(scope="module")
def h200_saved():
    return h200_saved_report()


class QuietRunner:
    """What the banner, a run and the history read of a runner, with nothing loading and no engine."""

    model_spec, monitor, last_load_error, engine_trouble, uses_cuda = TINY, None, None, None, False
    engine_client = type("Client", (), {"hello_event": type("Set", (), {"is_set": lambda self: True})()})()

    def __init__(self, pending=(), rows=()):
        self._pending, self._rows = list(pending), list(rows)

    def pending(self):
        return self._pending

    def position(self, job):
        return 2

    def public_name(self, spec):
        return spec

    def device_label(self):
        return "cpu, float32; fused qkv, fused gate_up, compiled decode attention: reduce"

    def history(self, owner=None):
        return [dict(row) for row in self._rows]


def named(*keys):
    """Components that are their names, so that an update is keyed by names."""
    return {key: key for key in keys}


COMPARE_KEYS = ("status", "naive_rate", "naive_text", "pipelined_rate", "pipelined_text", "headline", "summary",
                "summary_more", "shows", "command", "tokens_plot", "device_plot", "steps_plot", "gap_plot",
                "timeline_plot", "model", "run_note")
HISTORY_KEYS = ("history", "csv", "json", "report_file", "trace_file", "html_file", "run_a", "run_b")


class QuietPage:
    """The page's context and tabs over `runner` (a QuietRunner by default) as build_demo makes them, but each
    component its name; the banner is "banner" and the browser's id "browser_state"."""

    def __init__(self, runner=None, **config):
        from dashboard.ui.diff_panel import COMPONENTS, DiffPanel
        from dashboard.ui.form import OptionsNote
        from dashboard.ui.page import PageConfig, PageContext
        from dashboard.ui.tabs import your_loop
        from dashboard.ui.tabs.compare import CompareTab
        from dashboard.ui.tabs.history import HistoryTab
        from dashboard.ui.tabs.replay import REPLAY_OUTPUTS, ReplayTab
        from dashboard.views.banner import ServerBanner

        runner = runner or QuietRunner()
        self.context = PageContext(runner, PageConfig(**{"defaults": {}, "replay_files": {}, **config}),
                                   ServerBanner(runner), banner_md="banner", browser_state="browser_state")
        self.banner = self.context.banner
        self.options = OptionsNote(runner)
        self.history = HistoryTab(self.context, named(*HISTORY_KEYS), DiffPanel(named(*COMPONENTS)))
        self.compare = CompareTab(self.context, named(*COMPARE_KEYS), self.history)
        self.replay = ReplayTab(self.context, named(*REPLAY_OUTPUTS, "timeline_note", "timeline_plot"),
                                DiffPanel(named(*COMPONENTS)))
        self.your_loop = your_loop.YourLoopTab(self.context, named(*your_loop.OUTPUTS))


def quiet_page(runner=None, **config):
    return QuietPage(runner, **config)


def test_the_model_line_names_the_decode_attention_as_what_compiled_runs_use_in_words():
    from dashboard.views.banner import model_line

    in_place = "With Compile on, decode attention reads the KV cache in place, without copying it per query head,"
    reduce = f"{in_place} as products and sums that torch.compile turns into reduction kernels."
    assert model_line("cpu, float32; fused qkv, fused gate_up, compiled decode attention: reduce") == \
        f"cpu, float32; fused qkv, fused gate_up. {reduce}"
    assert model_line("cuda:0 (H200), bfloat16; compiled decode attention: triton, no fused qkv: tied") == \
        f"cuda:0 (H200), bfloat16; no fused qkv: tied. {in_place} with one hand-written Triton kernel per layer."
    assert model_line("cpu, float32; compiled decode attention: split") == \
        f"cpu, float32. {in_place} in chunks of 64 keys, as products and sums that torch.compile turns into " \
        "reduction kernels."
    assert model_line("cpu, float32") == "cpu, float32."
    assert model_line("cuda:0 (H200), bfloat16; fused qkv, compiled decode attention: triton, decoder layers in six "
                      "kernels") == (f"cuda:0 (H200), bfloat16; fused qkv. {in_place} with one hand-written Triton "
                                     "kernel per layer. With step-graph, each decoder layer's decode step runs in six "
                                     "kernels.")
    assert model_line("cpu; compiled decode attention: newkernel").endswith(
        "with the newkernel kernel (SYNCSCOPE_DECODE_ATTENTION).")
    banner = text_of(quiet_page().banner.text())
    assert f"fused gate_up. {reduce}" in banner and "runs as reduce" not in banner
    assert "fused gate_up, compiled decode attention" not in banner


def test_on_replay_the_banner_describes_the_replayed_reports_device(h200_saved):
    from dashboard.views.banner import ONE_PROCESSOR, report_device

    page = quiet_page().banner
    assert ONE_PROCESSOR in page.for_view({"tab": "compare", "replay": None}), "this CPU server's expectation"
    shown = {"tab": "replay", "replay": report_device(h200_saved.report)}
    banner = text_of(page.for_view(shown))
    assert "no difference between the loops is expected" not in banner
    assert "measured on NVIDIA H200" in banner and "Model: tiny-random" in banner
    cpu = text_of(page.for_view({"tab": "replay", "replay": {"type": "cpu", "where": "cpu"}}))
    assert "measured on the CPU" in cpu and "no difference between the loops is expected" in cpu
    back = page.on_tab("compare", shown)
    assert back[0]["tab"] == "compare" and ONE_PROCESSOR in back[1], "the Compare tab describes this server again"


def test_an_upload_that_is_empty_or_badly_gzipped_gets_its_reason_in_the_status_line():
    import gzip

    page = quiet_page(max_report_bytes=1000)
    for data, why in ((b" \n", "the file is empty (only whitespace)"), (gzip.compress(b""), "gzip of an empty file"),
                      (gzip.compress(b" " * 5000 + b"{}"), "decompresses to more than"),
                      (gzip.compress(b'{"a": 1}' * 50)[:30], "cut short"),
                      (b"\x1f\x8b" + b"not gzip at all", "not a readable gzip file")):
        status = text_of(page.replay.replay_upload(data)["status"])
        assert why in status, (data[:20], status)
        audited = text_of(page.your_loop.audit_upload(data)["status"])
        assert why in audited, (data[:20], audited)


def test_replay_opens_a_gzipped_upload_and_says_when_a_report_was_cut_short(h200_saved):
    import gzip

    page = quiet_page().replay
    empty = page.replay_upload(b"")
    assert text_of(empty["status"]) == "Cannot open this file: the file is empty (0 bytes)"
    cut = {**h200_saved.report, "interrupted": True}
    shown = page.replay_upload(gzip.compress(json.dumps(cut).encode()))
    assert text_of(shown["status"]).startswith("Showing the uploaded file: synthetic:llama-1b on NVIDIA H200")
    assert "This run was cut short" in text_of(shown["status"])
    whole = page.replay_upload(gzip.compress(json.dumps(h200_saved.report).encode()))
    assert "cut short" not in whole["status"]


def test_the_summary_leads_with_the_verdicts_evidence(h200_saved):
    from dashboard.views.run_summary import DETAIL_HEADERS, EVIDENCE_HEADERS, summary_tables

    evidence, details = summary_tables(h200_saved.report)
    rows = {row[0]: dict(zip(EVIDENCE_HEADERS, row)) for row in evidence}
    assert rows["pipelined"]["× naive (decode)"] == "1.368×"
    assert rows["pipelined"]["interval"] == "1.263–1.452× (95%)" and rows["pipelined"]["verdict"] == "faster"
    assert rows["naive"]["× naive (decode)"] == rows["naive"]["verdict"] == "–"
    assert rows["naive"]["decode tok/s"] == 604.8 and rows["pipelined"]["decode spread %"] == 0.0
    more = {row[0]: dict(zip(DETAIL_HEADERS, row)) for row in details}
    assert more["naive"]["host wait µs/step"] == 946 and "decode tok/s" not in DETAIL_HEADERS
    assert [row[0] for row in evidence] == [row[0] for row in details]


def test_each_visitors_runs_are_numbered_from_one_on_the_page_and_in_the_downloads(tmp_path):
    from dashboard.ui.tabs.history import HISTORY_COLUMNS

    rows = [{"run": 7, "status": "done"}, {"run": 12, "status": "failed"}]
    page = quiet_page(QuietRunner(rows=rows), download_dir=tmp_path).history
    shown = page.history_table_rows("someone")
    assert [row[HISTORY_COLUMNS.index("run")] for row in shown] == [1, 2]
    csv_path, json_path = page._write_history("someone")
    assert [line.split(",")[0] for line in Path(csv_path).read_text().splitlines()[1:]] == ["1", "2"]
    assert [run["run"] for run in json.loads(Path(json_path).read_text())["runs"]] == [1, 2]
    assert [row["job"] for row in page.visitor_history("someone")] == [7, 12], "the server's ids are kept"


def test_a_second_run_click_is_answered_beside_run(monkeypatch):
    from dashboard.service.jobs import COMPARE, QUEUED

    going = type("Job", (), {"owner": "someone", "work": COMPARE, "state": QUEUED})()
    page = quiet_page(QuietRunner(pending=[going]))
    monkeypatch.setattr(page.context, "owner", lambda request: "someone")
    answer = list(page.compare.run(None, prompt="hi"))
    assert answer == [{"run_note": answer[0]["run_note"]}], "the first run's status is left alone"
    assert text_of(answer[0]["run_note"]).startswith("A run of yours is already going (queued, position 3: 2 jobs "
                                                      "ahead of it): this click started nothing.")


def test_what_this_run_shows_is_said_under_the_headline_with_code_as_code(h200_saved, monkeypatch):
    from dashboard.views import run_summary
    from dashboard.views.run_summary import code_quoted, run_shows_md

    shown = run_shows_md(h200_saved.report)
    assert shown.startswith("**What this run shows:** naive waited 946 µs per step in `.item()` at ")
    assert "1\\.37x, faster" in shown
    assert code_quoted("in `<b>x</b>` and *not* code") == "in `<b>x</b>` and \\*not\\* code"
    assert code_quoted("an `unpaired quote") == "an \\`unpaired quote"
    monkeypatch.setattr(run_summary, "what_this_run_shows", lambda report: 1 / 0)
    assert run_shows_md(h200_saved.report) == ("*What this run shows cannot be said for this report: a field it "
                                               "reads is not what core.bench writes.*"), "in words, no class names"


def test_two_clicks_handled_at_once_submit_one_run():
    """Two Run clicks of one visitor handled in parallel: one submits, the other finds it going (a busy CI machine
    once let both find nothing and both submit)."""
    import threading
    import time as clock

    from dashboard.service.jobs import COMPARE

    class SlowSubmitRunner(QuietRunner):
        def submit(self, form, owner=None, address=None):
            clock.sleep(0.2)  # the window in which a second click used to find nothing going
            job = type("FakeJob", (), {"owner": owner, "work": COMPARE})()
            self._pending.append(job)
            return job

    page = quiet_page(SlowSubmitRunner()).compare
    results = []
    clicks = [threading.Thread(target=lambda: results.append(page._submit_unless_going({}, "visitor")))
              for _ in range(2)]
    for click in clicks:
        click.start()
    for click in clicks:
        click.join()
    submitted = [job for going, job, _ in results if job is not None]
    answered = [going for going, job, _ in results if going is not None]
    assert len(submitted) == 1 and answered == submitted


# ---- issue 39: the page's smaller defects

INTERRUPTED_REPORT = "benchmarks/lab/results/h200-2026-12-01/interrupted-ro-1b.json.gz"  # SIGINT after 2 of 50 rounds
CPU_AUDIT = "benchmarks/lab/results/cpu-2026-12-01/audit-naive_loop.json"


def replay_page(**config):
    return quiet_page(**config)


def test_replay_of_a_run_cut_short_says_how_many_of_its_planned_trials_it_holds():
    from core.documents.files import read_report_bytes
    from tests.test_dashboard_browser import REPO

    page = replay_page().replay
    data = read_report_bytes(REPO / INTERRUPTED_REPORT)
    status = text_of(page.replay_upload(data)["status"])
    assert "(bfloat16), 2 of 50 trial(s) (cut short), created" in status, status
    assert "This run was cut short" in status
    report = json.loads(data)
    report["runs"] = [run for run in report["runs"] if (run["trial"], run["contestant"]) != (1, "pipelined")]
    assert report["interruption"]["trials_done"] == 2, "the file says 2; its runs hold one whole round"
    assert "1 of 50 trial(s) (cut short)" in text_of(page.replay_upload(json.dumps(report).encode())["status"])
    whole = text_of(page.replay_upload(json.dumps(h200_saved_report().report).encode())["status"])
    assert "cut short" not in whole and re.search(r"\), \d+ trial\(s\), created", whole), whole


def test_compare_two_runs_preselects_the_last_two_runs_that_have_a_report():
    rows = [{"run": 3, "status": "done"}, {"run": 4, "status": "done"}, {"run": 5, "status": "failed"},
            {"run": 6, "status": "done"}, {"run": 8, "status": "cancelled"}]
    page = quiet_page(QuietRunner(rows=rows)).history
    pickers = page.run_choices("someone")
    assert (pickers["run_a"]["value"], pickers["run_b"]["value"]) == (2, 4), "this visitor's runs 2 and 4 (done)"
    assert [number for _, number in pickers["run_a"]["choices"]] == [1, 2, 3, 4, 5], "the others are still listed"
    page = quiet_page(QuietRunner(rows=[{"run": 1, "status": "done"}, {"run": 2, "status": "failed"}])).history
    pickers = page.run_choices("someone")
    assert pickers["run_a"]["value"] is None and pickers["run_b"]["value"] is None, "one report: nothing to compare"


def test_an_audit_opened_in_replay_and_a_report_opened_in_your_loop_say_which_tab_opens_them(tmp_path):
    import gzip

    from core.documents.files import read_report_bytes
    from dashboard.service.page_record import page_report
    from tests.test_dashboard_browser import REPO

    audit = (REPO / CPU_AUDIT).read_bytes()
    page = replay_page(replay_files={"an audit.json": REPO / CPU_AUDIT})
    for shown in (page.replay.replay_upload(audit), page.replay.replay_upload(gzip.compress(audit)),
                  page.replay.replay_bundled("an audit.json")):
        status = text_of(shown["status"])
        assert "is an audit report of a program" in status and "open it in the Your loop tab" in status, status
        assert list(shown) == ["status"], "the page stays as it was"
    assert "not a syncscope benchmark report" in text_of(page.replay.replay_upload(b'{"schema": "other/1"}')["status"])
    bench = read_report_bytes(REPO / H200_REPORT)
    wrapped = json.dumps(page_report(json.loads(bench), None)).encode()
    for data in (bench, wrapped):
        status = text_of(page.your_loop.audit_upload(data)["status"])
        assert "is a benchmark report" in status and "open it in the Replay tab" in status, status
    assert "not an audit report (no" in text_of(page.your_loop.audit_upload(b'{"schema": "other/1"}')["status"])


class CudaRunner(QuietRunner):
    uses_cuda = True


def test_the_loop_options_note_says_at_once_what_this_cpu_server_runs_in_place_of_a_cuda_only_choice():
    from core.request.options import GenerationOptions, adapt_to_device

    def cpu_says(**asked):
        return adapt_to_device(GenerationOptions(cache="static", **asked), "cpu")[1]

    cpu, cuda = quiet_page().options, quiet_page(CudaRunner()).options
    static_on = "Note: compile needs StaticCache (a growing cache would recompile every step): turned it on."
    for mode in ("step-graph", "reduce-overhead", "max-autotune"):
        static, note = cpu.on_compile(mode, False, 1)
        (notice,) = cpu_says(compile=mode)
        assert static is True and text_of(note) == f"{static_on}  \nOn this CPU server: {notice}.", mode
        assert cuda.on_compile(mode, False, 1) == (True, static_on), "a GPU runs it as chosen"
    assert text_of(cpu.on_compile("step-graph", False, 1)[1]).endswith(
        "On this CPU server: compile=step-graph captures the decode step in a CUDA graph, which needs an NVIDIA GPU; "
        "running without compile (mode 'off') on the CPU.")
    assert cpu.on_compile("default", True, 1) == (True, ""), "compile default runs on the CPU as chosen"
    (streams,) = cpu_says(streams=2)
    assert text_of(cpu.on_streams(2, "off")) == f"On this CPU server: {streams}."
    assert cpu.on_streams(1, "off") == "" and cuda.on_streams(2, "step-graph") == ""
    compile_mode, note = cpu.on_static(False, "step-graph", 2)
    assert compile_mode == "off" and text_of(note) == ("Note: without StaticCache compile cannot work: compile "
                                                       f"turned off.  \nOn this CPU server: {streams}.")
    assert cuda.on_static(False, "step-graph", 2) == ("off", "Note: without StaticCache compile cannot work: compile "
                                                             "turned off.")
    assert cpu.on_streams("two", "off") == "", "a value the run's check refuses at Run gets no note here"


def test_a_cuda_only_default_is_named_in_the_loop_options_note_when_the_page_loads(tiny_runner):
    from dashboard.ui import build_demo

    demo = build_demo(tiny_runner, defaults={**fast_settings(), "compile": "step-graph", "cache": "static"})
    (note,) = [b.value for b in demo.blocks.values() if getattr(b, "elem_id", None) == "options-note"]
    assert text_of(note).startswith("On this CPU server: compile=step-graph captures the decode step"), note


# ---- a run's last update: the downloads of a run a reload picked up, and the summary's ratio

class OneRunRunner(QuietRunner):
    """A runner whose browser has one run, `job`, shown with `status`; `rows` is its history as it is at each read."""

    def __init__(self, job: Job, status: str, rows: list[dict] | None = None):
        super().__init__()
        self.job, self.status, self.rows = job, status, rows

    def snapshot(self, job):
        return {"status": self.status, "runs": [], "panes": {}, **live_series()}  # as the runner's, its live series

    def latest_run(self, owner):
        return self.job

    def cancel(self, *args, **kwargs):
        return None

    def history(self, owner=None):
        return [dict(row) for row in self.rows] if self.rows is not None else super().history(owner)


def reloaded_page_updates(runner: QuietRunner, downloads: Path) -> list[dict]:
    """What a page loaded (or reloaded) by the browser "b" * 32 is sent, to the end of its stream."""
    page = quiet_page(runner)
    page.context.downloads.root = downloads
    return list(page.compare.on_load("b" * 32, SimpleNamespace(session_hash="session")))


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
    updates = reloaded_page_updates(OneRunRunner(job, "Timing…"), tmp_path)
    last = updates[-1]["report_file"]
    path = last.value["path"] if isinstance(last.value, dict) else last.value  # Gradio may keep it as its FileData
    assert last.interactive is True and path and Path(path).is_file()
    assert updates[-1]["trace_file"].visible is True


def test_a_reload_as_its_run_ends_shows_the_run_in_the_history(tmp_path, tiny):
    """JobQueue.finish sets a run's state, then writes its history row, then sets its finished event. A page loaded
    in between (a reload as the run ends) follows the run to that event, and its history shows the run."""
    from dashboard.service.run_history import history_row

    request, _ = page_request(fast_settings())
    job = Job(id=1, work=COMPARE, owner="browser", model=TINY, request=request, state=DONE, t0=100.0)
    job.t_end, job.report = 101.0, bench_report(tiny)
    rows: list[dict] = []
    answers = iter([False])  # the page's first look: the event is not set yet; the next wait sees the run's end

    def wait(timeout: float | None = None) -> bool:
        if next(answers, True) is False:
            return False
        rows.append(history_row(job.id, job.state, job.request, TINY, job.report, None, "cpu"))
        return True

    job.wait = wait  # type: ignore[method-assign]
    updates = reloaded_page_updates(OneRunRunner(job, "Done", rows), tmp_path)
    tables = [update["history"] for update in updates if "history" in update]
    assert [row[1] for row in tables[-1]] == ["done"]


def test_the_summarys_ratio_is_computed_from_the_rates_not_from_the_cells_rounding(tiny):
    """Rates of 1.04 and 1.02 tok/s show as 1.0 each; their ratio is 0.981, as the verdict's, not 1.000."""
    from dashboard.views.run_summary import EVIDENCE_HEADERS, summary_tables

    report = bench_report(tiny, trials=3)
    report["summary"]["naive"]["decode_tokens_per_s"] = 1.04
    report["summary"]["pipelined"]["decode_tokens_per_s"] = 1.02
    evidence, _ = summary_tables(report)
    pipelined = dict(zip(EVIDENCE_HEADERS, next(row for row in evidence if row[0] == "pipelined")))
    assert pipelined["× naive (decode)"] == f"{1.02 / 1.04:.3f}×" == "0.981×"


STEP_TIME_REPORT = (Path(__file__).parent.parent
                    / "benchmarks/lab/results/h200-2026-12-02/call4/sg-llama-8b-o-proj-library-1.json.gz")


def test_replay_shows_where_a_decode_step_s_device_time_went():
    # A report measured on one H200 (its kernel measurement splits each decode step by kind) and one without the split.
    from dashboard.views.step_time import ALL_KERNELS, GAPS, STEP_TIME_HEADERS

    page = quiet_page().replay
    shown = page.replay_upload(STEP_TIME_REPORT.read_bytes())
    rows = shown["step_time"]
    assert rows and all(len(row) == len(STEP_TIME_HEADERS) for row in rows)
    pipelined = {row[1]: row for row in rows if row[0] == "pipelined"}
    assert next(iter(pipelined)) == "matrix products" and GAPS in pipelined
    assert 3000 < pipelined["matrix products"][2] < 6000 and pipelined["attention"][3] == 64
    shares = sum(float(row[4].rstrip("%")) for row in pipelined.values())
    assert abs(shares - 100) < 0.5
    report = json.loads(gzip.decompress(STEP_TIME_REPORT.read_bytes()))
    for measured in report["kernel_measurement"].values():
        del measured["kinds"]
    unsplit = page.replay_upload(gzip.compress(json.dumps(report).encode()))["step_time"]
    kernels = {row[0]: row for row in unsplit if row[1] == ALL_KERNELS}
    assert {row[1] for row in unsplit} == {ALL_KERNELS, GAPS}, "an older report: all its kernels in one row"
    assert kernels["pipelined"][2] == round(report["kernel_measurement"]["pipelined"]["kernel_busy_ms_per_step"]
                                            * 1000, 1)


# ---- issue 42: a file that passed the checks and still breaks a view is said in words

PYTHON_NAMES = ("Error", "Exception", "Traceback", "operand")


def test_replay_and_the_file_diff_say_in_words_what_they_cannot_draw(monkeypatch):
    from core.documents.files import read_report_bytes
    from dashboard.ui import diff_panel
    from dashboard.ui.tabs import replay
    from tests.test_dashboard_browser import REPO

    def broken(*args, **kwargs):
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")

    data = read_report_bytes(REPO / H200_REPORT)
    page = replay_page().replay
    monkeypatch.setattr(replay.run_charts, "all_figures", broken)
    status = text_of(page.replay_upload(data)["status"])
    assert status == f"Cannot show this file: {replay.CANNOT_DRAW}.", status
    monkeypatch.setattr(diff_panel, "diff_reports", broken)
    diffed = text_of(page.diff_files(data, data)[page.diff_panel.components["status"]])
    assert diffed == f"Cannot diff these two: {diff_panel.CANNOT_DIFF}.", diffed
    assert not any(word in status + diffed for word in PYTHON_NAMES)


def test_the_report_endpoint_refuses_a_run_that_is_not_a_number_quoting_a_little_of_it():
    import gradio as gr

    page = quiet_page().history
    with pytest.raises(gr.Error) as caught:
        page.report_of_run("<img src=x>" * 10**5)
    message = str(caught.value.message)
    assert len(message) < 300 and "<img" not in message and "1,100,000 characters in all" in message, message


def test_on_a_cpu_host_the_page_keeps_quiet_while_a_trial_is_timed():
    from dashboard.ui.tabs.compare import quiet_now

    timed = {"phase": "trial", "state": "running"}
    assert quiet_now(timed, cuda=False)
    assert not quiet_now(timed, cuda=True), "on a GPU the page costs the loop nothing measurable: it stays live"
    assert not quiet_now({"phase": "warmup", "state": "running"}, cuda=False), "a warm-up is untimed: live"
    assert not quiet_now({"phase": "trial", "state": "done"}, cuda=False)


def test_a_reloads_old_page_closing_leaves_the_new_pages_downloads_and_the_last_page_takes_them(tmp_path):
    """A reload opens the new page before the old one's close arrives; both are one browser. The old page's close
    used to remove the browser's download folder under the new page (its history files, its report), which could
    fail the new page's end-of-run update mid-write."""
    from dashboard.ui.page import Visitors

    class Page:
        def __init__(self, session: str):
            self.session_hash = session

    visitors, forgotten = Visitors(), []
    old, new, api = Page("s-old"), Page("s-new"), Page("s-api")
    browser = visitors.tie(None, old)
    assert visitors.tie(browser, new) == browser and visitors.owner(new) == browser
    assert visitors.leave(old, when_last=forgotten.append) == browser
    assert forgotten == [], "the reloaded page of the same browser is still open"
    assert visitors.owner(old) == "s-old", "the closed page's session is no longer tied"
    visitors.leave(new, when_last=forgotten.append)
    assert forgotten == [browser]
    visitors.leave(api, when_last=forgotten.append)  # an API client: its session is its owner
    assert forgotten == [browser, "s-api"]


def test_the_your_loop_tab_says_how_to_audit_as_the_readme_does():
    from dashboard.ui.tabs.your_loop import HOW_TO_AUDIT

    status = text_of(quiet_page().your_loop.audit_upload(None)["status"])
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    audit_section = " ".join(readme.split("## Audit your own loop")[1].split("\n## ")[0].split())
    for said in (status, audit_section):
        assert ".venv/bin/python -m core.audit" in said and "syncscope-audit" in said and "checkout" in said, said
    assert HOW_TO_AUDIT in status
    commands = [line for line in readme.splitlines() if "-m core.audit " in line]
    assert commands and all(".venv/bin/python -m core.audit" in line for line in commands), commands
