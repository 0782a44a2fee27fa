"""The GPU benchmark matrix: every case is one `core.bench.compare` run, written as its own JSON report.

    python benchmarks/matrix.py --preset core --out results/
    python benchmarks/matrix.py --preset perf --out results/ --deadline-s 540

Each case loads (or reuses) a synthetic model of a real shape in bf16, runs the fair A/B protocol (warm-up apart,
order alternating, median of k trials, identical-output check) and appends one row per contestant to
summary.json. The % of HBM floor compares a decode step's time with the time to read the weights once at the
device-to-device copy bandwidth measured on the H200 (4.28 TB/s).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.compare import compare
from core.loops.generation import generate
from core.loops.prompt import synthetic_prompt
from core.models.loading import load_model
from core.request.options import BenchRequest, GenerationOptions

SHAPES = ("smollm2-135m", "llama-1b", "llama-8b")
PROMPT_TOKENS = 32
NEW_TOKENS = 256


@dataclass
class Case:
    name: str
    shape: str
    cache: str
    compile: str
    contestants: tuple[str, ...]
    trials: int = 5
    batch: int = 1
    lag: int = 1
    streams: int = 1
    eos_steps: tuple[int, ...] = ()   # empty: ignore EOS and run all NEW_TOKENS steps
    extra: dict[str, Any] = field(default_factory=dict)


def core_cases() -> list[Case]:
    cases = []
    for shape in SHAPES:
        cases += [
            Case(f"{shape}-eager-dynamic", shape, "dynamic", "off", ("naive", "pipelined", "hf"), trials=3),
            Case(f"{shape}-eager-static", shape, "static", "off", ("naive", "pipelined", "hf"), trials=3),
            Case(f"{shape}-compiled-static", shape, "static", "reduce-overhead",
                 ("naive", "pipelined", "hf", "hf-deferred")),
        ]
    return cases


def perf_cases() -> list[Case]:
    # hf here is generate() with its own compile (reduce-overhead): the best pipelined mode against HF, same run.
    cases = [Case(f"{shape}-step-graph", shape, "static", "step-graph",
                  ("naive", "pipelined", "no-check", "pipelined-again", "hf")) for shape in SHAPES]
    cases += [
        Case("llama-1b-step-graph-b8", "llama-1b", "static", "step-graph", ("naive", "pipelined"), batch=8,
             trials=3, eos_steps=tuple(range(40, 240, 25))),
        Case("llama-1b-step-graph-b32", "llama-1b", "static", "step-graph", ("naive", "pipelined"), batch=32,
             trials=3, eos_steps=tuple(40 + 6 * i for i in range(32))),
    ]
    return cases


def smoke_cases() -> list[Case]:
    return [
        Case("smoke-step-graph", "smollm2-135m", "static", "step-graph", ("naive", "pipelined", "no-check"),
             trials=2),
        Case("smoke-compiled", "smollm2-135m", "static", "reduce-overhead", ("naive", "pipelined", "hf"), trials=2),
    ]


PRESETS = {"core": core_cases, "perf": perf_cases, "smoke": smoke_cases}


def batch_prompts(batch: int) -> list[list[int]]:
    """Different fixed prompts per row, so rows can finish at different steps."""
    base = synthetic_prompt(PROMPT_TOKENS)
    return [base[i:] + base[:i] for i in range(batch)] if batch > 1 else [base]


def pick_eos(loaded: Any, prompts: list[list[int]], case: Case) -> list[int] | None:
    """Choose EOS ids among tokens the naive run emits, so each row stops near its wanted step."""
    if not case.eos_steps:
        return None
    free = generate(loaded, prompts, max_new_tokens=NEW_TOKENS, cache=case.cache, ignore_eos=True).token_ids
    chosen: list[int] = []
    for row, target in zip(free, case.eos_steps):
        for position in range(target, len(row)):
            if row[position] not in row[:position] and row[position] not in chosen:
                chosen.append(row[position])
                break
    return chosen or None


def run_case(loaded: Any, case: Case) -> dict[str, Any]:
    prompts = batch_prompts(case.batch)
    prompt = prompts if case.batch > 1 else prompts[0]
    eos = pick_eos(loaded, prompts, case)
    options = GenerationOptions(max_new_tokens=NEW_TOKENS, cache=case.cache, compile=case.compile, lag=case.lag,
                                streams=case.streams, eos_token_id=eos, ignore_eos=eos is None)
    request = BenchRequest(prompt=prompt, options=options, trials=case.trials, contestants=case.contestants,
                           prompt_tokens=PROMPT_TOKENS if case.batch == 1 else None)  # rows > 1 are rotated
    report = compare(loaded, request)
    report["case"] = {**case.__dict__, "eos_token_id": eos}
    return report


def summary_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    case = report["case"]
    floor_ms = report["model"]["hbm_floor_ms_per_step"]
    rows = []
    for name, s in report["summary"].items():
        steps_per_s = s["tokens_per_s"] / case["batch"] if not case["eos_token_id"] else None
        rows.append({
            "case": case["name"], "shape": case["shape"], "batch": case["batch"], "cache": case["cache"],
            "compile": case["compile"], "contestant": name, "tokens_per_s": round(s["tokens_per_s"], 1),
            "spread": round(s["spread"], 4), "ttft_ms": s["ttft_ms"], "ms_per_token_p50": s["ms_per_token_p50"],
            "device_span_fraction": s.get("device_span_fraction", s.get("gpu_busy_fraction")),
            "gpu_gap_ms_mean": s["gpu_gap_ms_mean"],
            "identical_to_first": report["identical"][name],
            "first_difference": max((r["first_difference"] or -1) for r in report["runs"] if r["contestant"] == name),
            "graphs_compiled_in_timed_runs": sum(r["graphs_compiled"] for r in report["runs"]
                                                 if r["contestant"] == name),
            "pct_of_hbm_floor": round(100 * steps_per_s * floor_ms / 1000, 1) if steps_per_s else None,
            "warmup_ms": report["warmup"][name]["total_ms"], "compile_ms": report["warmup"][name]["compile_ms"],
            "ratios": report["ratios"] if name == "pipelined" else None,
        })
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="core")
    parser.add_argument("--only", default=None, help="comma-separated name fragments to run")
    parser.add_argument("--out", default="results", help="folder for one JSON per case and summary.json")
    parser.add_argument("--deadline-s", type=float, default=None, help="start no case after this many seconds")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wanted = args.only.split(",") if args.only else []
    cases = [c for c in PRESETS[args.preset]() if not wanted or any(w in c.name for w in wanted)]
    started = time.perf_counter()
    summary_path = out / f"summary-{args.preset}.json"
    rows: list[dict[str, Any]] = json.loads(summary_path.read_text()) if summary_path.exists() else []
    loaded, loaded_shape = None, None
    for case in cases:
        if args.deadline_s and time.perf_counter() - started > args.deadline_s:
            print(f"deadline reached, skipping {case.name}", flush=True)
            continue
        if case.shape != loaded_shape:
            loaded = None
            gc.collect()
            torch.cuda.empty_cache()
            loaded, loaded_shape = load_model(f"synthetic:{case.shape}"), case.shape
        t0 = time.perf_counter()
        try:
            report = run_case(loaded, case)
        except Exception as exc:
            print(f"{case.name}: FAILED {type(exc).__name__}: {exc}", flush=True)
            rows.append({"case": case.name, "error": f"{type(exc).__name__}: {exc}"})
            continue
        report["wall_s"] = time.perf_counter() - t0
        (out / f"{case.name}.json").write_text(json.dumps(report))
        rows += summary_rows(report)
        summary_path.write_text(json.dumps(rows, indent=1))
        for row in summary_rows(report):
            print(f"{case.name:<32} {row['contestant']:<12} {row['tokens_per_s']:>9.1f} tok/s "
                  f"spread {row['spread']:.1%} floor {row['pct_of_hbm_floor']}% same {row['identical_to_first']}",
                  flush=True)
        print(f"  ratios {report['ratios']}  ({report['wall_s']:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
