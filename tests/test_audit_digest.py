"""dashboard.service.audit_digest and dashboard.edge.audit_process (issue 42, items 1 and 5): an uploaded audit is read
bounded (its chart drawn from at most a fixed number of steps and reads, and the page says so), every field is clipped
and escaped, and what is wrong with a file is one line in words. In-process, on files made by
benchmarks/hostile_audits.py; the served app's numbers are benchmarks/hostile_upload.py's."""

from __future__ import annotations

import gzip
import json
import re

import gradio as gr
import pytest

from benchmarks.hostile_audits import (
    EVIL,
    NUMBER_FIELDS,
    field_audits,
    huge,
    long_audit_bytes,
    nested_audit,
    small_audit,
)
from dashboard.edge import audit_process
from dashboard.service import audit_digest
from dashboard.service.audit_digest import MAX_SHOWN_READS, MAX_SHOWN_STEPS, MAX_SITES, digest_bytes
from dashboard.views import audit_view
from tests.test_dashboard_client import text_of
from tests.test_ui import QuietRunner, quiet_page

LIMIT = 100 * 2**20
PYTHON_WORDS = re.compile(r"Error\b|Exception|Traceback|object of type|format code|NoneType|\bdict\b|\bstr\b")


def hovers(figure) -> list[str]:
    return [trace.hovertemplate or "" for trace in figure.data] + [str(t) for trace in figure.data
                                                                    for t in (trace.text or [])]


def test_a_long_audit_is_drawn_from_its_first_whole_steps_and_the_page_says_so():
    report = digest_bytes(long_audit_bytes(reads=60_000, reads_per_step=10), LIMIT)
    shown = report["shown"]
    assert (shown["steps"], shown["reads"]) == (6_000, 60_000), "the whole audit's counts"
    assert shown["shown_reads"] == len(report["events"]) <= MAX_SHOWN_READS
    assert shown["shown_steps"] == len(report["step_starts_ms"]) == len(report["step_ends_ms"]) <= MAX_SHOWN_STEPS
    assert {e["step"] for e in report["events"]} == set(range(shown["shown_steps"])), "whole steps, each with all"
    assert len(report["events"]) == 10 * shown["shown_steps"]
    summary = text_of(audit_view.summary_md(report))
    assert "10 reads of device values per decode step" in summary, "the sentences are the whole audit's"
    assert (f"the chart draws the first {shown['shown_steps']:,} of its 6,000 steps and the "
            f"{shown['shown_reads']:,} reads in them (of 60,000)") in summary, summary
    figure = audit_view.audit_figure(report)
    assert len(figure.to_json()) < 400_000 and sum(len(h) for h in hovers(figure)) < 2_000


def test_a_short_audit_is_shown_whole_and_without_a_note():
    audit = small_audit(40, 3)
    audit["step_ends_ms"][-1] = None  # a step whose end was not seen
    report = digest_bytes(json.dumps(audit).encode(), LIMIT)
    assert report["shown"] == {"steps": 40, "shown_steps": 40, "reads": 120, "shown_reads": 120, "sites": 1,
                               "shown_sites": 1}
    assert audit_view.shown_note(report) == "" and "the chart draws" not in audit_view.summary_md(report)
    assert audit_view.audit_figure(report).data, "a step without its end is drawn too"


def test_the_table_lists_at_most_max_sites_and_says_how_many_there_are():
    audit = small_audit()
    audit["sites"] = [{**audit["sites"][0], "index": i, "line": i} for i in range(MAX_SITES + 50)]
    report = digest_bytes(json.dumps(audit).encode(), LIMIT)
    assert audit_view.sites_html(report).count("<details><summary>") == MAX_SITES
    assert f"the list shows the {MAX_SITES} most read of its {MAX_SITES + 50} sites" in \
        text_of(audit_view.summary_md(report))


def test_a_wrong_read_is_named_by_its_index_in_the_file():
    audit = small_audit(10)
    audit["events"] = [{"step": 1, "t_ms": 1.0, "site": 0}, {"step": MAX_SHOWN_STEPS, "t_ms": 2.0, "site": 0},
                       {"step": None, "t_ms": 3.0, "site": 0}, "late"]
    report = digest_bytes(json.dumps(audit).encode(), LIMIT)
    assert [e["t_ms"] for e in report["events"]] == [1.0], "none kept after the first one left out"
    audit["events"].insert(1, "early")
    with pytest.raises(ValueError, match=r"events\[1\] is the text \"early\", not an object"):
        digest_bytes(json.dumps(audit).encode(), LIMIT)


