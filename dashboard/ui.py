"""The Gradio page: controls, two streaming panes, live charts, summary, history, Explain, and Replay.

Everything the page shows comes from `dashboard.runner` (one queue in front of the engine process) and
`dashboard.charts` (figures from plain data). `build_demo(runner)` builds the page without launching it, so tests
can serve it in-process. Text that came from a user or a file is shown as text, never as HTML (`plain`).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import secrets
import threading
import time
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from core.explain import what_this_run_shows
from core.measure.trace import chrome_trace
from core.options import (
    CHOICE,
    CLI_ONLY,
    DEFAULT_PROMPT,
    FLAG,
    MAX_PROMPT_CHARS,
    PAGE_GROUPS,
    RUN_OPTION,
    RUN_OPTIONS,
    WHOLE,
    GenerationOptions,
    RunOption,
    adapt_to_device,
    compile_needs_static_cache,
)
from core.report_comparison import compare_reports
from core.report_files import read_report_bytes
from core.report_schema import MAX_REPORT_BYTES, too_large
from core.run_schema import option_defaults
from dashboard import audit_view, charts, compare_view, lanes
from dashboard.downloads import DownloadFolders
from dashboard.history import HISTORY_SCHEMA, OPTION_COLUMNS, history_csv
from dashboard.job_queue import KEEP_FINISHED_JOBS
from dashboard.jobs import COMPARE, DONE, FAILED, LOAD, LOADING, Job
from dashboard.limits import LOCAL_LIMITS, clip
from dashboard.page_record import PageRecord, SavedReport, open_report, page_report, public_report
from dashboard.rate_series import live_series_from_report
from dashboard.report_text import cell, headline_md, plain, rate_md, status_md, table_rows
from dashboard.runner import Runner
from dashboard.summary_table import SUMMARY_HEADERS

EXAMPLE_PROMPTS = (
    DEFAULT_PROMPT,
    "Explain in three paragraphs how a lighthouse works.",
    "What is the capital of France?",
    "List ten uses for a paperclip, with a sentence on each.",
    "Write a haiku about waiting for a GPU.",
)
PAGE_OPTIONS = tuple(option for option in RUN_OPTIONS if option.group != CLI_ONLY)  # the form's fields, in order
GROUP_ACCORDIONS = {"loop": ("Loop options", True), "sampling": ("Sampling", False)}  # PAGE_GROUPS after "run"
# The summary in two tables, so that the verdict's evidence is in view at 1400 px without scrolling sideways: each
# contestant's decode rate, its spread and sameness, its ratio to the baseline, and (for the verdict's contender) the
# interval and the call; then where the time went and the rest (SUMMARY_HEADERS' other columns).
SPREAD_HEADER = "decode spread %"  # the CLI table's name (core.report.TABLE_KEY: the decode rate's)
EVIDENCE_HEADERS = ("contestant", "decode tok/s", SPREAD_HEADER, "same tokens", "× naive (decode)", "interval",
                    "verdict")
EVIDENCE_WIDTHS = ["115px", "95px", "110px", "90px", "110px", "150px", "100px"]  # 770 px: the results column at 1400
_EVIDENCE_FROM_SUMMARY = ("contestant", "decode tok/s", "decode spread %", "same tokens")
DETAIL_HEADERS = ("contestant", *(h for h in SUMMARY_HEADERS if h not in _EVIDENCE_FROM_SUMMARY))
DETAIL_WIDTHS = ["130px", *("110px" for _ in DETAIL_HEADERS[1:])]
HISTORY_COLUMNS = ("run", "status", "model", "tp", *OPTION_COLUMNS, "naive_decode_tok_s", "pipelined_decode_tok_s",
                   "speedup", "verdict", "identical", "clock", "notes")
OUTPUTS = ("status", "naive_rate", "naive_text", "pipelined_rate", "pipelined_text", "headline", "summary",
           "command", "tokens_plot", "device_plot", "steps_plot", "gap_plot", "history", "csv", "json",
           "report_file", "trace_file", "banner", "model", "run_note", "summary_more", "shows", "run_a", "run_b")
REPLAY_OUTPUTS = ("status", "headline", "summary", "tokens_plot", "device_plot", "steps_plot", "gap_plot", "command",
                  "summary_more", "shows")
# The longest reproduce command a page shows: a prompt at the page's limit, quoted, plus the flags.
MAX_COMMAND_CHARS = 2 * MAX_PROMPT_CHARS + 2000
CSS = """
.pane textarea { font-family: ui-monospace, monospace; font-size: 13px; }
#status { min-height: 2.2em; }
.rate { font-size: 15px; }
#summary, #replay-summary, #summary-more, #replay-summary-more, #history { overflow-x: auto; }
#summary-more table, #replay-summary-more table { min-width: 1200px; }
#history table { min-width: 1200px; }
#audit-sites { overflow-x: auto; }
#audit-sites table { min-width: 1210px; }  /* audit_view.SITE_WIDTHS: scrolls sideways rather than squeezing */
/* A phone: the results right under Run (the remaining controls follow them), no plotly toolbar over the titles,
   titles small enough to fit the chart's width, and no span labels (the legend names the colours). */
