"""core.bench: the command line (flags, the table it prints, the files it writes, one-line errors)."""

import json
from pathlib import Path

import pytest

from core.bench import main
from core.compare import compare
from core.loops.prompt import synthetic_prompt
from core.request.options import BenchRequest, GenerationOptions
from core.request.run_schema import python_command
from tests.conftest import TINY


def test_cli_writes_json_and_prints_table(tmp_path, capsys):
    out = tmp_path / "r.json"
    code = main(["--model", "tiny-random", "--device", "cpu", "--prompt-tokens", "12", "--max-new-tokens", "6",
                 "--trials", "2", "--ignore-eos", "--json", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    assert report["schema"] == "syncscope.bench/1"
    assert report["request"]["prompt"] == synthetic_prompt(12)
    assert len(report["runs"]) == 4
    printed = capsys.readouterr().out
    assert "pipelined/naive" in printed
    expected = (f"{python_command()} -m core.bench --model tiny-random --device cpu --dtype fp32 --prompt-tokens 12 "
                "--max-new-tokens 6 --batch 1 --trials 2 --ignore-eos")
    assert report["command"].startswith(expected) and f"\nreproduce: {report['command']}\n" in printed


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--lag", "0"], "--lag must be between 1 and 64"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
        (["--trials", "0"], "--trials must be >= 1"),
        (["--batch", "0"], "--batch must be >= 1"),
        (["--model", "synthetic:nope"], "unknown synthetic shape"),
        (["--cache", "paged"], "invalid choice"),
        (["--max-new-tokens", "many"], "invalid int value"),
        (["--prompt", " "], "prompt is empty"),
        (["--device", "gpu0"], "unknown device"),
    ],
)
def test_cli_bad_input_is_one_line_and_nonzero(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        raise SystemExit(main(["--model", "tiny-random", "--device", "cpu", *argv]))
    assert exit_info.value.code != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err


@pytest.mark.slow
def test_a_report_that_cannot_be_written_at_the_end_is_one_line_and_saved_elsewhere(tmp_path):
    """/dev/full passes the early check (it exists and is writable) and fails at write time, as a full disk does."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "TMPDIR": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "core.bench", "--model", "tiny-random", "--device", "cpu",
                           "--prompt-tokens", "8", "--max-new-tokens", "4", "--trials", "1", "--json", "/dev/full"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1
    err = done.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "could not write the report to /dev/full (No space left on device)" in err
    saved = err.split("the report was saved to ")[1].split(" instead")[0]
    assert os.path.dirname(saved) == str(tmp_path)
    assert json.loads(Path(saved).read_text(encoding="utf-8"))["schema"] == "syncscope.bench/1"
    assert "pipelined/naive" in done.stdout  # the table was printed before the write


def test_a_json_path_that_cannot_be_written_fails_before_any_work(capsys, monkeypatch):
    from cli import bench

    def loading(*args, **kwargs):
        raise AssertionError("the model was loaded before the path was checked")

    monkeypatch.setattr(bench, "load_model", loading)  # an order, not a time: nothing is loaded before the refusal
    assert bench.main(["--model", TINY, "--device", "cpu", "--json", "/missing/dir/x.json"]) == 2
    assert "the folder /missing/dir does not exist" in capsys.readouterr().err


def test_an_eos_id_outside_the_vocabulary_is_refused(capsys):
    from core.bench import main

    assert main(["--model", TINY, "--device", "cpu", "--eos-token-id", "999999999", "--max-new-tokens", "2"]) == 2
    assert "outside the model's vocabulary" in capsys.readouterr().err


def test_help_gives_each_default_once():
    from cli.bench import build_parser

    bench_help = build_parser().format_help()
    assert "(default: None)" not in bench_help and "(default: 64)" in bench_help


def test_aa_control_runs_the_pipelined_loop_twice_and_reports_the_noise_ratio(tiny, capsys):
    code = main(["--model", "tiny-random", "--device", "cpu", "--prompt-tokens", "8", "--max-new-tokens", "5",
                 "--trials", "2", "--ignore-eos", "--aa"])
    assert code == 0
    out = capsys.readouterr().out
    assert "pipelined-again" in out and "pipelined/pipelined-again" in out
    request = BenchRequest(prompt="Hello", options=GenerationOptions(max_new_tokens=5, ignore_eos=True), trials=2,
                           contestants=("pipelined", "pipelined-again"))
    report = compare(tiny, request)
    again = [r for r in report["runs"] if r["contestant"] == "pipelined-again"]
    assert len(again) == 2 and report["identical"]["pipelined-again"]
    assert report["ratios"]["pipelined/pipelined-again"] > 0


# ------------------------------------------------------------------------------------- interrupted runs

def _bench_process(tmp_path, *flags, env_extra=None):
    import os
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    return subprocess.Popen([sys.executable, "-m", "core.bench", "--model", "tiny-random", "--device", "cpu",
                             "--prompt-tokens", "8", "--max-new-tokens", "8", "--ignore-eos", "--progress", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=Path(__file__).resolve().parent.parent, preexec_fn=_interruptible)


def _interruptible() -> None:
    """In the child: SIGINT back to its default, so that Python turns it into KeyboardInterrupt as in a terminal.
    A suite started in the background (`make test &`) hands its children SIGINT ignored, and Python then leaves
    it ignored."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for_line(process, marker: str, limit_s: float = 600) -> list[str]:
    """stderr's lines up to the first that holds `marker` (--progress writes them as they happen)."""
    import queue
    import threading

    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stderr] + [lines.put(None)],
                     daemon=True).start()
    seen = []
    while True:
        line = lines.get(timeout=limit_s)
        assert line is not None, f"the run ended before {marker!r}: {''.join(seen)}"
        seen.append(line)
        if marker in line:
            process.seen_lines = lines
            return seen


