"""dashboard.views.report_text: a report, a run's status and a pane's rate as the page's Markdown, text shown as
text."""

from __future__ import annotations

from dashboard.views.report_text import cell, headline_md, plain, rate_md, status_md, table_rows
from tests.test_dashboard_client import EVIL, text_of


def test_user_text_is_escaped_for_markdown():
    shown_text = plain(EVIL)
    assert "<" not in shown_text and ">" not in shown_text
    assert "\\*\\*bold\\*\\*" in shown_text and "https\\://evil\\.example" in shown_text
    assert text_of(shown_text) == EVIL  # the characters survive; only their meaning goes


def test_plain_text_is_one_line():
    assert plain("two\nlines\r\nand\ttabs") == "two lines and tabs"


def verdict_report(call: str = "faster", ratio: float = 1.33) -> dict:
    summary = {name: {"tokens_per_s": 100.0, "decode_tokens_per_s": rate, "trials": 3, "ttft_ms": 5.0}
               for name, rate in (("naive", 100.0), ("pipelined", 100.0 * ratio))}
    return {"schema": "syncscope.bench/1", "summary": summary, "runs": [], "all_identical": True,
            "self_consistent": {"naive": True, "pipelined": True}, "identical": {"naive": True, "pipelined": True},
            "ratios": {"pipelined/naive": ratio}, "model": {"spec": "m"},
            "verdict": {"contender": "pipelined", "baseline": "naive", "metric": "decode_tokens_per_s",
                        "ratio": ratio, "trials": 3, "call": call, "interval": [1.2, 1.4], "confidence": 0.95,
                        "noise": 0.01}}


def test_the_headline_leads_with_the_verdict_then_the_facts_behind_it():
    text = text_of(headline_md(verdict_report()))
    first, second = text.split("\n")[:2]
    assert first.startswith("pipelined/naive = 1.330x (decode-phase tokens/s): pipelined is faster")
    assert "end to end 1.330×" in second and "TTFT 5.0 / 5.0 ms" in second and "outputs identical: yes" in second


def test_a_report_without_a_ratio_gets_a_dash_not_a_made_up_verdict():
    report = verdict_report()
    report["verdict"] = None
    assert text_of(headline_md(report)).startswith("pipelined / naive: –")


def test_missing_numbers_are_dashes_in_the_table():
    assert cell(None) == "–" and cell(0) == 0
    rows = table_rows(verdict_report())
    assert [row[0] for row in rows] == ["naive", "pipelined"] and "–" in rows[0]


def test_a_pane_says_what_its_number_is():
    assert text_of(rate_md("naive", {"tokens_per_s": 1234.5, "live": True})) == "naive · 1,234.5 tok/s (live)"
    assert text_of(rate_md("naive", {"tokens_per_s": 99.0})) == "naive · 99.0 tok/s (decode, median)"
    assert "warm-up (untimed" in rate_md("naive", {"warmup": True, "live": True})
    assert "showing row 1 of 4" in rate_md("naive", {"tokens_per_s": None}, batch=4)


def test_the_status_line_shows_notices_as_text():
    text = status_md({"status": "Running", "notices": ["<b>x</b>"]})
    assert text.startswith("**Running**") and "<b>" not in text and "Note:" in text
