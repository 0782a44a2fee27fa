"""core.audit: a program of your own run under the sync audit, its decode steps found, its reads at their lines."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from core.audit import assert_no_syncs, audit_script, main, watch
from core.audit.report import summary_text

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CORPUS = HERE / "audit_corpus.py"
EXAMPLES = REPO / "examples"


def marked_lines(path: Path, cuda: bool = False) -> dict[int, str]:
    """line -> kind of every `# read: KIND` comment (the GPU-only ones with `cuda`)."""
    lines = path.read_text().splitlines()
    gpu = next(i for i, line in enumerate(lines) if line.startswith("def gpu_reads"))
    return {i + 1: m.group(1) for i, line in enumerate(lines) if (m := re.search(r"\S.*# read: ([a-z-]+)$", line))
            and (cuda or i < gpu)}


def test_every_kind_the_cpu_sees_is_found_at_its_line_once_per_step():
    report, code = audit_script(str(CORPUS), ["cpu", "8"])
    assert code == 0 and report["step_module"] == "Step" and report["steps"] == 8
    found = {s["line"]: (s["kind"], s["per_step"]) for s in report["sites"] if s["file"].endswith("audit_corpus.py")}
    expected = marked_lines(CORPUS)
    assert len(expected) == 11 and set(found) == set(expected), sorted(set(found) ^ set(expected))
    assert all(found[line] == (kind, 1.0) for line, kind in expected.items())
    assert report["reads_per_decode_step"] == 11.0 and "cost nothing here" in report["note"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (CUDA)")
@pytest.mark.cuda
def test_every_kind_is_found_on_cuda_with_its_cost():
    report, _ = audit_script(str(CORPUS), ["cuda", "8"])
    found = {s["line"]: s for s in report["sites"] if s["file"].endswith("audit_corpus.py")}
    expected = marked_lines(CORPUS, cuda=True)
    assert len(expected) == 14 and set(found) == set(expected), sorted(set(found) ^ set(expected))
    assert all(found[line]["kind"] == kind and found[line]["per_step"] == 1.0 for line, kind in expected.items())
    # A read that PyTorch's sync debug mode finds (a masked index) has no wrapper to time it: only its device idle.
    untimed = {found[line]["kind"] for line in expected if found[line]["host_blocked_ms"] is None}
    assert untimed <= {"masked-index"}, untimed
    assert report["kernel_busy_fraction"] is not None


def audit_cli(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core.audit", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize(("example", "code", "site"), [
    ("naive_loop.py", 1, "examples/naive_loop.py:26"), ("pipelined_loop.py", 0, None)])
def test_fail_on_sync_zero_fails_the_naive_loop_and_passes_the_pipelined_one(example, code, site, tmp_path):
    out = tmp_path / "audit.json"
    done = audit_cli("--json", str(out), "--fail-on-sync", "0", "--", f"examples/{example}", "--new-tokens", "12")
    assert done.returncode == code, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["schema"] == "syncscope.audit/1" and report["step_module"] == "LlamaForCausalLM"
    assert report["reads_per_decode_step"] == float(code)
    if site:
        assert site in done.stdout and "FAIL: a decode step reads the device 1 times" in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize(("deferred", "per_step"), [(False, 1.0), (True, 0.0)])
def test_generate_reads_its_stop_flag_every_step_unless_its_check_is_deferred(deferred, per_step, tmp_path):
    """In a process of its own: the example forces DeferredStopCheck on for the whole process."""
    out = tmp_path / "audit.json"
    done = audit_cli("--json", str(out), "--", "examples/hf_generate.py", "--new-tokens", "12",
                     *(["--deferred"] if deferred else []))
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    stop_check = [s for s in report["sites"] if "unfinished_sequences.max() == 0" in s["code"]]
    assert (stop_check[0]["per_step"] if stop_check else 0.0) == per_step
    assert report["reads_per_decode_step"] == per_step


def test_steps_of_names_a_function_of_the_script_or_a_module_class():
    by_function, _ = audit_script(str(CORPUS), ["cpu", "5"], steps_of="reads")
    assert by_function["step_module"] == "reads" and by_function["steps"] == 5
    by_class, _ = audit_script(str(CORPUS), ["cpu", "5"], steps_of="audit_corpus:Step")
    assert by_class["steps"] == 5 and by_class["reads_per_decode_step"] == 11.0


@pytest.mark.slow
def test_a_program_without_a_repeated_module_call_says_how_to_mark_its_steps(tmp_path):
    script = tmp_path / "flat.py"
    script.write_text("import torch\nx = torch.ones(3)\nfor _ in range(4):\n    x.sum().item()\n")
    done = audit_cli("--", str(script))
    assert done.returncode == 0 and "no decode steps found: give --steps-of" in done.stdout


def test_fail_on_sync_exits_2_and_says_what_to_pass_when_no_step_was_seen(tmp_path, capsys):
    script = tmp_path / "flat.py"
    script.write_text("import torch\nx = torch.ones(3)\nfor _ in range(4):\n    x.sum().item()\n")
    assert main(["--fail-on-sync", "0", "--", str(script)]) == 2
    assert "FAIL: no decode step was seen" in capsys.readouterr().out.splitlines()[-1]


def test_a_program_that_fails_still_gets_its_report_and_pythons_traceback(tmp_path, capsys):
    script = tmp_path / "fails.py"
    script.write_text("import torch\nstep = torch.nn.Linear(2, 2)\nx = torch.ones(2)\nfor _ in range(5):\n"
                      "    x = step(x)\n    if x.sum() > 1e9:\n        pass\nraise RuntimeError('the model broke')\n")
    out = tmp_path / "audit.json"
    assert main(["--json", str(out), "--", str(script)]) == 1
    report = json.loads(out.read_text())
    assert report["exit_code"] == 1 and report["steps"] == 5 and report["reads_per_decode_step"] == 1.0
    captured = capsys.readouterr()
    traceback = captured.err.splitlines()  # as Python prints it: from the script's frame, none of runpy's or ours
    assert traceback[:2] == ["Traceback (most recent call last):", f'  File "{script}", line 8, in <module>']
    assert traceback[-1] == "RuntimeError: the model broke" and "runpy" not in captured.err
    assert "exited with 1; the audit covers what it ran" in captured.out


def test_steps_of_finds_a_module_the_program_puts_on_its_path_and_a_forward_it_calls_directly(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "tinynet.py").write_text(
        "import torch\n\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.inner = torch.nn.Linear(2, 2)\n\n    def forward(self, x):\n        return self.inner(x)\n")
    script = tmp_path / "run.py"
    script.write_text("import sys\nsys.path.insert(0, sys.argv[1])\nimport torch\nimport tinynet\nnet = tinynet.Net()\n"
                      "x = torch.ones(2)\nfor _ in range(5):\n    x = net.forward(x)\n    x.sum().item()\n")
    report, code = audit_script(str(script), [str(tmp_path / "lib")], steps_of="tinynet:Net")
    assert code == 0 and report["step_module"] == "Net" and report["steps"] == 5
    assert report["reads_per_decode_step"] == 1.0
    default, _ = audit_script(str(script), [str(tmp_path / "lib")])
    assert default["step_module"] == "Net" and default["steps"] == 5  # the outermost forward, not its Linear


def test_steps_on_a_thread_the_program_leaves_running_are_found_and_named_with_it(tmp_path):
    script = tmp_path / "threaded.py"
    script.write_text("import threading\nimport torch\nnet = torch.nn.Linear(2, 2)\n\ndef decode():\n"
                      "    x = torch.ones(2)\n    for _ in range(5):\n        x = net(x)\n        x.sum().item()\n\n"
                      "threading.Thread(target=decode, name='decoder').start()\n")
    report, code = audit_script(str(script), [])
    assert code == 0 and report["step_module"] == "Linear on thread decoder" and report["steps"] == 5
    assert report["step_thread"] == "decoder" and report["reads_per_decode_step"] == 1.0 and not report["not_seen"]


@pytest.mark.slow
def test_a_module_compiled_with_fullgraph_runs_compiled_and_its_calls_are_the_steps(tmp_path):
    """module.compile(fullgraph=True): on the CPU it runs compiled (said in `not_seen`), and dynamo, which on Python
    3.11 also sees the step watcher's frames, leaves the watcher alone."""
    script = tmp_path / "compiled.py"
    script.write_text(textwrap.dedent("""\
        import torch

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = torch.nn.Linear(3, 3)

            def forward(self, x):
                return self.inner(x).tanh()

        net = Net()
        net.compile(fullgraph=True)
        x = torch.ones(3)
        with torch.no_grad():
            for _ in range(5):
                x = net(x)
                if x.sum() > 1e9:
                    pass
        """))
    report, code = audit_script(str(script), [])
    assert code == 0 and report["step_module"] == "Net" and report["steps"] == 5
    assert report["reads_per_decode_step"] == 1.0 and report["not_seen"][0].startswith("Net (compiled.py:8), compiled")


