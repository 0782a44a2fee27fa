"""core.measure.nvtx: an NVTX range around every run and one per decode step, named by contestant and step, every one
closed however the run ends; on in the audited runs, with --trace and with --nvtx, never called otherwise; on the CPU
one notice that they need CUDA.

NVTX calls are recorded, not made (torch's CPU build raises from them); `pretend_cuda` gives a CPU run the ranges a
CUDA run would have. tests/test_cuda_nvtx.py makes the real calls on a GPU."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import pytest
import torch

import core.loops.generation as generation
import core.measure.nvtx as nvtx
from cli.bench import build_parser, main, request_from_args
from core.compare import compare
from core.loops.generation import generate, run
from core.loops.step import DecodeSetup
from core.request.options import BenchRequest, Cancelled, GenerationOptions, adapt_to_device
from core.request.run_schema import cli_command
from tests.conftest import TINY
from tests.helpers import eos_for_steps, free_run

PROMPT = "Hello there"
STEPS = 6
NOTICE = "NVTX ranges need CUDA"


@pytest.fixture
def ranges(monkeypatch):
    """Every NVTX push and pop from here on, in order: ("push", name) or ("pop", None)."""
    calls: list[tuple[str, str | None]] = []
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: calls.append(("push", name)))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: calls.append(("pop", None)))
    return calls


def as_on_cuda(options, device_type):
    """adapt_to_device, except that NVTX stays as asked, as on CUDA."""
    adapted, notices = adapt_to_device(replace(options, nvtx=False), device_type)
    return replace(adapted, nvtx=options.nvtx), notices


@pytest.fixture
def pretend_cuda(monkeypatch):
    """Runs on the CPU get the NVTX ranges they would have on CUDA."""
    monkeypatch.setattr(nvtx, "can_range", lambda device_type: True)
    monkeypatch.setattr(generation, "adapt_to_device", as_on_cuda)


@pytest.fixture
def set_up(tiny):
    """tiny-random with its decode setup for PROMPT made, so that a run has no setup run."""
    generate(tiny, PROMPT, max_new_tokens=STEPS, ignore_eos=True)
    return tiny


def tree(calls):
    """The ranges as [(name, [ranges inside it]), ...], in order; fails unless every push is popped, in order."""
    top: list = []
    stack = [top]
    for kind, name in calls:
        if kind == "push":
            inside: list = []
            stack[-1].append((name, inside))
            stack.append(inside)
        else:
            assert len(stack) > 1, "a range popped that was never pushed"
            stack.pop()
    assert len(stack) == 1, f"{len(stack) - 1} range(s) left open"
    return top


def steps_of(contestant, count):
    return [(f"{contestant} prefill", []), *((f"{contestant} step {i}", []) for i in range(1, count))]


# ----------------------------------------------------------------------------------------------- the loops

@pytest.mark.parametrize(("loop", "lag"), [("naive", 1), ("pipelined", 1), ("pipelined", 3), ("no-check", 1)])
def test_each_loop_has_one_range_per_computed_step_numbered_as_its_timeline(set_up, ranges, pretend_cuda, loop, lag):
    result = generate(set_up, PROMPT, loop=loop, lag=lag, max_new_tokens=STEPS, ignore_eos=True, nvtx=True)
    assert tree(ranges) == steps_of(loop, STEPS)
    assert len(result.timings.host_step_start_ms) == STEPS  # the timeline's steps: index i is range i


def test_the_pipelined_loops_overshoot_steps_have_ranges_too(set_up, ranges, pretend_cuda):
    eos, _ = eos_for_steps(free_run(set_up, PROMPT, 12), [4])
    result = generate(set_up, PROMPT, loop="pipelined", lag=2, max_new_tokens=12, eos_token_id=eos, nvtx=True)
    timings = result.timings
    assert timings.computed_steps == timings.kept_steps + 2
    assert tree(ranges) == steps_of("pipelined", timings.computed_steps)


def test_the_contestant_names_the_ranges(set_up, ranges, pretend_cuda):
    options = GenerationOptions(loop="pipelined", max_new_tokens=STEPS, ignore_eos=True, nvtx=True)
    run(set_up, PROMPT, options, contestant="pipelined-again")
    assert tree(ranges) == steps_of("pipelined-again", STEPS)


def test_a_new_shapes_setup_run_is_one_range_with_no_steps_inside(tiny, ranges, pretend_cuda, monkeypatch):
    monkeypatch.setattr(tiny, "setups", {})  # no decode setup made yet, for this test only
    generate(tiny, PROMPT, loop="pipelined", max_new_tokens=STEPS, ignore_eos=True, nvtx=True)
    assert tree(ranges) == [("pipelined setup run", []), *steps_of("pipelined", STEPS)]


def test_off_the_loops_make_no_ranges_at_all(set_up, ranges, pretend_cuda, monkeypatch):
    def never(*args):
        raise AssertionError("step ranges made with NVTX off")

    monkeypatch.setattr(generation, "StepRanges", never)
    for loop in ("naive", "pipelined", "no-check"):
        generate(set_up, PROMPT, loop=loop, max_new_tokens=STEPS, ignore_eos=True)
    compare(set_up, BenchRequest(prompt=PROMPT, options=GenerationOptions(max_new_tokens=STEPS), trials=1,
                                 contestants=("naive", "pipelined", "hf")))
    assert ranges == []


@pytest.mark.parametrize("loop", ["naive", "pipelined"])
def test_a_cancel_from_the_watcher_closes_the_open_step_range(set_up, ranges, pretend_cuda, loop):
    def cancel_at_step_3(event):
        if event.step == 3:
            raise Cancelled("cancelled")

    options = GenerationOptions(loop=loop, max_new_tokens=STEPS, ignore_eos=True, nvtx=True)
    with pytest.raises(Cancelled):
        run(set_up, PROMPT, options, on_tokens=cancel_at_step_3)
    opened = tree(ranges)
    assert opened and opened == steps_of(loop, STEPS)[: len(opened)] and len(opened) < STEPS


def test_a_step_that_fails_closes_its_range(set_up, ranges, pretend_cuda, monkeypatch):
    decode = DecodeSetup.decode

    def failing_at_step_3(self, index, cache):
        if index == 3:
            raise RuntimeError("a step failed")
        decode(self, index, cache)

    monkeypatch.setattr(DecodeSetup, "decode", failing_at_step_3)
    with pytest.raises(RuntimeError, match="a step failed"):
        generate(set_up, PROMPT, loop="pipelined", max_new_tokens=STEPS, ignore_eos=True, nvtx=True)
    assert tree(ranges) == steps_of("pipelined", 4)


def test_step_ranges_close_once():
    calls = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.cuda.nvtx, "range_push", lambda name: calls.append(name))
        patch.setattr(torch.cuda.nvtx, "range_pop", lambda: calls.append(None))
        steps = nvtx.StepRanges("naive", 3)
        steps.close()  # none open yet
        steps.step(0)
        steps.step(1)
        steps.close()
        steps.close()
    assert calls == ["naive prefill", None, "naive step 1", None]


# --------------------------------------------------------------------------------------- the comparison

def test_the_option_puts_every_run_in_a_range_around_its_steps(set_up, ranges, pretend_cuda):
    request = BenchRequest(prompt=PROMPT, options=GenerationOptions(max_new_tokens=STEPS, ignore_eos=True, nvtx=True),
                           trials=2, contestants=("naive", "pipelined", "pipelined-again", "hf"))
    compare(set_up, request)

    def run_of(contestant, kind):
        # generate()'s timed runs keep their path: a step range would need a stopping criterion, a kernel a step
        return f"{contestant} {kind}", [] if contestant == "hf" else steps_of(contestant, STEPS)

    order = request.contestants
    assert tree(ranges) == [*(run_of(c, "warm-up") for c in order), *(run_of(c, "trial 0") for c in order),
                            *(run_of(c, "trial 1") for c in reversed(order))]


def test_the_audited_runs_have_ranges_unasked_and_still_read_nothing(set_up, ranges, pretend_cuda):
    request = BenchRequest(prompt=PROMPT, options=GenerationOptions(max_new_tokens=STEPS, ignore_eos=True),
                           trials=1, contestants=("naive", "pipelined", "hf"), audit=True)
    report = compare(set_up, request)
    assert tree(ranges) == [(f"{c} audited run", steps_of(c, STEPS)) for c in ("naive", "pipelined", "hf")]
    assert report["sync_audit"]["pipelined"]["reads_per_decode_step"] == 0
    assert report["sync_audit"]["naive"]["reads_per_decode_step"] == 1
    assert report["request"]["options"]["nvtx"] is False  # the trials ran as asked, without ranges


def test_a_cancel_during_a_ranged_warm_up_closes_every_range(set_up, ranges, pretend_cuda):
    tokens = []
    request = BenchRequest(prompt=PROMPT, options=GenerationOptions(max_new_tokens=STEPS, ignore_eos=True, nvtx=True),
                           trials=1)
    with pytest.raises(Cancelled):
        compare(set_up, request, on_event=tokens.append, should_stop=lambda: len(tokens) > 4)
    (warm_up, inside), = tree(ranges)
    assert warm_up == "naive warm-up" and 0 < len(inside) < STEPS


# ----------------------------------------------------------------------------------- the CLI and the CPU

def run_cli(tmp_path, *flags):
    out = tmp_path / "r.json"
    assert main(["--model", TINY, "--device", "cpu", "--max-new-tokens", "4", "--trials", "1", "--ignore-eos",
                 "--json", str(out), *flags]) == 0
    return json.loads(out.read_text())


def test_trace_puts_every_run_in_ranges_and_the_command_says_so(tmp_path, ranges, pretend_cuda):
    report = run_cli(tmp_path, "--trace", str(tmp_path / "t.json"))
    runs = [name for name, _ in tree(ranges)]
    assert runs[:2] == ["naive warm-up", "pipelined warm-up"] and "pipelined trial 0" in runs
    assert report["request"]["options"]["nvtx"] is True and " --nvtx" in report["command"]


def test_on_the_cpu_trace_and_audit_make_no_ranges_and_no_notice(tmp_path, ranges, capsys):
    report = run_cli(tmp_path, "--trace", str(tmp_path / "t.json"), "--audit")
    assert ranges == [] and NOTICE not in capsys.readouterr().out
    assert report["request"]["options"]["nvtx"] is False and "--nvtx" not in report["command"]


def test_asked_for_on_the_cpu_nvtx_is_one_notice_and_no_call(tmp_path, ranges, capsys):
    report = run_cli(tmp_path, "--nvtx", "--hf")
    assert ranges == []
    printed = [line for line in capsys.readouterr().out.splitlines() if NOTICE in line]
    assert len(printed) == 1 and printed[0].startswith("note: ")
    assert report["effective"]["naive"]["options"]["nvtx"] is False
    assert {n for run in report["runs"] for n in run["notices"] if NOTICE in n} == {printed[0][len("note: "):]}


def test_the_device_rule_turns_nvtx_off_on_the_cpu_only():
    options = GenerationOptions(nvtx=True)
    adapted, notices = adapt_to_device(options, "cpu")
    assert adapted.nvtx is False and len(notices) == 1 and NOTICE in notices[0]
    assert adapt_to_device(options, "cuda") == (options, [])
    request = BenchRequest(prompt=PROMPT)
    assert nvtx.with_ranges(request, "cpu") is request
    assert nvtx.with_ranges(request, "cuda").options == replace(request.options, nvtx=True)


def test_the_flag_goes_to_the_command_and_back():
    request, _ = request_from_args(build_parser().parse_args(["--nvtx"]))
    assert request.options.nvtx is True
    command = cli_command(request, TINY)
    assert " --nvtx" in command
    assert request_from_args(build_parser().parse_args(shlex.split(command)[3:]))[0] == request
    assert "--nvtx" not in cli_command(request_from_args(build_parser().parse_args([]))[0], TINY)