def _rest(process) -> tuple[str, str]:
    stdout = process.stdout.read()
    process.wait(timeout=300)
    rest = []
    while (line := process.seen_lines.get(timeout=60)) is not None:
        rest.append(line)
    return stdout, "".join(rest)


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_run_interrupted_after_two_rounds_writes_the_finished_trials_and_prints_the_table(tmp_path, signum, code):
    """The issue's check: `core.bench` sent SIGINT after two rounds writes a report that Replay (open_report) opens."""
    import signal

    from dashboard.service.page_record import open_report

    out = tmp_path / "r.json"
    trace = tmp_path / "t.json"
    process = _bench_process(tmp_path, "--trials", "500", "--json", str(out), "--trace", str(trace))
    _wait_for_line(process, "round 2 of 500 done")
    for _ in range(2 if signum == "SIGINT" else 1):  # a second Ctrl-C, as impatient hands give, keeps it too
        process.send_signal(getattr(signal, signum))
    stdout, stderr = _rest(process)
    assert process.returncode == code, stderr
    assert "Traceback" not in stderr
    report = open_report(out.read_bytes()).report
    done = report["interruption"]["trials_done"]
    assert report["interrupted"] is True and done >= 2 and report["interruption"]["trials_planned"] == 500
    assert report["interruption"]["signal"] == signum
    assert report["summary"]["naive"]["trials"] == report["summary"]["pipelined"]["trials"] == done
    assert f"note: this run was cut short by {signum} after {done} of 500 rounds of trials" in stdout
    assert "decode spread" in stdout and "What this run shows:" in stdout and "cut short" in stdout
    assert f"wrote {out}" in stdout and f"wrote {trace}" in stdout
    assert json.loads(trace.read_text())["traceEvents"]


