"""An audit report (`python -m core.audit --json`) cut to what the Your loop tab draws, whatever the file holds: its
first MAX_SHOWN_STEPS steps and the reads in them (at most MAX_SHOWN_READS), its first MAX_SITES sites, every field
the page reads checked for its type and every text clipped (core.text.clip). The whole audit's own numbers (reads per
decode step, the sites' counts) are kept as it wrote them; `shown` says what the chart leaves out.

The parse itself is bounded: the top-level lists (events, steps, sites) are read one element at a time and only the
kept elements stay, so a long audit costs its text and the kept part, not a Python object per read. The rest of a
hostile file (a huge object anywhere else) is bounded by the process this runs in (dashboard.edge.audit_process).
Plain data in, plain data out: no gradio, no numpy."""

from __future__ import annotations

import codecs
import json
import math
import re
import sys
from collections.abc import Callable
from typing import Any

from core.audit.fixes import MAX_CODE_LINES
from core.documents.kinds import AUDIT, BENCH, NOT_AN_AUDIT_REPORT, PAGE, ReportError, kind_of
from core.documents.schema import json_bytes
from core.text import SENTENCE_FIELD_CHARS, SHOWN_FIELD_CHARS, clip

# The chart's window: a few thousand steps hold many screens of the 12-step first view, and the figure stays well
# under a megabyte for the browser.
MAX_SHOWN_STEPS = 2_000
MAX_SHOWN_READS = 5_000
MAX_SITES = 200  # the table's rows: sites come most read first
MAX_LIST_ITEMS = 50  # any other top-level list (argv, not_seen)
MAX_CALLERS = 4
STEP_LISTS = ("step_starts_ms", "step_ends_ms", "reads_per_step", "kernel_busy_ms_per_step")
NUMBERS_NEVER_NULL = ("step_starts_ms", "reads_per_step")
# Each text's limit, clipped here once: the view shows what the digest holds whole (up to HELD_CHARS: a field at
# SHOWN_FIELD_CHARS with clip's "… (N characters in all)"), so that the whole length it names is the file's.
TEXT_FIELDS = {"created": 40, "script": SENTENCE_FIELD_CHARS, "step_module": 80, "step_thread": 80,
               "note": SHOWN_FIELD_CHARS, "device": 80}
SITE_TEXTS = {"kind": 40, "file": SENTENCE_FIELD_CHARS, "code": SENTENCE_FIELD_CHARS, "function": 80, "thread": 80,
              "fix": SHOWN_FIELD_CHARS, "where": 40}
ENVIRONMENT_TEXTS = {"gpu": 80, "device": 80}
CODE_LINE_CHARS = 160
HELD_CHARS = SHOWN_FIELD_CHARS + 40
SITE_NUMBERS = ("per_step", "host_blocked_ms_per_step", "device_idle_after_ms_per_step")
IN_REPLAY = ("this JSON is a benchmark report (python -m core.bench), not an audit report of a program: open it in "
             "the Replay tab")
DAMAGED = "the audit report is incomplete or damaged"
NOT_GZIP = "it is not a readable gzip file"

_SCAN = json.JSONDecoder().scan_once  # json's C scanner: one whole JSON value at an offset
_SPACE = re.compile(r"[ \t\n\r]*")
_AFTER_ITEM = re.compile(r"[ \t\n\r]*([,\]])[ \t\n\r]*")


# ------------------------------------------------------------------------------------------------ the bounded parse

