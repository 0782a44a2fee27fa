"""The sync audit's report (core.audit.sync): its reads counted per decode step, one row per site with
what it costs on CUDA and what to do about it, and the reads one by one for timelines and traces."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

from core.audit.fixes import suggest
from core.audit.sites import CORE_DIR, Caller, Read, Site, path_from_root
from core.audit.words import COPY_KIND

MAX_EVENTS = 20_000  # reads kept one by one (for timeline markers and the trace); the counts cover all of them


class AuditReport:
    """`result()` of core.audit.sync.SyncAudit (mixed into it), from its reads, steps and threads."""

    def result(self, **extra: Any) -> dict[str, Any]:
        """The audit as the report holds it (JSON-ready); `extra` is added as it is (the audited run's rate, say)."""
        decode = set(range(1, self.steps - 1))  # not the prefill, not the last step (every loop's final wait)
        per_step, copies = [0] * self.steps, [0] * self.steps
        for read in self.reads:
            if read.step is not None and read.step < self.steps:
                per_step[read.step] += 1
                copies[read.step] += read.kind == COPY_KIND
        in_decode = [per_step[i] for i in sorted(decode)]
        copies_in_decode = [copies[i] for i in sorted(decode)]
        order = {site: index for index, site in enumerate(self._site_order())}
        out: dict[str, Any] = {
            "device": "cuda" if self.cuda else "cpu", "steps": self.steps, "decode_steps": len(decode),
            "reads": len(self.reads), "reads_per_step": per_step,
            # every wait of a decode step, host-to-device copies included (as --fail-on-sync and the bench's
            # reads_per_step count them); copies_per_decode_step says how many of them were copies
            "reads_per_decode_step": sum(in_decode) / len(in_decode) if in_decode else None,
            "copies_per_decode_step": sum(copies_in_decode) / len(in_decode) if in_decode else None,
            "most_reads_in_a_decode_step": max(in_decode, default=None),
            "lagged_waits": self.lagged_waits, "sites": self._sites(decode, list(order)),
            "threads": self._thread_reads(),
            "events": [{"step": r.step, "t_ms": round(r.t_ms, 4), "site": order[r.site], "host_ms": _round(r.host_ms)}
                       for r in self.reads[:MAX_EVENTS]],
            "step_starts_ms": [round(t, 4) for t in self.step_starts_ms],
            "step_ends_ms": [None if t is None else round(t, 4) for t in self.step_ends_ms],
            "step_device_starts_ms": [round(t, 4) for t in self.step_device_starts_ms],
        }
        if not self.cuda:
            out["note"] = ("on the CPU host and device are one processor, so these reads cost nothing here; on a GPU "
                           "each would block the host until the device caught up")
        return {**out, **extra}

    def _thread_reads(self) -> dict[str, int]:
        """Each thread started while auditing, by name, and its reads."""
        counts = {thread.name: 0 for thread in self._threads}
        for read in self.reads:
            if read.thread is not None:
                counts[read.thread] = counts.get(read.thread, 0) + 1
        return counts

    def _site_order(self) -> list[Site]:
        """Sites in the order first seen: the `site` index of the report's events."""
        return list(dict.fromkeys(read.site for read in self.reads))

    def _sites(self, decode: set[int], order: list[Site]) -> list[dict[str, Any]]:
        """One row per site (in `order`, its `index` the events' `site`), the most reads per decode step first."""
        steps = max(1, len(decode))
        by_site: dict[Site, list[Read]] = {site: [] for site in order}
        for read in self.reads:
            by_site[read.site].append(read)
        rows = []
        for index, site in enumerate(order):
            reads = by_site[site]
            kinds = list(dict.fromkeys(r.kind for r in reads))
            what = _most_common(r.what for r in reads if r.what)
            fix, fix_code = suggest(site.file, site.code, kinds[0], what, site.path.startswith(CORE_DIR),
                                    site.function)
            row: dict[str, Any] = {
                "index": index, "file": site.file, "line": site.line, "code": site.code, "function": site.function,
                "kind": kinds[0] if len(kinds) == 1 else "/".join(kinds), "count": len(reads),
                "in_decode_steps": sum(1 for r in reads if r.step in decode),
                "where": "inside a step" if any(r.inside_step for r in reads) else "between steps",
                "thread": _thread_of(reads), "callers": _callers_text(_most_common(r.callers for r in reads) or ()),
                "fix": fix, "fix_code": fix_code,
            }
            row["per_step"] = row["in_decode_steps"] / steps if decode else None
            if self.cuda:
                row.update(_costs(reads, decode, steps))
            rows.append(row)
        return sorted(rows, key=lambda r: (-r["in_decode_steps"], -r["count"]))


def _costs(reads: list[Read], decode: set[int], steps: int) -> dict[str, float | None]:
    blocked = [r.host_ms for r in reads if r.host_ms is not None]
    idle = [r.idle_after_ms for r in reads if r.idle_after_ms is not None]
    decode_idle = [r.idle_after_ms for r in reads if r.idle_after_ms is not None and r.step in decode]
    decode_blocked = [r.host_ms for r in reads if r.host_ms is not None and r.step in decode]
    return {"host_blocked_ms": _round(sum(blocked)) if blocked else None,
            "host_blocked_ms_per_step": _round(sum(decode_blocked) / steps) if decode_blocked else None,
            "device_idle_after_ms": _round(sum(idle)) if idle else None,
            "device_idle_after_ms_per_step": _round(sum(decode_idle) / steps) if decode_idle else None}


def _most_common(values: Iterator[Any]) -> Any:
    counts = collections.Counter(values)
    return counts.most_common(1)[0][0] if counts else None


def _thread_of(reads: list[Read]) -> str | None:
    """The threads other than the audit's own that read at a site, most reads first; None for none."""
    named = collections.Counter(r.thread for r in reads if r.thread is not None)
    return ", ".join(name for name, _ in named.most_common()) or None


def _callers_text(callers: tuple[Caller, ...]) -> list[str]:
    return [f"{path_from_root(code.co_filename)}:{line} {code.co_name}" for code, line in callers]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
