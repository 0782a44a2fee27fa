"""core.request.run_schema: the run-option table put to work (flags, values by name -> request, request -> command):
what a form asks for is checked once, and the reproduce command runs what the page shows."""

from __future__ import annotations

import argparse
import shlex
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import app
from cli.bench import build_parser, request_from_args
from core.request.options import CHOICE, FLAG, REAL, RUN_OPTIONS, WHOLE, BenchRequest, GenerationOptions, RunOption
from core.request.run_schema import (
    Limits,
    add_run_arguments,
    cli_command,
    coerce,
    option_defaults,
    python_command,
    request_from_values,
    shell_quote,
    values_from_args,
)
from core.tuning import Tuning
from tests.conftest import TINY, fast_settings, page_request


def another_value(option: RunOption) -> object:
    """A value of `option` other than its default, inside its bounds."""
    if option.kind == FLAG:
        return not option.default
    if option.kind == CHOICE:
        return next(choice for choice in reversed(option.choices) if choice != option.default)
    if option.choices:
        return next(choice for choice in option.choices if choice != option.default)
    if option.name == "prompt":
        return "Another prompt, with 'quotes'"
    step = 1 if option.kind == WHOLE else 0.25
    value = option.default + step
    return value if option.high is None or value <= option.high else option.default - step


@pytest.mark.parametrize("option", RUN_OPTIONS, ids=lambda option: option.name)
def test_every_option_goes_to_the_command_and_back(option):
    values = {option.name: another_value(option)}
    if option.only_with:
        values[option.only_with] = True
    request, _ = request_from_values(values)
    assert request.value(option.name) == values[option.name]
    argv = shlex.split(cli_command(request, "tiny-random"))[3:]
    assert request_from_args(build_parser().parse_args(argv))[0] == request


def test_an_option_that_means_nothing_alone_is_left_out_of_the_command():
    request, _ = request_from_values({"temperature": 0.5})
    assert "--temperature" not in cli_command(request, "m")
    request, _ = request_from_values({"temperature": 0.5, "do_sample": True})
    assert "--temperature 0.5" in cli_command(request, "m")


def test_both_parsers_have_a_flag_for_every_option():
    bench = {action.dest for action in build_parser()._actions}
    page = {action.dest for action in app.build_parser()._actions}
    for option in RUN_OPTIONS:
        assert option.name in bench
        assert option.name in page or option.group == "cli"


def test_the_kernel_measurements_old_flag_and_name_still_work():
    request, _ = request_from_args(build_parser().parse_args(["--no-kernel-trial"]))
    assert request.no_kernel_measurement
    assert request_from_values({"no_kernel_trial": True})[0].no_kernel_measurement
    assert "--no-kernel-trial" in build_parser().format_help()


def test_the_forms_defaults_follow_the_device():
    cpu, gpu = option_defaults(gpu=False), option_defaults(gpu=True)
    assert (cpu["compile"], cpu["cache"], cpu["trials"]) == ("off", "dynamic", 3)
    assert (gpu["compile"], gpu["cache"], gpu["trials"], gpu["max_new_tokens"]) == ("reduce-overhead", "static", 5,
                                                                                    256)
    assert GenerationOptions().max_new_tokens == cpu["max_new_tokens"]  # one default, not one per place


def test_app_flags_left_out_take_the_devices_defaults():
    parser = argparse.ArgumentParser()
    add_run_arguments(parser, form_defaults=True)
    given = values_from_args(parser.parse_args(["--lag", "3"]), gpu=True)
    assert given["lag"] == 3 and given["compile"] == "reduce-overhead" and given["max_new_tokens"] == 256


def test_a_page_limit_caps_only_what_it_names():
    limits = Limits(max_new_tokens=8)
    assert coerce(next(o for o in RUN_OPTIONS if o.name == "max_new_tokens"), "8", limits) == 8
    with pytest.raises(ValueError, match="max new tokens must be between 1 and 8, got 9"):
        request_from_values({"max_new_tokens": 9}, limits=limits)
    request, _ = request_from_values({"lag": 64, "max_new_tokens": 8}, limits=limits)
    assert request.options.lag == 64


def test_the_cli_names_its_flags_and_the_page_its_fields():
    with pytest.raises(ValueError, match=r"^--top-p must be in"):
        request_from_values({"top_p": 2.0}, by_flag=True)
    with pytest.raises(ValueError, match=r"^top-p must be in"):
        request_from_values({"top_p": 2.0})


def test_compile_turns_the_static_cache_on_once_with_a_notice():
    request, notices = request_from_values({"compile": "default"})
    assert request.options.cache == "static" and len(notices) == 1


def test_invalid_options_cannot_be_made():
    with pytest.raises(ValueError, match="compile needs cache='static'"):
        GenerationOptions(compile="default")
    with pytest.raises(ValueError, match="pipeline lag must be between 1 and 64"):
        GenerationOptions(lag=65)