def test_the_program_gets_its_own_argv_and_exit_code(tmp_path):
    script = tmp_path / "argv.py"
    script.write_text("import sys\nprint('args', sys.argv[1:])\nsys.exit(3)\n")
    done = audit_cli("--", str(script), "--flag", "x")
    assert "args ['--flag', 'x']" in done.stdout and done.returncode == 3


@pytest.mark.parametrize(("argv", "message"), [
    (["--", "no/such/script.py"], "no/such/script.py: no such file"),
    (["--", str(REPO / "README.md")], "README.md is not a Python program: line 3: unterminated string literal"),
    (["--", str(HERE / "audit_loops")], "audit_loops is a directory: give the Python file to run"),
    (["--fail-on-sync", "-1", "--", str(CORPUS)], "--fail-on-sync must be 0 or more"),
    (["--timeout", "0", "--", str(CORPUS)], "--timeout must be more than 0 seconds, got 0"),
    (["--json", "/no/such/folder/a.json", "--", str(CORPUS)], "does not exist")])
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_the_summary_counts_copies_as_copies_and_names_a_tie_as_a_tie():
    placed = [(3, "item"), (5, "h2d-copy"), (7, "h2d-copy")]
    sites = [{"index": i, "file": "loop.py", "line": line, "code": "x", "kind": kind, "count": 10,
              "in_decode_steps": 10, "per_step": 1.0, "fix": "do this"} for i, (line, kind) in enumerate(placed)]
    report = {"script": "loop.py", "steps": 12, "step_module": "Model", "decode_steps": 10, "sites": sites,
              "reads_per_decode_step": 3.0, "copies_per_decode_step": 2.0, "most_reads_in_a_decode_step": 3}
    text = " ".join(summary_text(report).split())
    assert ("1 read of a device value and 2 host-to-device copies per decode step (at most 3 of them in one step)"
            in text)
    assert ("three sites tie at 1.00 a step: item at loop.py:3, h2d-copy at loop.py:5 and h2d-copy at loop.py:7; "
            "what to do about each is under it below") in text
    assert "host reads" not in text and "most frequent" not in text
    single = " ".join(summary_text({**report, "sites": sites[:1], "reads_per_decode_step": 1.0,
                                    "copies_per_decode_step": 0.0}).split())
    assert "1 read of a device value per decode step" in single and " tie " not in single
    nothing = summary_text({"script": "flat.py", "steps": 0, "step_module": None, "reads_per_decode_step": None})
    assert nothing.startswith("python -m core.audit: flat.py: no steps found\n") and "none found" not in nothing


