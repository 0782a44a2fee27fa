"""The documents this project writes and reads, and one way in: load() reads a file or its bytes, bounded in size
(gzip too: decompression stops at the limit), upgrade()s it and check()s it; anything wrong is one `ReportError`, a
ValueError whose message is one line in words. After it, readers index the document (its keys as types, one module
of core.documents each):

- the bench report (`python -m core.bench --json`): bench_report.BenchReport;
- the page report (the page's download, dashboard.service.page_record): page_report.PageReport;
- the audit report (`python -m core.audit --json`): audit_report.AuditReport;
- the load report (`python -m core.bench --requests N --json`): load_report.LoadReport.

Old documents are upgraded by numbered steps (core.documents.upgrades). Torch-free (tests/test_report_schema.py
checks it): the page server and the CLI's --diff import it.
"""

import codecs
import json
from pathlib import Path
from typing import Any

from core.documents.audit_report import check_audit
from core.documents.bench_report import BenchReport, check_report
from core.documents.files import GZIP_MAGIC, MAX_REPORT_BYTES, gunzip_bounded, read_bounded, too_large
from core.documents.kinds import (
    AUDIT,
    BENCH,
    LOAD,
    NOT_A_BENCH_REPORT,
    PAGE,
    VERSIONS,
    ReportError,
    kind_of,
    refusal,
    version_of,
)
from core.documents.load_report import check_load
from core.documents.page_report import check_page
from core.documents.upgrades import upgrade

# The one way in; ReportError and kind_of are kinds', passed on for the readers that take them with load
__all__ = ["ReportError", "bench_report", "check", "kind_of", "load", "upgrade"]


def load(source: Path | bytes | str, limit: int = MAX_REPORT_BYTES, *, expect: str | None = None) -> dict[str, Any]:
    """The upgraded, checked document in a file (a Path), or in JSON text (bytes, gzipped or not, or str): a bench
    report, a page report (an old page download becomes one), an audit report or a load report; only `expect`'s kind
    where given. ReportError in one line (naming the file, for a Path) when it is missing, larger than `limit` bytes
    (decompressed too), not JSON, not one of these documents, of a version newer than this code reads, or damaged."""
    if isinstance(source, Path):
        try:
            return load(_file_bytes(source, limit), limit, expect=expect)
        except ReportError as exc:
            raise ReportError(f"{source}: {exc}", exc.found) from None
    document = upgrade(_parsed(json_bytes(source, limit) if isinstance(source, bytes | bytearray) else source))
    found = kind_of(document)
    if found is None or (expect is not None and found != expect and {found, expect} != {BENCH, PAGE}):
        raise ReportError(refusal(found, expect), found)
    _refuse_a_newer_version(document, found)  # its upgrades do not know what it holds: no step was applied
    check(document)
    return document


def check(document: dict[str, Any]) -> None:
    """ReportError naming the first thing missing or wrong in an upgraded document. Every field a reader reads is
    checked here, so that a document that passes cannot break the charts, the tables or the sentences later."""
    found = kind_of(document)
    if found == AUDIT:
        check_audit(document)
    elif found == LOAD:
        check_load(document)
    elif found == PAGE:
        check_report(document.get("report"))
        check_page(document.get("page"), "page")
    elif found == BENCH:
        check_report(document)
    else:
        raise ReportError(NOT_A_BENCH_REPORT)


def bench_report(document: dict[str, Any]) -> BenchReport:
    """The bench report of a loaded bench or page report."""
    return document["report"] if kind_of(document) == PAGE else document  # type: ignore[return-value]


def _refuse_a_newer_version(document: dict[str, Any], found: str) -> None:
    """A document written at a version this code does not know yet (by a newer syncscope) is not read."""
    inner = document.get("report") if found == PAGE else None
    for part, kind in ((document, found), *([(inner, BENCH)] if isinstance(inner, dict) else [])):
        if version_of(part) > VERSIONS[kind]:
            raise ReportError(f"this {kind} document is of version {version_of(part)} (\"schema\": "
                              f"{str(part.get('schema'))[:40]!r}), newer than this syncscope reads (version "
                              f"{VERSIONS[kind]}): open it with the syncscope that wrote it", found)


def _file_bytes(path: Path, limit: int) -> bytes:
    try:
        return read_bounded(path, limit)
    except ValueError as exc:
        raise ReportError(str(exc)) from None


def json_bytes(data: bytes | bytearray, limit: int) -> bytes:
    """The JSON text in `data`: as it is, or decompressed when it is gzip; at most `limit` bytes either way."""
    if len(data) > limit:
        raise ReportError(too_large(len(data), limit))
    if not bytes(data).strip():
        raise ReportError("the file is empty (0 bytes)" if not data else "the file is empty (only whitespace)")
    if bytes(data[:2]) == GZIP_MAGIC:
        try:
            data = gunzip_bounded(bytes(data), limit)
        except ValueError as exc:
            raise ReportError(str(exc)) from None
        if not data.strip():
            raise ReportError("the file is gzip of an empty file")
    return bytes(data)


def _parsed(text: bytes | str) -> Any:
    if isinstance(text, bytes):
        try:
            text = text.removeprefix(codecs.BOM_UTF8).decode("utf-8")  # an editor's byte-order mark is not JSON
        except UnicodeDecodeError:
            raise ReportError("the file is not UTF-8 text, so not a report written by this project") from None
    if not text.strip():
        raise ReportError("the file is empty")
    try:
        return json.loads(text.removeprefix("\ufeff"))
    except json.JSONDecodeError as exc:
        raise ReportError(f"the file is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ReportError("the file nests too deeply to be a report") from None
