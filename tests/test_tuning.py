"""The tuning switches (core.tuning): one row each, read and checked once from the environment into a `Tuning`, a
malformed one refused in one line naming its variable and choices, and floor_ab.sh's labels. Torch-free."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.bench import main
from core.tuning import RETIRED, SWITCH, SWITCHES, Tuning, labels


def test_unset_or_blank_variables_take_their_defaults():
    assert Tuning.from_environment({}) == Tuning()
    assert Tuning.from_environment({"SYNCSCOPE_TP_ALL_REDUCE": "  "}).tp_all_reduce == "auto"
    assert Tuning.from_environment({"SYNCSCOPE_TP_ALL_REDUCE": " NCCL "}).tp_all_reduce == "nccl"
    tuning = Tuning.from_environment({"SYNCSCOPE_INDUCTOR_OPTIONS": ' {"max_autotune": true} '})
    assert tuning.inductor_options == {"max_autotune": True}
    assert {switch.key: switch.default for switch in SWITCHES} == Tuning().as_report()


@pytest.mark.parametrize(("name", "value", "message"), [
    ("SYNCSCOPE_DECODE_ATTENTION", "flash", "must be one of auto, reduce, split, sdpa, triton, got 'flash'"),
    ("SYNCSCOPE_PDL", "on", "must be one of off, safe, inductor, got 'on'"),
    ("SYNCSCOPE_TP_ALL_REDUCE", "two-shot", "must be one of auto, one-shot, nccl, got 'two-shot'"),
    ("SYNCSCOPE_TP_BARRIER", "lamport", "must be one of push, asm, atomic, got 'lamport'"),
    ("SYNCSCOPE_O_PROJ", "cublas", "must be one of library, inductor, got 'cublas'"),
    ("SYNCSCOPE_DECODE_PRODUCTS", "cublas", "must be one of auto, triton, inductor, got 'cublas'"),
    ("SYNCSCOPE_DECODE_LAYER", "sometimes", "must be one of on, off, got 'sometimes'"),
    ("SYNCSCOPE_STEP_COMMIT", "fused", "must be one of argmax, whole, got 'fused'"),
    ("SYNCSCOPE_INDUCTOR_OPTIONS", "{max_autotune}", "is not valid JSON"),
    ("SYNCSCOPE_INDUCTOR_OPTIONS", "[1]", "must be a JSON object of inductor options"),
])
def test_each_malformed_variable_is_named_by_the_cli_before_any_work(monkeypatch, capsys, name, value, message):
    with pytest.raises(ValueError, match=name):
        Tuning.from_environment({name: value})
    monkeypatch.setenv(name, value)
    assert main(["--model", "no-such-model", "--max-new-tokens", "2"]) == 2  # refused before the model is looked up
    err = capsys.readouterr().err
    assert err.startswith(f"core.bench: error: {name}") and message in err and err.count("\n") == 1


def test_every_switch_is_checked_and_a_value_outside_its_choices_is_refused():
    for switch in SWITCHES:
        with pytest.raises(ValueError, match=switch.variable):
            Tuning.from_environment({switch.variable: "[not a value]"})
        if switch.choices:
            with pytest.raises(ValueError, match=f"{switch.variable} must be one of {switch.choices_text}"):
                Tuning(**{switch.key: "[not a value]"})


def test_the_variables_of_the_switches_that_lost_are_no_longer_read():
    retired = {retired.variable: "[not a value]" for retired in RETIRED}
    assert Tuning.from_environment(retired) == Tuning()
    assert not set(retired) & {switch.variable for switch in SWITCHES}


def test_the_reproduce_assignments_are_the_switches_that_differ_from_their_default():
    tuning = Tuning.from_environment({"SYNCSCOPE_PDL": "safe", "SYNCSCOPE_O_PROJ": "library",
                                      "SYNCSCOPE_INDUCTOR_OPTIONS": '{"max_autotune": true}'})
    assert tuning.assignments() == {"SYNCSCOPE_INDUCTOR_OPTIONS": '{"max_autotune": true}', "SYNCSCOPE_PDL": "safe"}
    assert Tuning.from_environment(tuning.assignments()) == tuning  # set again, they make the same switches
    assert tuning.as_report() == {**Tuning().as_report(), "pdl": "safe", "inductor_options": {"max_autotune": True}}


@pytest.mark.parametrize(("switch", "step_graph", "products"), [
    ("auto", True, "triton"), ("auto", False, "inductor"), ("triton", False, "triton"), ("inductor", True, "inductor"),
])
def test_auto_products_are_the_kernels_in_step_graph_compiles_only(switch, step_graph, products):
    assert Tuning(decode_products=switch).decode_products_for(step_graph) == products


def test_the_labels_are_default_and_every_value_that_is_not_one():
    listed = dict(labels())
    assert listed.pop("default") == ""
    assert listed["o-proj-inductor"] == "SYNCSCOPE_O_PROJ=inductor"
    assert listed["decode-layer-off"] == "SYNCSCOPE_DECODE_LAYER=off"
    assert listed["step-commit-whole"] == "SYNCSCOPE_STEP_COMMIT=whole"
    assert len(listed) == sum(len(switch.choices) - 1 for switch in SWITCHES if switch.choices)
    for label, assignment in listed.items():  # each sets one switch to a value it is not by default
        variable, value = assignment.split("=")
        switch = next(s for s in SWITCHES if s.variable == variable)
        assert value in switch.choices[1:] and label.startswith(switch.key.replace("_", "-"))


def test_the_module_prints_its_labels_and_needs_no_torch():
    result = subprocess.run([sys.executable, "-m", "core.tuning", "--labels"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parent.parent)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{label} {assignment}".rstrip() for label, assignment in labels()]
    code = "import sys, core.tuning; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_a_switch_row_names_its_variable_after_its_key():
    assert SWITCH["o_proj"].variable == "SYNCSCOPE_O_PROJ"
    assert json.loads(SWITCH["inductor_options"].text({"a": 1})) == {"a": 1}
    with pytest.raises(ValueError, match="its variable must be SYNCSCOPE_O_PROJ"):
        type(SWITCH["o_proj"])("SYNCSCOPE_OPROJ", ("library",), "does", "o_proj")