def test_the_summary_s_sites_past_its_list_add_what_they_read_so_the_lines_add_up():
    rates = [1.0] * 8 + [0.25, 0.1]  # ten sites; the summary lists eight
    sites = [{"index": i, "file": "loop.py", "line": 10 + i, "code": "x", "kind": "item", "count": round(rate * 20),
              "in_decode_steps": round(rate * 20), "per_step": rate} for i, rate in enumerate(rates)]
    setup = {"index": 10, "file": "loop.py", "line": 3, "code": "x", "kind": "h2d-copy", "count": 1,
             "in_decode_steps": 0, "per_step": 0.0}
    report = {"script": "loop.py", "steps": 22, "step_module": "Model", "decode_steps": 20, "sites": [*sites, setup],
              "reads_per_decode_step": 8.35, "copies_per_decode_step": 0.0, "most_reads_in_a_decode_step": 10}
    text = " ".join(summary_text(report).split())
    listed = [float(n) for n in re.findall(r"([\d.]+)/step ", text)]
    more = re.search(r"and 2 more sites, ([\d.]+) a step in all \(the report lists them all\)", text)
    assert listed == [1.0] * 8 and more and sum(listed) + float(more.group(1)) == pytest.approx(8.35)
    assert "and 1 site read only in setup, the first or last step, not counted above (the report lists them)" in text


