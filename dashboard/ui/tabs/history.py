"""The Compare tab's History section: this browser's runs as a table, their downloads (history as CSV and JSON,
the last run's report, its trace, and the run as one HTML file that opens offline), two of them side by side, and the
/report endpoint (one run's report as JSON).

A visitor's runs are numbered from 1 on the page and in the downloads; the server's own job id stays under "job".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

import gradio as gr

from core.measure.trace import chrome_trace
from dashboard.service.audit_digest import described
from dashboard.service.job_queue import KEEP_FINISHED_JOBS
from dashboard.service.jobs import DONE, Job
from dashboard.service.page_record import PageRecord, SavedReport, page_report, public_report
from dashboard.service.run_history import HISTORY_SCHEMA, OPTION_COLUMNS, history_csv
from dashboard.ui.diff_panel import DiffPanel
from dashboard.ui.form import run_picker
from dashboard.ui.page import PageContext
from dashboard.views.report_text import cell, plain
from dashboard.views.run_html import html_download

HISTORY_COLUMNS = ("run", "status", "model", "tp", *OPTION_COLUMNS, "naive_decode_tok_s", "pipelined_decode_tok_s",
                   "speedup", "verdict", "identical", "clock", "notes")
DOWNLOADS = ("csv", "json", "report_file", "trace_file", "html_file")
HTML_NAME = "syncscope-report.html"


class HistoryTab:
    """`components` by name: "history" (the table), DOWNLOADS' buttons, "run_a", "run_b" and "diff_btn"; two
    runs are shown in `diff_panel`."""

    def __init__(self, page: PageContext, components: dict[str, Any], diff_panel: DiffPanel):
        self.page = page
        self.components = components
        self.diff_panel = diff_panel

    @classmethod
    def build(cls, page: PageContext) -> Self:
        c: dict[str, Any] = {}
        with gr.Accordion("Run history (this browser)", open=True):
            c["history"] = gr.Dataframe(headers=list(HISTORY_COLUMNS), value=[], interactive=False,
                                        elem_id="history", datatype="str", label="history", show_label=False)
            with gr.Row():
                c["csv"] = gr.DownloadButton("History as CSV", value=None, elem_id="download-csv", size="sm",
                                              interactive=False)
                c["json"] = gr.DownloadButton("History as JSON", value=None, elem_id="download-json", size="sm",
                                               interactive=False)
                c["report_file"] = gr.DownloadButton("Last run's report (JSON, opens in Replay)", value=None,
                                                     elem_id="download-report", size="sm", interactive=False)
                c["trace_file"] = gr.DownloadButton("Last run's trace (opens in ui.perfetto.dev)", value=None,
                                                    elem_id="download-trace", size="sm", visible=False)
                c["html_make"] = gr.Button("Make the last run one HTML file (opens offline)", elem_id="make-html",
                                           size="sm")
                c["html_file"] = gr.DownloadButton("Download the HTML file", value=None, elem_id="download-html",
                                                   size="sm", visible=False)
        with gr.Accordion("Diff two runs of this history", open=False, elem_id="compare-runs"):
            gr.Markdown("Pick two of your runs, for instance before and after changing one toggle: the settings that "
                        "differ come first, highlighted; then each loop's rate in both with B / A and whether that is "
                        "beyond the drift between two runs (or, where only an option of the pipelined loop differs, "
                        "against the naive loop as the control), the per-step waits, and both timelines on one time "
                        "axis.")
            with gr.Row():
                c["run_a"] = run_picker("Run A", "run-a")
                c["run_b"] = run_picker("Run B", "run-b")
                c["diff_btn"] = gr.Button("Diff A and B", elem_id="compare-btn", min_width=120)
            diff_panel = DiffPanel.build("history-compare")
        tab = cls(page, c, diff_panel)
        tab._wire()
        return tab

    def _wire(self) -> None:
        c = self.components
        # Made when asked, not after every run: the file is 5-8 MB (plotly inlined), and a server that wrote one per
        # run grew 2 MiB a run in the 120-run memory test.
        c["html_make"].click(self.make_html, outputs=[c["html_file"]], api_visibility="private",
                             concurrency_limit=2, concurrency_id="reports")
        c["diff_btn"].click(self.diff_runs, inputs=[c["run_a"], c["run_b"]], outputs=self.diff_panel.outputs,
                               api_name="compare_runs", concurrency_limit=4, concurrency_id="reports")

    @property
    def download_buttons(self) -> list[Any]:
        return [self.components[name] for name in DOWNLOADS]

    # ---- the table and the run pickers

    def visitor_history(self, owner: str) -> list[dict[str, Any]]:
        """`owner`'s history rows, each "run" numbered from 1 for this visitor (run ids are server-wide); the job's
        own id stays under "job"."""
        return [{**row, "run": number, "job": row.get("run")}
                for number, row in enumerate(self.page.runner.history(owner), start=1)]

    def history_table_rows(self, owner: str) -> list[list[Any]]:
        return [[cell(row.get(k)) for k in HISTORY_COLUMNS] for row in self.visitor_history(owner)]

    def run_choices(self, owner: str) -> dict:
        """The two run pickers: this visitor's runs by number, the last two with a report chosen (a run that failed,
        or was cancelled before its first round of trials, has none, so it cannot be diffed)."""
        rows = self.visitor_history(owner)
        choices = [(run_label(row), row["run"]) for row in rows]
        reported = [row["run"] for row in rows if row.get("status") == DONE or row.get("verdict") is not None]
        first, second = reported[-2:] if len(reported) >= 2 else (None, None)
        return {self.components["run_a"]: gr.update(choices=choices, value=first),
                self.components["run_b"]: gr.update(choices=choices, value=second)}

    def shown(self, owner: str) -> dict:
        """The table and the run pickers, as `owner`'s history now holds them."""
        return {self.components["history"]: self.history_table_rows(owner), **self.run_choices(owner)}

    def after_run(self, owner: str, report: dict[str, Any] | None, page: PageRecord | None) -> dict:
        """A run ended: the table, the pickers, and the files to download, its report's and trace included."""
        c = self.components
        update = self.shown(owner)
        csv_path, json_path = self._write_history(owner)
        update[c["csv"]] = csv_path
        update[c["json"]] = json_path
        update[c["report_file"]] = self._write_report(owner, report, page) if report else None
        update[c["trace_file"]] = gr.update(visible=bool(report), value=self._write_trace(owner, report) if report
                                            else None)
        update[c["html_file"]] = gr.DownloadButton(value=None, visible=False)  # the last run's is made when asked
        return update

    def make_html(self, request: gr.Request) -> gr.DownloadButton:
        """The visitor's last run as one HTML file, its download shown (hidden where there is no run to make it of)."""
        owner = self.page.owner(request)
        job = self.page.runner.latest_run(owner)
        path = self._write_html(owner, job.report, job.page) if job is not None and job.report else None
        return gr.DownloadButton(value=path, visible=path is not None, interactive=path is not None)

    # ---- two runs side by side

    def diff_runs(self, first: Any, second: Any, request: gr.Request) -> dict:
        """Two of this visitor's runs (their numbers on the page) side by side."""
        owner = self.page.owner(request)
        if first is None or second is None:
            return self.diff_panel.status("Choose two runs of your history (A and B).")
        try:
            a, b = (self._history_report(owner, number) for number in (first, second))
        except ValueError as exc:
            return self.diff_panel.status(f"**Cannot diff:** {plain(exc)}")
        return self.diff_panel.show(a, b, f"run {first}", f"run {second}")

    def _history_report(self, owner: str, number: Any) -> dict[str, Any]:
        """The report of `owner`'s run `number`; ValueError saying why there is none."""
        report = self.history_job(owner, number).report
        assert report is not None
        return report

    def history_job(self, owner: str, number: Any) -> Job:
        """`owner`'s run `number`, which has a report; ValueError saying why there is none."""
        rows = self.visitor_history(owner)
        if not isinstance(number, int) or not 1 <= number <= len(rows):
            raise ValueError(f"there is no run {plain(number)} in your history")
        row = rows[number - 1]
        job = self.page.runner.queue.get(row["job"])
        if job is None or job.owner != owner:
            raise ValueError(f"run {number}'s report is no longer kept on this server (it keeps the newest "
                             f"{KEEP_FINISHED_JOBS} runs); download reports and diff the files in Replay")
        if job.report is None:
            raise ValueError(f"run {number} has no report: it {row.get('status') or 'did not finish'}")
        return job

    # ---- the /report endpoint

    def report_of_run(self, run: int = 0, request: gr.Request = None) -> dict[str, Any]:  # type: ignore[assignment]
        """The `/report` endpoint: one of your runs' report as JSON, the document "Last run's report" downloads
        (`{"schema": "syncscope.page-report/1", "report": <core's report>, "page": <what the page saw>}`; the
        verdict is at ["report"]["verdict"]). `run`: its number in your history (1 is your first run); 0, your
        latest run. A run still going, or one without a report, is refused with the reason."""
        owner = self.page.owner(request)
        if not isinstance(run, int) or isinstance(run, bool) or run < 0:
            raise gr.Error("run must be a run's number in your history (1, 2, ...) or 0 for the latest; got "
                           f"{plain(described(run))}")
        if run:
            try:
                job = self.history_job(owner, run)
            except ValueError as exc:
                raise gr.Error(str(exc)) from None
            return page_report(job.report, job.page)
        job = self.page.runner.latest_run(owner)
        if job is None:
            raise gr.Error("you have no run on this server yet: call /run first (with the same client)")
        if not job.done:
            raise gr.Error("your latest run is still going: call /report again once /run has returned")
        if job.report is None:
            raise gr.Error(f"your latest run has no report: it {job.state}" + (f" ({job.error})" if job.error else ""))
        return page_report(job.report, job.page)

    # ---- downloads

    def enable_downloads(self, request: gr.Request) -> dict:
        """After a run: the buttons with something behind them become clickable."""
        owner = self.page.owner(request)
        job = self.page.runner.latest_run(owner)
        if job is None or not job.done:
            return self.downloads(owner, None)
        return self.downloads(owner, job.report, job.page)

    def downloads(self, owner: str, report: dict[str, Any] | None, page: PageRecord | None = None) -> dict:
        """The download buttons: enabled only when there is something to download."""
        c = self.components
        history = bool(self.page.runner.history(owner))
        csv_path, json_path = self._write_history(owner) if history else (None, None)
        report_path = self._write_report(owner, report, page) if report else None
        trace_path = self._write_trace(owner, report) if report else None
        return {c["csv"]: gr.DownloadButton(value=csv_path, interactive=history),
                c["json"]: gr.DownloadButton(value=json_path, interactive=history),
                c["report_file"]: gr.DownloadButton(value=report_path, interactive=report_path is not None),
                c["trace_file"]: gr.DownloadButton(value=trace_path, visible=trace_path is not None),
                c["html_file"]: gr.DownloadButton(value=None, visible=False)}

    def _owner_dir(self, owner: str) -> Path:
        return self.page.downloads.folder_for(owner)

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

    def _write_html(self, owner: str, report: dict[str, Any], page: PageRecord | None) -> str | None:
        """The run as one HTML file that opens offline (dashboard.views.run_html); None where it could not be made."""
        return html_download(self._owner_dir(owner) / HTML_NAME, SavedReport(public_report(report), page))

    def _write_trace(self, owner: str, report: dict[str, Any]) -> str:
        path = self._owner_dir(owner) / "syncscope-trace.json"
        path.write_text(json.dumps(chrome_trace(public_report(report))), encoding="utf-8")
        return str(path)


def run_label(row: Mapping[str, Any]) -> str:
    """A history row as a run picker's choice: its number, status, model and the options it ran with."""
    options = ", ".join(f"{name} {row[name]}" for name in OPTION_COLUMNS if row.get(name) is not None)
    speedup = f", {row['speedup']}×" if row.get("speedup") is not None else ""
    return f"run {row['run']}: {row.get('status')}, {row.get('model')}; {options}{speedup}"[:200]
