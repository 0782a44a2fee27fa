"""A bench report's numbers as the page's rows hold them: rounded, as percents or microseconds, and the clock its
loops were timed on. Plain data: the run history (dashboard.service.run_history) and the page's tables and charts
(dashboard.views) read them from here."""

from __future__ import annotations

from core.documents.bench_report import BenchReport
from core.documents.upgrades import upgrade_report
from core.request.options import LOOPS


def clock_of(report: BenchReport) -> str:
    """'cuda-events' when the loops were timed on the GPU clock, else 'host' (also for no report yet: {})."""
    clocks = {r["timings"].get("clock") for r in upgrade_report(report)["runs"] if r["contestant"] in LOOPS}
    return "cuda-events" if clocks == {"cuda-events"} else "host"


def rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(float(value), digits)


def micro(ms: float | None) -> float | None:
    """Milliseconds as microseconds."""
    return None if ms is None else ms * 1000


def percent(fraction: float | None) -> float | None:
    return None if fraction is None else fraction * 100
