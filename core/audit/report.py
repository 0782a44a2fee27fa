"""The report of core.audit: the audit's result with the machine it ran on and each step's kernel time, what the
terminal shows after the program ran, and the audit as a Chrome trace."""

from __future__ import annotations

import datetime as dt
import os
import platform
import statistics
import textwrap
from typing import Any

import torch

from core.audit.sync import SyncAudit
from core.audit.words import (
    OUTSIDE_DECODE,
    RECURRING,
    copies_per_step,
    more_sites,
    per_step_words,
    read_in_decode,
    steps_found,
    tie_sentence,
    top_sites,
    when_read,
)
from core.documents.kinds import AUDIT_SCHEMA
from core.measure.kernel_measurement import clipped_intervals, merged_intervals, on_run_clock
from core.text import command_name

AUDIT_SCRIPT = "syncscope-audit"  # the installed command (pyproject.toml's [project.scripts])


def prog() -> str:
    """The audit's command as it was started: syncscope-audit, or python -m core.audit (python -m
    syncscope.core.audit installed)."""
    return command_name(__package__, AUDIT_SCRIPT)


def describe(audit: SyncAudit, **extra: Any) -> dict[str, Any]:
    """The audit report of a program: the audit's result and the machine it ran on."""
    gpu = torch.cuda.get_device_name() if audit.cuda else None
    return {"schema": AUDIT_SCHEMA, "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "environment": {"device": "cuda" if audit.cuda else "cpu", "gpu": gpu, "torch": str(torch.__version__),
                            "python": platform.python_version()},
            **audit.result(), **extra}


def kernel_steps(intervals_ns: list[tuple[int, int]], audit: SyncAudit, clocks: dict[str, int]) -> dict[str, Any]:
    """Per decode step, how long kernels ran: the kernels (ns on the profiler's clock) between one step's start on
    the device and the next one's (the audit's step markers), merged."""
    starts = audit.step_device_starts_ms
    if len(starts) < 3 or not intervals_ns:
        return {}
    best: list[tuple[float, float]] = []
    for offset in clocks.values():  # the clock under which the kernels fall inside the run
        kernels = merged_intervals(on_run_clock(intervals_ns, offset, audit.started_s))
        inside = sum(b - a for a, b in clipped_intervals(kernels, starts[0], starts[-1]))
        if inside > sum(b - a for a, b in clipped_intervals(best, starts[0], starts[-1])):
            best = kernels
    busy = [sum(b - a for a, b in clipped_intervals(best, starts[k], starts[k + 1])) for k in range(len(starts) - 1)]
    period = [starts[k + 1] - starts[k] for k in range(len(starts) - 1)]
    # The median step's share: a program's first steps can hold seconds of compiling, which a sum would count.
    shares = [busy[k] / period[k] for k in range(1, len(busy)) if period[k] > 0]
    return {"kernel_busy_ms_per_step": [round(b, 4) for b in busy],
            "kernel_busy_fraction": statistics.median(shares) if shares else None}


def site_lines(report: dict[str, Any], top: int = 8) -> list[str]:
    """Each site read in the decode steps (the first `top`), most per step first, with its reads per step, what it
    costs and what to do, and for a site read in fewer than half the steps how many reads that is; the sites past
    `top` in one line with their reads per step in all, so that the lines add up to the reads per decode step; then
    how many sites were read only in setup, the first or last step, which that count leaves out."""
    sites = report.get("sites") or []
    in_decode = [s for s in sites if read_in_decode(s)]
    lines = []
    for site in in_decode[:top]:
        lines += _site_lines(site, report)
    if len(in_decode) > top:
        lines.append(f"  and {more_sites(in_decode[top:])} (the report lists them all)")
    outside = len(sites) - len(in_decode)
    if outside:
        lines.append(f"  and {outside} site{'s' if outside != 1 else ''} read only in {OUTSIDE_DECODE}, not counted "
                     "above (the report lists them)")
    return lines


