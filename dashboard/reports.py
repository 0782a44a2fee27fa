"""Reports as the page shows them: the summary table, the headline, run history rows, and replaying a saved report.

A *report* is the JSON of `python -m core.bench --json`; the engine writes it and nothing here changes it. What the
page itself saw of a run (its live series, the device samples, the form's notices, NVML means) is a PageRecord,
kept next to the report. The page's download holds both, each under its own key (`page_report`):

    {"schema": "syncscope.page-report/1", "report": <the report>, "page": <the PageRecord> or null}

Replay opens that, a bare report, and the page's downloads from before (a report with a "dashboard" section).
Everything here reads plain data; nothing imports torch or gradio.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from core.explain import contestant_waits
from core.measure.identity import sameness
from core.options import HF, LOOPS, NO_CHECK, RUN_OPTIONS, adapt_to_device, is_int
from core.phases import phase_named
from dashboard.limits import clip

_NAME = re.compile(r"[\w.+-]{1,64}")
# The largest report Replay opens (and the page's upload limit). A 4096-token, 20-trial run of 5 contestants with
# every per-step list and the dashboard's section is about 65 MiB (tests/test_reports.py builds one); the rest is
# room for per-step fields yet to come.
MAX_REPORT_BYTES = 100 * 2**20
RATE_WINDOW = 8  # steps per point of a tokens/s curve, live (dashboard.live_view) or rebuilt from a report
BENCH_SCHEMA = "syncscope.bench/"  # the prefix of core.bench's report schema
PAGE_REPORT_SCHEMA = "syncscope.page-report/1"
OLD_PAGE_SECTION = "dashboard"  # where the page's downloads up to 2026-11 kept its record, inside the report

# The verdict's evidence first (rate, its spread, same tokens), so it is in view without scrolling sideways.
SUMMARY_HEADERS = ("contestant", "decode tok/s", "decode spread %", "same tokens", "host wait µs/step",
                   "device idle µs/step", "device reads/step (audit)", "kernel ms/step (kernel trial)",
                   "kernel-busy % (kernel trial)", "NVML util %", "end-to-end tok/s", "TTFT ms", "ms/tok p50",
                   "ms/tok p95", "compile ms")


# ------------------------------------------------------------------------------------- the page's own record

@dataclass(frozen=True)
class PageRecord:
    """What the page saw of one run, that core.bench's report cannot hold: the live series (seconds since the job
    started), the device samples over it, the notices its settings gave, and each contestant's NVML means."""

    t_end: float | None
    series: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)
    spans: list[dict[str, Any]] = field(default_factory=list)
    monitor: dict[str, Any] = field(default_factory=lambda: _no_monitor())
    notices: tuple[str, ...] = ()
    nvml_by_contestant: dict[str, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def of_run(cls, live: dict[str, Any], notices: list[str] | tuple[str, ...]) -> PageRecord:
        """The record of a finished run, from its final live series (dashboard.live_view)."""
        monitor = live.get("monitor") or _no_monitor()
        spans = live.get("spans", [])
        # On the CPU fallback the samples are the engine's CPU %, not NVML's: the NVML column gets a dash.
        nvml = nvml_means(monitor.get("samples", []), spans) if monitor.get("source") == "nvml" else {}
        return cls(t_end=live.get("t_end"), series=live.get("series", {}), spans=spans, monitor=monitor,
                   notices=tuple(notices), nvml_by_contestant=nvml)

    def live_series(self) -> dict[str, Any]:
        """The chart data (dashboard.charts' live series)."""
        return {"t_end": self.t_end, "series": self.series, "spans": self.spans, "monitor": self.monitor}

    def to_json(self) -> dict[str, Any]:
        return {**self.live_series(), "notices": list(self.notices), "nvml_by_contestant": self.nvml_by_contestant}

    @classmethod
    def from_json(cls, section: dict[str, Any]) -> PageRecord:
        """A record from its JSON: the "page" of a page report, or an old report's "dashboard" section."""
        monitor = dict(section.get("monitor") or _no_monitor())
        if "source" not in monitor and "kind" in monitor:  # the old name of `source`
            monitor["source"] = monitor.pop("kind")
        return cls(t_end=section.get("t_end"), series=section.get("series") or {}, spans=section.get("spans") or [],
                   monitor=monitor, notices=tuple(section.get("notices") or ()),
                   nvml_by_contestant=section.get("nvml_by_contestant") or {})


@dataclass(frozen=True)
class SavedReport:
    """A saved document as its two parts: core.bench's report, and the page's record (None when the page did not
    make the file)."""

    report: dict[str, Any]
    page: PageRecord | None = None


def page_report(report: dict[str, Any], page: PageRecord | None) -> dict[str, Any]:
    """The document the page offers for download: the report (without the server's host name) and the page's
    record, each under its own key."""
    return {"schema": PAGE_REPORT_SCHEMA, "report": public_report(report),
            "page": page.to_json() if page is not None else None}


def split_report(document: dict[str, Any] | SavedReport) -> SavedReport:
    """Any document this project writes (a report, a page report, an old page download) as its two parts."""
    if isinstance(document, SavedReport):
        return document
    if document.get("schema") == PAGE_REPORT_SCHEMA:
        page = document.get("page")
        return SavedReport(document.get("report") or {}, PageRecord.from_json(page) if isinstance(page, dict)
                           else None)
    old = document.get(OLD_PAGE_SECTION)
    if isinstance(old, dict):
        report = {k: v for k, v in document.items() if k != OLD_PAGE_SECTION}
        return SavedReport(report, PageRecord.from_json(old))
    return SavedReport(document)


def report_notices(report: dict[str, Any] | SavedReport, page: PageRecord | None = None) -> list[str]:
    """The notices a run's headline lists: the page's (what its settings became), then each run's, once each."""
    saved = split_report(report)
    page = page or saved.page
    from_runs = (n for run in saved.report.get("runs", []) for n in run.get("notices", []))
    return list(dict.fromkeys([*(page.notices if page else ()), *from_runs]))


# ------------------------------------------------------------------------------------------------ summary

def summary_rows(report: dict[str, Any] | SavedReport, page: PageRecord | None = None) -> list[list[Any]]:
    """One row per contestant, in SUMMARY_HEADERS order; None where a number does not exist or means nothing."""
    saved = split_report(report)
    report, page = saved.report, page or saved.page
    nvml = page.nvml_by_contestant if page else {}
    rows = []
    for name, s in report.get("summary", {}).items():
        warm = report.get("warmup", {}).get(name, {})
        waits = contestant_waits(report, name)
        rows.append([name, _r(s.get("decode_tokens_per_s"), 1), _r(_pct(_spread(report, name, s)), 1),
                     sameness(report, name), _r(_us(waits["host_wait_ms"]), 0), _r(_us(waits["device_idle_ms"]), 0),
                     _r(s.get("reads_per_step"), 2), _r(s.get("kernel_ms_per_step"), 3),
                     _r(_pct(s.get("kernel_busy_fraction")), 1),
                     _r((nvml.get(name) or {}).get("util_pct"), 0), _r(s.get("tokens_per_s"), 1),
                     _r(s.get("ttft_ms"), 1), _r(s.get("ms_per_token_p50"), 3), _r(s.get("ms_per_token_p95"), 3),
                     _r(warm.get("compile_ms") or None, 0)])
    return rows


def _spread(report: dict[str, Any], name: str, summary: dict[str, Any]) -> float | None:
    """The trial spread; None with one trial, where older reports wrote 0 for a spread that cannot be known."""
    trials = summary.get("trials")
    if not is_int(trials):
        trials = sum(1 for r in report.get("runs", []) if r.get("contestant") == name)
    if trials < 2:
        return None
    return summary.get("decode_spread") if summary.get("decode_spread") is not None else summary.get("spread")


def clock_of(report: dict[str, Any]) -> str:
    """'cuda-events' when the loops were timed on the GPU clock, else 'host'."""
    clocks = {r["timings"].get("clock") for r in report.get("runs", []) if r["contestant"] in LOOPS}
    return "cuda-events" if clocks == {"cuda-events"} else "host"


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """The few facts a run is about: the decode-phase speedup and whether it is beyond noise, identical outputs,
    and which clock measured the steps."""
    return {"verdict": report.get("verdict") or {}, "identical": bool(report.get("all_identical")),
            "self_consistent": all((report.get("self_consistent") or {}).values()), "clock": clock_of(report),
            "end_to_end": (report.get("ratios") or {}).get("pipelined/naive"),
            "ttft": {n: (report.get("summary") or {}).get(n, {}).get("ttft_ms") for n in LOOPS}}


def nvml_means(samples: list[dict[str, Any]], spans: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per contestant, the mean of each NVML reading taken inside its timed trials (warm-ups left out)."""
    out: dict[str, dict[str, float]] = {}
    for name in {s["contestant"] for s in spans if s["phase"] == "trial"}:
        windows = [(s["t0"], s["t1"]) for s in spans if s["contestant"] == name and s["phase"] == "trial"]
        inside = [x for x in samples if any(t0 <= x["t"] <= t1 for t0, t1 in windows)]
        means = {key: statistics.fmean(v) for key in ("util_pct", "power_w", "sm_clock_mhz")
                 if (v := [x[key] for x in inside if x.get(key) is not None])}
        if means:
            out[name] = {**means, "samples": len(inside)}
    return out


# ------------------------------------------------------------------------------------------------ history

# cache, compile and streams are what the loops ran with; compile_asked is the form's, and notes say why they differ.
# The run options marked history=True in core.options.RUN_OPTIONS have a column each, as they ran.
OPTION_COLUMNS = tuple(option.name for option in RUN_OPTIONS if option.history)
HISTORY_FIELDS = ("run", "finished", "status", "model", "device", "dtype", "tp", *OPTION_COLUMNS, "compile_asked",
                  "sampling", "naive_decode_tok_s", "pipelined_decode_tok_s", "naive_tok_s", "pipelined_tok_s",
                  "hf_tok_s", "speedup", "verdict", "naive_ttft_ms", "pipelined_ttft_ms", "naive_p50_ms",
                  "pipelined_p50_ms", "naive_p95_ms", "pipelined_p95_ms", "naive_kernel_busy_pct",
                  "pipelined_kernel_busy_pct", "naive_reads_per_step", "pipelined_reads_per_step", "compile_ms",
                  "identical", "clock", "notes", "error")


def history_row(job_id: int, state: str, request: Any, model: str | None, report: dict[str, Any] | None,
                error: str | None, device_type: str | None = None) -> dict[str, Any]:
    """Run data only: options and numbers, no prompt text, host names or paths. The options are those that ran:
    the report's, else (a run stopped before its report) those asked for, as `device_type` adapts them."""
    row: dict[str, Any] = dict.fromkeys(HISTORY_FIELDS)
    row.update(run=job_id, finished=time.strftime("%Y-%m-%dT%H:%M:%S"), status=state, model=model, error=error)
    if request is not None:
        o = request.options
        ran, notices = adapt_to_device(o, device_type) if device_type else (o, [])
        row.update({name: request.value(name) for name in OPTION_COLUMNS})
        row.update(compile_asked=o.compile, sampling=f"seed {o.seed}, T={o.temperature:g}" if o.do_sample else "greedy")
        row.update(_ran(ran.cache, ran.compile, ran.streams, notices))
    if report:
        _add_report_numbers(row, report)
        row.update(_ran_from_report(report) or {})
    return row


def _ran(cache: Any, compile_mode: Any, streams: Any, notices: list[str]) -> dict[str, Any]:
    return {"cache": cache, "compile": compile_mode, "streams": streams, "notes": "; ".join(notices) or None}


def _ran_from_report(report: dict[str, Any]) -> dict[str, Any] | None:
    """What the loops ran with, and every contestant's notices, from the report's "effective" section."""
    effective = report.get("effective")
    if not isinstance(effective, dict):
        return None  # a report from before it recorded what ran
    loop = next((effective[name] for name in (*LOOPS, NO_CHECK) if isinstance(effective.get(name), dict)), None)
    options = (loop or {}).get("options") or {}
    if not options:
        return None
    notices = dict.fromkeys(n for ran in effective.values() if isinstance(ran, dict)
                            for n in ran.get("notices") or [] if isinstance(n, str))
    return _ran(options.get("cache"), options.get("compile"), options.get("streams"), list(notices))


def _add_report_numbers(row: dict[str, Any], report: dict[str, Any]) -> None:
    env, summary = report.get("environment", {}), report.get("summary", {})
    verdict = report.get("verdict") or {}
    row.update(model=report.get("model", {}).get("spec", row["model"]), device=env.get("gpu") or env.get("device"),
               dtype=env.get("dtype"), tp=env.get("tp", 1), identical="yes" if report.get("all_identical") else "no",
               speedup=_r(verdict.get("ratio"), 3), verdict=verdict.get("call"), clock=clock_of(report))
    for name, prefix in (("naive", "naive"), ("pipelined", "pipelined"), (HF, "hf")):
        s = summary.get(name)
        if not s:
            continue
        row[f"{prefix}_tok_s"] = _r(s["tokens_per_s"], 2)
        if prefix != "hf":
            row[f"{prefix}_decode_tok_s"] = _r(s.get("decode_tokens_per_s"), 2)
            row[f"{prefix}_ttft_ms"] = _r(s.get("ttft_ms"), 2)
            row[f"{prefix}_p50_ms"] = _r(s.get("ms_per_token_p50"), 3)
            row[f"{prefix}_p95_ms"] = _r(s.get("ms_per_token_p95"), 3)
            row[f"{prefix}_kernel_busy_pct"] = _r(_pct(s.get("kernel_busy_fraction")), 1)
            row[f"{prefix}_reads_per_step"] = _r(s.get("reads_per_step"), 2)
    compiled = [w.get("compile_ms") or 0 for w in report.get("warmup", {}).values()]
    row["compile_ms"] = _r(max(compiled, default=0) or None, 0)


def history_csv(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=HISTORY_FIELDS, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_cell(v) for k, v in row.items()})
    return out.getvalue()


def _csv_cell(value: Any) -> Any:
    # A cell starting with = + - @ is a formula to spreadsheet programs.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@"):
        return "'" + value
    return value


def public_report(report: dict[str, Any]) -> dict[str, Any]:
    """The report as offered for download: run data, without the server's host name."""
    out = dict(report)
    out["environment"] = {k: v for k, v in report.get("environment", {}).items() if k != "host"}
    return out


def _r(value: float | None, digits: int) -> float | None:
    return None if value is None else round(float(value), digits)


def _us(ms: float | None) -> float | None:
    return None if ms is None else ms * 1000


def _pct(fraction: float | None) -> float | None:
    return None if fraction is None else fraction * 100


# ------------------------------------------------------------------------------- replaying a saved report

def live_series_from_report(report: dict[str, Any] | SavedReport, page: PageRecord | None = None) -> dict[str, Any]:
    """Chart data for a saved report: the page's recorded live series when the page made it, else one rebuilt from
    the per-step host timestamps, with the runs laid end to end in the order they ran."""
    saved = split_report(report)
    page = page or saved.page
    if page is not None:
        return page.live_series()
    report = saved.report
    cursor, spans = 0.0, []
    series: dict[str, dict[str, list[float | None]]] = {}
    for name, warm in report.get("warmup", {}).items():
        length = (warm.get("total_ms") or 0) / 1000
        spans.append({"contestant": name, "phase": "warmup", "trial": None, "t0": cursor, "t1": cursor + length})
        cursor += length
    for run in sorted(report.get("runs", []), key=lambda r: (r["trial"], r["order"])):
        timings = run["timings"]
        length = timings["total_ms"] / 1000
        spans.append({"contestant": run["contestant"], "phase": "trial", "trial": run["trial"], "t0": cursor,
                      "t1": cursor + length})
        if run["contestant"] != NO_CHECK:  # its tokens all become known at the end: no rate curve
            _append_rates(series.setdefault(run["contestant"], {"t": [], "tokens_per_s": []}), timings, cursor)
        cursor += length
    series = {name: s for name, s in series.items() if s["t"]}
    return {"t_end": cursor, "series": series, "spans": spans, "monitor": _no_monitor()}


def _append_rates(target: dict[str, list[float | None]], timings: dict[str, Any], offset: float) -> None:
    known = [ms / 1000 for ms in timings.get("host_known_ms", [])]
    if len(known) < 2:
        return
    per_step = timings["new_tokens"] / max(1, timings["kept_steps"])
    if target["t"]:
        target["t"].append(None)
        target["tokens_per_s"].append(None)
    for i in range(1, len(known)):
        rate = window_rate([(t, per_step) for t in known[max(0, i - RATE_WINDOW):i + 1]])
        if rate is not None:
            target["t"].append(offset + known[i])
            target["tokens_per_s"].append(rate)


def window_rate(window: Sequence[tuple[float, float]]) -> float | None:
    """Tokens/s over a window of steps, each (when its tokens were known, how many): the tokens after the first
    step over the time since it. None when the window spans no time."""
    if len(window) < 2 or window[-1][0] <= window[0][0]:
        return None
    return sum(count for _, count in window[1:]) / (window[-1][0] - window[0][0])


def _no_monitor() -> dict[str, Any]:
    return {"source": "none", "description": "No utilization samples in this report: core.bench does not record "
                                           "them; reports saved from the dashboard do.", "samples": []}


def too_large(size: int, limit: int = MAX_REPORT_BYTES) -> str:
    """Why a file of `size` bytes is refused, in one sentence."""
    return f"the file is {size / 2**20:,.2f} MiB; reports here are limited to {limit / 2**20:,.0f} MiB"


def parse_report(data: bytes | str, max_bytes: int = MAX_REPORT_BYTES) -> dict[str, Any]:
    """The complete core.bench report in JSON text (a report, or a page's download of one): see open_report."""
    return open_report(data, max_bytes).report


def open_report(data: bytes | str, max_bytes: int = MAX_REPORT_BYTES) -> SavedReport:
    """A complete report and the page's record of it (if the page saved it) from JSON text; ValueError naming the
    first thing that is missing or wrong.

    Only parses: never opens paths. Every field the page reads is checked here, so a report that passes cannot
    break the charts or the table later."""
    document = _json_document(data, max_bytes)
    wrapped = document.get("schema") == PAGE_REPORT_SCHEMA
    report = document.get("report") if wrapped else document
    if not isinstance(report, dict) or not str(report.get("schema", "")).startswith(BENCH_SCHEMA):
        raise ValueError("this JSON is not a syncscope benchmark report (no \"schema\": \"syncscope.bench/1\"); "
                         "write one with python -m core.bench ... --json results.json")
    _check_report(report)
    section = "page" if wrapped else OLD_PAGE_SECTION
    _check_page_section(document.get("page") if wrapped else report.get(OLD_PAGE_SECTION), section)
    return split_report(document)


def _json_document(data: bytes | str, max_bytes: int) -> dict[str, Any]:
    if isinstance(data, bytes | bytearray):
        if len(data) > max_bytes:
            raise ValueError(too_large(len(data), max_bytes))
        try:
            data = data.decode("utf-8-sig")  # a byte-order mark (an editor's) is not part of the JSON
        except UnicodeDecodeError:
            raise ValueError("the file is not UTF-8 text, so not a report written by core.bench --json") from None
    try:
        document = json.loads(data.removeprefix("\ufeff"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"the file is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ValueError("the file nests too deeply to be a report") from None
    if not isinstance(document, dict):
        raise ValueError("this JSON is not a syncscope benchmark report (no \"schema\": \"syncscope.bench/1\"); "
                         "write one with python -m core.bench ... --json results.json")
    return document


# Numbers the page reads (None where a number does not exist); other fields are left alone.
SUMMARY_NUMBERS = ("trials", "tokens_per_s", "spread", "decode_tokens_per_s", "decode_spread", "total_ms", "ttft_ms",
                   "ttft_gpu_ms", "ms_per_token_p50", "ms_per_token_p95", "gpu_busy_fraction", "device_span_fraction",
                   "kernel_busy_fraction", "reads_per_step", "host_wait_ms_per_step", "device_gap_ms_per_step",
                   "launch_wait_ms_per_step", "device_idle_ms_per_step", "gpu_gap_ms_mean",
                   "gpu_gap_ms_p50", "gpu_gap_ms_p99", "gpu_gap_ms_max", "new_tokens", "overshoot_steps")
TIMING_NUMBERS = ("total_ms", "ttft_ms", "tokens_per_s", "new_tokens", "kept_steps", "computed_steps",
                  "ms_per_token_p50", "ms_per_token_p95", "setup_ms", "warmup_ms", "compile_ms", "ttft_gpu_ms",
                  "gpu_busy_fraction", "device_span_fraction", "decode_tokens", "decode_ms", "decode_tokens_per_s",
                  "overshoot_steps")
WARMUP_NUMBERS = ("total_ms", "setup_ms", "engine_warmup_ms", "compile_ms")  # engine_warmup_ms: setup_ms's old name
VERDICT_NUMBERS = ("trials", "ratio", "noise")
SAMPLE_NUMBERS = ("t", "util_pct", "mem_used_mb", "power_w", "sm_clock_mhz")


def _check_report(report: dict[str, Any]) -> None:
    summary, runs = report.get("summary"), report.get("runs")
    _expect(isinstance(summary, dict), "no valid 'summary' section")
    _expect(isinstance(runs, list), "no valid 'runs' section")
    for name, entry in summary.items():
        _expect(_is_name(name), f"summary key {name[:40]!r} is not a contestant name")
        _expect(isinstance(entry, dict) and _is_number(entry.get("tokens_per_s")),
                f"summary entry {name!r} has no tokens_per_s number")
        _expect_numbers(entry, SUMMARY_NUMBERS, f"summary.{name}")
    for index, run in enumerate(runs):
        where = f"run {index}"
        _expect(isinstance(run, dict), f"{where} is not an object")
        _expect(_is_name(run.get("contestant")), f"{where} has no contestant name")
        _expect(is_int(run.get("trial")) and is_int(run.get("order")), f"{where} has no whole trial/order number")
        timings = run.get("timings")
        _expect(isinstance(timings, dict), f"{where} has no timings")
        for key in ("tokens_per_s", "total_ms"):
            _expect(_is_number(timings.get(key)), f"{where}'s timings have no {key} number")
        _expect_numbers(timings, TIMING_NUMBERS, f"runs[{index}].timings")
        for key in ("step_ms", "host_known_ms", "gpu_gap_ms"):
            values = timings.get(key, [])
            _expect(isinstance(values, list) and all(_is_number(v) for v in values),
                    f"{where}'s timings.{key} is not a list of numbers")
        if timings.get("host_known_ms"):
            for key in ("new_tokens", "kept_steps"):
                _expect(_is_number(timings.get(key)), f"{where}'s timings have no {key} number")
    _expect(bool(summary) and bool(runs), "its 'summary' and 'runs' sections are empty: it holds no measured run")
    _expect(isinstance(report.get("model"), dict) and isinstance(report["model"].get("spec"), str),
            "it does not name its model (no 'model.spec')")
    for key in ("warmup", "identical", "self_consistent", "ratios", "environment", "model", "request"):
        _expect(isinstance(report.get(key, {}), dict), f"its {key!r} section is not an object")
    for name, warm in report.get("warmup", {}).items():
        _expect(isinstance(warm, dict) and _is_number(warm.get("total_ms", 0)),
                f"warm-up entry {name!r} has no total_ms number")
        _expect_numbers(warm, WARMUP_NUMBERS, f"warmup.{name}")
    _expect_numbers(report.get("ratios", {}), tuple(report.get("ratios", {})), "ratios")
    _check_verdict(report.get("verdict"))


def _check_verdict(verdict: Any) -> None:
    if verdict is None:
        return
    _expect(isinstance(verdict, dict), "its 'verdict' section is not an object")
    _expect_numbers(verdict, VERDICT_NUMBERS, "verdict")
    for key in ("contender", "baseline", "metric", "call"):
        _expect(isinstance(verdict.get(key), str), f"verdict.{key} is not a name")


def _check_page_section(recorded: Any, where: str) -> None:
    """The page's record, as a page report's "page" or an old download's "dashboard" section (`where`)."""
    if recorded is None:
        return
    _expect(isinstance(recorded, dict), f"its {where!r} section is not an object")
    _expect_numbers(recorded, ("t_end",), where)
    spans = recorded.get("spans", [])
    _expect(isinstance(spans, list), "the recorded spans are not a list")
    for index, span in enumerate(spans):
        _expect(isinstance(span, dict) and _is_number(span.get("t0")) and isinstance(span.get("contestant"), str)
                and phase_named(span.get("phase")) is not None, "a recorded span is malformed")
        _expect_numbers(span, ("t1",), f"{where}.spans[{index}]")
    series = recorded.get("series", {})
    _expect(isinstance(series, dict) and all(isinstance(s, dict) and isinstance(s.get("t"), list)
                                             for s in series.values()), "a recorded tokens/s series is malformed")
    for name, line in series.items():
        _expect_numbers(line, ("t", "tokens_per_s"), f"{where}.series.{name}")
    monitor = recorded.get("monitor") or {}
    _expect(isinstance(monitor, dict) and isinstance(monitor.get("samples", []), list)
            and all(isinstance(x, dict) and _is_number(x.get("t")) for x in monitor.get("samples", [])),
            "the recorded device samples are malformed")
    for index, sample in enumerate(monitor.get("samples", [])):
        _expect_numbers(sample, SAMPLE_NUMBERS, f"{where}.monitor.samples[{index}]")
    notices = recorded.get("notices") or []
    _expect(isinstance(notices, list) and all(isinstance(n, str) for n in notices),
            f"its '{where}.notices' are not a list of sentences")
    nvml = recorded.get("nvml_by_contestant") or {}
    _expect(isinstance(nvml, dict) and all(isinstance(v, dict) for v in nvml.values()),
            f"its '{where}.nvml_by_contestant' section is malformed")
    for name, means in nvml.items():
        _expect_numbers(means, (*SAMPLE_NUMBERS[1:], "samples"), f"{where}.nvml_by_contestant.{name}")


def _expect_numbers(section: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    """Each of `keys` in `section` is absent, null, a number, or a list of numbers and nulls; else a ValueError that
    names the field and its value."""
    for key in keys:
        value = section.get(key)
        items = value if isinstance(value, list) else [value]
        bad = next((v for v in items if v is not None and not _is_number(v)), None)
        if bad is not None:
            raise ValueError(f"the report is incomplete or damaged: {clip(f'{where}.{key}', 120)} is "
                             f"{clip(json.dumps(bad), 40)}, not a number")


def _expect(condition: bool, problem: str) -> None:
    if not condition:
        raise ValueError(f"the report is incomplete or damaged: {clip(problem)}")  # it may quote the file


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and bool(_NAME.fullmatch(value))

