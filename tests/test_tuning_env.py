"""The SYNCSCOPE_* tuning variables: read in one torch-free place, and a malformed one refused with its name."""

import subprocess
import sys

import pytest

from core.bench import main
from core.options import TUNING_ENV, check_tuning_environment, env_choice, inductor_options_from_env


def test_unset_or_blank_variables_take_their_defaults():
    check_tuning_environment({})
    assert env_choice("X", ("auto", "nccl"), {"X": "  "}) == "auto"
    assert env_choice("X", ("auto", "nccl"), {"X": " NCCL "}) == "nccl"
    assert inductor_options_from_env({"SYNCSCOPE_INDUCTOR_OPTIONS": ' {"max_autotune": true} '}) == {
        "max_autotune": True}


@pytest.mark.parametrize(("name", "value", "message"), [
    ("SYNCSCOPE_DECODE_ATTENTION", "flash", "must be one of auto, reduce, split, sdpa, triton, got 'flash'"),
    ("SYNCSCOPE_PDL", "on", "must be one of off, safe, inductor, got 'on'"),
    ("SYNCSCOPE_KERNEL_PDL", "safe", "must be one of off, wait, prefetch, got 'safe'"),
    ("SYNCSCOPE_TP_ALL_REDUCE", "two-shot", "must be one of auto, one-shot, nccl, got 'two-shot'"),
    ("SYNCSCOPE_TP_BARRIER", "lamport", "must be one of push, asm, atomic, got 'lamport'"),
    ("SYNCSCOPE_O_PROJ", "cublas", "must be one of library, inductor, got 'cublas'"),
    ("SYNCSCOPE_DECODE_PRODUCTS", "cublas", "must be one of auto, triton, inductor, got 'cublas'"),
    ("SYNCSCOPE_ATTENTION_PREFETCH", "o_proj", "must be one of off, on, got 'o_proj'"),
    ("SYNCSCOPE_STEP_COMMIT", "fused", "must be one of argmax, whole, got 'fused'"),
    ("SYNCSCOPE_PRODUCT_PREFETCH", "all", "must be one of off, on, got 'all'"),
    ("SYNCSCOPE_INDUCTOR_OPTIONS", "{max_autotune}", "is not valid JSON"),
    ("SYNCSCOPE_INDUCTOR_OPTIONS", "[1]", "must be a JSON object of inductor options"),
])
def test_each_malformed_variable_is_named_by_the_cli_before_any_work(monkeypatch, capsys, name, value, message):
    with pytest.raises(ValueError, match=name):
        check_tuning_environment({name: value})
    monkeypatch.setenv(name, value)
    assert main(["--model", "no-such-model", "--max-new-tokens", "2"]) == 2  # refused before the model is looked up
    err = capsys.readouterr().err
    assert err.startswith(f"core.bench: error: {name}") and message in err


def test_the_checks_need_no_torch():
    code = ("import sys; from core.options import check_tuning_environment; check_tuning_environment({}); "
            "print('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_every_tuning_variable_is_checked():
    for name in TUNING_ENV:
        with pytest.raises(ValueError, match=name):
            check_tuning_environment({name: "[not a value]"})
