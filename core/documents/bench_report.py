"""The bench report (`python -m core.bench --json`, core.report.build.build_report): its keys as types, and its check.

After core.documents.schema.load() a reader indexes it: every key of `BenchReport` is there (an old report's
absent sections are filled in by core.documents.upgrades), and a section that exists only when its phase ran
(NotRequired below) is tested with `in`."""

from typing import Any, NotRequired, TypedDict

from core.documents.fields import all_numbers, are_sentences, expect, expect_numbers, is_name, is_number
from core.documents.kinds import BENCH, NOT_A_BENCH_REPORT, ReportError, kind_of
from core.request.options import is_int


class Interruption(TypedDict):
    phase: str
    trials_done: int
    trials_planned: int
    runs_left_out: NotRequired[int]
    by: NotRequired[str]
    signal: NotRequired[str]


class Run(TypedDict):
    contestant: str
    trial: int
    order: int
    token_ids: list[list[int]]
    texts: list[str]
    timings: dict[str, Any]
    notices: list[str]
    first_difference: NotRequired[int | None]
    graphs_compiled: NotRequired[int]
    compiling_ms: NotRequired[float]
    started_ms: NotRequired[float]


class Effective(TypedDict):
    options: dict[str, Any]
    notices: list[str]


class BenchReport(TypedDict):
    """core.bench's report. The per-contestant entries (summary, warmup, sync_audit, kernel_measurement) are dicts of
    numbers whose keys core.report.build.summarize, core.compare and core.measure write."""

    schema: str
    created: str
    environment: dict[str, Any]
    model: dict[str, Any]
    request: dict[str, Any]
    effective: dict[str, Effective]  # empty in reports from before it was recorded
    warmup: dict[str, dict[str, Any]]
    runs: list[Run]
    summary: dict[str, dict[str, Any]]
    ratios: dict[str, float]
    verdict: dict[str, Any] | None  # None without both loops, and in reports from before verdicts
    identical: dict[str, bool]
    all_identical: bool
    self_consistent: dict[str, bool]
    identity: dict[str, Any] | None  # None in reports from before it was recorded
    command: str | None  # None in reports from before it was recorded
    sync_audit: NotRequired[dict[str, dict[str, Any]]]  # only where the sync audit ran
    kernel_measurement: NotRequired[dict[str, dict[str, Any]]]  # only where the kernel measurement ran
    interrupted: NotRequired[bool]  # only in the report of an interrupted run, with its interruption
    interruption: NotRequired[Interruption]
    origin_perf_counter_s: NotRequired[float]
    wall_s: NotRequired[float]
    nondeterministic_ops: NotRequired[list[str]]  # only with deterministic algorithms on


# What a report of before lacks of today's sections, as today's reports write the section when there is nothing in
# it (core.documents.upgrades fills them in).
EMPTY_SECTIONS: dict[str, Any] = {"environment": {}, "request": {}, "warmup": {}, "runs": [], "summary": {},
                                  "ratios": {}, "identical": {}, "self_consistent": {}, "effective": {},
                                  "verdict": None, "identity": None, "command": None}

# Numbers the readers read (None where a number does not exist); other fields are left alone.
SUMMARY_NUMBERS = ("trials", "tokens_per_s", "spread", "decode_tokens_per_s", "decode_spread", "total_ms", "ttft_ms",
                   "ttft_gpu_ms", "ms_per_token_p50", "ms_per_token_p95", "gpu_busy_fraction", "device_span_fraction",
                   "kernel_busy_fraction", "reads_per_step", "host_wait_ms_per_step", "device_gap_ms_per_step",
                   "launch_wait_ms_per_step", "device_idle_ms_per_step", "gpu_gap_ms_mean",
                   "gpu_gap_ms_p50", "gpu_gap_ms_p99", "gpu_gap_ms_max", "new_tokens", "overshoot_steps")
TIMING_NUMBERS = ("total_ms", "ttft_ms", "tokens_per_s", "new_tokens", "kept_steps", "computed_steps",
                  "ms_per_token_p50", "ms_per_token_p95", "setup_ms", "warmup_ms", "compile_ms", "ttft_gpu_ms",
                  "gpu_busy_fraction", "device_span_fraction", "decode_tokens", "decode_ms", "decode_tokens_per_s",
                  "overshoot_steps")
WARMUP_NUMBERS = ("total_ms", "setup_ms", "engine_warmup_ms", "compile_ms")  # the old name beside the new one
VERDICT_NUMBERS = ("trials", "ratio", "noise")
OBJECT_SECTIONS = ("warmup", "identical", "self_consistent", "ratios", "environment", "model", "request")


