"""core.documents.upgrades: each numbered step upgrades the committed old reports it was written for, once and in
order, into today's shape; a step applies to documents of its version or older, and a newer document is refused."""

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from core.documents import upgrades
from core.documents.bench_report import BenchReport
from core.documents.kinds import AUDIT, BENCH, LOAD, PAGE, PAGE_REPORT_SCHEMA, VERSIONS, ReportError, kind_of
from core.documents.page_report import EMPTY_PARTS
from core.documents.schema import load
from core.documents.upgrades import BENCH_STEPS, PAGE_RECORD_STEPS, STEPS, Step, apply_steps, upgrade, upgrade_report

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "lab" / "results"
SMOKE = "h200-2026-11-29/smoke-compiled.json.gz"  # the oldest bench report committed
KERNEL_TRIAL = "h200-2026-12-01/audit-ro-1b.json.gz"  # its kernel measurement was the kernel trial
INTERRUPTED = "h200-2026-12-01/interrupted-ro-1b.json.gz"  # its request's flag was named after the kernel trial
PAGE_DOWNLOAD = "h200-2026-11-29-c/live-dashboard-smollm2-135m-reduce-overhead.json.gz"  # the record inside the report
AUDIT_REPORT = "cpu-2026-12-01/audit-pipelined_loop.json"
LOAD_REPORT = "h200-2026-12-05-load/probe-sg-b16.json.gz"


def committed(name: str) -> dict[str, Any]:
    data = (RESULTS / name).read_bytes()
    return json.loads(gzip.decompress(data) if name.endswith(".gz") else data)


def changed_by(steps: tuple[Step, ...], document: dict[str, Any]) -> list[int]:
    """The numbers of the steps that change `document`, applied in order."""
    numbers = []
    for step in steps:
        after = step.change(document)
        if after != document:
            numbers.append(step.number)
        document = after
    return numbers


def assert_todays_bench_report(report: dict[str, Any]) -> None:
    assert BenchReport.__required_keys__ <= set(report)
    assert {"decode_products", "decode_layer", "step_commit", "tuning"} <= set(report["environment"])
    assert isinstance(report["effective"], dict) and isinstance(report["request"]["options"], dict)
    assert "kernel_trial" not in report and "no_kernel_trial" not in report["request"]
    assert not any("engine_warmup_ms" in entry and "setup_ms" not in entry for entry in report["warmup"].values())
    for name in report.get("kernel_measurement", {}):
        assert {"kernel_ms_per_step", "kernel_busy_of_timed_steps"} <= set(report["summary"].get(name, {}))


def test_the_steps_of_each_kind_are_numbered_in_order_each_a_named_function():
    for steps in (BENCH_STEPS, PAGE_RECORD_STEPS, *STEPS.values()):
        assert [step.number for step in steps] == list(range(1, len(steps) + 1))
        names = [step.change.__name__ for step in steps]
        assert len(set(names)) == len(names) and "<lambda>" not in names
    assert STEPS[BENCH] is BENCH_STEPS and set(STEPS) == {BENCH, AUDIT, LOAD}
    assert all(step.version <= VERSIONS[BENCH] for step in BENCH_STEPS)


@pytest.mark.parametrize(("name", "changing"), [
    (SMOKE, [2, 5, 7, 8, 9, 10]),  # the sections, the warm-up's setup, every environment field of since
    (KERNEL_TRIAL, [1, 6, 7, 8, 9, 10, 11]),  # the kernel trial's section and flag; the summary's kernel fields
    (INTERRUPTED, [6, 7, 8, 9, 10]),
])
def test_a_committed_old_bench_report_goes_through_its_steps_into_todays_shape(name, changing):
    old = committed(name)
    assert changed_by(BENCH_STEPS, old) == changing
    upgraded = upgrade(old)
    assert_todays_bench_report(upgraded)
    assert upgraded == load(RESULTS / name), "load() gives the upgraded document"
    assert old == committed(name), "the document given is left as it was"
    assert upgrade(upgraded) == upgraded, "a document in today's form stays as it is"


