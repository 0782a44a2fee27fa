"""benchmarks/decode_attention.py: the CLI once per compiled decode attention kernel, side by side.

The slow tests run every kernel in one process (`--one-process`): torch and the model's code are imported once, not
once a kernel (the four kernels' test took 14 s that way on the 2-core machine, 34-40 s with a process a kernel); a
process a run, the script's default, is the failing-run test's path."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "decode_attention.py"
spec = importlib.util.spec_from_file_location("decode_attention", SCRIPT)
decode_attention = importlib.util.module_from_spec(spec)
spec.loader.exec_module(decode_attention)


def test_it_needs_a_compile_mode_for_the_kernels_to_matter(capsys):
    with pytest.raises(SystemExit) as exit_info:
        decode_attention.main(["--", "--model", "tiny-random"])
    assert exit_info.value.code == 2 and "--compile" in capsys.readouterr().err


@pytest.mark.slow
def test_a_failing_kernel_run_is_a_row_that_says_why(tmp_path):
    result = decode_attention.run_kernel("reduce", ["--model", "no-such-model-here"], tmp_path, timeout_s=120)
    row = decode_attention.row(result)
    assert "exit code 2" in row["error"] and "failed: exit code 2" in decode_attention.format_rows([row])


def test_the_reason_for_a_failure_is_the_exception_not_the_warnings_printed_after_it():
    stderr = ("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
              "torch._inductor.exc.InductorError: CompilationError: at 46:39: Both operands must be same dtype\n"
              "core.bench: error: rank 0 of 2 failed (exit code 1); the other ranks were stopped\n"
              "  warnings.warn('resource_tracker: There appear to be %d '\n")
    assert decode_attention.failure_reason(stderr).startswith("torch._inductor.exc.InductorError: CompilationError")
    assert decode_attention.failure_reason("core.bench: error: no model\nwarn\n") == "core.bench: error: no model"
    assert decode_attention.failure_reason("") == "no output"


@pytest.mark.slow
def test_every_kernel_runs_the_cli_and_gives_a_row(tmp_path, capsys):
    out = tmp_path / "attention.json"
    code = decode_attention.main(["--one-process", "--out", str(out), "--", "--model", "tiny-random", "--device",
                                  "cpu", "--cache", "static", "--compile", "default", "--max-new-tokens", "6",
                                  "--trials", "1"])
    assert code == 0
    written = json.loads(out.read_text())
    rows = written["rows"]
    assert [r["kernel"] for r in rows] == ["reduce", "split", "sdpa", "triton"]
    assert all(r["repeats"] and r["decode_tokens_per_s"] > 0 for r in rows)
    kernels = [r["transforms"][-1].removeprefix("compiled decode attention: ") for r in rows]
    assert kernels == ["reduce", "split", "sdpa", "reduce"]  # the CPU runs the reductions for "triton"
    assert all(run["report"]["warmup"]["naive"]["graphs_compiled"] >= 1 for run in written["runs"]), \
        "each run compiled its own decode step, as in a process of its own"
    assert "split" in capsys.readouterr().out


@pytest.mark.slow
def test_with_pdl_placements_each_kernel_runs_once_per_placement(tmp_path, capsys):
    out = tmp_path / "attention.json"
    code = decode_attention.main(["--one-process", "--kernels", "reduce", "--pdl", "off", "safe", "--out", str(out),
                                  "--", "--model", "tiny-random", "--device", "cpu", "--cache", "static",
                                  "--compile", "default", "--max-new-tokens", "4", "--trials", "1"])
    assert code == 0
    rows = json.loads(out.read_text())["rows"]
    # PDL is for step-graph compiles on a GPU: each row says what was asked and what ran.
    assert [(r["kernel"], r["pdl_asked"], r["pdl"]) for r in rows] == [("reduce", "off", "off"),
                                                                       ("reduce", "safe", "off")]
    assert capsys.readouterr().out.splitlines()[0].split()[:2] == ["kernel", "pdl"]


def test_runs_the_one_process_did_not_finish_are_rows_that_say_why(tmp_path):
    runs = [("reduce", None), ("split", "off")]
    results = decode_attention.run_in_one_process(runs, ["--model", "tiny-random", "--compile", "default"], tmp_path,
                                                  timeout_s=0.01)  # killed long before torch is imported
    rows = [decode_attention.row(result) for result in results]
    assert [(r["kernel"], r.get("pdl")) for r in rows] == [("reduce", None), ("split", "off")]
    assert all(r["error"].startswith("the one process ended first (no report within 0 s for 2 runs)") for r in rows)
