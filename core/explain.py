"""A report read in plain words, and two reports side by side. Torch-free: the page, Replay and the CLI use it.

- `what_this_run_shows(report)`: two to four sentences from the report's own numbers (docs/MEASUREMENT.md says what
  each is): where the host waited per decode step and at which line, where the device idled, what the pipelined
  loop removed, and the decode ratio against this run's noise; on the CPU, why no difference is expected.
- `compare_reports(a, b)` and `compare_text(result)`: the settings that differ, each contestant's rate in both runs
  with its ratio b/a, an interval on it (against a control contestant where the settings allow one, else widened by
  the drift between two processes: docs/MEASUREMENT.md, "Comparing two runs") and the call, and the per-step waits
  side by side (`python -m core.bench --compare A.json B.json`).
"""

from __future__ import annotations

import math
import os
import re
import statistics
from typing import Any

from core.measure.drift import ProcessDrift, device_words, drift_between, drift_words
from core.measure.stats import (
    HOST_CLOCK_CONFIDENCE,
    MIN_EFFECT,
    MIN_TRIALS_FOR_A_CALL,
    VERDICT_CONFIDENCE,
    welch_ratio_interval,
    widened,
)
from core.measure.waits import WAIT_KEYS, step_work_ms, trial_waits
from core.options import (
    ALL_LOOPS,
    APPEND_IN_ATTENTION_CHOICES,
    APPEND_IN_ATTENTION_ENV,
    NO_CHECK,
    OPTIONS,
    PIPELINED_AGAIN,
    RUN_OPTION,
    RUN_OPTIONS,
    TP_BARRIER_CHOICES,
    TP_BARRIER_ENV,
)
from core.phases import phase_named
from core.report_schema import upgrade_report

FIELD_CHARS = 120  # the most of any text taken from a report that a sentence repeats (a file can hold anything)

# How a read of each sync-audit kind is named in a sentence (core.measure.sync_audit.KINDS says what each is).
READ_NAMES = {
    "item": "`.item()`", "bool": "`bool()`", "tolist": "`.tolist()`", "copy": "a blocking copy to the host",
    "h2d-copy": "a blocking copy to the device",
    "pageable-copy": "a non_blocking copy into pageable memory", "print": "printing a tensor",
    "nonzero": "`nonzero()`", "masked-index": "masked indexing", "equal": "`torch.equal()`",
    "scalar": "a tensor built from device scalars", "synchronize": "`torch.cuda.synchronize()`",
    "event-synchronize": "`Event.synchronize()`", "stream-synchronize": "`Stream.synchronize()`",
    "sync": "a synchronizing operation",
}


# --------------------------------------------------------------------------------------------- one run in words

def what_this_run_shows(report: dict[str, Any]) -> list[str]:
    """Two to four plain sentences on what the report's numbers show (no Markdown beyond `code` quotes). Any report,
    old ones too (core.report_schema.upgrade_report)."""
    report = upgrade_report(report)
    summary = report["summary"]
    if not {"naive", "pipelined"} <= set(summary):
        return _other_contestants(report)
    sentences = _on_the_cpu(report) if report_device_type(report) == "cpu" else _on_a_device(report)
    sentences.append(_verdict_sentence(report))
    return sentences


def _on_a_device(report: dict[str, Any]) -> list[str]:
    """Where the naive loop's host waited and the device idled, and what the pipelined loop changed."""
    device = "the GPU" if report_device_type(report) == "cuda" else "the device"
    naive, pipelined = contestant_waits(report, "naive"), contestant_waits(report, "pipelined")
    sentences = [_naive_wait_sentence(report, naive["host_wait_ms"])]
    idle = naive["device_idle_ms"]
    if idle is not None:
        parts = _idle_parts(naive)
        sentences.append(f"{device[0].upper()}{device[1:]} then idled {duration(idle)} per step waiting for the "
                         f"next launch{parts}.")
    pipelined_sentence = _pipelined_sentence(report, pipelined, idle, device)
    return [*sentences, pipelined_sentence] if pipelined_sentence else sentences


