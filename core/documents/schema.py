"""The documents this project writes and reads, defined once: their schemas, their keys as types, and one way in.

- the bench report (`python -m core.bench --json`, core.report.build.build_report): `BenchReport`;
- the page report (the page's download, dashboard.service.page_record): `{"schema", "report": <bench report>,
  "page": <the page's record> or null}`; the page's downloads from before kept that record inside the report, under
  "dashboard";
- the audit report (`python -m core.audit --json`): `AuditReport`;
- the load report (`python -m core.bench --requests N --json`, core.load.report): `LoadReport`, its `load` section a
  `LoadSection` with one `LoadContestant` per contestant at each point.

`load()` reads a file or its bytes, bounded in size (gzip too: decompression stops at the limit), `upgrade()`s it
(old key names become today's, and the sections today's reports always have are filled in for older ones) and
`check()`s it; anything wrong is one `ReportError`, a ValueError whose message is one line in words. After it,
readers index the document: a section that exists only when its phase ran (NotRequired below) is tested with `in`.

Torch-free (tests/test_report_schema.py checks it): the page server and the CLI's --diff import it.
"""

import codecs
import json
import math
import re
import shlex
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from core.documents.files import GZIP_MAGIC, MAX_REPORT_BYTES, gunzip_bounded, read_bounded, too_large
from core.phases import phase_named
from core.request.options import STEP_GRAPH, is_int
from core.text import clip
from core.tuning import RETIRED, SWITCH, SWITCHES

BENCH_SCHEMA_PREFIX, AUDIT_SCHEMA_PREFIX = "syncscope.bench/", "syncscope.audit/"  # any version of each
LOAD_SCHEMA_PREFIX = "syncscope.load/"
BENCH_SCHEMA = f"{BENCH_SCHEMA_PREFIX}1"
PAGE_REPORT_SCHEMA = "syncscope.page-report/1"
AUDIT_SCHEMA = f"{AUDIT_SCHEMA_PREFIX}1"
LOAD_SCHEMA = f"{LOAD_SCHEMA_PREFIX}1"
BENCH, PAGE, AUDIT, LOAD = "bench", "page", "audit", "load"  # the kinds of document, as load(expect=...) names them
OLD_PAGE_SECTION = "dashboard"  # where the page's old downloads kept its record, inside the report


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
    effective: dict[str, Effective] | None  # None in reports from before it was recorded
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


class PageReport(TypedDict):
    schema: str
    report: BenchReport
    page: dict[str, Any] | None  # dashboard.service.page_record.PageRecord.to_json(), or None


class AuditReport(TypedDict):
    """core.audit's report: the fields the page reads; core.audit writes more."""

    schema: str
    created: str
    sites: list[dict[str, Any]]
    steps: int
    decode_steps: int
    reads: int
    step_starts_ms: list[float]
    reads_per_step: list[float]
    events: list[dict[str, Any]]
    environment: dict[str, Any]
    note: NotRequired[str]


class LoadRequestResult(TypedDict):
    """One request of a run under load (core.load.batching.RequestResult.to_json): ms from the run's start."""

    index: int
    arrival_ms: float
    admitted_ms: float | None
    first_token_ms: float | None  # None where the contestant learns its tokens only at the end (the ceiling)
    finished_ms: float | None
    prompt_tokens: int
    tokens: int
    slot: int | None
    first_step: int | None
    last_step: int | None
    released_step: int | None


