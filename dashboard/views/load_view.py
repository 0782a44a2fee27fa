"""A load report (`python -m core.bench --requests N --json`, core.documents.load_report.LoadReport) as the page
shows it, in plain data: its points, the contestants table of a point, the sweep's table and curves, each trial's
throughput, and the slots picture's bars. The Under load tab and Replay both draw from here, from the report dict alone.

The sentences (what the run shows, and the CLI's text) are core.load.words', made here from the report as the CLI
makes them (`sentences`); `findings_md` puts them on the page. No torch, gradio or plotly here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.documents.load_report import LoadReport
from core.load.words import NAMES, gain, load_findings, load_text, num, pair, pct, point_name, same
from core.request.options import NO_CHECK
from dashboard.views.report_text import plain

TABLE_HEADERS = ("contestant", "output tok/s", "requests/s", "TTFT p50 / p99 ms", "TPOT p50 / p99 ms", "decode steps",
                 "slot steps past a stop", "host wait µs/step", "device idle µs/step", "reads/step", "kernel-busy",
                 "same as solo", "trial spread")
TABLE_WIDTHS = ["150px", "85px", "85px", "105px", "105px", "75px", "85px", "85px", "85px", "75px", "75px", "70px",
                "70px"]  # 1150 px: the page's width at 1400 px
# the loops over core.load.slots: each request has its slot and steps
SLOTTED = ("naive", "naive-per-row", "pipelined", NO_CHECK)
MAX_BARS = 4000  # requests drawn per contestant in the slots picture (a report may hold many more)
SENTENCE_CHARS = 2000  # a finding names every point it is about: longer than a field of a report
# What a sentence raises on a report that passed the format checks but lacks what it reads (an older or hand-made file)
NOT_WORDED = (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError, AttributeError, OverflowError)


def section(report: dict[str, Any]) -> dict[str, Any]:
    return report["load"]


def name(contestant: str) -> str:
    return NAMES.get(contestant, contestant)


def point_names(report: dict[str, Any]) -> list[str]:
    """Each point's name, the main one first (as the report lists them)."""
    return [point_name(point) for point in section(report)["points"]]


def point_named(report: dict[str, Any], chosen: str | None) -> dict[str, Any]:
    """The point called `chosen` (point_name), or the main point."""
    points = section(report)["points"]
    return next((p for p in points if point_name(p) == chosen), points[0])


# ------------------------------------------------------------------------------------------------ tables

def contestant_rows(contestants: dict[str, dict[str, Any]]) -> list[list[str]]:
    """The contestants table of one point (TABLE_HEADERS): the CLI's table, with the trial spread beside it."""
    rows = []
    for contestant, entry in contestants.items():
        rows.append([name(contestant), num(entry.get("tokens_per_s")), num(entry.get("requests_per_s"), 2),
                     pair(entry.get("ttft_ms_p50"), entry.get("ttft_ms_p99")),
                     pair(entry.get("tpot_ms_p50"), entry.get("tpot_ms_p99"), 2),
                     num(entry.get("steps"), 0), num(entry.get("wasted_slot_steps"), 0),
                     num(entry.get("host_wait_us_per_step"), 0), num(entry.get("device_idle_us_per_step"), 0),
                     num(entry.get("reads_per_decode_step"), 2), pct(entry.get("kernel_busy_fraction")),
                     same(entry), pct(entry.get("spread"))])
    return rows


def sweep_headers(report: dict[str, Any]) -> list[str]:
    return ["point", *(f"{name(c)} tok/s" for c in _contestants(report)), "pipelined / naive"]


def sweep_rows(report: dict[str, Any]) -> list[list[str]]:
    """Each point's output tokens/s per contestant and the pipelined loop's gain over the naive one, by rate then B
    (the CLI's sweep table); none for a report of one point."""
    points = section(report)["points"]
    if len(points) < 2:
        return []
    names = _contestants(report)
    rows = []
    for point in sorted(points, key=lambda p: (p["rate"], p["slots"])):
        entries = point["contestants"]
        ratio = gain(entries)
        rows.append([point_name(point), *(num(entries[n]["tokens_per_s"]) if n in entries else "–" for n in names),
                     f"{ratio:.2f}x" if ratio else "–"])
    return rows


def _contestants(report: dict[str, Any]) -> list[str]:
    """Every contestant of any point, the main point's first."""
    names: dict[str, None] = {}
    for point in section(report)["points"]:
        names.update(dict.fromkeys(point["contestants"]))
    return list(names)


# ------------------------------------------------------------------------------------------------ charts' data

def sweep_series(report: dict[str, Any]) -> dict[str, Any]:
    """The sweep's curves: output tokens/s against B (the points at the main rate) and TTFT p99 against the rate (the
    points at the main B), per contestant, each sorted; a curve needs two points or more."""
    points = section(report)["points"]
    main = points[0]
    by_slots = sorted((p for p in points if p["rate"] == main["rate"]), key=lambda p: p["slots"])
    by_rate = sorted((p for p in points if p["slots"] == main["slots"]), key=lambda p: p["rate"])
    return {"main": {"slots": main["slots"], "rate": main["rate"]},
            "tokens_per_s_by_slots": _curves(by_slots, "slots", "tokens_per_s") if len(by_slots) > 1 else {},
            "ttft_p99_by_rate": _curves(by_rate, "rate", "ttft_ms_p99") if len(by_rate) > 1 else {}}


