"""A load report in words, the same on the CLI (core.bench), the engine's page (the Under load tab), Replay and the
HTML export: the contestants' names, a point's name, the pipelined loop's gain at a point, the table's cells, the
CLI's text and what the run shows in sentences. They read the report dict alone, and this module imports no torch, so
any process words a report itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from core.audit.words import per_step_words
from core.phases import phase_named
from core.request.load import HF_BATCH, HF_BATCH_ASYNC, NAIVE, NAIVE_PER_ROW, NO_CHECK, PIPELINED

GAIN_GONE = 1.05  # the pipelined loop's gain counts as gone from the B where it decodes less than 5% faster
NAMES = {NAIVE: NAIVE, NAIVE_PER_ROW: "naive, per row", PIPELINED: PIPELINED, NO_CHECK: "ceiling (no-check)",
         HF_BATCH: HF_BATCH, HF_BATCH_ASYNC: HF_BATCH_ASYNC}


def point_name(point: dict[str, Any]) -> str:
    """"B=4, all at once" or "B=4, 2 requests/s"."""
    rate = "all at once" if not point["rate"] else f"{point['rate']:g} requests/s"
    return f"B={point['slots']}, {rate}"


def gain(entries: dict[str, Any]) -> float | None:
    """The pipelined loop's output tokens/s over the naive loop's, at one point."""
    if PIPELINED in entries and NAIVE in entries and entries[NAIVE]["tokens_per_s"]:
        return entries[PIPELINED]["tokens_per_s"] / entries[NAIVE]["tokens_per_s"]
    return None


def num(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def pair(a: float | None, b: float | None, digits: int = 1) -> str:
    return "–" if a is None else f"{a:,.{digits}f} / {num(b, digits)}"


def pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def same(entry: dict[str, Any]) -> str:
    """Whether every checked request's tokens equal its solo decode: yes, NO, or – where none was checked."""
    solo = entry.get("identical_to_solo")
    return "–" if solo is None else ("yes" if solo else "NO")


# ------------------------------------------------------------------------------------------------ text

def load_text(report: dict[str, Any]) -> list[str]:
    """The CLI's lines: what ran, the main point's table, the sweep's, and what the run shows."""
    section = report["load"]
    environment_ = report["environment"]
    lines = [f"{report['model']['spec']} on {environment_.get('gpu') or environment_.get('device')} "
             f"({environment_.get('dtype')}), {section['slots']} slots of a static cache, compile "
             f"{section['options']['compile']}, "
             f"lag {section['options']['lag']}: {section['workload']['description']}"]
    lines += [f"note: {notice}" for notice in section["notices"]]
    if "interrupted" in section:
        lines.append(f"note: {interrupted_sentence(section)}")
    main = section["points"][0]
    lines += [f"at {point_name(main)}:", *contestant_table(main["contestants"])]
    if len(section["points"]) > 1:
        lines += ["", "the sweep, output tokens/s (pipelined / naive):", *sweep_table(section)]
    lines += ["", "What this run shows:", *(f"  {sentence}" for sentence in load_findings(report))]
    lines.append(f"reproduce: {report['command']}")
    return lines


COLUMNS = ("contestant", "tok/s", "req/s", "TTFT p50/p99 ms", "TPOT p50/p99 ms", "steps", "past a stop",
           "host wait µs/step", "device idle µs/step", "reads/step", "kernel-busy", "same as solo")


def contestant_table(contestants: dict[str, dict[str, Any]]) -> list[str]:
    rows = [COLUMNS]
    for name, entry in contestants.items():
        rows.append((NAMES.get(name, name), num(entry["tokens_per_s"]), num(entry["requests_per_s"], 2),
                     pair(entry["ttft_ms_p50"], entry["ttft_ms_p99"]), pair(entry["tpot_ms_p50"],
                                                                              entry["tpot_ms_p99"], 2),
                     num(entry["steps"], 0), num(entry["wasted_slot_steps"], 0),
                     num(entry["host_wait_us_per_step"], 0), num(entry["device_idle_us_per_step"], 0),
                     num(entry.get("reads_per_decode_step"), 2), pct(entry.get("kernel_busy_fraction")),
                     same(entry)))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(COLUMNS))]
    return ["  " + "  ".join(str(cell).rjust(w) if i else str(cell).ljust(w) for i, (cell, w) in
                             enumerate(zip(row, widths))) for row in rows]


def sweep_table(section: dict[str, Any]) -> list[str]:
    names = list(section["points"][0]["contestants"])
    rows = [("point", *(NAMES.get(n, n) for n in names), "pipelined/naive")]
    for point in sorted(section["points"], key=lambda p: (p["rate"], p["slots"])):
        entries = point["contestants"]
        rows.append((point_name(point), *(num(entries[n]["tokens_per_s"]) if n in entries else "–" for n in names),
                     _ratio(entries)))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
            for row in rows]