def _naive_wait_sentence(report: dict[str, Any], host_wait_ms: float | None) -> str:
    site = top_site(report, "naive")
    waited = f"waited {duration(host_wait_ms)} per step" if host_wait_ms is not None else "waited"
    if site:
        return f"naive {waited} in {site['read']} at {site['where']} ({_per_step(site['per_step'], 'read')})."
    if report["request"].get("audit"):
        return f"naive {waited} for each step's tokens; the sync audit found no read inside its decode steps."
    if host_wait_ms is None:
        return ("This report has no per-step timestamps, so it cannot say where the host waited (it was written "
                "before reports kept them).")
    return f"naive {waited} for each step's tokens (`--audit` names the line that waits)."


def _per_step(count: float, noun: str) -> str:
    return f"{count:.2f} {noun}{'' if round(count, 2) == 1 else 's'} per step"


def _times_per_step(count: float) -> str:
    return "once per step" if round(count, 2) == 1 else f"{count:.2f} times per step"


def _idle_parts(waits: dict[str, float | None]) -> str:
    gap, inside = waits["device_gap_ms"], waits["idle_inside_ms"]
    if gap is None or inside is None:
        return ""
    return f" ({duration(gap)} between steps, {duration(inside)} inside a step before its work was launched)"


def _pipelined_sentence(report: dict[str, Any], waits: dict[str, float | None], naive_idle: float | None,
                        device: str) -> str | None:
    """What the pipelined loop read and waited for, and the device idle left; None where the report cannot say."""
    reads = report["summary"]["pipelined"].get("reads_per_step")
    lag = int(report["request"].get("options", {}).get("lag") or 1)
    said = []
    if reads is not None:
        said.append("read nothing from the device in its decode steps" if reads == 0 else
                    f"read {reads:.2f} values per decode step")
    if waits["host_wait_ms"] is not None:
        said.append(f"waited {duration(waits['host_wait_ms'])} per step for a step it had queued {lag} "
                    f"step{'s' if lag != 1 else ''} earlier, while {device} worked on the next")
    idle = waits["device_idle_ms"]
    if idle is None:
        return f"pipelined {' and '.join(said)}." if said else None
    effect = f"{device} idled {duration(idle)} per step"
    if naive_idle is not None:
        effect += f", {duration(naive_idle - idle)} less than with naive" if idle < naive_idle else \
            f", no less than with naive ({duration(naive_idle)})"
    return f"pipelined {' and '.join(said)}, so {effect}." if said else f"With pipelined {effect}."


def _on_the_cpu(report: dict[str, Any]) -> list[str]:
    sentences = ["On the CPU no difference between the loops is expected: the CPU runs each op as it is queued, so "
                 "there is no device to keep busy and nothing for the pipelined loop to overlap."]
    site = top_site(report, "naive")
    waited = contestant_waits(report, "naive")["host_wait_ms"]
    waited_text = f" (its host waited {duration(waited)} per step)" if waited is not None else ""
    if site:
        sentences.append(f"naive read its stop flag with {site['read']} at {site['where']} "
                         f"{_times_per_step(site['per_step'])}, which costs nothing here{waited_text} but would "
                         "block the host on a GPU.")
    elif waited is not None:
        sentences.append(f"naive's host waited {duration(waited)} per step for its tokens, the time the read takes "
                         "once the step is computed; on a GPU it would wait for the device.")
    return sentences


def _verdict_sentence(report: dict[str, Any]) -> str:
    verdict = report["verdict"] or {}  # None: written without both loops, or before verdicts
    ratio, call = verdict.get("ratio"), verdict.get("call")
    what = "decode rate" if verdict.get("metric", "decode_tokens_per_s") == "decode_tokens_per_s" else "rate"
    cut = _cut_short(report)
    if not ratio:
        ratios = report["ratios"]
        key = next((k for k in ("decode pipelined/naive", "pipelined/naive") if _number(ratios.get(k))), None)
        if key is None:
            return f"There is no pipelined/naive ratio in this report{cut}."
        what = "decode rate" if key.startswith("decode") else "end-to-end rate"
        return (f"The {what}: pipelined/naive {ratios[key]:.2f}x, with no verdict on the noise (the report was "
                f"written before verdicts){cut}.")
    text = f"The {what}: pipelined/naive {ratio:.2f}x"
    noise_text = f" ({_verdict_evidence(verdict)})" if _verdict_evidence(verdict) else ""
    on_cpu = report_device_type(report) == "cpu"
    if call in ("faster", "slower"):
        text += f", {call}, beyond this run's noise{noise_text}"
        if on_cpu:
            text += "; on the CPU that is not a wait the pipelined loop avoids (an A/A control, `--aa`, shows this " \
                    "machine's own drift)"
    elif call == "within-noise":
        text += f", within this run's noise{noise_text}: no difference shown" + (", as expected" if on_cpu else "")
    elif call == "too-few-trials":
        text += f" from {verdict.get('trials')} trial(s), too few to tell from noise (use 3 or more)"
    return f"{text}{cut}."