@pytest.mark.parametrize("kind", [WHOLE, REAL])
def test_numbers_from_a_form_may_be_text(kind):
    option = next(o for o in RUN_OPTIONS if o.kind == kind and not o.choices)
    assert coerce(option, str(option.default)) == option.default


def test_the_history_has_a_column_for_each_option_marked_so():
    from dashboard.service.run_history import HISTORY_FIELDS, history_row

    request, _ = request_from_values({"lag": 3, "batch": 2})
    row = history_row(1, "done", request, "m", None, None)
    assert row["lag"] == 3 and row["batch"] == 2
    assert all(option.name in HISTORY_FIELDS for option in RUN_OPTIONS if option.history)


# ------------------------------------------------------------ forms -> requests, and the reproduce command

FAST = fast_settings()

TRICKY = [
    "Say hi \u202elive done\u202c",          # right-to-left override: shown reversed, run as typed
    "zero\u200bwidth and \u2066isolate\u2069",
    "two\nlines\tand a tab",
    "bell\a, escape \x1b[31m, delete \x7f",
    "no\u00a0break space",
    "quotes ' \" and back\\slash $HOME `id` $(id)",
]


def shell_words(command: str) -> list[str]:
    """The words bash makes of `command` (after any VAR=value prefixes), without running it."""
    script = f"set -- {command.split(f'{python_command()} ', 1)[1]}; printf '%s\\0' \"$@\""
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True, env={"LC_ALL": "C"}).stdout
    return out.decode("utf-8").split("\0")[:-1]


@pytest.mark.parametrize("prompt", TRICKY)
def test_the_reproduce_command_runs_the_prompt_it_shows(prompt):
    request, _ = page_request(dict(prompt=prompt))
    command = cli_command(request, "tiny-random")
    assert command.isprintable(), command  # nothing invisible or reordering is shown
    words = shell_words(command)
    assert words[words.index("--prompt") + 1] == prompt


def test_plain_words_keep_their_familiar_quoting():
    assert shell_quote("Hello there") == "'Hello there'"
    assert shell_quote("tiny-random") == "tiny-random"
    assert shell_quote("a\u202eb") == "$'a\\xe2\\x80\\xaeb'"


def test_a_tuning_switch_s_value_is_quoted_and_reads_back_as_it_was():
    request, _ = page_request(dict(prompt="Hi"))
    options = {"a b": "it's \u202e"}  # JSON writes the character as an escape: the command stays printable
    command = cli_command(request, "tiny-random", tuning=Tuning(inductor_options=options))
    assert command.startswith(f"""SYNCSCOPE_INDUCTOR_OPTIONS='{{"a b": "it'"'"'s \\u202e"}}' {python_command()} """)
    result = subprocess.run(["bash", "-c", command.split(f" {python_command()} ")[0] + " env"], capture_output=True,
                            text=True, check=True)
    assert Tuning.from_environment(dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)) \
        == Tuning(inductor_options=options)


def test_the_cli_command_rebuilds_the_same_request():
    settings = dict(prompt="Say 'hi' twice", model=TINY, max_new_tokens=24, batch=3, do_sample=True, seed=5,
                           temperature=0.7, top_k=20, top_p=0.95, compile="default", lag=2, trials=2,
                           hf=True, no_check=True, ignore_eos=True)
    request, _ = page_request(settings)
    argv = shlex.split(cli_command(request, TINY))[3:]
    assert request_from_args(build_parser().parse_args(argv))[0] == request
    extras = page_request(dict(prompt="Hi", aa=True, min_seconds=1.5, deterministic=True))[0]
    argv = shlex.split(cli_command(extras, TINY))[3:]
    assert request_from_args(build_parser().parse_args(argv))[0] == extras
    assert not build_parser().parse_args(argv).hf_modules
    argv = shlex.split(cli_command(extras, TINY, tp=2, hf_modules=True))[3:]
    assert build_parser().parse_args(argv).hf_modules and build_parser().parse_args(argv).tp == 2


def test_the_cli_command_sets_exactly_the_switches_that_differ_from_their_default():
    request = page_request(dict(prompt="Hi"))[0]
    environ = {"SYNCSCOPE_PDL": "safe", "SYNCSCOPE_INDUCTOR_OPTIONS": '{"max_autotune": true}',
               "SYNCSCOPE_CACHE": "/tmp/x", "SYNCSCOPE_DECODE_ATTENTION": " ", "SYNCSCOPE_O_PROJ": "library"}
    command = cli_command(request, TINY, tuning=Tuning.from_environment(environ))
    expected = (f"""SYNCSCOPE_INDUCTOR_OPTIONS='{{"max_autotune": true}}' SYNCSCOPE_PDL=safe {python_command()} """
                "-m core.bench")
    assert command.startswith(expected)
    # a location, not a switch; an empty one; one set to its default
    assert "SYNCSCOPE_CACHE" not in command and "DECODE_ATTENTION" not in command and "O_PROJ" not in command
    result = subprocess.run(["bash", "-c", command.split(f" {python_command()} ")[0] + ' env'], capture_output=True,
                            text=True, check=True)
    assert 'SYNCSCOPE_INDUCTOR_OPTIONS={"max_autotune": true}' in result.stdout.splitlines()
    assert cli_command(request, TINY, tuning=Tuning()).startswith(f"{python_command()} -m core.bench")
    assert cli_command(request, TINY) == cli_command(request, TINY, tuning=Tuning())


