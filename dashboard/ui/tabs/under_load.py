"""The Under load tab: the loops under continuous batching (core.load), as a serving engine runs them. Its settings
(dashboard.service.load_form) queue a run under load on the runner, in the one queue in front of the engine process; the
status line and each trial's throughput stream while it goes; its report's findings, tables and charts
(dashboard.ui.tabs.load_panel) and the report's files (its JSON, and the run as one HTML file) follow when it ends. A
reload finds the visitor's run again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any, Self

import gradio as gr

import core.request.load as load
from core.request.load import CONTESTANT_LABELS, GROUPS, NAMES, RANGE, REALS, WHOLES, LoadOption
from core.request.options import CHOICE, FLAG, WHOLE
from dashboard.service.jobs import UNDER_LOAD, Job
from dashboard.service.limits import LOCAL_LOAD_LIMITS
from dashboard.service.load_form import form_defaults
from dashboard.service.page_record import public_report
from dashboard.service.watchers import JobWatchers
from dashboard.ui.form import typed_whole
from dashboard.ui.page import PageContext, Visitors
from dashboard.ui.tabs.compare import CPU_QUIET_NOTE, address_of, quiet_now
from dashboard.ui.tabs.load_panel import LoadReportPanel
from dashboard.views import load_charts, load_view
from dashboard.views.report_text import as_text, plain
from dashboard.views.run_html import html_download

# The /run_load endpoint's outputs, in order (a client zips them with these names); the panel's controls follow them.
OUTPUTS = ("status", "throughput_plot", "findings", "table", "sweep_table", "slots_plot", "sweep_plot", "rate_plot",
           "cli_text", "command", "report_file", "run_note", "text", "html_file")
GROUP_TITLES = {"checks": "Contestants and checks"}  # a group shown folded, under this title
REPORT_NAME = "syncscope-load-report.json"
HTML_NAME = "syncscope-load-report.html"
INTRO = ("Many requests of different lengths share each decode step (continuous batching): a finished request's slot "
         "goes to the next one waiting. The naive loop reads each step's tokens at once; the pipelined loop reads "
         "them a few steps late, so a slot runs on past its request's stop until the host learns of it. Both run "
         "the same seeded workload, beside the ceiling (a loop told every output length beforehand) and "
         "transformers' own continuous batching.")

log = logging.getLogger(__name__)


class UnderLoadTab:
    """`components` by name: OUTPUTS (the panel's among them), the settings (SETTINGS), "run_btn", "cancel_btn" and
    "report_view" (the column of the report's parts, hidden until there is a report); those parts are `panel`'s."""

    def __init__(self, page: PageContext, components: dict[str, Any], panel: LoadReportPanel):
        self.page = page
        self.components = components
        self.panel = panel
        self.session_copies: Any = None  # build_demo sets it once the page is built
        self._submitting = threading.Lock()
        self.watchers = JobWatchers(page.runner)  # the pages streaming each run

    @classmethod
    def build(cls, page: PageContext) -> Self:
        c: dict[str, Any] = {}
        d = {**form_defaults(page.runner.uses_cuda), "compile": _compile_default(page)}
        gr.Markdown(INTRO, elem_id="load-intro")
        with gr.Row(elem_id="load-row"):
            with gr.Column(scale=1, min_width=320, elem_id="load-controls"):
                c.update(_settings(page, d))
                with gr.Row(elem_id="load-run-row"):
                    c["run_btn"] = gr.Button("Run", variant="primary", elem_id="load-run-btn", min_width=80)
                    c["cancel_btn"] = gr.Button("Cancel", variant="stop", elem_id="load-cancel-btn", min_width=80)
                c["run_note"] = gr.Markdown(elem_id="load-run-note", label="run note", show_label=False)
                if page.runner.load_limits != LOCAL_LOAD_LIMITS:
                    gr.Markdown(_limits_note(page), elem_id="load-limits")
            with gr.Column(scale=2, elem_id="load-results"):
                c["status"] = gr.Markdown("Press **Run** to run the loops under load.", elem_id="load-status",
                                          label="status", show_label=False)
                c["throughput_plot"] = gr.Plot(load_charts.throughput_figure([]), elem_id="load-plot-throughput",
                                               show_label=False, label="throughput of each trial")
                with gr.Row():
                    c["report_file"] = gr.DownloadButton("Report (JSON, opens in Replay)", value=None, size="sm",
                                                         elem_id="load-download-report", interactive=False)
                    c["html_make"] = gr.Button("Make it one HTML file (opens offline)", size="sm",
                                               elem_id="load-make-html")
                    c["html_file"] = gr.DownloadButton("Download the HTML file", value=None, size="sm",
                                                       elem_id="load-download-html", visible=False)
                c["text"] = gr.JSON(visible=False, label="text")  # the API's plain text (the page shows Markdown)
        with gr.Column(visible=False, elem_id="load-report") as c["report_view"]:  # shown once there is a report
            panel = LoadReportPanel.build("load", with_throughput=False)
        c.update({name: panel.components[name] for name in OUTPUTS if panel.components.get(name) is not None})
        tab = cls(page, c, panel)
        tab._wire()
        return tab

    def _wire(self) -> None:
        c = self.components
        # As /run's: the runner's queue is the only queue, so every run it accepts has its handler.
        c["run_btn"].click(self.run, inputs_kwargs={name: c[name] for name in settings_names()}, outputs=self.outputs,
                           api_name="run_load", concurrency_limit=None, concurrency_id="run_load",
                           show_progress="hidden", trigger_mode="multiple").then(
            self.enable_download, outputs=[c["report_file"], c["html_file"]], api_visibility="private", queue=False)
        c["cancel_btn"].click(self.cancel, outputs=[c["status"]], api_name="cancel_load", queue=False)
        # made when asked (5-8 MB with plotly inlined), not after every run
        c["html_make"].click(self.make_html, outputs=[c["html_file"]], api_visibility="private",
                             concurrency_limit=2, concurrency_id="reports")

    @property
    def outputs(self) -> list[Any]:
        """The /run_load endpoint's outputs (OUTPUTS), then the rest of the panel's (its controls and its state) and
        the banner."""
        named = [self.components[name] for name in OUTPUTS]
        rest = [output for output in self.panel.outputs if output not in named]
        return [*named, *rest, self.page.banner_md, self.components["report_view"]]

    # ---- a run

    def run(self, request: gr.Request, **settings: Any) -> Iterator[dict]:
        """Queue a run under load and stream it until it ends. `settings`: the model and the workload's settings by
        name (core.request.load.LOAD_OPTIONS); API callers read the plain-text `text` output."""
        try:
            yield from self._run(request, settings)
        finally:
            self._forget_copies(request)

    def _run(self, request: gr.Request, settings: dict[str, Any]) -> Iterator[dict]:
        c, owner = self.components, self.page.owner(request)
        going, job, refusal = self._submit_unless_going(settings, owner, address_of(request))
        if going is not None:  # a second click while one streams: answered beside Run, the first's status goes on
            yield self._said({c["run_note"]: self._already_going(going)})
            return
        if job is None:
            yield self._said({c["status"]: f"**Not started:** {plain(refusal, 600)}", c["run_note"]: ""})
            return
        try:
            yield self._said({**self._cleared(), **self._live(job)})
            yield from self._follow(job)
        except Exception:  # a bug in drawing must not take the page down; the run itself is unaffected
            log.exception("drawing run under load %s failed", job.id)
            yield self._said({c["status"]: "**The page could not show this run:** drawing its results failed (the "
                                            "server's log has the details); the run itself goes on."})

    def _already_going(self, job: Job) -> str:
        ahead = self.page.runner.position(job)
        where = f"queued, {ahead} job{'s' if ahead != 1 else ''} ahead of it" if ahead else "running now"
        return (f"**A run under load of yours is already going** ({where}): this click started nothing. Wait for it "
                "to finish, or press Cancel and Run again.")

    def _submit_unless_going(self, settings: dict[str, Any], owner: str,
                             address: str | None) -> tuple[Job | None, Job | None, str | None]:
        """(the visitor's run under load already going, or None; the job submitted, or None; why it was refused).
        One at a time: two clicks handled at once must not both find nothing going and both submit."""
        with self._submitting:
            going = next((j for j in self.page.runner.pending() if j.owner == owner and j.work == UNDER_LOAD), None)
            if going is not None:
                return going, None, None
            try:
                return None, self.page.runner.submit_under_load(settings, owner=owner, address=address), None
            except ValueError as exc:
                return None, None, str(exc)

    def _cleared(self) -> dict:
        c = self.components
        return {**self.panel.cleared(), c["throughput_plot"]: load_charts.throughput_figure([]),
                c["report_file"]: gr.DownloadButton(value=None, interactive=False),
                c["html_file"]: gr.DownloadButton(value=None, visible=False), c["run_note"]: "",
                c["report_view"]: gr.Column(visible=False)}

    def _follow(self, job: Job) -> Iterator[dict]:
        yield from self._while_going(job)
        yield self._said(self._final(job))

    def _while_going(self, job: Job) -> Iterator[dict]:
        """The status line, and the throughput chart as trials end, until `job` ends. While a trial is timed on a
        CPU host, as on the Compare tab, the status only every PageConfig.cpu_trial_interval_s and no chart."""
        c, runner, config = self.components, self.page.runner, self.page.config
        drawn, last_shown = -1, 0.0
        with self.watchers.watching(job):
            while not job.wait(config.live_interval_s):
                snap = runner.snapshot(job)
                quiet = quiet_now(snap, runner.uses_cuda)
                if quiet and time.monotonic() - last_shown < config.cpu_trial_interval_s:
                    continue
                last_shown = time.monotonic()
                update = self._live(job, snap)
                runs = snap.get("runs") or []
                if quiet:
                    update[c["status"]] += f" {CPU_QUIET_NOTE.format(config.cpu_trial_interval_s)}"
                elif len(runs) != drawn:  # trials ended: their points join the chart
                    drawn = len(runs)
                    update[c["throughput_plot"]] = load_charts.throughput_figure(runs)
                yield self._said(update)

    def _live(self, job: Job, snap: dict[str, Any] | None = None) -> dict:
        snap = snap or self.page.runner.snapshot(job)
        return {self.components["status"]: f"**{plain(snap.get('status', ''), 600)}**"}

    def _final(self, job: Job) -> dict:
        c, snap = self.components, self.page.runner.snapshot(job)
        update = self._live(job, snap)
        update[self.page.banner_md] = self.page.banner.text()
        update[c["run_note"]] = ""  # an answer to a click during the run held until the run's end
        report = job.report
        if report is None:
            update[c["throughput_plot"]] = load_charts.throughput_figure(snap.get("runs") or [])
            return update
        update.update(self.panel.shown(report))
        update[c["report_view"]] = gr.Column(visible=True)
        update[c["throughput_plot"]] = load_charts.throughput_figure(load_view.trial_runs(report))
        update[c["report_file"]] = self._write_report(job)  # the API's callers get the path; enable_download follows
        update[c["html_file"]] = gr.DownloadButton(value=None, visible=False)  # made when asked (make_html)
        return update

    def make_html(self, request: gr.Request) -> gr.DownloadButton:
        """The visitor's last run under load as one HTML file, its download shown (hidden where there is none)."""
        job = self.page.runner.latest_run(self.page.owner(request), UNDER_LOAD)
        path = self._write_html(job) if job is not None and job.done and job.report is not None else None
        return gr.DownloadButton(value=path, visible=path is not None, interactive=path is not None)

    def enable_download(self, request: gr.Request) -> tuple[Any, Any]:
        """After a run: the report's JSON, clickable where the visitor's latest run under load has a report; the
        HTML file's download hidden until it is made (make_html)."""
        job = self.page.runner.latest_run(self.page.owner(request), UNDER_LOAD)
        if job is None or not job.done or job.report is None:
            return gr.DownloadButton(value=None, interactive=False), gr.DownloadButton(value=None, visible=False)
        return (gr.DownloadButton(value=self._write_report(job), interactive=True),
                gr.DownloadButton(value=None, visible=False))

    def _write_report(self, job: Job) -> str:
        """The report as the page offers it for download (without the server's host name), in the visitor's
        folder."""
        assert job.report is not None
        path = self.page.downloads.folder_for(job.owner or "anonymous") / REPORT_NAME
        path.write_text(json.dumps(public_report(job.report), indent=1), encoding="utf-8")
        return str(path)

    def _write_html(self, job: Job) -> str | None:
        """The run as one HTML file that opens offline, with its findings (dashboard.views.run_html); None where it
        could not be made."""
        assert job.report is not None
        path = self.page.downloads.folder_for(job.owner or "anonymous") / HTML_NAME
        return html_download(path, public_report(job.report))

    def _said(self, update: dict) -> dict:
        """`update` with the API's plain text of it: the status, and the findings once there are some."""
        c = self.components
        text: dict[str, Any] = {}
        if c["status"] in update:
            text["status"] = as_text(update[c["status"]])
        findings = self.panel.components["findings"]
        if findings in update:
            text["findings"] = as_text(update[findings])
        if c["run_note"] in update and update[c["run_note"]]:
            text["run_note"] = as_text(update[c["run_note"]])
        return {**update, c["text"]: text} if text else update

    def cancel(self, request: gr.Request) -> str:
        if not self.page.runner.cancel_pending(self.page.owner(request), UNDER_LOAD):
            return "Nothing to cancel."
        return "**Cancelling…** (a run under load stops at its next decode step)"

    def _forget_copies(self, request: gr.Request) -> None:
        if self.session_copies is not None:
            self.session_copies.forget(getattr(request, "session_hash", None))

    # ---- page load: the visitor's run under load, if one is going or was the last

    def on_load(self, browser_id: Any, request: gr.Request) -> Iterator[dict]:
        """Show this browser's latest run under load: streamed again if it is still queued or running."""
        try:
            if not Visitors.is_browser_id(browser_id):  # a first visit: it has no run yet
                return
            owner = self.page.visitors.tie(browser_id, request)
            job = self.page.runner.latest_run(owner, UNDER_LOAD)
            if job is None:
                return
            if not job.wait(0):
                yield {**self._cleared(), **self._live(job)}
                yield from self._while_going(job)
            # One update with the downloads in it, and none after: for an update that leaves a component out, the
            # browser takes that component's value back from what it has drawn, which for the table and charts of a
            # tab not shown yet is still empty, so an update after this one emptied them again.
            report_file, html_file = self.enable_download(request)
            yield {**self._final(job), self.components["report_file"]: report_file,
                   self.components["html_file"]: html_file}
        except Exception:  # drawing a run again must not break the page's load; the run itself is unaffected
            log.exception("showing the latest run under load again failed")
        finally:
            self._forget_copies(request)


def settings_names() -> tuple[str, ...]:
    """The settings' names, in the form's order: the model, then every load option (the /run_load endpoint's
    parameters)."""
    return ("model", *(option.name for option in load.LOAD_OPTIONS))


def _settings(page: PageContext, d: dict[str, Any]) -> dict[str, Any]:
    """The settings' controls by name: the model, then a field per load option, two to a row, by group. Number fields
    have no minimum or maximum: the run's check says what is wrong and what is allowed, in one line."""
    runner, c = page.runner, {}
    c["model"] = gr.Dropdown(runner.model_choices(), value=runner.model_spec or runner.model_choices()[0],
                             label="Model", allow_custom_value=runner.allow_any_model, elem_id="load-model")
    for group in GROUPS:
        options = [option for option in load.LOAD_OPTIONS if option.group == group]
        title = GROUP_TITLES.get(group)
        with gr.Accordion(title, open=False) if title else contextlib.nullcontext():
            for first in range(0, len(options), 2):
                with gr.Row():
                    for option in options[first:first + 2]:
                        c[option.name] = option_field(option, d[option.name])
    return c


def option_field(option: LoadOption, value: Any) -> Any:
    """The form's field of one load option, as its kind asks: a number, a checkbox, a choice, a text (a list, or
    MIN-MAX) or the contestants' checkboxes."""
    where = {"label": option.label, "elem_id": "load-" + option.name.replace("_", "-")}
    info = {"info": option.info} if option.info else {}
    if option.kind == FLAG:
        return gr.Checkbox(value, **where)
    if option.kind == CHOICE:
        choices = list(option.page_choices or option.choices)
        return gr.Radio(choices, value=value, **where, **info) if len(choices) <= 3 else \
            gr.Dropdown(choices, value=value, **where, **info)
    if option.kind == NAMES:
        return gr.CheckboxGroup([(CONTESTANT_LABELS.get(n, n), n) for n in option.choices], value=list(value),
                                **where)
    if option.kind in (WHOLES, REALS, RANGE):
        return gr.Textbox(value, placeholder="1,2,4,8" if option.kind != RANGE else "8-32", **where, **info)
    number = gr.Number(value, **where, **info)
    return typed_whole(number) if option.kind == WHOLE else number


def _limits_note(page: PageContext) -> str:
    limits, run_s = page.runner.load_limits, page.runner.limits.max_run_s
    stopped = f", and each run is stopped after {run_s:.0f} s" if run_s else ""
    return f"This server is shared, so a run under load may ask for {plain(limits.describe() + stopped, 600)}."


def _compile_default(page: PageContext) -> str:
    """The page's compile default (app.py's --compile, or the device's), where runs under load may use it."""
    chosen = page.config.defaults.get("compile")
    compile_option = load.load_option("compile")
    allowed = compile_option.page_choices or compile_option.choices
    return chosen if chosen in allowed else form_defaults(page.runner.uses_cuda)["compile"]