@media (max-width: 720px) {
  /* Run inside the first screen: a smaller title and banner; the banner's lines vary with the server's state, so
     past a third of the screen it scrolls inside itself. */
  .prose h1 { font-size: 22px !important; line-height: 1.25 !important; margin-bottom: 4px !important; }
  .prose:has(> h1) p { font-size: 13px !important; }
  #banner .prose, #banner .prose * { font-size: 12.5px !important; }
  #banner { max-height: 32vh; overflow-y: auto !important; }
  #compare-row { flex-direction: column; }
  #controls-col { display: contents; }
  #controls-col > * { order: 0; width: 100%; }
  #results-col { order: 1; width: 100%; }
  #controls-col > #run-row ~ * { order: 2; }
  #controls-col > #run-note { order: 0; }  /* the answer to a second click stays beside Run */
  .js-plotly-plot .modebar-container { display: none; }
  .js-plotly-plot .gtitle { font-size: 12px !important; }
  .js-plotly-plot .gtitle-subtitle { font-size: 10px !important; }
  /* span labels (charts.span_shapes: the 10 px annotations of these charts) are placed for a desktop width */
  :is(#plot-tokens, #plot-device, #replay-plot-tokens, #replay-plot-device)
    .annotation-text[style*="font-size: 10px"] { display: none; }
}
"""

EXPLAIN = (Path(__file__).with_name("explain.md")).read_text(encoding="utf-8")  # the page's Explain section

REPORT_ON_CPU = ("**The report shown in Replay was measured on the CPU** ({where}), where host and device are one "
                 "processor: the sync the pipelined loop removes costs nothing there, and no difference between the "
                 "loops is expected. The lines above describe this server.")
REPORT_ON_GPU = ("**The report shown in Replay was measured on {where}**: there the host and the GPU are separate, so "
                 "a per-step sync can leave the GPU waiting; its verdict says whether removing it helped. The lines "
                 "above describe this server.")
REPORT_NOWHERE = ("**The report shown in Replay does not say where it was measured.** The lines above describe this "
                  "server, not that machine.")
ONE_PROCESSOR = ("**On the CPU, host and device are one processor:** there is no separate device to wait for, so the "
                 "sync the pipelined loop removes costs nothing here and no difference between the loops is "
                 "expected. A GPU server shows the effect.")
BANNER_REFRESH_S = 2.0
# A run whose page went away (a reload, a closed tab) goes on this long for the same browser to come back to it.
RECONNECT_GRACE_S = 15.0
MAX_BROWSERS = 10_000
_BROWSER_ID = re.compile(r"[0-9a-f]{32}")


@dataclass
class PageConfig:
    defaults: dict[str, Any]  # the form's first values: run options by name (core.options.RUN_OPTIONS) and model
    replay_files: dict[str, Path]
    audit_files: dict[str, Path] = dataclasses.field(default_factory=dict)  # bundled audit reports (Your loop)
    live_interval_s: float = 0.25
    chart_interval_s: float = 1.0
    download_dir: Path | None = None
    max_report_bytes: int = MAX_REPORT_BYTES  # launch the page with max_file_size at least this


class Dashboard:
    """Event handlers; holds the runner and the page's configuration."""

    def __init__(self, runner: Runner, config: PageConfig):
        self.runner = runner
        self.config = config
        self.downloads = DownloadFolders(config.download_dir)  # a folder per visitor, bounded, removed at exit
        self.download_dir = self.downloads.root
        self.notes: list[str] = []  # server-level notices for the banner (e.g. a share link that failed)
        self._submitting = threading.Lock()  # a visitor's "already going?" and the submit, as one step
        self.c: dict[str, Any] = {}  # Compare tab components, by name
        self.r: dict[str, Any] = {}  # Replay tab components
        self.a: dict[str, Any] = {}  # Your loop tab components
        self.h: dict[str, Any] = {}  # two history runs side by side (Compare tab)
        self.rc: dict[str, Any] = {}  # two report files side by side (Replay tab)
        self.view_state: Any = None  # build_demo's gr.State of what the page shows (Dashboard.banner_for)
        self.banner_md: Any = None
        # Owners are per browser (an id kept in its localStorage), so a reload keeps the visitor's runs and history.
        self._browsers: collections.OrderedDict[str, str] = collections.OrderedDict()  # session hash -> browser id
        self._watchers: collections.Counter[int] = collections.Counter()  # job id -> pages streaming it
        self._lock = threading.Lock()

    def owner(self, request: gr.Request | None) -> str:
        """Who a request is for: its browser's id once the page has loaded, else its session (API clients)."""
        session = getattr(request, "session_hash", None) if request is not None else None
        if not session:
            return "anonymous"
        with self._lock:
            return self._browsers.get(session, session)

    # ---- banner: the same for every visitor, so it holds server state only, never one user's errors

    def banner_for(self, view: Any = None) -> str:
        """The banner for what this page shows (`view`, its view_state): on Replay, the replayed report's device
        replaces what this server's device leads one to expect."""
        shown = view.get("replay") if isinstance(view, dict) and view.get("tab") == "replay" else None
        return self.banner(shown if isinstance(shown, dict) else None)

    def banner(self, replayed: dict[str, Any] | None = None) -> str:
        """The server's state; with `replayed` (report_device of a report shown in Replay), what that report's
        device leads one to expect in place of this server's."""
        runner, monitor = self.runner, self.runner.monitor
        lines = [f"**Note:** {plain(note)}" for note in self.notes]
        if runner.model_spec:
            lines.append(f"**Model:** {plain(runner.public_name(runner.model_spec))} on "
                         f"{plain(model_line(runner.device_label()))}")
        loading = [j for j in runner.pending() if j.work == LOAD or j.state == LOADING]
        if loading:
            lines.append(f"**Loading model {plain(runner.public_name(loading[0].model))}…**")
        elif not runner.engine_client.hello_event.is_set() and not runner.engine_trouble:
            lines.append("**Starting the engine process** (it imports torch, a few seconds)…")
        if runner.last_load_error and not loading:
            lines.append(f"**{plain(runner.last_load_error)}**" + ("" if runner.model_spec else
                                                                    " Choose a model and press Run to load one."))
        if runner.engine_trouble:
            lines.append(f"**Engine:** {plain(runner.engine_trouble)}")
        if monitor is not None and not monitor.available:
            lines.append(f"{plain(monitor.description)} Step times are measured on the host clock; there are no "
                         "CUDA events, GPU busy % or idle gaps to show.")
        elif monitor is not None:
            lines.append(f"**GPU:** {plain(monitor.description)}.")
        if replayed is not None:
            lines.append(replayed_line(replayed))
        elif not runner.uses_cuda:
            lines.append(ONE_PROCESSOR)
        return "  \n".join(lines)

    def on_tab(self, tab: str, view: Any) -> tuple[dict[str, Any], str]:
        """A tab was chosen: remember it in this page's view_state and redraw the banner for it."""
        view = {**(view if isinstance(view, dict) else {}), "tab": tab}
        return view, self.banner_for(view)

    # ---- run

    def run(self, request: gr.Request, **controls: Any) -> Iterator[dict]:
        """Queue a comparison and stream its progress until it finishes. `controls` are the model and the run options
        by name (the /run endpoint's parameters, core.options.RUN_OPTIONS), as the page's controls hold them."""
        owner = self.owner(request)
        form = {name: from_widget(RUN_OPTION[name], value) if name in RUN_OPTION else value
                for name, value in controls.items()}
        going, job, refusal = self._submit_unless_going(form, owner)
        if going is not None:  # a second click while one streams: answered beside Run, the first's status goes on
            yield {self.c["run_note"]: self._already_going(going)}
            return
        if job is None:
            yield {self.c["status"]: f"**Not started:** {plain(refusal)}"}
            return
        try:
            yield self._cleared(job)
            yield from self._follow(job, owner)
        except Exception as exc:  # a bug in drawing must not take the page down; the run itself is unaffected
            yield {self.c["status"]: f"**The page could not show this run:** {plain(type(exc).__name__)}: "
                                     f"{plain(exc)}"}

    def _submit_unless_going(self, form: dict[str, Any], owner: str) -> tuple[Job | None, Job | None, str | None]:
        """(the visitor's run already going, or None; the job submitted, or None; why it was refused). One at a
        time: two clicks handled at once must not both find nothing going and both submit."""
        with self._submitting:
            going = self._pending_run(owner)
            if going is not None:
                return going, None, None
            try:
                return None, self.runner.submit(form, owner=owner), None
            except ValueError as exc:
                return None, None, str(exc)

    def _pending_run(self, owner: str) -> Job | None:
        return next((j for j in self.runner.pending() if j.owner == owner and j.work == COMPARE), None)

    def _already_going(self, job: Job) -> str:
        ahead = self.runner.position(job)
        where = f"queued, position {ahead + 1}: {ahead} job{'s' if ahead != 1 else ''} ahead of it" if ahead \
            else "running now"
        return (f"**A run of yours is already going** ({where}): this click started nothing. Wait for it to "
                "finish, or press Cancel and Run again.")

    def _cleared(self, job: Job) -> dict:
        """What a new run replaces: the previous run's headline, summary, command and charts go at once."""
        c = self.c
        update = {c["headline"]: "*This run's verdict appears here when it finishes.*", c["summary"]: [],
                  c["summary_more"]: [], c["shows"]: "",
                  c["command"]: "", c["naive_text"]: "", c["pipelined_text"]: ""}
        update.update(zip((c["tokens_plot"], c["device_plot"], c["steps_plot"], c["gap_plot"]),
                          charts.all_figures({}, None)))
        update[c["lanes_plot"]] = lanes.lanes_figure({})
        update.update(self._live_update(self.runner.snapshot(job)))
        return update

    def _follow(self, job: Job, owner: str) -> Iterator[dict]:
        c = self.c
        last_chart, model_seen, lanes_runs = 0.0, self.runner.model_spec, 0
        with self._lock:
            self._watchers[job.id] += 1
        try:
            while not job.wait(self.config.live_interval_s):
                snap = self.runner.snapshot(job)
                update = self._live_update(snap)
                if time.monotonic() - last_chart >= self.config.chart_interval_s:
                    last_chart = time.monotonic()
                    update[c["tokens_plot"]] = charts.tokens_per_s_figure(snap)
                    update[c["device_plot"]] = charts.device_figure(snap)
                runs = snap.get("runs") or []
                if len(runs) != lanes_runs:  # a trial ended: redraw the timeline from the trials so far
                    lanes_runs = len(runs)
                    update[c["lanes_plot"]] = lanes.lanes_figure({"runs": runs})
                if self.runner.model_spec != model_seen:
                    model_seen = self.runner.model_spec
                    update[c["banner"]] = self.banner()
                yield update
        finally:
            self._release(job)
        yield self._final_update(job, owner)

    def _release(self, job: Job) -> None:
        """A page stopped streaming `job`; if none streams it RECONNECT_GRACE_S later, cancel it (free the device)."""
        with self._lock:
            self._watchers[job.id] -= 1
            if self._watchers[job.id] > 0 or job.done:
                if job.done:
                    del self._watchers[job.id]
                return
        timer = threading.Timer(RECONNECT_GRACE_S, self._cancel_if_unwatched, args=(job,))
        timer.daemon = True
        timer.start()

    def _cancel_if_unwatched(self, job: Job) -> None:
        with self._lock:
            watched = self._watchers[job.id] > 0
            if not watched:
                del self._watchers[job.id]
        if not watched and not job.done:
            self.runner.cancel(job.id, reason=f"its page was closed and not opened again within "
                                              f"{RECONNECT_GRACE_S:.0f} s, so the device was freed for others")

    # ---- page load: who this browser is, its history, and its run if one is going

    def on_load(self, browser_id: Any, request: gr.Request) -> Iterator[dict]:
        """Tie this page to its browser's id (made here on a first visit), show that browser's history and last
        run, and stream its run again if one is still queued or running (a reload does not lose it)."""
        browser_id = browser_id if isinstance(browser_id, str) and _BROWSER_ID.fullmatch(browser_id) \
            else secrets.token_hex(16)
        session = getattr(request, "session_hash", None)
        if session:
            with self._lock:
                self._browsers[session] = browser_id
                self._browsers.move_to_end(session)
                while len(self._browsers) > MAX_BROWSERS:
                    self._browsers.popitem(last=False)
        c = self.c
        update = {self.browser_state: browser_id, c["banner"]: self.banner(), **self._downloads(browser_id, None)}
        update[c["history"]] = self._historytable_rows(browser_id)
        update.update(self._run_choices(browser_id))
        if self.runner.last_load_error and not self.runner.model_spec:  # the startup model failed: not offered
            update[c["model"]] = self.runner.model_choices()[0]
        job = self.runner.latest_run(browser_id)
        if job is None:
            yield update
        elif job.done:
            # The last run's files as /run gives them, then every download with something behind it enabled (a
            # run's page enables them after it, enable_downloads).
            yield {**update, **self._final_update(job, browser_id), **self._downloads(browser_id, job.report, job.page)}
        else:
            yield {**update, **self._cleared(job)}
            yield from self._follow(job, browser_id)
            # A run's own page enables its downloads after it (enable_downloads); a page that picked the run up
            # on load has no such step, so it enables them here.
            yield self._downloads(browser_id, job.report, job.page)

    def _live_update(self, snap: dict[str, Any]) -> dict:
        c = self.c
        update = {c["status"]: status_md(snap)}
        for name in ("naive", "pipelined"):
            pane = snap.get("panes", {}).get(name)
            if pane:
                update[c[f"{name}_text"]] = pane["text"]
                update[c[f"{name}_rate"]] = rate_md(name, pane, snap.get("batch", 1))
        return update

    def _final_update(self, job: Job, owner: str) -> dict:
        c = self.c
        snap = self.runner.snapshot(job)
        update = self._live_update(snap)
        report = job.report
        figures = charts.all_figures(snap, report)
        update.update(zip((c["tokens_plot"], c["device_plot"], c["steps_plot"], c["gap_plot"]), figures))
        update[c["lanes_plot"]] = lanes.lanes_figure(report or {"runs": snap.get("runs") or []})
        update[c["headline"]] = headline_md(report, job.page) if report else ""
        update[c["summary"]], update[c["summary_more"]] = summary_tables(report, job.page) if report else ([], [])
        update[c["shows"]] = run_shows_md(report) if report else ""
        update[c["run_note"]] = ""  # an answer to a click during the run held until the run's end
        update[c["command"]] = self._command(job) if report else ""
        update[c["history"]] = self._historytable_rows(owner)
        update.update(self._run_choices(owner))
        update[c["banner"]] = self.banner()
        if job.state == FAILED and self.runner.model_spec and job.model != self.runner.model_spec:
            update[c["model"]] = self.runner.model_spec  # a spec that failed to load does not stay selected
        csv_path, json_path = self._write_history(owner)
        update[c["csv"]] = csv_path
        update[c["json"]] = json_path
        update[c["report_file"]] = self._write_report(owner, report, job.page) if report else None
        update[c["trace_file"]] = gr.update(visible=bool(report), value=self._write_trace(owner, report) if report
                                            else None)
        return update

    # ---- two runs side by side (dashboard.compare_view)

    def _run_choices(self, owner: str) -> dict:
        """The two run pickers: this visitor's runs by number, the last two with a report chosen (a run that failed,
        or was cancelled before its first round of trials, has none, so it cannot be compared)."""
        rows = self.visitor_history(owner)
        choices = [(run_label(row), row["run"]) for row in rows]
        reported = [row["run"] for row in rows if row.get("status") == DONE or row.get("verdict") is not None]
        first, second = reported[-2:] if len(reported) >= 2 else (None, None)
        return {self.c["run_a"]: gr.update(choices=choices, value=first),
                self.c["run_b"]: gr.update(choices=choices, value=second)}

    def compare_runs(self, first: Any, second: Any, request: gr.Request) -> dict:
        """Two of this visitor's runs (their numbers on the page) side by side."""
        owner = self.owner(request)
        if first is None or second is None:
            return {self.h["status"]: "Choose two runs of your history (A and B)."}
        try:
            a, b = (self._history_report(owner, number) for number in (first, second))
        except ValueError as exc:
            return {self.h["status"]: f"**Cannot compare:** {plain(exc)}"}
        return self._compared(self.h, a, b, f"run {first}", f"run {second}")

    def compare_files(self, first: bytes | None, second: bytes | None) -> dict:
        """Two report files (as Replay opens them) side by side."""
        if first is None or second is None:
            return {self.rc["status"]: "Choose two report files, A and B."}
        limit, reports = self.config.max_report_bytes, []
        for side, data in (("A", first), ("B", second)):
            try:
                reports.append(open_bench_report(uploaded_json(data, limit), limit).report)
            except ValueError as exc:
                return {self.rc["status"]: f"**Cannot open report {side}:** {plain(exc)}"}
        return self._compared(self.rc, *reports, "A", "B")

    def _history_report(self, owner: str, number: Any) -> dict[str, Any]:
        """The report of `owner`'s run `number`; ValueError saying why there is none."""
        report = self._history_job(owner, number).report
        assert report is not None
        return report

    def _history_job(self, owner: str, number: Any) -> Job:
        """`owner`'s run `number`, which has a report; ValueError saying why there is none."""
        rows = self.visitor_history(owner)
        if not isinstance(number, int) or not 1 <= number <= len(rows):
            raise ValueError(f"there is no run {plain(number)} in your history")
        row = rows[number - 1]
        job = self.runner.queue.get(row["job"])
        if job is None or job.owner != owner:
            raise ValueError(f"run {number}'s report is no longer kept on this server (it keeps the newest "
                             f"{KEEP_FINISHED_JOBS} runs); download reports and compare the files in Replay")
        if job.report is None:
            raise ValueError(f"run {number} has no report: it {row.get('status') or 'did not finish'}")
        return job

    def _compared(self, k: dict[str, Any], a: dict[str, Any], b: dict[str, Any], label_a: str, label_b: str) -> dict:
        try:
            result = compare_reports(a, b)
            return {k["status"]: compare_view.summary_md(result, plain),
                    k["settings"]: compare_view.settings_table(result), k["rates"]: compare_view.rates_table(result),
                    k["waits"]: compare_view.waits_table(result), k["lanes"]: lanes.compare_lanes(a, b, label_a,
                                                                                                label_b)}
        except Exception as exc:  # two reports that passed the checks but cannot be set side by side: say so
            return {k["status"]: f"**Cannot compare these two:** {plain(type(exc).__name__)}: {plain(exc)}"}

    def report_of_run(self, run: int = 0, request: gr.Request = None) -> dict[str, Any]:  # type: ignore[assignment]
        """The `/report` endpoint: one of your runs' report as JSON, the document "Last run's report" downloads
        (`{"schema": "syncscope.page-report/1", "report": <core's report>, "page": <what the page saw>}`; the
        verdict is at ["report"]["verdict"]). `run`: its number in your history (1 is your first run); 0, your
        latest run. A run still going, or one without a report, is refused with the reason."""
        owner = self.owner(request)
        if not isinstance(run, int) or isinstance(run, bool) or run < 0:
            raise gr.Error(f"run must be a run's number in your history (1, 2, ...) or 0 for the latest; got {run!r}")
        if run:
            try:
                job = self._history_job(owner, run)
            except ValueError as exc:
                raise gr.Error(str(exc)) from None
            return page_report(job.report, job.page)
        job = self.runner.latest_run(owner)
        if job is None:
            raise gr.Error("you have no run on this server yet: call /run first (with the same client)")
        if not job.done:
            raise gr.Error("your latest run is still going: call /report again once /run has returned")
        if job.report is None:
            raise gr.Error(f"your latest run has no report: it {job.state}" + (f" ({job.error})" if job.error else ""))
        return page_report(job.report, job.page)

    def enable_downloads(self, request: gr.Request) -> dict:
        """After a run: the buttons with something behind them become clickable."""
        job = self.runner.latest_run(self.owner(request))
        if job is None or not job.done:
            return self._downloads(self.owner(request), None)
        return self._downloads(self.owner(request), job.report, job.page)

    def _downloads(self, owner: str, report: dict[str, Any] | None, page: PageRecord | None = None) -> dict:
        """The download buttons: enabled only when there is something to download."""
        c = self.c
        history = bool(self.runner.history(owner))
        csv_path, json_path = self._write_history(owner) if history else (None, None)
        report_path = self._write_report(owner, report, page) if report else None
        trace_path = self._write_trace(owner, report) if report else None
        return {c["csv"]: gr.DownloadButton(value=csv_path, interactive=history),
                c["json"]: gr.DownloadButton(value=json_path, interactive=history),
                c["report_file"]: gr.DownloadButton(value=report_path, interactive=report_path is not None),
                c["trace_file"]: gr.DownloadButton(value=trace_path, visible=trace_path is not None)}

    @staticmethod
    def _command(job: Job) -> str:
        """The report's own reproduce command (core.report.reproduce_command), with a file to write the report to."""
        assert job.report is not None
        return job.report["command"] + " --json results.json"

    def cancel(self, request: gr.Request) -> str:
        owner = self.owner(request)
        jobs = [j for j in self.runner.pending() if j.owner == owner and j.work == COMPARE]
        if not jobs:
            return "Nothing to cancel."
        for job in jobs:
            self.runner.cancel(job.id, owner=owner)
        return "Cancelling… (a run stops within one decode step; if the engine is compiling, it is restarted)"

    # ---- history and downloads

    def visitor_history(self, owner: str) -> list[dict[str, Any]]:
        """`owner`'s history rows, each "run" numbered from 1 for this visitor (run ids are server-wide); the job's
        own id stays under "job"."""
        return [{**row, "run": number, "job": row.get("run")}
                for number, row in enumerate(self.runner.history(owner), start=1)]

    def _historytable_rows(self, owner: str) -> list[list[Any]]:
        return [[cell(row.get(k)) for k in HISTORY_COLUMNS] for row in self.visitor_history(owner)]

    def _owner_dir(self, owner: str) -> Path:
        return self.downloads.folder_for(owner)

    def _write_history(self, owner: str) -> tuple[str, str]:
        folder = self._owner_dir(owner)
        csv_path, json_path = folder / "syncscope-history.csv", folder / "syncscope-history.json"
        rows = [{k: v for k, v in row.items() if k != "job"} for row in self.visitor_history(owner)]
        csv_path.write_text(history_csv(rows), encoding="utf-8")
        json_path.write_text(json.dumps({"schema": HISTORY_SCHEMA, "runs": rows}, indent=1), encoding="utf-8")
        return str(csv_path), str(json_path)

    def _write_report(self, owner: str, report: dict[str, Any], page: PageRecord | None) -> str:
        path = self._owner_dir(owner) / "syncscope-report.json"
        path.write_text(json.dumps(page_report(report, page), indent=1), encoding="utf-8")
        return str(path)

    def _write_trace(self, owner: str, report: dict[str, Any]) -> str:
        path = self._owner_dir(owner) / "syncscope-trace.json"
        path.write_text(json.dumps(chrome_trace(public_report(report))), encoding="utf-8")
        return str(path)

    # ---- option coupling, and what this server runs in place of a mode that needs CUDA (the loop options note)

    def on_compile(self, compile_mode: str, static_cache: bool, streams: Any = 1) -> tuple[bool, str]:
        """Compile was chosen: StaticCache turned on where it needs it; the note says so, and what runs here."""
        coupling = ""
        if compile_needs_static_cache(compile_mode, from_widget(RUN_OPTION["cache"], static_cache)):
            static_cache = True
            coupling = "Note: compile needs StaticCache (a growing cache would recompile every step): turned it on."
        return static_cache, self.options_note(coupling, compile_mode, streams)

    def on_static(self, static_cache: bool, compile_mode: str, streams: Any = 1) -> tuple[str, str]:
        """StaticCache was toggled: compile turned off where it cannot work without it; the note says so."""
        coupling = ""
        if compile_needs_static_cache(compile_mode, from_widget(RUN_OPTION["cache"], static_cache)):
            compile_mode, coupling = "off", "Note: without StaticCache compile cannot work: compile turned off."
        return compile_mode, self.options_note(coupling, compile_mode, streams)

    def on_streams(self, streams: Any, compile_mode: str) -> str:
        return self.options_note("", compile_mode, streams)

    def options_note(self, coupling: str, compile_mode: str, streams: Any) -> str:
        """The loop options note: the coupling just made (or none), then what this server runs in place of each
        choice that needs CUDA."""
        lines = [coupling] if coupling else []
        lines += [f"On this CPU server: {plain(notice)}." for notice in self._device_notices(compile_mode, streams)]
        return "  \n".join(lines)

    def _device_notices(self, compile_mode: str, streams: Any) -> list[str]:
        """What a CPU runs in place of these choices (core.options.adapt_to_device's notices); none on CUDA."""
        if self.runner.uses_cuda:
            return []
        try:
            asked = GenerationOptions(compile=compile_mode, cache="static", streams=streams)
        except (TypeError, ValueError):  # a value the run's check will refuse, with its reason, at Run
            return []
        return adapt_to_device(asked, "cpu")[1]

    # ---- replay: every file that is not a complete report gets one line, and the page stays as it was

    def replay_upload(self, data: bytes | None) -> dict:
        if data is None:
            return {self.r["status"]: "Choose a JSON file written by `python -m core.bench --json`."}
        limit = self.config.max_report_bytes
        return self._replay_guarded(lambda: open_bench_report(uploaded_json(data, limit), limit), "the uploaded file",
                                    "this file")

    def audit_upload(self, data: bytes | None) -> dict:
        if data is None:
            return {self.a["status"]: "Choose a JSON file written by `python -m core.audit --json audit.json -- "
                                      "your_script.py`."}
        limit = self.config.max_report_bytes
        return self._audit_guarded(lambda: audit_view.open_audit(uploaded_json(data, limit), limit), "the file")

    def audit_bundled(self, name: str | None) -> dict:
        path = self.config.audit_files.get(name or "")
        if path is None:
            return {self.a["status"]: "Choose one of the bundled audits."}
        return self._audit_guarded(lambda: audit_view.open_audit(read_report_bytes(path),
                                                                 self.config.max_report_bytes), name or "")

    def _audit_guarded(self, read: Any, called: str) -> dict:
        try:
            return _audit_update(self.a, read(), called)
        except (OSError, ValueError) as exc:
            return {self.a["status"]: f"**Cannot open {plain(called)}:** {plain(clip(exc))}"}
        except Exception as exc:  # a file that passed the checks but still breaks the view: say so, keep the page
            return {self.a["status"]: f"**Cannot show {plain(called)}:** {plain(type(exc).__name__)}."}

    def replay_refused(self, refusal: str) -> dict:
        """The page's own check found the chosen file too large to upload (UPLOAD_GUARD_JS): say so in the status
        line, where Gradio's own refusal would be a toast that leaves the previous file's line in place."""
        try:
            facts = json.loads(refusal)
            name, size = str(facts["name"]), int(facts["size"])
        except (TypeError, ValueError, KeyError):
            return {}
        why = too_large(size, self.config.max_report_bytes)
        return {self.r["status"]: f"**Cannot open {plain(name)}:** {plain(why)}."}

    def replay_bundled(self, name: str | None) -> dict:
        path = self.config.replay_files.get(name or "")
        if path is None:
            return {self.r["status"]: "Choose one of the bundled results."}
        return self._replay_guarded(lambda: open_bench_report(read_report_bytes(path)), name or "", name or "")

    def _replay_guarded(self, read: Any, source: str, called: str) -> dict:
        try:
            return self._replay(read(), source)
        except (OSError, ValueError) as exc:
            return {self.r["status"]: f"**Cannot open {plain(called)}:** {plain(exc)}"}
        except Exception as exc:  # a report that passed the checks but still breaks a chart: say so, keep the page
            return {self.r["status"]: f"**Cannot show {plain(called)}:** it passed the format checks but could not "
                                      f"be drawn ({plain(type(exc).__name__)}: {plain(exc)})."}

    def _replay(self, saved: SavedReport, source: str) -> dict:
        r, report = self.r, saved.report
        figures = charts.all_figures(live_series_from_report(saved), report)
        env, model = report.get("environment", {}), report.get("model", {})
        where = env.get("gpu") or env.get("device") or "unknown device"
        tp = f", tensor parallel over {env['tp']} GPUs" if isinstance(env.get("tp"), int) and env["tp"] > 1 else ""
        status = (f"Showing {plain(source)}: {plain(model.get('spec', '?'))} on {plain(where)} "
                  f"({plain(env.get('dtype', '?'))}{plain(tp)}), {plain(trials_shown(report))}, "
                  f"created {plain(report.get('created', '?'))}.")
        if report.get("interrupted") is True:
            status += ("  \n**This run was cut short** (interrupted before it finished): its numbers cover only the "
                       "trials it completed.")
        update = {r["status"]: status, r["headline"]: headline_md(report, saved.page)}
        update[r["summary"]], update[r["summary_more"]] = summary_tables(report, saved.page)
        update[r["shows"]] = run_shows_md(report)
        update.update(zip((r["tokens_plot"], r["device_plot"], r["steps_plot"], r["gap_plot"]), figures))
        note = lanes.lanes_note(report)
        update[r["lanes_note"]] = f"*{plain(note)}*" if note else ""
        update[r["lanes_plot"]] = lanes.lanes_figure(report)
        update[r["command"]] = replay_command(report)
        if self.view_state is not None:
            view = {"tab": "replay", "replay": report_device(report)}
            update[self.view_state] = view
            update[self.banner_md] = self.banner_for(view)
        return update


_COMPILED_ATTENTION = re.compile(r"compiled decode attention: ([\w-]+)")


def model_line(label: str) -> str:
    """The banner's model line from Runner.device_label: the compiled decode attention runs only inside a compiled
    step, so it is named as what a run with Compile on uses, not among what every run runs."""
    match = _COMPILED_ATTENTION.search(label)
    if match is None:
        return f"{label}."
    before, after = label[:match.start()], label[match.end():]
    if before.endswith(", "):
        before = before[:-2]
    elif before.endswith("; "):
        before, after = (before, after[2:]) if after.startswith(", ") else (before[:-2], after)
    return f"{before}{after}. With Compile on, decode attention runs as {match[1]}."


def report_device(report: dict[str, Any]) -> dict[str, str]:
    """Where a report was measured: {"type": "cuda" or "cpu", "where": the GPU's name or the device}."""
    env = report.get("environment") or {}
    where = env.get("gpu") or env.get("device") or "unknown device"
    return {"type": charts.report_device_type(report) or "unknown", "where": str(where)[:80]}


def trials_shown(report: dict[str, Any]) -> str:
    """The trials a replayed report holds: those it asked for, or for a run cut short, the rounds its runs hold of
    those planned."""
    planned = (report.get("request") or {}).get("trials", "?")
    if report.get("interrupted") is not True:
        return f"{planned} trial(s)"
    facts = report.get("interruption") if isinstance(report.get("interruption"), dict) else {}
    planned = facts.get("trials_planned", planned)
    done = min(collections.Counter(run["contestant"] for run in report.get("runs", [])).values(), default=0)
    if isinstance(planned, int) and done >= planned:  # cut short after its trials (in the kernel trial, say)
        return f"{done} trial(s)"
    return f"{done} of {planned} trial(s) (cut short)"


def replayed_line(device: Mapping[str, Any]) -> str:
    template = {"cuda": REPORT_ON_GPU, "cpu": REPORT_ON_CPU}.get(str(device.get("type")), REPORT_NOWHERE)
    return template.format(where=plain(device.get("where", "unknown device")))


GZIP_MAGIC = b"\x1f\x8b"


AUDIT_IN_REPLAY = ("this JSON is an audit report of a program (python -m core.audit), not a benchmark report: open it "
                   "in the Your loop tab")


def open_bench_report(data: bytes | str, limit: int = MAX_REPORT_BYTES) -> SavedReport:
    """open_report, saying where an audit report opens instead (the Your loop tab); parsed again only when refused."""
    try:
        return open_report(data, limit)
    except ValueError:
        try:
            audit = audit_view.is_audit(json.loads(data))
        except (ValueError, RecursionError):
            audit = False
        if audit:
            raise ValueError(AUDIT_IN_REPLAY) from None
        raise


def uploaded_json(data: bytes, limit: int) -> bytes:
    """An uploaded file's JSON text: as it is, or decompressed when it is gzipped (benchmarks/results keeps its large
    reports as .json.gz); ValueError saying so when it is empty, or when it is gzip that is damaged or would
    decompress past `limit` bytes."""
    if not data.strip():
        raise ValueError("the file is empty (0 bytes)" if not data else "the file is empty (only whitespace)")
    if not data.startswith(GZIP_MAGIC):
        return data
    inflater = zlib.decompressobj(wbits=31)
    try:
        text = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise ValueError(f"the file is gzip but damaged ({exc})") from None
    if len(text) > limit:
        raise ValueError(f"the file decompresses to more than {limit / 2**20:,.0f} MiB, the limit for reports here")
    if not inflater.eof:
        raise ValueError("the file is gzip but cut short (it ends before its compressed data does)")
    if not text.strip():
        raise ValueError("the file is gzip of an empty file")
    return text


def _audit_update(a: dict[str, Any], report: dict[str, Any], source: str) -> dict:
    created = clip(report.get("created"), 40)
    return {a["status"]: f"Showing {plain(source)}, an audit written {plain(created)}.",
            a["summary"]: audit_view.summary_md(report), a["sites"]: audit_view.site_rows(report),
            a["plot"]: audit_view.audit_figure(report)}


def run_label(row: Mapping[str, Any]) -> str:
    """A history row as a run picker's choice: its number, status, model and the options it ran with."""
    options = ", ".join(f"{name} {row[name]}" for name in OPTION_COLUMNS if row.get(name) is not None)
    speedup = f", {row['speedup']}×" if row.get("speedup") is not None else ""
    return f"run {row['run']}: {row.get('status')}, {row.get('model')}; {options}{speedup}"[:200]


def run_shows_md(report: dict[str, Any]) -> str:
    """core.explain's sentences on what a run shows, as the page's Markdown: its `code` quotes as code, the rest
    as text (a report's file can say anything)."""
    try:
        sentences = what_this_run_shows(report)
    except Exception as exc:  # a report that passed the checks but that the sentences cannot read: say so
        return f"*What this run shows cannot be said for this report ({plain(type(exc).__name__)}).*"
    return "**What this run shows:** " + " ".join(code_quoted(sentence) for sentence in sentences)


def code_quoted(text: str) -> str:
    """`text` as Markdown: what stands between backticks as inline code, everything else as plain text."""
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: nothing is code
        return plain(text)
    return "".join(_plain_between(part) if i % 2 == 0 else f"`{' '.join(part.split())}`" if part.strip() else ""
                   for i, part in enumerate(parts))


def _plain_between(part: str) -> str:
    """plain(), keeping a space at either end (the text around a code quote)."""
    if not part.strip():
        return " " if part else ""
    return (" " if part[0].isspace() else "") + plain(part) + (" " if part[-1].isspace() else "")


def summary_tables(report: dict[str, Any], page: PageRecord | None = None) -> tuple[list[list[Any]], list[list[Any]]]:
    """The summary's cells as two tables: the verdict's evidence (EVIDENCE_HEADERS), then the rest
    (DETAIL_HEADERS), a dash where a number does not exist."""
    rows = [dict(zip(SUMMARY_HEADERS, row)) for row in table_rows(report, page)]
    verdict = report.get("verdict") or {}
    baseline = verdict.get("baseline") or "naive"
    summary = report.get("summary") or {}
    base_rate = _decode_rate(summary, baseline)
    evidence, details = [], []
    for row in rows:
        rate = _decode_rate(summary, row["contestant"])  # unrounded: the table's cell shows one decimal of it
        ratio = (f"{rate / base_rate:.3f}×" if rate is not None and base_rate is not None and
                 row["contestant"] != baseline else "–")
        interval, call = _verdict_cells(verdict) if row["contestant"] == verdict.get("contender") else ("–", "–")
        evidence.append([row["contestant"], row["decode tok/s"], row["decode spread %"], row["same tokens"], ratio,
                         interval, call])
        details.append([row[h] for h in DETAIL_HEADERS])
    return evidence, details


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and value > 0


def _decode_rate(summary: dict[str, Any], name: Any) -> float | None:
    """A contestant's median decode rate as the report holds it (not the table's rounded cell); None without one."""
    rate = (summary.get(name) or {}).get("decode_tokens_per_s") if isinstance(name, str) else None
    return float(rate) if _positive(rate) and not isinstance(rate, bool) else None


def _verdict_cells(verdict: dict[str, Any]) -> tuple[str, str]:
    """The verdict's interval (or, in a report from before intervals, its noise) and its call, as cells."""
    interval = verdict.get("interval")
    if isinstance(interval, list) and len(interval) == 2 and all(_positive(v) for v in interval):
        confidence = verdict.get("confidence")
        level = f" ({confidence:.0%})" if isinstance(confidence, int | float) and 0 < confidence < 1 else ""
        shown = f"{interval[0]:.3f}–{interval[1]:.3f}×{level}"
    elif _positive(verdict.get("noise")):
        shown = f"±{verdict['noise']:.1%}"
    else:
        shown = "–"
    return shown, str(verdict.get("call") or "–")[:40]


def replay_command(report: dict[str, Any]) -> str:
    """The command a replayed report says reproduces it, as text of a bounded length."""
    command = report.get("command")
    if not isinstance(command, str) or not command:
        return "(this report was written before reports carried the command that reproduces them)"
    if len(command) > MAX_COMMAND_CHARS:
        return command[:MAX_COMMAND_CHARS] + f"… ({len(command) - MAX_COMMAND_CHARS:,} more characters not shown)"
    return command


# ------------------------------------------------------------------------------------------------- layout

def build_demo(runner: Runner, *, defaults: Mapping[str, Any] | None = None,
               replay_files: Mapping[str, Path] | None = None, audit_files: Mapping[str, Path] | None = None,
               live_interval_s: float = 0.25,
               chart_interval_s: float = 1.0, title: str = "syncscope",
               max_report_bytes: int = MAX_REPORT_BYTES) -> gr.Blocks:
    """The page for `runner`; launch it with `demo.queue(...)` and `demo.launch(..., max_file_size=max_report_bytes)`
    (see app.py)."""
    config = PageConfig(defaults={**option_defaults(runner.uses_cuda), **(defaults or {})},
                        replay_files=dict(replay_files or {}), audit_files=dict(audit_files or {}),
                        live_interval_s=live_interval_s,
                        chart_interval_s=chart_interval_s,
                        max_report_bytes=max_report_bytes)
    app = Dashboard(runner, config)
    charts.prebuild()
    lanes.prebuild()
    with gr.Blocks(title=title, analytics_enabled=False) as demo:
        gr.Markdown("# syncscope: where does the GPU wait for the host?\nThe naive decode loop (one host sync per "
                    "step) and the pipelined loop (stop flag read a few steps late), side by side, timed fairly.")
        banner = gr.Markdown(app.banner(), elem_id="banner", label="banner", show_label=False)
        # Always ticking: every open page shows the server's state (model, loads, restarts) within seconds.
        # What this page shows (its tab, and the report open in Replay), so the banner can describe that.
        app.view_state = gr.State({"tab": "compare", "replay": None})
        timer = gr.Timer(BANNER_REFRESH_S)
        timer.tick(app.banner_for, inputs=[app.view_state], outputs=[banner], api_visibility="private",
                   show_progress="hidden", queue=False)
        app.browser_state = gr.BrowserState(None, storage_key="syncscope-browser")
        app.banner_md = banner
        with gr.Tabs():
            with gr.Tab("Compare", id="compare") as compare_tab:
                app.c = _compare_tab(app, runner, config.defaults, banner)
            with gr.Tab("Replay", id="replay", elem_id="replay-tab") as replay_tab:
                app.r = _replay_tab(app, config, demo)
            with gr.Tab("Your loop", id="audit", elem_id="audit-tab") as audit_tab:
                app.a = _audit_tab(app, config)
        for tab, name in ((compare_tab, "compare"), (replay_tab, "replay"), (audit_tab, "audit")):
            tab.select(_tab_chosen(app, name), inputs=[app.view_state], outputs=[app.view_state, banner],
                       api_visibility="private", show_progress="hidden", queue=False)
        load_outputs = [app.browser_state, *(app.c[k] for k in OUTPUTS), app.c["lanes_plot"]]
        demo.load(app.on_load, inputs=[app.browser_state], outputs=load_outputs,
                  api_visibility="private", show_progress="hidden", concurrency_limit=None)
        with gr.Accordion("Explain: the sync, the numbers, the toggles, and why NVML utilization is coarse",
                          open=False):
            gr.Markdown(EXPLAIN, elem_id="explain")
        gr.api(app.report_of_run, api_name="report", concurrency_limit=4, concurrency_id="compare")
    demo.dashboard = app  # type: ignore[attr-defined]
    return demo


def _summary_tables(elem_id: str) -> tuple[gr.Dataframe, gr.Dataframe]:
    """The summary's two tables (summary_tables): the verdict's evidence, then where the time went and the rest."""
    evidence = gr.Dataframe(headers=list(EVIDENCE_HEADERS), value=[], interactive=False, wrap=True,
                            elem_id=elem_id, label="Summary: the verdict's evidence (medians over trials)",
                            column_widths=EVIDENCE_WIDTHS, datatype="str")
    details = gr.Dataframe(headers=list(DETAIL_HEADERS), value=[], interactive=False, wrap=True,
                           elem_id=f"{elem_id}-more", label="Where the time went, and the rest",
                           column_widths=DETAIL_WIDTHS, datatype="str")
    return evidence, details


def _comparison_outputs(prefix: str) -> dict[str, Any]:
    """Where two runs side by side are shown: a summary line, three tables, and both timelines."""
    table = {"interactive": False, "wrap": True, "datatype": "str"}
    k = {"status": gr.Markdown(elem_id=f"{prefix}-status"),
         "settings": gr.Dataframe(value=compare_view.empty_table(compare_view.SETTINGS_HEADERS),
                                  label="Settings (those that differ first, highlighted)", elem_id=f"{prefix}-settings",
                                  **table),
         "rates": gr.Dataframe(value=compare_view.empty_table(compare_view.RATES_HEADERS),
                               label="Rates: medians over each run's trials", elem_id=f"{prefix}-rates", **table),
         "waits": gr.Dataframe(value=compare_view.empty_table(compare_view.WAITS_HEADERS),
                               label="Per decode step", elem_id=f"{prefix}-waits", **table)}
    k["lanes"] = gr.Plot(elem_id=f"{prefix}-lanes", show_label=False)
    return k


def _tab_chosen(app: Dashboard, name: str) -> Any:
    def chosen(view: Any) -> tuple[dict[str, Any], str]:
        return app.on_tab(name, view)
    return chosen


def _compare_tab(app: Dashboard, runner: Runner, d: Mapping[str, Any], banner: gr.Markdown) -> dict[str, Any]:
    c: dict[str, Any] = {"banner": banner}
    with gr.Row(elem_id="compare-row"):
        with gr.Column(scale=1, min_width=320, elem_id="controls-col"):
            inputs = _controls(app, runner, d, c)
        with gr.Column(scale=2, elem_id="results-col"):
            c["status"] = gr.Markdown("Press **Run** to compare the two loops.", elem_id="status", label="status",
                                      show_label=False)
            with gr.Row():
                for name in ("naive", "pipelined"):
                    with gr.Column(min_width=200):
                        c[f"{name}_rate"] = gr.Markdown(f"**{name}** · – tok/s", elem_id=f"{name}-rate",
                                                        elem_classes=["rate"], label=f"{name} rate",
                                                        show_label=False)
                        c[f"{name}_text"] = gr.Textbox(label=f"{name} loop output", lines=8, max_lines=8,
                                                       interactive=False, elem_id=f"{name}-text",
                                                       elem_classes=["pane"])
            c["headline"] = gr.Markdown(elem_id="headline", label="verdict", show_label=False)
            c["shows"] = gr.Markdown(elem_id="run-shows", label="what this run shows", show_label=False)
            c["summary"], c["summary_more"] = _summary_tables("summary")
            c["command"] = gr.Textbox(label="Reproduce from the command line", interactive=False,
                                      elem_id="command", buttons=["copy"])
    with gr.Row():
        c["lanes_plot"] = gr.Plot(lanes.lanes_figure({}), elem_id="plot-lanes", show_label=False, label="timeline")
    with gr.Row():
        c["tokens_plot"] = gr.Plot(charts.tokens_per_s_figure({}), elem_id="plot-tokens", show_label=False,
                                   label="tokens/s chart")
        c["device_plot"] = gr.Plot(charts.device_figure({"monitor": _idle_monitor(runner)}), elem_id="plot-device",
                                   show_label=False, label="device chart")
    with gr.Row():
        c["steps_plot"] = gr.Plot(charts.step_latency_figure({}), elem_id="plot-steps", show_label=False,
                                  label="step latency chart")
        c["gap_plot"] = gr.Plot(charts.gap_figure({}), elem_id="plot-gap", show_label=False, label="idle gap chart")
    with gr.Accordion("Run history (this browser)", open=True):
        c["history"] = gr.Dataframe(headers=list(HISTORY_COLUMNS), value=[], interactive=False, elem_id="history",
                                    datatype="str", label="history", show_label=False)
        with gr.Row():
            c["csv"] = gr.DownloadButton("History as CSV", value=None, elem_id="download-csv", size="sm",
                                          interactive=False)
            c["json"] = gr.DownloadButton("History as JSON", value=None, elem_id="download-json", size="sm",
                                           interactive=False)
            c["report_file"] = gr.DownloadButton("Last run's report (JSON, opens in Replay)", value=None,
                                                 elem_id="download-report", size="sm", interactive=False)
            c["trace_file"] = gr.DownloadButton("Last run's trace (opens in ui.perfetto.dev)", value=None,
                                                elem_id="download-trace", size="sm", visible=False)
    with gr.Accordion("Compare two runs of this history", open=False, elem_id="compare-runs"):
        gr.Markdown("Pick two of your runs, for instance before and after changing one toggle: the settings that "
                    "differ come first, highlighted; then each loop's rate in both with B / A and whether that is "
                    "beyond the drift between two runs (or, where only an option of the pipelined loop differs, "
                    "against the naive loop as the control), the per-step waits, and both timelines on one time "
                    "axis.")
        with gr.Row():
            c["run_a"] = _run_picker("Run A", "run-a")
            c["run_b"] = _run_picker("Run B", "run-b")
            compare_btn = gr.Button("Compare A and B", elem_id="compare-btn", min_width=120)
        app.h = _comparison_outputs("history-compare")
    compare_btn.click(app.compare_runs, inputs=[c["run_a"], c["run_b"]], outputs=list(app.h.values()),
                      api_name="compare_runs", concurrency_limit=4, concurrency_id="compare")
    outputs = [c[k] for k in OUTPUTS] + [c["lanes_plot"]]
    c["run_btn"].click(app.run, inputs_kwargs=inputs, outputs=outputs, api_name="run",
                       concurrency_limit=runner.max_queue, concurrency_id="run", show_progress="hidden",
                       trigger_mode="multiple").then(
        app.enable_downloads, outputs=[c["csv"], c["json"], c["report_file"], c["trace_file"]],
        api_visibility="private", queue=False)
    c["cancel_btn"].click(app.cancel, outputs=[c["status"]], api_name="cancel", queue=False)
    return c


def _controls(app: Dashboard, runner: Runner, d: Mapping[str, Any], c: dict[str, Any]) -> dict[str, Any]:
    """The model, the prompt, Run and Cancel, then a control per run option (core.options.RUN_OPTIONS) in its
    group; returns the run's inputs by name: the model, then PAGE_OPTIONS' controls in the table's order."""
    c["model"] = model = gr.Dropdown(
        runner.model_choices(), value=d.get("model") or runner.model_spec or runner.model_choices()[0],
        label="Model", allow_custom_value=runner.allow_any_model, elem_id="model",
        info="built-in, HF id or local path" if runner.allow_any_model else "allowed models only")
    controls = {"prompt": gr.Textbox(d["prompt"], label="Prompt", lines=2, max_lines=6, elem_id="prompt")}
    with gr.Row(elem_id="run-row"):
        c["run_btn"] = gr.Button("Run", variant="primary", elem_id="run-btn", min_width=80)
        c["cancel_btn"] = gr.Button("Cancel", variant="stop", elem_id="cancel-btn", min_width=80)
    c["run_note"] = gr.Markdown(elem_id="run-note", label="run note", show_label=False)
    gr.Examples([[p] for p in EXAMPLE_PROMPTS], inputs=[controls["prompt"]], label="Example prompts")
    controls.update(_option_rows("run", d))
    if runner.limits != LOCAL_LIMITS:
        gr.Markdown(f"This server is shared, so a run may ask for {plain(runner.limits.describe())}.",
                    elem_id="limits")
    for group in PAGE_GROUPS[1:]:  # every group the table may name has a place: no option is left unrendered
        title, open_ = GROUP_ACCORDIONS.get(group, (group.capitalize(), False))
        with gr.Accordion(title, open=open_):
            controls.update(_option_rows(group, d))
            if group == "loop":
                # A CUDA-only default (app.py's flags) is named at once too.
                note = gr.Markdown(app.options_note("", d["compile"], d["streams"]), elem_id="options-note")
    compile_mode, static, streams = controls["compile"], controls["cache"], controls["streams"]
    compile_mode.input(app.on_compile, inputs=[compile_mode, static, streams], outputs=[static, note],
                       api_visibility="private", queue=False)
    static.input(app.on_static, inputs=[static, compile_mode, streams], outputs=[compile_mode, note],
                 api_visibility="private", queue=False)
    streams.input(app.on_streams, inputs=[streams, compile_mode], outputs=[note], api_visibility="private",
                  queue=False)
    return {"model": model, **{option.name: controls[option.name] for option in PAGE_OPTIONS}}


def _option_rows(group: str, d: Mapping[str, Any]) -> dict[str, Any]:
    """The controls of one group's options, two to a row, in the table's order."""
    options = [option for option in PAGE_OPTIONS if option.group == group and option.name != "prompt"]
    controls = {}
    for start in range(0, len(options), 2):
        with gr.Row():
            for option in options[start:start + 2]:
                controls[option.name] = _control(option, d[option.name])
    return controls


def _typed_whole(component: Any, choices: list[int] | None = None, description: str = "") -> Any:
    """`component` (a number field, a radio of numbers, a run picker) with an API type of integer. `gr.Number
    (precision=0)` would round what it is given (2.5 runs as 2, where the run's check refuses it with a reason), and
    gr.Radio and gr.Dropdown say "string" whatever their values; a subclass would make Gradio write a .pyi stub
    beside this file. The choices go into the description, not a JSON-schema enum: gradio_client writes an enum of
    integers as quoted strings (Literal['1', '2']), which the run then refuses."""
    said = f"one of {', '.join(map(str, choices))}" if choices else description
    info = {"type": "integer", **({"description": said} if said else {})}
    component.api_info = lambda: info  # read per instance when the page's API description is built
    return component


def _run_picker(label: str, elem_id: str) -> Any:
    """A picker of one of the visitor's runs, by its number in their history (Compare two runs)."""
    return _typed_whole(gr.Dropdown([], value=None, label=label, elem_id=elem_id), None,
                        "a run's number in your history (run 1 is your first)")


def _control(option: RunOption, value: Any) -> Any:
    """The page's control for one run option. No minimum/maximum on number fields: Gradio would refuse an
    out-of-range value with a bare "Error" badge, where the run's check says what is wrong and what is allowed."""
    elem_id = option.name.replace("_", "-")
    shown = to_widget(option, value)
    if option.kind == FLAG or option.name == "cache":
        return gr.Checkbox(shown, label=option.label, elem_id=elem_id)
    if option.kind == CHOICE:
        return gr.Dropdown(list(option.page_choices or option.choices), value=shown, label=option.label,
                           elem_id=elem_id)
    if option.choices:
        radio = gr.Radio([(str(choice), choice) for choice in option.choices], value=shown, label=option.label,
                         elem_id=elem_id)
        return _typed_whole(radio, list(option.choices)) if option.kind == WHOLE else radio
    if option.kind == WHOLE:
        return _typed_whole(gr.Number(shown, label=option.label, elem_id=elem_id))
    return gr.Number(shown, label=option.label, elem_id=elem_id)


def page_values(form: Mapping[str, Any]) -> dict[str, Any]:
    """The /run endpoint's parameters for `form` (run options by name and `model`; missing ones take their defaults):
    `gradio_client.Client(url).predict(**page_values(form), api_name="/run")`."""
    values = {**option_defaults(), **form}
    return {"model": values.get("model"), **{option.name: to_widget(option, values[option.name])
                                              for option in PAGE_OPTIONS}}


def to_widget(option: RunOption, value: Any) -> Any:
    """A run option's value as its control holds it: the cache as "StaticCache on?"."""
    if option.name == "cache":
        return value == "static"
    return value


def from_widget(option: RunOption, value: Any) -> Any:
    """What a control holds, as the run option's value (numbers stay as the form sent them: the run checks them)."""
    if option.name == "cache":  # an API call may send the words true/false for the checkbox
        word = value.strip().lower() if isinstance(value, str) else None
        return "static" if value is True or word == "true" else "dynamic" if value is False or word == "false" \
            else value
    return value


# Runs once in each visitor's browser: a report file over the limit is stopped before Gradio sees it (Gradio would
# refuse it in a toast) and handed, as {name, size}, to the hidden #replay-refused box, whose handler says so in the
# status line. Capture listeners on the document run before the upload component's own.
UPLOAD_GUARD_JS = """
() => {
  const limit = %d;
  const inUpload = (node) => !!document.querySelector("#replay-upload")?.contains(node);
  const refuse = (files, event) => {
    const big = Array.from(files || []).find((file) => file.size > limit);
    if (!big) return;
    event.stopImmediatePropagation();
    event.preventDefault();
    if (event.type === "change") event.target.value = "";
    const box = document.querySelector("#replay-refused textarea");
    box.value = JSON.stringify({name: big.name, size: big.size, at: Date.now()});
    box.dispatchEvent(new Event("input", {bubbles: true}));
  };
  document.addEventListener("change", (e) => {
    if (e.target.type === "file" && inUpload(e.target)) refuse(e.target.files, e);
  }, true);
  document.addEventListener("drop", (e) => { if (inUpload(e.target)) refuse(e.dataTransfer?.files, e); }, true);
}
"""


def _replay_tab(app: Dashboard, config: PageConfig, demo: gr.Blocks) -> dict[str, Any]:
    r: dict[str, Any] = {}
    gr.Markdown("Open a report written by `python -m core.bench ... --json results.json` (for instance on a "
                "headless GPU server), or one downloaded from this page. The file is only parsed as JSON.")
    with gr.Row():
        upload = gr.File(label="Report JSON (or .json.gz)", file_types=[".json", ".gz"], type="binary",
                         elem_id="replay-upload")
        if config.replay_files:
            with gr.Column():
                bundled = gr.Dropdown(sorted(config.replay_files), label="Bundled results", elem_id="replay-bundled")
                open_btn = gr.Button("Open", elem_id="replay-open")
    r["status"] = gr.Markdown(elem_id="replay-status")
    r["headline"] = gr.Markdown(elem_id="replay-headline")
    r["shows"] = gr.Markdown(elem_id="replay-run-shows")
    r["summary"], r["summary_more"] = _summary_tables("replay-summary")
    r["command"] = gr.Textbox(label="Reproduce from the command line", interactive=False, elem_id="replay-command",
                              buttons=["copy"])
    r["lanes_note"] = gr.Markdown(elem_id="replay-lanes-note")
    with gr.Row():
        r["lanes_plot"] = gr.Plot(elem_id="replay-plot-lanes", show_label=False)
    with gr.Row():
        r["tokens_plot"] = gr.Plot(elem_id="replay-plot-tokens", show_label=False)
        r["device_plot"] = gr.Plot(elem_id="replay-plot-device", show_label=False)
    with gr.Row():
        r["steps_plot"] = gr.Plot(elem_id="replay-plot-steps", show_label=False)
        r["gap_plot"] = gr.Plot(elem_id="replay-plot-gap", show_label=False)
    refused = gr.Textbox(visible="hidden", elem_id="replay-refused")
    outputs = [r[k] for k in REPLAY_OUTPUTS] + [r["lanes_note"], r["lanes_plot"], app.view_state, app.banner_md]
    upload.upload(app.replay_upload, inputs=[upload], outputs=outputs, api_name="replay")
    refused.change(app.replay_refused, inputs=[refused], outputs=[r["status"]], api_visibility="private",
                  show_progress="hidden")
    demo.load(None, js=UPLOAD_GUARD_JS % config.max_report_bytes)
    if config.replay_files:
        open_btn.click(app.replay_bundled, inputs=[bundled], outputs=outputs, api_name="replay_bundled")
    with gr.Accordion("Compare two report files", open=False, elem_id="files-compare"):
        with gr.Row():
            first = gr.File(label="Report A (.json or .json.gz)", file_types=[".json", ".gz"], type="binary",
                            elem_id="compare-file-a")
            second = gr.File(label="Report B (.json or .json.gz)", file_types=[".json", ".gz"], type="binary",
                             elem_id="compare-file-b")
        files_btn = gr.Button("Compare A and B", elem_id="compare-files-btn")
        app.rc = _comparison_outputs("files-compare")
    files_btn.click(app.compare_files, inputs=[first, second], outputs=list(app.rc.values()), api_name="compare_files",
                    concurrency_limit=4, concurrency_id="compare")
    return r


def _audit_tab(app: Dashboard, config: PageConfig) -> dict[str, Any]:
    """Your loop: an audit of your own program (`python -m core.audit --json audit.json -- your_script.py`), read
    from its file; nothing of it runs here."""
    a: dict[str, Any] = {}
    gr.Markdown("Audit your own decode loop where it runs: `python -m core.audit --json audit.json -- "
                "your_script.py` (or `syncscope-audit` after `pip install` of this project), then open "
                "`audit.json` here. It lists each line of your program that reads a device value, how often per "
                "decode step, what it costs on a GPU and what to do about it. The file is only parsed; nothing in it "
                "runs here.")
    with gr.Row():
        upload = gr.File(label="Audit JSON", file_types=[".json", ".gz"], type="binary", elem_id="audit-upload")
        if config.audit_files:
            with gr.Column():
                bundled = gr.Dropdown(sorted(config.audit_files), label="Bundled audits (examples/)",
                                      elem_id="audit-bundled")
                open_btn = gr.Button("Open", elem_id="audit-open")
    a["status"] = gr.Markdown(elem_id="audit-status")
    a["summary"] = gr.Markdown(elem_id="audit-summary")
    a["sites"] = gr.Dataframe(headers=list(audit_view.SITE_HEADERS), value=[], interactive=False, wrap=True,
                              elem_id="audit-sites", label="Sites (most reads per decode step first)", datatype="str",
                              column_widths=audit_view.SITE_WIDTHS)
    a["plot"] = gr.Plot(elem_id="audit-plot", show_label=False)
    outputs = [a["status"], a["summary"], a["sites"], a["plot"]]
    upload.upload(app.audit_upload, inputs=[upload], outputs=outputs, api_name="audit")
    if config.audit_files:
        open_btn.click(app.audit_bundled, inputs=[bundled], outputs=outputs, api_name="audit_bundled")
    return a


def _idle_monitor(runner: Runner) -> dict[str, Any]:
    monitor = runner.monitor
    if monitor is None:
        return {"source": "none", "description": "Utilization monitoring is off.", "samples": []}
    return {"source": monitor.source, "description": f"{monitor.description} The chart fills during a run.",
            "samples": []}
