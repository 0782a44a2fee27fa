"""benchmarks/results_table.py reads a folder's reports whether they are plain or gzipped (large committed ones are)."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "results_table.py"
spec = importlib.util.spec_from_file_location("results_table", SCRIPT)
results_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(results_table)


def report(name: str, weight_bytes: int) -> dict:
    return {"case": {"name": name}, "model": {"weight_bytes": weight_bytes}}


def test_plain_and_gzipped_reports_are_read_and_ordered(tmp_path):
    (tmp_path / "big.json.gz").write_bytes(gzip.compress(json.dumps(report("big-step-graph", 20)).encode()))
    (tmp_path / "small.json").write_text(json.dumps(report("small-eager-static", 10)))
    (tmp_path / "manifest.json").write_text(json.dumps({"runs": []}))  # not a report: left out
    names = [r["case"]["name"] for r in results_table.load_reports(tmp_path)]
    assert names == ["small-eager-static", "big-step-graph"]