def test_the_reproduce_command_starts_with_an_interpreter_that_runs_from_here(tmp_path):
    """Issue 60: a bare `python` had no torch where the README runs `.venv/bin/python`."""
    request = page_request(dict(prompt="Hi"))[0]
    assert shlex.split(cli_command(request, TINY))[0] == python_command()
    venv = tmp_path / ".venv" / "bin"
    assert python_command(str(venv / "python"), str(tmp_path)) == ".venv/bin/python"
    assert python_command(str(venv / "python"), str(venv)) == "./python", "a bare name would be looked up on PATH"
    assert python_command("/opt/elsewhere/bin/python3.11", str(tmp_path)) == "/opt/elsewhere/bin/python3.11"
    assert python_command("", str(tmp_path)) == "python"
    result = subprocess.run(["bash", "-c", f"{python_command()} -c 'import torch'"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_hf_option_adds_deferred_stop_check_on_cuda():
    settings = dict(prompt="Hi", hf=True)
    assert page_request(settings)[0].contestants == ("naive", "pipelined", "hf")
    request, _ = page_request(settings, cuda=True)
    assert request.contestants == ("naive", "pipelined", "hf", "hf-deferred")
    argv = shlex.split(cli_command(request, TINY))[3:]
    assert "--hf-deferred" in argv and request_from_args(build_parser().parse_args(argv))[0] == request


@pytest.mark.parametrize(("changes", "message"), [
    ({"prompt": ""}, "prompt is empty"),
    ({"prompt": "   \n"}, "prompt is empty"),
    ({"prompt": "x" * 20_001}, "characters long"),
    ({"max_new_tokens": 0}, "max new tokens must be between 1 and 4096, got 0"),
    ({"max_new_tokens": -3}, "max new tokens must be between"),
    ({"max_new_tokens": 10**9}, "max new tokens must be between"),
    ({"max_new_tokens": "lots"}, "max new tokens must be a number"),
    ({"max_new_tokens": None}, "max new tokens is empty"),
    ({"max_new_tokens": 2.5}, "max new tokens must be a whole number"),
    ({"max_new_tokens": float("nan")}, "finite"),
    ({"batch": 0}, "batch size must be between 1 and 64"),
    ({"batch": 100_000}, "batch size must be between 1 and 64"),
    ({"lag": 0}, "pipeline lag must be between 1"),
    ({"trials": 0}, "trials must be between 1"),
    ({"streams": 3}, "streams must be between 1 and 2"),
    ({"temperature": 0}, "temperature must be in (0"),
    ({"top_p": 1.5}, "top-p must be in (0, 1]"),
    ({"top_k": -1}, "top-k must be between 0"),
    ({"seed": True}, "seed must be a number"),
    ({"compile": "turbo"}, "unknown compile mode 'turbo'"),
])
def test_bad_settings_give_clear_messages(changes, message):
    with pytest.raises(ValueError) as caught:
        page_request(dict(**{**FAST, **changes}))
    assert message in str(caught.value)


def test_numbers_from_a_form_are_accepted():
    request, _ = page_request(dict(prompt="hi", max_new_tokens=32.0, batch="2", lag="3", streams=2.0))
    assert request.options.max_new_tokens == 32 and request.prompt == ["hi", "hi"] and request.options.lag == 3


def test_compile_turns_the_static_cache_on_visibly():
    request, notices = page_request(dict(prompt="hi", compile="default"))
    assert request.options.cache == "static"
    assert any("StaticCache" in n for n in notices)


anything = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                     st.text(max_size=12), st.lists(st.integers(), max_size=3))


@settings(max_examples=300, deadline=None)
@given(prompt=st.one_of(st.text(max_size=40), anything), max_new_tokens=anything, batch=anything, seed=anything,
       temperature=anything, top_k=anything, top_p=anything, lag=anything, streams=anything, trials=anything,
       compile_mode=st.one_of(st.sampled_from(["off", "default", "reduce-overhead", "nope"]), anything))
def test_form_validation_raises_nothing_but_value_errors(prompt, max_new_tokens, batch, seed, temperature, top_k,
                                                         top_p, lag, streams, trials, compile_mode):
    form = dict(prompt=prompt, max_new_tokens=max_new_tokens, batch=batch, seed=seed, do_sample=True,
                       temperature=temperature, top_k=top_k, top_p=top_p, lag=lag, streams=streams, trials=trials,
                       compile=compile_mode)
    try:
        request, _ = page_request(form)
    except ValueError as exc:
        assert str(exc)
        return
    assert BenchRequest(**{f: getattr(request, f) for f in BenchRequest.__dataclass_fields__}) == request