def check_report(report: Any) -> None:
    """ReportError naming the first thing missing or wrong in an upgraded bench report."""
    if kind_of(report) != BENCH:
        raise ReportError(NOT_A_BENCH_REPORT)
    summary, runs = report["summary"], report["runs"]
    expect(isinstance(summary, dict), "no valid 'summary' section")
    expect(isinstance(runs, list), "no valid 'runs' section")
    for name, entry in summary.items():
        expect(is_name(name), f"summary key {name[:40]!r} is not a contestant name")
        expect(isinstance(entry, dict) and is_number(entry.get("tokens_per_s")),
               f"summary entry {name!r} has no tokens_per_s number")
        expect_numbers(entry, SUMMARY_NUMBERS, f"summary.{name}")
    for index, run in enumerate(runs):
        check_run(run, index)
    expect(bool(summary) and bool(runs), "its 'summary' and 'runs' sections are empty: it holds no measured run")
    expect(isinstance(report.get("model"), dict) and isinstance(report["model"].get("spec"), str),
           "it does not name its model (no 'model.spec')")
    for key in OBJECT_SECTIONS:
        expect(isinstance(report[key], dict), f"its {key!r} section is not an object")
    for name, warm in report["warmup"].items():
        expect(isinstance(warm, dict) and is_number(warm.get("total_ms", 0)),
               f"warm-up entry {name!r} has no total_ms number")
        expect_numbers(warm, WARMUP_NUMBERS, f"warmup.{name}")
    expect_numbers(report["ratios"], tuple(report["ratios"]), "ratios")
    _check_verdict(report["verdict"])
    expect(isinstance(report["request"].get("options"), dict), "its request's options are not an object")
    expect(isinstance(report["effective"], dict), "its 'effective' section is not an object")
    expect(report["identity"] is None or isinstance(report["identity"], dict),
           "its 'identity' section is not an object")
    for name, ran in report["effective"].items():
        expect(isinstance(ran, dict) and isinstance(ran.get("options"), dict) and are_sentences(ran.get("notices")),
               f"effective entry {name!r} is malformed")
    for key in ("sync_audit", "kernel_measurement", "interruption"):
        expect(key not in report or isinstance(report[key], dict), f"its {key!r} section is not an object")


def check_run(run: Any, index: int) -> None:
    """One of a report's runs, `index` its place in them."""
    where = f"run {index}"
    expect(isinstance(run, dict), f"{where} is not an object")
    expect(is_name(run.get("contestant")), f"{where} has no contestant name")
    expect(is_int(run.get("trial")) and is_int(run.get("order")), f"{where} has no whole trial/order number")
    timings = run.get("timings")
    expect(isinstance(timings, dict), f"{where} has no timings")
    for key in ("tokens_per_s", "total_ms"):
        expect(is_number(timings.get(key)), f"{where}'s timings have no {key} number")
    expect_numbers(timings, TIMING_NUMBERS, f"runs[{index}].timings")
    for key in ("step_ms", "host_known_ms", "gpu_gap_ms"):
        values = timings.get(key, [])
        expect(isinstance(values, list) and all_numbers(values), f"{where}'s timings.{key} is not a list of numbers")
    if timings.get("host_known_ms"):
        for key in ("new_tokens", "kept_steps"):
            expect(is_number(timings.get(key)), f"{where}'s timings have no {key} number")


def _check_verdict(verdict: Any) -> None:
    if verdict is None:
        return
    expect(isinstance(verdict, dict), "its 'verdict' section is not an object")
    expect_numbers(verdict, VERDICT_NUMBERS, "verdict")
    for key in ("contender", "baseline", "metric", "call"):
        expect(isinstance(verdict.get(key), str), f"verdict.{key} is not a name")


def kernel_share_of_timed_steps(measured: dict[str, Any] | None, step_ms: float | None,
                                total_ms: float | None) -> float | None:
    """The share of the timed trials' device time that kernels ran: the kernel measurement's kernel time per step
    over the timed step (the measurement's own steps are slower: tracing costs the host), or for generate(), which
    has no steps, the measurement's kernel time over the timed run. None where the measurement or the times lack."""
    if not isinstance(measured, dict):
        return None
    per_step, whole = measured.get("kernel_busy_ms_per_step"), measured.get("kernel_busy_ms")
    if is_number(per_step) and is_number(step_ms) and step_ms > 0:
        return min(1.0, per_step / step_ms)
    if is_number(whole) and is_number(total_ms) and total_ms > 0:
        return min(1.0, whole / total_ms)
    return None