def _verdict_evidence(verdict: dict[str, Any]) -> str:
    """What decided the verdict, as the sentence quotes it: its interval (the rule of core.measure.stats), or, in a
    report written before intervals, the noise that rule used."""
    interval, confidence = verdict.get("interval"), _number(verdict.get("confidence"))
    if isinstance(interval, list) and len(interval) == 2 and all(_number(v) for v in interval):
        level = f"{confidence:.0%} " if confidence else ""
        return f"{level}interval {interval[0]:.2f}-{interval[1]:.2f}x"
    noise = _number(verdict.get("noise"))
    return plus_minus(noise) if noise is not None else ""


def _cut_short(report: dict[str, Any]) -> str:
    """The clause that ends the last sentence of an interrupted report's explanation."""
    if not report.get("interrupted"):
        return ""
    facts = report["interruption"]
    done, planned, phase = facts.get("trials_done"), facts.get("trials_planned"), phase_named(facts.get("phase"))
    if phase is not None and phase.after_trials:
        return f"; the run was cut short in its {phase.noun}, after every round of trials"
    if isinstance(done, int) and isinstance(planned, int):
        return f"; the run was cut short after {done} of {planned} rounds of trials"
    return "; the run was cut short"


def _other_contestants(report: dict[str, Any]) -> list[str]:
    """A report without both loops (an A/A control alone, generate() alone): its rates and ratios."""
    summary = report["summary"]
    rates = [f"{name} {_rate_text(s)}" for name, s in summary.items() if isinstance(s, dict)]
    sentences = [f"This run timed {', '.join(rates)}." if rates else "This report holds no measured contestant."]
    ratios = [f"{name} {value:.2f}x" for name, value in report["ratios"].items()
              if isinstance(value, int | float)]
    sentences.append(f"Its ratios: {', '.join(ratios)}{_cut_short(report)}." if ratios else
                     f"Without both the naive and the pipelined loop it has no verdict{_cut_short(report)}.")
    return sentences


def _rate_text(s: dict[str, Any]) -> str:
    metric, label = rate_metric(s)
    return f"at {s[metric]:.1f} {label}" if metric else "with no rate"


# ------------------------------------------------------------------------------------------- report facts

def contestant_waits(report: dict[str, Any], name: str) -> dict[str, float | None]:
    """A contestant's per-step waits in ms (core.measure.waits.WAIT_KEYS): the summary's, or for a report written
    before the summary had them, from its trials' timestamps. Any report, old ones too."""
    report = upgrade_report(report)
    summary = report["summary"].get(name, {})
    if "device_idle_ms_per_step" in summary or "host_wait_ms_per_step" in summary:
        return {key: _number(summary.get(f"{key}_per_step")) for key in WAIT_KEYS}
    runs = [r for r in report["runs"] if isinstance(r, dict) and isinstance(r.get("timings"), dict)]
    try:
        loops = [[r for r in runs if r.get("contestant") == loop] for loop in ALL_LOOPS]
        work_ms, _ = step_work_ms([group for group in loops if group])
        return trial_waits([r for r in runs if r.get("contestant") == name], work_ms)
    except (TypeError, ValueError, KeyError, IndexError, statistics.StatisticsError):
        return dict.fromkeys(WAIT_KEYS)


