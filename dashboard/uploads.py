"""A report a visitor uploads or picks from the bundled ones: the row of controls for it (Replay, Your loop), and the
opening through core.report_schema.load (gzipped or not, bounded in size), saying where an audit report opens
instead. Replay (a bench report, or a load report) and its two files side by side read their reports here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from core import report_schema
from core.report_schema import AUDIT, BENCH, LOAD, MAX_REPORT_BYTES
from dashboard.page_record import SavedReport, split_report

OPEN_AUDITS_IN_YOUR_LOOP = "open it in the Your loop tab"


def open_bench_report(source: bytes | str | Path, limit: int = MAX_REPORT_BYTES) -> SavedReport:
    """A bench report (or a page's download of one) and the page's record of it; ReportError in one line, which for
    an audit report says where it opens."""
    try:
        return split_report(report_schema.load(source, limit, expect=BENCH))
    except report_schema.ReportError as exc:
        if exc.found == AUDIT:
            raise report_schema.ReportError(f"{exc}: {OPEN_AUDITS_IN_YOUR_LOOP}", AUDIT) from None
        raise


def open_replayable(source: bytes | str | Path, limit: int = MAX_REPORT_BYTES) -> SavedReport | dict[str, Any]:
    """What Replay shows: a bench report (or a page's download of one) with the page's record, or a load report (the
    dict, core.report_schema.LoadReport); ReportError in one line, which for an audit report says where it opens."""
    document = report_schema.load(source, limit)
    found = report_schema.kind_of(document)
    if found == AUDIT:
        raise report_schema.ReportError(f"{report_schema.AUDIT_NOT_BENCH}: {OPEN_AUDITS_IN_YOUR_LOOP}", AUDIT)
    return document if found == LOAD else split_report(document)


def upload_row(components: dict[str, Any], prefix: str, label: str, bundled: dict[str, Path],
               bundled_label: str, *, as_path: bool = False) -> None:
    """A file upload (`{prefix}-upload`) and, where the server bundles files, a picker of them and its Open button
    (`{prefix}-bundled`, `{prefix}-open`), put into `components` as "upload", "bundled" and "open_btn". The upload
    hands its handler the file's bytes, or with `as_path` the path Gradio streamed it to."""
    with gr.Row():
        components["upload"] = gr.File(label=label, file_types=[".json", ".gz"],
                                       type="filepath" if as_path else "binary", elem_id=f"{prefix}-upload")
        if bundled:
            with gr.Column():
                components["bundled"] = gr.Dropdown(sorted(bundled), label=bundled_label,
                                                    elem_id=f"{prefix}-bundled")
                components["open_btn"] = gr.Button("Open", elem_id=f"{prefix}-open")
