"""How an audit's numbers are said, the same on the terminal (core.audit.report), in a bench run's audit lines
(core.report.build) and on the page's Your loop tab (dashboard.views.audit_view): the waits per decode step, reads
of device values and host-to-device copies counted apart, and the most frequent site, or the sites that tie for it.
Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

COPY_KIND = "h2d-copy"  # core.audit.sync.KINDS: a blocking copy from host memory to the device
RECURRING = 0.5  # a site read in at least half the decode steps is one of the loop's own
TIE_DIGITS = 2  # sites whose per-step counts print alike (1.00 and 1.00) tie
OUTSIDE_DECODE = "setup, the first or last step"  # where a loop's reads are not counted per decode step
_NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def amount(value: float) -> str:
    """A count per step as a sentence says it: whole as a whole number ("2"), else two decimals ("0.50")."""
    return f"{round(value):,}" if math.isclose(value, round(value), abs_tol=0.005) else f"{value:.2f}"


def number_word(count: int) -> str:
    """"three" up to ten, then digits."""
    return _NUMBER_WORDS[count] if 0 <= count < len(_NUMBER_WORDS) else f"{count:,}"


def _counted(value: float, one: str, many: str) -> str:
    return f"{amount(value)} {one if amount(value) == '1' else many}"


def per_step_words(total: float, copies: float | None) -> str:
    """The waits of a decode step, reads and copies apart: "2 reads of device values and 1 host-to-device copy per
    decode step". `total` is the report's reads_per_decode_step (every wait, copies included); `copies` its
    copies_per_decode_step, None for a report written before copies were counted apart."""
    if copies is None:
        either = _counted(total, "read of a device value or blocking copy", "reads of device values or blocking copies")
        return f"{either} per decode step"
    reads, any_copies = max(0.0, total - copies), amount(copies) != "0"
    said = [_counted(reads, "read of a device value", "reads of device values")] \
        if amount(reads) != "0" or not any_copies else []
    if any_copies:
        said.append(_counted(copies, "host-to-device copy", "host-to-device copies"))
    return f"{' and '.join(said)} per decode step"


def copies_per_step(sites: Sequence[dict[str, Any]]) -> float | None:
    """Host-to-device copies per decode step from the sites' own counts (for a report that has no
    copies_per_decode_step: a site whose only kind is a copy); None where no site says its per-step count, or a
    site mixes copies with reads (its count cannot be split)."""
    counted = [s for s in sites if _number(s.get("per_step"))]
    if not counted or any(COPY_KIND in str(s.get("kind")) and s.get("kind") != COPY_KIND for s in counted):
        return None
    return sum(s["per_step"] for s in counted if s.get("kind") == COPY_KIND)


def top_sites(sites: Sequence[dict[str, Any]], every: float = RECURRING) -> list[dict[str, Any]]:
    """The sites read most per decode step (at least `every` a step), all of them where several tie; [] for none."""
    counted = [s for s in sites if _number(s.get("per_step")) and s["per_step"] >= every]
    if not counted:
        return []
    most = round(max(s["per_step"] for s in counted), TIE_DIGITS)
    return [s for s in counted if round(s["per_step"], TIE_DIGITS) == most]


def tie_sentence(tied: Sequence[dict[str, Any]], escape: Callable[[Any], str] = str, named: int = 4) -> str:
    """Sites that tie, named as a tie: "three sites tie at 1.00 a step: item at a.py:3, h2d-copy at a.py:5 and
    h2d-copy at b.py:7" (the first `named`, then how many more). `escape` makes each text from the report safe where
    it is shown."""
    names = [site_name(site, escape) for site in tied[:named]]
    if len(tied) > named:
        names.append(f"{len(tied) - named} more")
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return f"{number_word(len(tied))} sites tie at {tied[0]['per_step']:.2f} a step: {listed}"


def read_in_decode(site: dict[str, Any]) -> bool:
    """Whether a site was read in a decode step (a site read only in setup, the first or last step was not)."""
    reads = site.get("in_decode_steps")
    return _number(reads) and reads > 0


def when_read(site: dict[str, Any], decode_steps: Any) -> str:
    """When a site was read, as a count: "3 reads in 19 decode steps" (`decode_steps` the report's; "in the decode
    steps" where it has none); for a site read in no decode step, "only in setup, the first or last step"
    (OUTSIDE_DECODE), which the reads per decode step leave out."""
    if not read_in_decode(site):
        return f"only in {OUTSIDE_DECODE}"
    reads = site["in_decode_steps"]
    said = f"{reads:,} read{'s' if reads != 1 else ''}" if isinstance(reads, int) else f"{amount(reads)} reads"
    if not isinstance(decode_steps, int) or isinstance(decode_steps, bool):
        return f"{said} in the decode steps"
    return f"{said} in {decode_steps:,} decode step{'s' if decode_steps != 1 else ''}"


def more_sites(rest: Sequence[dict[str, Any]]) -> str:
    """Sites read in decode steps that a list leaves out, with what they add to the reads per decode step, so that
    the list adds up: "2 more sites, 0.32 a step in all"."""
    total = sum(s["per_step"] for s in rest if _number(s.get("per_step")))
    return f"{len(rest):,} more site{'s' if len(rest) != 1 else ''}, {total:.2f} a step in all"


def site_name(site: dict[str, Any], escape: Callable[[Any], str] = str) -> str:
    """"item at loop.py:26": a site's kind and place."""
    line = site.get("line")
    where = f"{escape(site.get('file') or '?')}:{line if isinstance(line, int) else '?'}"
    return f"{escape(site.get('kind') or '?')} at {where}"


def steps_found(steps: Any, step_module: Any, escape: Callable[[Any], str] = str) -> str:
    """What the audit took for the program's steps: "12 steps of LlamaForCausalLM", "6 steps" (marked by hand),
    "no steps found"."""
    if not isinstance(steps, int) or isinstance(steps, bool) or steps <= 0:
        return "no steps found"
    counted = f"{steps:,} step{'s' if steps != 1 else ''}"
    return f"{counted} of {escape(step_module)}" if step_module else counted


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