def _site_lines(site: dict[str, Any], report: dict[str, Any]) -> list[str]:
    """A site read in the decode steps: its reads per step, kind, place, code, thread and cost; where it was called
    from and its fix."""
    cost = ""
    if site.get("host_blocked_ms_per_step") is not None:
        cost = f"; host blocked {site['host_blocked_ms_per_step'] * 1000:.0f} us/step"
    if site.get("device_idle_after_ms_per_step") is not None:
        cost += f", device idle after {site['device_idle_after_ms_per_step'] * 1000:.0f} us/step (at most what " \
                "removing it gives back)"
    thread = f" (thread {site['thread']})" if site.get("thread") not in (None, report.get("step_thread")) else ""
    rare = f" ({when_read(site, report.get('decode_steps'))})" if site["per_step"] < RECURRING else ""
    lines = [_wrapped(f"  {site['per_step']:.2f}/step  {site['kind']:<13} {site['file']}:{site['line']}  "
                      f"{site['code'][:80]}{thread}{rare}{cost}", 13)]
    if site.get("callers") and site.get("where") == "inside a step" and os.path.isfile(site["file"]):
        lines.append(f"      called from {site['callers'][0]}")  # a helper of the program's forward, say
    if site.get("fix"):
        lines.append(_wrapped(f"      fix: {site['fix']}", 11))
    return lines


def summary_text(report: dict[str, Any]) -> str:
    """What the terminal shows after the program ran."""
    steps, per_step = report.get("decode_steps", 0), report.get("reads_per_decode_step")
    found = steps_found(report.get("steps"), report.get("step_module"))
    counted = f" ({steps:,} decode steps counted: the first and last are left out, where every loop waits)" \
        if report.get("steps") else ""
    lines = [_wrapped(f"{prog()}: {report.get('script', '?')}: {found}{counted}", 2)]
    if per_step is None:
        lines.append("  no decode steps found: give --steps-of the function or module each step calls, or mark "
                     "steps with core.audit.watch()")
    else:
        copies = report.get("copies_per_decode_step", copies_per_step(report.get("sites") or []))
        lines.append(_wrapped(f"  {per_step_words(per_step, copies)} (at most "
                              f"{report['most_reads_in_a_decode_step']} of them in one step), "
                              f"{report.get('lagged_waits', 0)} lagged waits not counted", 2))
        tied = top_sites(report.get("sites") or [])
        if len(tied) > 1:
            lines.append(_wrapped(f"  {tie_sentence(tied)}; what to do about each is under it below", 4))
        lines += site_lines(report)
    if report.get("kernel_busy_fraction") is not None:
        lines.append(f"  kernel-busy: {report['kernel_busy_fraction']:.0%} of the median decode step's device time "
                     "(CUPTI, this run)")
    lines += [_wrapped(f"  not seen: {what}", 4) for what in report.get("not_seen") or []]
    if report.get("note"):
        lines.append(_wrapped(f"  ({report['note']})", 3))
    return "\n".join(lines)


def _wrapped(line: str, indent: int, width: int = 116) -> str:
    """A line of the summary, wrapped at spaces for a terminal; what follows its first line indented by `indent`."""
    return textwrap.fill(line, width, subsequent_indent=" " * indent, break_long_words=False, break_on_hyphens=False,
                         drop_whitespace=True, replace_whitespace=False)


def audit_trace(report: dict[str, Any]) -> dict[str, Any]:
    """The audit as Chrome trace-event JSON: each step a span on the host, each read an instant with its site."""
    starts = report.get("step_starts_ms") or []
    sites = {s["index"]: s for s in report.get("sites", [])}
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "ts": 0, "args": {"name": report.get("script")}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "ts": 0, "args": {"name": "steps"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "ts": 0, "args": {"name": "syncs"}}]
    for index, (begin, end) in enumerate(zip(starts, [*starts[1:], None])):
        if end is not None:
            events.append({"ph": "X", "name": f"step {index}", "pid": 1, "tid": 1, "ts": round(begin * 1000, 3),
                           "dur": round((end - begin) * 1000, 3), "args": {"step": index}})
    for event in report.get("events", []):
        site = sites.get(event["site"], {})
        events.append({"ph": "i", "s": "t", "name": f"sync: {site.get('kind')}", "pid": 1, "tid": 2,
                       "ts": round(event["t_ms"] * 1000, 3),
                       "args": {"step": event["step"], **{k: site.get(k) for k in ("file", "line", "code", "fix")}}})
    return {"traceEvents": events, "displayTimeUnit": "ms", "metadata": {"schema": report.get("schema")}}
