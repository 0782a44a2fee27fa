"""Which compiled decode attention is fastest here: the CLI as typed, once per kernel, one after the other.

    python benchmarks/decode_attention.py --out attention.json -- --model synthetic:llama-8b --tp 2 --cache static \\
        --compile step-graph --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --no-check --trials 5
    python benchmarks/decode_attention.py --kernels reduce triton --pdl off safe -- ...   # four runs

Everything after `--` goes to `python -m core.bench` unchanged; each kernel (SYNCSCOPE_DECODE_ATTENTION), and with
`--pdl` each kernel and programmatic-dependent-launch placement (SYNCSCOPE_PDL), gets its own process, so each run
compiles afresh (inductor's on-disk caches still serve what the runs share), and the runs share the machine one
after the other. The table gives each run's pipelined decode rate, step time, whether every trial repeated token
for token, and its compile time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.options import DECODE_ATTENTION_ENV, PDL_CHOICES, PDL_ENV  # noqa: E402
from core.options import DECODE_ATTENTION_KERNELS as KERNELS  # noqa: E402

STDERR_TAIL_LINES = 60  # kept with a failed run in --out's "runs"
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)(: |$)")


def run_kernel(kernel: str, bench_args: list[str], folder: Path, timeout_s: float,
               pdl: str | None = None) -> dict[str, Any]:
    """One `core.bench` run with this decode attention (and PDL placement, when given); its report, or why there
    is none."""
    name = {"kernel": kernel} if pdl is None else {"kernel": kernel, "pdl": pdl}
    report_path = folder / f"{kernel}-{pdl or 'inherited'}.json"
    env = {**os.environ, DECODE_ATTENTION_ENV: kernel, **({PDL_ENV: pdl} if pdl else {})}
    command = [sys.executable, "-m", "core.bench", *bench_args, "--json", str(report_path)]
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {**name, "error": f"no report within {timeout_s:.0f} s"}
    if done.returncode != 0 or not report_path.exists():
        return {**name, "error": f"exit code {done.returncode}: {failure_reason(done.stderr)}",
                "stderr_tail": done.stderr.splitlines()[-STDERR_TAIL_LINES:]}
    return {**name, "report": json.loads(report_path.read_text(encoding="utf-8"))}


def failure_reason(stderr: str) -> str:
    """Why a run failed, from its stderr: the last exception raised, else the last line saying error, else the last
    line (warnings printed at exit come after the reason, so the last line alone often hides it)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    exceptions = [line for line in lines if EXCEPTION_LINE.match(line)]
    errors = [line for line in lines if "error" in line.lower()]
    return (exceptions or errors or lines or ["no output"])[-1]


def row(result: dict[str, Any]) -> dict[str, Any]:
    if "error" in result:
        return {key: result[key] for key in ("kernel", "pdl", "error") if key in result}
    report = result["report"]
    pipelined = report["summary"]["pipelined"]
    return {"kernel": result["kernel"], "pdl": report["environment"].get("pdl"), "pdl_asked": result.get("pdl"),
            "decode_tokens_per_s": pipelined["decode_tokens_per_s"],
            "ms_per_step": pipelined["ms_per_token_p50"], "repeats": all(report["self_consistent"].values()),
            "compile_s": report["warmup"]["naive"]["compile_ms"] / 1000,
            "transforms": report["environment"].get("model_transforms")}


def format_rows(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'kernel':<8} {'pdl':<11} {'decode tok/s':>12} {'ms/step':>8} {'repeats':>8} {'compile s':>9}"]
    for entry in rows:
        pdl = entry.get("pdl") or "-"
        if "error" in entry:
            lines.append(f"{entry['kernel']:<8} {pdl:<11} failed: {entry['error']}")
            continue
        lines.append(f"{entry['kernel']:<8} {pdl:<11} {entry['decode_tokens_per_s']:>12.1f} "
                     f"{entry['ms_per_step']:>8.3f} {'yes' if entry['repeats'] else 'NO':>8} "
                     f"{entry['compile_s']:>9.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", nargs="+", choices=KERNELS, default=list(KERNELS))
    parser.add_argument("--pdl", nargs="+", choices=PDL_CHOICES, default=None,
                        help="also run each kernel with each of these SYNCSCOPE_PDL placements (default: as set)")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per run")
    parser.add_argument("--out", default=None, help="write the rows and the full reports here (JSON)")
    args = parser.parse_args(argv[:split])
    bench_args = argv[split + 1:]
    if "--compile" not in bench_args:
        parser.error("give core.bench a --compile mode after --: the kernels differ only in compiled decode steps")
    with tempfile.TemporaryDirectory() as folder:
        results = [run_kernel(kernel, bench_args, Path(folder), args.timeout_s, pdl)
                   for kernel in args.kernels for pdl in (args.pdl or [None])]
    rows = [row(result) for result in results]
    print(format_rows(rows))
    if args.out:
        Path(args.out).write_text(json.dumps({"bench_args": bench_args, "rows": rows, "runs": results}, indent=1),
                                  encoding="utf-8")
    return 0 if all("error" not in entry for entry in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
