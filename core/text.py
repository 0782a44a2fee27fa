"""Text from a file or a visitor, made short enough to show (a report can hold a field of any size). Torch-free: the
page, the CLI, the report's checks and the sentences about a run all clip with `clip`, by one of the two limits here.
And a command's name as it was started (`command_name`), for its usage line and its messages.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

SENTENCE_FIELD_CHARS = 120  # the most of a report's field that a sentence about the run quotes (core.report.explain)
# The most of any one field (a replayed report's model spec, a visitor's text, an error that quotes either) that the
# page shows, a status line holds or an error message quotes.
SHOWN_FIELD_CHARS = 300


def clip(text: Any, limit: int = SHOWN_FIELD_CHARS) -> str:
    """`text` as a string ("" for None) of at most `limit` characters and a short suffix: past the limit, its start,
    an ellipsis and its whole length ("… (12,345 characters in all)")."""
    text = "" if text is None else str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters in all)"


def shown_path(path: Any) -> str:
    """A file named in a report, as a reader finds it on any machine: from its package on where it lies in an
    installed one (transformers/...), else its last three parts if absolute; clipped for a sentence. (The audit
    shortens paths on the machine it runs on, by its import roots: core.audit.sites.path_from_root.)"""
    text = str(path or "?")
    for marker in ("site-packages/", "dist-packages/"):
        if marker in text:
            text = text.rsplit(marker, 1)[1]
    if os.path.isabs(text):
        text = "/".join(text.split("/")[-3:]) if "transformers/" not in text else \
            "transformers/" + text.rsplit("transformers/", 1)[1]
    return clip(text, SENTENCE_FIELD_CHARS)


def command_name(module: str | None, script: str | None = None, started: str | None = None) -> str:
    """A command as it was started (`started`: sys.argv[0]), for its usage line: `script` where that is the installed
    command that ran (syncscope-audit); else `python -m MODULE`, the module's name as imported (core.audit in the
    checkout, syncscope.core.audit installed); else, for a file run as a script (no module), `python FILE` as given."""
    started = sys.argv[0] if started is None else started
    if script and os.path.basename(started).removesuffix(".exe") == script:
        return script
    return f"python -m {module}" if module else f"python {started}"


# C0 (tab and newline among them), DEL and C1, and the bidirectional overrides and isolates ("Trojan Source"): what a
# terminal acts on or reorders instead of showing.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_LINE_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def escaped(text: Any) -> str:
    """`text` as a string with every control character written out as Python writes it (ESC as \\x1b, a newline as
    \\n): a field from a file can neither clear the terminal, set its title, nor start a line of its own."""
    return _CONTROL.sub(_written_out, "" if text is None else str(text))


def printable(text: Any) -> str:
    """Lines for a terminal: every control character but the newline written out (`escaped`); for what a printer
    assembles from fields, each already `escaped`."""
    return _LINE_CONTROL.sub(_written_out, "" if text is None else str(text))


def _written_out(found: re.Match[str]) -> str:
    return repr(found.group())[1:-1]