def test_watch_counts_the_steps_it_is_told_of():
    x = torch.arange(4.0)
    with watch() as audit:
        for _ in range(6):
            audit.step()
            x = x + 1
            if x.sum() > 0:
                pass
    report = audit.report()
    assert report["steps"] == 6 and report["reads_per_decode_step"] == 1.0
    assert report["sites"][0]["code"] == "if x.sum() > 0:"


def test_assert_no_syncs_passes_a_step_that_reads_nothing_and_names_the_site_of_one_that_does():
    x = torch.arange(4.0)
    assert assert_no_syncs(lambda: x * 2, steps=3)["reads_per_decode_step"] == 0.0

    def reads_once():
        return (x * 2).max().item()

    with pytest.raises(AssertionError, match=r"1 device reads in one step \(allowed: 0\):\n.*test_audit\.py:\d+"):
        assert_no_syncs(reads_once, steps=3)


def test_the_trace_has_a_span_per_step_and_an_instant_per_read(tmp_path):
    trace = tmp_path / "t.json"
    assert main(["--trace", str(trace), "--", str(CORPUS), "cpu", "4"]) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e.get("ph") == "X" for e in events) == 3
    assert sum(e.get("ph") == "i" for e in events) == 4 * 11


# ---------------------------------------------------------------------------------------- stopped from outside

LOOPS_FOR_EVER = "import torch\nm = torch.nn.Linear(2, 2)\nx = torch.ones(2)\nwhile True:\n    m(x).sum().item()\n"


