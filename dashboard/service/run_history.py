"""The run history: one row per finished run (`history_row`), kept for its owner's downloads (`history_csv`).

Rows hold run data only (options and numbers; no prompt text, host names or paths), so the CSV and JSON are safe to
offer to the visitor who ran them.
"""

from __future__ import annotations

import collections
import csv
import io
import json
import threading
import time
from typing import Any

from core.documents.bench_report import BenchReport
from core.request.options import HF, LOOPS, NO_CHECK, RUN_OPTIONS, adapt_to_device
from dashboard.service.report_numbers import clock_of, percent, rounded

HISTORY_LIMIT = 500
HISTORY_SCHEMA = "syncscope.history/1"
# cache, compile and streams are what the loops ran with; compile_asked is the form's, and notes say why they differ.
# The run options marked history=True in core.request.options.RUN_OPTIONS have a column each, as they ran.
OPTION_COLUMNS = tuple(option.name for option in RUN_OPTIONS if option.history)
HISTORY_FIELDS = ("run", "finished", "status", "model", "device", "dtype", "tp", *OPTION_COLUMNS, "compile_asked",
                  "sampling", "naive_decode_tok_s", "pipelined_decode_tok_s", "naive_tok_s", "pipelined_tok_s",
                  "hf_tok_s", "speedup", "verdict", "naive_ttft_ms", "pipelined_ttft_ms", "naive_p50_ms",
                  "pipelined_p50_ms", "naive_p95_ms", "pipelined_p95_ms", "naive_kernel_busy_pct",
                  "pipelined_kernel_busy_pct", "naive_reads_per_step", "pipelined_reads_per_step", "compile_ms",
                  "identical", "clock", "notes", "error")


class RunHistory:
    """The newest HISTORY_LIMIT rows, each with the owner (a browser session) that ran it."""

    def __init__(self, limit: int = HISTORY_LIMIT):
        self._rows: collections.deque[tuple[str | None, dict[str, Any]]] = collections.deque(maxlen=limit)
        self._lock = threading.Lock()

    def add(self, owner: str | None, row: dict[str, Any]) -> None:
        with self._lock:
            self._rows.append((owner, row))

    def rows(self, owner: str | None = None) -> list[dict[str, Any]]:
        """Finished runs (newest last); with `owner`, only that owner's."""
        with self._lock:
            return [dict(row) for who, row in self._rows if owner is None or who == owner]

    def csv(self, owner: str | None = None) -> str:
        return history_csv(self.rows(owner))

    def json(self, owner: str | None = None) -> str:
        return json.dumps({"schema": HISTORY_SCHEMA, "runs": self.rows(owner)}, indent=1)

    def __len__(self) -> int:
        return len(self._rows)


def history_row(job_id: int, state: str, request: Any, model: str | None, report: BenchReport | None,
                error: str | None, device_type: str | None = None) -> dict[str, Any]:
    """Run data only: options and numbers, no prompt text, host names or paths. The options are those that ran:
    the report's, else (a run stopped before its report) those asked for, as `device_type` adapts them."""
    row: dict[str, Any] = dict.fromkeys(HISTORY_FIELDS)
    row.update(run=job_id, finished=time.strftime("%Y-%m-%dT%H:%M:%S"), status=state, model=model, error=error)
    if request is not None:
        o = request.options
        ran, notices = adapt_to_device(o, device_type) if device_type else (o, [])
        row.update({name: request.value(name) for name in OPTION_COLUMNS})
        row.update(compile_asked=o.compile, sampling=f"seed {o.seed}, T={o.temperature:g}" if o.do_sample else "greedy")
        row.update(_ran(ran.cache, ran.compile, ran.streams, notices))
    if report:
        _add_report_numbers(row, report)
        row.update(_ran_from_report(report) or {})
    return row


def _ran(cache: Any, compile_mode: Any, streams: Any, notices: list[str]) -> dict[str, Any]:
    return {"cache": cache, "compile": compile_mode, "streams": streams, "notes": "; ".join(notices) or None}


def _ran_from_report(report: BenchReport) -> dict[str, Any] | None:
    """What the loops ran with, and every contestant's notices, from the report's "effective" section (None in a
    report from before it recorded what ran)."""
    effective = report["effective"]
    loop = next((effective[name] for name in (*LOOPS, NO_CHECK) if name in effective), None) if effective else None
    if loop is None or not loop["options"]:
        return None
    notices = dict.fromkeys(n for ran in effective.values() for n in ran["notices"])
    options = loop["options"]
    return _ran(options.get("cache"), options.get("compile"), options.get("streams"), list(notices))


def _add_report_numbers(row: dict[str, Any], report: BenchReport) -> None:
    env, summary, verdict = report["environment"], report["summary"], report["verdict"] or {}
    row.update(model=report["model"].get("spec", row["model"]), device=env.get("gpu") or env.get("device"),
               dtype=env.get("dtype"), tp=env.get("tp", 1), identical="yes" if report["all_identical"] else "no",
               speedup=rounded(verdict.get("ratio"), 3), verdict=verdict.get("call"), clock=clock_of(report))
    for name, prefix in (("naive", "naive"), ("pipelined", "pipelined"), (HF, "hf")):
        s = summary.get(name)
        if not s:
            continue
        row[f"{prefix}_tok_s"] = rounded(s["tokens_per_s"], 2)
        if prefix != "hf":
            row[f"{prefix}_decode_tok_s"] = rounded(s.get("decode_tokens_per_s"), 2)
            row[f"{prefix}_ttft_ms"] = rounded(s.get("ttft_ms"), 2)
            row[f"{prefix}_p50_ms"] = rounded(s.get("ms_per_token_p50"), 3)
            row[f"{prefix}_p95_ms"] = rounded(s.get("ms_per_token_p95"), 3)
            row[f"{prefix}_kernel_busy_pct"] = rounded(percent(s.get("kernel_busy_fraction")), 1)
            row[f"{prefix}_reads_per_step"] = rounded(s.get("reads_per_step"), 2)
    compiled = [w.get("compile_ms") or 0 for w in report["warmup"].values()]
    row["compile_ms"] = rounded(max(compiled, default=0) or None, 0)


def history_csv(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=HISTORY_FIELDS, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_cell(v) for k, v in row.items()})
    return out.getvalue()


def _csv_cell(value: Any) -> Any:
    # A cell starting with = + - @ is a formula to spreadsheet programs.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@"):
        return "'" + value
    return value