def _ratio(entries: dict[str, Any]) -> str:
    ratio = gain(entries)
    return f"{ratio:.2f}x" if ratio else "–"


# ------------------------------------------------------------------------------------------------ findings

def load_findings(report: dict[str, Any]) -> list[str]:
    """What the run shows, in sentences: the pipelined loop's gain, where it goes, the ceiling, transformers'
    batching beside it, the waste of learning late, the reads the audit found, and the tokens' identity."""
    section = report["load"]
    main = section["points"][0]["contestants"]
    sentences = [interrupted_sentence(section)] if "interrupted" in section else []
    sentences += _gain_sentences(section)
    if report["environment"].get("device", "").startswith("cpu"):
        sentences.append("On the CPU host and device are one processor: a read of the step's tokens waits for nothing, "
                         "so here the pipelined loop can only lose its steps past a stop; the comparison is for GPUs.")
    sentences += _ceiling_sentence(main)
    sentences += _against_transformers(section)
    sentences += _waste_sentence(main, section["options"]["lag"])
    sentences += _reads_sentence(main)
    sentences += _identity_sentence(main, section)
    return sentences


def interrupted_sentence(section: dict[str, Any]) -> str:
    """What an interrupted run's report holds: where it was cut, by what, and which points its numbers cover."""
    cut = section["interrupted"]
    by = cut.get("signal") or ("the page's Cancel" if cut["by"] == "cancel" else "an interrupt")
    phase = phase_named(cut["phase"])
    doing = f"the {phase.noun} of {NAMES.get(cut['contestant'], cut['contestant'])}" if phase and cut["contestant"] \
        else "building its slots (compile and capture)"
    at = f" at {point_name(cut['point'])}" if cut["point"] else ""
    kept = "; ".join(point_name(p) for p in section["points"])
    return (f"This run was cut short by {by} during {doing}{at}: the numbers cover the {cut['points_done']} of "
            f"{cut['points_planned']} points that finished ({kept}), each with every contestant's trials; "
            f"{_points_words(cut['points_left_out'])} not run to the end and left out.")


def _points_words(points: list[dict[str, Any]]) -> str:
    names = ", ".join(point_name(p) for p in points)
    return f"{names} was" if len(points) == 1 else f"{names} were"


def _gain_sentences(section: dict[str, Any]) -> Iterator[str]:
    main = section["points"][0]["contestants"]
    ratio = gain(main)
    if ratio is not None:
        yield (f"At {point_name(section['points'][0])} the pipelined loop gives "
               f"{num(main['pipelined']['tokens_per_s'])} output tokens/s against the naive loop's "
               f"{num(main['naive']['tokens_per_s'])} ({ratio:.2f}x; "
               f"trial spread {pct(main['pipelined'].get('spread'))} / {pct(main['naive'].get('spread'))}).")
    by_slots = sorted((p for p in section["points"] if p["rate"] == section["points"][0]["rate"]),
                      key=lambda p: p["slots"])
    ratios = [(p["slots"], gain(p["contestants"])) for p in by_slots]
    ratios = [(b, r) for b, r in ratios if r is not None]
    if len(ratios) > 1:
        gone = next((b for i, (b, _) in enumerate(ratios) if all(r < GAIN_GONE for _, r in ratios[i:])), None)
        listed = ", ".join(f"B={b} {r:.2f}x" for b, r in ratios)
        lost = [b for b, r in ratios if r < GAIN_GONE]
        slower = [f"B={b}" for b, r in ratios if r < 1]
        if gone == ratios[0][0] and len(slower) == len(ratios):
            yield f"Over the batch sweep the pipelined loop is slower than the naive loop at every B ({listed})."
        elif gone == ratios[0][0]:
            loses = f", and slower at {', '.join(slower)}" if slower else ""
            yield (f"Over the batch sweep the pipelined loop gains less than {GAIN_GONE - 1:.0%} at every "
                   f"B{loses} ({listed}).")
        elif not lost:
            yield f"Over the batch sweep the pipelined loop keeps its gain at every B ({listed})."
        elif gone is None:
            yield (f"Over the batch sweep the pipelined loop gains less than {GAIN_GONE - 1:.0%} at "
                   f"{', '.join(f'B={b}' for b in lost)} and more elsewhere ({listed}).")
        else:
            yield (f"Over the batch sweep the pipelined loop's gain is gone (under {GAIN_GONE - 1:.0%}) from B={gone} "
                   f"on ({listed}): the step grows with B, the read does not.")