@pytest.mark.slow
def test_an_interrupt_during_the_warm_up_is_one_line_and_writes_nothing(tmp_path):
    import signal

    out = tmp_path / "r.json"
    process = _bench_process(tmp_path, "--trials", "3", "--max-new-tokens", "64", "--json", str(out))
    _wait_for_line(process, "warm-up of naive")
    process.send_signal(signal.SIGINT)
    stdout, stderr = _rest(process)
    assert process.returncode == 130
    assert stderr.strip() == ("core.bench: interrupted (SIGINT) before every contestant had finished a timed trial; "
                              "no report written")
    assert not out.exists() and stdout == ""


def test_ctrl_c_while_torch_is_imported_is_one_line_and_no_traceback(tmp_path):
    """A torch that Ctrl-C interrupts while it loads: the signal arrives inside `import torch`."""
    (tmp_path / "torch.py").write_text("import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(60)\n")
    process = _bench_process(tmp_path, env_extra={"PYTHONPATH": str(tmp_path)})
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130
    assert stderr.strip() == "core.bench: interrupted while starting (loading torch); nothing was run"
    assert stdout == ""


# ---------------------------------------------------------------------------------------- the table and --diff

def test_the_table_names_whose_spread_each_column_is_and_ends_with_what_the_run_shows(tmp_path, capsys):
    out = tmp_path / "r.json"
    args = ["--model", "tiny-random", "--device", "cpu", "--prompt-tokens", "8", "--max-new-tokens", "4",
            "--trials", "2", "--ignore-eos", "--json", str(out)]
    assert main(args) == 0
    first = json.loads(out.read_text())
    printed = capsys.readouterr().out
    header = next(line for line in printed.splitlines() if line.startswith("contestant"))
    assert header.split()[1:7] == ["decode", "tok/s", "decode", "spread", "e2e", "tok/s"]
    naive = next(line for line in printed.splitlines() if line.startswith("naive "))
    assert f"{first['summary']['naive']['decode_spread']:.1%}" == naive.split()[2]
    assert f"{first['summary']['naive']['spread']:.1%}" == naive.split()[4]
    shows = printed.split("What this run shows:\n")[1].split("reproduce:")[0]
    assert shows.startswith("  On the CPU no difference between the loops is expected")
    assert main(args) == 0
    assert f"replaced {out} (it held a report from {first['created']})" in capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--diff", "--compare"])  # --compare: its old name, still accepted
def test_diff_prints_two_reports_side_by_side(capsys, flag):
    results = Path(__file__).resolve().parent.parent / "benchmarks" / "lab" / "results" / "h200-2026-12-01"
    assert main([flag, str(results / "audit-ro-1b.json.gz"), str(results / "audit-eager-1b.json.gz")]) == 0
    printed = capsys.readouterr().out
    assert "settings that differ (A -> B):" in printed and "compile  reduce-overhead -> off" in printed
    assert "naive" in printed and "0.099x" in printed


@pytest.mark.parametrize(("content", "problem"), [(None, "cannot read it"), (b"{", "not valid JSON"),
                                                  (b'{"a": 1}', "not a syncscope benchmark report")])