def top_site(report: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The sync audit's most frequent read inside `name`'s decode steps: {read, where, per_step}, or None."""
    report = upgrade_report(report)
    audit = report["sync_audit"].get(name, {}) if "sync_audit" in report else {}
    sites = [s for s in audit.get("sites") or [] if isinstance(s, dict) and _number(s.get("per_step"))
             and s.get("in_decode_steps")]
    if not sites:
        return None
    site = max(sites, key=lambda s: s["per_step"])
    kind = str(site.get("kind", "sync")).split("/")[0]
    return {"read": READ_NAMES.get(kind, f"a read ({clipped(kind, 30)})"),
            "where": f"{short_path(site.get('file'))}:{site.get('line')}", "per_step": float(site["per_step"])}


def short_path(path: Any) -> str:
    """A site's file as a reader finds it: from its package (transformers/...) where it lies in an installed one."""
    text = str(path or "?")
    for marker in ("site-packages/", "dist-packages/"):
        if marker in text:
            text = text.rsplit(marker, 1)[1]
    if os.path.isabs(text):
        text = "/".join(text.split("/")[-3:]) if "transformers/" not in text else \
            "transformers/" + text.rsplit("transformers/", 1)[1]
    return clipped(text, FIELD_CHARS)


def rate_metric(s: dict[str, Any]) -> tuple[str | None, str]:
    """The key of a contestant summary's headline rate and its label: the decode rate where it has one."""
    if _number(s.get("decode_tokens_per_s")):
        return "decode_tokens_per_s", "decode tok/s"
    if _number(s.get("tokens_per_s")):
        return "tokens_per_s", "end-to-end tok/s"
    return None, ""


def report_device_type(report: dict[str, Any]) -> str | None:
    """"cuda" or "cpu" where a report says where it ran (its environment), else None."""
    env = upgrade_report(report)["environment"]
    device = env.get("device")
    if env.get("gpu") or (isinstance(device, str) and device.startswith("cuda")):
        return "cuda"
    return "cpu" if isinstance(device, str) and device.startswith("cpu") else None


# ------------------------------------------------------------------------------------------- two runs

COMPARED_REQUEST = ("trials", "contestants", "min_seconds", "deterministic", "audit", "no_kernel_trial", "stream")
COMPARED_ENVIRONMENT = ("gpu", "device", "dtype", "tp", "tp_all_reduce", "decode_attention", "fused_projections",
                        "pdl", "inductor_options", "torch", "transformers", "python")
# Tuning variables whose effect the environment does not record: read from the reproduce command, where an unset one
# is its first choice (options.env_choice).
COMMAND_ENVIRONMENT = {APPEND_IN_ATTENTION_ENV: APPEND_IN_ATTENTION_CHOICES, TP_BARRIER_ENV: TP_BARRIER_CHOICES}
CONTROL_CANDIDATES = ("naive", NO_CHECK)  # in this order: the contestants a control may be
# The contestants that share the control's decode setup (compiled forward, cache, step graph) in a process, so that
# what moves one between processes moves the others alike; generate() has its own.
SHARE_THE_CONTROLS_SETUP = (*ALL_LOOPS, PIPELINED_AGAIN)
MIN_TRIALS_A_SIDE = MIN_TRIALS_FOR_A_CALL
CALLS = ("faster", "slower", "within noise", "control", "too few trials", "noise unknown", "no data")


def compare_reports(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two reports side by side: what differs between their settings, and each contestant's rate in both, judged
    with an interval on B / A (docs/MEASUREMENT.md, "Comparing two runs").

    Returns a dict with:
      - "a", "b": each run's facts: model, device (the GPU's name, else the device), created, command, interrupted;
      - "settings": one row per setting, in a fixed order: {"name", "a", "b", "differs"} (the model, the device,
        dtype and versions from "environment", the tuning variables the command set, every run option from
        "request.options", the request's trials, contestants, audit ...; what a loop ran with where the device
        changed it, as "ran <option>");
      - "differs": the names of the settings that differ;
      - "control": the contestant the differing settings cannot change (core.options.RunOption.affects), whose B / A
        is the drift between the two runs, or None; "no_control": why there is none (None when there is one);
      - "drift": {"device" ("cuda", "cpu" or None), "rates", "against_control", "measured"}: the drift between two
        processes of the same settings on that device kind (core.measure.drift.PROCESS_DRIFT);
      - "note": one sentence on how the contestants were judged (the control, or the drift allowance);
      - "contestants": per contestant in both runs, in a's order: {"name", "metric" (decode_tokens_per_s where both
        have it, else tokens_per_s), "a", "b" (the medians), "ratio" (b / a of the medians), "a_trials",
        "b_trials", "control" (True for the control's row), "basis" ("control", "against control", "drift
        allowance", or None where there was no interval), "estimate" (the geometric-mean ratio the interval is
        around: of the contestant's rate over the control's where judged against the control, else of its rate),
        "interval" ([low, high], the Welch t interval at "confidence"), "interval_used" (what the call was judged
        by: the interval widened by "allowance", the drift the basis leaves), "confidence", "allowance", "call"
        (one of CALLS), "sentence" (what the CLI and the page say of it), "a_waits", "b_waits" (per-step waits
        in ms: core.measure.waits.WAIT_KEYS)};
      - "only_in_a", "only_in_b": contestants that ran in one report only;
      - "verdicts": {"a": ..., "b": ...}: each run's own pipelined/naive verdict (ratio, call, noise) or None.

    Any reports, old ones too (core.report_schema.upgrade_report).
    """
    a, b = upgrade_report(a), upgrade_report(b)
    names_a, names_b = list(a["summary"]), list(b["summary"])
    shared = [name for name in names_a if name in names_b]
    settings = _settings_rows(a, b)
    differs = [row["name"] for row in settings if row["differs"]]
    kind, drift = drift_between(a["environment"], b["environment"])
    control, no_control = _control(a, b, differs, shared)
    judge = _Judge(a, b, control, drift, kind)
    return {
        "a": _run_facts(a), "b": _run_facts(b), "settings": settings, "differs": differs,
        "control": control, "no_control": no_control,
        "drift": {"device": kind, "rates": drift.rates, "against_control": drift.against_control,
                  "measured": drift.measured},
        "note": _judged_note(control, no_control, differs, kind, drift, shared),
        "contestants": [judge.row(name) for name in shared],
        "only_in_a": [n for n in names_a if n not in names_b], "only_in_b": [n for n in names_b if n not in names_a],
        "verdicts": {"a": _verdict_facts(a), "b": _verdict_facts(b)},
    }


def _run_facts(report: dict[str, Any]) -> dict[str, Any]:
    env = report["environment"]
    return {"model": clipped(report["model"].get("spec"), FIELD_CHARS),
            "device": clipped(env.get("gpu") or env.get("device"), FIELD_CHARS),
            "created": clipped(report.get("created"), 40), "command": clipped(report.get("command"), 2000),
            "interrupted": bool(report.get("interrupted"))}


def compared_settings(report: dict[str, Any]) -> dict[str, Any]:
    """Every setting compare_reports compares, by name: two reports with equal values ran the same settings. Any
    report, old ones too."""
    report = upgrade_report(report)
    request, env = report["request"], report["environment"]
    options = request.get("options", {})
    values: dict[str, Any] = {"model": report.get("model", {}).get("spec"), "prompt": request.get("prompt")}
    values.update({key: env.get(key) for key in COMPARED_ENVIRONMENT})
    values.update(_command_environment(report.get("command")))
    values.update({key: value for key, value in options.items() if key != "loop"})
    if options:  # an option added after the report was written: the run had what its default does
        values.update({o.name: o.default for o in RUN_OPTIONS if o.part == OPTIONS and o.name not in options})
    values.update({key: request.get(key) for key in COMPARED_REQUEST})
    ran = _loop_ran(report)
    values.update({f"ran {key}": ran.get(key) for key in ("cache", "compile", "streams") if key in ran})
    return values


def _command_environment(command: Any) -> dict[str, str | None]:
    """COMMAND_ENVIRONMENT's variables as the reproduce command set them (None for all without a command)."""
    if not isinstance(command, str):
        return dict.fromkeys(COMMAND_ENVIRONMENT)
    assigned = {}
    for word in command.split(" "):  # cli_command puts each assignment before "python", one word each
        name, equals, value = word.partition("=")
        if not equals or not re.fullmatch(r"[A-Z][A-Z0-9_]*", name):
            break
        assigned[name] = value
    return {name: assigned.get(name, choices[0]) for name, choices in COMMAND_ENVIRONMENT.items()}


