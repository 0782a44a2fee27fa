"""A report a visitor uploads or picks from the bundled ones, opened through core.documents.schema.load (gzipped or not,
bounded in size), saying where an audit report opens instead. Replay (a bench report, or a load report) and its two
files side by side read their reports here; the row of controls for an upload is the page's
(dashboard.ui.page.upload_row), and an audit report is read by dashboard.edge.audit_process. No gradio here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.documents.files import MAX_REPORT_BYTES
from core.documents.kinds import AUDIT, AUDIT_NOT_BENCH, BENCH, LOAD, ReportError, kind_of
from core.documents.schema import load
from dashboard.service.page_record import SavedReport, split_report

OPEN_AUDITS_IN_YOUR_LOOP = "open it in the Your loop tab"


def open_bench_report(source: bytes | str | Path, limit: int = MAX_REPORT_BYTES) -> SavedReport:
    """A bench report (or a page's download of one) and the page's record of it; ReportError in one line, which for
    an audit report says where it opens."""
    try:
        return split_report(load(source, limit, expect=BENCH))
    except ReportError as exc:
        if exc.found == AUDIT:
            raise ReportError(f"{exc}: {OPEN_AUDITS_IN_YOUR_LOOP}", AUDIT) from None
        raise


def open_replayable(source: bytes | str | Path, limit: int = MAX_REPORT_BYTES) -> SavedReport | dict[str, Any]:
    """What Replay shows: a bench report (or a page's download of one) with the page's record, or a load report
    (core.documents.load_report.LoadReport); ReportError in one line, which for an audit report says where it opens."""
    document = load(source, limit)
    found = kind_of(document)
    if found == AUDIT:
        raise ReportError(f"{AUDIT_NOT_BENCH}: {OPEN_AUDITS_IN_YOUR_LOOP}", AUDIT)
    return document if found == LOAD else split_report(document)
