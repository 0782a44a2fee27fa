"""Which compiled decode attention is fastest here: the CLI as typed, once per kernel, one after the other.

    python benchmarks/decode_attention.py --out attention.json -- --model synthetic:llama-8b --tp 2 --cache static \\
        --compile step-graph --prompt-tokens 32 --max-new-tokens 256 --ignore-eos --no-check --trials 5
    python benchmarks/decode_attention.py --kernels reduce triton --pdl off safe -- ...   # four runs

Everything after `--` goes to `python -m core.bench` unchanged; each kernel (SYNCSCOPE_DECODE_ATTENTION), and with
`--pdl` each kernel and programmatic-dependent-launch placement (SYNCSCOPE_PDL), gets its own process, so each run
compiles afresh (inductor's on-disk caches still serve what the runs share), and the runs share the machine one
after the other. The table gives each run's pipelined decode rate, step time, whether every trial repeated token
for token, and its compile time.

With `--one-process` every run is core.bench's CLI called in one child process instead, one after the other
(dynamo's state reset and the variables set anew before each): torch, transformers and the rest are imported once,
not once a run, so a check that every kernel runs takes a fraction of the time (the test suite's way). A run that
kills that process takes the runs after it along, and the runs after the first compile in a warm process, so
measure with a process a run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.tuning import SWITCH  # noqa: E402

DECODE_ATTENTION_ENV, PDL_ENV = SWITCH["decode_attention"].variable, SWITCH["pdl"].variable
PDL_CHOICES = SWITCH["pdl"].choices
KERNELS = tuple(choice for choice in SWITCH["decode_attention"].choices if choice != "auto")

STDERR_TAIL_LINES = 60  # kept with a failed run in --out's "runs"
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)(: |$)")


def run_name(kernel: str, pdl: str | None) -> dict[str, str]:
    return {"kernel": kernel} if pdl is None else {"kernel": kernel, "pdl": pdl}


def report_path_of(folder: Path, kernel: str, pdl: str | None) -> Path:
    return folder / f"{kernel}-{pdl or 'inherited'}.json"


def run_kernel(kernel: str, bench_args: list[str], folder: Path, timeout_s: float,
               pdl: str | None = None) -> dict[str, Any]:
    """One `core.bench` run with this decode attention (and PDL placement, when given); its report, or why there
    is none."""
    report_path = report_path_of(folder, kernel, pdl)
    env = {**os.environ, DECODE_ATTENTION_ENV: kernel, **({PDL_ENV: pdl} if pdl else {})}
    command = [sys.executable, "-m", "core.bench", *bench_args, "--json", str(report_path)]
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {**run_name(kernel, pdl), "error": f"no report within {timeout_s:.0f} s"}
    return outcome(kernel, pdl, done.returncode, done.stderr, report_path)


def outcome(kernel: str, pdl: str | None, code: int, stderr: str, report_path: Path) -> dict[str, Any]:
    """A run's result from its exit code, its stderr and the report it was to write."""
    if code != 0 or not report_path.exists():
        return {**run_name(kernel, pdl), "error": f"exit code {code}: {failure_reason(stderr)}",
                "stderr_tail": stderr.splitlines()[-STDERR_TAIL_LINES:]}
    return {**run_name(kernel, pdl), "report": json.loads(report_path.read_text(encoding="utf-8"))}


def run_in_one_process(runs: list[tuple[str, str | None]], bench_args: list[str], folder: Path,
                       timeout_s: float) -> list[dict[str, Any]]:
    """Every (kernel, PDL placement) of `runs` as a `core.bench` run in one child process (`--one-process`), each
    within `timeout_s`; their results in order. A run the process did not finish is a row that says why."""
    plan = folder / "plan.json"
    plan.write_text(json.dumps({"runs": runs, "bench_args": bench_args}), encoding="utf-8")
    command = [sys.executable, str(Path(__file__).resolve()), "--runs-here", str(folder)]
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s * len(runs))
        ended = f"exit code {done.returncode}: {failure_reason(done.stderr)}"
    except subprocess.TimeoutExpired:
        ended = f"no report within {timeout_s * len(runs):.0f} s for {len(runs)} runs"
    results = {(r["kernel"], r.get("pdl")): r for r in _results_here(folder)}
    return [results.get((kernel, pdl)) or {**run_name(kernel, pdl), "error": f"the one process ended first ({ended})"}
            for kernel, pdl in runs]