class _Reader:
    """The JSON text and a position in it."""

    def __init__(self, text: str):
        self.text, self.at = text, 0

    def next_char(self) -> str:
        """The next character that is not whitespace ("" at the end), without taking it."""
        self.at = _SPACE.match(self.text, self.at).end()  # type: ignore[union-attr]
        return self.text[self.at:self.at + 1]

    def take(self, char: str, wanted: str) -> None:
        if self.next_char() != char:
            raise self.error(f"Expecting {wanted}")
        self.at += 1

    def value(self) -> Any:
        self.next_char()
        try:
            value, self.at = _SCAN(self.text, self.at)
        except StopIteration:
            raise self.error("Expecting value") from None
        except json.JSONDecodeError as exc:
            raise self.error(exc.msg, exc.pos) from None
        except RecursionError:
            raise ReportError("the file nests too deeply to be an audit report") from None
        except ValueError:  # Python's own limit on an integer's digits (sys.get_int_max_str_digits)
            raise ReportError(f"the file holds a number of more than {sys.get_int_max_str_digits():,} digits, which "
                              "no audit report does") from None
        return value

    def key(self) -> str:
        self.take('"', "property name enclosed in double quotes")
        try:
            key, self.at = json.decoder.scanstring(self.text, self.at)
        except json.JSONDecodeError as exc:
            raise self.error(exc.msg, exc.pos) from None
        return key

    def error(self, message: str, at: int | None = None) -> ReportError:
        line = self.text.count("\n", 0, self.at if at is None else at) + 1
        return ReportError(f"the file is not valid JSON ({message} at line {line})")


class _Kept:
    """A top-level list as it is read: how many elements it has, and those `keep` kept."""

    def __init__(self, keep: Callable[[int, Any, list[Any]], bool]):
        self.keep, self.items, self.length = keep, [], 0

    def add(self, value: Any) -> None:
        if self.keep(self.length, value, self.items):
            self.items.append(value)
        self.length += 1


def _first(count: int) -> Callable[[int, Any, list[Any]], bool]:
    return lambda index, value, kept: index < count


def _in_window(index: int, event: Any, kept: list[Any]) -> bool:
    """A read the chart draws: one in the first MAX_SHOWN_STEPS steps (or before any step), while there is room.
    The kept reads are the file's first ones (none after the first left out), so each keeps its index there."""
    step = event.get("step") if isinstance(event, dict) else None
    return len(kept) == index <= MAX_SHOWN_READS and not (isinstance(step, int) and step >= MAX_SHOWN_STEPS)


def _keeper(key: str) -> _Kept:
    if key == "events":
        return _Kept(_in_window)  # one past the room: the step it fell in is where the window ends
    if key in STEP_LISTS:
        return _Kept(_first(MAX_SHOWN_STEPS))
    return _Kept(_first(MAX_SITES if key == "sites" else MAX_LIST_ITEMS))


def parse_bounded(text: str) -> tuple[dict[str, Any], dict[str, int]]:
    """The top-level object of JSON `text`, its lists cut by _keeper, and each list's whole length by key."""
    reader = _Reader(text.removeprefix("\ufeff"))
    if reader.next_char() != "{":
        reader.value()  # not JSON at all says so; any other JSON value is not an audit report
        raise ReportError(NOT_AN_AUDIT_REPORT)
    reader.at += 1
    document: dict[str, Any] = {}
    lengths: dict[str, int] = {}
    while reader.next_char() != "}":
        if document:
            reader.take(",", "',' delimiter")
        key = reader.key()
        reader.take(":", "':' delimiter")
        if reader.next_char() == "[":
            kept = _list(reader, _keeper(key))
            document[key], lengths[key] = kept.items, kept.length
        else:
            document[key] = reader.value()
            lengths.pop(key, None)
    reader.at += 1
    if reader.next_char():
        raise reader.error("Extra data")
    return document, lengths


def _list(reader: _Reader, kept: _Kept) -> _Kept:
    """The list at the reader's position, its elements given to `kept` one at a time (the loop is the parse's
    hot path: a long audit's millions of reads go through it)."""
    text = reader.text
    reader.at += 1
    if reader.next_char() == "]":
        reader.at += 1
        return kept
    while True:
        kept.add(reader.value())
        after = _AFTER_ITEM.match(text, reader.at)
        if after is None:
            raise reader.error("Expecting ',' delimiter")
        reader.at = after.end()
        if after.group(1) == "]":
            return kept


