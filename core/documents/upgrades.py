"""Old documents in today's form: the upgrades, as numbered steps, one small function each, named for what it changes.

upgrade() takes a document of any kind and version and gives it in today's form, without changing the one given:
each step of the document's kind made for its version (a step's `version`: it upgrades documents of that version or
older) is applied once, in the order of the steps' numbers. An old page download (the page's record inside the
report) becomes a page report first.

Version 1 of each kind was written for months while sections and fields were added, before the steps had numbers:
so a step for version 1 looks before it changes, as a report of version 1 may have what it adds. A new change of
shape raises its kind's version (core.documents.kinds) and adds a step for the version before it, which can rely
on the version alone.
"""

import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.documents.bench_report import EMPTY_SECTIONS, kernel_share_of_timed_steps
from core.documents.fields import is_number
from core.documents.kinds import AUDIT, BENCH, LOAD, PAGE, PAGE_REPORT_SCHEMA, kind_of, version_of
from core.documents.page_report import EMPTY_PARTS
from core.request.options import STEP_GRAPH
from core.tuning import RETIRED, SWITCH, SWITCHES

Document = dict[str, Any]
OLD_PAGE_SECTION = "dashboard"  # where the page's old downloads kept its record, inside the report


@dataclass(frozen=True)
class Step:
    number: int
    version: int  # applied to documents of this version or older
    change: Callable[[Document], Document]  # a new document; the one given is left as it was


def upgrade(document: Any) -> Any:
    """A document in today's form (see the module's docstring); anything that is not a dict is returned as it is."""
    if not isinstance(document, dict):
        return document
    if kind_of(document) == BENCH and isinstance(document.get(OLD_PAGE_SECTION), dict):
        document = page_download_into_page_report(document)
    kind = kind_of(document)
    if kind == PAGE:
        return {**document, "report": upgrade_report(document.get("report")),
                "page": upgrade_page(document.get("page"), version_of(document))}
    if kind in (AUDIT, LOAD):
        return apply_steps(STEPS[kind], document, version_of(document))
    return upgrade_report(document)


def upgrade_report(report: Any) -> Any:
    """A bench report (or a part of one: a reader's or a test's) in today's form: every section of BenchReport."""
    return apply_steps(BENCH_STEPS, report, version_of(report)) if isinstance(report, dict) else report


def upgrade_page(page: Any, version: int = 1) -> Any:
    """The page's record (a page report's "page", of the page report's `version`) in today's form; None (no record)
    as it is."""
    return apply_steps(PAGE_RECORD_STEPS, page, version) if isinstance(page, dict) else page


def apply_steps(steps: tuple[Step, ...], document: Document, version: int) -> Document:
    for step in steps:
        if version <= step.version:
            document = step.change(document)
    return document


def page_download_into_page_report(download: Document) -> Document:
    """The page's downloads from before kept its record inside the report, under "dashboard": a page report of both."""
    report = {key: value for key, value in download.items() if key != OLD_PAGE_SECTION}
    return {"schema": PAGE_REPORT_SCHEMA, "report": report, "page": download[OLD_PAGE_SECTION]}


# ------------------------------------------------------------------------------------------------ the bench report

def rename_kernel_trial_to_kernel_measurement(report: Document) -> Document:
    """The kernel measurement was the kernel trial."""
    return {("kernel_measurement" if key == "kernel_trial" else key): value for key, value in report.items()}


def fill_absent_sections(report: Document) -> Document:
    """Each section today's reports always write, at its empty value (EMPTY_SECTIONS) where it is absent."""
    absent = {key: _fresh(empty) for key, empty in EMPTY_SECTIONS.items() if key not in report}
    return {**report, **absent} if absent else report


def empty_effective_where_null(report: Document) -> Document:
    """What each contestant ran with was null before it was recorded: now an empty section, as EMPTY_SECTIONS."""
    return {**report, "effective": {}} if report["effective"] is None else report


def fill_request_options(report: Document) -> Document:
    """The request's options (core.request.options.GenerationOptions as asked), empty where the request lacks them."""
    request = report["request"]
    return {**report, "request": {**request, "options": {}}} if isinstance(request, dict) and \
        "options" not in request else report


def rename_engine_warmup_ms_to_setup_ms(report: Document) -> Document:
    warmup = report["warmup"]
    if not isinstance(warmup, dict):
        return report
    return {**report, "warmup": {name: _renamed(entry, {"engine_warmup_ms": "setup_ms"})
                                 for name, entry in warmup.items()}}


def rename_no_kernel_trial_to_no_kernel_measurement(report: Document) -> Document:
    return {**report, "request": _renamed(report["request"], {"no_kernel_trial": "no_kernel_measurement"})}


def add_decode_products(report: Document) -> Document:
    """environment.decode_products, for a report written before it was recorded: as the reproduce command set it,
    for a compiled CUDA run (whose environment records its o_proj); None otherwise, as today's reports say."""
    env = report["environment"]
    if not isinstance(env, dict) or "decode_products" in env:
        return report
    products = None
    if env.get("o_proj") is not None and str(env.get("device", "")).startswith("cuda"):
        products = command_assignments(report["command"]).get(SWITCH["decode_products"].variable, "inductor")
    return _with_environment(report, decode_products=products)


def add_decode_layer(report: Document) -> Document:
    """The fused decoder layers came after the recorded products: a report from before ran without them where it
    compiled on CUDA."""
    env = report["environment"]
    if not isinstance(env, dict) or "decode_layer" in env:
        return report
    return _with_environment(report, decode_layer="off" if env.get("decode_products") is not None else None)


