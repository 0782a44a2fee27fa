"""Two reports side by side: the settings that differ, each contestant's rate in both runs with its ratio b/a, an
interval on it (against a control contestant where the settings allow one, else widened by the drift between two
processes: docs/MEASUREMENT.md, "Diffing two runs") and the call, and the per-step waits side by side
(`python -m core.bench --diff A.json B.json`, the page's "Diff two runs" and "Diff two files"). Torch-free.
"""

from __future__ import annotations

import json
import math
from typing import Any

from core.documents.upgrades import upgrade_report
from core.measure.drift import PROCESS_DRIFT, ProcessDrift, device_words, drift_between, drift_words, not_comparable
from core.measure.stats import (
    HOST_CLOCK_CONFIDENCE,
    MIN_EFFECT,
    MIN_TRIALS_FOR_A_CALL,
    VERDICT_CONFIDENCE,
    welch_ratio_interval,
    widened,
)
from core.report.explain import (
    contestant_waits,
    duration,
    number_or_none,
    plus_minus,
)
from core.request.options import ALL_LOOPS, NO_CHECK, OPTIONS, PIPELINED_AGAIN, RUN_OPTION, RUN_OPTIONS
from core.text import SENTENCE_FIELD_CHARS, clip, escaped
from core.tuning import RETIRED, SWITCHES

DIFFED_REQUEST = ("trials", "contestants", "min_seconds", "deterministic", "audit", "no_kernel_measurement", "stream")
# What the run was and what its switches made of the model and its compiled steps (core.report.build.environment)
DIFFED_ENVIRONMENT = ("gpu", "device", "dtype", "tp", "tp_all_reduce", "decode_attention", "fused_projections",
                      "pdl", "o_proj", "decode_products", "decode_layer", "step_commit", "kernel_reads", "torch",
                      "transformers", "python")
# A retired switch is a setting only where a report set it (core.tuning.RETIRED); absent, it was at its default
ABSENT_MEANS = {retired.variable: retired.default for retired in RETIRED}
CONTROL_CANDIDATES = ("naive", NO_CHECK)  # in this order: the contestants a control may be
# The contestants that share the control's decode setup (compiled forward, cache, step graph) in a process, so that
# what moves one between processes moves the others alike; generate() has its own.
SHARE_THE_CONTROLS_SETUP = (*ALL_LOOPS, PIPELINED_AGAIN)
MIN_TRIALS_A_SIDE = MIN_TRIALS_FOR_A_CALL
CALLS = ("faster", "slower", "within noise", "control", "not comparable", "too few trials", "noise unknown", "no data")


