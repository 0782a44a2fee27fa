"""Where a decode step's device time went, as Replay's table: the kernel measurement's kernel time by kind and the
gaps between kernels, per contestant (core.measure.kernel_measurement.kinds_per_step). A report written before the
measurement split kernels by kind gives one row of all its kernels; reports without the measurement (CPU runs, runs
with --no-kernel-measurement) give no rows."""

from __future__ import annotations

from typing import Any

from core.documents.bench_report import BenchReport

# Shares of the measurement's own step: tracing slows its host, so its gaps are longer than the timed trials' (the
# summary's "kernel % of the timed step" relates the same kernel time to the timed step).
STEP_TIME_LABEL = "Where a decode step's device time went (the kernel measurement)"
STEP_TIME_HEADERS = ("contestant", "part of the step", "µs a step", "kernels a step", "share of the measured step")
GAPS = "gaps between kernels"
ALL_KERNELS = "all kernels (this report does not split them by kind)"


def step_time_rows(report: BenchReport) -> list[list[Any]]:
    """One row per contestant and kind, costliest first, then the contestant's gaps; shares of the kernels' time
    plus the gaps, in the kernel measurement's own run."""
    rows: list[list[Any]] = []
    for name, measured in report.get("kernel_measurement", {}).items():  # NotRequired: only where it ran
        kinds = [kind for kind in measured.get("kinds") or []
                 if isinstance(kind, dict) and _number(kind.get("ms_per_step"))]
        if not kinds and _number(measured.get("kernel_busy_ms_per_step")):  # written before kinds were recorded
            kinds = [{"kind": ALL_KERNELS, "ms_per_step": measured["kernel_busy_ms_per_step"],
                      "kernels_per_step": measured.get("kernel_runs_per_step")}]
        if not kinds:
            continue
        gaps = measured.get("idle_inside_ms_per_step")
        gaps = gaps if _number(gaps) else None
        whole = sum(kind["ms_per_step"] for kind in kinds) + (gaps or 0.0)
        for kind in kinds:
            rows.append([str(name), str(kind.get("kind", "?")), round(kind["ms_per_step"] * 1000, 1),
                         _count(kind.get("kernels_per_step")), _share(kind["ms_per_step"], whole)])
        if gaps is not None:
            rows.append([str(name), GAPS, round(gaps * 1000, 1), None, _share(gaps, whole)])
    return rows


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


def _count(value: Any) -> float | None:
    return round(float(value), 1) if _number(value) else None


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.1%}" if whole > 0 else "-"
