"""core.report.build: what a comparison's report says (identity, the reproduce command) and how the CLI prints it."""

import shlex
from dataclasses import asdict, replace

import pytest

import core.compare
from cli.bench import build_parser, request_from_args
from core.compare import compare
from core.documents.bench_report import BenchReport
from core.documents.kinds import BENCH_SCHEMA
from core.loops.prompt import encode_prompt, synthetic_prompt
from core.report.build import DTYPE_FLAGS, _identity, audit_lines, build_report, environment, reproduce_command
from core.request.options import BenchRequest, GenerationOptions, effective_options
from core.request.run_schema import cli_command, python_command


def command_request(command: str) -> BenchRequest:
    """The request the command's flags make, as `python -m core.bench` would parse them."""
    words = shlex.split(command)
    assert words[:3] == [python_command(), "-m", "core.bench"]
    return request_from_args(build_parser().parse_args(words[3:]))[0]


def test_the_reports_command_asks_for_the_same_comparison_again(tiny):
    request = BenchRequest(prompt=["Say 'hi'", "Say 'hi'"], trials=2, contestants=("naive", "pipelined", "hf"),
                           options=GenerationOptions(max_new_tokens=6, lag=2, do_sample=True, seed=3,
                                                     temperature=0.5, eos_token_id=[2, 7]))
    report = compare(tiny, request)
    command = report["command"]
    assert command.startswith(f"{python_command()} -m core.bench --model tiny-random --device cpu --dtype fp32 ")
    again = command_request(command)
    assert again.options == request.options and again.prompt == request.prompt
    assert (again.trials, again.contestants) == (request.trials, request.contestants)


def cli_request(*flags: str) -> BenchRequest:
    return request_from_args(build_parser().parse_args(list(flags)))[0]


def ran_with(loaded, request):
    """build_report's `effective` and `loops_ran`, as core.compare.compare works them out."""
    device = loaded.device.type
    return {"effective": {name: effective_options(name, request.options, device) for name in request.contestants},
            "loops_ran": effective_options("naive", request.options, device)[0]}


def test_a_synthetic_prompt_is_asked_for_by_its_length(tiny):
    request = cli_request("--prompt-tokens", "12", "--max-new-tokens", "4", "--trials", "1")
    assert request.prompt == synthetic_prompt(12) and request.prompt_tokens == 12
    command = reproduce_command(tiny, request)
    assert "--prompt-tokens 12" in command and command_request(command).prompt == synthetic_prompt(12)


def test_identity_check_can_fail(tiny):
    request = BenchRequest(prompt="Hello", options=GenerationOptions(max_new_tokens=6), trials=1)
    timings = {"tokens_per_s": 1.0, "step_ms": [], "total_ms": 1.0, "ttft_ms": 1.0}
    runs = [{"contestant": "naive", "trial": 0, "token_ids": [[1, 2]], "timings": timings, "prompt_tokens": 3},
            {"contestant": "pipelined", "trial": 0, "token_ids": [[1, 3]], "timings": timings, "prompt_tokens": 3}]
    report = build_report(tiny, request, runs, warmups={}, **ran_with(tiny, request))
    assert report["identical"] == {"naive": True, "pipelined": False}
    assert report["all_identical"] is False
    assert report["self_consistent"] == {"naive": True, "pipelined": True}
    assert "sync_audit" not in report and "kernel_measurement" not in report, "a phase that did not run: no section"
    assert report["summary"]["naive"]["reads_per_step"] is report["summary"]["naive"]["kernel_ms_per_step"] is None
    runs.append({"contestant": "pipelined", "trial": 1, "token_ids": [[1, 2]], "timings": timings,
                 "prompt_tokens": 3})
    assert build_report(tiny, request, runs, warmups={}, **ran_with(tiny, request))["self_consistent"][
        "pipelined"] is False


class NoTokenizer:
    """A tokenizer that fails the test when anything of it is used."""

    def __getattr__(self, name):
        raise AssertionError(f"build_report used the tokenizer ({name})")

    def __call__(self, *args, **kwargs):
        raise AssertionError("build_report called the tokenizer")

    def __len__(self):
        raise AssertionError("build_report asked the tokenizer's length")