class LoadContestant(TypedDict):
    """One contestant at one point (core.load.stats.summarize_trials): medians over its trials, the requests of its
    median trial, and whether each request's tokens equal its solo decode."""

    tokens_per_s: float
    requests_per_s: float
    total_ms: float
    ttft_ms_p50: float | None
    ttft_ms_p99: float | None
    tpot_ms_p50: float | None
    tpot_ms_p99: float | None
    steps: float | None
    slot_steps: float | None
    wasted_slot_steps: float | None
    host_wait_us_per_step: float | None
    device_idle_us_per_step: float | None
    trials: int
    per_trial: list[dict[str, Any]]
    requests: list[LoadRequestResult]
    identical_to_solo: bool | None  # None when no request was checked
    repeatable: bool
    reads_per_decode_step: NotRequired[float | None]  # only where the sync audit ran: every wait, copies included
    copies_per_decode_step: NotRequired[float | None]  # of those, blocking copies to the device
    kernel_busy_fraction: NotRequired[float | None]  # only where the kernel measurement ran
    sync_audit: NotRequired[dict[str, Any]]
    kernel_measurement: NotRequired[dict[str, Any]]


class LoadPoint(TypedDict):
    slots: int
    rate: float
    workload: dict[str, Any]
    contestants: dict[str, LoadContestant]


class LoadSection(TypedDict):
    workload: dict[str, Any]
    request: NotRequired[dict[str, Any]]  # core.request.load.LoadRequest.settings(): every load option by name
    slots: int
    options: dict[str, Any]
    notices: list[str]
    cache_len: int
    solo_checked: int
    contestants: dict[str, LoadContestant]  # the main point's (the request's B and rate)
    points: list[LoadPoint]  # the main point first, then the sweeps'
    sweep: str | None  # "slots", "rate", "slots+rate" or None


class LoadReport(TypedDict):
    schema: str
    created: str
    environment: dict[str, Any]
    model: dict[str, Any]
    command: str
    load: LoadSection
    wall_s: NotRequired[float]


# What an older report lacks of today's sections, as today's reports write the section when there is nothing in it.
FILLED_WHEN_ABSENT: dict[str, Any] = {"environment": {}, "request": {}, "warmup": {}, "runs": [], "summary": {},
                                      "ratios": {}, "identical": {}, "self_consistent": {}, "effective": None,
                                      "verdict": None, "identity": None, "command": None}
PAGE_FILLED_WHEN_EMPTY: dict[str, Any] = {"series": {}, "spans": [], "notices": [], "nvml_by_contestant": {}}
# Old section names and today's (a rename goes here, not into the readers): the kernel measurement was the kernel
# trial; the request's flag to skip it was named after it too.
RENAMED_SECTIONS = {"kernel_trial": "kernel_measurement"}
RENAMED_REQUEST_KEYS = {"no_kernel_trial": "no_kernel_measurement"}
RENAMED_WARMUP_KEYS = {"engine_warmup_ms": "setup_ms"}
RENAMED_MONITOR_KEYS = {"kind": "source"}

NOT_A_BENCH_REPORT = (f"this JSON is not a syncscope benchmark report (no \"schema\": \"{BENCH_SCHEMA}\"); write one "
                      "with python -m core.bench ... --json results.json")
NOT_AN_AUDIT_REPORT = (f"this JSON is not an audit report (no \"schema\": \"{AUDIT_SCHEMA}\"); write one with "
                       "python -m core.audit --json audit.json -- your_script.py")
AUDIT_NOT_BENCH = "this JSON is an audit report of a program (python -m core.audit), not a benchmark report"
BENCH_NOT_AUDIT = "this JSON is a benchmark report (python -m core.bench), not an audit report of a program"
NOT_A_LOAD_REPORT = (f"this JSON is not a load report (no \"schema\": \"{LOAD_SCHEMA}\"); write one with "
                     "python -m core.bench --requests N --json load.json")
LOAD_NOT_BENCH = ("this JSON is a load report (python -m core.bench --requests N), not a benchmark report of one "
                  "request")


class ReportError(ValueError):
    """A document that load() refuses; its message is one line saying why. `found` is the kind of document it was
    (BENCH, PAGE or AUDIT) where it was one of ours, else None."""

    def __init__(self, reason: str, found: str | None = None):
        super().__init__(reason)
        self.found = found


# ------------------------------------------------------------------------------------------------ loading

