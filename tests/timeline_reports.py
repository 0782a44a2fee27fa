"""Hand-built reports with the per-step host/device timestamps of the timeline contract, for the timeline chart.

Each run is simulated step by step, the way the loops run, with every time in ms since the run's start (host clock):
- naive (CUDA-like, reduce-overhead): the host queues step i (HOST_QUEUE_MS), blocks in `.item()` until the device
  finishes it (a host wait at every step), then prepares the next launch while the device sits idle (a device gap at
  every step, about GAP_MS);
- pipelined (lag 1): the host queues step i, then waits on step i-1's copy event, which has already completed, so the
  wait is a few µs; the device always has the next step queued, so there is no gap; it computes `lag` overshoot steps;
- on the CPU there are no device spans: the host's step spans are the compute;
- under TP every rank has its spans (rank 1 a few µs behind rank 0);
- old reports have none of the new fields (as written before the contract).
Derived fields (gpu_gap_ms, gpu_step_ms, step_ms, rates) are computed from the same spans, as core.measure.step_times
would.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

from core.measure.stats import percentile, verdict
from core.measure.waits import WAIT_KEYS
from core.report.build import ratios, summarize

PREFILL_MS = 3.0
HOST_QUEUE_MS = 1.5         # the host's time to queue one decode step (reduce-overhead's per-call cost)
FIRST_KERNEL_MS = 0.3       # from the host beginning a step to its first kernel starting on an idle device
DEVICE_TAIL_MS = 0.35       # the device's work after the host has queued the whole step
READ_MS = 0.012             # from the device finishing a step to its tokens known on the host
NEXT_MS = 0.008             # from a token known to the host beginning the next step
GAP_MS = READ_MS + NEXT_MS + FIRST_KERNEL_MS   # the naive loop's device gap per step
CPU_STEP_MS = 12.0
NEW_FIELDS = ("host_step_start_ms", "host_wait_start_ms", "device_start_ms", "device_end_ms", "clock_sync_error_ms",
              "rank_device_spans")


class Steps:
    """The per-step timestamps of one simulated run, filled step by step."""

    def __init__(self, computed: int, kept: int):
        self.host_start = [0.0] * computed
        self.queued = [0.0] * computed
        self.wait_start = [0.0] * kept
        self.known = [0.0] * kept
        self.dev_start = [0.0] * computed
        self.dev_end = [0.0] * computed


def simulate(loop: str, kept: int, *, cpu: bool = False, lag: int = 1, seed: int = 0) -> Steps:
    """A run of `kept` steps (step 0 = prefill) of `loop` ("naive" or "pipelined")."""
    jitter = random.Random(seed)
    lag = lag if loop == "pipelined" else 0
    steps = Steps(kept + lag, kept)
    host = 0.25
    for i in range(kept + lag):
        steps.host_start[i] = host
        work = (PREFILL_MS if i == 0 else CPU_STEP_MS if cpu else HOST_QUEUE_MS) * jitter.uniform(0.97, 1.03)
        steps.queued[i] = host + work
        if not cpu:
            steps.dev_start[i] = max(host + FIRST_KERNEL_MS, steps.dev_end[i - 1] if i else 0.0)
            steps.dev_end[i] = steps.queued[i] + DEVICE_TAIL_MS * jitter.uniform(0.95, 1.05)
        host = steps.queued[i]
        waited = i - lag  # the step whose tokens the host learns now
        if 0 <= waited < kept:
            ready = steps.queued[waited] if cpu else steps.dev_end[waited]
            steps.wait_start[waited] = host + 0.004
            steps.known[waited] = max(steps.wait_start[waited] + 0.002, ready + READ_MS)
            host = steps.known[waited]
        host += NEXT_MS
    return steps


def timings(loop: str, kept: int = 256, *, cpu: bool = False, ranks: int = 1, lag: int = 1, seed: int = 0,
            old: bool = False) -> dict[str, Any]:
    """A run's timings as core.measure.step_times.Timings.to_dict writes them, with the contract's fields (none if
    `old`)."""
    s = simulate(loop, kept, cpu=cpu, lag=lag, seed=seed)
    computed = len(s.queued)
    total = max(s.known[-1], s.queued[-1] if cpu else s.dev_end[-1]) + 0.05
    out: dict[str, Any] = {
        "clock": "host" if cpu else "cuda-events", "total_ms": total, "ttft_ms": s.known[0],
        "tokens_per_s": kept / (total / 1000), "new_tokens": kept, "kept_steps": kept, "computed_steps": computed,
        "host_queued_ms": s.queued, "host_known_ms": s.known, "setup_ms": 0.0, "compile_ms": 0.0,
        "decode_tokens": kept - 1, "decode_ms": total - s.known[0],
        "decode_tokens_per_s": (kept - 1) / ((total - s.known[0]) / 1000), "overshoot_steps": computed - kept,
        "gpu_step_ms": [], "gpu_gap_ms": [], "device_span_fraction": None, "ttft_gpu_ms": None,
        "host_step_start_ms": s.host_start, "host_wait_start_ms": s.wait_start,
        "device_start_ms": [] if cpu else s.dev_start, "device_end_ms": [] if cpu else s.dev_end,
        "clock_sync_error_ms": None if cpu else 0.0021, "rank_device_spans": [] if cpu or ranks == 1 else
        [{"rank": r, "device_start_ms": [t + 0.004 * r for t in s.dev_start],
          "device_end_ms": [t + 0.006 * r for t in s.dev_end]} for r in range(ranks)],
    }
    if cpu:
        out["step_ms"] = [b - a for a, b in itertools.pairwise(s.known)]
    else:
        starts, ends = s.dev_start[:kept], s.dev_end[:kept]
        out["gpu_step_ms"] = [e - b for b, e in zip(starts, ends)]
        out["gpu_gap_ms"] = [max(0.0, b - e) for e, b in zip(ends, starts[1:])]
        out["step_ms"] = [b - a for a, b in itertools.pairwise(ends)]
        out["ttft_gpu_ms"] = out["gpu_step_ms"][0]
        out["device_span_fraction"] = min(1.0, sum(out["gpu_step_ms"]) / (ends[-1] - starts[0]))
    out["ms_per_token_p50"] = statistics.median(out["step_ms"])
    out["ms_per_token_p95"] = percentile(out["step_ms"], 95)
    if old:
        for key in NEW_FIELDS:
            del out[key]
    return out


def report(kept: int = 256, *, trials: int = 3, cpu: bool = False, ranks: int = 1, old: bool = False,
           loops: tuple[str, ...] = ("naive", "pipelined")) -> dict[str, Any]:
    """A complete report (it passes dashboard.service.page_record.parse_report) of `trials` alternating rounds."""
    runs = []
    for trial in range(trials):
        order = loops if trial % 2 == 0 else tuple(reversed(loops))
        for position, name in enumerate(order):
            seed = 100 * trial + (name == "pipelined")
            runs.append({"contestant": name, "trial": trial, "order": position, "token_ids": [[1] * kept],
                         "texts": ["hello"], "first_difference": None, "started_ms": 0.0,
                         "timings": timings(name, kept, cpu=cpu, ranks=ranks, seed=seed, old=old)})
    summary = {name: summarize([r for r in runs if r["contestant"] == name]) for name in loops}
    return {
        "schema": "syncscope.bench/1", "created": "2026-11-30T05:00:00+00:00",
        "environment": {"device": "cpu" if cpu else "cuda", "gpu": None if cpu else "NVIDIA H200",
                        "dtype": "float32" if cpu else "bfloat16", "tp": ranks},
        "model": {"spec": "tiny-random" if cpu else "synthetic:llama-1b"},
        "request": {"prompt": "Hello", "trials": trials, "contestants": list(loops)},
        "warmup": {name: {"total_ms": 500.0, "compile_ms": 0.0} for name in loops},
        "runs": runs, "summary": summary, "ratios": ratios(summary),
        "verdict": verdict(runs) if {"naive", "pipelined"} <= set(loops) else None,
        "identical": dict.fromkeys(loops, True), "all_identical": True, "self_consistent": dict.fromkeys(loops, True),
    }


def without_new_fields(full: dict[str, Any]) -> dict[str, Any]:
    """The same report as written before the contract: no per-step host/device timestamps, no started_ms."""
    out = copy.deepcopy(full)
    for run in out["runs"]:
        run.pop("started_ms", None)
        for key in NEW_FIELDS:
            run["timings"].pop(key, None)
    for summary in out.get("summary", {}).values():  # the per-step waits came from those timestamps
        for key in WAIT_KEYS:
            summary.pop(f"{key}_per_step", None)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.timeline_reports",
                                     description="write a hand-built report with the timeline's fields")
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=256, help="kept steps per run (step 0 = prefill)")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--cpu", action="store_true", help="no device spans: the host is the device")
    parser.add_argument("--ranks", type=int, default=1, help="tensor-parallel ranks")
    parser.add_argument("--old", action="store_true", help="without the new fields, as written before them")
    args = parser.parse_args(argv)
    built = report(args.steps, trials=args.trials, cpu=args.cpu, ranks=args.ranks)
    args.out.write_text(json.dumps(without_new_fields(built) if args.old else built))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