def test_diff_of_a_bad_file_is_one_line_and_exit_code_2(tmp_path, capsys, content, problem):
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_bytes(content)
    good = Path(__file__).resolve().parent.parent / "benchmarks/lab/results/h200-2026-12-01/audit-ro-1b.json.gz"
    assert main(["--diff", str(good), str(bad)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and problem in err and str(bad) in err and captured.out == ""


@pytest.mark.parametrize("model", ["synthetic:llama-70b", "a config.json without sizes"])
def test_a_model_that_cannot_fit_is_refused_in_one_line_before_a_weight_is_drawn(tmp_path, capsys, monkeypatch,
                                                                                  model):
    import core.models.loading
    import core.models.memory
    import core.models.sources

    monkeypatch.setattr(core.models.memory, "free_host_bytes", lambda: 8 * 2**30)
    monkeypatch.setattr(core.models.loading, "random_model", lambda *a, **k: pytest.fail("weights were drawn"))
    monkeypatch.setattr(core.models.sources, "_from_pretrained", lambda *a, **k: pytest.fail("it was loaded"))
    if not model.startswith("synthetic:"):
        (tmp_path / "config.json").write_text('{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}')
        model = str(tmp_path)
    assert main(["--model", model, "--device", "cpu", "--trials", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not fit: it needs about" in err
    assert "8.0 GiB of host memory is free for it" in err


@pytest.mark.parametrize("hostile", ["/dev/zero", "bomb.json.gz", "big.json"])
def test_diff_of_a_file_past_the_limit_is_one_line_and_never_read_whole(tmp_path, capsys, monkeypatch, hostile):
    import gzip

    import core.documents.schema as schema

    monkeypatch.setattr(schema.load, "__defaults__", (2 * 2**20,))  # a 2 MiB limit: the test stays small and fast
    (tmp_path / "bomb.json.gz").write_bytes(gzip.compress(b" " * 64 * 2**20, compresslevel=1))
    (tmp_path / "big.json").write_bytes(b" " * (2 * 2**20 + 1))
    path = hostile if hostile.startswith("/") else str(tmp_path / hostile)
    good = Path(__file__).resolve().parent.parent / "benchmarks/lab/results/h200-2026-12-01/audit-ro-1b.json.gz"
    assert main(["--diff", str(good), path]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"core.bench: error: {path}: ") and captured.out == ""
    assert {"/dev/zero": "it is a device, not a file", "bomb.json.gz": "decompresses to more than 2 MiB",
            "big.json": "reports here are limited to 2 MiB"}[hostile] in err


def test_diff_writes_out_the_control_characters_of_a_reports_fields(tmp_path, capsys):
    from core.documents.files import read_report_bytes

    results = Path(__file__).resolve().parent.parent / "benchmarks" / "lab" / "results" / "h200-2026-12-01"
    report = json.loads(read_report_bytes(results / "audit-ro-1b.json.gz"))
    report["model"]["spec"] = "evil\x1b[2J\x1b]0;title\x07\nB: forged line"
    report["environment"]["gpu"] = "\x9b31mred"
    hostile = tmp_path / "hostile.json"
    hostile.write_text(json.dumps(report))
    assert main(["--diff", str(hostile), str(results / "audit-eager-1b.json.gz")]) == 0
    printed = capsys.readouterr().out
    assert not any(c in printed for c in "\x1b\x07\x9b"), "no control character reaches the terminal"
    assert "A: evil\\x1b[2J\\x1b]0;title\\x07\\nB: forged line on \\x9b31mred" in printed
    assert not any(line.startswith("B: forged") for line in printed.splitlines())


def test_the_header_names_the_compiled_decode_attention_only_where_a_contestant_compiled():
    from cli.bench import transforms_used

    transforms = ("fused qkv", "fused gate_up", "compiled decode attention: reduce")
    off = {"effective": {"naive": {"options": {"compile": "off"}}, "pipelined": {"options": {"compile": "off"}}}}
    on = {"effective": {"naive": {"options": {"compile": "default"}}, "hf": {"options": {"compile": "off"}}}}
    assert transforms_used(transforms, off) == ["fused qkv", "fused gate_up"]
    assert transforms_used(transforms, on) == list(transforms)
    layers = (*transforms, "decoder layers in six kernels")
    graph = {"effective": {"naive": {"options": {"compile": "step-graph"}}}}
    assert transforms_used(layers, on) == list(transforms)
    assert transforms_used(layers, graph) == list(layers)


def test_the_ratio_line_labels_the_end_to_end_ratio_beside_the_decode_one(tiny):
    from core.report.build import format_table
    from tests.conftest import bench_report

    line = next(row for row in format_table(bench_report(tiny, trials=1)).splitlines() if "= " in row and "x" in row)
    assert line.startswith("end to end pipelined/naive = ") and "  decode pipelined/naive = " in line