def load(source: Path | bytes | str, limit: int = MAX_REPORT_BYTES, *, expect: str | None = None) -> dict[str, Any]:
    """The upgraded, checked document in a file (a Path), or in JSON text (bytes, gzipped or not, or str): a bench
    report, a page report (an old page download becomes one) or an audit report; only `expect`'s kind where given.
    ReportError in one line (naming the file, for a Path) when it is missing, larger than `limit` bytes (decompressed
    too), not JSON, not one of these documents, or damaged."""
    if isinstance(source, Path):
        try:
            return load(_file_bytes(source, limit), limit, expect=expect)
        except ReportError as exc:
            raise ReportError(f"{source}: {exc}", exc.found) from None
    document = upgrade(_parsed(_json_bytes(source, limit) if isinstance(source, bytes | bytearray) else source))
    found = kind_of(document)
    if found is None or (expect is not None and found != expect and {found, expect} != {BENCH, PAGE}):
        raise ReportError(_refusal(found, expect), found)
    check(document)
    return document


def bench_report(document: dict[str, Any]) -> BenchReport:
    """The bench report of a loaded bench or page report."""
    return document["report"] if kind_of(document) == PAGE else document  # type: ignore[return-value]


def kind_of(document: Any) -> str | None:
    """BENCH, PAGE, AUDIT or LOAD by a document's schema; None for anything else."""
    schema = str(document.get("schema", "")) if isinstance(document, dict) else ""
    if schema == PAGE_REPORT_SCHEMA:
        return PAGE
    if schema.startswith(BENCH_SCHEMA_PREFIX):
        return BENCH
    if schema.startswith(LOAD_SCHEMA_PREFIX):
        return LOAD
    return AUDIT if schema.startswith(AUDIT_SCHEMA_PREFIX) else None


def _refusal(found: str | None, expect: str | None) -> str:
    if expect == AUDIT:
        return BENCH_NOT_AUDIT if found in (BENCH, PAGE) else NOT_AN_AUDIT_REPORT
    if expect == LOAD:
        return NOT_A_LOAD_REPORT
    if found == LOAD:
        return LOAD_NOT_BENCH
    return AUDIT_NOT_BENCH if found == AUDIT else NOT_A_BENCH_REPORT


def _file_bytes(path: Path, limit: int) -> bytes:
    try:
        return read_bounded(path, limit)
    except ValueError as exc:
        raise ReportError(str(exc)) from None


def _json_bytes(data: bytes | bytearray, limit: int) -> bytes:
    """The JSON text in `data`: as it is, or decompressed when it is gzip; at most `limit` bytes either way."""
    if len(data) > limit:
        raise ReportError(too_large(len(data), limit))
    if not bytes(data).strip():
        raise ReportError("the file is empty (0 bytes)" if not data else "the file is empty (only whitespace)")
    if bytes(data[:2]) == GZIP_MAGIC:
        try:
            data = gunzip_bounded(bytes(data), limit)
        except ValueError as exc:
            raise ReportError(str(exc)) from None
        if not data.strip():
            raise ReportError("the file is gzip of an empty file")
    return bytes(data)