def test_an_old_page_download_becomes_a_page_report_and_its_record_todays():
    old = committed(PAGE_DOWNLOAD)
    assert kind_of(old) == BENCH and isinstance(old["dashboard"], dict)
    assert changed_by(PAGE_RECORD_STEPS, old["dashboard"]) == [2]  # its monitor said "kind" for "source"
    page = upgrade(old)
    assert kind_of(page) == PAGE and page["schema"] == PAGE_REPORT_SCHEMA and "dashboard" not in page["report"]
    assert_todays_bench_report(page["report"])
    assert set(EMPTY_PARTS) <= set(page["page"]) and "source" in page["page"]["monitor"]
    assert upgrade(page) == page


def test_upgrade_applies_each_step_once_and_in_the_order_of_their_numbers(monkeypatch):
    applied: list[tuple[str, int]] = []

    def recorded(steps: tuple[Step, ...], kind: str) -> tuple[Step, ...]:
        def change(step: Step):
            return lambda document: (applied.append((kind, step.number)), step.change(document))[1]
        return tuple(Step(step.number, step.version, change(step)) for step in steps)

    monkeypatch.setattr(upgrades, "BENCH_STEPS", recorded(BENCH_STEPS, BENCH))
    monkeypatch.setattr(upgrades, "PAGE_RECORD_STEPS", recorded(PAGE_RECORD_STEPS, PAGE))
    load(RESULTS / PAGE_DOWNLOAD)
    assert applied == [(BENCH, step.number) for step in BENCH_STEPS] + \
        [(PAGE, step.number) for step in PAGE_RECORD_STEPS]


def test_a_step_upgrades_documents_of_its_version_and_older_only():
    def marking(mark: str):
        return lambda document: {**document, "marks": [*document["marks"], mark]}

    steps = (Step(1, 1, marking("a")), Step(2, 2, marking("b")), Step(3, 1, marking("c")))
    assert apply_steps(steps, {"marks": []}, 1)["marks"] == ["a", "b", "c"]
    assert apply_steps(steps, {"marks": []}, 2)["marks"] == ["b"]
    assert apply_steps(steps, {"marks": []}, 3)["marks"] == []


def test_a_document_newer_than_this_code_gets_no_step_and_is_refused():
    newer = {**committed(SMOKE), "schema": "syncscope.bench/2"}
    assert upgrade_report(newer) == newer
    with pytest.raises(ReportError, match=r"version 2 .*newer than this syncscope reads") as refused:
        load(json.dumps(newer))
    assert refused.value.found == BENCH
    wrapped = {"schema": PAGE_REPORT_SCHEMA, "report": newer, "page": None}
    with pytest.raises(ReportError, match="newer than this syncscope reads"):
        load(json.dumps(wrapped))


def test_what_no_committed_report_needs_is_filled_in_for_a_hand_made_one():
    """The steps no committed report goes through: an effective section that an earlier upgrade wrote as null (and
    the page saved so), a request without options, a record's null parts, an audit or load report without its
    environment."""
    report = upgrade_report({**committed(SMOKE), "effective": None, "request": {"prompt": "x"}})
    assert report["effective"] == {} and report["request"] == {"prompt": "x", "options": {}}
    record = upgrades.upgrade_page({"t_end": 1.0, "monitor": None, "series": None})
    assert record == {"t_end": 1.0, **EMPTY_PARTS}
    for name in (AUDIT_REPORT, LOAD_REPORT):
        document = committed(name)
        without = {key: value for key, value in document.items() if key != "environment"}
        assert changed_by(STEPS[kind_of(document)], without) == [1]
        assert load(json.dumps(without))["environment"] == {}
        assert upgrade(copy.deepcopy(document)) == document, "one that has it is left as it is"
