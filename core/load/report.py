"""The load report (core.documents.schema.LoadReport): built from core.load.protocol's section, its command line, its
text for the CLI, what it shows in sentences, and its Chrome trace (each slot a lane: which request held it, and the
steps computed past a stop).

The findings and the tables read only the report, so the page and Replay say what the CLI says.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

from core.audit.words import per_step_words
from core.documents.schema import LOAD_SCHEMA
from core.load.words import NAMES, gain, num, pair, pct, point_name, same
from core.models.loading import LoadedModel
from core.report.build import environment, model_facts
from core.request.load import LoadRequest
from core.request.options import NO_CHECK

GAIN_GONE = 1.05  # the pipelined loop's gain counts as gone from the B where it decodes less than 5% faster


def build_load_report(loaded: LoadedModel, request: LoadRequest, section: dict[str, Any],
                      command: str) -> dict[str, Any]:
    return {"schema": LOAD_SCHEMA, "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "environment": environment(loaded, section["options"]["compile"]), "model": model_facts(loaded),
            "command": command, "load": section}


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
    sentences = list(_gain_sentences(section))
    if report["environment"].get("device", "").startswith("cpu"):
        sentences.append("On the CPU host and device are one processor: a read of the step's tokens waits for nothing, "
                         "so here the pipelined loop can only lose its steps past a stop; the comparison is for GPUs.")
    sentences += _ceiling_sentence(main)
    sentences += _against_transformers(section)
    sentences += _waste_sentence(main, section["options"]["lag"])
    sentences += _reads_sentence(main)
    sentences += _identity_sentence(main, section)
    return sentences


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
        if gone == ratios[0][0]:
            yield f"Over the batch sweep the pipelined loop gains less than {GAIN_GONE - 1:.0%} at every B ({listed})."
        elif not lost:
            yield f"Over the batch sweep the pipelined loop keeps its gain at every B ({listed})."
        elif gone is None:
            yield (f"Over the batch sweep the pipelined loop gains less than {GAIN_GONE - 1:.0%} at "
                   f"{', '.join(f'B={b}' for b in lost)} and more elsewhere ({listed}).")
        else:
            yield (f"Over the batch sweep the pipelined loop's gain is gone (under {GAIN_GONE - 1:.0%}) from B={gone} "
                   f"on ({listed}): the step grows with B, the read does not.")


def _ceiling_sentence(main: dict[str, Any]) -> list[str]:
    if NO_CHECK not in main or "pipelined" not in main:
        return []
    share = main["pipelined"]["tokens_per_s"] / main[NO_CHECK]["tokens_per_s"]
    return [f"The pipelined loop reaches {share:.0%} of the ceiling (the loop told every output length beforehand, "
            f"{num(main[NO_CHECK]['tokens_per_s'])} tokens/s)."]


def _against_transformers(section: dict[str, Any]) -> list[str]:
    points = [p for p in section["points"] if "hf-batch-async" in p["contestants"] and "pipelined" in p["contestants"]]
    if not points:
        points = [p for p in section["points"] if "hf-batch" in p["contestants"] and "pipelined" in p["contestants"]]
        name = "hf-batch"
    else:
        name = "hf-batch-async"
    if not points:
        return []
    lost = [p for p in points if p["contestants"]["pipelined"]["tokens_per_s"] < p["contestants"][name]["tokens_per_s"]]
    what = "transformers' async batching" if name == "hf-batch-async" else "transformers' continuous batching"
    if not lost:
        return [f"The pipelined loop beats {what} ({name}) at every point measured ({len(points)})."]
    where = ", ".join(f"{point_name(p)}: {num(p['contestants']['pipelined']['tokens_per_s'])} against "
                      f"{num(p['contestants'][name]['tokens_per_s'])}" for p in lost)
    return [f"{what} ({name}) beats the pipelined loop at {len(lost)} of {len(points)} points ({where})."]


def _waste_sentence(main: dict[str, Any], lag: int) -> list[str]:
    entry = main.get("pipelined")
    if not entry or not entry.get("slot_steps"):
        return []
    wasted, total = entry["wasted_slot_steps"] or 0, entry["slot_steps"]
    return [f"Learning a stop {lag} step(s) late cost the pipelined loop {wasted:.0f} slot steps computed past a stop, "
            f"{wasted / total:.1%} of its {total:.0f}."]


def _reads_sentence(main: dict[str, Any]) -> list[str]:
    said = []
    for name in ("naive", "pipelined", NO_CHECK):
        entry = main.get(name)
        if entry is None or entry.get("reads_per_decode_step") is None:
            continue
        sites = (entry.get("sync_audit") or {}).get("sites") or []
        where = f" ({sites[0]['file']}:{sites[0]['line']})" if sites and entry["reads_per_decode_step"] else ""
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


# ------------------------------------------------------------------------------------------------ trace

def load_trace(report: dict[str, Any]) -> dict[str, Any]:
    """A Chrome trace-event JSON of the main point: a process per contestant, a thread per slot, a span per request
    from its first step to its last (steps on the time axis, 1 µs each), and the steps past its stop after it."""
    events: list[dict[str, Any]] = []
    for pid, (name, entry) in enumerate(report["load"]["points"][0]["contestants"].items(), start=1):
        events.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": NAMES.get(name, name)}})
        for request in entry["requests"]:
            if request.get("first_step") is None or request.get("slot") is None:
                continue
            last = request["last_step"] if request.get("last_step") is not None else request["first_step"]
            events.append({"ph": "X", "pid": pid, "tid": request["slot"], "ts": request["first_step"],
                           "dur": max(1, last - request["first_step"] + 1), "name": f"request {request['index']}",
                           "args": {"tokens": request["tokens"], "first_token_ms": request["first_token_ms"]}})
            wasted = (request.get("released_step") or last) - last
            if wasted > 0:
                events.append({"ph": "X", "pid": pid, "tid": request["slot"], "ts": last + 1, "dur": wasted,
                               "name": "past its stop", "args": {"request": request["index"]}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"note": "time axis: decode steps (1 µs = 1 step)", "command": report["command"]}}
