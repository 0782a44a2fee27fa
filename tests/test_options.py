"""core.request.options: the one run-option table guards itself, and the dataclasses it checks agree with it."""

from __future__ import annotations

import dataclasses

import pytest

from core.request.options import (
    BENCH_REQUEST_FIELDS,
    CLI_ONLY,
    CONTESTANT,
    OPTIONS,
    PAGE_GROUPS,
    REQUEST,
    RUN_OPTION,
    RUN_OPTIONS,
    TEXT,
    BenchRequest,
    GenerationOptions,
    RunOption,
    adapt_to_device,
    effective_options,
    hf_generate_options,
    static_cache_length,
)
from core.request.run_schema import coerce


def field_defaults(cls: type) -> dict[str, object]:
    return {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            for f in dataclasses.fields(cls)
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}


@pytest.mark.parametrize("option", [o for o in RUN_OPTIONS if o.part == OPTIONS], ids=lambda o: o.name)
def test_the_generation_options_defaults_are_the_tables(option):
    assert field_defaults(GenerationOptions)[option.name] == option.default


@pytest.mark.parametrize("name", BENCH_REQUEST_FIELDS)
def test_the_bench_requests_defaults_are_the_tables(name):
    assert field_defaults(BenchRequest)[name] == RUN_OPTION[name].default


def test_every_option_is_a_field_of_what_it_sets():
    generation, request = {f.name for f in dataclasses.fields(GenerationOptions)}, set(BENCH_REQUEST_FIELDS)
    for option in RUN_OPTIONS:
        if option.part == OPTIONS:
            assert option.name in generation, option.name
        elif option.part == REQUEST:
            assert option.name in request or option.name in ("prompt", "batch"), option.name
        else:
            assert option.part == CONTESTANT and option.contestants, option.name


def test_an_option_in_a_group_the_page_does_not_render_is_refused_when_made():
    with pytest.raises(ValueError, match=r"run option 'lag': group 'advanced' has no place on the page; use one of "
                                         r"run, loop, sampling \(the page's\) or 'cli' \(the command line only\)"):
        RunOption("lag", TEXT, "", "Lag", "help", group="advanced")
    assert {o.group for o in RUN_OPTIONS} <= {*PAGE_GROUPS, CLI_ONLY}


@pytest.mark.parametrize(("given", "expected"), [(True, True), (False, False), ("true", True), (" False ", False)])
def test_a_flag_takes_a_bool_or_a_word_that_says_one(given, expected):
    assert coerce(RUN_OPTION["ignore_eos"], given) is expected


@pytest.mark.parametrize("given", ["no", "yes", "1", "off", "nope", "", 2, None, 1.0])
def test_any_other_flag_value_is_refused_rather_than_read_as_true(given):
    with pytest.raises(ValueError, match=r"^ignore eos must be true or false, got "):
        coerce(RUN_OPTION["ignore_eos"], given)


def test_cuda_only_modes_become_what_the_cpu_can_run_with_a_notice_each():
    asked = GenerationOptions(cache="static", compile="step-graph", streams=2)
    ran, notices = adapt_to_device(asked, "cpu")
    assert (ran.compile, ran.streams) == ("off", 1) and len(notices) == 2
    assert adapt_to_device(asked, "cuda") == (asked, [])
    reduce = GenerationOptions(cache="static", compile="reduce-overhead")
    assert adapt_to_device(reduce, "cpu")[0].compile == "default"


def test_generate_runs_its_closest_mode_and_says_so():
    step_graph = GenerationOptions(cache="static", compile="step-graph")
    ran, notices = hf_generate_options(step_graph, "cuda")
    assert ran.compile == "reduce-overhead" and "closest equivalent" in notices[0]
    assert hf_generate_options(step_graph, "cpu")[0].compile == "off"
    assert effective_options("hf", step_graph, "cuda")[0].compile == "reduce-overhead"
    assert effective_options("naive", step_graph, "cuda")[0].compile == "step-graph"


def test_a_static_cache_holds_the_run_and_its_overshoot_in_whole_buckets():
    assert static_cache_length(32, 256, 1) == 512  # 289 keys round up to two buckets of 256
    assert static_cache_length(100, 155, 1) == 256
    assert static_cache_length(100, 156, 1) == 512