def text_of_bytes(data: bytes, limit: int) -> str:
    """The JSON text of an uploaded file's bytes: gunzipped where it is gzip, at most `limit` bytes either way."""
    try:
        raw = json_bytes(data, limit)  # the size limit, gzip and the empty file, as uploads have them
    except ReportError as exc:
        if str(exc).startswith(NOT_GZIP) and "cut short" not in str(exc):  # zlib's own words: "Error -3 while ..."
            raise ReportError(f"{NOT_GZIP} (its compressed data is damaged)") from None
        raise
    try:
        return raw.removeprefix(codecs.BOM_UTF8).decode("utf-8")
    except UnicodeDecodeError:
        raise ReportError("the file is not UTF-8 text, so not a report written by this project") from None


# ------------------------------------------------------------------------------------------------ the digest

def is_audit(document: Any) -> bool:
    """Whether a parsed JSON document is an audit report (core.documents.kinds.kind_of)."""
    return kind_of(document) == AUDIT


def digest_bytes(data: bytes, limit: int) -> dict[str, Any]:
    """The digest of an audit report's file bytes (see digest); ReportError in one line."""
    return digest(*parse_bounded(text_of_bytes(data, limit)))


def digest(document: dict[str, Any], lengths: dict[str, int]) -> dict[str, Any]:
    """An audit report as the page draws it: parse_bounded's document checked field by field, texts clipped, the
    chart's window cut to whole steps, and `shown`: how many steps, reads and sites the file holds and the chart
    and table show."""
    schema = document.get("schema")
    kind = kind_of(document) if isinstance(schema, str) else None  # kind_of str()s any other value
    if kind in (BENCH, PAGE):
        raise ReportError(IN_REPLAY, kind)
    if kind != AUDIT:
        raise ReportError(NOT_AN_AUDIT_REPORT, kind)
    out: dict[str, Any] = {"schema": _clipped(schema, 40)}
    out.update(_texts(document, TEXT_FIELDS, ""))
    out["environment"] = _environment(document.get("environment"))
    for key in ("steps", "decode_steps", "reads"):
        out[key] = _whole(document.get(key), key, required=True)
    out["most_reads_in_a_decode_step"] = _whole(document.get("most_reads_in_a_decode_step"),
                                                "most_reads_in_a_decode_step")
    out["lagged_waits"] = _whole(document.get("lagged_waits", 0), "lagged_waits", required=True)
    for key in ("reads_per_decode_step", "copies_per_decode_step", "kernel_busy_fraction"):
        out[key] = _number(document.get(key), key)
    out["sites"] = [_site(site, i) for i, site in enumerate(_list_of(document, "sites"))]
    out["not_seen"] = [_clipped(_text(n, f"not_seen[{i}]") or "", SHOWN_FIELD_CHARS)
                       for i, n in enumerate(_list_of(document, "not_seen"))]
    steps = {key: _numbers(document, key) for key in STEP_LISTS}
    events = [_event(event, i) for i, event in enumerate(_list_of(document, "events"))]
    out.update(_window(steps, events, lengths))
    return out


def _window(steps: dict[str, list[float]], events: list[dict[str, Any]],
            lengths: dict[str, int]) -> dict[str, Any]:
    """The steps and reads the chart draws: whole steps only, so that a step shown holds all its reads."""
    shown_steps = min(MAX_SHOWN_STEPS, len(steps["step_starts_ms"]))
    if len(events) > MAX_SHOWN_READS:  # the reads ran out of room inside step `last`: the window ends before it
        last = events[MAX_SHOWN_READS]["step"]
        events = events[:MAX_SHOWN_READS]
        if isinstance(last, int):
            shown_steps = max(1, min(shown_steps, last))
            events = [e for e in events if not isinstance(e["step"], int) or e["step"] < shown_steps] or events
    window: dict[str, Any] = {key: values[:shown_steps] for key, values in steps.items()}
    total_steps = lengths.get("step_starts_ms", 0)
    window["events"] = events
    window["shown"] = {"steps": total_steps, "shown_steps": shown_steps, "reads": lengths.get("events", 0),
                       "shown_reads": len(events), "sites": lengths.get("sites", 0),
                       "shown_sites": min(lengths.get("sites", 0), MAX_SITES)}
    return window


