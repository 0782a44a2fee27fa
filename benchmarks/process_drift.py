"""How far do two processes that run the same command drift apart? (issue 39, item 3)

    python benchmarks/process_drift.py -n 6 --out $OUT/drift.json -- --model synthetic:smollm2-135m --cache static \
        --compile reduce-overhead --max-new-tokens 256 --trials 5 --ignore-eos
    python benchmarks/process_drift.py -n 3 -- --model tiny-random --max-new-tokens 16 --trials 3
    python benchmarks/process_drift.py -n 6 --load 1 --out drift-loaded.json -- --model tiny-random ...
    python benchmarks/process_drift.py --reports benchmarks/lab/results/h200-2026-12-01-b   # committed reports

Runs `python -m core.bench ARGS --json ...` (everything after `--`) in N separate processes, one after the other,
and reads their reports; or, with --reports, reads the report files under the folders given and groups those of
identical settings (core.report.diff.diff_settings: the same as `--diff` finding no setting that differs).

Per contestant it gives the median decode rate (else end to end) of each process and the largest and median pairwise
max/min - 1 between processes; and the same of each contestant's rate over the naive loop's (the geometric mean of
its per-trial ratios in each process), which is what a control leaves. The largest of each is what
core/measure/drift.py's PROCESS_DRIFT holds for a device kind ("rates", "against_control"). `--load K` runs K
CPU-bound processes beside the runs (a busy CI machine). Writes JSON to --out and prints a table last.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from core.documents.files import report_paths  # noqa: E402
from core.documents.kinds import BENCH  # noqa: E402
from core.documents.schema import bench_report, load  # noqa: E402
from core.report.diff import diff_settings  # noqa: E402
from core.report.explain import rate_metric  # noqa: E402

SCHEMA = "syncscope.process_drift/1"
CONTROL = "naive"
BUSY_LOOP = "while True: pass"


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """This script's own flags, and the core.bench arguments after `--`."""
    ours, bench = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--processes", type=int, default=6, help="how many processes run the command (6)")
    parser.add_argument("--reports", nargs="+", metavar="DIR", help="read report files under these folders instead")
    parser.add_argument("--load", type=int, default=0, metavar="K", help="CPU-bound processes running beside (0)")
    parser.add_argument("--keep", metavar="DIR", help="keep each process's report in this folder")
    parser.add_argument("--out", help="write the result as JSON here")
    args = parser.parse_args(ours)
    if args.reports and bench:
        parser.error("give either --reports or a command after --, not both")
    if not args.reports and not bench:
        parser.error("give the core.bench arguments after --, or --reports DIR")
    if any(word == "--json" or word.startswith("--json=") for word in bench):
        parser.error("leave --json out: each process writes its report where this script reads it")
    if args.processes < 2:
        parser.error("-n must be at least 2: drift is between processes")
    return args, bench


# ------------------------------------------------------------------------------------------- the figures

def pairwise(values: list[float]) -> dict[str, float | None]:
    """The largest and median max/min - 1 over every pair of `values`."""
    distances = [max(x, y) / min(x, y) - 1 for x, y in itertools.combinations(values, 2)]
    if not distances:
        return {"largest": None, "median": None}
    return {"largest": max(distances), "median": statistics.median(distances)}


def contestant_metric(reports: list[dict[str, Any]], name: str) -> str | None:
    """Decode tok/s where every report has it for `name`, else end to end; None where one has neither."""
    metrics = {rate_metric(report["summary"][name])[0] for report in reports}
    if None in metrics:
        return None
    return "decode_tokens_per_s" if metrics == {"decode_tokens_per_s"} else "tokens_per_s"


def against_control(report: dict[str, Any], name: str, metric: str) -> float | None:
    """The geometric mean of `name`'s per-trial rate over the control's in one report (trials of a round pair)."""
    rates = {who: {r.get("trial"): r["timings"].get(metric) for r in report.get("runs") or []
                   if r.get("contestant") == who and isinstance(r.get("timings"), dict)} for who in (name, CONTROL)}
    logs = [math.log(rates[name][t] / rates[CONTROL][t]) for t in rates[name]
            if (rates[name][t] or 0) > 0 and (rates[CONTROL].get(t) or 0) > 0]
    return math.exp(statistics.fmean(logs)) if logs else None