def _ceiling_sentence(main: dict[str, Any]) -> list[str]:
    if NO_CHECK not in main or PIPELINED not in main:
        return []
    share = main[PIPELINED]["tokens_per_s"] / main[NO_CHECK]["tokens_per_s"]
    if share > 1:  # no loop outruns the one told every length: what is left is this run's noise
        return [f"The pipelined loop measured {share:.0%} of the ceiling, above the bound it cannot pass: the "
                f"difference is this run's noise (the ceiling, told every output length beforehand, "
                f"{num(main[NO_CHECK]['tokens_per_s'])} tokens/s)."]
    return [f"The pipelined loop reaches {share:.0%} of the ceiling (the loop told every output length beforehand, "
            f"{num(main[NO_CHECK]['tokens_per_s'])} tokens/s)."]


def _against_transformers(section: dict[str, Any]) -> list[str]:
    points = [p for p in section["points"] if HF_BATCH_ASYNC in p["contestants"] and PIPELINED in p["contestants"]]
    if not points:
        points = [p for p in section["points"] if HF_BATCH in p["contestants"] and PIPELINED in p["contestants"]]
        name = HF_BATCH
    else:
        name = HF_BATCH_ASYNC
    if not points:
        return []
    kind = "transformers' async batching" if name == HF_BATCH_ASYNC else "transformers' continuous batching"
    what = f"{kind} ({name})"
    calls = [_call(p["contestants"][PIPELINED], p["contestants"][name]) for p in points]
    if all(call == "ahead" for call in calls):
        return [f"The pipelined loop beats {what} at every point measured ({len(points)}), by more than the trials' "
                "spread."]
    parts = []
    for call, said in (("ahead", "ahead of it"), ("behind", "behind it"), ("within", "within the trials' spread"),
                       ("unknown", "one trial, no spread to judge by")):
        where = [_against(point, name) for point, c in zip(points, calls, strict=True) if c == call]
        if where:
            parts.append(f"{said} at {len(where)} ({'; '.join(where)})")
    return [f"Against {what} the pipelined loop is " + ", ".join(parts) + "."]


def _call(ours: dict[str, Any], theirs: dict[str, Any]) -> str:
    """"ahead", "behind", "within" (the difference inside either's trial spread) or "unknown" (a single trial)."""
    spreads = [ours.get("spread"), theirs.get("spread")]
    if any(spread is None for spread in spreads):
        return "unknown"
    difference = (ours["tokens_per_s"] - theirs["tokens_per_s"]) / theirs["tokens_per_s"]
    if abs(difference) <= max(spreads):
        return "within"
    return "ahead" if difference > 0 else "behind"


def _against(point: dict[str, Any], name: str) -> str:
    return (f"{point_name(point)}: {num(point['contestants'][PIPELINED]['tokens_per_s'])} against "
            f"{num(point['contestants'][name]['tokens_per_s'])}")


def _waste_sentence(main: dict[str, Any], lag: int) -> list[str]:
    entry = main.get(PIPELINED)
    if not entry or not entry.get("slot_steps"):
        return []
    wasted, total = entry["wasted_slot_steps"] or 0, entry["slot_steps"]
    return [f"Learning a stop {lag} step(s) late cost the pipelined loop {wasted:.0f} slot steps computed past a stop, "
            f"{wasted / total:.1%} of its {total:.0f}."]


def _reads_sentence(main: dict[str, Any]) -> list[str]:
    said = []
    for name in (NAIVE, NAIVE_PER_ROW, PIPELINED, NO_CHECK):
        entry = main.get(name)
        if entry is None or entry.get("reads_per_decode_step") is None:
            continue
        audited = entry["sync_audit"]["sites"] if "sync_audit" in entry else []
        sites = [site for site in audited if site.get("in_decode_steps", 1)]
        lines = ", ".join(f"{site['file']}:{site['line']}" for site in sites)
        where = f" ({lines})" if sites and entry["reads_per_decode_step"] else ""
        words = per_step_words(entry["reads_per_decode_step"], entry.get("copies_per_decode_step"))
        said.append(f"{NAMES[name]}: {words}{where}")
    return [f"The sync audit, per loop: {'; '.join(said)}."] if said else []


def _identity_sentence(main: dict[str, Any], section: dict[str, Any]) -> list[str]:
    checked = section["solo_checked"]
    if not checked:
        return []
    differ = [name for name, entry in main.items() if entry.get("identical_to_solo") is False]
    if not differ:
        return [f"Every contestant gave each of the {checked} requests checked the tokens of its solo decode."]
    return [f"Tokens that differ from the solo decode ({checked} requests checked): {', '.join(differ)} (bf16 on a "
            "GPU rounds a batch's rows otherwise than one row's; each contestant's repeatability is in the report)."]