def _site(site: Any, index: int) -> dict[str, Any]:
    where = f"sites[{index}]"
    if not isinstance(site, dict):
        raise _damaged(where, site, "an object")
    out: dict[str, Any] = {"index": _whole(site.get("index", index), f"{where}.index", required=True),
                           "line": _whole(site.get("line"), f"{where}.line", required=True),
                           "count": _number(site.get("count"), f"{where}.count", required=True),
                           "in_decode_steps": _number(site.get("in_decode_steps"), f"{where}.in_decode_steps")}
    out.update(_texts(site, SITE_TEXTS, f"{where}."))
    for key in SITE_NUMBERS:
        out[key] = _number(site.get(key), f"{where}.{key}")
    callers = site.get("callers")
    if isinstance(callers, list):
        out["callers"] = [_clipped(_text(c, f"{where}.callers") or "", SENTENCE_FIELD_CHARS)
                          for c in callers[:MAX_CALLERS]]
    code = _text(site.get("fix_code"), f"{where}.fix_code")
    if code:
        out["fix_code"] = "\n".join(_clipped(line, CODE_LINE_CHARS) for line in code.splitlines()[:4 * MAX_CODE_LINES])
    return out


def _event(event: Any, index: int) -> dict[str, Any]:
    where = f"events[{index}]"
    if not isinstance(event, dict):
        raise _damaged(where, event, "an object")
    return {"t_ms": _number(event.get("t_ms"), f"{where}.t_ms", required=True),
            "step": _whole(event.get("step"), f"{where}.step"), "site": _whole(event.get("site"), f"{where}.site")}


def _environment(env: Any) -> dict[str, Any]:
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise _damaged("environment", env, "an object")
    return _texts(env, ENVIRONMENT_TEXTS, "environment.")


def _texts(section: dict[str, Any], limits: dict[str, int], where: str) -> dict[str, str | None]:
    return {key: _clipped(text, limit) if (text := _text(section.get(key), where + key)) is not None else None
            for key, limit in limits.items()}


def _clipped(text: str, limit: int) -> str:
    """clip(), and a lone surrogate (JSON's "\\ud800", which is no character) made a replacement character: the
    page's answer is UTF-8."""
    return clip(text, limit).encode("utf-8", "replace").decode("utf-8", "replace")


def _text(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise _damaged(where, value, "text")


def _list_of(document: dict[str, Any], key: str) -> list[Any]:
    value = document.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _damaged(key, value, "a list")
    return value


def _numbers(document: dict[str, Any], key: str) -> list[float | None]:
    """A list of numbers; a step's end or kernel time may be null (not measured), its start and reads may not."""
    values, required = _list_of(document, key), key in NUMBERS_NEVER_NULL
    return [_number(v, f"{key}[{i}]", required=required) for i, v in enumerate(values)]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _number(value: Any, where: str, *, required: bool = False) -> Any:
    if (value is None and not required) or _is_number(value):
        return value
    raise _damaged(where, value, "a number")


def _whole(value: Any, where: str, *, required: bool = False) -> Any:
    if (value is None and not required) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise _damaged(where, value, "a whole number")


def _damaged(where: str, value: Any, expected: str) -> ReportError:
    """What is wrong with one field, in words: where it is, what it holds (a short quote) and what was expected."""
    return ReportError(f"{DAMAGED}: {clip(where, 80)} is {described(value)}, not {expected}")


def described(value: Any) -> str:
    """A value from a file or a visitor, in a few words for an error line: its kind, and a short quote of text."""
    if value is None:
        return "missing"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"the text \"{clip(value, 40)}\""
    if isinstance(value, list):
        return f"a list ({len(value):,} items)"
    if isinstance(value, dict):
        return "an object"
    return clip(value, 40)
