"""A file a visitor uploads, as JSON text: as it is, or gunzipped (benchmarks/results keeps its large reports as
.json.gz), within the page's limit; and a benchmark report opened from it, saying where an audit report opens
instead. Replay, its two files compared, and Your loop read their uploads here."""

from __future__ import annotations

import json
import zlib

from dashboard import audit_view
from dashboard.reports import MAX_REPORT_BYTES, SavedReport, open_report

GZIP_MAGIC = b"\x1f\x8b"
AUDIT_IN_REPLAY = ("this JSON is an audit report of a program (python -m core.audit), not a benchmark report: open it "
                   "in the Your loop tab")


def open_bench_report(data: bytes | str, limit: int = MAX_REPORT_BYTES) -> SavedReport:
    """open_report, saying where an audit report opens instead (the Your loop tab); parsed again only when refused."""
    try:
        return open_report(data, limit)
    except ValueError:
        try:
            audit = audit_view.is_audit(json.loads(data))
        except (ValueError, RecursionError):
            audit = False
        if audit:
            raise ValueError(AUDIT_IN_REPLAY) from None
        raise


def uploaded_json(data: bytes, limit: int) -> bytes:
    """An uploaded file's JSON text: as it is, or decompressed when it is gzipped (benchmarks/results keeps its large
    reports as .json.gz); ValueError saying so when it is empty, or when it is gzip that is damaged or would
    decompress past `limit` bytes."""
    if not data.strip():
        raise ValueError("the file is empty (0 bytes)" if not data else "the file is empty (only whitespace)")
    if not data.startswith(GZIP_MAGIC):
        return data
    inflater = zlib.decompressobj(wbits=31)
    try:
        text = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise ValueError(f"the file is gzip but damaged ({exc})") from None
    if len(text) > limit:
        raise ValueError(f"the file decompresses to more than {limit / 2**20:,.0f} MiB, the limit for reports here")
    if not inflater.eof:
        raise ValueError("the file is gzip but cut short (it ends before its compressed data does)")
    if not text.strip():
        raise ValueError("the file is gzip of an empty file")
    return text
