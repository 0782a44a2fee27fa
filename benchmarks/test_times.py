"""How long the suite takes from a clean clone, as CI runs it: clone the checkout's HEAD into a temporary folder, run
`CI=true bash .ci/run` there (the install included), and add a row to docs/TIMINGS.md: the date, the commit, the
whole run's seconds, pytest's seconds and counts, and the slowest tests. README and CONTRIBUTING point to that file
rather than carrying dated times of their own.

    python benchmarks/test_times.py [--keep] [--log PATH]
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TIMINGS = REPO / "docs" / "TIMINGS.md"
HEADER = """# How long the tests take

Each row is one run of `CI=true bash .ci/run` on a clean clone of the commit named, the install included, on the
machine named (CI's kind: 2 cores, no GPU), written by `python benchmarks/test_times.py`. The slowest tests are
pytest's `--durations` of that run (two xdist workers: the whole run is not their sum).

| date (UTC) | commit | machine | whole run s | pytest s | passed | skipped | failed | slowest tests (s) |
|---|---|---|---:|---:|---:|---:|---:|---|
"""
SUMMARY = re.compile(r"^(?:=+ )?(?P<counts>\d+ (?:passed|failed)[^\n]*?) in (?P<seconds>[\d.]+)s", re.MULTILINE)
DURATION = re.compile(r"^(?P<seconds>[\d.]+)s (?:call|setup|teardown)\s+(?P<test>\S+)", re.MULTILINE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the clone (its path is printed)")
    parser.add_argument("--log", type=Path, default=None, help="also write the run's output here")
    args = parser.parse_args(argv)
    commit = _git("rev-parse", "--short", "HEAD")
    clone = Path(tempfile.mkdtemp(prefix="syncscope-ci-"))
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone / "repo")], check=True)
    began = time.perf_counter()
    done = subprocess.run(["bash", ".ci/run"], cwd=clone / "repo", env=_ci_environment(), capture_output=True,
                          text=True)
    seconds = time.perf_counter() - began
    output = done.stdout + done.stderr
    if args.log:
        args.log.write_text(output)
    row = timing_row(output, seconds, commit)
    _append(row)
    print(row)
    print(f"exit status {done.returncode}; the clone: {clone if args.keep else 'removed'}")
    if not args.keep:
        shutil.rmtree(clone, ignore_errors=True)
    return done.returncode


def timing_row(output: str, seconds: float, commit: str, machine: str | None = None) -> str:
    """The table row of one run, from its output."""
    summary = list(SUMMARY.finditer(output))
    counts = _counts(summary[-1].group("counts")) if summary else {}
    pytest_s = f"{float(summary[-1].group('seconds')):.0f}" if summary else "–"
    slowest = ", ".join(f"{m.group('test').split('::')[-1]} {float(m.group('seconds')):.0f}"
                        for m in list(DURATION.finditer(output))[:5])
    machine = machine or f"{_cores()} cores"
    return (f"| {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} | {commit} | {machine} | {seconds:.0f} | {pytest_s} | "
            f"{counts.get('passed', 0)} | {counts.get('skipped', 0)} | {counts.get('failed', 0)} | {slowest} |")


def _counts(text: str) -> dict[str, int]:
    return {word: int(number) for number, word in re.findall(r"(\d+) (passed|skipped|failed|errors?)", text)}


def _append(row: str) -> None:
    text = TIMINGS.read_text() if TIMINGS.exists() else HEADER
    TIMINGS.write_text(text.rstrip("\n") + "\n" + row + "\n")


def _ci_environment() -> dict[str, str]:
    import os

    return {**os.environ, "CI": "true"}


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


def _git(*words: str) -> str:
    return subprocess.run(["git", *words], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
