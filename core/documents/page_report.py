"""The page report (the page's download of a run, dashboard.service.page_record): `{"schema", "report": <bench
report>, "page": <the page's record> or null}`. The page's downloads from before kept that record inside the report,
under "dashboard" (core.documents.upgrades makes them page reports)."""

from typing import Any, TypedDict

from core.documents.bench_report import BenchReport
from core.documents.fields import are_sentences, expect, expect_numbers, is_number
from core.phases import phase_named


class PageReport(TypedDict):
    schema: str
    report: BenchReport
    page: dict[str, Any] | None  # dashboard.service.page_record.PageRecord.to_json(), or None


# The page record's parts, as the page writes each when there is nothing in it (core.documents.upgrades fills them in)
EMPTY_PARTS: dict[str, Any] = {"series": {}, "spans": [], "notices": [], "nvml_by_contestant": {}}
SAMPLE_NUMBERS = ("t", "util_pct", "mem_used_mb", "power_w", "sm_clock_mhz")


def check_page(recorded: Any, where: str = "page") -> None:
    """The page's record (a page report's "page"; `where` names it in the message); None is no record."""
    if recorded is None:
        return
    expect(isinstance(recorded, dict), f"its {where!r} section is not an object")
    expect_numbers(recorded, ("t_end",), where)
    spans = recorded.get("spans", [])
    expect(isinstance(spans, list), "the recorded spans are not a list")
    for index, span in enumerate(spans):
        expect(isinstance(span, dict) and is_number(span.get("t0")) and isinstance(span.get("contestant"), str)
               and phase_named(span.get("phase")) is not None, "a recorded span is malformed")
        expect_numbers(span, ("t1",), f"{where}.spans[{index}]")
    series = recorded.get("series", {})
    expect(isinstance(series, dict) and all(isinstance(s, dict) and isinstance(s.get("t"), list)
                                            for s in series.values()), "a recorded tokens/s series is malformed")
    for name, line in series.items():
        expect_numbers(line, ("t", "tokens_per_s"), f"{where}.series.{name}")
    monitor = recorded.get("monitor", {})
    samples = monitor.get("samples", []) if isinstance(monitor, dict) else None
    expect(isinstance(samples, list) and all(isinstance(x, dict) and is_number(x.get("t")) for x in samples),
           "the recorded device samples are malformed")
    for index, sample in enumerate(samples):
        expect_numbers(sample, SAMPLE_NUMBERS, f"{where}.monitor.samples[{index}]")
    expect(are_sentences(recorded.get("notices", [])), f"its '{where}.notices' are not a list of sentences")
    nvml = recorded.get("nvml_by_contestant", {})
    expect(isinstance(nvml, dict) and all(isinstance(v, dict) for v in nvml.values()),
           f"its '{where}.nvml_by_contestant' section is malformed")
    for name, means in nvml.items():
        expect_numbers(means, (*SAMPLE_NUMBERS[1:], "samples"), f"{where}.nvml_by_contestant.{name}")
