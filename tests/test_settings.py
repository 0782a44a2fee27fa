"""The run form's reproduce command: what the page shows is what a shell runs."""

from __future__ import annotations

import subprocess

import pytest

from core.run_schema import cli_command, shell_quote
from tests.conftest import page_request

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
    request, _ = page_request(dict(prompt=prompt))
    command = cli_command(request, "tiny-random", environ={})
    assert command.isprintable(), command  # nothing invisible or reordering is shown
    words = shell_words(command)
    assert words[words.index("--prompt") + 1] == prompt


def test_plain_words_keep_their_familiar_quoting():
    assert shell_quote("Hello there") == "'Hello there'"
    assert shell_quote("tiny-random") == "tiny-random"
    assert shell_quote("a\u202eb") == "$'a\\xe2\\x80\\xaeb'"


def test_tuning_variables_are_quoted_the_same_way():
    request, _ = page_request(dict(prompt="Hi"))
    command = cli_command(request, "tiny-random", environ={"SYNCSCOPE_PDL": "off\u202e"})
    assert command.startswith("SYNCSCOPE_PDL=$'off\\xe2\\x80\\xae' python -m core.bench")
