"""dashboard.audit_view: an audit report as the Your loop tab shows it (plain data in, text out)."""

from __future__ import annotations

from dashboard import audit_digest, audit_view
from dashboard.audit_view import CODE_BREAK, SITE_HEADERS, SITE_WIDTHS, site_rows, summary_md


def report_with(**site: object) -> dict:
    base = {"index": 0, "file": "gpt.py", "line": 12, "code": "x = pos.item()", "kind": "item", "count": 8,
            "per_step": 1.0, "in_decode_steps": 8}
    return {"schema": "syncscope.audit/1", "script": "gpt.py", "steps": 10, "decode_steps": 8, "reads": 8,
            "reads_per_decode_step": 1.0, "most_reads_in_a_decode_step": 1, "sites": [{**base, **site}]}


def test_a_site_row_shows_its_thread_its_callers_and_its_fix_with_the_pattern_on_one_line():
    report = report_with(thread="Thread-1 (generate)", callers=["gpt.py:40 forward", "gpt.py:90 generate"],
                         fix="keep a host integer", fix_code="pos = 0\nfor _ in range(n):\n    pos += 1")
    (row,) = site_rows(report)
    assert len(row) == len(SITE_HEADERS) == len(SITE_WIDTHS)
    called_from = row[SITE_HEADERS.index("called from")]
    assert called_from == "thread Thread-1 (generate): gpt.py:40 forward; from gpt.py:90 generate"
    assert row[-1] == f"keep a host integer. Pattern: pos = 0{CODE_BREAK}for _ in range(n):{CODE_BREAK}pos += 1"
    summary = summary_md(audit_digest.digest(report, {}))  # as the tab shows every audit: through its digest
    assert "on thread Thread\\-1 \\(generate\\)" in summary and "What to do: keep a host integer" in summary


def test_a_site_of_an_older_report_or_a_damaged_one_still_renders_clipped():
    (old,) = site_rows(report_with(fix="pin it"))
    assert old[SITE_HEADERS.index("called from")] == "–" and old[-1] == "pin it"
    huge = "x" * 5000
    damaged = report_with(thread=huge, callers=[huge] * 9, fix=huge, fix_code="\n".join([huge] * 20))
    (row,) = site_rows(audit_digest.digest(damaged, {}))  # as the tab shows every audit: through its digest
    assert all(len(str(cell)) < 2000 for cell in row)
    assert row[-1].count(CODE_BREAK) == 5  # at most six lines of a pattern
    assert audit_view.called_from({"callers": "not a list"}) == "–"
