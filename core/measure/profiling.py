"""Where a decode step's device time goes: one extra run of a loop under torch.profiler, kernels grouped by kind.

The profiled run comes after the timed trials and is not one of them (the profiler adds host work). Kernels
launched from a CUDA graph (step-graph and reduce-overhead modes) are traced one by one, so the table shows the
matrix multiplies, all-reduces, attention and the fused elementwise kernels inside a step. Per-step numbers
divide by the run's decode steps; on several ranks each rank writes its own files.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

# First match wins; names are CUDA kernel names as the profiler reports them. The kinds are the decode step's parts
# (docs/NUMBERS.md, "Where the step's time goes"). Inductor names a kernel after the ops it fused, so a matrix
# product of inductor's (a batch-1 product compiled as a reduction) includes the RMSNorm or activation fused into it
# and, under tensor parallelism, the write of the all-reduce's input; "all-reduce" is the collective kernel alone,
# including the time it waits for the other GPUs; "all-reduce + add + norm" is core.kernels.tp_fusion's kernel.
# "attention" holds core.kernels' decode attention (`attend`, and `combine` for its key splits) and library kernels;
# "normalisation and rotary" the RMSNorms and rotary embeddings inductor did not fuse into a product; "sampling" the
# token choice (argmax, top-k, softmax and the random draw); "copies" memcpy, memset, fills, concatenations and
# the KV cache's writes.
MATRIX_PRODUCTS = "matrix products"
KERNEL_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("all-reduce + add + norm", re.compile(r"fused_all_reduce_add_rms_norm", re.I)),
    ("all-reduce", re.compile(r"one_shot_all_reduce|two_shot_all_reduce|multimem|nccl.*allreduce|nccl:all_reduce",
                              re.I)),
    ("all-gather", re.compile(r"nccl.*allgather|nccl:all_gather", re.I)),
    (MATRIX_PRODUCTS, re.compile(r"^triton_tem|^triton_(red|per)_.*(_mm_|_mm$|_bmm_|_addmm_)|gemm|gemv|cutlass|cublas"
                                 r"|sm90_xmma|nvjet|splitk|^aten::(mm|addmm|bmm|linear|matmul)$", re.I)),
    ("attention", re.compile(r"fmha|flash|attention|sdpa|^attend|^combine", re.I)),
    ("sampling", re.compile(r"argmax|argmin|topk|sort|multinomial|exponential|softmax|cumsum|^aten::(max|gather)$",
                            re.I)),
    ("normalisation and rotary", re.compile(r"rsqrt|mean_pow|rms_?norm|layer_?norm|rotary|rope|_cos_|_sin_|"
                                            r"cos_|sin_", re.I)),
    ("copies", re.compile(r"memcpy|memset|copy_kernel|fill|index_put|index_copy|scatter|catarray|_cat_|^aten::(copy_|"
                          r"cat|index_put_|index_copy_)", re.I)),
    ("elementwise", re.compile(r"^triton_poi_|elementwise_kernel|^aten::(add|mul|sub|div|neg|silu|where)", re.I)),
)
OTHER = "other"


def kernel_kind(name: str) -> str:
    """The kind of a CUDA kernel, from its name."""
    for kind, pattern in KERNEL_KINDS:
        if pattern.search(name):
            return kind
    return OTHER


def summarize_kernels(kernels: list[tuple[str, int, float]], steps: int) -> dict[str, Any]:
    """(name, calls, total µs) rows -> per-kind and per-kernel device time, per step and in all."""
    by_kind: dict[str, dict[str, float]] = {}
    for name, calls, total_us in kernels:
        entry = by_kind.setdefault(kernel_kind(name), {"calls": 0, "total_us": 0.0})
        entry["calls"] += calls
        entry["total_us"] += total_us
    total = sum(total_us for _, _, total_us in kernels)
    per_step = max(steps, 1)
    kinds = [{"kind": kind, "calls_per_step": e["calls"] / per_step, "us_per_step": e["total_us"] / per_step,
              "share": e["total_us"] / total if total else 0.0}
             for kind, e in sorted(by_kind.items(), key=lambda item: -item[1]["total_us"])]
    top = [{"name": name, "kind": kernel_kind(name), "calls_per_step": calls / per_step,
            "us_per_call": total_us / calls if calls else 0.0, "us_per_step": total_us / per_step}
           for name, calls, total_us in sorted(kernels, key=lambda row: -row[2])]
    return {"steps": steps, "kernel_us_per_step": total / per_step,
            "kernels_per_step": sum(calls for _, calls, _ in kernels) / per_step, "kinds": kinds, "kernels": top}


def format_summary(summary: dict[str, Any], step_ms: float | None, top: int = 25) -> str:
    """A plain-text table: device time per step by kind, then the costliest kernels."""
    lines = [f"{summary['steps']} decode steps; kernels per step {summary['kernels_per_step']:.0f}; kernel time per "
             f"step {summary['kernel_us_per_step']:.1f} us (on the CPU: aten operators and their self time)"]
    if step_ms:
        busy = summary["kernel_us_per_step"] / (step_ms * 1000)
        lines.append(f"median step {step_ms * 1000:.1f} us: the listed time is {busy:.0%} of it (below 100%: gaps "
                     f"between kernels; above: kernels overlapping, or one-off work such as the prefill's)")
    lines.append(f"{'kind':<26} {'calls/step':>10} {'us/step':>9} {'share':>6}")
    for row in summary["kinds"]:
        lines.append(f"{row['kind']:<26} {row['calls_per_step']:>10.1f} {row['us_per_step']:>9.1f} "
                     f"{row['share']:>6.1%}")
    lines.append(f"\n{'kernel (costliest first)':<80} {'kind':<24} {'calls/step':>10} {'us/call':>8} {'us/step':>8}")
    for row in summary["kernels"][:top]:
        name = row["name"] if len(row["name"]) <= 80 else row["name"][:77] + "..."
        lines.append(f"{name:<80} {row['kind']:<24} {row['calls_per_step']:>10.1f} {row['us_per_call']:>8.2f} "
                     f"{row['us_per_step']:>8.1f}")
    return "\n".join(lines)


def device_kernels(profiler: Any) -> list[tuple[str, int, float]]:
    """(name, calls, total µs) of every CUDA kernel, memcpy and memset the profiler saw; on the CPU, where there
    are no kernels, the self time of each aten operator."""
    rows: dict[str, list[float]] = {}
    for event in profiler.events():
        if getattr(event, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        row = rows.setdefault(event.name, [0, 0.0])
        row[0] += 1
        row[1] += event.device_time
    if not rows:
        return [(op.key, op.count, op.self_cpu_time_total) for op in profiler.key_averages()
                if op.key.startswith("aten::") and op.self_cpu_time_total > 0]
    return [(name, int(calls), total) for name, (calls, total) in rows.items()]


def profile_run(run_once: Callable[[], dict[str, Any]], out_dir: str | Path, rank: int = 0,
                trace: bool = True) -> dict[str, Any]:
    """Run `run_once` (one loop run returning its outcome) under the profiler; write the summary and trace.

    Files: `profile-rank{rank}.txt` (the table), `.json` (the summary) and, with `trace`, a gzipped Chrome trace
    (open it in https://ui.perfetto.dev)."""
    from torch.profiler import ProfilerActivity, profile

    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as profiler:
        outcome = run_once()
    timings = outcome["timings"]
    steps = max(timings["computed_steps"] - 1, 1)  # the prefill is one of the computed steps
    summary = summarize_kernels(device_kernels(profiler), steps)
    summary["step_ms_p50"] = timings["ms_per_token_p50"]
    stem = folder / f"profile-rank{rank}"
    stem.with_suffix(".txt").write_text(format_summary(summary, timings["ms_per_token_p50"]) + "\n",
                                        encoding="utf-8")
    stem.with_suffix(".json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    if trace:
        summary["trace_file"] = _write_trace(profiler, stem)
        summary["clock"] = realtime_minus_perf_counter_ns()
    return summary


def realtime_minus_perf_counter_ns(tries: int = 20) -> dict[str, int]:
    """CLOCK_REALTIME (Kineto's base: a trace's `ts` µs + its `baseTimeNanoseconds` is that clock, checked on torch
    2.11) minus perf_counter (CLOCK_MONOTONIC), from the tightest of `tries` realtime reads bracketed by two
    perf_counter reads; `error_ns` is half that bracket."""
    best: tuple[int, int] | None = None
    for _ in range(tries):
        before = time.perf_counter_ns()
        realtime = time.time_ns()
        after = time.perf_counter_ns()
        if best is None or after - before < best[1]:
            best = (realtime - (before + after) // 2, after - before)
    offset, width = best
    return {"offset_ns": offset, "error_ns": width // 2}


def _write_trace(profiler: Any, stem: Path) -> str:
    raw = stem.with_name(stem.name + "-trace.json")
    profiler.export_chrome_trace(str(raw))
    with open(raw, "rb") as source, gzip.open(f"{raw}.gz", "wb") as target:
        shutil.copyfileobj(source, target)
    os.remove(raw)
    return f"{raw}.gz"
