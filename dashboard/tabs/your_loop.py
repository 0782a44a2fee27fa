"""The Your loop tab: an audit of the visitor's own program (`python -m core.audit --json audit.json --
your_script.py`), read from its file (dashboard.audit_view draws it); nothing of it runs here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Self

import gradio as gr

from core.text import clip
from dashboard import audit_view
from dashboard.page import PageContext
from dashboard.report_text import plain
from dashboard.uploads import upload_row

OUTPUTS = ("status", "summary", "sites", "plot")


class YourLoopTab:
    """`components` by name: OUTPUTS, then "upload", and "bundled" and "open_btn" where audits are bundled."""

    def __init__(self, page: PageContext, components: dict[str, Any]):
        self.page = page
        self.components = components

    @classmethod
    def build(cls, page: PageContext) -> Self:
        a: dict[str, Any] = {}
        gr.Markdown("Audit your own decode loop where it runs: `python -m core.audit --json audit.json -- "
                    "your_script.py` (or `syncscope-audit` after `pip install` of this project), then open "
                    "`audit.json` here. It lists each line of your program that reads a device value, how often per "
                    "decode step, what it costs on a GPU and what to do about it. The file is only parsed; nothing in "
                    "it runs here.")
        upload_row(a, "audit", "Audit JSON", page.config.audit_files, "Bundled audits (examples/)")
        a["status"] = gr.Markdown(elem_id="audit-status")
        a["summary"] = gr.Markdown(elem_id="audit-summary")
        a["sites"] = gr.Dataframe(headers=list(audit_view.SITE_HEADERS), value=[], interactive=False, wrap=True,
                                  elem_id="audit-sites", label="Sites (most reads per decode step first)",
                                  datatype="str", column_widths=audit_view.SITE_WIDTHS)
        a["plot"] = gr.Plot(elem_id="audit-plot", show_label=False)
        tab = cls(page, a)
        tab._wire()
        return tab

    def _wire(self) -> None:
        a = self.components
        outputs = [a[name] for name in OUTPUTS]
        a["upload"].upload(self.audit_upload, inputs=[a["upload"]], outputs=outputs, api_name="audit")
        if "open_btn" in a:
            a["open_btn"].click(self.audit_bundled, inputs=[a["bundled"]], outputs=outputs, api_name="audit_bundled")

    def audit_upload(self, data: bytes | None) -> dict:
        if data is None:
            return {self.components["status"]: "Choose a JSON file written by `python -m core.audit --json "
                                                "audit.json -- your_script.py`."}
        limit = self.page.config.max_report_bytes
        return self._audit_guarded(lambda: audit_view.open_audit(data, limit), "the file")

    def audit_bundled(self, name: str | None) -> dict:
        path = self.page.config.audit_files.get(name or "")
        if path is None:
            return {self.components["status"]: "Choose one of the bundled audits."}
        return self._audit_guarded(lambda: audit_view.open_audit(path,
                                                                 self.page.config.max_report_bytes), name or "")

    def _audit_guarded(self, read: Callable[[], dict[str, Any]], called: str) -> dict:
        status = self.components["status"]
        try:
            return self._shown(read(), called)
        except (OSError, ValueError) as exc:
            return {status: f"**Cannot open {plain(called)}:** {plain(clip(exc))}"}
        except Exception as exc:  # a file that passed the checks but still breaks the view: say so, keep the page
            return {status: f"**Cannot show {plain(called)}:** {plain(type(exc).__name__)}."}

    def _shown(self, report: dict[str, Any], source: str) -> dict:
        a = self.components
        created = clip(report.get("created"), 40)
        return {a["status"]: f"Showing {plain(source)}, an audit written {plain(created)}.",
                a["summary"]: audit_view.summary_md(report), a["sites"]: audit_view.site_rows(report),
                a["plot"]: audit_view.audit_figure(report)}
