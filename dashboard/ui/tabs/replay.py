"""The Replay tab: a report written by `python -m core.bench --json` (or downloaded from this page) shown as a run
of this page shows it, a load report (`python -m core.bench --requests N --json`, or the Under load tab's download)
shown as that tab shows its run, and two report files side by side. Every file that is not a complete report gets
one line, and the page stays as it was."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

import gradio as gr

from core.documents.files import too_large
from dashboard.edge.uploads import open_bench_report, open_replayable
from dashboard.service.page_record import SavedReport
from dashboard.service.rate_series import live_series_from_report
from dashboard.ui.diff_panel import DiffPanel
from dashboard.ui.page import PageContext, upload_row
from dashboard.ui.tabs.compare import summary_components
from dashboard.ui.tabs.load_panel import LoadReportPanel
from dashboard.views import run_charts, timeline
from dashboard.views.banner import report_device
from dashboard.views.load_view import what_ran
from dashboard.views.report_text import headline_md, plain, replay_command, trials_shown
from dashboard.views.run_html import html_download
from dashboard.views.run_summary import run_shows_md, summary_tables
from dashboard.views.step_time import STEP_TIME_HEADERS, STEP_TIME_LABEL, step_time_rows

CANNOT_DRAW = ("it passed the format checks but could not be drawn; the server's log says where (write the report "
               "again with python -m core.bench --json)")
OPEN_A_REPORT = "Choose a JSON file written by `python -m core.bench --json` (or `--requests N --json`, under load)."
log = logging.getLogger(__name__)
REPLAY_OUTPUTS = ("status", "headline", "summary", "tokens_plot", "device_plot", "steps_plot", "gap_plot", "command",
                  "summary_more", "shows", "step_time", "html_file")
HTML_NAME = "syncscope-replay.html"
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


class ReplayTab:
    """`components` by name: REPLAY_OUTPUTS, "timeline_note" and "timeline_plot", and the inputs ("upload",
    "refused", "file_a", "file_b", "files_btn"; "bundled" and "open_btn" where reports are bundled), and where the tab
    opens load reports "bench_view" and "load_view" (the columns of each kind's parts); two files are shown in
    `diff_panel`, a load report in `load_panel`."""

    def __init__(self, page: PageContext, components: dict[str, Any], diff_panel: DiffPanel,
                 load_panel: LoadReportPanel | None = None):
        self.page = page
        self.components = components
        self.diff_panel = diff_panel
        self.load_panel = load_panel

    @classmethod
    def build(cls, page: PageContext, demo: gr.Blocks) -> Self:
        r: dict[str, Any] = {}
        gr.Markdown("Open a report written by `python -m core.bench ... --json results.json` (for instance on a "
                    "headless GPU server; under load, `--requests N ... --json`), or one downloaded from this page. "
                    "The file is only parsed as JSON.")
        upload_row(r, "replay", "Report JSON (or .json.gz)", page.config.replay_files, "Bundled results")
        r["status"] = gr.Markdown(elem_id="replay-status")
        r["html_file"] = gr.DownloadButton("Download as HTML (one file, opens offline)", value=None, size="sm",
                                           elem_id="replay-download-html", interactive=False)
        with gr.Column(elem_id="replay-bench") as r["bench_view"]:
            r["headline"] = gr.Markdown(elem_id="replay-headline")
            r["shows"] = gr.Markdown(elem_id="replay-run-shows")
            r["summary"], r["summary_more"] = summary_components("replay-summary")
            r["step_time"] = gr.Dataframe(headers=list(STEP_TIME_HEADERS), value=[], interactive=False, wrap=True,
                                          elem_id="replay-step-time", datatype="str",
                                          label=STEP_TIME_LABEL)
            r["command"] = gr.Textbox(label="Reproduce from the command line", interactive=False,
                                      elem_id="replay-command", buttons=["copy"])
            r["timeline_note"] = gr.Markdown(elem_id="replay-lanes-note")
            with gr.Row():
                r["timeline_plot"] = gr.Plot(elem_id="replay-plot-lanes", show_label=False)
            with gr.Row():
                r["tokens_plot"] = gr.Plot(elem_id="replay-plot-tokens", show_label=False)
                r["device_plot"] = gr.Plot(elem_id="replay-plot-device", show_label=False)
            with gr.Row():
                r["steps_plot"] = gr.Plot(elem_id="replay-plot-steps", show_label=False)
                r["gap_plot"] = gr.Plot(elem_id="replay-plot-gap", show_label=False)
        with gr.Column(visible=False, elem_id="replay-load") as r["load_view"]:
            load_panel = LoadReportPanel.build("replay-load")
        r["refused"] = gr.Textbox(visible="hidden", elem_id="replay-refused")
        with gr.Accordion("Diff two report files", open=False, elem_id="files-compare"):
            with gr.Row():
                r["file_a"] = gr.File(label="Report A (.json or .json.gz)", file_types=[".json", ".gz"],
                                      type="binary", elem_id="compare-file-a")
                r["file_b"] = gr.File(label="Report B (.json or .json.gz)", file_types=[".json", ".gz"],
                                      type="binary", elem_id="compare-file-b")
            r["files_btn"] = gr.Button("Diff A and B", elem_id="compare-files-btn")
            diff_panel = DiffPanel.build("files-compare")
        tab = cls(page, r, diff_panel, load_panel)
        tab._wire(demo)
        return tab

    def _wire(self, demo: gr.Blocks) -> None:
        r, page = self.components, self.page
        # A load report's parts and the two columns follow the bench report's (the API drops the columns).
        outputs = [r[k] for k in REPLAY_OUTPUTS] + [r["timeline_note"], r["timeline_plot"], page.view_state,
                                                   page.banner_md]
        if self.load_panel is not None:
            outputs += [*self.load_panel.outputs, r["bench_view"], r["load_view"]]
        r["upload"].upload(self.replay_upload, inputs=[r["upload"]], outputs=outputs, api_name="replay")
        r["refused"].change(self.replay_refused, inputs=[r["refused"]], outputs=[r["status"]],
                            api_visibility="private", show_progress="hidden")
        demo.load(None, js=UPLOAD_GUARD_JS % page.config.max_report_bytes)
        if "open_btn" in r:
            r["open_btn"].click(self.replay_bundled, inputs=[r["bundled"]], outputs=outputs, api_name="replay_bundled")
        r["files_btn"].click(self.diff_files, inputs=[r["file_a"], r["file_b"]], outputs=self.diff_panel.outputs,
                             api_name="compare_files", concurrency_limit=4, concurrency_id="reports")

    # ---- one report

    def replay_upload(self, data: bytes | None, request: gr.Request = None) -> dict:  # type: ignore[assignment]
        if data is None:
            return {self.components["status"]: OPEN_A_REPORT}
        limit = self.page.config.max_report_bytes
        return self._replay_guarded(lambda: self._open(data, limit), "the uploaded file", "this file",
                                    self.page.owner(request))

    def _open(self, source: bytes | Path, limit: int) -> SavedReport | dict[str, Any]:
        """The report in `source`: a bench report, or (where this tab shows them) a load report."""
        return open_replayable(source, limit) if self.load_panel is not None else open_bench_report(source, limit)

    def replay_refused(self, refusal: str) -> dict:
        """The page's own check found the chosen file too large to upload (UPLOAD_GUARD_JS): say so in the status
        line, where Gradio's own refusal would be a toast that leaves the previous file's line in place."""
        try:
            facts = json.loads(refusal)
            name, size = str(facts["name"]), int(facts["size"])
        except (TypeError, ValueError, KeyError):
            return {}
        why = too_large(size, self.page.config.max_report_bytes)
        return {self.components["status"]: f"**Cannot open {plain(name)}:** {plain(why)}."}

    def replay_bundled(self, name: str | None, request: gr.Request = None) -> dict:  # type: ignore[assignment]
        path = self.page.config.replay_files.get(name or "")
        if path is None:
            return {self.components["status"]: "Choose one of the bundled results."}
        limit = self.page.config.max_report_bytes
        return self._replay_guarded(lambda: self._open(path, limit), name or "", name or "", self.page.owner(request))

    def _replay_guarded(self, read: Callable[[], SavedReport | dict[str, Any]], source: str, called: str,
                        owner: str) -> dict:
        status = self.components["status"]
        try:
            opened = read()
            update = self._replay(opened, source) if isinstance(opened, SavedReport) else \
                self._replay_load(opened, source)
        except (OSError, ValueError) as exc:
            return {status: f"**Cannot open {plain(called)}:** {plain(exc)}"}
        except Exception:  # a report that passed the checks but still breaks a chart: say so in words, keep the page
            log.exception("a report that passed the checks could not be shown")
            return {status: f"**Cannot show {plain(called)}:** {plain(CANNOT_DRAW)}."}
        return {**update, self.components["html_file"]: self._html_button(opened, owner)}

    def _html_button(self, opened: SavedReport | dict[str, Any], owner: str) -> gr.DownloadButton:
        """The report shown, as one HTML file that opens offline (a load report with the sentences shown above)."""
        path = self.page.downloads.folder_for(owner) / HTML_NAME
        written = html_download(path, opened)
        return gr.DownloadButton(value=written, interactive=written is not None)

    def _replay(self, saved: SavedReport, source: str) -> dict:
        r, report = self.components, saved.report
        figures = run_charts.all_figures(live_series_from_report(saved), report)
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
        update[r["step_time"]] = step_time_rows(report)
        update.update(zip((r["tokens_plot"], r["device_plot"], r["steps_plot"], r["gap_plot"]), figures))
        note = timeline.timeline_note(report)
        update[r["timeline_note"]] = f"*{plain(note)}*" if note else ""
        update[r["timeline_plot"]] = timeline.timeline_figure(report)
        update[r["command"]] = replay_command(report)
        update.update(self._view_of(report))
        if self.load_panel is not None:
            update.update({**self.load_panel.cleared(), r["bench_view"]: gr.Column(visible=True),
                           r["load_view"]: gr.Column(visible=False)})
        return update

    def _view_of(self, report: dict[str, Any]) -> dict:
        """What the page shows now (Replay, and where the report was measured), and the banner for it."""
        page = self.page
        if page.view_state is None:
            return {}
        view = {"tab": "replay", "replay": report_device(report)}
        return {page.view_state: view, page.banner_md: page.banner.for_view(view)}

    def _replay_load(self, report: dict[str, Any], source: str) -> dict:
        """A load report, as the Under load tab shows its run; the bench report's parts are emptied and hidden."""
        r, panel = self.components, self.load_panel
        assert panel is not None
        status = (f"Showing {plain(source)}, a load report: {plain(what_ran(report), 600)}; created "
                  f"{plain(report.get('created', '?'))}.")
        update = {r["status"]: status, r["headline"]: "", r["shows"]: "", r["summary"]: [], r["summary_more"]: [],
                  r["step_time"]: [], r["command"]: "", r["timeline_note"]: "", r["timeline_plot"]: None,
                  r["tokens_plot"]: None, r["device_plot"]: None, r["steps_plot"]: None, r["gap_plot"]: None}
        update.update(panel.shown(report))
        update.update({r["bench_view"]: gr.Column(visible=False), r["load_view"]: gr.Column(visible=True)})
        update.update(self._view_of(report))
        return update

    # ---- two report files side by side

    def diff_files(self, first: bytes | None, second: bytes | None) -> dict:
        """Two report files (as Replay opens them) side by side."""
        if first is None or second is None:
            return self.diff_panel.status("Choose two report files, A and B.")
        limit, reports = self.page.config.max_report_bytes, []
        for side, data in (("A", first), ("B", second)):
            try:
                reports.append(open_bench_report(data, limit).report)
            except ValueError as exc:
                return self.diff_panel.status(f"**Cannot open report {side}:** {plain(exc)}")
        return self.diff_panel.show(*reports, "A", "B")
