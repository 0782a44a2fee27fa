"""The run form's reproduce command: what the page shows is what a shell runs."""

from __future__ import annotations

import subprocess

import pytest

import app
from dashboard.settings import EXPOSED_LIMITS, RunSettings, cli_command, shell_quote

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
    script = f"set -- {command.split('python ', 1)[1]}; printf '%s\\0' \"$@\""
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True, env={"LC_ALL": "C"}).stdout
    return out.decode("utf-8").split("\0")[:-1]


@pytest.mark.parametrize("prompt", TRICKY)
def test_the_reproduce_command_runs_the_prompt_it_shows(prompt):
    request, _ = RunSettings(prompt=prompt).to_request()
    command = cli_command(request, prompt, "tiny-random", environ={})
    assert command.isprintable(), command  # nothing invisible or reordering is shown
    words = shell_words(command)
    assert words[words.index("--prompt") + 1] == prompt


def test_plain_words_keep_their_familiar_quoting():
    assert shell_quote("Hello there") == "'Hello there'"
    assert shell_quote("tiny-random") == "tiny-random"
    assert shell_quote("a\u202eb") == "$'a\\xe2\\x80\\xaeb'"


def test_tuning_variables_are_quoted_the_same_way():
    request, _ = RunSettings(prompt="Hi").to_request()
    command = cli_command(request, "Hi", "tiny-random", environ={"SYNCSCOPE_PDL": "off\u202e"})
    assert command.startswith("SYNCSCOPE_PDL=$'off\\xe2\\x80\\xae' python -m core.bench")


def test_exposed_limits_refuse_hours_of_work():
    with pytest.raises(ValueError, match="max new tokens must be between 1 and 1024"):
        RunSettings(prompt="hi", max_new_tokens=2000).to_request(limits=EXPOSED_LIMITS)
    with pytest.raises(ValueError, match="batch size must be between 1 and 8"):
        RunSettings(prompt="hi", batch=64).to_request(limits=EXPOSED_LIMITS)
    with pytest.raises(ValueError, match="trials must be between 1 and 10"):
        RunSettings(prompt="hi", trials=20).to_request(limits=EXPOSED_LIMITS)
    exposed = app.build_parser().parse_args(["--share"])
    assert app.limits_for(exposed) == EXPOSED_LIMITS and app.limits_for(exposed).max_run_s == 300
    assert app.limits_for(app.build_parser().parse_args([])).max_run_s is None
