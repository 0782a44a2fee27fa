"""Two runs side by side on the page: core.report.diff.diff_reports' result as tables, the settings that
differ first and highlighted, and lines that say what changed, in the CLI's words (each contestant's sentence, the
interval it was judged by, its call). Plain data only (no gradio): the page wraps these.

A table's value is Gradio's Dataframe dict, {"headers", "data", "metadata": {"styling", "display_value"}}, so that a
row can carry a background; each differing setting also says "differs" in its last cell, a cue that needs no colour.
"""

from __future__ import annotations

from typing import Any

from core.report.diff import diff_interval_text
from core.report.explain import duration

SETTINGS_HEADERS = ("setting", "A", "B", "")
RATES_HEADERS = ("contestant", "rate", "A", "B", "B / A", "call", "interval judged by")
WAITS_HEADERS = ("contestant", "host wait A", "host wait B", "device idle A", "device idle B")
DIFFERS = "differs"
DIFFERS_STYLE = "background-color: #fff3b0; font-weight: 600;"  # a pale yellow, readable in every colour vision
CALL_STYLES = {"faster": "font-weight: 600;", "slower": "font-weight: 600;", "control": "font-style: italic;"}
SENTENCE_CHARS = 600  # a contestant's sentence is diff_reports' own text, longer than a field from a file
CELL_CHARS = 80  # a setting's value as a cell (diff_reports clips report text to 120 already)


def summary_md(result: dict[str, Any], plain: Any) -> str:
    """Which settings differ, what that did to each contestant's rate, how they were judged (the control, or the
    drift allowance) and each contestant's sentence, as the CLI says them (`plain` escapes text for Markdown:
    dashboard.views.report_text.plain)."""
    differs = result["differs"]
    count = "1 setting differs" if len(differs) == 1 else f"{len(differs)} settings differ"
    said = (f"**{count}:** {plain(', '.join(differs))}."
            if differs else "**The two runs have the same settings** (any difference is the machine's own drift).")
    rates = [f"{row['name']} {_ratio(row['ratio'])} ({row['call']})" for row in result["contestants"]]
    if rates:
        said += "  \n**B / A:** " + plain("; ".join(rates), SENTENCE_CHARS) + "."
        said += "  \n" + plain(result["note"], SENTENCE_CHARS)
        said += "".join(f"  \n- {plain(row['sentence'], SENTENCE_CHARS)}" for row in result["contestants"])
    cut = [side.upper() for side in ("a", "b") if result[side]["interrupted"]]
    if cut:
        said += f"  \n**Cut short:** run {' and '.join(cut)} did not finish; its numbers cover the trials it completed."
    return said


def settings_table(result: dict[str, Any]) -> dict[str, Any]:
    """Every setting of the diff, those that differ first and highlighted (diff_reports' order within each)."""
    rows = sorted(result["settings"], key=lambda row: not row["differs"])
    data = [[row["name"], _cell(row["a"]), _cell(row["b"]), DIFFERS if row["differs"] else ""] for row in rows]
    styling = [[DIFFERS_STYLE if row["differs"] else ""] * len(SETTINGS_HEADERS) for row in rows]
    return table(SETTINGS_HEADERS, data, styling)


def rates_table(result: dict[str, Any]) -> dict[str, Any]:
    """Each contestant of both runs: its rate in A and B, B / A, the call, and the interval it was judged by."""
    data, styling = [], []
    for row in result["contestants"]:
        label = "decode tok/s" if row["metric"] == "decode_tokens_per_s" else "end-to-end tok/s"
        interval = diff_interval_text(row)
        data.append([row["name"], label, _rate(row["a"]), _rate(row["b"]), _ratio(row["ratio"]), row["call"],
                     "–" if interval == "-" else interval])
        style = CALL_STYLES.get(row["call"], "")
        styling.append(["", "", "", "", style, style, ""])
    for side in ("a", "b"):
        for name in result[f"only_in_{side}"]:
            data.append([name, "", *(("ran", "–") if side == "a" else ("–", "ran")), "–", f"only in {side.upper()}",
                         ""])
            styling.append([""] * len(RATES_HEADERS))
    return table(RATES_HEADERS, data, styling)


def waits_table(result: dict[str, Any]) -> dict[str, Any]:
    """Per decode step, each contestant's host wait and device idle in A and in B."""
    data = [[row["name"], duration(row["a_waits"]["host_wait_ms"]), duration(row["b_waits"]["host_wait_ms"]),
             duration(row["a_waits"]["device_idle_ms"]), duration(row["b_waits"]["device_idle_ms"])]
            for row in result["contestants"]]
    return table(WAITS_HEADERS, data, [[""] * len(WAITS_HEADERS) for _ in data])


def table(headers: tuple[str, ...], data: list[list[Any]], styling: list[list[str]]) -> dict[str, Any]:
    """A Dataframe value with a style per cell."""
    rows = [[_text(value) for value in row] for row in data]
    return {"headers": list(headers), "data": rows, "metadata": {"styling": styling, "display_value": rows}}


def empty_table(headers: tuple[str, ...]) -> dict[str, Any]:
    return table(headers, [], [])


def _cell(value: Any) -> str:
    text = "–" if value is None else str(value)
    return text if len(text) <= CELL_CHARS else text[:CELL_CHARS - 1] + "…"


def _text(value: Any) -> str:
    return "–" if value is None else str(value)


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f}"


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}×"
