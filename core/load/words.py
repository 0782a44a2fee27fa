"""How a load report's numbers are said, the same on the CLI (core.load.report, which imports torch) and on the page
(dashboard.views.load_view, which must not): the contestants' names, a point's name, the pipelined loop's gain at a
point, and the table's cells. Torch-free."""

from __future__ import annotations

from typing import Any

from core.request.load import HF_BATCH, HF_BATCH_ASYNC, NAIVE, NO_CHECK, PIPELINED

NAMES = {NAIVE: NAIVE, PIPELINED: PIPELINED, NO_CHECK: "ceiling (no-check)", HF_BATCH: HF_BATCH,
         HF_BATCH_ASYNC: HF_BATCH_ASYNC}


def point_name(point: dict[str, Any]) -> str:
    """"B=4, all at once" or "B=4, 2 requests/s"."""
    rate = "all at once" if not point["rate"] else f"{point['rate']:g} requests/s"
    return f"B={point['slots']}, {rate}"


def gain(entries: dict[str, Any]) -> float | None:
    """The pipelined loop's output tokens/s over the naive loop's, at one point."""
    if "pipelined" in entries and "naive" in entries and entries["naive"]["tokens_per_s"]:
        return entries["pipelined"]["tokens_per_s"] / entries["naive"]["tokens_per_s"]
    return None


def num(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def pair(a: float | None, b: float | None, digits: int = 1) -> str:
    return "–" if a is None else f"{a:,.{digits}f} / {num(b, digits)}"


def pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def same(entry: dict[str, Any]) -> str:
    """Whether every checked request's tokens equal its solo decode: yes, NO, or – where none was checked."""
    solo = entry.get("identical_to_solo")
    return "–" if solo is None else ("yes" if solo else "NO")
