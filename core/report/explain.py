"""A report read in plain words. Torch-free: the page, Replay and the CLI use it.

`what_this_run_shows(report)`: two to four sentences from the report's own numbers (docs/MEASUREMENT.md says what
each is): where the host waited per decode step and at which line, where the device idled, what the pipelined loop
removed, and the decode ratio against this run's noise; on the CPU, why no difference is expected. The facts the
sentences and the page share (a contestant's waits, the audit's top site, the device kind) and numbers as words are
here too; two reports side by side are core.report.diff's.
"""

from __future__ import annotations

import statistics
from typing import Any

from core.documents.upgrades import upgrade_report
from core.measure.waits import WAIT_KEYS, step_work_ms, trial_waits
from core.phases import phase_named
from core.request.options import (
    ALL_LOOPS,
)
from core.text import clip, shown_path

# How a read of each sync-audit kind is named in a sentence (core.audit.sync.KINDS says what each is).
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
    old ones too (core.documents.upgrades.upgrade_report)."""
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
        key = next((k for k in ("decode pipelined/naive", "pipelined/naive") if number_or_none(ratios.get(k))), None)
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
    interval, confidence = verdict.get("interval"), number_or_none(verdict.get("confidence"))
    if isinstance(interval, list) and len(interval) == 2 and all(number_or_none(v) for v in interval):
        level = f"{confidence:.0%} " if confidence else ""
        return f"{level}interval {interval[0]:.2f}-{interval[1]:.2f}x"
    noise = number_or_none(verdict.get("noise"))
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
        return {key: number_or_none(summary.get(f"{key}_per_step")) for key in WAIT_KEYS}
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
    sites = [s for s in audit.get("sites") or [] if isinstance(s, dict) and number_or_none(s.get("per_step"))
             and s.get("in_decode_steps")]
    if not sites:
        return None
    site = max(sites, key=lambda s: s["per_step"])
    kind = str(site.get("kind", "sync")).split("/")[0]
    return {"read": READ_NAMES.get(kind, f"a read ({clip(kind, 30)})"),
            "where": f"{shown_path(site.get('file'))}:{site.get('line')}", "per_step": float(site["per_step"])}



def rate_metric(s: dict[str, Any]) -> tuple[str | None, str]:
    """The key of a contestant summary's headline rate and its label: the decode rate where it has one."""
    if number_or_none(s.get("decode_tokens_per_s")):
        return "decode_tokens_per_s", "decode tok/s"
    if number_or_none(s.get("tokens_per_s")):
        return "tokens_per_s", "end-to-end tok/s"
    return None, ""


def report_device_type(report: dict[str, Any]) -> str | None:
    """"cuda" or "cpu" where a report says where it ran (its environment), else None."""
    env = upgrade_report(report)["environment"]
    device = env.get("device")
    if env.get("gpu") or (isinstance(device, str) and device.startswith("cuda")):
        return "cuda"
    return "cpu" if isinstance(device, str) and device.startswith("cpu") else None


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



def number_or_none(value: Any) -> float | None:
    """A report's value as a float where it is a number (not a bool, not NaN), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return None
    return float(value)

