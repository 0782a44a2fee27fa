"""core.bench: the command line (flags, the table it prints, the files it writes, one-line errors)."""

import json
import time
from pathlib import Path

import pytest

from core.bench import main
from core.compare import compare
from core.loops.prompt import synthetic_prompt
from core.options import BenchRequest, GenerationOptions
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
    expected = ("python -m core.bench --model tiny-random --device cpu --dtype fp32 --prompt-tokens 12 "
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


def test_a_json_path_that_cannot_be_written_fails_before_any_work(capsys):
    from core.bench import main

    started = time.monotonic()
    assert main(["--model", TINY, "--device", "cpu", "--json", "/missing/dir/x.json"]) == 2
    assert time.monotonic() - started < 2, "refused before the model was loaded"
    assert "the folder /missing/dir does not exist" in capsys.readouterr().err


def test_an_eos_id_outside_the_vocabulary_is_refused(capsys):
    from core.bench import main

    assert main(["--model", TINY, "--device", "cpu", "--eos-token-id", "999999999", "--max-new-tokens", "2"]) == 2
    assert "outside the model's vocabulary" in capsys.readouterr().err


def test_help_gives_each_default_once():
    from core.bench import build_parser

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