def diff_reports(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two reports side by side: what differs between their settings, and each contestant's rate in both, judged
    with an interval on B / A (docs/MEASUREMENT.md, "Diffing two runs").

    Returns a dict with:
      - "a", "b": each run's facts: model, device (the GPU's name, else the device), created, command, interrupted;
      - "settings": one row per setting, in a fixed order: {"name", "a", "b", "differs"} (the model, the device,
        dtype, versions and what the switches made of the model from "environment", every tuning switch by its
        variable from "environment.tuning" (a retired one where either report set it), every run option from
        "request.options", the request's trials, contestants, audit ...; what a loop ran with where the device
        changed it, as "ran <option>");
      - "differs": the names of the settings that differ;
      - "control": the contestant the differing settings cannot change (core.request.options.RunOption.affects), whose
        B / A is the drift between the two runs, or None; "no_control": why there is none (None when there is one);
      - "drift": {"device" ("cuda", "cpu" or None), "rates", "against_control", "measured"}: the drift between two
        processes of the same settings on that device kind (core.measure.drift.PROCESS_DRIFT); where none is
        measured (the CPU, different or unknown kinds) the figures are None and "measured" says why no change is
        called (core.measure.drift.not_comparable);
      - "note": one sentence on how the contestants were judged (the control, or the drift allowance);
      - "contestants": per contestant in both runs, in a's order: {"name", "metric" (decode_tokens_per_s where both
        have it, else tokens_per_s), "a", "b" (the medians), "ratio" (b / a of the medians), "a_trials",
        "b_trials", "control" (True for the control's row), "basis" ("control", "against control", "drift
        allowance", or None where there was no interval), "estimate" (the geometric-mean ratio the interval is
        around: of the contestant's rate over the control's where judged against the control, else of its rate),
        "interval" ([low, high], the Welch t interval at "confidence"), "interval_used" (what the call was judged
        by: the interval widened by "allowance", the drift the basis leaves; None where no drift is measured, and the
        call is "not comparable"), "confidence", "allowance", "call"
        (one of CALLS), "sentence" (what the CLI and the page say of it), "a_waits", "b_waits" (per-step waits
        in ms: core.measure.waits.WAIT_KEYS)};
      - "only_in_a", "only_in_b": contestants that ran in one report only;
      - "verdicts": {"a": ..., "b": ...}: each run's own pipelined/naive verdict or None: its ratio, call, noise and
        "evidence" (the one noise figure the run itself printed: its interval, or for a verdict from before
        intervals, its ±noise).

    Any reports, old ones too (core.documents.upgrades.upgrade_report).
    """
    a, b = upgrade_report(a), upgrade_report(b)
    names_a, names_b = list(a["summary"]), list(b["summary"])
    shared = [name for name in names_a if name in names_b]
    settings = _settings_rows(a, b)
    differs = [row["name"] for row in settings if row["differs"]]
    kind, drift = drift_between(a["environment"], b["environment"])
    unmeasured = not_comparable(a["environment"], b["environment"]) if drift is None else None
    control, no_control = _control(a, b, differs, shared)
    judge = _Judge(a, b, control, drift, kind)
    return {
        "a": _run_facts(a), "b": _run_facts(b), "settings": settings, "differs": differs,
        "control": control, "no_control": no_control,
        "drift": {"device": kind, "rates": drift.rates if drift else None,
                  "against_control": drift.against_control if drift else None,
                  "measured": drift.measured if drift else unmeasured},
        "note": _judged_note(control, no_control, differs, kind, drift, shared, unmeasured),
        "contestants": [judge.row(name) for name in shared],
        "only_in_a": [n for n in names_a if n not in names_b], "only_in_b": [n for n in names_b if n not in names_a],
        "verdicts": {"a": _verdict_facts(a), "b": _verdict_facts(b)},
    }


def _run_facts(report: dict[str, Any]) -> dict[str, Any]:
    env = report["environment"]
    return {"model": clip(report["model"].get("spec"), SENTENCE_FIELD_CHARS),
            "device": clip(env.get("gpu") or env.get("device"), SENTENCE_FIELD_CHARS),
            "created": clip(report.get("created"), 40), "command": clip(report.get("command"), 2000),
            "interrupted": bool(report.get("interrupted"))}


def diff_settings(report: dict[str, Any]) -> dict[str, Any]:
    """Every setting diff_reports sets side by side, by name: two reports with equal values ran the same settings. Any
    report, old ones too."""
    report = upgrade_report(report)
    request, env = report["request"], report["environment"]
    options = request.get("options", {})
    values: dict[str, Any] = {"model": report.get("model", {}).get("spec"), "prompt": request.get("prompt")}
    values.update({key: env.get(key) for key in DIFFED_ENVIRONMENT})
    values.update(_tuning_settings(env.get("tuning")))
    values.update({key: value for key, value in options.items() if key != "loop"})
    if options:  # an option added after the report was written: the run had what its default does
        values.update({o.name: o.default for o in RUN_OPTIONS if o.part == OPTIONS and o.name not in options})
    values.update({key: request.get(key) for key in DIFFED_REQUEST})
    ran = _loop_ran(report)
    values.update({f"ran {key}": ran.get(key) for key in ("cache", "compile", "streams") if key in ran})
    return values


def _tuning_settings(tuning: Any) -> dict[str, Any]:
    """Each tuning switch by its variable, as the report's `environment.tuning` holds it (upgrade_report fills it in
    for a report from before), absent ones at their default; a retired switch only where it was not at its
    default."""
    tuning = tuning if isinstance(tuning, dict) else {}
    values = {switch.variable: _switch_value(tuning.get(switch.key, switch.default)) for switch in SWITCHES}
    values.update({retired.variable: _switch_value(tuning[retired.key]) for retired in RETIRED
                   if tuning.get(retired.key, retired.default) != retired.default})
    return values


def _switch_value(value: Any) -> Any:
    """A switch's value as a setting: a JSON object as its JSON text (the same options give the same text)."""
    return json.dumps(value, sort_keys=True, default=str) if isinstance(value, dict) else value


