"""The load options table (core.request.load.LOAD_OPTIONS) put to work (core.request.load_schema): a load option is one
row and its field, and from them come the CLI's flag, the Under load form's field and its check, the server's limit,
the report's settings and the reproduce command; every row goes to the command line and back."""

from __future__ import annotations

import dataclasses
import shlex
from types import SimpleNamespace

import gradio as gr
import pytest

import core.request.load as load
from cli.bench import build_parser
from cli.bench import main as bench_main
from cli.load import load_request_from_args
from core.load.protocol import run_load
from core.request.load import LoadOption, LoadRequest, WorkloadSpec
from core.request.load_schema import LoadLimits, load_command, request_from_values
from core.request.options import WHOLE, GenerationOptions
from dashboard.service.load_form import form_defaults, request_from_form
from dashboard.ui.tabs import under_load
from dashboard.ui.tabs.under_load import settings_names

THROWAWAY = LoadOption("throwaway", WHOLE, 0, "Throwaway", "a throwaway load option", metavar="N", low=0, high=9,
                       page_high=7, exposed_high=5, group="checks")


def args_of(command: str) -> list[str]:
    """The flags of a reproduce command (after `python -m core.bench`)."""
    return shlex.split(command)[3:]


@pytest.fixture
def throwaway(monkeypatch):
    """LOAD_OPTIONS with one row more, and the LoadRequest with its field: all a new load option is, besides the
    code that reads it."""
    with_field = dataclasses.make_dataclass("LoadRequest", [("throwaway", int, 0)], bases=(LoadRequest,), frozen=True)
    monkeypatch.setattr(load, "LOAD_OPTIONS", (*load.LOAD_OPTIONS, THROWAWAY))
    monkeypatch.setattr(load, "LoadRequest", with_field)


def test_a_throwaway_option_is_a_flag_a_form_field_a_limit_a_setting_and_a_reproduce_word(throwaway, tiny, capsys):
    parser = build_parser()
    assert "--throwaway N" in parser.format_help()
    argv = ["--model", "tiny-random", "--requests", "1", "--max-new-tokens", "2", "--contestants", "naive",
            "--trials", "1", "--solo-checks", "0", "--throwaway", "3"]
    request = load_request_from_args(parser.parse_args(argv))
    assert request.throwaway == 3 and request.value("throwaway") == 3

    assert "throwaway" in settings_names() and form_defaults()["throwaway"] == 0
    runner = SimpleNamespace(model_choices=lambda: ["tiny-random"], model_spec="tiny-random", allow_any_model=False)
    with gr.Blocks():
        fields = under_load._settings(SimpleNamespace(runner=runner), form_defaults())  # the tab's form, as it builds
    field = fields["throwaway"]
    assert field.elem_id == "load-throwaway" and field.label == "Throwaway" and field.value == 0
    assert request_from_form({"throwaway": "4"}).throwaway == 4
    with pytest.raises(ValueError, match=r"^throwaway must be between 0 and 5, got 6 \(this server's limit"):
        request_from_form({"throwaway": 6}, LoadLimits.exposed())
    assert "throwaway 7" in LoadLimits.local().describe()

    report_section = run_load(tiny, request)
    assert report_section["request"]["throwaway"] == 3

    command = load_command(request, "tiny-random")
    assert "--throwaway 3" in command
    assert load_request_from_args(build_parser().parse_args(args_of(command))) == request
    assert "--throwaway" not in load_command(request_from_form({}), "tiny-random"), "a default is left out"
    assert capsys.readouterr().err == ""


def test_every_option_goes_to_the_command_line_and_back():
    """A request with every load option off its default: its reproduce command asks for the same request."""
    request = LoadRequest(
        workload=WorkloadSpec(requests=5, max_new_tokens=20, rate=2.5, prompts="built-in", prompt_min=3,
                              prompt_max=9, output_lengths="max", output_median=7, seed=11),
        max_batch=3, options=GenerationOptions(cache="static", max_new_tokens=20, compile="default", lag=2,
                                               ignore_eos=True),
        contestants=("naive", "pipelined"), trials=2, sweep_batch=(1, 2), sweep_rate=(0.5, 4.0), audit=True,
        no_kernel_measurement=True, solo_checks=3)
    off_default = [o.name for o in load.LOAD_OPTIONS if request.value(o.name) == o.default]
    assert not off_default, f"set these off their default too: {off_default}"
    again = load_request_from_args(build_parser().parse_args(args_of(load_command(request, "tiny-random"))))
    assert again == request


def test_the_cli_and_a_cpu_page_share_each_default_and_the_model_picks_the_prompts():
    assert request_from_values({}) == LoadRequest() == request_from_form(form_defaults())
    real = request_from_values({}, random_weights=False).workload
    assert (real.prompts, real.output_lengths) == ("built-in", "max")
    random_weights = request_from_values({}, random_weights=True).workload
    assert (random_weights.prompts, random_weights.output_lengths) == ("synthetic", "lognormal")


@pytest.mark.parametrize(("argv", "named"), [
    (["--max-batch", "2"], "--max-batch"),
    (["--solo-checks", "0", "--sweep-rate", "1,2"], "--sweep-rate, --solo-checks"),  # in the table's order
])
def test_a_load_flag_without_requests_is_one_line_and_exit_2(argv, named, capsys):
    assert bench_main(["--model", "tiny-random", "--device", "cpu", *argv]) == 2
    assert capsys.readouterr().err == f"core.bench: error: {named}: for a run under load, which --requests N turns on\n"
