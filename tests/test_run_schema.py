"""core.run_schema: the run-option table put to work (flags, values by name -> request, request -> command)."""

from __future__ import annotations

import argparse
import shlex

import pytest

import app
from core.bench import build_parser, request_from_args
from core.options import CHOICE, FLAG, REAL, RUN_OPTIONS, WHOLE, GenerationOptions, RunOption
from core.run_schema import (
    Limits,
    add_run_arguments,
    cli_command,
    coerce,
    option_defaults,
    request_from_values,
    values_from_args,
)


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
    from dashboard.reports import HISTORY_FIELDS, history_row

    request, _ = request_from_values({"lag": 3, "batch": 2})
    row = history_row(1, "done", request, "m", None, None)
    assert row["lag"] == 3 and row["batch"] == 2
    assert all(option.name in HISTORY_FIELDS for option in RUN_OPTIONS if option.history)
