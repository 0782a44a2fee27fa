"""Where a decode step's device time goes, from core.bench reports with a kernel measurement: kernel time by kind and
the gaps between kernels, in µs a step, one column per report, as a Markdown table (docs/NUMBERS.md).

    python benchmarks/step_breakdown.py [--contestant pipelined] LABEL=REPORT.json[.gz] ...
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.documents.schema import load

ORDER = ("matrix products", "attention", "normalisation and rotary", "elementwise", "sampling", "copies", "other")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", help="LABEL=PATH")
    parser.add_argument("--contestant", default="pipelined")
    args = parser.parse_args(argv)
    columns = []
    for item in args.reports:
        label, _, path = item.partition("=")
        columns.append((label, column(load(Path(path)), args.contestant)))
    print(markdown(columns))
    return 0


def column(report: dict[str, Any], contestant: str) -> dict[str, Any]:
    """µs a step by kind, the gaps, the kernels' sum, the timed step and the decode rate of one contestant."""
    measured = report["kernel_measurement"][contestant]
    summary = report["summary"][contestant]
    cells = {kind["kind"]: (kind["ms_per_step"] * 1000, kind["kernels_per_step"]) for kind in measured["kinds"]}
    return {"kinds": cells, "gaps": measured["idle_inside_ms_per_step"] * 1000,
            "kernels": sum(us for us, _ in cells.values()), "count": sum(n for _, n in cells.values()),
            "step": summary["ms_per_token_p50"] * 1000, "rate": summary["decode_tokens_per_s"]}


def markdown(columns: list[tuple[str, dict[str, Any]]]) -> str:
    lines = ["| µs a decode step (kernels) | " + " | ".join(label for label, _ in columns) + " |",
             "|---|" + "---:|" * len(columns)]
    kinds = [kind for kind in ORDER if any(kind in c["kinds"] for _, c in columns)]
    kinds += sorted({k for _, c in columns for k in c["kinds"]} - set(kinds))
    for kind in kinds:
        cells = [f"{c['kinds'][kind][0]:,.0f} ({c['kinds'][kind][1]:.0f})" if kind in c["kinds"] else "-"
                 for _, c in columns]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines.append("| all kernels | " + " | ".join(f"{c['kernels']:,.0f} ({c['count']:.0f})" for _, c in columns) + " |")
    gaps = " | ".join(f"{c['gaps']:,.0f}" for _, c in columns)
    lines.append(f"| gaps between kernels (in the measured run) | {gaps} |")
    lines.append("| timed step, p50 | " + " | ".join(f"{c['step']:,.0f}" for _, c in columns) + " |")
    lines.append("| decode tok/s | " + " | ".join(f"{c['rate']:,.1f}" for _, c in columns) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
