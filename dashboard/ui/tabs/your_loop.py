"""The Your loop tab: an audit of the visitor's own program (HOW_TO_AUDIT says how to write one), read from its file
(dashboard.views.audit_view draws it); nothing of it runs here. Uploads are read one at a time (AUDITS_AT_ONCE), each
in a child process bounded in memory (dashboard.edge.audit_process)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Self

import gradio as gr

from dashboard.edge import audit_process
from dashboard.service.audit_digest import HELD_CHARS
from dashboard.ui.page import PageContext, upload_row
from dashboard.views import audit_view
from dashboard.views.report_text import plain

OUTPUTS = ("status", "summary", "sites", "plot")
# How to write an audit, as the README's "Audit your own loop" says: the checkout's interpreter (a bare python has no
# torch, and elsewhere no core), or the installed command anywhere.
HOW_TO_AUDIT = ("in the syncscope checkout, `.venv/bin/python -m core.audit --json audit.json -- your_script.py` (or "
                "`syncscope-audit --json audit.json -- your_script.py` anywhere, once installed with `pip install .`)")
# How many audits the server reads at once (upload and bundled together): each may take a child process up to
# dashboard.edge.audit_process.CHILD_MEMORY_BYTES for a few seconds, so a burst of uploads queues instead of adding up.
AUDITS_AT_ONCE = 1
CANNOT_SHOW = ("it passed the checks of an audit report but could not be drawn; audit the program again "
               "(.venv/bin/python -m core.audit in the syncscope checkout, or syncscope-audit)")

log = logging.getLogger(__name__)


class YourLoopTab:
    """`components` by name: OUTPUTS, then "upload", and "bundled" and "open_btn" where audits are bundled."""

    def __init__(self, page: PageContext, components: dict[str, Any]):
        self.page = page
        self.components = components

    @classmethod
    def build(cls, page: PageContext) -> Self:
        a: dict[str, Any] = {}
        gr.Markdown(f"Audit your own decode loop where it runs: {HOW_TO_AUDIT}, then open `audit.json` here. It "
                    "lists each line of your program that waits on the device (a read of a device value, or a blocking "
                    "copy to it), how often per decode step, what it costs on a GPU and what to do about it. The file "
                    "is only parsed; nothing in it runs here.")
        upload_row(a, "audit", "Audit JSON", page.config.audit_files, "Bundled audits (examples/)", as_path=True)
        a["status"] = gr.Markdown(elem_id="audit-status")
        a["summary"] = gr.Markdown(elem_id="audit-summary")
        # One short row a site, its fix behind the row's expander (audit_view.sites_html: every text escaped there).
        a["sites"] = gr.HTML(value="", elem_id="audit-sites", css_template=audit_view.SITES_CSS, js_on_load=None)
        a["plot"] = gr.Plot(elem_id="audit-plot", show_label=False)
        tab = cls(page, a)
        tab._wire()
        return tab

    def _wire(self) -> None:
        a = self.components
        outputs = [a[name] for name in OUTPUTS]
        a["upload"].upload(self.audit_upload, inputs=[a["upload"]], outputs=outputs, api_name="audit",
                           concurrency_limit=AUDITS_AT_ONCE, concurrency_id="audits")
        if "open_btn" in a:
            a["open_btn"].click(self.audit_bundled, inputs=[a["bundled"]], outputs=outputs, api_name="audit_bundled",
                                concurrency_limit=AUDITS_AT_ONCE, concurrency_id="audits")

    def audit_upload(self, data: bytes | str | None) -> dict:
        """An uploaded audit: the path Gradio saved it to (the page), or its bytes."""
        if data is None:
            return {self.components["status"]: f"Choose the JSON file of an audit: {HOW_TO_AUDIT}."}
        limit = self.page.config.max_report_bytes
        return self._audit_guarded(lambda: audit_process.read_audit(data, limit), "the file")

    def audit_bundled(self, name: str | None) -> dict:
        path = self.page.config.audit_files.get(name or "")
        if path is None:
            return {self.components["status"]: "Choose one of the bundled audits."}
        limit = self.page.config.max_report_bytes
        return self._audit_guarded(lambda: audit_process.read_audit(path, limit), name or "")

    def _audit_guarded(self, read: Callable[[], dict[str, Any]], called: str) -> dict:
        status = self.components["status"]
        try:
            return self._shown(read(), called)
        except ValueError as exc:
            return {status: f"**Cannot open {plain(called)}:** {plain(exc)}"}
        except Exception:  # a file that passed the checks but still breaks the view: say so in words, keep the page
            log.exception("an audit that passed the checks could not be shown")
            return {status: f"**Cannot show {plain(called)}:** {plain(CANNOT_SHOW)}."}

    def _shown(self, report: dict[str, Any], source: str) -> dict:
        a = self.components
        created = plain(report.get("created") or "?", HELD_CHARS)  # clipped where it was read
        return {a["status"]: f"Showing {plain(source)}, an audit written {created}.",
                a["summary"]: audit_view.summary_md(report), a["sites"]: audit_view.sites_html(report),
                a["plot"]: audit_view.audit_figure(report)}