def _curves(points: list[dict[str, Any]], along: str, key: str) -> dict[str, dict[str, list[float]]]:
    curves: dict[str, dict[str, list[float]]] = {}
    for point in points:
        for contestant, entry in point["contestants"].items():
            value = entry.get(key)
            if value is None:  # the ceiling has no times of its tokens; transformers' loop has no steps
                continue
            curve = curves.setdefault(contestant, {"x": [], "y": []})
            curve["x"].append(point[along])
            curve["y"].append(value)
    return {c: curve for c, curve in curves.items() if len(curve["x"]) > 1}


def trial_runs(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every timed trial's numbers, point by point, as the live view keeps them from `load-run` events
    (dashboard.service.load_live.RUN_KEYS): the report's per_trial lists, with the contestant, trial and point."""
    runs = []
    for point in section(report)["points"]:
        for contestant, entry in point["contestants"].items():
            for trial, summary in enumerate(entry.get("per_trial") or []):
                if isinstance(summary, dict):
                    runs.append({**summary, "contestant": contestant, "trial": trial, "slots": point["slots"],
                                 "rate": point["rate"]})
    return runs


def slotted(point: dict[str, Any]) -> list[str]:
    """The contestants of a point whose requests have slots and steps (the loops over core.load.slots)."""
    return [c for c, entry in point["contestants"].items()
            if any(r.get("slot") is not None and r.get("first_step") is not None for r in entry.get("requests", []))]


def default_slotted(point: dict[str, Any]) -> list[str]:
    """The slots picture's first choice: the naive and the pipelined loop (else whichever have slots)."""
    names = slotted(point)
    chosen = [c for c in names if c in ("naive", "pipelined")]
    return chosen or names[:2]


def slot_bars(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """Each request of a contestant's median trial that held a slot: its slot, its first and last decode step, the
    step after which its slot was freed (`released`; the steps between `last` and it were computed past its stop),
    and what the hover says (tokens, times in ms). At most MAX_BARS, by request."""
    bars = []
    for request in entry.get("requests", [])[:MAX_BARS]:
        slot, first = request.get("slot"), request.get("first_step")
        if slot is None or first is None:
            continue
        last = request.get("last_step") if request.get("last_step") is not None else first
        released = request.get("released_step")
        bars.append({"request": request.get("index"), "slot": slot, "first": first, "last": last,
                     "released": released if released is not None and released > last else last,
                     "tokens": request.get("tokens"), "prompt_tokens": request.get("prompt_tokens"),
                     "arrival_ms": request.get("arrival_ms"), "first_token_ms": request.get("first_token_ms"),
                     "finished_ms": request.get("finished_ms")})
    return bars


# ------------------------------------------------------------------------------------------------ words

def what_ran(report: LoadReport) -> str:
    """One line on what the report measured: model, device, slots, loop options and the workload (plain text)."""
    load, env = section(report), report["environment"]
    options = load["options"]
    where = env.get("gpu") or env.get("device") or "an unknown device"
    dtype = f" ({env['dtype']})" if env.get("dtype") else ""
    workload = load["workload"].get("description") or "its workload"
    return (f"{report['model']['spec']} on {where}{dtype}, {load['slots']} slots of a static cache, compile "
            f"{options.get('compile', '?')}, lag {options.get('lag', '?')}: {workload}")


def notices(report: dict[str, Any]) -> list[str]:
    return [str(n) for n in section(report).get("notices") or []]


@dataclass(frozen=True)
class Sentences:
    """What a load report shows (its findings) and the CLI's text of it, in core.load.words' words; where the report
    cannot be worded, neither, and `why_not` says why in one line."""

    findings: list[str]
    text: list[str]
    why_not: str | None = None


def sentences(report: dict[str, Any]) -> Sentences:
    """The report's findings and the CLI's text, made in this process from the report alone."""
    try:
        return Sentences(findings=load_findings(report), text=load_text(report))
    except NOT_WORDED as exc:
        return Sentences(findings=[], text=[], why_not=f"its findings could not be worded ({type(exc).__name__}: "
                                                       f"{str(exc)[:120]}); its tables and charts are shown")


def findings_md(report: dict[str, Any], said: Sentences) -> str:
    """What ran, the report's notices, and what it shows (`said`: its sentences), as the page's Markdown: text from
    the report is shown as text."""
    head = [f"**What ran:** {plain(what_ran(report), SENTENCE_CHARS)}"]
    head += [f"Note: {plain(notice, SENTENCE_CHARS)}" for notice in notices(report)]
    if said.why_not is not None:
        head += [f"*No findings: {plain(said.why_not, SENTENCE_CHARS)}*"]
        return "  \n".join(head)
    findings = [f"- {plain(sentence, SENTENCE_CHARS)}" for sentence in said.findings]
    return "  \n".join([*head, "**What this run shows:**"]) + "\n\n" + "\n".join(findings)