def _loop_ran(report: dict[str, Any]) -> dict[str, Any]:
    effective = report["effective"]  # empty: a report from before it recorded what ran
    return next((effective[name]["options"] for name in (*ALL_LOOPS, NO_CHECK) if name in effective), {})


def _settings_rows(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    left, right = diff_settings(a), diff_settings(b)
    rows = []
    for name in dict.fromkeys([*left, *right]):
        x, y = left.get(name, ABSENT_MEANS.get(name)), right.get(name, ABSENT_MEANS.get(name))
        if name.startswith("ran ") and x == left.get(name[4:]) and y == right.get(name[4:]):
            continue  # ran as asked in both: the asked-for row says it
        if x is None and y is None:
            continue
        shown = _prompt_text if name == "prompt" else _setting_value
        rows.append({"name": name, "a": shown(x), "b": shown(y), "differs": x != y})
    return rows


def _prompt_text(prompt: Any) -> str | None:
    """A prompt as a setting: its text (clipped), or how many token ids; a batch says how many rows."""
    if prompt is None:
        return None
    rows = prompt if isinstance(prompt, list) and prompt and isinstance(prompt[0], list | str) else [prompt]
    first = rows[0]
    text = f"{len(first)} token ids" if isinstance(first, list) else repr(clip(first, 60))
    return f"{len(rows)} rows, each {text}" if len(rows) > 1 else text


def _setting_value(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return clip(", ".join(str(v) for v in value), SENTENCE_FIELD_CHARS)
    if isinstance(value, str):
        return clip(value, SENTENCE_FIELD_CHARS)
    return value if isinstance(value, int | float | bool) or value is None else clip(value, SENTENCE_FIELD_CHARS)


def _control(a: dict[str, Any], b: dict[str, Any], differs: list[str],
             shared: list[str]) -> tuple[str | None, str | None]:
    """The contestant that no differing setting can change, and None; or None and why there is none."""
    affected: set[str] = set()
    for name in differs:
        option = RUN_OPTION.get(name.removeprefix("ran "))
        if option is None or not option.affects:
            return None, f"{clip(name, 40)} differs, which can change every contestant"
        affected.update(option.affects)
    if "lag" in differs and (why := _cache_length_differs(a, b)):
        return None, why
    for name in CONTROL_CANDIDATES:
        if name in shared and name not in affected \
                and min(len(_trial_rates(r, name, _metric(a, b, name))) for r in (a, b)) >= MIN_TRIALS_A_SIDE:
            return name, None
    return None, f"no contestant that the differing settings leave alone ran {MIN_TRIALS_A_SIDE} trials in both runs"


_UNKNOWN_KEYS = "unknown"


def _cache_length_differs(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Lag also sizes every loop's static cache (core.request.options.static_cache_length): why that breaks the control,
    or None where both runs' caches held as many keys (or neither was static)."""
    keys = [_static_cache_keys(report) for report in (a, b)]
    if _UNKNOWN_KEYS in keys:
        return "lag differs, and lag sizes every loop's static cache, whose length the reports do not say"
    if keys[0] != keys[1]:
        return f"lag changed every loop's static cache ({keys[0]} keys in A, {keys[1]} in B)"
    return None


def _static_cache_keys(report: dict[str, Any]) -> int | str | None:
    """The keys a static cache held (the report's identity.keys), None without a static cache, else unknown."""
    ran = _loop_ran(report).get("cache") or report["request"].get("options", {}).get("cache")
    if ran != "static":
        return None
    keys = report["identity"].get("keys") if report["identity"] else None
    return keys if isinstance(keys, int) and not isinstance(keys, bool) else _UNKNOWN_KEYS


def _metric(a: dict[str, Any], b: dict[str, Any], name: str) -> str:
    both_decode = all(number_or_none(r["summary"].get(name, {}).get("decode_tokens_per_s")) for r in (a, b))
    return "decode_tokens_per_s" if both_decode else "tokens_per_s"


def _trial_rates(report: dict[str, Any], name: str, metric: str) -> dict[int, float]:
    """A contestant's rate in each of its trials, by trial number (a report without per-trial runs has none)."""
    rates = {}
    for index, run in enumerate(r for r in report["runs"] if isinstance(r, dict)
                                and r.get("contestant") == name and isinstance(r.get("timings"), dict)):
        value = number_or_none(run["timings"].get(metric))
        trial = run.get("trial")
        if value and value > 0:
            rates[trial if isinstance(trial, int) and not isinstance(trial, bool) else index] = value
    return rates


def _host_clock(report: dict[str, Any], names: tuple[str, ...]) -> bool:
    return any(isinstance(r, dict) and r.get("contestant") in names and isinstance(r.get("timings"), dict)
               and r["timings"].get("clock") == "host" for r in report["runs"])


class _Judge:
    """Each contestant's row: its rates in both runs, an interval on B / A, and the call."""

    def __init__(self, a: dict[str, Any], b: dict[str, Any], control: str | None, drift: ProcessDrift | None,
                 kind: str | None):
        self.a, self.b, self.control, self.drift, self.kind = a, b, control, drift, kind

    def row(self, name: str) -> dict[str, Any]:
        a, b = self.a, self.b
        metric = _metric(a, b, name)
        rate_a, rate_b = (number_or_none(r["summary"].get(name, {}).get(metric)) for r in (a, b))
        trials_a, trials_b = _trial_rates(a, name, metric), _trial_rates(b, name, metric)
        row: dict[str, Any] = {
            "name": name, "metric": metric, "a": rate_a, "b": rate_b,
            "ratio": rate_b / rate_a if rate_a and rate_b else None, "a_trials": len(trials_a),
            "b_trials": len(trials_b), "control": name == self.control, "basis": None, "estimate": None,
            "interval": None, "interval_used": None, "confidence": None, "allowance": None,
            "a_waits": contestant_waits(a, name), "b_waits": contestant_waits(b, name)}
        row["call"] = self._judged(row, name, trials_a, trials_b)
        row["sentence"] = diff_sentence(row, self.control, self.kind)
        return row

    def _judged(self, row: dict[str, Any], name: str, trials_a: dict[int, float], trials_b: dict[int, float]) -> str:
        if row["ratio"] is None:
            return "no data"
        if not trials_a or not trials_b:
            return "noise unknown"
        if min(len(trials_a), len(trials_b)) < MIN_TRIALS_A_SIDE:
            return "too few trials"
        names = (name, self.control) if self.control and name in SHARE_THE_CONTROLS_SETUP else (name,)
        host = any(_host_clock(r, names) for r in (self.a, self.b))
        row["confidence"] = HOST_CLOCK_CONFIDENCE if host else VERDICT_CONFIDENCE
        if self.control is None or row["control"] or name not in SHARE_THE_CONTROLS_SETUP:
            logs = [[math.log(v) for v in trials.values()] for trials in (trials_a, trials_b)]
            row["basis"] = "control" if row["control"] else "drift allowance"
            row["allowance"] = 0.0 if row["control"] else self.drift.rates if self.drift else None
        else:
            logs = [self._against_control(r, name, row["metric"]) for r in (self.a, self.b)]
            if min(len(values) for values in logs) < MIN_TRIALS_A_SIDE:
                return "too few trials"
            row["basis"] = "against control"
            row["allowance"] = self.drift.against_control if self.drift else None
        estimate, low, high = welch_ratio_interval(*logs, confidence=row["confidence"])
        row["estimate"], row["interval"] = estimate, [low, high]
        if row["allowance"] is None:  # no drift measured between two such processes: nothing to judge it by
            return "not comparable"
        row["interval_used"] = list(widened(low, high, row["allowance"]))
        return "control" if row["control"] else _interval_call(estimate, *row["interval_used"])

    def _against_control(self, report: dict[str, Any], name: str, metric: str) -> list[float]:
        """Per trial of one run, log(contestant / control): the trials of one round are paired, as in the verdict."""
        mine, theirs = _trial_rates(report, name, metric), _trial_rates(report, self.control, metric)
        return [math.log(mine[t] / theirs[t]) for t in sorted(set(mine) & set(theirs))]


def _interval_call(estimate: float, low: float, high: float) -> str:
    if low > 1 and estimate - 1 >= MIN_EFFECT:
        return "faster"
    if high < 1 and 1 - estimate >= MIN_EFFECT:
        return "slower"
    return "within noise"


def diff_sentence(row: dict[str, Any], control: str | None, kind: str | None) -> str:
    """One sentence on a contestant of two runs: its B / A, the interval it was judged by, and the call."""
    name, call = row["name"], row["call"]
    ratio = f"B/A {row['ratio']:.3f}x" if row["ratio"] is not None else ""
    if call == "no data":
        return f"{name}: no rate in {'A' if row['a'] is None else 'B'} to diff."
    if call == "noise unknown":
        missing = " and ".join(side for side in ("A", "B") if not row[f"{side.lower()}_trials"])
        return (f"{name}: {ratio}; {missing} kept no per-trial rates (a report written before they were), so the "
                "noise is unknown and no change is called.")
    if call == "too few trials":
        return (f"{name}: {ratio} from {_trials_text(row)}: too few trials to tell a change from noise "
                f"({MIN_TRIALS_A_SIDE} a side are needed).")
    if call == "not comparable":
        against = f", {row['estimate']:.3f}x against the control {control}" if row["basis"] == "against control" \
            else ""
        return f"{name}: {ratio}{against}; not called: no drift between two processes is measured {device_words(kind)}."
    interval = diff_interval_text(row)
    if call == "control":
        judged = ", and the others are judged against it" if kind in PROCESS_DRIFT else ""
        return f"{name} is the control: its {ratio} ({interval}) is the drift between the two runs{judged}."
    if row["basis"] == "against control":
        judged = (f"{name}: {ratio}, {row['estimate']:.3f}x against the control {control} ({interval}, widened by "
                  f"the {drift_words(row['allowance'])} a control leaves between processes {device_words(kind)})")
    else:
        judged = (f"{name}: {ratio} ({interval}, widened by the {drift_words(row['allowance'])} that two processes "
                  f"of the same settings differ by {device_words(kind)})")
    if call in ("faster", "slower"):
        return f"{judged}: {call} in B."
    return f"{judged}: within noise, no change shown."


def diff_interval_text(row: dict[str, Any]) -> str:
    """The interval a row was judged by, as the CLI and the page show it ("-" where there is none)."""
    if row["interval_used"] is None:
        return "-"
    low, high = row["interval_used"]
    against = " of the ratio to the control" if row["basis"] == "against control" else ""
    return f"{row['confidence']:.0%} interval{against} {low:.3f}-{high:.3f}x"


def _trials_text(row: dict[str, Any]) -> str:
    counts = [row["a_trials"], row["b_trials"]]
    if counts[0] == counts[1]:
        return f"{counts[0]} trial{'s' if counts[0] != 1 else ''} a side"
    return f"{counts[0]} trial{'s' if counts[0] != 1 else ''} in A and {counts[1]} in B"


def _judged_note(control: str | None, no_control: str | None, differs: list[str], kind: str | None,
                 drift: ProcessDrift | None, shared: list[str], unmeasured: str | None) -> str:
    """How the contestants were judged, in one sentence."""
    if drift is None:
        judged = f"Control: {control}; its B/A is the drift between the two runs. " if control else ""
        return f"{judged}No change from A to B is called: {unmeasured}."
    if control is not None:
        what = "the settings are the same" if not differs else \
            f"{', '.join(clip(d, 40) for d in differs)} cannot change it"
        apart = [name for name in shared if name not in SHARE_THE_CONTROLS_SETUP]
        rest = f"; {', '.join(apart)}, with a decode path of its own, by the {drift_words(drift.rates)} that two " \
            f"processes of the same settings differ by {device_words(kind)}" if apart else ""
        return (f"Control: {control} ({what}); its B/A is the drift between the two runs, and each other loop is "
                f"judged by its ratio to {control}, trial by trial{rest}.")
    return (f"No control: {no_control}. Two processes of the same settings differ by up to "
            f"{drift_words(drift.rates, up_to=True)} {device_words(kind)}, so each interval is widened by that much.")


def _verdict_facts(report: dict[str, Any]) -> dict[str, Any] | None:
    verdict = report.get("verdict")
    if not isinstance(verdict, dict) or not number_or_none(verdict.get("ratio")):
        return None
    return {"ratio": verdict["ratio"], "call": clip(verdict.get("call"), 20),
            "noise": number_or_none(verdict.get("noise")), "evidence": verdict_evidence(verdict)}


def verdict_evidence(verdict: dict[str, Any]) -> str | None:
    """A run's verdict's noise as the run printed it (core.measure.stats.verdict_sentence): its interval ("99%
    interval 0.805-1.202x"); for a verdict written before intervals, its ±noise; None without either."""
    interval, confidence = verdict.get("interval"), number_or_none(verdict.get("confidence")) or VERDICT_CONFIDENCE
    if isinstance(interval, list | tuple) and len(interval) == 2 and all(number_or_none(v) for v in interval):
        return f"{confidence:.0%} interval {interval[0]:.3f}-{interval[1]:.3f}x"
    noise = number_or_none(verdict.get("noise"))
    return plus_minus(noise) if noise is not None else None


def diff_text(result: dict[str, Any]) -> str:
    """diff_reports' result as plain text: the two runs, the settings that differ, the rates, the waits. Every text
    from the reports has its control characters written out (core.text.escaped)."""
    result = _escaped_texts(result)
    lines = [f"{key.upper()}: {_run_line(result[key])}" for key in ("a", "b")]
    differing = [row for row in result["settings"] if row["differs"]]
    if differing:
        width = max(len(row["name"]) for row in differing)
        lines.append("settings that differ (A -> B):")
        lines += [f"  {row['name']:<{width}}  {_shown(row['a'])} -> {_shown(row['b'])}" for row in differing]
    else:
        lines.append("settings: the same in both runs")
    rows = result["contestants"]
    if rows:
        lines.append(f"{'contestant':<16} {'rate':>16} {'A':>9} {'B':>9} {'B/A':>7}  {'call':<14} interval judged by")
        for row in rows:
            label = "decode tok/s" if row["metric"] == "decode_tokens_per_s" else "end-to-end tok/s"
            lines.append(f"{row['name']:<16} {label:>16} {_fixed(row['a'], 1):>9} {_fixed(row['b'], 1):>9} "
                         f"{_times(row['ratio']):>7}  {row['call']:<14} {diff_interval_text(row)}")
        lines += _waits_lines(rows)
    for key, side in (("only_in_a", "A"), ("only_in_b", "B")):
        if result[key]:
            lines.append(f"only in {side}: {', '.join(result[key])}")
    verdicts = result["verdicts"]
    if verdicts["a"] or verdicts["b"]:
        lines.append("each run's own verdict, pipelined/naive: " + "; ".join(
            f"{side} {_verdict_text(verdicts[side.lower()])}" for side in ("A", "B")))
    lines.append(result["note"])
    lines += [f"  {row['sentence']}" for row in rows]
    return "\n".join(lines)


def _escaped_texts(value: Any) -> Any:
    """`value` with every string in it, at any depth, `escaped`."""
    if isinstance(value, str):
        return escaped(value)
    if isinstance(value, dict):
        return {key: _escaped_texts(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_escaped_texts(item) for item in value]
    return value


def _run_line(facts: dict[str, Any]) -> str:
    cut = ", cut short" if facts["interrupted"] else ""
    return f"{facts['model'] or '?'} on {facts['device'] or '?'}, created {facts['created'] or '?'}{cut}"


def _waits_lines(rows: list[dict[str, Any]]) -> list[str]:
    keys = [key for key in ("host_wait_ms", "device_idle_ms")
            if any(row[side][key] is not None for row in rows for side in ("a_waits", "b_waits"))]
    if not keys:
        return []
    shown = [row for row in rows if any(row[side][key] is not None for side in ("a_waits", "b_waits") for key in keys)]
    titles = {"host_wait_ms": "host wait", "device_idle_ms": "device idle"}
    lines = ["per decode step, A -> B:  " + f"{'contestant':<16}" + "".join(f" {titles[k]:>21}" for k in keys)]
    for row in shown:
        cells = "".join(f" {duration(row['a_waits'][k]) + ' -> ' + duration(row['b_waits'][k]):>21}" for k in keys)
        lines.append(f"{'':<26}{row['name']:<16}{cells}")
    return lines


def _verdict_text(verdict: dict[str, Any] | None) -> str:
    if not verdict:
        return "none"
    evidence = f", {verdict['evidence']}" if verdict.get("evidence") else ""
    return f"{verdict['ratio']:.2f}x ({verdict['call']}{evidence})"


def _shown(value: Any) -> str:
    return "-" if value is None else str(value)


def _fixed(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.3f}x"