def add_step_commit(report: Document) -> Document:
    """Before SYNCSCOPE_STEP_COMMIT a greedy step-graph step compiled its argmax only."""
    env = report["environment"]
    if not isinstance(env, dict) or "step_commit" in env:
        return report
    options = _asked_options(report)
    greedy_step_graph = options.get("compile") == STEP_GRAPH and not options.get("do_sample")
    return _with_environment(report, step_commit="argmax" if greedy_step_graph else None)


def add_tuning(report: Document) -> Document:
    """environment.tuning of a report written before it was recorded (core.tuning): each switch as its reproduce
    command set it, else as its environment recorded it, else its default; the inductor options as recorded. A
    retired switch only where it was not at its default (what its default did is what runs now)."""
    env = report["environment"]
    if not isinstance(env, dict) or isinstance(env.get("tuning"), dict):
        return report
    assigned = command_assignments(report["command"])
    tuning = {switch.key: _switch_before_the_field(switch.key, switch.variable, switch.choices, report, assigned)
              for switch in SWITCHES}
    for retired in RETIRED:
        value = _switch_before_the_field(retired.key, retired.variable, retired.choices, report, assigned)
        if value != retired.default:
            tuning[retired.key] = value
    return _with_environment(report, tuning=tuning)


def add_summary_kernel_fields(report: Document) -> Document:
    """The summary's kernel_ms_per_step and kernel_busy_of_timed_steps of a report written before the summary held
    them, from its kernel measurement as core.report.build.summarize derives them today (the measurement's kernel ms
    per step, and kernel_share_of_timed_steps of it over the median trial's step)."""
    measurements = report.get("kernel_measurement")
    if not isinstance(report["summary"], dict) or not isinstance(measurements, dict):
        return report
    summary = dict(report["summary"])
    for name, measured in measurements.items():
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
    return {**report, "summary": summary}


BENCH_STEPS = (
    Step(1, 1, rename_kernel_trial_to_kernel_measurement),
    Step(2, 1, fill_absent_sections),
    Step(3, 1, empty_effective_where_null),
    Step(4, 1, fill_request_options),
    Step(5, 1, rename_engine_warmup_ms_to_setup_ms),
    Step(6, 1, rename_no_kernel_trial_to_no_kernel_measurement),
    Step(7, 1, add_decode_products),
    Step(8, 1, add_decode_layer),
    Step(9, 1, add_step_commit),
    Step(10, 1, add_tuning),
    Step(11, 1, add_summary_kernel_fields),
)


def _fresh(empty: Any) -> Any:
    return empty.copy() if isinstance(empty, dict | list) else empty


def _with_environment(report: Document, **fields: Any) -> Document:
    return {**report, "environment": {**report["environment"], **fields}}


def _asked_options(report: Document) -> dict[str, Any]:
    options = report["request"].get("options") if isinstance(report["request"], dict) else None
    return options if isinstance(options, dict) else {}


def _renamed(entry: Any, names: dict[str, str]) -> Any:
    """`entry` with each old key under its new name; where the new one is there already, both stay as they are."""
    if not isinstance(entry, dict) or not any(old in entry and new not in entry for old, new in names.items()):
        return entry
    return {names[key] if key in names and names[key] not in entry else key: value for key, value in entry.items()}


def _median_of_trials(runs: Any, name: str, key: str) -> float | None:
    """The median over a contestant's trials of one of its timings (as core.report.build.summarize's median_of)."""
    values = [r["timings"][key] for r in runs if isinstance(r, dict) and r.get("contestant") == name
              and isinstance(r.get("timings"), dict) and is_number(r["timings"].get(key))] \
        if isinstance(runs, list) else []
    if not values:
        return None
    ordered, middle = sorted(values), len(values) // 2
    return ordered[middle] if len(values) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


# Environment fields that recorded a switch's value where the switch acted (None elsewhere), under its key
_RECORDED_AS_SET = ("o_proj", "step_commit", "kernel_pdl", "decode_swiglu", "attention_prefetch", "product_prefetch")


def _switch_before_the_field(key: str, variable: str, choices: tuple[str, ...], report: Document,
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


def _products_switch_before_the_field(report: Document) -> str:
    """The `decode_products` switch of a report whose command did not set it: "auto", unless the products it recorded
    are not those "auto" gives its compile (before "auto", the default was "inductor" everywhere)."""
    ran = report["environment"].get("decode_products")
    auto = "triton" if _asked_options(report).get("compile") == STEP_GRAPH else "inductor"
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


# ------------------------------------------------------------------------------------------------ the page record

def fill_empty_page_parts(page: Document) -> Document:
    """Each part of the page's record (EMPTY_PARTS), empty where it is null or absent."""
    return {**page, **{key: _fresh(empty) for key, empty in EMPTY_PARTS.items() if page.get(key) is None}}


def rename_monitor_kind_to_source(page: Document) -> Document:
    monitor = page.get("monitor")
    return {**page, "monitor": _renamed(monitor, {"kind": "source"})} if isinstance(monitor, dict) else page


def drop_null_monitor(page: Document) -> Document:
    """A null monitor is no samples: absent, as the page writes a record without them."""
    return {key: value for key, value in page.items() if key != "monitor"} if \
        "monitor" in page and page["monitor"] is None else page


PAGE_RECORD_STEPS = (
    Step(1, 1, fill_empty_page_parts),
    Step(2, 1, rename_monitor_kind_to_source),
    Step(3, 1, drop_null_monitor),
)


# ------------------------------------------------------------------------------------ the audit and load reports

def fill_environment(report: Document) -> Document:
    """The environment section that core.audit and the load report always write, empty where it is absent."""
    return report if "environment" in report else {**report, "environment": {}}


STEPS = {BENCH: BENCH_STEPS, AUDIT: (Step(1, 1, fill_environment),), LOAD: (Step(1, 1, fill_environment),)}