def drift(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Each contestant's rate per report and its pairwise drift; the same of its ratio to the control."""
    names = [n for n in reports[0]["summary"] if all(n in r["summary"] for r in reports)]
    contestants, ratios = {}, {}
    for name in names:
        metric = contestant_metric(reports, name)
        if metric is None:
            continue
        rates = [report["summary"][name][metric] for report in reports]
        contestants[name] = {"metric": metric, "rates": rates, **pairwise(rates)}
        if name != CONTROL and CONTROL in names:
            values = [against_control(report, name, metric) for report in reports]
            if all(v is not None for v in values):
                ratios[name] = {"metric": metric, "ratios": values, **pairwise(values)}
    return {"contestants": contestants, "control": CONTROL, "against_control": ratios,
            "largest": _largest(contestants), "largest_against_control": _largest(ratios)}


def _largest(rows: dict[str, dict[str, Any]]) -> float | None:
    values = [row["largest"] for row in rows.values() if row["largest"] is not None]
    return max(values) if values else None


def environment_facts(report: dict[str, Any]) -> dict[str, Any]:
    env = report.get("environment") or {}
    return {key: env.get(key) for key in ("device", "gpu", "dtype", "torch", "transformers", "host")}


# ------------------------------------------------------------------------------------------- running

def run_processes(args: argparse.Namespace, bench: list[str]) -> dict[str, Any]:
    """The command in `args.processes` processes one after the other, with `args.load` busy processes beside."""
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="process-drift-"))
    folder.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    busy = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(args.load)]
    reports, processes = [], []
    try:
        for index in range(args.processes):
            path = folder / f"process-{index + 1}.json"
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "core.bench", *bench, "--json", str(path)], cwd=REPO,
                                  capture_output=True, text=True)
            wall_s = time.perf_counter() - started
            if done.returncode != 0:
                raise SystemExit(f"process {index + 1} failed (exit code {done.returncode}):\n{done.stderr[-4000:]}")
            reports.append(bench_report(load(path, expect=BENCH)))
            processes.append({"report": str(path) if args.keep else None, "created": reports[-1].get("created"),
                              "wall_s": wall_s})
            print(f"process {index + 1}/{args.processes} ({wall_s:.1f} s): {rates_line(reports[-1])}", flush=True)
    finally:
        for process in busy:
            process.terminate()
            process.wait()
    return {"schema": SCHEMA, "created": _now(), "mode": "processes", "bench_args": bench,
            "command": reports[0].get("command"), "processes": processes, "load": args.load,
            "cpus": os.cpu_count(), "load_average_before": load_before, "load_average_after": os.getloadavg(),
            "environment": environment_facts(reports[0]), **drift(reports)}


def rates_line(report: dict[str, Any]) -> str:
    rates = {name: s.get(rate_metric(s)[0] or "") for name, s in report["summary"].items()}
    return ", ".join(f"{name} {value:.1f}" for name, value in rates.items() if value)


# ------------------------------------------------------------------------------------------- committed reports

def read_groups(folders: list[str]) -> dict[str, Any]:
    """Report files under `folders`, grouped by identical settings; the drift of every group of two or more."""
    groups: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for folder in folders:
        for path in report_paths(Path(folder), recursive=True):
            try:
                report = bench_report(load(path, expect=BENCH))
            except ValueError:
                continue  # not a bench report (an A/A result, an audit of a script)
            key = json.dumps(diff_settings(report), sort_keys=True, default=str)
            groups.setdefault(key, []).append((path, report))
    found = []
    for members in groups.values():
        if len(members) < 2:
            continue
        reports = [report for _, report in members]
        found.append({"reports": [str(path) for path, _ in members], "created": [r.get("created") for r in reports],
                      "model": (reports[0].get("model") or {}).get("spec"),
                      "command": reports[0].get("command"), "environment": environment_facts(reports[0]),
                      **drift(reports)})
    return {"schema": SCHEMA, "created": _now(), "mode": "reports", "folders": folders, "groups": found,
            "largest": _largest_of(found, "largest"),
            "largest_against_control": _largest_of(found, "largest_against_control")}


def _largest_of(groups: list[dict[str, Any]], key: str) -> float | None:
    values = [group[key] for group in groups if group[key] is not None]
    return max(values) if values else None


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


# ------------------------------------------------------------------------------------------- the table

def table(result: dict[str, Any]) -> str:
    groups = result["groups"] if result["mode"] == "reports" else [result]
    lines = []
    for group in groups:
        files = group.get("reports") or []
        count = len(files or group["processes"])
        where = f"{files[0]} and {count - 1} more" if files else group.get("command")
        lines.append(f"{count} processes: {where}")
        lines.append(f"  {'contestant':<16} {'largest':>8} {'median':>8}  rates")
        for name, row in group["contestants"].items():
            lines.append(f"  {name:<16} {row['largest']:>8.1%} {row['median']:>8.1%}  "
                         + " ".join(f"{v:.1f}" for v in row["rates"]))
        for name, row in group["against_control"].items():
            label = f"{name}/{group['control']}"
            lines.append(f"  {label:<16} {row['largest']:>8.1%} {row['median']:>8.1%}  "
                         + " ".join(f"{v:.4f}" for v in row["ratios"]))
    lines.append(f"largest between processes: rates {_percent(result['largest'])}, against the control "
                 f"{_percent(result['largest_against_control'])}")
    return "\n".join(lines)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def main(argv: list[str] | None = None) -> int:
    args, bench = parse_args(list(sys.argv[1:] if argv is None else argv))
    result = read_groups(args.reports) if args.reports else run_processes(args, bench)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
        print(f"wrote {args.out}")
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
