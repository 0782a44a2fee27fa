"""Statistics over trials, torch-free: spreads, percentiles, and whether a difference is beyond a run's noise.

The verdict rule (issue 20). Trials are paired: each round runs both contestants, in alternating order. For each
pair take the log of contender/baseline; their mean is the log of the geometric-mean ratio. A two-sided Student t
interval at VERDICT_CONFIDENCE (95%) bounds it; at HOST_CLOCK_CONFIDENCE (99%) for runs timed on the host clock
(the CPU, where host and device are one processor: the sync costs nothing there and no difference is expected).
The call is "faster" (or "slower") only when that whole interval lies above (below) 1, the geometric-mean ratio is
at least MIN_EFFECT from 1, and, where the A/A control ran
(pipelined entered twice), further from 1 than the control is from its twin; and, as the rule before it asked,
every pair agrees on the direction and the median ratio is further from 1 than half the larger trial spread. The
t interval alone was fooled by drift on a loaded CPU; the spread test alone by three lucky trials. With fewer than
MIN_TRIALS_FOR_A_CALL pairs it says there are too few trials.

Why, and how it was measured (benchmarks/aa_false_positive.py, an A/A comparison being the pipelined loop against
itself, in simulation, on the CPU, on the GPU and over the committed bench reports): docs/MEASUREMENT.md, "Comparing
two runs", "The verdict within one run".
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from core.request.options import PIPELINED_AGAIN


def representative_run(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Of one contestant's trials, the one whose decode tokens/s (else tokens/s) is closest to the median: the trial
    behind the summary number, which the timeline draws."""
    if not runs:
        return None
    middle = statistics.median(_rate(r) for r in runs)
    return min(runs, key=lambda r: abs(_rate(r) - middle))


def _rate(run: dict[str, Any]) -> float:
    timings = run["timings"]
    decode = timings.get("decode_tokens_per_s")
    return decode if decode is not None else timings["tokens_per_s"]