def _results_here(folder: Path) -> list[dict[str, Any]]:
    """The results the child wrote, less a last line it was killed while writing."""
    path = folder / "results.jsonl"
    results = []
    for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
        with contextlib.suppress(json.JSONDecodeError):
            results.append(json.loads(line))
    return results


def runs_here(folder: Path) -> int:
    """The child of `run_in_one_process`: each planned run through core.bench's CLI in this process, its result
    appended to results.jsonl as soon as it is known."""
    import torch._dynamo

    from core import bench

    plan = json.loads((folder / "plan.json").read_text(encoding="utf-8"))
    for kernel, pdl in plan["runs"]:
        report_path = report_path_of(folder, kernel, pdl)
        torch._dynamo.reset()  # each run compiles its own model from a clean slate, as in a process of its own
        with _environment({DECODE_ATTENTION_ENV: kernel, PDL_ENV: pdl}), _stderr_kept() as stderr:
            code = _exit_code(bench.main, [*plan["bench_args"], "--json", str(report_path)])
        result = outcome(kernel, pdl, code, stderr.getvalue(), report_path)
        with (folder / "results.jsonl").open("a", encoding="utf-8") as results:
            results.write(json.dumps(result) + "\n")
    return 0


def _exit_code(cli: Callable[[list[str]], int], argv: list[str]) -> int:
    try:
        return cli(argv)
    except SystemExit as exc:  # argparse's refusals
        return exc.code if isinstance(exc.code, int) else 1


@contextlib.contextmanager
def _environment(values: dict[str, str | None]) -> Iterator[None]:
    """These variables set (None: as the process had it) while inside, and put back after."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update({name: value for name, value in values.items() if value is not None})
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _stderr_kept() -> Iterator[io.StringIO]:
    """What Python writes to stderr while inside, kept (and still written through)."""
    kept = io.StringIO()

    class Both(io.TextIOBase):
        def write(self, text: str) -> int:
            kept.write(text)
            return sys.__stderr__.write(text)

        def fileno(self) -> int:  # for what writes to the descriptor itself (not kept)
            return sys.__stderr__.fileno()

    with contextlib.redirect_stderr(Both()):
        yield kept


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
    parser.add_argument("--one-process", action="store_true",
                        help="every run in one child process: quicker, for a check that each kernel runs (the "
                             "compiles after the first are warm: measure without it)")
    parser.add_argument("--runs-here", type=Path, default=None, help=argparse.SUPPRESS)  # --one-process's child
    args = parser.parse_args(argv[:split])
    if args.runs_here is not None:
        return runs_here(args.runs_here)
    bench_args = argv[split + 1:]
    if "--compile" not in bench_args:
        parser.error("give core.bench a --compile mode after --: the kernels differ only in compiled decode steps")
    runs = [(kernel, pdl) for kernel in args.kernels for pdl in (args.pdl or [None])]
    with tempfile.TemporaryDirectory() as folder:
        if args.one_process:
            results = run_in_one_process(runs, bench_args, Path(folder), args.timeout_s)
        else:
            results = [run_kernel(kernel, bench_args, Path(folder), args.timeout_s, pdl) for kernel, pdl in runs]
    rows = [row(result) for result in results]
    print(format_rows(rows))
    if args.out:
        Path(args.out).write_text(json.dumps({"bench_args": bench_args, "rows": rows, "runs": results}, indent=1),
                                  encoding="utf-8")
    return 0 if all("error" not in entry for entry in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
