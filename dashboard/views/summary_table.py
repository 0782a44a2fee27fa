"""A report's numbers as the page's table and headline show them: one row per contestant, and the few facts a run
is about. Plain data in (a report loaded by core.documents.schema, or the page's saved document), rows out."""

from __future__ import annotations

from typing import Any

from core.documents.bench_report import BenchReport
from core.measure.identity import sameness
from core.report.explain import contestant_waits
from core.request.options import LOOPS, is_int
from dashboard.service.page_record import PageRecord, SavedReport, split_report
from dashboard.service.report_numbers import clock_of, micro, percent, rounded

# The verdict's evidence first (rate, its spread, same tokens), so it is in view without scrolling sideways.
# The kernel share is of the timed trials' step (core.documents.bench_report.kernel_share_of_timed_steps), as the CLI's
# table and the README's say it: the kernel measurement's own steps are slower (tracing costs the host).
SUMMARY_HEADERS = ("contestant", "decode tok/s", "decode spread %", "same tokens", "host wait µs/step",
                   "device idle µs/step", "device reads/step (audit)", "kernel ms/step (kernel measurement)",
                   "kernel % of the timed step", "NVML util %", "end-to-end tok/s", "TTFT ms", "ms/tok p50",
                   "ms/tok p95", "compile ms")


def summary_rows(report: dict[str, Any] | SavedReport, page: PageRecord | None = None) -> list[list[Any]]:
    """One row per contestant, in SUMMARY_HEADERS order; None where a number does not exist or means nothing."""
    saved = split_report(report)
    report, page = saved.report, page or saved.page
    nvml = page.nvml_by_contestant if page else {}
    rows = []
    for name, s in report["summary"].items():
        warm = report["warmup"].get(name, {})
        waits = contestant_waits(report, name)
        rows.append([name, rounded(s.get("decode_tokens_per_s"), 1), rounded(percent(_spread(report, name, s)), 1),
                     sameness(report, name), rounded(micro(waits["host_wait_ms"]), 0),
                     rounded(micro(waits["device_idle_ms"]), 0), rounded(s.get("reads_per_step"), 2),
                     rounded(s.get("kernel_ms_per_step"), 3), rounded(percent(s.get("kernel_busy_of_timed_steps")), 1),
                     rounded(nvml.get(name, {}).get("util_pct"), 0), rounded(s.get("tokens_per_s"), 1),
                     rounded(s.get("ttft_ms"), 1), rounded(s.get("ms_per_token_p50"), 3),
                     rounded(s.get("ms_per_token_p95"), 3), rounded(warm.get("compile_ms") or None, 0)])
    return rows


def _spread(report: BenchReport, name: str, summary: dict[str, Any]) -> float | None:
    """The trial spread; None with one trial, where older reports wrote 0 for a spread that cannot be known."""
    trials = summary.get("trials")
    if not is_int(trials):
        trials = sum(1 for r in report["runs"] if r.get("contestant") == name)
    if trials < 2:
        return None
    return summary.get("decode_spread") if summary.get("decode_spread") is not None else summary.get("spread")


def headline(report: BenchReport) -> dict[str, Any]:
    """The few facts a run is about: the decode-phase speedup and whether it is beyond noise, identical outputs,
    and which clock measured the steps."""
    return {"verdict": report["verdict"] or {}, "identical": bool(report["all_identical"]),
            "self_consistent": all(report["self_consistent"].values()), "clock": clock_of(report),
            "end_to_end": report["ratios"].get("pipelined/naive"),
            "ttft": {n: report["summary"].get(n, {}).get("ttft_ms") for n in LOOPS}}