def _parsed(text: bytes | str) -> Any:
    if isinstance(text, bytes):
        try:
            text = text.removeprefix(codecs.BOM_UTF8).decode("utf-8")  # an editor's byte-order mark is not JSON
        except UnicodeDecodeError:
            raise ReportError("the file is not UTF-8 text, so not a report written by this project") from None
    if not text.strip():
        raise ReportError("the file is empty")
    try:
        return json.loads(text.removeprefix("\ufeff"))
    except json.JSONDecodeError as exc:
        raise ReportError(f"the file is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ReportError("the file nests too deeply to be a report") from None


# ------------------------------------------------------------------------------------------------ upgrading

def upgrade(document: Any) -> Any:
    """A document in today's form, without changing the one given: old key names renamed, the sections today's bench
    reports always have filled in (FILLED_WHEN_ABSENT), an old page download made a page report, an audit report
    given the environment section core.audit always writes. Anything that is not a dict is returned as it is."""
    if not isinstance(document, dict):
        return document
    if kind_of(document) in (AUDIT, LOAD):
        return document if "environment" in document else {**document, "environment": {}}
    if kind_of(document) == PAGE:
        page = document.get("page")
        return {**document, "report": upgrade_report(document.get("report")), "page": upgrade_page(page)}
    old = document.get(OLD_PAGE_SECTION)
    if isinstance(old, dict):
        report = {key: value for key, value in document.items() if key != OLD_PAGE_SECTION}
        return {"schema": PAGE_REPORT_SCHEMA, "report": upgrade_report(report), "page": upgrade_page(old)}
    return upgrade_report(document)


def upgrade_report(report: Any) -> Any:
    """A bench report (or a part of one) in today's form; see upgrade()."""
    if not isinstance(report, dict):
        return report
    out = {RENAMED_SECTIONS.get(key, key): value for key, value in report.items()}
    for key, empty in FILLED_WHEN_ABSENT.items():
        if key not in out:
            out[key] = empty.copy() if isinstance(empty, dict | list) else empty
    if isinstance(out["warmup"], dict):
        out["warmup"] = {name: _renamed(entry, RENAMED_WARMUP_KEYS) for name, entry in out["warmup"].items()}
    out["request"] = _renamed(out["request"], RENAMED_REQUEST_KEYS)
    if isinstance(out["environment"], dict) and "decode_products" not in out["environment"]:
        out["environment"] = {**out["environment"], "decode_products": _products_before_the_field(out)}
    if isinstance(out["environment"], dict) and "decode_layer" not in out["environment"]:
        compiled_on_cuda = out["environment"].get("decode_products") is not None
        out["environment"] = {**out["environment"], "decode_layer": "off" if compiled_on_cuda else None}
    if isinstance(out["environment"], dict) and "step_commit" not in out["environment"]:
        out["environment"] = {**out["environment"], "step_commit": _commit_before_the_field(out)}
    if isinstance(out["environment"], dict) and not isinstance(out["environment"].get("tuning"), dict):
        out["environment"] = {**out["environment"], "tuning": _tuning_before_the_field(out)}
    if isinstance(out["summary"], dict) and isinstance(out.get("kernel_measurement"), dict):
        out["summary"] = _kernel_fields_before_the_summary_had_them(out)
    return out


def _kernel_fields_before_the_summary_had_them(report: dict[str, Any]) -> dict[str, Any]:
    """The summary's kernel_ms_per_step and kernel_busy_of_timed_steps of a report written before the summary held
    them, from its kernel measurement as core.report.build.summarize derives them today (the measurement's kernel ms per
    step, and kernel_share_of_timed_steps of it over the median trial's step)."""
    summary = dict(report["summary"])
    for name, measured in report["kernel_measurement"].items():
        entry = summary.get(name)
        if not isinstance(entry, dict) or not isinstance(measured, dict):
            continue
        added: dict[str, Any] = {}
        if "kernel_ms_per_step" not in entry:
            added["kernel_ms_per_step"] = measured.get("kernel_busy_ms_per_step")
        if "kernel_busy_of_timed_steps" not in entry:
            added["kernel_busy_of_timed_steps"] = kernel_share_of_timed_steps(
                measured, _median_of_trials(report["runs"], name, "ms_per_token_p50"),
                _median_of_trials(report["runs"], name, "total_ms"))
        if added:
            summary[name] = {**entry, **added}
    return summary


def kernel_share_of_timed_steps(measured: dict[str, Any] | None, step_ms: float | None,
                                total_ms: float | None) -> float | None:
    """The share of the timed trials' device time that kernels ran: the kernel measurement's kernel time per step
    over the timed step (the measurement's own steps are slower: tracing costs the host), or for generate(), which
    has no steps, the measurement's kernel time over the timed run. None where the measurement or the times lack."""
    if not isinstance(measured, dict):
        return None
    per_step, whole = measured.get("kernel_busy_ms_per_step"), measured.get("kernel_busy_ms")
    if _is_number(per_step) and _is_number(step_ms) and step_ms > 0:
        return min(1.0, per_step / step_ms)
    if _is_number(whole) and _is_number(total_ms) and total_ms > 0:
        return min(1.0, whole / total_ms)
    return None


def _median_of_trials(runs: Any, name: str, key: str) -> float | None:
    """The median over a contestant's trials of one of its timings (as core.report.build.summarize's median_of)."""
    values = [r["timings"][key] for r in runs if isinstance(r, dict) and r.get("contestant") == name
              and isinstance(r.get("timings"), dict) and _is_number(r["timings"].get(key))] \
        if isinstance(runs, list) else []
    if not values:
        return None
    ordered, middle = sorted(values), len(values) // 2
    return ordered[middle] if len(values) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _commit_before_the_field(report: dict[str, Any]) -> str | None:
    """Before SYNCSCOPE_STEP_COMMIT a greedy step-graph step compiled its argmax only."""
    request = report.get("request")
    options = request.get("options") if isinstance(request, dict) else None
    if not isinstance(options, dict) or options.get("compile") != "step-graph" or options.get("do_sample"):
        return None
    return "argmax"


# Environment fields that recorded a switch's value where the switch acted (None elsewhere), under its key
_RECORDED_AS_SET = ("o_proj", "step_commit", "kernel_pdl", "decode_swiglu", "attention_prefetch", "product_prefetch")


def _tuning_before_the_field(report: dict[str, Any]) -> dict[str, Any]:
    """environment.tuning of a report written before it was recorded (core.tuning): each switch as its reproduce
    command set it, else as its environment recorded it, else its default; the inductor options as recorded. A
    retired switch only where it was not at its default (what its default did is what runs now)."""
    assigned = command_assignments(report.get("command"))
    tuning: dict[str, Any] = {}
    for switch in SWITCHES:
        tuning[switch.key] = _switch_before_the_field(switch.key, switch.variable, switch.choices, report, assigned)
    for retired in RETIRED:
        value = _switch_before_the_field(retired.key, retired.variable, retired.choices, report, assigned)
        if value != retired.default:
            tuning[retired.key] = value
    return tuning


def _switch_before_the_field(key: str, variable: str, choices: tuple[str, ...], report: dict[str, Any],
                             assigned: dict[str, str]) -> Any:
    env = report["environment"]
    if key == "inductor_options":  # a JSON object, as the environment recorded it (None: none), else as set
        recorded = env.get("inductor_options")
        return dict(recorded) if isinstance(recorded, dict) else _json_object(assigned.get(variable))
    if variable in assigned:
        return assigned[variable].strip().lower() or choices[0]
    recorded = env.get(key)
    if key in _RECORDED_AS_SET and recorded in choices:
        return recorded
    if key == "decode_products":
        return _products_switch_before_the_field(report)
    return choices[0]


def _json_object(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _products_switch_before_the_field(report: dict[str, Any]) -> str:
    """The `decode_products` switch of a report whose command did not set it: "auto", unless the products it recorded
    are not those "auto" gives its compile (before "auto", the default was "inductor" everywhere)."""
    ran = report["environment"].get("decode_products")
    options = report["request"].get("options") if isinstance(report["request"], dict) else None
    compile_mode = options.get("compile") if isinstance(options, dict) else None
    auto = "triton" if compile_mode == STEP_GRAPH else "inductor"
    return ran if ran in SWITCH["decode_products"].choices and ran != auto else "auto"


def command_assignments(command: Any) -> dict[str, str]:
    """The variables a reproduce command sets before `python` (run_schema.cli_command writes each as one word, quoted
    as a shell reads it), their values unquoted."""
    assigned: dict[str, str] = {}
    if not isinstance(command, str):
        return assigned
    words = shlex.shlex(command, posix=True)
    words.whitespace_split = True
    try:
        for word in words:  # read lazily: a quote the shell would refuse further on does not matter here
            name, equals, value = word.partition("=")
            if not equals or not re.fullmatch(r"[A-Z][A-Z0-9_]*", name):
                break
            assigned[name] = value
    except ValueError:  # a quote left open inside the assignments: those before it
        pass
    return assigned


def _products_before_the_field(report: dict[str, Any]) -> str | None:
    """environment.decode_products of a report written before it was recorded: as the reproduce command set it, for a
    compiled CUDA run (whose environment records its o_proj); None otherwise, as today's reports say."""
    env = report["environment"]
    if env.get("o_proj") is None or not str(env.get("device", "")).startswith("cuda"):
        return None
    return command_assignments(report.get("command")).get(SWITCH["decode_products"].variable, "inductor")  # then


def upgrade_page(page: Any) -> Any:
    """The page's record in today's form: every part it has (PAGE_FILLED_WHEN_EMPTY, an empty one where it is null
    or absent), its monitor's old key names renamed; a null monitor is absent (no samples)."""
    if not isinstance(page, dict):
        return page
    out = {**page, **{key: empty.copy() for key, empty in PAGE_FILLED_WHEN_EMPTY.items() if page.get(key) is None}}
    if out.get("monitor") is None:
        out.pop("monitor", None)
    else:
        out["monitor"] = _renamed(out["monitor"], RENAMED_MONITOR_KEYS)
    return out


def _renamed(entry: Any, names: dict[str, str]) -> Any:
    """`entry` with each old key under its new name; where the new one is there already, both stay as they are."""
    if not isinstance(entry, dict) or not any(old in entry and new not in entry for old, new in names.items()):
        return entry
    return {names[key] if key in names and names[key] not in entry else key: value for key, value in entry.items()}


# ------------------------------------------------------------------------------------------------ checking

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
SAMPLE_NUMBERS = ("t", "util_pct", "mem_used_mb", "power_w", "sm_clock_mhz")
OBJECT_SECTIONS = ("warmup", "identical", "self_consistent", "ratios", "environment", "model", "request")
_NAME = re.compile(r"[\w.+-]{1,64}")


def check(document: dict[str, Any]) -> None:
    """ReportError naming the first thing missing or wrong in an upgraded document. Every field a reader reads is
    checked here, so that a document that passes cannot break the charts, the tables or the sentences later."""
    found = kind_of(document)
    if found == AUDIT:
        check_audit(document)
    elif found == LOAD:
        check_load(document)
    elif found == PAGE:
        check_report(document.get("report"))
        check_page(document.get("page"), "page")
    elif found == BENCH:
        check_report(document)
    else:
        raise ReportError(NOT_A_BENCH_REPORT)


def check_report(report: Any) -> None:
    if kind_of(report) != BENCH:
        raise ReportError(NOT_A_BENCH_REPORT)
    summary, runs = report["summary"], report["runs"]
    _expect(isinstance(summary, dict), "no valid 'summary' section")
    _expect(isinstance(runs, list), "no valid 'runs' section")
    for name, entry in summary.items():
        _expect(_is_name(name), f"summary key {name[:40]!r} is not a contestant name")
        _expect(isinstance(entry, dict) and _is_number(entry.get("tokens_per_s")),
                f"summary entry {name!r} has no tokens_per_s number")
        _expect_numbers(entry, SUMMARY_NUMBERS, f"summary.{name}")
    for index, run in enumerate(runs):
        _check_run(run, index)
    _expect(bool(summary) and bool(runs), "its 'summary' and 'runs' sections are empty: it holds no measured run")
    _expect(isinstance(report.get("model"), dict) and isinstance(report["model"].get("spec"), str),
            "it does not name its model (no 'model.spec')")
    for key in OBJECT_SECTIONS:
        _expect(isinstance(report[key], dict), f"its {key!r} section is not an object")
    for name, warm in report["warmup"].items():
        _expect(isinstance(warm, dict) and _is_number(warm.get("total_ms", 0)),
                f"warm-up entry {name!r} has no total_ms number")
        _expect_numbers(warm, WARMUP_NUMBERS, f"warmup.{name}")
    _expect_numbers(report["ratios"], tuple(report["ratios"]), "ratios")
    _check_verdict(report["verdict"])
    for key in ("effective", "identity"):
        _expect(report[key] is None or isinstance(report[key], dict), f"its {key!r} section is not an object")
    for name, ran in (report["effective"] or {}).items():
        _expect(isinstance(ran, dict) and isinstance(ran.get("options"), dict) and isinstance(ran.get("notices"), list)
                and all(isinstance(n, str) for n in ran["notices"]), f"effective entry {name!r} is malformed")
    for key in ("sync_audit", "kernel_measurement", "interruption"):
        _expect(key not in report or isinstance(report[key], dict), f"its {key!r} section is not an object")


def _check_run(run: Any, index: int) -> None:
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
        _expect(isinstance(values, list) and _all_numbers(values), f"{where}'s timings.{key} is not a list of numbers")
    if timings.get("host_known_ms"):
        for key in ("new_tokens", "kept_steps"):
            _expect(_is_number(timings.get(key)), f"{where}'s timings have no {key} number")


def _check_verdict(verdict: Any) -> None:
    if verdict is None:
        return
    _expect(isinstance(verdict, dict), "its 'verdict' section is not an object")
    _expect_numbers(verdict, VERDICT_NUMBERS, "verdict")
    for key in ("contender", "baseline", "metric", "call"):
        _expect(isinstance(verdict.get(key), str), f"verdict.{key} is not a name")


def check_page(recorded: Any, where: str = "page") -> None:
    """The page's record (a page report's "page"; `where` names it in the message); None is no record."""
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
    monitor = recorded.get("monitor", {})
    samples = monitor.get("samples", []) if isinstance(monitor, dict) else None
    _expect(isinstance(samples, list) and all(isinstance(x, dict) and _is_number(x.get("t")) for x in samples),
            "the recorded device samples are malformed")
    for index, sample in enumerate(samples):
        _expect_numbers(sample, SAMPLE_NUMBERS, f"{where}.monitor.samples[{index}]")
    notices = recorded.get("notices", [])
    _expect(isinstance(notices, list) and all(isinstance(n, str) for n in notices),
            f"its '{where}.notices' are not a list of sentences")
    nvml = recorded.get("nvml_by_contestant", {})
    _expect(isinstance(nvml, dict) and all(isinstance(v, dict) for v in nvml.values()),
            f"its '{where}.nvml_by_contestant' section is malformed")
    for name, means in nvml.items():
        _expect_numbers(means, (*SAMPLE_NUMBERS[1:], "samples"), f"{where}.nvml_by_contestant.{name}")


def check_audit(report: dict[str, Any]) -> None:
    """An audit report's fields that the page reads."""
    def expect(condition: bool, what: str) -> None:
        if not condition:
            raise ReportError(f"the audit report is incomplete or damaged: {what}")

    expect(isinstance(report.get("sites"), list) and all(isinstance(s, dict) for s in report["sites"]),
           "no valid 'sites'")
    for key in ("steps", "decode_steps", "reads"):
        expect(is_int(report.get(key)), f"'{key}' is not a number")
    for key in ("step_starts_ms", "reads_per_step"):
        values = report.get(key) or []
        expect(isinstance(values, list) and _all_numbers(values), f"'{key}' is not a list of numbers")
    for event in report.get("events") or []:
        expect(isinstance(event, dict) and _is_number(event.get("t_ms")), "an event has no time")
    for site in report["sites"]:
        expect(_is_number(site.get("count")) and isinstance(site.get("line"), int), "a site has no count or line")


LOAD_NUMBERS = ("tokens_per_s", "requests_per_s", "total_ms", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50",
                "tpot_ms_p99", "steps", "slot_steps", "wasted_slot_steps", "host_wait_us_per_step",
                "device_idle_us_per_step", "reads_per_decode_step", "copies_per_decode_step", "kernel_busy_fraction")
LOAD_REQUEST_NUMBERS = ("arrival_ms", "admitted_ms", "first_token_ms", "finished_ms", "prompt_tokens", "tokens", "slot",
                        "first_step", "last_step", "released_step")


def check_load(report: dict[str, Any]) -> None:
    """A load report's fields that the CLI's text, the page and Replay read."""
    section = report.get("load")
    _expect(isinstance(section, dict), "no valid 'load' section")
    _expect(isinstance(report.get("model"), dict) and isinstance(report["model"].get("spec"), str),
            "it does not name its model (no 'model.spec')")
    _expect(isinstance(section.get("workload"), dict), "its load section has no workload")
    _expect(is_int(section.get("slots")) and is_int(section.get("cache_len")), "its load section has no slots")
    points = section.get("points")
    _expect(isinstance(points, list) and bool(points), "its load section has no points")
    for index, point in enumerate(points):
        where = f"load.points[{index}]"
        _expect(isinstance(point, dict) and is_int(point.get("slots")) and _is_number(point.get("rate")),
                f"{where} has no slots and rate")
        _check_load_contestants(point.get("contestants"), where)
    _check_load_contestants(section.get("contestants"), "load")
    notices = section.get("notices", [])
    _expect(isinstance(notices, list) and all(isinstance(n, str) for n in notices), "load.notices are not sentences")


def _check_load_contestants(contestants: Any, where: str) -> None:
    _expect(isinstance(contestants, dict) and bool(contestants), f"{where} has no contestants")
    for name, entry in contestants.items():
        _expect(_is_name(name), f"{where}: {str(name)[:40]!r} is not a contestant name")
        _expect(isinstance(entry, dict) and _is_number(entry.get("tokens_per_s")),
                f"{where}.contestants.{name} has no tokens_per_s number")
        _expect_numbers(entry, LOAD_NUMBERS, f"{where}.contestants.{name}")
        requests = entry.get("requests")
        _expect(isinstance(requests, list) and all(isinstance(r, dict) for r in requests),
                f"{where}.contestants.{name}.requests is not a list")
        for index, request in enumerate(requests):
            _expect_numbers(request, LOAD_REQUEST_NUMBERS, f"{where}.contestants.{name}.requests[{index}]")
        for key in ("identical_to_solo", "repeatable"):
            _expect(entry.get(key) is None or isinstance(entry.get(key), bool),
                    f"{where}.contestants.{name}.{key} is not true or false")


def _expect_numbers(section: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    """Each of `keys` in `section` is absent, null, a number, or a list of numbers and nulls; else a ReportError that
    names the field and its value."""
    for key in keys:
        value = section.get(key)
        items = value if isinstance(value, list) else [value]
        bad = next((v for v in items if v is not None and not _is_number(v)), None)
        if bad is not None:
            raise ReportError(f"the report is incomplete or damaged: {clip(f'{where}.{key}', 120)} is "
                              f"{clip(json.dumps(bad), 40)}, not a number")


def _expect(condition: bool, problem: str) -> None:
    if not condition:
        raise ReportError(f"the report is incomplete or damaged: {clip(problem)}")  # it may quote the file


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


_PLAIN_NUMBERS = frozenset((int, float))


def _all_numbers(values: list[Any]) -> bool:
    """Whether every item of `values` is `_is_number`. A report's step times are up to a million numbers, and the
    committed reports 1.1 million together (2 s a load of them all, item by item): a list of plain ints and floats
    whose sum is finite holds no inf or nan, which C answers at once; any other list is asked item by item."""
    try:
        if set(map(type, values)) <= _PLAIN_NUMBERS and math.isfinite(sum(values)):
            return True
    except OverflowError:  # an int too large for a float: item by item, as before
        pass
    return all(_is_number(v) for v in values)


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and bool(_NAME.fullmatch(value))