@pytest.mark.slow
def test_a_timeout_stops_the_program_and_reports_what_it_ran(tmp_path):
    # As typed, in a process of its own, as the Ctrl-C test below: a program that goes on after the timeout's
    # KeyboardInterrupt is ended with os._exit once the grace has passed, and inside a test runner's worker that took
    # the worker down (twice in clean-clone runs of the suite, with the audit in the worker's process).
    script = tmp_path / "for_ever.py"
    script.write_text(LOOPS_FOR_EVER)
    out = tmp_path / "audit.json"
    done = subprocess.run([sys.executable, "-m", "core.audit", "--timeout", "4", "--json", str(out), "--", str(script)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 124, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["exit_code"] == 124 and report["stopped_by"] == "--timeout 4"
    assert report["steps"] > 3 and report["reads_per_decode_step"] == 1.0
    assert "Traceback" not in done.stderr, "a stop asked for is no failure: the report and one line, no traceback"
    assert done.stdout.splitlines()[-1].startswith(f"python -m core.audit: {script} ended early (--timeout 4) at "
                                                   "for_ever.py:")


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_ctrl_c_or_sigterm_stops_the_program_and_the_report_of_what_it_ran_is_written(tmp_path, signum, code):
    # As typed, in a process of its own: a stopped audit may end its process at once (os._exit) when threads are left,
    # and a test runner's worker has threads of its own.
    script = tmp_path / "interrupted.py"
    script.write_text(f"import os, signal\nimport torch\nm = torch.nn.Linear(2, 2)\nx = torch.ones(2)\n"
                      f"for step in range(10**9):\n    m(x).sum().item()\n"
                      f"    if step == 5:\n        os.kill(os.getpid(), signal.{signum})\n")
    out = tmp_path / "audit.json"
    done = subprocess.run([sys.executable, "-m", "core.audit", "--json", str(out), "--", str(script)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == code, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["stopped_by"] == signum and report["exit_code"] == code and 6 <= report["steps"] <= 8
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, "no traceback for a stop"
    assert report["stopped_at"].startswith("interrupted.py:"), "where it was, in place of the traceback"
    assert done.stdout.splitlines()[-1] == (f"python -m core.audit: {script} ended early ({signum}) at "
                                            f"{report['stopped_at']}, exit status {code}; the audit covers what it "
                                            "ran until then")


def test_a_forked_child_writes_no_report_and_prints_no_summary(tmp_path, capfd):
    script = tmp_path / "forks.py"
    script.write_text("import os\nimport torch\nm = torch.nn.Linear(2, 2)\nfor _ in range(5):\n"
                      "    m(torch.ones(2)).sum().item()\npid = os.fork()\n"
                      "if pid == 0:\n    print('child', flush=True)\nelse:\n    os.waitpid(pid, 0)\n")
    out = tmp_path / "audit.json"
    assert main(["--json", str(out), "--", str(script)]) == 0
    printed = capfd.readouterr().out
    summary = f"python -m core.audit: {script}: 5 steps"  # which module names the steps depends on what ran before
    assert printed.count(summary) == 1 and "child" in printed and printed.count(f"wrote {out}") == 1, printed
    assert "replaced" not in printed and json.loads(out.read_text())["steps"] == 5


def test_the_programs_exit_message_is_printed_last_and_kept_in_the_report(tmp_path, capsys):
    script = tmp_path / "says.py"
    script.write_text("import sys\nimport torch\nm = torch.nn.Linear(2, 2)\nfor _ in range(3):\n"
                      "    m(torch.ones(2)).sum().item()\nsys.exit('cannot go on: \\x1b[2Jno data')\n")
    out = tmp_path / "audit.json"
    assert main(["--json", str(out), "--", str(script)]) == 1
    captured = capsys.readouterr()
    assert "cannot go on" in captured.err, "printed as Python prints it"
    assert captured.out.splitlines()[-1] == (f"python -m core.audit: {script} exited with 1: cannot go on: "
                                             "\\x1b[2Jno data; the audit covers what it ran")
    assert json.loads(out.read_text())["exit_message"] == "cannot go on: \x1b[2Jno data"


@pytest.mark.slow
@pytest.mark.parametrize("case", ["os._exit", "a program that will not stop"])
def test_what_was_seen_is_kept_when_the_run_must_end_at_once(tmp_path, case):
    script = tmp_path / "ends.py"
    if case == "os._exit":
        script.write_text("import os\nimport torch\nm = torch.nn.Linear(2, 2)\nfor _ in range(5):\n"
                          "    m(torch.ones(2)).sum().item()\nos._exit(7)\n")
        argv = []
    else:
        script.write_text("import torch\nm = torch.nn.Linear(2, 2)\nwhile True:\n    try:\n        while True:\n"
                          "            m(torch.ones(2)).sum().item()\n    except BaseException:\n        pass\n")
        argv = ["--timeout", "10"]  # its first steps wait for torch._dynamo to import, seconds on a busy machine
    out = tmp_path / "audit.json"
    code = ("import sys, core.audit.stop as stop; stop.GRACE_S = 1.0; import core.audit as audit; "
            "sys.exit(audit.main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", code, "--json", str(out), *argv, "--", str(script)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    report = json.loads(out.read_text())
    assert done.returncode == (7 if case == "os._exit" else 124), done.stderr[-2000:]
    # one read a step, but for the step the stop came in (between its forward and its read)
    assert report["steps"] >= 5 and report["reads_per_decode_step"] == pytest.approx(1.0, abs=1.5 / report["steps"])
    assert any(line.startswith("the run ended at once") for line in report["not_seen"])
    assert report["stopped_by"] == ("the program called os._exit(7)" if case == "os._exit" else "--timeout 10")


@pytest.mark.parametrize(("started", "usage"), [("/venv/bin/syncscope-audit", "usage: syncscope-audit [--json PATH]"),
                                                (str(REPO / "core/audit/__main__.py"), "usage: python -m core.audit ")])
def test_the_usage_line_is_the_command_as_it_was_started(started, usage, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [started, "--help"])
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith(usage)