def test_a_step_with_more_reads_than_the_chart_draws_is_drawn_alone_and_capped():
    report = digest_bytes(long_audit_bytes(reads=MAX_SHOWN_READS * 3, reads_per_step=MAX_SHOWN_READS * 3), LIMIT)
    assert report["shown"]["shown_steps"] == 1 and len(report["events"]) == MAX_SHOWN_READS


def test_a_10_mb_text_field_anywhere_is_shown_clipped_and_escaped_in_every_output():
    page = quiet_page().your_loop
    for name, data in field_audits(chars=10**6).items():
        if name in NUMBER_FIELDS or name.startswith("events"):
            continue
        out = {key: page.audit_upload(data)[page.components[key]] for key in ("status", "summary", "sites", "plot")}
        markdown = out["status"] + out["summary"]
        assert "<img" not in markdown and "<a " not in markdown, name
        assert len(out["summary"]) < 3_000 and len(out["status"]) < 500, (name, len(out["summary"]))
        shown = text_of(markdown)
        assert huge(301) not in shown and "(1,000,000 characters in all)" in shown + str(out["sites"]), name
        assert "<img" not in out["sites"] and all(len(site) < 8_000 for site in out["sites"].split("<details>")), name
        for hover in hovers(out["plot"]):
            assert "<img" not in hover and len(hover) < 2_000, name


def test_a_wrong_typed_field_is_refused_in_one_line_naming_it_and_what_was_expected():
    page = quiet_page().your_loop
    expected = {"most_reads_in_a_decode_step": "a whole number", "lagged_waits": "a whole number",
                "reads_per_decode_step": "a number", "copies_per_decode_step": "a number",
                "kernel_busy_fraction": "a number",
                "events[0].step": "a whole number", "events[0].site": "a whole number", "events[0].t_ms": "a number"}
    files = field_audits(chars=10**6)
    for name, wanted in expected.items():
        status = page.audit_upload(files[name])[page.components["status"]]
        shown = text_of(status)
        assert shown.startswith(f"Cannot open the file: the audit report is incomplete or damaged: {name} is the "
                                f"text \"{EVIL[:20]}"), shown
        assert shown.endswith(f"(1,000,000 characters in all)\", not {wanted}"), shown
        assert "\n" not in status and len(status) < 500 and "<img" not in status
        assert not PYTHON_WORDS.search(shown), shown


@pytest.mark.parametrize(("change", "said"), [
    ({"steps": "12"}, "steps is the text \"12\", not a whole number"),
    ({"reads_per_decode_step": True}, "reads_per_decode_step is true, not a number"),
    ({"sites": {"a": 1}}, "sites is an object, not a list"),
    ({"sites": [7]}, "sites[0] is 7, not an object"),
    ({"step_starts_ms": [0.0, "soon"]}, "step_starts_ms[1] is the text \"soon\", not a number"),
    ({"environment": [1, 2]}, "environment is a list (2 items), not an object"),
    ({"script": ["a", ["b"]]}, "script is a list (2 items), not text"),
])
def test_each_wrong_field_says_which_and_what_was_expected(change, said):
    with pytest.raises(ValueError) as caught:
        digest_bytes(json.dumps({**small_audit(), **change}).encode(), LIMIT)
    assert str(caught.value) == f"the audit report is incomplete or damaged: {said}"


def test_a_file_that_nests_deeply_or_is_not_json_is_one_line_in_words():
    page = quiet_page().your_loop
    for data, said in ((nested_audit(), "the file nests too deeply to be an audit report"),
                       (b'{"schema": "syncscope.audit/1", "steps": }', "the file is not valid JSON (Expecting value "
                                                                        "at line 1)"),
                       (b'{"schema": "syncscope.audit/1"} {}', "not valid JSON (Extra data at line 1)"),
                       (b"[1, 2, 3]", "this JSON is not an audit report"),
                       (b"\x1f\x8b" + b"not gzip at all", "it is not a readable gzip file (its compressed data is "
                                                        "damaged)")):
        shown = text_of(page.audit_upload(data)[page.components["status"]])
        assert said in shown and not PYTHON_WORDS.search(shown), shown


