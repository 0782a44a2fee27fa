"""The page's Markdown (dashboard.views.report_text, run_summary, load_view: what gr.Markdown shows) as HTML, for a page
that has no Markdown component: the exported run (dashboard.views.run_html).

Only the little Markdown those functions write: paragraphs, "- " lists, a hard break at a line's two trailing
spaces, **strong**, *emphasis*, `code` and backslash escapes. Everything else is text: every character that is not
one of these marks is HTML-escaped here, whatever the Markdown held (`plain` escaped a report's fields already; they
are unescaped and escaped again, so that nothing is escaped twice and nothing raw gets through).
"""

from __future__ import annotations

import html
import re
import string
from dataclasses import dataclass

_HARD_BREAK = re.compile(r" {2,}$")
_ESCAPABLE = set(string.punctuation)
_TAGS = {1: "em", 2: "strong"}


@dataclass
class _Delimiter:
    """A run of asterisks: where it may open or close emphasis, and the tag it became (None: it stays text)."""

    length: int
    opens: bool
    closes: bool
    tag: str | None = None
    closing: bool = False


def markdown_html(markdown: str) -> str:
    """The HTML of `markdown`: a <p> per paragraph, a <ul> per block of "- " lines."""
    blocks = [block for block in re.split(r"\n\s*\n", str(markdown or "").strip()) if block.strip()]
    return "\n".join(_block_html(block) for block in blocks)


def _block_html(block: str) -> str:
    lines = block.split("\n")
    if all(line.lstrip().startswith("- ") for line in lines):
        items = "".join(f"<li>{inline_html(line.lstrip()[2:])}</li>" for line in lines)
        return f"<ul>{items}</ul>"
    parts = []
    for index, line in enumerate(lines):
        last = index == len(lines) - 1
        parts.append(inline_html(line.strip()) + ("" if last else "<br>" if _HARD_BREAK.search(line) else " "))
    return f"<p>{''.join(parts)}</p>"


def inline_html(text: str) -> str:
    """One line of Markdown as HTML: code spans, emphasis and escapes; the rest escaped text."""
    tokens = _tokens(text)
    _pair([token for token in tokens if isinstance(token, _Delimiter)])
    out = []
    for token in tokens:
        if isinstance(token, _Delimiter):
            out.append(f"<{'/' if token.closing else ''}{token.tag}>" if token.tag else "*" * token.length)
        elif isinstance(token, tuple):
            out.append(f"<code>{html.escape(token[1], quote=False)}</code>")
        else:
            out.append(html.escape(html.unescape(token), quote=False))
    return "".join(out)


def _tokens(text: str) -> list[str | tuple[str, str] | _Delimiter]:
    """Text pieces (str), code spans (("code", its text)) and asterisk runs (_Delimiter), in order."""
    tokens: list[str | tuple[str, str] | _Delimiter] = []
    plain: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text) and text[i + 1] in _ESCAPABLE:
            plain.append(text[i + 1])
            i += 2
        elif char == "`" and (end := text.find("`", i + 1)) != -1:
            tokens += ["".join(plain), ("code", text[i + 1:end])]
            plain, i = [], end + 1
        elif char == "*":
            length = len(text[i:]) - len(text[i:].lstrip("*"))
            before, after = text[i - 1] if i else " ", text[i + length] if i + length < len(text) else " "
            tokens += ["".join(plain), _Delimiter(length, opens=not after.isspace(), closes=not before.isspace())]
            plain, i = [], i + length
        else:
            plain.append(char)
            i += 1
    tokens.append("".join(plain))
    return [token for token in tokens if token != ""]


def _pair(delimiters: list[_Delimiter]) -> None:
    """Pair each closing run with the nearest open run of its length (1: emphasis, 2: strong); the rest stay text."""
    open_runs: list[_Delimiter] = []
    for run in delimiters:
        if run.length not in _TAGS:
            continue
        opener = next((o for o in reversed(open_runs) if o.length == run.length), None) if run.closes else None
        if opener is not None:
            del open_runs[open_runs.index(opener):]
            opener.tag = run.tag = _TAGS[run.length]
            run.closing = True
        elif run.opens:
            open_runs.append(run)