def _loop_ran(report: dict[str, Any]) -> dict[str, Any]:
    effective = report["effective"] or {}  # None: a report from before it recorded what ran
    return next((effective[name]["options"] for name in (*ALL_LOOPS, NO_CHECK) if name in effective), {})


def _settings_rows(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    left, right = compared_settings(a), compared_settings(b)
    rows = []
    for name in dict.fromkeys([*left, *right]):
        x, y = left.get(name), right.get(name)
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
    text = f"{len(first)} token ids" if isinstance(first, list) else repr(clipped(first, 60))
    return f"{len(rows)} rows, each {text}" if len(rows) > 1 else text


def _setting_value(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return clipped(", ".join(str(v) for v in value), FIELD_CHARS)
    if isinstance(value, str):
        return clipped(value, FIELD_CHARS)
    return value if isinstance(value, int | float | bool) or value is None else clipped(value, FIELD_CHARS)


def _control(a: dict[str, Any], b: dict[str, Any], differs: list[str],
             shared: list[str]) -> tuple[str | None, str | None]:
    """The contestant that no differing setting can change, and None; or None and why there is none."""
    affected: set[str] = set()
    for name in differs:
        option = RUN_OPTION.get(name.removeprefix("ran "))
        if option is None or not option.affects:
            return None, f"{clipped(name, 40)} differs, which can change every contestant"
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
    """Lag also sizes every loop's static cache (core.options.static_cache_length): why that breaks the control, or
    None where both runs' caches held as many keys (or neither was static)."""
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
    both_decode = all(_number(r["summary"].get(name, {}).get("decode_tokens_per_s")) for r in (a, b))
    return "decode_tokens_per_s" if both_decode else "tokens_per_s"


def _trial_rates(report: dict[str, Any], name: str, metric: str) -> dict[int, float]:
    """A contestant's rate in each of its trials, by trial number (a report without per-trial runs has none)."""
    rates = {}
    for index, run in enumerate(r for r in report["runs"] if isinstance(r, dict)
                                and r.get("contestant") == name and isinstance(r.get("timings"), dict)):
        value = _number(run["timings"].get(metric))
        trial = run.get("trial")
        if value and value > 0:
            rates[trial if isinstance(trial, int) and not isinstance(trial, bool) else index] = value
    return rates


def _host_clock(report: dict[str, Any], names: tuple[str, ...]) -> bool:
    return any(isinstance(r, dict) and r.get("contestant") in names and isinstance(r.get("timings"), dict)
               and r["timings"].get("clock") == "host" for r in report["runs"])


class _Judge:
    """Each contestant's row: its rates in both runs, an interval on B / A, and the call."""

    def __init__(self, a: dict[str, Any], b: dict[str, Any], control: str | None, drift: ProcessDrift,
                 kind: str | None):
        self.a, self.b, self.control, self.drift, self.kind = a, b, control, drift, kind

    def row(self, name: str) -> dict[str, Any]:
        a, b = self.a, self.b
        metric = _metric(a, b, name)
        rate_a, rate_b = (_number(r["summary"].get(name, {}).get(metric)) for r in (a, b))
        trials_a, trials_b = _trial_rates(a, name, metric), _trial_rates(b, name, metric)
        row: dict[str, Any] = {
            "name": name, "metric": metric, "a": rate_a, "b": rate_b,
            "ratio": rate_b / rate_a if rate_a and rate_b else None, "a_trials": len(trials_a),
            "b_trials": len(trials_b), "control": name == self.control, "basis": None, "estimate": None,
            "interval": None, "interval_used": None, "confidence": None, "allowance": None,
            "a_waits": contestant_waits(a, name), "b_waits": contestant_waits(b, name)}
        row["call"] = self._judged(row, name, trials_a, trials_b)
        row["sentence"] = compare_sentence(row, self.control, self.kind)
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
            row["allowance"] = 0.0 if row["control"] else self.drift.rates
        else:
            logs = [self._against_control(r, name, row["metric"]) for r in (self.a, self.b)]
            if min(len(values) for values in logs) < MIN_TRIALS_A_SIDE:
                return "too few trials"
            row["basis"], row["allowance"] = "against control", self.drift.against_control
        estimate, low, high = welch_ratio_interval(*logs, confidence=row["confidence"])
        row["estimate"], row["interval"] = estimate, [low, high]
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


def compare_sentence(row: dict[str, Any], control: str | None, kind: str | None) -> str:
    """One sentence on a contestant of two runs: its B / A, the interval it was judged by, and the call."""
    name, call = row["name"], row["call"]
    ratio = f"B/A {row['ratio']:.3f}x" if row["ratio"] is not None else ""
    if call == "no data":
        return f"{name}: no rate in {'A' if row['a'] is None else 'B'} to compare."
    if call == "noise unknown":
        missing = " and ".join(side for side in ("A", "B") if not row[f"{side.lower()}_trials"])
        return (f"{name}: {ratio}; {missing} kept no per-trial rates (a report written before they were), so the "
                "noise is unknown and no change is called.")
    if call == "too few trials":
        return (f"{name}: {ratio} from {_trials_text(row)}: too few trials to tell a change from noise "
                f"({MIN_TRIALS_A_SIDE} a side are needed).")
    interval = compare_interval_text(row)
    if call == "control":
        return (f"{name} is the control: its {ratio} ({interval}) is the drift between the two runs, and the others "
                "are judged against it.")
    if row["basis"] == "against control":
        judged = (f"{name}: {ratio}, {row['estimate']:.3f}x against the control {control} ({interval}, widened by "
                  f"the {drift_words(row['allowance'])} a control leaves between processes {device_words(kind)})")
    else:
        judged = (f"{name}: {ratio} ({interval}, widened by the {drift_words(row['allowance'])} that two processes "
                  f"of the same settings differ by {device_words(kind)})")
    if call in ("faster", "slower"):
        return f"{judged}: {call} in B."
    return f"{judged}: within noise, no change shown."


def compare_interval_text(row: dict[str, Any]) -> str:
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
                 drift: ProcessDrift, shared: list[str]) -> str:
    """How the contestants were judged, in one sentence."""
    if control is not None:
        what = "the settings are the same" if not differs else \
            f"{', '.join(clipped(d, 40) for d in differs)} cannot change it"
        apart = [name for name in shared if name not in SHARE_THE_CONTROLS_SETUP]
        rest = f"; {', '.join(apart)}, with a decode path of its own, by the {drift_words(drift.rates)} that two " \
            f"processes of the same settings differ by {device_words(kind)}" if apart else ""
        return (f"Control: {control} ({what}); its B/A is the drift between the two runs, and each other loop is "
                f"judged by its ratio to {control}, trial by trial{rest}.")
    return (f"No control: {no_control}. Two processes of the same settings differ by up to "
            f"{drift_words(drift.rates, up_to=True)} {device_words(kind)}, so each interval is widened by that much.")


def _verdict_facts(report: dict[str, Any]) -> dict[str, Any] | None:
    verdict = report.get("verdict")
    if not isinstance(verdict, dict) or not _number(verdict.get("ratio")):
        return None
    return {"ratio": verdict["ratio"], "call": clipped(verdict.get("call"), 20), "noise": _number(verdict.get("noise"))}


def compare_text(result: dict[str, Any]) -> str:
    """compare_reports' result as plain text: the two runs, the settings that differ, the rates, the waits."""
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
                         f"{_times(row['ratio']):>7}  {row['call']:<14} {compare_interval_text(row)}")
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
    noise = f", {plus_minus(verdict['noise'])}" if verdict.get("noise") is not None else ""
    return f"{verdict['ratio']:.2f}x ({verdict['call']}{noise})"


# ------------------------------------------------------------------------------------------- numbers as words

def duration(ms: float | None) -> str:
    """A time in the unit a reader expects: µs under a millisecond, then ms with three significant digits."""
    if ms is None:
        return "-"
    if abs(ms) < 0.01:
        return f"{ms * 1000:.1f} µs"
    if abs(ms) < 1:
        return f"{ms * 1000:.0f} µs"
    if abs(ms) < 10:
        return f"{ms:.2f} ms"
    return f"{ms:.1f} ms" if abs(ms) < 100 else f"{ms:,.0f} ms"


def plus_minus(fraction: float) -> str:
    """A noise as ±percent: two significant digits under 10%."""
    if fraction < 0.01:
        return f"±{fraction:.2%}"
    return f"±{fraction:.1%}" if fraction < 0.1 else f"±{fraction:.0%}"


def clipped(value: Any, limit: int) -> str:
    """Text from a report, at most `limit` characters (a file can hold a field of any size)."""
    text = "" if value is None else str(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return None
    return float(value)


def _shown(value: Any) -> str:
    return "-" if value is None else str(value)


def _fixed(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.3f}x"
