"""core.report: what a comparison's report says (identity, the reproduce command) and how the CLI prints it."""

import shlex

from core.bench import build_parser, request_from_args
from core.compare import compare
from core.loops.prompt import synthetic_prompt
from core.options import BenchRequest, GenerationOptions
from core.report import build_report, reproduce_command
from core.report_schema import BENCH_SCHEMA, BenchReport


def command_request(command: str) -> BenchRequest:
    """The request the command's flags make, as `python -m core.bench` would parse them."""
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "core.bench"]
    return request_from_args(build_parser().parse_args(words[3:]))[0]


def test_the_reports_command_asks_for_the_same_comparison_again(tiny):
    request = BenchRequest(prompt=["Say 'hi'", "Say 'hi'"], trials=2, contestants=("naive", "pipelined", "hf"),
                           options=GenerationOptions(max_new_tokens=6, lag=2, do_sample=True, seed=3,
                                                     temperature=0.5, eos_token_id=[2, 7]))
    report = compare(tiny, request)
    command = report["command"]
    assert command.startswith("python -m core.bench --model tiny-random --device cpu --dtype fp32 ")
    again = command_request(command)
    assert again.options == request.options and again.prompt == request.prompt
    assert (again.trials, again.contestants) == (request.trials, request.contestants)


def test_a_synthetic_prompt_is_asked_for_by_its_length(tiny):
    request = BenchRequest(prompt=synthetic_prompt(12), options=GenerationOptions(max_new_tokens=4), trials=1)
    command = reproduce_command(tiny, request)
    assert "--prompt-tokens 12" in command and command_request(command).prompt == synthetic_prompt(12)


def test_identity_check_can_fail(tiny):
    request = BenchRequest(prompt="Hello", options=GenerationOptions(max_new_tokens=6), trials=1)
    timings = {"tokens_per_s": 1.0, "step_ms": [], "total_ms": 1.0, "ttft_ms": 1.0}
    runs = [{"contestant": "naive", "trial": 0, "token_ids": [[1, 2]], "timings": timings},
            {"contestant": "pipelined", "trial": 0, "token_ids": [[1, 3]], "timings": timings}]
    report = build_report(tiny, request, runs, warmups={})
    assert report["identical"] == {"naive": True, "pipelined": False}
    assert report["all_identical"] is False
    assert report["self_consistent"] == {"naive": True, "pipelined": True}
    runs.append({"contestant": "pipelined", "trial": 1, "token_ids": [[1, 2]], "timings": timings})
    assert build_report(tiny, request, runs, warmups={})["self_consistent"]["pipelined"] is False


def test_the_report_is_written_through_the_schema(tiny):
    request = BenchRequest(prompt="Hello", options=GenerationOptions(max_new_tokens=4), trials=1)
    report = compare(tiny, request)
    assert report["schema"] == BENCH_SCHEMA
    required, optional = BenchReport.__required_keys__, BenchReport.__optional_keys__
    assert required <= set(report) <= required | optional
