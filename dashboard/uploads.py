"""A report a visitor uploads or picks from the bundled ones, opened through core.report_schema.load (gzipped or
not, bounded in size), saying where an audit report opens instead. Replay and its two files side by side read
their reports here."""

from __future__ import annotations

from pathlib import Path

from core import report_schema
from core.report_schema import AUDIT, BENCH, MAX_REPORT_BYTES
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
