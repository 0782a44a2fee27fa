"""Statistics over trials, torch-free: spreads, percentiles, and whether a difference is beyond a run's noise."""

from __future__ import annotations

import statistics
from typing import Any

from core.options import PIPELINED_AGAIN


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile; values need not be sorted."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def spread(values: list[float]) -> float | None:
    """(max - min) / median over trials; None with fewer than two trials, where it cannot be known."""
    if len(values) < 2:
        return None
    return (max(values) - min(values)) / statistics.median(values)


MIN_TRIALS_FOR_A_CALL = 3


def verdict(runs: list[dict[str, Any]], contender: str = "pipelined", baseline: str = "naive") -> dict[str, Any]:
    """Is `contender` faster than `baseline` beyond this run's own noise? Decode phase where both have one.

    Trials are paired (they alternate order within a round). The call is "faster"/"slower" only when every pair
    agrees on the direction and the median ratio is further from 1 than the noise: half the larger trial spread,
    or the A/A control's distance from 1 (pipelined entered twice) when that is larger. With fewer than
    MIN_TRIALS_FOR_A_CALL trials per contestant it says it cannot tell."""
    metric = "decode_tokens_per_s"
    by_trial = {name: {r["trial"]: r["timings"] for r in runs if r["contestant"] == name}
                for name in (contender, baseline, PIPELINED_AGAIN)}
    pairs = sorted(set(by_trial[contender]) & set(by_trial[baseline]))
    if any(by_trial[n][t].get(metric) is None for n in (contender, baseline) for t in pairs):
        metric = "tokens_per_s"
    rate = {n: [by_trial[n][t][metric] for t in pairs] for n in (contender, baseline)}
    out: dict[str, Any] = {"contender": contender, "baseline": baseline, "metric": metric, "trials": len(pairs),
                           "ratio": None, "noise": None, "call": "no-data"}
    if not pairs:
        return out
    out["ratio"] = statistics.median(rate[contender]) / statistics.median(rate[baseline])
    if len(pairs) < MIN_TRIALS_FOR_A_CALL:
        out["call"] = "too-few-trials"
        return out
    noise = max(spread(rate[contender]) or 0.0, spread(rate[baseline]) or 0.0) / 2
    control = [by_trial[PIPELINED_AGAIN][t][metric] for t in pairs if t in by_trial[PIPELINED_AGAIN]]
    if control and contender == "pipelined":
        noise = max(noise, abs(statistics.median(rate[contender]) / statistics.median(control) - 1))
    paired = [a / b for a, b in zip(rate[contender], rate[baseline])]
    out.update(noise=noise, paired_ratios=paired)
    if all(r > 1 for r in paired) and out["ratio"] - 1 > noise:
        out["call"] = "faster"
    elif all(r < 1 for r in paired) and 1 - out["ratio"] > noise:
        out["call"] = "slower"
    else:
        out["call"] = "within-noise"
    return out


def verdict_sentence(call: dict[str, Any]) -> str:
    """One line on what a verdict means, for the CLI and the page."""
    what = "decode-phase tokens/s" if call["metric"] == "decode_tokens_per_s" else "end-to-end tokens/s"
    ratio = f"{call['contender']}/{call['baseline']} = {call['ratio']:.3f}x ({what})" if call["ratio"] else "no ratio"
    if call["call"] == "too-few-trials":
        return (f"{ratio}: with {call['trials']} trial(s) this run cannot tell a difference from noise; "
                f"use {MIN_TRIALS_FOR_A_CALL} or more trials")
    if call["call"] in ("faster", "slower"):
        return (f"{ratio}: {call['contender']} is {call['call']}, beyond this run's noise "
                f"(±{call['noise']:.1%}, every trial agrees)")
    if call["call"] == "within-noise":
        return f"{ratio}: within this run's noise (±{call['noise']:.1%}); no difference shown"
    return ratio
