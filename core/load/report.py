"""The load report (core.documents.schema.LoadReport): built from core.load.protocol's section and its command line
(core.request.load_schema), and its Chrome trace (each slot a lane: which request held it, and the steps computed
past a stop).

Its text for the CLI and what it shows in sentences are core.load.words', which reads only the report and imports no
torch, so the page and Replay word it as the CLI does.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from core.documents.kinds import LOAD_SCHEMA
from core.load.words import NAMES
from core.models.loading import LoadedModel
from core.report.build import environment, model_facts
from core.request.load import LoadRequest


def build_load_report(loaded: LoadedModel, request: LoadRequest, section: dict[str, Any],
                      command: str) -> dict[str, Any]:
    return {"schema": LOAD_SCHEMA, "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "environment": environment(loaded, section["options"]["compile"]), "model": model_facts(loaded),
            "command": command, "load": section}


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