def timeline_center_steps(runs_by_loop: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    """Per loop, the decode step the timeline's first view centres on: the loops share one time axis, and the view
    is centred on the earliest of their representative trials' middle steps (dashboard.views.timeline.first_view)."""
    starts = {}
    for name, runs in runs_by_loop.items():
        run = representative_run(runs)
        if run is None:
            continue
        times = (run["timings"].get("host_step_start_ms") or [])[:run["timings"].get("kept_steps") or 0]
        if len(times) > 2:
            starts[name] = times
    if not starts:
        return {}
    center = min(times[len(times) // 2] for times in starts.values())
    return {name: min(range(len(times)), key=lambda i: abs(times[i] - center)) for name, times in starts.items()}


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
VERDICT_CONFIDENCE = 0.95
# Runs timed on the host clock (the CPU, where the device is the host and the sync costs nothing) ask for 99%: their
# noise comes in bursts that pairing does not cancel (see docs/MEASUREMENT.md, "Diffing two runs").
HOST_CLOCK_CONFIDENCE = 0.99
MIN_EFFECT = 0.005  # a consistent difference under 0.5% is not worth a headline, however clear
# Student t quantiles at 0.975 (two-sided 95%) for 1..30 degrees of freedom; beyond, a Cornish-Fisher expansion.
_T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
          2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


# The same at 0.995 (two-sided 99%).
_T_995 = (63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169, 3.106, 3.055, 3.012, 2.977, 2.947,
          2.921, 2.898, 2.878, 2.861, 2.845, 2.831, 2.819, 2.807, 2.797, 2.787, 2.779, 2.771, 2.763, 2.756, 2.750)
_T_TABLES = {0.95: (_T_975, 1.959964), 0.99: (_T_995, 2.575829)}  # table, and the normal quantile beyond it


def t_quantile(degrees_of_freedom: int, confidence: float = VERDICT_CONFIDENCE) -> float:
    """Student's t quantile for a two-sided interval at `confidence` (0.95 or 0.99): its half-width factor."""
    if degrees_of_freedom < 1:
        raise ValueError(f"a t interval needs at least 1 degree of freedom, got {degrees_of_freedom}")
    table, z = _T_TABLES[confidence]
    if degrees_of_freedom <= len(table):
        return table[degrees_of_freedom - 1]
    df = degrees_of_freedom
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def paired_interval(log_ratios: list[float], confidence: float = VERDICT_CONFIDENCE) -> tuple[float, float, float]:
    """(geometric-mean ratio, low, high): the two-sided t interval of paired log ratios at `confidence`, as ratios."""
    mean = statistics.fmean(log_ratios)
    half = t_quantile(len(log_ratios) - 1, confidence) * statistics.stdev(log_ratios) / math.sqrt(len(log_ratios))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def paired_trials(runs: list[dict[str, Any]], contender: str,
                  baseline: str) -> tuple[dict[str, dict[int, Any]], list[int], str]:
    """Each trial's timings of `contender`, `baseline` and the A/A twin, by trial; the trials both ran (the pairs);
    and the rate they are compared by: decode-phase tokens/s where both have it, else end to end."""
    by_trial = {name: {r["trial"]: r["timings"] for r in runs if r["contestant"] == name}
                for name in (contender, baseline, PIPELINED_AGAIN)}
    pairs = sorted(set(by_trial[contender]) & set(by_trial[baseline]))
    decode = all(by_trial[n][t].get("decode_tokens_per_s") is not None for n in (contender, baseline) for t in pairs)
    return by_trial, pairs, "decode_tokens_per_s" if decode else "tokens_per_s"


def verdict(runs: list[dict[str, Any]], contender: str = "pipelined", baseline: str = "naive") -> dict[str, Any]:
    """Is `contender` faster than `baseline` beyond this run's own noise? Decode phase where both have one.

    The rule is in the module docstring: a paired t interval on log ratios at 95%, a minimum effect, and the A/A
    control's distance when it ran. `ratio` is median over median, as the tables show it; `interval` bounds the
    geometric-mean paired ratio (`mean_ratio`)."""
    by_trial, pairs, metric = paired_trials(runs, contender, baseline)
    rate = {n: [by_trial[n][t][metric] for t in pairs] for n in (contender, baseline)}
    out: dict[str, Any] = {"contender": contender, "baseline": baseline, "metric": metric, "trials": len(pairs),
                           "ratio": None, "noise": None, "call": "no-data", "rule": "paired-t"}
    if not pairs:
        return out
    out["ratio"] = statistics.median(rate[contender]) / statistics.median(rate[baseline])
    if len(pairs) < MIN_TRIALS_FOR_A_CALL:
        out["call"] = "too-few-trials"
        return out
    paired = [a / b for a, b in zip(rate[contender], rate[baseline])]
    host_clock = any(by_trial[n][t].get("clock") == "host" for n in (contender, baseline) for t in pairs)
    confidence = HOST_CLOCK_CONFIDENCE if host_clock else VERDICT_CONFIDENCE
    mean_ratio, low, high = paired_interval([math.log(r) for r in paired], confidence)
    # Drift over the run (other work on the machine) moves both trials of a pair, but not always alike: the spread
    # of each contestant's trials is a second, independent guard.
    spread_noise = max(spread(rate[contender]) or 0.0, spread(rate[baseline]) or 0.0) / 2
    out.update(paired_ratios=paired, mean_ratio=mean_ratio, interval=[low, high], confidence=confidence,
               noise=spread_noise, control_distance=_control_distance(by_trial, pairs, rate, contender, metric))
    least = max(MIN_EFFECT, out["control_distance"] or 0.0)
    beyond_spread = abs(out["ratio"] - 1) > spread_noise
    if low > 1 and mean_ratio - 1 >= least and beyond_spread and all(r > 1 for r in paired):
        out["call"] = "faster"
    elif high < 1 and 1 - mean_ratio >= least and beyond_spread and all(r < 1 for r in paired):
        out["call"] = "slower"
    else:
        out["call"] = "within-noise"
    return out


def _control_distance(by_trial: dict[str, dict[int, Any]], pairs: list[int], rate: dict[str, list[float]],
                      contender: str, metric: str) -> float | None:
    """How far the pipelined loop's median is from its A/A twin's: a difference no larger is not the loops'."""
    control = [by_trial[PIPELINED_AGAIN][t][metric] for t in pairs if t in by_trial[PIPELINED_AGAIN]]
    if not control or contender != "pipelined" or any(v is None for v in control):
        return None
    return abs(statistics.median(rate[contender]) / statistics.median(control) - 1)


def verdict_sentence(call: dict[str, Any]) -> str:
    """One line on what a verdict means, for the CLI and the page."""
    what = "decode-phase tokens/s" if call["metric"] == "decode_tokens_per_s" else "end-to-end tokens/s"
    ratio = f"{call['contender']}/{call['baseline']} = {call['ratio']:.3f}x ({what})" if call["ratio"] else "no ratio"
    if call["call"] == "too-few-trials":
        return (f"{ratio}: with {call['trials']} trial(s) this run cannot tell a difference from noise; "
                f"use {MIN_TRIALS_FOR_A_CALL} or more trials")
    evidence = _evidence(call)
    if call["call"] in ("faster", "slower"):
        return f"{ratio}: {call['contender']} is {call['call']}, beyond this run's noise ({evidence})"
    if call["call"] == "within-noise":
        return f"{ratio}: within this run's noise ({evidence}); no difference shown"
    return ratio


def _evidence(call: dict[str, Any]) -> str:
    if "interval" not in call:  # a report written before issue 20's rule
        return f"±{call['noise']:.1%}"
    low, high = call["interval"]
    confidence = call.get("confidence", VERDICT_CONFIDENCE)
    text = f"{confidence:.0%} interval {low:.3f}-{high:.3f}x over {call['trials']} pairs"
    if call.get("control_distance") is not None:
        text += f", A/A control {call['control_distance']:.1%} apart"
    return text


def welch_ratio_interval(log_a: list[float], log_b: list[float],
                         confidence: float = VERDICT_CONFIDENCE) -> tuple[float, float, float]:
    """(ratio, low, high): exp of mean(log_b) - mean(log_a) and of Welch's two-sided t interval at `confidence` around
    it, for two independent samples of log values (two runs' trials), at least two each. The degrees of freedom are
    Welch-Satterthwaite's, rounded down (a little wider than the exact quantile, never narrower)."""
    if len(log_a) < 2 or len(log_b) < 2:
        raise ValueError(f"a Welch interval needs two values a side, got {len(log_a)} and {len(log_b)}")
    var_a, var_b = statistics.variance(log_a) / len(log_a), statistics.variance(log_b) / len(log_b)
    difference = statistics.fmean(log_b) - statistics.fmean(log_a)
    if var_a + var_b == 0:
        return (math.exp(difference),) * 3
    df = (var_a + var_b) ** 2 / (var_a ** 2 / (len(log_a) - 1) + var_b ** 2 / (len(log_b) - 1))
    half = t_quantile(max(1, math.floor(df)), confidence) * math.sqrt(var_a + var_b)
    return math.exp(difference), math.exp(difference - half), math.exp(difference + half)


def widened(low: float, high: float, drift: float) -> tuple[float, float]:
    """An interval on a ratio, widened by a drift of up to `drift` either way (0.14: 14%)."""
    return low / (1 + drift), high * (1 + drift)