def old_way(loaded, request, report):
    """The facts build_report used to work out again: whether the prompt is synthetic (made again and compared),
    the prompt's width (encoded again) and the options each contestant ran with (adapted again)."""
    device = loaded.device.type
    loops_ran = effective_options("naive", request.options, device)[0]
    rows = request.prompt if request.batch > 1 else [request.prompt]
    synthetic = all(isinstance(row, list) and row == synthetic_prompt(len(row)) for row in rows)
    command = cli_command(request, loaded.spec, device=str(loaded.device), dtype=DTYPE_FLAGS.get(loaded.dtype),
                          tp=loaded.tp, hf_modules=loaded.hf_modules, tuning=loaded.tuning,
                          prompt_tokens=len(rows[0]) if synthetic else None)
    width = encode_prompt(loaded, request.prompt)[0].shape[1]
    effective = {name: effective_options(name, request.options, device) for name in request.contestants}
    return {"command": command,
            "identity": _identity(loaded, replace(request, options=loops_ran), width, report["runs"],
                                  report["identical"], report["self_consistent"]),
            "effective": {name: {"options": asdict(options), "notices": notices}
                          for name, (options, notices) in effective.items()},
            "environment": environment(loaded, loops_ran.compile)}


@pytest.mark.parametrize("asked", ["synthetic", "text"])
def test_the_report_takes_what_the_run_knew_and_says_what_it_said_before(tiny, monkeypatch, asked):
    # streams=2 and NVTX ranges are CUDA's: on the CPU each contestant runs without them (a notice each)
    options = ("--max-new-tokens", "5", "--trials", "1", "--streams", "2", "--nvtx", "--hf")
    request = cli_request("--prompt-tokens", "9", *options) if asked == "synthetic" else \
        cli_request("--prompt", "Hello there", *options)
    handed = {}

    def without_tokenizer(loaded, request, runs, *args, **kwargs):
        handed["runs"] = runs
        return build_report(replace(loaded, tokenizer=NoTokenizer()), request, runs, *args, **kwargs)

    monkeypatch.setattr(core.compare, "build_report", without_tokenizer)
    report = compare(tiny, request)
    width = encode_prompt(tiny, request.prompt)[0].shape[1]
    assert {run["prompt_tokens"] for run in handed["runs"]} == {width}  # every contestant's, generate()'s too
    assert not any("prompt_tokens" in run for run in report["runs"])  # the report's runs keep their keys
    assert {key: report[key] for key in ("command", "identity", "effective", "environment")} == \
        old_way(tiny, request, report)
    assert ("--prompt-tokens 9" in report["command"]) == (asked == "synthetic")
    assert report["effective"]["naive"]["options"]["streams"] == 1 and report["effective"]["naive"]["notices"]


def test_the_report_is_written_through_the_schema(tiny):
    request = BenchRequest(prompt="Hello", options=GenerationOptions(max_new_tokens=4), trials=1)
    report = compare(tiny, request)
    assert report["schema"] == BENCH_SCHEMA
    required, optional = BenchReport.__required_keys__, BenchReport.__optional_keys__
    assert required <= set(report) <= required | optional


def test_the_audit_lines_say_what_the_sites_they_leave_out_read_so_they_add_up():
    sites = [{"file": "loop.py", "line": line, "code": "x", "kind": "item", "in_decode_steps": reads,
              "per_step": reads / 20} for line, reads in ((3, 20), (5, 20), (7, 20), (9, 3), (11, 1), (13, 0))]
    audit = {"reads_per_decode_step": 3.2, "copies_per_decode_step": 0.0, "decode_steps": 20, "sites": sites}
    lines = audit_lines({"sync_audit": {"naive": audit}})
    assert lines[1] == "  naive: 3.20 reads of device values per decode step, over 20 decode steps"
    assert [line.split("/step")[0].strip() for line in lines[2:5]] == ["1.00"] * 3
    assert lines[5:] == ["    and 2 more sites, 0.20 a step in all"]
