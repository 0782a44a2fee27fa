"""The Compare tab: the live A/B run. Its form (dashboard.ui.form) queues a run on the runner; the two panes,
the verdict, the summary and the charts stream until it ends; the History section below it (dashboard.ui.tabs.history)
holds the visitor's runs. A reload finds the visitor's run again and streams it (`on_load`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any, Self

import gradio as gr

from core.phases import TRIAL
from core.request.options import RUN_OPTION
from dashboard.edge.session_copies import SessionCopies
from dashboard.service.jobs import COMPARE, FAILED, RUNNING, Job
from dashboard.service.page_record import live_series
from dashboard.service.runner import Runner
from dashboard.service.watchers import JobWatchers
from dashboard.ui.form import build_form, from_widget
from dashboard.ui.page import PageContext
from dashboard.ui.tabs.history import HistoryTab
from dashboard.views import live_charts, run_charts, step_charts, timeline
from dashboard.views.report_text import as_text, headline_md, plain, rate_md, status_md
from dashboard.views.run_summary import (
    DETAIL_HEADERS,
    DETAIL_LABEL,
    DETAIL_WIDTHS,
    EVIDENCE_HEADERS,
    EVIDENCE_LABEL,
    EVIDENCE_WIDTHS,
    run_shows_md,
    summary_tables,
)

# The /run endpoint's outputs, in order (a client zips them with these names); the timeline's plot follows them.
# "text": the Markdown outputs (TEXT_OUTPUTS) as plain text, for API callers (the page shows the Markdown).
OUTPUTS = ("status", "naive_rate", "naive_text", "pipelined_rate", "pipelined_text", "headline", "summary",
           "command", "tokens_plot", "device_plot", "steps_plot", "gap_plot", "history", "csv", "json",
           "report_file", "trace_file", "banner", "model", "run_note", "summary_more", "shows", "run_a", "run_b",
           "text", "html_file")
TEXT_OUTPUTS = ("status", "naive_rate", "pipelined_rate", "headline", "shows", "run_note", "banner")
CPU_QUIET_NOTE = ("*(On the CPU this page redraws every {:g} s, without its charts, while a trial is timed: its "
                  "redraws would share the processor with the loop.)*")


def quiet_now(snap: dict[str, Any], cuda: bool) -> bool:
    """Whether the page keeps quiet now: a timed trial runs on a CPU host (PageConfig.cpu_trial_interval_s)."""
    return not cuda and snap.get("phase") == TRIAL.id and snap.get("state") == RUNNING


class CompareTab:
    """`components` by name: the panes, the verdict, the summary, the charts ("timeline_plot" among them), the form's
    "model", "run_note", "run_btn" and "cancel_btn"; the History section's are `history`'s."""

    def __init__(self, page: PageContext, components: dict[str, Any], history: HistoryTab):
        self.page = page
        self.components = components
        self.history = history
        self._submitting = threading.Lock()  # a visitor's "already going?" and the submit, as one step
        self.watchers = JobWatchers(page.runner)  # the pages streaming each run
        self.session_copies: SessionCopies | None = None  # build_demo sets it once the page is built

    @classmethod
    def build(cls, page: PageContext) -> Self:
        runner, c = page.runner, {}
        with gr.Row(elem_id="compare-row"):
            with gr.Column(scale=1, min_width=320, elem_id="controls-col"):
                form = build_form(runner, page.config.defaults)
            with gr.Column(scale=2, elem_id="results-col"):
                c["status"] = gr.Markdown("Press **Run** to compare the two loops.", elem_id="status",
                                          label="status", show_label=False)
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
                c["summary"], c["summary_more"] = summary_components("summary")
                c["command"] = gr.Textbox(label="Reproduce from the command line", interactive=False,
                                          elem_id="command", buttons=["copy"])
                c["text"] = gr.JSON(visible=False, label="text")  # the API's plain text (the page shows Markdown)
        with gr.Row():
            c["timeline_plot"] = gr.Plot(timeline.timeline_figure({}), elem_id="plot-lanes", show_label=False,
                                         label="timeline")
        with gr.Row():
            c["tokens_plot"] = gr.Plot(live_charts.tokens_per_s_figure(live_series()), elem_id="plot-tokens",
                                       show_label=False, label="tokens/s chart")
            c["device_plot"] = gr.Plot(live_charts.device_figure(live_series(monitor=_idle_monitor(runner))),
                                       elem_id="plot-device", show_label=False, label="device chart")
        with gr.Row():
            c["steps_plot"] = gr.Plot(step_charts.step_latency_figure({}), elem_id="plot-steps", show_label=False,
                                      label="step latency chart")
            c["gap_plot"] = gr.Plot(step_charts.gap_figure({}), elem_id="plot-gap", show_label=False,
                                    label="idle gap chart")
        c.update(model=form.model, run_note=form.run_note, run_btn=form.run_btn, cancel_btn=form.cancel_btn)
        tab = cls(page, c, HistoryTab.build(page))
        tab._wire(form.inputs)
        return tab

    def _wire(self, inputs: dict[str, Any]) -> None:
        c = self.components
        # No limit of Gradio's own: the runner's queue is the only queue (it refuses at once, in one line, what it
        # will not take), so every run it accepts has its handler, whose page shows the run's place in it.
        c["run_btn"].click(self.run, inputs_kwargs=inputs, outputs=self.outputs, api_name="run",
                           concurrency_limit=None, concurrency_id="run", show_progress="hidden",
                           trigger_mode="multiple").then(
            self.history.enable_downloads, outputs=self.history.download_buttons, api_visibility="private",
            queue=False).then(self.forget_copies, api_visibility="private", queue=False)
        c["cancel_btn"].click(self.cancel, outputs=[c["status"]], api_name="cancel", queue=False)

    @property
    def outputs(self) -> list[Any]:
        """The /run endpoint's outputs (OUTPUTS), then the timeline's plot: what a run and a page load update."""
        shown = {**self.components, **self.history.components, "banner": self.page.banner_md}
        return [shown[name] for name in OUTPUTS] + [self.components["timeline_plot"]]

    # ---- run

    def run(self, request: gr.Request, **controls: Any) -> Iterator[dict]:
        """Queue a run and stream its progress until it finishes. `controls` are the model and the run options
        by name (the /run endpoint's parameters, core.request.options.RUN_OPTIONS), as the page's controls hold them.
        The `text` output holds the status, the rates, the verdict and the banner as plain text, for API callers."""
        said: dict[str, str] = {}
        updates = self._run(request, controls)
        try:
            for update in updates:
                yield self._with_text(update, said)
        finally:  # Gradio resumes a stream only once it has applied its last update: its copies are all made
            updates.close()  # a page that went away: the run's watch ends now (_release), as with `yield from`
            self.forget_copies(request)

    def _with_text(self, update: dict, said: dict[str, str]) -> dict:
        """`update` and the `text` output: every Markdown output so far (TEXT_OUTPUTS), as plain text."""
        text = self.components.get("text")
        if text is None:
            return update
        shown = {**self.components, "banner": self.page.banner_md}
        for name in TEXT_OUTPUTS:
            value = update.get(shown.get(name))
            if isinstance(value, str):
                said[name] = as_text(value)
        return {**update, text: dict(said)}

    def _run(self, request: gr.Request, controls: dict[str, Any]) -> Iterator[dict]:
        c = self.components
        owner = self.page.owner(request)
        form = {name: from_widget(RUN_OPTION[name], value) if name in RUN_OPTION else value
                for name, value in controls.items()}
        going, job, refusal = self._submit_unless_going(form, owner, address_of(request))
        if going is not None:  # a second click while one streams: answered beside Run, the first's status goes on
            yield {c["run_note"]: self._already_going(going)}
            return
        if job is None:
            yield {c["status"]: f"**Not started:** {plain(refusal)}"}
            return
        try:
            yield self._cleared(job)
            yield from self._follow(job, owner)
        except Exception:  # a bug in drawing must not take the page down; the run itself is unaffected
            logging.getLogger(__name__).exception("drawing run %s failed", job.id)
            yield {c["status"]: "**The page could not show this run:** drawing its results failed (the server's log "
                                "has the details); the run itself goes on, and History lists it once it ends."}

    def forget_copies(self, request: gr.Request) -> None:
        """Drop the component copies the run's updates left in this session (dashboard.edge.session_copies)."""
        if self.session_copies is not None:
            self.session_copies.forget(getattr(request, "session_hash", None))

    def _submit_unless_going(self, form: dict[str, Any], owner: str,
                             address: str | None = None) -> tuple[Job | None, Job | None, str | None]:
        """(the visitor's run already going, or None; the job submitted, or None; why it was refused). One at a
        time: two clicks handled at once must not both find nothing going and both submit."""
        with self._submitting:
            going = self._pending_run(owner)
            if going is not None:
                return going, None, None
            try:
                return None, self.page.runner.submit(form, owner=owner, address=address), None
            except ValueError as exc:
                return None, None, str(exc)

    def _pending_run(self, owner: str) -> Job | None:
        return next((j for j in self.page.runner.pending() if j.owner == owner and j.work == COMPARE), None)

    def _already_going(self, job: Job) -> str:
        ahead = self.page.runner.position(job)
        where = f"queued, position {ahead + 1}: {ahead} job{'s' if ahead != 1 else ''} ahead of it" if ahead \
            else "running now"
        return (f"**A run of yours is already going** ({where}): this click started nothing. Wait for it to "
                "finish, or press Cancel and Run again.")

    def _cleared(self, job: Job) -> dict:
        """What a new run replaces: the previous run's headline, summary, command and charts go at once."""
        c = self.components
        update = {c["headline"]: "*This run's verdict appears here when it finishes.*", c["summary"]: [],
                  c["summary_more"]: [], c["shows"]: "",
                  c["command"]: "", c["naive_text"]: "", c["pipelined_text"]: ""}
        update.update(zip((c["tokens_plot"], c["device_plot"], c["steps_plot"], c["gap_plot"]),
                          run_charts.all_figures(live_series(), None)))
        update[c["timeline_plot"]] = timeline.timeline_figure({})
        update.update(self._live_update(self.page.runner.snapshot(job)))
        return update

    def _follow(self, job: Job, owner: str) -> Iterator[dict]:
        c, runner, config = self.components, self.page.runner, self.page.config
        last_chart, last_shown, model_seen, timeline_runs = 0.0, 0.0, runner.model_spec, 0
        with self.watchers.watching(job):
            while not job.wait(config.live_interval_s):
                snap = runner.snapshot(job)
                quiet = quiet_now(snap, runner.uses_cuda)
                if quiet and time.monotonic() - last_shown < config.cpu_trial_interval_s:
                    continue
                last_shown = time.monotonic()
                update = self._live_update(snap)
                if quiet:
                    update[c["status"]] += f" {CPU_QUIET_NOTE.format(config.cpu_trial_interval_s)}"
                elif time.monotonic() - last_chart >= config.chart_interval_s:
                    last_chart = time.monotonic()
                    update[c["tokens_plot"]] = live_charts.tokens_per_s_figure(snap)
                    update[c["device_plot"]] = live_charts.device_figure(snap)
                runs = snap.get("runs") or []
                if len(runs) != timeline_runs:  # a trial ended: redraw the timeline from the trials so far
                    timeline_runs = len(runs)
                    update[c["timeline_plot"]] = timeline.timeline_figure({"runs": runs})
                if runner.model_spec != model_seen:
                    model_seen = runner.model_spec
                    update[self.page.banner_md] = self.page.banner.text()
                yield update
        yield self._final_update(job, owner)

    def cancel(self, request: gr.Request) -> str:
        if not self.page.runner.cancel_pending(self.page.owner(request), COMPARE):
            return "Nothing to cancel."
        return "Cancelling… (a run stops within one decode step; if the engine is compiling, it is restarted)"

    # ---- page load: who this browser is, its history, and its run if one is going

    def on_load(self, browser_id: Any, request: gr.Request) -> Iterator[dict]:
        """Tie this page to its browser's id (made here on a first visit), show that browser's history and last
        run, and stream its run again if one is still queued or running (a reload does not lose it)."""
        try:
            yield from self._on_load(browser_id, request)
        finally:
            self.forget_copies(request)

    def _on_load(self, browser_id: Any, request: gr.Request) -> Iterator[dict]:
        page, runner, history = self.page, self.page.runner, self.history
        browser_id = page.visitors.tie(browser_id, request)
        update = {page.browser_state: browser_id, page.banner_md: page.banner.text(),
                  **history.downloads(browser_id, None), **history.shown(browser_id)}
        if runner.last_load_error and not runner.model_spec:  # the startup model failed: not offered
            update[self.components["model"]] = runner.model_choices()[0]
        job = runner.latest_run(browser_id)
        if job is None:
            yield update
        elif job.wait(0):  # ended, its history row written (its state says so a moment earlier: JobQueue.finish)
            # The last run's files as /run gives them, then every download with something behind it enabled (a
            # run's page enables them after it, enable_downloads).
            yield {**update, **self._final_update(job, browser_id), **history.downloads(browser_id, job.report,
                                                                                         job.page)}
        else:
            yield {**update, **self._cleared(job)}
            # A run's own page enables its downloads after it (enable_downloads); a page that picked the run up on
            # load has no such step, so they come here, in the run's last update and not in one after it: for an
            # update that leaves a component out the browser takes its value back from what it has drawn, which
            # under load can still be the history before the run's row (the Under load tab's reload had the same).
            updates = self._follow(job, browser_id)
            last = next(updates)
            for later in updates:
                yield last
                last = later
            yield {**last, **history.downloads(browser_id, job.report, job.page)}

    def _live_update(self, snap: dict[str, Any]) -> dict:
        c = self.components
        update = {c["status"]: status_md(snap)}
        for name in ("naive", "pipelined"):
            pane = snap.get("panes", {}).get(name)
            if pane:
                update[c[f"{name}_text"]] = pane["text"]
                update[c[f"{name}_rate"]] = rate_md(name, pane, snap.get("batch", 1))
        return update

    def _final_update(self, job: Job, owner: str) -> dict:
        c, runner = self.components, self.page.runner
        snap = runner.snapshot(job)
        update = self._live_update(snap)
        report = job.report
        figures = run_charts.all_figures(snap, report)
        update.update(zip((c["tokens_plot"], c["device_plot"], c["steps_plot"], c["gap_plot"]), figures))
        update[c["timeline_plot"]] = timeline.timeline_figure(report or {"runs": snap.get("runs") or []})
        update[c["headline"]] = headline_md(report, job.page) if report else ""
        update[c["summary"]], update[c["summary_more"]] = summary_tables(report, job.page) if report else ([], [])
        update[c["shows"]] = run_shows_md(report) if report else ""
        update[c["run_note"]] = ""  # an answer to a click during the run held until the run's end
        update[c["command"]] = _command(job) if report else ""
        update[self.page.banner_md] = self.page.banner.text()
        if job.state == FAILED and runner.model_spec and job.model != runner.model_spec:
            update[c["model"]] = runner.model_spec  # a spec that failed to load does not stay selected
        update.update(self.history.after_run(owner, report, job.page))
        return update


def summary_components(elem_id: str) -> tuple[gr.Dataframe, gr.Dataframe]:
    """The summary's two tables (dashboard.views.run_summary.summary_tables): the verdict's evidence, then where the
    time went and the rest."""
    evidence = gr.Dataframe(headers=list(EVIDENCE_HEADERS), value=[], interactive=False, wrap=True,
                            elem_id=elem_id, label=EVIDENCE_LABEL,
                            column_widths=EVIDENCE_WIDTHS, datatype="str")
    details = gr.Dataframe(headers=list(DETAIL_HEADERS), value=[], interactive=False, wrap=True,
                           elem_id=f"{elem_id}-more", label=DETAIL_LABEL,
                           column_widths=DETAIL_WIDTHS, datatype="str")
    return evidence, details


def address_of(request: gr.Request | None) -> str | None:
    """The client address a request came from (None: unknown)."""
    client = getattr(request, "client", None) if request is not None else None
    host = getattr(client, "host", None)
    return host if isinstance(host, str) and host else None


def _command(job: Job) -> str:
    """The report's own reproduce command (core.report.build.reproduce_command), with a file to write the report to."""
    assert job.report is not None
    return job.report["command"] + " --json results.json"


def _idle_monitor(runner: Runner) -> dict[str, Any]:
    monitor = runner.monitor
    if monitor is None:
        return {"source": "none", "description": "Utilization monitoring is off.", "samples": []}
    return {"source": monitor.source, "description": f"{monitor.description} The chart fills during a run.",
            "samples": []}