def test_a_number_of_more_digits_than_python_reads_and_a_lone_surrogate_are_handled_in_words():
    many = json.dumps(small_audit())[:-1] + ', "steps": ' + "9" * 5_000 + "}"
    with pytest.raises(ValueError, match="the file holds a number of more than 4,300 digits, which no audit report"):
        digest_bytes(many.encode(), LIMIT)
    report = digest_bytes(json.dumps({**small_audit(), "script": "loop\ud800.py"}).encode(), LIMIT)
    assert report["script"] == "loop?.py"
    json.dumps(audit_view.summary_md(report), ensure_ascii=False).encode("utf-8")  # the answer can be sent


def test_an_audit_that_cannot_be_drawn_says_so_in_words_without_python_names(monkeypatch):
    def broken(report):
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")

    monkeypatch.setattr(audit_view, "audit_figure", broken)
    page = quiet_page().your_loop
    shown = text_of(page.audit_upload(json.dumps(small_audit()).encode())[page.components["status"]])
    assert shown == f"Cannot show the file: {audit_view_cannot_show()}."
    assert "TypeError" not in shown and "operand" not in shown


def audit_view_cannot_show() -> str:
    from dashboard.ui.tabs.your_loop import CANNOT_SHOW

    return CANNOT_SHOW


def test_a_large_or_gzipped_upload_is_read_in_a_child_and_comes_back_the_same(tmp_path):
    data = long_audit_bytes(reads=40_000, reads_per_step=4)
    assert len(data) > audit_process.IN_PROCESS_BYTES
    path = tmp_path / "audit.json.gz"
    path.write_bytes(gzip.compress(data))
    here = digest_bytes(data, LIMIT)
    assert audit_process.read_audit(path, LIMIT) == here
    assert audit_process.read_audit(data, LIMIT) == here


@pytest.mark.slow  # about 6 s: a 30 MB object parsed twice in a child
def test_a_file_that_needs_more_memory_than_a_reader_may_use_is_refused_in_one_line(tmp_path, monkeypatch):
    wide = "{" + ",".join(f'"k{i}":{i}' for i in range(1_500_000)) + "}"  # an object is parsed whole
    path = tmp_path / "audit.json"
    path.write_text(json.dumps(small_audit())[:-1] + f', "environment": {wide}}}')
    monkeypatch.setattr(audit_process, "CHILD_MEMORY_BYTES", 120 * 2**20)
    with pytest.raises(ValueError) as caught:
        audit_process.read_audit(path, LIMIT)
    assert str(caught.value) == ("reading it needed more than the 0.1 GiB of memory one upload may use here, which no "
                                 "audit written by python -m core.audit needs")
    monkeypatch.setattr(audit_process, "CHILD_MEMORY_BYTES", 2**30)
    assert audit_process.read_audit(path, LIMIT)["steps"] == 10


def test_a_file_over_the_limit_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "audit.json"
    path.write_bytes(b" " * 3000)
    with pytest.raises(ValueError, match=r"the file is 0\.00 MiB; reports here are limited to 2,000 bytes"):
        audit_process.read_audit(path, 2000)


def test_the_audit_endpoints_read_one_upload_at_a_time_and_hand_over_a_path():
    from dashboard.ui.page import PageConfig, PageContext
    from dashboard.ui.tabs.your_loop import AUDITS_AT_ONCE, YourLoopTab
    from dashboard.views.banner import ServerBanner

    runner = QuietRunner()
    with gr.Blocks() as demo:
        page = PageContext(runner, PageConfig(defaults={}, replay_files={}, audit_files={"a.json": "a.json"}),
                           ServerBanner(runner))
        tab = YourLoopTab.build(page)
    endpoints = {fn.api_name: fn for fn in demo.fns.values() if fn.api_name in ("audit", "audit_bundled")}
    assert AUDITS_AT_ONCE == 1 and set(endpoints) == {"audit", "audit_bundled"}
    assert {(fn.concurrency_limit, fn.concurrency_id) for fn in endpoints.values()} == {(1, "audits")}
    assert tab.components["upload"].type == "filepath", "the server never reads an upload's bytes itself"


def test_audit_digest_imports_neither_gradio_nor_numpy():
    import subprocess
    import sys

    code = ("import sys, dashboard.service.audit_digest, dashboard.edge.audit_process; "
            "print(sorted(m for m in ('gradio', 'numpy', 'torch', 'plotly') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", "the child that reads an upload starts in a fraction of a second"
    assert audit_digest.HELD_CHARS > audit_digest.SHOWN_FIELD_CHARS
