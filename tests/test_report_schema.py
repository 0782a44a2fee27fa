"""core.documents.schema: one way in for the four documents, torch-free, and every committed report still loads."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.documents import bench_report, fields
from core.documents.files import report_paths
from core.documents.kinds import AUDIT, BENCH, LOAD, PAGE, PAGE_REPORT_SCHEMA, ReportError, kind_of
from core.documents.schema import load
from core.documents.upgrades import upgrade
from core.tuning import Tuning

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "lab" / "results"
DOCUMENTS = Path(__file__).resolve().parent.parent / "core" / "documents"


def test_the_documents_modules_import_no_torch():
    modules = sorted(f"core.documents.{p.stem}" for p in DOCUMENTS.glob("*.py") if p.stem != "__init__")
    assert {"core.documents.schema", "core.documents.upgrades", "core.documents.bench_report"} <= set(modules)
    code = f"import sys, {', '.join(modules)}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def committed_documents() -> list[Path]:
    """Every committed file whose schema is one of ours (the others are benchmark scripts' own results)."""
    found = []
    for path in report_paths(RESULTS, recursive=True):
        data = path.read_bytes()
        document = json.loads(gzip.decompress(data) if path.name.endswith(".gz") else data)
        if kind_of(document) is not None:
            found.append(path)
    return found


@pytest.mark.slow
def test_every_committed_report_loads():
    paths = committed_documents()
    kinds = {kind_of(load(path)) for path in paths}
    assert len(paths) > 100 and kinds == {BENCH, PAGE, AUDIT, LOAD}


def test_an_old_report_gets_todays_sections_and_names():
    old = {"schema": "syncscope.bench/1", "warmup": {"naive": {"total_ms": 1.0, "engine_warmup_ms": 2.0}},
           "dashboard": {"t_end": 1.0, "monitor": {"kind": "nvml", "samples": []}, "notices": None}}
    page = upgrade(old)
    assert page["schema"] == PAGE_REPORT_SCHEMA and "dashboard" not in page["report"]
    assert page["report"]["warmup"]["naive"] == {"total_ms": 1.0, "setup_ms": 2.0}
    assert page["page"]["monitor"] == {"source": "nvml", "samples": []} and page["page"]["notices"] == []
    assert page["report"]["verdict"] is None and page["report"]["self_consistent"] == {}
    assert "sync_audit" not in page["report"], "a phase that did not run has no section"
    assert old["warmup"]["naive"]["engine_warmup_ms"] == 2.0, "the document given is left as it was"


def test_an_old_reports_kernel_trial_is_read_as_the_kernel_measurement():
    old = {"schema": "syncscope.bench/1", "request": {"no_kernel_trial": True},
           "kernel_trial": {"naive": {"kernel_busy_ms_per_step": 0.1}}}
    report = upgrade(old)
    assert report["kernel_measurement"] == {"naive": {"kernel_busy_ms_per_step": 0.1}} and "kernel_trial" not in report
    assert report["request"] == {"no_kernel_measurement": True, "options": {}}


def test_an_old_reports_kernel_numbers_are_filled_in_as_todays_summary_derives_them():
    """The README's featured report (2026-12-01) predates the summary's kernel fields: its table says kernels 1.09 /
    1.10 ms and 67% / 91% of the step (reduce-overhead naive / pipelined), and so does Replay."""
    from dashboard.views.run_summary import DETAIL_HEADERS, summary_tables

    report = load(RESULTS / "h200-2026-12-01" / "audit-ro-1b.json.gz")
    naive, pipelined = report["summary"]["naive"], report["summary"]["pipelined"]
    assert (round(naive["kernel_ms_per_step"], 2), round(pipelined["kernel_ms_per_step"], 2)) == (1.09, 1.10)
    assert (f"{naive['kernel_busy_of_timed_steps']:.0%}", f"{pipelined['kernel_busy_of_timed_steps']:.0%}") == \
        ("67%", "91%")
    assert report["summary"]["hf"]["kernel_busy_of_timed_steps"] is None, "its measurement kept no kernel ms"
    _, details = summary_tables(report)
    shown = {row[0]: dict(zip(DETAIL_HEADERS, row)) for row in details}
    assert shown["naive"]["kernel ms/step (kernel measurement)"] == 1.089
    assert (shown["naive"]["kernel % of the timed step"], shown["pipelined"]["kernel % of the timed step"]) == \
        (67.2, 91.0)
    raw = json.loads(gzip.decompress((RESULTS / "h200-2026-12-01" / "audit-ro-1b.json.gz").read_bytes()))
    assert "kernel_ms_per_step" not in raw["summary"]["naive"], "the file as it was written"
    newer = upgrade({**raw, "summary": {"naive": {**raw["summary"]["naive"], "kernel_busy_of_timed_steps": 0.5}}})
    assert newer["summary"]["naive"]["kernel_busy_of_timed_steps"] == 0.5, "a field the report has is kept"


def test_a_gzip_past_the_limit_is_refused_without_inflating_it_whole():
    bomb = gzip.compress(b" " * (8 * 2**20))
    with pytest.raises(ReportError, match="decompresses to more than 1 MiB"):
        load(bomb, 2**20)
    with pytest.raises(ReportError, match="cut short"):
        load(gzip.compress(b'{"a": 1}')[:-6])


def test_a_document_of_the_other_kind_says_so(tmp_path):
    named_first = sorted(report_paths(RESULTS, recursive=True), key=lambda path: "audit" not in path.name)
    audit = next(p for p in named_first if kind_of(load(p)) == AUDIT)
    with pytest.raises(ReportError, match="an audit report of a program") as refused:
        load(audit, expect=BENCH)
    assert refused.value.found == AUDIT and str(refused.value).startswith(f"{audit}: ")
    too_big = tmp_path / "big.json"
    too_big.write_bytes(b" " * 2048)
    with pytest.raises(ReportError, match="limited to"):
        load(too_big, 1024)


@pytest.mark.parametrize(("device", "o_proj", "command", "products"), [
    ("cuda:0", "library", "SYNCSCOPE_DECODE_PRODUCTS=triton python -m core.bench --compile step-graph", "triton"),
    ("cuda:0", "library", "python -m core.bench --compile step-graph", "inductor"),
    ("cuda:0", None, "python -m core.bench", None),  # nothing compiled
    ("cpu", "library", "SYNCSCOPE_DECODE_PRODUCTS=triton python -m core.bench --compile default", None),
])
def test_a_report_from_before_the_product_kernel_was_recorded_gets_it_from_its_command(device, o_proj, command,
                                                                                       products):
    old = {"schema": "syncscope.bench/1", "command": command, "environment": {"device": device, "o_proj": o_proj}}
    assert upgrade(old)["environment"]["decode_products"] == products
    recorded = {**old, "environment": {**old["environment"], "decode_products": "inductor"}}
    assert upgrade(recorded)["environment"]["decode_products"] == "inductor"  # as it was written
    # the fused decoder layers came after both: a report from before ran without them where it compiled on CUDA
    assert upgrade(old)["environment"]["decode_layer"] == ("off" if products else None)
    fused = {**old, "environment": {**old["environment"], "decode_layer": "fused"}}
    assert upgrade(fused)["environment"]["decode_layer"] == "fused"


def _tuning_of(command: str | None = None, request: dict | None = None, **environment) -> dict:
    """environment.tuning of a report from before it was recorded, as upgrade() fills it in."""
    old = {"schema": "syncscope.bench/1", "command": command, "request": request or {}, "environment": environment}
    return upgrade(old)["environment"]["tuning"]


def test_a_report_from_before_the_tuning_was_recorded_gets_every_switch_from_its_command_and_fields():
    assert _tuning_of() == Tuning().as_report()  # no command, no fields: every switch at its default
    command = "SYNCSCOPE_PDL=safe SYNCSCOPE_TP_BARRIER=asm SYNCSCOPE_O_PROJ=library python -m core.bench --model x"
    assert _tuning_of(command) == {**Tuning().as_report(), "pdl": "safe", "tp_barrier": "asm"}
    # its fields: the inductor options whole (the command's words do not hold a JSON object with spaces), the
    # output projection and the step's commit where they acted
    assert _tuning_of(inductor_options={"max_autotune": False}, o_proj="inductor", step_commit="whole") == {
        **Tuning().as_report(), "inductor_options": {"max_autotune": False}, "o_proj": "inductor",
        "step_commit": "whole"}
    assert _tuning_of("SYNCSCOPE_O_PROJ=library python -m core.bench", o_proj="inductor")["o_proj"] == "library"
    # quoted values, as the command wrote them: a JSON object with spaces does not end the assignments
    quoted = _tuning_of("""SYNCSCOPE_INDUCTOR_OPTIONS='{"max_autotune": false}' SYNCSCOPE_DECODE_LAYER='off' python""")
    assert quoted == {**Tuning().as_report(), "inductor_options": {"max_autotune": False}, "decode_layer": "off"}
    recorded = {"schema": "syncscope.bench/1", "environment": {"tuning": {"pdl": "inductor"}}}
    assert upgrade(recorded)["environment"]["tuning"] == {"pdl": "inductor"}  # as it was written


@pytest.mark.parametrize(("compile_mode", "ran", "switch"), [
    ("step-graph", "triton", "auto"),  # what "auto" gives a step-graph compile
    ("step-graph", "inductor", "inductor"),  # before "auto": inductor's products were the default everywhere
    ("default", "inductor", "auto"), (None, None, "auto")])
def test_the_product_switch_of_a_report_from_before_is_what_its_products_say(compile_mode, ran, switch):
    options = {"compile": compile_mode} if compile_mode else {}
    assert _tuning_of(request={"options": options}, device="cuda:0", o_proj="library" if ran else None,
                      decode_products=ran)["decode_products"] == switch


def test_a_report_that_set_a_switch_removed_since_keeps_it_and_only_then():
    """The switches that lost their A/B (core.tuning.RETIRED): their default is what runs now, so a report of theirs
    at the default holds nothing of them; one that set another value keeps it, from its command or its field."""
    assert not set(_tuning_of()) - set(Tuning().as_report())
    assert _tuning_of(kernel_pdl="off", decode_swiglu="down", attention_prefetch="off", product_prefetch="off") == \
        Tuning().as_report()
    assert _tuning_of(kernel_pdl="unsupported") == Tuning().as_report()  # asked for where it could not run
    fields = _tuning_of(kernel_pdl="wait", decode_swiglu="gate-up", attention_prefetch="on", product_prefetch="on")
    assert {key: fields[key] for key in ("kernel_pdl", "decode_swiglu", "attention_prefetch", "product_prefetch")} == \
        {"kernel_pdl": "wait", "decode_swiglu": "gate-up", "attention_prefetch": "on", "product_prefetch": "on"}
    command = "SYNCSCOPE_APPEND_IN_ATTENTION=on SYNCSCOPE_KERNEL_PDL=prefetch python -m core.bench --model x"
    assert _tuning_of(command, kernel_pdl="unsupported") == {**Tuning().as_report(), "append_in_attention": "on",
                                                            "kernel_pdl": "prefetch"}


@pytest.mark.parametrize(("options", "commit"), [
    ({"compile": "step-graph", "do_sample": False}, "argmax"),  # a greedy step-graph step compiled its argmax only
    ({"compile": "step-graph", "do_sample": True}, None),       # sampling: its token choice was never compiled
    ({"compile": "reduce-overhead"}, None), ({}, None)])
def test_a_report_from_before_the_step_commit_says_what_its_step_compiled(options, commit):
    old = {"schema": "syncscope.bench/1", "request": {"options": options}, "environment": {}}
    assert upgrade(old)["environment"]["step_commit"] == commit
    whole = {**old, "environment": {"step_commit": "whole"}}
    assert upgrade(whole)["environment"]["step_commit"] == "whole"


@pytest.mark.parametrize(("values", "numbers"), [
    ([1, 2.5, 0.0], True), ([], True), ([1e308, 1e308], True),  # finite items whose sum is not: asked item by item
    ([1.0, float("inf")], False), ([float("nan")], False), ([float("inf"), float("-inf")], False),
    ([1.0, True], False), ([1.0, "2"], False), ([1.0, None], False),
])
def test_a_list_of_numbers_is_told_apart_as_item_by_item(values, numbers):
    assert fields.all_numbers(values) is numbers
    assert all(fields.is_number(v) for v in values) is numbers
    report = {"contestant": "naive", "trial": 1, "order": 0,
              "timings": {"tokens_per_s": 1.0, "total_ms": 1.0, "step_ms": values}}
    if numbers:
        bench_report.check_run(report, 0)
    else:
        with pytest.raises(ReportError, match=r"timings\.step_ms is not a list of numbers"):
            bench_report.check_run(report, 0)
