"""dashboard.views.audit_view: an audit report as the Your loop tab shows it (plain data in, text out)."""

from __future__ import annotations

import re

from core.audit.report import summary_text
from dashboard.service import audit_digest
from dashboard.views import audit_view
from dashboard.views.audit_view import ROWS_AT_ONCE, SITE_COLUMNS, sites_html, summary_md


def report_with(*sites: dict, **top: object) -> dict:
    base = {"index": 0, "file": "gpt.py", "line": 12, "code": "x = pos.item()", "kind": "item", "count": 8,
            "per_step": 1.0, "in_decode_steps": 8}
    return {"schema": "syncscope.audit/1", "script": "gpt.py", "steps": 10, "decode_steps": 8, "reads": 8,
            "reads_per_decode_step": 1.0, "most_reads_in_a_decode_step": 1,
            "sites": [{**base, "index": i, **site} for i, site in enumerate(sites or [{}])], **top}


def summaries(page: str) -> list[str]:
    return re.findall(r"<summary>(.*?)</summary>", page, flags=re.S)


def test_each_site_is_one_short_row_and_its_fix_and_pattern_open_from_it():
    report = report_with({"thread": "Thread-1 (generate)", "callers": ["gpt.py:40 forward", "gpt.py:90 generate"],
                          "fix": "keep a host integer", "fix_code": "pos = 0\nfor _ in range(n):\n    pos += 1",
                          "host_blocked_ms_per_step": 0.863, "device_idle_after_ms_per_step": 0.59})
    page = sites_html(report)
    (row,) = summaries(page)
    cells = re.findall(r"<span title=\"[^\"]*\">(.*?)</span>", row)
    assert cells == ["1.00", "item", "gpt.py:12", "x = pos.item()", "863 µs / 590 µs"]
    assert len(cells) == len(SITE_COLUMNS) and "keep a host integer" not in row, "the row holds no fix"
    opened = page.split("</summary>", 1)[1]
    assert "What to do:</b> keep a host integer." in opened
    assert "<pre><code>pos = 0\nfor _ in range(n):\n    pos += 1</code></pre>" in opened, "indented as written"
    assert "thread Thread-1 (generate): gpt.py:40 forward; from gpt.py:90 generate" in opened
    summary = summary_md(audit_digest.digest(report, {}))  # as the tab shows every audit: through its digest
    assert "on thread Thread\\-1 \\(generate\\)" in summary and "What to do: keep a host integer" in summary


def test_every_text_from_the_file_is_escaped_and_a_long_one_clipped():
    huge = "<img src=x onerror=alert(1)>" * 400
    damaged = report_with({"thread": huge, "callers": [huge] * 9, "fix": huge, "fix_code": "\n".join([huge] * 20),
                           "file": huge, "code": huge, "kind": huge})
    page = sites_html(audit_digest.digest(damaged, {}))  # as the tab shows every audit: through its digest
    assert "<img" not in page and "&lt;img" in page
    assert len(page) < 60_000 and page.count("</code></pre>") == 1
    assert audit_view.called_from({"callers": "not a list"}) == "–"


def test_a_site_of_an_older_report_or_the_cpu_has_no_cost_and_still_opens_onto_its_fix():
    page = sites_html(report_with({"fix": "pin it"}))
    assert summaries(page)[0].endswith("<span title=\"–\">–</span>") and "What to do:</b> pin it." in page
    assert "No line of the program waited on the device" in sites_html({"sites": []})


def test_many_sites_list_the_first_and_fold_the_rest():
    report = report_with(*({"line": line, "per_step": 0.1} for line in range(ROWS_AT_ONCE + 5)))
    page = sites_html(report)
    assert len(summaries(page)) == ROWS_AT_ONCE + 5 + 1, "every site, and one expander for the rest"
    assert "5 more sites, read less often" in page


def test_tied_sites_are_named_as_a_tie():
    report = report_with({"line": 3, "kind": "item"}, {"line": 5, "kind": "h2d-copy"}, {"line": 7, "kind": "h2d-copy"},
                         {"line": 9, "per_step": 0.1}, reads_per_decode_step=3.1, copies_per_decode_step=2.0)
    summary = summary_md(audit_digest.digest(report, {}))
    assert ("Three sites tie at 1.00 a step: item at gpt\\.py:3, h2d\\-copy at gpt\\.py:5 and h2d\\-copy at "
            "gpt\\.py:7; each one's fix is in its row below.") in summary
    assert "most frequent" not in summary
    assert "**1.10 reads of device values and 2 host-to-device copies per decode step**" in summary


def test_copies_are_counted_as_copies_also_in_a_report_written_before_it_counted_them():
    old = report_with({"line": 3, "kind": "item"}, {"line": 5, "kind": "h2d-copy"}, {"line": 7, "kind": "h2d-copy"},
                      reads_per_decode_step=3.0)
    lengths = {"sites": 3}
    summary = summary_md(audit_digest.digest(old, lengths))
    assert "**1 read of a device value and 2 host-to-device copies per decode step**" in summary
    mixed = report_with({"kind": "item/h2d-copy"}, reads_per_decode_step=1.0)
    assert "**1 read of a device value or blocking copy per decode step**" in \
        summary_md(audit_digest.digest(mixed, {"sites": 1}))


def test_a_program_without_steps_says_so_plainly():
    report = {**report_with(), "steps": 0, "step_module": None, "reads_per_decode_step": None}
    summary = summary_md(audit_digest.digest(report, {}))
    assert "no steps found" in summary and "none found" not in summary and "0 steps" not in summary


def test_the_page_lists_a_batched_loops_sites_with_the_terminals_numbers_and_words():
    """The issue's batched loop: two sites every decode step, a finished row's read in 3 of 19, and a read before
    the steps."""
    report = report_with({"line": 25, "in_decode_steps": 38, "per_step": 2.0},
                         {"line": 26, "kind": "h2d-copy", "in_decode_steps": 19, "per_step": 1.0},
                         {"line": 30, "kind": "tolist", "in_decode_steps": 3, "per_step": 3 / 19},
                         {"line": 9, "kind": "h2d-copy", "in_decode_steps": 0, "per_step": 0.0},
                         steps=21, decode_steps=19, reads_per_decode_step=60 / 19, copies_per_decode_step=1.0)
    digest = audit_digest.digest(report, {})
    page = sites_html(digest)
    page_rates = [re.findall(r"<span title=\"[^\"]*\">(.*?)</span>", row)[0] for row in summaries(page)]
    terminal = " ".join(summary_text(report).split())
    assert page_rates[:3] == re.findall(r"([\d.]+)/step ", terminal) == ["2.00", "1.00", "0.16"]
    assert "2.16 reads of device values and 1 host-to-device copy per decode step" in summary_md(digest)
    assert "2.16 reads of device values and 1 host-to-device copy per decode step" in terminal
    opened = page.split("</details>")
    assert "<b>Read:</b> 3 reads in 19 decode steps." in opened[2] and "(3 reads in 19 decode steps)" in terminal
    assert "<b>Read:</b> only in setup, the first or last step." in opened[3]
    assert "and 1 site read only in setup, the first or last step, not counted above" in terminal
