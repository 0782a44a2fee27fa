"""The load report (core.documents.schema.LoadReport): built from core.load.protocol's section, its command line, and
its Chrome trace (each slot a lane: which request held it, and the steps computed past a stop).

Its text for the CLI and what it shows in sentences are core.load.words', which reads only the report and imports no
torch, so the page and Replay word it as the CLI does.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from core.documents.schema import LOAD_SCHEMA
from core.load.protocol import LoadRequest
from core.load.words import NAMES
from core.models.loading import LoadedModel
from core.report.build import environment, model_facts
from core.request.run_schema import bench_words, shell_quote


def build_load_report(loaded: LoadedModel, request: LoadRequest, section: dict[str, Any],
                      command: str) -> dict[str, Any]:
    return {"schema": LOAD_SCHEMA, "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "environment": environment(loaded, section["options"]["compile"]), "model": model_facts(loaded),
            "command": command, "load": section}


def load_command(request: LoadRequest, model: str, *, device: str | None = None, dtype: str | None = None) -> str:
    """The `python -m core.bench` command that repeats this load run."""
    spec, options = request.workload, request.options
    words = [*bench_words(), "--model", model]
    words += ["--device", device] if device else []
    words += ["--dtype", dtype] if dtype else []
    words += ["--requests", str(spec.requests), "--max-batch", str(request.slots)]
    words += ["--rate", f"{spec.rate:g}"] if spec.rate else []
    words += ["--sweep-batch", ",".join(map(str, request.sweep_slots))] if request.sweep_slots else []
    words += ["--sweep-rate", ",".join(f"{r:g}" for r in request.sweep_rates)] if request.sweep_rates else []
    words += ["--max-new-tokens", str(spec.max_new_tokens), "--prompts", spec.prompts]
    if spec.prompts == "synthetic":
        words += ["--prompt-lengths", f"{spec.prompt_min}-{spec.prompt_max}"]
    words += ["--output-lengths", spec.output_lengths]
    words += ["--output-median", str(spec.output_median)] if spec.output_median else []
    words += ["--workload-seed", str(spec.seed)] if spec.seed else []
    words += ["--cache", "static", "--compile", options.compile, "--lag", str(options.lag)]
    words += ["--trials", str(request.trials), "--contestants", ",".join(request.contestants)]
    words += ["--solo-checks", str(request.solo_checks)]
    words += ["--ignore-eos"] if options.ignore_eos else []
    words += ["--audit"] if request.audit else []
    words += ["--no-kernel-measurement"] if request.no_kernel_measurement else []
    return " ".join(shell_quote(word) for word in words)


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
