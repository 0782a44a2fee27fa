"""core.audit on the loops people write (tests/audit_loops/), on the CPU. Each loop states its truth in comments: the
step (`# step: NAME`), its own lines that read (`# read: KIND`, `xN` when a step reads there N times), and reads in
a library (`# read at FILE:LINE: KIND`). The audit must find every one with its count per decode step, and no other
site, with the step named after the model. tests/test_cuda_audit_loops.py checks the same loops against PyTorch's
sync debug mode on a GPU."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from core.audit import audit_script, main

LOOPS = Path(__file__).resolve().parent / "audit_loops"
NEW_TOKENS = 6  # steps: the prefill and 5 more; the decode steps counted are steps 1-4
OWN = "<the loop>"  # the file of a loop's own lines, in the dicts of sites below


@dataclass(frozen=True)
class Truth:
    step: str
    reads: dict[tuple[str, int], tuple[str, float]]  # (file, line) -> (kind, reads per decode step)
    compiled: str | None  # what the loop compiles with fullgraph=True


def loop_truth(name: str) -> Truth:
    """What tests/audit_loops/NAME.py says the audit must find."""
    text = (LOOPS / f"{name}.py").read_text()
    reads: dict[tuple[str, int], tuple[str, float]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if own := re.search(r"\S.*# read: ([a-z0-9-]+)(?: x(\d+))?", line):
            reads[(OWN, number)] = (own.group(1), float(own.group(2) or 1))
        elif library := re.match(r"# read at (\S+):(\d+): ([a-z0-9-]+)", line):
            reads[(library.group(1), int(library.group(2)))] = (library.group(3), 1.0)
    step = re.search(r"^# step: (\w+)", text, re.M)
    compiled = re.search(r"^# compiled: (\S+)", text, re.M)
    assert step, f"{name}.py states no step"
    return Truth(step.group(1), reads, compiled.group(1) if compiled else None)


def per_step_sites(report: dict[str, Any], name: str) -> dict[tuple[str, int], tuple[str, float]]:
    """The sites read in the decode steps, as loop_truth states them."""
    return {(OWN if site["file"].endswith(f"audit_loops/{name}.py") else site["file"], site["line"]):
            (site["kind"], site["per_step"]) for site in report["sites"] if site["per_step"]}


def audited(name: str, **options: Any) -> dict[str, Any]:
    report, code = audit_script(str(LOOPS / f"{name}.py"), ["cpu", str(NEW_TOKENS)], **options)
    assert code == 0, f"{name}.py exited with {code}"
    return report


EAGER = ["threaded_streamer", "text_streamer", "direct_forward", "tensor_each_step", "no_kv_cache", "numpy_token",
         "batched_loop"]
ALL = [*EAGER, pytest.param("compiled_step", marks=pytest.mark.slow)]  # inductor compiles it: 10-45 s on 2 cores


def check_steps(report: dict[str, Any], name: str) -> None:
    """The steps are the model's forward calls, named after the model (and the thread, where not the script's)."""
    model, _, thread = (report["step_module"] or "").partition(" on thread ")
    assert model == loop_truth(name).step and report["steps"] == NEW_TOKENS, report["step_module"]
    assert bool(thread) == (name == "threaded_streamer") and report["step_thread"] == (thread or None)


@pytest.mark.parametrize("name", EAGER)
def test_each_loop_s_steps_are_its_model_s_forward_calls(name):
    check_steps(audited(name), name)


@pytest.mark.parametrize("name", EAGER)
def test_each_loop_s_reads_are_found_at_their_lines_with_their_counts_and_nothing_else(name):
    report = audited(name)
    truth = loop_truth(name).reads
    assert per_step_sites(report, name) == truth
    copies = sum(per_step for kind, per_step in truth.values() if kind == "h2d-copy")
    assert report["copies_per_decode_step"] == copies, "host-to-device copies counted as copies"
    assert report["reads_per_decode_step"] == sum(per_step for _, per_step in truth.values()), "every wait, copies too"


def test_a_read_in_a_helper_of_a_forward_called_directly_is_inside_the_step_with_its_caller():
    report = audited("direct_forward")
    site = next(s for s in report["sites"] if s["function"] == "get_pos")
    assert site["where"] == "inside a step" and site["per_step"] == 2.0
    call_line = next(number for number, line in enumerate((LOOPS / "direct_forward.py").read_text().splitlines(), 1)
                     if "pos = get_pos(cache_seqlens)" in line)
    assert site["callers"][0].endswith(f"audit_loops/direct_forward.py:{call_line} forward"), site["callers"]


@pytest.mark.parametrize("steps_of", ["TinyDecoder", "direct_forward:TinyDecoder", "TinyDecoder.forward"])
def test_steps_of_names_a_class_or_its_method_though_the_loop_calls_forward_directly(steps_of):
    report = audited("direct_forward", steps_of=steps_of)
    assert report["steps"] == NEW_TOKENS and report["reads_per_decode_step"] == 2.0


@pytest.mark.slow
def test_a_step_compiled_with_fullgraph_runs_to_its_end_and_the_report_says_what_it_could_not_see(tmp_path, capsys):
    out = tmp_path / "audit.json"
    assert main(["--json", str(out), "--", str(LOOPS / "compiled_step.py"), "cpu", str(NEW_TOKENS)]) == 0
    report = json.loads(out.read_text())
    check_steps(report, "compiled_step")
    assert per_step_sites(report, "compiled_step") == loop_truth("compiled_step").reads
    (line,) = report["not_seen"]
    assert line.startswith(f"{loop_truth('compiled_step').compiled} (tests/audit_loops/compiled_step.py:")
    assert "fullgraph=True" in line and "sync debug mode" in line
    assert f"not seen: {line}" in " ".join(capsys.readouterr().out.split())  # the summary wraps it


def test_a_batched_loops_fixes_say_what_the_pipelined_batched_loop_does_instead():
    sites = [s for s in audited("batched_loop")["sites"] if s["per_step"]]
    assert len(sites) == 4
    for site in sites:
        assert "(as the pipelined batched loop" in site["fix"], site
        assert "core/" not in site["fix"], "a user's loop gets no path of this repository"
    reads = [s for s in sites if s["kind"] == "tolist"]
    assert all("`lag` steps later" in s["fix"] and "keeps its slot" in s["fix"] for s in reads)
    copies = [s for s in sites if s["kind"] == "h2d-copy"]
    assert all("positions += live" in s["fix_code"] for s in copies)


def test_fail_on_sync_zero_fails_the_threaded_streamer(capsys):
    code = main(["--fail-on-sync", "0", "--", str(LOOPS / "threaded_streamer.py"), "cpu", str(NEW_TOKENS)])
    assert code == 1, capsys.readouterr().out
    assert "FAIL: a decode step reads the device 2 times (--fail-on-sync 0)" in capsys.readouterr().out


def test_a_batched_loops_printed_sites_add_up_to_its_reads_per_decode_step(capsys):
    assert main(["--", str(LOOPS / "finished_rows.py"), "cpu", "21"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # the summary, unwrapped
    headline = re.search(r"([\d.]+) reads of device values per decode step", text)
    listed = [float(n) for n in re.findall(r"([\d.]+)/step ", text)]
    assert headline and listed == [1.0, 0.16], text
    assert sum(listed) == pytest.approx(float(headline.group(1)), abs=0.005 * len(listed))
    finished_row = text[text.index("0.16/step"):text.index("fix:", text.index("0.16/step"))]
    assert "(3 reads in 19 decode steps)" in finished_row and "first or last step" not in finished_row
    assert text.count("first or last step") == 1
    assert "and 1 site read only in setup, the first or last step, not counted above" in text
