"""Audit reports a hostile visitor uploads to the Your loop tab (issue 42), made on demand, never committed: a long
one (2,000,000 reads, about 86 MB, under the 100 MiB upload limit), and one with a huge field for each field the
page reads. tests/test_audit_digest.py uses them in-process; benchmarks/hostile_upload.py posts them to a served app.
"""

from __future__ import annotations

import json
from typing import Any

EVIL = '<img src=x onerror=alert(1)> <a href="http://evil.example">link</a> **bold** '
FIELD_CHARS = 10 * 10**6  # "a 10 MB field"
STRING_FIELDS = ("script", "note", "step_module", "created")
SITE_STRING_FIELDS = ("kind", "file", "code", "fix", "thread", "fix_code")
NUMBER_FIELDS = ("most_reads_in_a_decode_step", "lagged_waits", "reads_per_decode_step", "copies_per_decode_step",
                 "kernel_busy_fraction")


def small_audit(steps: int = 10, reads_per_step: int = 1) -> dict[str, Any]:
    """A well-formed audit report of a loop that reads one site `reads_per_step` times a step."""
    sites = [{"index": 0, "file": "loop.py", "line": 7, "code": "if done.item():", "kind": "item",
              "count": steps * reads_per_step, "in_decode_steps": steps - 2, "per_step": float(reads_per_step),
              "fix": "read it a step later"}]
    events = [{"step": s, "t_ms": round(s * 4.0 + r * 0.5 + 1.0, 4), "site": 0}
              for s in range(steps) for r in range(reads_per_step)]
    return {"schema": "syncscope.audit/1", "created": "2026-12-02T03:00:00+00:00",
            "environment": {"device": "cpu", "gpu": None}, "script": "loop.py", "step_module": "Model",
            "steps": steps, "decode_steps": steps - 2, "reads": len(events),
            "reads_per_step": [float(reads_per_step)] * steps, "reads_per_decode_step": float(reads_per_step),
            "most_reads_in_a_decode_step": reads_per_step, "lagged_waits": 0, "sites": sites, "events": events,
            "step_starts_ms": [s * 4.0 for s in range(steps)], "step_ends_ms": [s * 4.0 + 3.0 for s in range(steps)]}


def long_audit_bytes(reads: int = 2_000_000, reads_per_step: int = 10) -> bytes:
    """The long audit as its file: `reads` reads, `reads_per_step` a step (2,000,000: about 86 MB), written as a stream
    of text pieces so that making it costs far less than parsing it."""
    steps = reads // reads_per_step
    head = small_audit(2)
    head.update(steps=steps, decode_steps=steps - 2, reads=reads, most_reads_in_a_decode_step=reads_per_step,
                reads_per_decode_step=float(reads_per_step))
    head["sites"][0].update(count=reads, in_decode_steps=steps - 2, per_step=float(reads_per_step))
    for key in ("events", "step_starts_ms", "step_ends_ms", "reads_per_step"):
        del head[key]
    parts = [json.dumps(head)[:-1], ', "events": [']
    parts.append(",".join(f'{{"step":{i // reads_per_step},"t_ms":{i * 0.4 + 1:.1f},"site":0}}'
                          for i in range(reads)))
    parts.append('], "step_starts_ms": [' + ", ".join(f"{s * 4.0:.1f}" for s in range(steps)))
    parts.append('], "step_ends_ms": [' + ", ".join(f"{s * 4.0 + 3:.1f}" for s in range(steps)))
    parts.append('], "reads_per_step": [' + ", ".join([f"{reads_per_step}.0"] * steps) + "]}")
    return "".join(parts).encode()


def huge(chars: int = FIELD_CHARS) -> str:
    return (EVIL * (chars // len(EVIL) + 1))[:chars]


def field_audits(chars: int = FIELD_CHARS) -> dict[str, bytes]:
    """One audit file per field the page reads, that field `chars` characters of HTML and Markdown, by its name
    (`sites[0].file`, `events[0].step`, ...)."""
    text = huge(chars)
    files = {}
    for key in (*STRING_FIELDS, *NUMBER_FIELDS):
        files[key] = {**small_audit(), key: text}
    for key in SITE_STRING_FIELDS:
        audit = small_audit()
        audit["sites"][0][key] = text
        files[f"sites[0].{key}"] = audit
    for key in ("step", "site", "t_ms"):
        audit = small_audit()
        audit["events"][0][key] = text
        files[f"events[0].{key}"] = audit
    audit = small_audit()
    audit["environment"]["gpu"] = text
    files["environment.gpu"] = audit
    return {name: json.dumps(audit).encode() for name, audit in files.items()}


def nested_audit(depth: int = 200_000) -> bytes:
    """An audit whose `script` nests lists `depth` deep (json's parser gives up with a RecursionError)."""
    audit = json.dumps(small_audit())
    return (audit[:-1] + ', "argv": ' + "[" * depth + "]" * depth + "}").encode()
