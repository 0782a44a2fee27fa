"""A report, a run's status and a pane's rate as the page's Markdown (no gradio here: testable as text).

Text that came from a user or a file is shown as text, never as HTML or Markdown (`plain`), and never whole
(core.text.clip): a field of a replayed report or of a visitor's request is shown at most
core.text.SHOWN_FIELD_CHARS long.
"""

from __future__ import annotations

import collections
import html
import re
from typing import Any

from core.documents.upgrades import upgrade_report
from core.measure.identity import difference_note
from core.measure.stats import spread, verdict_sentence
from core.request.options import LOOPS, MAX_PROMPT_CHARS
from core.text import SHOWN_FIELD_CHARS, clip
from dashboard.service.page_record import PageRecord, report_notices
from dashboard.views.summary_table import headline, summary_rows

# The longest reproduce command a page shows: a prompt at the page's limit, quoted, plus the flags.
MAX_COMMAND_CHARS = 2 * MAX_PROMPT_CHARS + 2000
_MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>:])")


def plain(text: Any, limit: int = SHOWN_FIELD_CHARS) -> str:
    """Text shown as itself in a Markdown component: one line, at most about `limit` characters of it (`clip`),
    HTML escaped, Markdown punctuation escaped (':' and '.' too, so that a URL in it does not become a link)."""
    one_line = " ".join(clip(text, limit).split())
    return _MARKDOWN_SPECIALS.sub(r"\\\1", html.escape(one_line, quote=False))


_EMPHASIS = re.compile(r"(?<!\\)(\*\*|\*)")
_ESCAPED = re.compile(r"\\(.)")


def as_text(markdown: Any) -> str:
    """What a Markdown string of this page shows, as plain text (for the API's callers): emphasis markers and
    backslash escapes undone, HTML entities decoded, each line break a newline."""
    text = _EMPHASIS.sub("", str(markdown or ""))
    return html.unescape(_ESCAPED.sub(r"\1", text)).replace("  \n", "\n")


def headline_md(report: dict[str, Any], page: PageRecord | None = None) -> str:
    """The verdict first (decode phase, beyond noise or not), then end-to-end, TTFT, identity and the clock."""
    facts = headline(report)
    lines = [f"**{plain(verdict_sentence(facts['verdict']))}**" if facts["verdict"].get("ratio") else
             "**pipelined / naive: –**"]
    extra = []
    if facts["end_to_end"]:
        extra.append(f"end to end {facts['end_to_end']:.3f}×")
    ttft = ttft_md(report, facts)
    if ttft:
        extra.append(ttft)
    identical = "yes" if facts["identical"] else ("NO* (see note)" if not facts["self_consistent"] else "NO")
    extra.append(f"outputs identical: {identical}")
    clock = "GPU clock (CUDA events)" if facts["clock"] == "cuda-events" else "host clock (no CUDA events)"
    extra.append(f"steps timed on the {clock}")
    lines.append(" · ".join(extra))
    notices = report_notices(report, page)
    notices += identity_notes(report)
    lines += [f"Note: {plain(n)}" for n in notices]
    return "  \n".join(lines)


CPU_TTFT_CAVEAT = ("on the CPU the first token's time moves with whatever else the machine does, so it tells the "
                   "loops apart by nothing")


def ttft_md(report: dict[str, Any], facts: dict[str, Any]) -> str:
    """Both loops' median TTFT with its spread over trials; on the host clock, the caveat that it varies there."""
    ttft = facts["ttft"]
    if ttft.get("naive") is None or ttft.get("pipelined") is None:
        return ""
    spreads = []
    for name in LOOPS:
        values = [r["timings"]["ttft_ms"] for r in report.get("runs", []) if r.get("contestant") == name
                  and isinstance(r.get("timings", {}).get("ttft_ms"), int | float)]
        share = spread(values) if len(values) > 1 and min(values) > 0 else None
        spreads.append(f"{share:.0%}" if share is not None else "–")
    text = (f"TTFT {ttft['naive']:.1f} / {ttft['pipelined']:.1f} ms (naive / pipelined, median; spread over trials "
            f"{spreads[0]} / {spreads[1]})")
    return f"{text}; {CPU_TTFT_CAVEAT}" if facts["clock"] != "cuda-events" else text


def identity_notes(report: dict[str, Any]) -> list[str]:
    """Why outputs differ, where the report can say (core.measure.identity); a bare NO* where it cannot."""
    note = difference_note(report)
    return [note] if note else []


def table_rows(report: dict[str, Any], page: PageRecord | None = None) -> list[list[Any]]:
    """The summary table's cells, a dash where a number does not exist."""
    return [[cell(v) for v in row] for row in summary_rows(report, page)]


def cell(value: Any) -> Any:
    """A table cell: a dash for a number that does not exist, a string clipped (`clip`)."""
    if value is None:
        return "–"
    return clip(value) if isinstance(value, str) else value


def status_md(snap: dict[str, Any]) -> str:
    notices = "".join(f"  \nNote: {plain(n)}" for n in snap.get("notices") or [])
    return f"**{plain(snap.get('status', ''))}**{notices}"


def rate_md(name: str, pane: dict[str, Any], batch: int = 1) -> str:
    rows = f"  \nshowing row 1 of {batch}; tok/s counts all {batch} rows" if batch > 1 else ""
    if pane.get("warmup") and pane.get("live"):
        return f"**{name}** · warm-up (untimed, not counted){rows}"
    rate = pane.get("tokens_per_s")
    number = f"{rate:,.1f} tok/s" if rate else "– tok/s"
    live = " (live)" if pane.get("live") else " (decode, median)" if rate else ""
    return f"**{name}** · {number}{live}{rows}"


def trials_shown(report: dict[str, Any]) -> str:
    """The trials a replayed report holds: those it asked for, or for a run cut short, the rounds its runs hold of
    those planned."""
    planned = upgrade_report(report)["request"].get("trials", "?")
    if report.get("interrupted") is not True:
        return f"{planned} trial(s)"
    facts = report.get("interruption") if isinstance(report.get("interruption"), dict) else {}
    planned = facts.get("trials_planned", planned)
    done = min(collections.Counter(run["contestant"] for run in report.get("runs", [])).values(), default=0)
    if isinstance(planned, int) and done >= planned:  # cut short after its trials (in the kernel measurement, say)
        return f"{done} trial(s)"
    return f"{done} of {planned} trial(s) (cut short)"


def replay_command(report: dict[str, Any]) -> str:
    """The command a replayed report says reproduces it, as text of a bounded length."""
    command = report.get("command")
    if not isinstance(command, str) or not command:
        return "(this report was written before reports carried the command that reproduces them)"
    if len(command) > MAX_COMMAND_CHARS:
        return command[:MAX_COMMAND_CHARS] + f"… ({len(command) - MAX_COMMAND_CHARS:,} more characters not shown)"
    return command
