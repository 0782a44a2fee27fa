"""Markdown tables from a folder of `matrix.py` reports:

    python benchmarks/results_table.py benchmarks/lab/results/DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.documents.files import read_report_bytes, report_paths

ORDER = ("naive", "pipelined", "no-check", "pipelined-again", "hf", "hf-deferred")
CASE_ORDER = ("eager-dynamic", "eager-static", "compiled-static", "step-graph")


def load_reports(folder: Path) -> list[dict[str, Any]]:
    """Every report in `folder`, plain or gzipped (core.documents.files)."""
    reports = [json.loads(read_report_bytes(path)) for path in report_paths(folder)]
    reports = [r for r in reports if isinstance(r, dict) and "case" in r]
    return sorted(reports, key=lambda r: (r["model"]["weight_bytes"], _case_rank(r["case"]["name"])))


def _case_rank(name: str) -> int:
    return next((i for i, key in enumerate(CASE_ORDER) if name.endswith(key)), len(CASE_ORDER))


def first_difference(a: list[list[int]], b: list[list[int]]) -> int | None:
    for row_a, row_b in zip(a, b):
        index = next((i for i, (x, y) in enumerate(zip(row_a, row_b)) if x != y), None)
        if index is not None or len(row_a) != len(row_b):
            return index if index is not None else min(len(row_a), len(row_b))
    return None


def self_consistent(report: dict[str, Any], name: str) -> bool:
    runs = [r["token_ids"] for r in report["runs"] if r["contestant"] == name]
    return all(ids == runs[0] for ids in runs)


def floor_pct(report: dict[str, Any], tokens_per_s: float) -> str:
    case = report["case"]
    if case.get("eos_token_id"):
        return "-"
    steps_per_s = tokens_per_s / case["batch"]
    return f"{100 * steps_per_s * report['model']['hbm_floor_ms_per_step'] / 1000:.1f}%"


def rows(report: dict[str, Any]) -> list[str]:
    out = []
    for name in sorted(report["summary"], key=ORDER.index):
        s = report["summary"][name]
        ratio = report["ratios"].get(f"pipelined/{name}") if name != "pipelined" else None
        busy = "-" if s["gpu_busy_fraction"] is None else f"{s['gpu_busy_fraction']:.1%}"
        gap = "-" if s["gpu_gap_ms_mean"] is None else f"{1000 * s['gpu_gap_ms_mean']:.0f}"
        p50 = "-" if s["ms_per_token_p50"] is None else f"{s['ms_per_token_p50']:.3f}"
        reference = report["runs"][0]["token_ids"]
        diff = [first_difference(r["token_ids"], reference) for r in report["runs"] if r["contestant"] == name]
        same = "yes" if all(d is None for d in diff) else f"from token {min(d for d in diff if d is not None)}"
        out.append(
            f"| {report['case']['name']} | {name} | {s['tokens_per_s']:.1f} | {s['spread']:.1%} | {p50} | {busy} "
            f"| {gap} | {floor_pct(report, s['tokens_per_s'])} | {'-' if ratio is None else f'{1 / ratio:.3f}'} "
            f"| {'yes' if self_consistent(report, name) else 'no'} | {same} |")
    return out


def table(reports: list[dict[str, Any]]) -> str:
    head = ("| case | contestant | tok/s (median) | spread | ms/token p50 | GPU busy | mean idle gap µs "
            "| % of HBM floor | this/pipelined | same tokens every trial | same as naive trial 0 |\n"
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    return "\n".join([head, *(row for report in reports for row in rows(report))])


def ratio_table(reports: list[dict[str, Any]]) -> str:
    keys = ("pipelined/naive", "pipelined/no-check", "pipelined/pipelined-again", "pipelined/hf",
            "pipelined/hf-deferred")
    lines = ["| case | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys)]
    for report in reports:
        r = report["ratios"]
        cells = [f"{r[key]:.3f}" if key in r else "-" for key in keys]
        lines.append(f"| {report['case']['name']} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main() -> int:
    reports = load_reports(Path(sys.argv[1] if len(sys.argv) > 1 else "."))
    print(table(reports))
    print()
    print(ratio_table(reports))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
