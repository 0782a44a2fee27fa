"""What a run under load measured, and the medians over trials (core.load.protocol).

- output tokens/s and requests/s: every request's tokens (through its stop), and the requests, over the run's wall
  time on the host, from its start to the last token known there;
- time to first token (TTFT): from a request's arrival to its first token known on the host; time per output token
  (TPOT): from its first token to its last, over the tokens after the first; p50 and p99 over the requests;
- steps past a stop: the slot steps computed for a request after its last token, until the host freed its slot (the
  pipelined loop's `lag` a request; none for the naive loop and the ceiling); `slot_steps` all slot steps computed;
- host wait per decode step: the host blocked until the step's tokens were known (the naive loop's read; the
  pipelined loop's wait on a copy `lag` steps old); device idle per decode step: from the first step's start to the
  last one's end, the device's time in neither a decode step nor an admission (CUDA events), over the steps.
"""

from __future__ import annotations

import statistics
from typing import Any

from core.load.batching import BatchedRun
from core.measure.stats import percentile

MEDIAN_KEYS = ("tokens_per_s", "requests_per_s", "total_ms", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50",
               "tpot_ms_p99", "steps", "slot_steps", "wasted_slot_steps", "host_wait_us_per_step",
               "device_idle_us_per_step", "step_ms_p50")


def run_summary(run: BatchedRun) -> dict[str, Any]:
    """One run's numbers (module doc); None where the contestant cannot observe them (the ceiling's times of tokens,
    transformers' steps)."""
    total_s = max(run.total_s, 1e-9)
    ttft = [(r.first_token_s - r.arrival_s) * 1000 for r in run.requests if r.first_token_s is not None]
    tpot = [(r.finished_s - r.first_token_s) * 1000 / (len(r.tokens) - 1) for r in run.requests
            if r.finished_s is not None and r.first_token_s is not None and len(r.tokens) > 1]
    observed = run.loop != "no-check"
    stepped = run.steps > 0
    timings = run.timings
    waits = [k - w for w, k in zip(timings.get("host_wait_start_ms") or [], timings.get("host_known_ms") or [])]
    idle = timings.get("device_idle_ms_per_step")
    return {
        "tokens": run.output_tokens, "requests": len(run.requests),
        "tokens_per_s": run.output_tokens / total_s, "requests_per_s": len(run.requests) / total_s,
        "total_ms": run.total_s * 1000,
        "ttft_ms_p50": _pct(ttft, 50) if observed else None, "ttft_ms_p99": _pct(ttft, 99) if observed else None,
        "tpot_ms_p50": _pct(tpot, 50) if observed else None, "tpot_ms_p99": _pct(tpot, 99) if observed else None,
        "steps": run.steps if stepped else None, "slot_steps": run.steps * run.slots if stepped else None,
        "wasted_slot_steps": sum(r.wasted_steps for r in run.requests) if stepped else None,
        "host_wait_us_per_step": statistics.fmean(waits) * 1000 if waits and observed else None,
        "device_idle_us_per_step": idle * 1000 if idle is not None else None,
        "step_ms_p50": timings.get("ms_per_token_p50") if stepped else None,
    }


def summarize_trials(runs: list[BatchedRun], solo: dict[int, list[int]]) -> dict[str, Any]:
    """The medians over a contestant's trials, its trials' numbers, the requests of its median trial, and whether
    every request's tokens equal its solo decode (`identical_to_solo`, over the requests `solo` holds) and repeat
    across trials (`repeatable`)."""
    summaries = [run_summary(run) for run in runs]
    medians = {key: _median([s[key] for s in summaries]) for key in MEDIAN_KEYS}
    rates = [s["tokens_per_s"] for s in summaries]
    middle = sorted(range(len(runs)), key=lambda i: rates[i])[len(runs) // 2]
    first = [r.tokens for r in runs[0].requests]
    checked = [index for index in solo if index < len(first)]
    return {**medians, "trials": len(runs), "per_trial": summaries,
            "spread": (max(rates) - min(rates)) / statistics.median(rates) if len(rates) > 1 else None,
            "requests": [r.to_json() for r in runs[middle].requests],
            "identical_to_solo": all(run.requests[i].tokens == solo[i] for run in runs for i in checked)
            if checked else None,
            "first_solo_difference": next((i for i in checked if first[i] != solo[i]), None),
            "repeatable": all([r.tokens for r in run.requests] == first for run in runs)}


def _pct(values: list[float], q: float) -> float | None:
    return percentile(values, q) if values else None


def _median(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None
