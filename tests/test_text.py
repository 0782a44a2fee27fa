"""core.text: one clip for text from a file or a visitor, a report's file paths as a reader finds them, control
characters written out for a terminal, and a command's name as it was started."""

import subprocess
import sys

from core.text import SENTENCE_FIELD_CHARS, SHOWN_FIELD_CHARS, clip, command_name, escaped, printable, shown_path


def test_clip_keeps_short_text_and_says_how_long_a_cut_one_was():
    assert clip("short") == "short" and clip(None) == "" and clip(12) == "12"
    cut = clip("x" * 5000)
    assert cut == "x" * SHOWN_FIELD_CHARS + "… (5,000 characters in all)"
    assert clip("abcdef", 3) == "abc… (6 characters in all)"


def test_a_reports_path_is_shown_from_its_package_or_by_its_last_parts():
    assert shown_path("/usr/lib/python3/site-packages/transformers/generation/utils.py") == \
        "transformers/generation/utils.py"
    assert shown_path("/home/me/work/project/src/loop.py") == "project/src/loop.py"
    assert shown_path("core/loops/generation.py") == "core/loops/generation.py"
    assert shown_path(None) == "?"
    assert shown_path("x" * 1000).endswith("(1,000 characters in all)")
    assert len(shown_path("x" * 1000)) < SENTENCE_FIELD_CHARS + 40


def test_the_text_module_imports_no_torch():
    code = "import sys, core.text; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_control_characters_are_written_out_and_a_field_keeps_to_its_line():
    hostile = "a\x1b[2J\x1b]0;title\x07\nb\tc\x9b1m\u202edcba\x7f"
    assert escaped(hostile) == "a\\x1b[2J\\x1b]0;title\\x07\\nb\\tc\\x9b1m\\u202edcba\\x7f"
    assert printable(hostile) == "a\\x1b[2J\\x1b]0;title\\x07\nb\\tc\\x9b1m\\u202edcba\\x7f", "lines stay lines"
    assert escaped("plain text, é and 日本") == "plain text, é and 日本" and escaped(None) == ""


def test_a_command_is_named_as_it_was_started_installed_as_a_module_or_as_a_file():
    assert command_name("syncscope.core.audit", "syncscope-audit", "/venv/bin/syncscope-audit") == "syncscope-audit"
    assert command_name("syncscope.core.audit", "syncscope-audit", "/venv/Scripts/syncscope-audit.exe") == \
        "syncscope-audit"  # Windows' launcher
    assert command_name("core.audit", "syncscope-audit", "/repo/core/audit/__main__.py") == "python -m core.audit"
    assert command_name("core.audit", "syncscope-audit", "/venv/bin/pytest") == "python -m core.audit"
    assert command_name(None, "syncscope", "app.py") == "python app.py"
    assert command_name("syncscope.app", "syncscope", "/venv/bin/syncscope") == "syncscope"
