"""A report a visitor uploads or picks from the bundled ones, opened through core.documents.schema.load (gzipped or not,
bounded in size), saying where an audit report opens instead. Replay (a bench report, or a load report) and its two
files side by side read their reports here; the row of controls for an upload is the page's
(dashboard.ui.page.upload_row), and an audit report is read by dashboard.edge.audit_process. No gradio here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.documents import schema as report_schema
from core.documents.schema import AUDIT, BENCH, LOAD, MAX_REPORT_BYTES
from dashboard.service.page_record import SavedReport, split_report

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
    dict, core.documents.schema.LoadReport); ReportError in one line, which for an audit report says where it opens."""
    document = report_schema.load(source, limit)
    found = report_schema.kind_of(document)
    if found == AUDIT:
        raise report_schema.ReportError(f"{report_schema.AUDIT_NOT_BENCH}: {OPEN_AUDITS_IN_YOUR_LOOP}", AUDIT)
    return document if found == LOAD else split_report(document)
