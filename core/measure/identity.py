"""Why outputs differ, said precisely: the report's `identity` entry.

What it rests on is measured, and docs/MEASUREMENT.md ("Are the outputs identical on a GPU?") says where: every
kernel of a decode step is bitwise reproducible while it attends over a short context; past it, a fused attention
kernel's sums can fall differently from run to run, and bf16 logits are so often tied that one rounding step picks
another token from then on. Compiled decode attention that sums in a fixed order (core.kernels.attention's
reductions, core.kernels.triton_attention) repeats itself; so does fp32. Inductor's own placement of
programmatic-dependent-launch waits (core.kernels.pdl) is a second cause, docs/TUNING.md says when.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.documents.upgrades import upgrade_report
from core.request.options import static_cache_length

REPRODUCIBLE_KEYS = 256  # the most keys over which bf16 attention was seen to be bitwise reproducible

HALF_PRECISION_ATTENTION = "half-precision-attention"
UNKNOWN = "unknown"
GENERATE_KERNELS = "generate-kernels"
INDUCTOR_PDL = "inductor-pdl"


def attended_keys(prompt_width: int, options: Any, longest_output: int) -> int:
    """The most keys one decode step attends over: a static cache's full (bucketed) length, else prompt + output."""
    if options.cache == "static":
        return static_cache_length(prompt_width, options.max_new_tokens, options.lag)
    return prompt_width + longest_output


def explain(identical: dict[str, bool], self_consistent: dict[str, bool], *, device_type: str, dtype: str,
            keys: int, compile_mode: str, fused_attention: bool = True, pdl: str = "off") -> dict[str, Any]:
    """{"cause", "reason", "keys"}: cause None when every contestant is identical to the reference.
    `fused_attention`: whether decode steps ran a fused attention kernel (False: core.kernels.attention's reductions);
    `pdl`: the programmatic-dependent-launch placement the compile used (core.kernels.pdl)."""
    drifting = [name for name, ok in self_consistent.items() if not ok]
    differing = [name for name, ok in identical.items() if not ok and self_consistent.get(name, True)]
    entry: dict[str, Any] = {"cause": None, "reason": None, "keys": keys, "drifting": drifting,
                             "differing": differing}
    half = device_type == "cuda" and dtype in ("bfloat16", "float16")
    if drifting and pdl == "inductor":
        entry["cause"] = INDUCTOR_PDL
        entry["reason"] = (
            "the same code gave different tokens from one trial to the next, with inductor's placement of "
            "programmatic-dependent-launch waits (SYNCSCOPE_PDL=inductor), which lets a kernel read what an earlier "
            "kernel wrote before that kernel has finished; on the H200 it made Llama-70B bf16 trials drift where the "
            "same run without it repeated bitwise. Run with SYNCSCOPE_PDL=safe or off for a token-identity check.")
    elif drifting and half and keys > REPRODUCIBLE_KEYS and fused_attention:
        entry["cause"] = HALF_PRECISION_ATTENTION
        entry["reason"] = (
            f"the same code gave different tokens from one trial to the next. On CUDA in {dtype}, a decode step "
            f"that attends over more than {REPRODUCIBLE_KEYS} keys is not bitwise reproducible run to run (measured "
            f"on the H200: repeated runs agree bitwise up to {REPRODUCIBLE_KEYS} keys and drift apart past it, "
            f"with PyTorch's deterministic algorithms on too; fp32 runs are identical). This run attended over "
            f"up to {keys} keys, and {dtype} logits are often tied or one rounding step apart, so one rounding "
            f"difference picks another token. For a token-identity check use fp32 (--dtype fp32), keep the "
            f"prompt plus new tokens within {REPRODUCIBLE_KEYS}, or use a compiled mode with the default decode "
            f"attention (SYNCSCOPE_DECODE_ATTENTION=auto, triton or reduce), whose {dtype} runs repeated on the H200.")
    elif drifting:
        entry["cause"] = UNKNOWN
        entry["reason"] = (
            "the same code gave different tokens from one trial to the next, in a setting where no source of "
            "run-to-run differences has been measured (cause not identified: please report it with this JSON)")
    elif differing and set(differing) <= {"hf", "hf-deferred"} and compile_mode == "step-graph" and half:
        entry["cause"] = GENERATE_KERNELS
        entry["reason"] = (
            "generate() cannot run a step graph, so in this mode it runs inductor's reduce-overhead kernels, which "
            f"round differently from the step graph's in {dtype}; it agrees with itself in every trial")
    return entry


def footnote(identity: dict[str, Any] | None) -> str | None:
    """One line for the CLI table, or None when there is nothing to explain."""
    if not identity or not identity.get("reason"):
        return None
    names = identity.get("drifting") or identity.get("differing") or []
    mark = "NO*" if identity.get("drifting") else "NO"
    return f"{mark} for {', '.join(names)}: {identity['reason']}"


def sameness(report: dict[str, Any], name: str) -> str:
    """A contestant's "same tokens" cell: yes; NO; or NO* when its own trials differ from each other (run-to-run
    numerics, not the loop). Any report, old ones too (core.documents.upgrades.upgrade_report)."""
    report = upgrade_report(report)
    if report["identical"].get(name):
        return "yes"
    return "NO*" if report["self_consistent"].get(name) is False else "NO"


def difference_note(report: dict[str, Any]) -> str | None:
    """The line under a table that explains its NO and NO* cells: the identity section's footnote, else (a report
    without one) which contestants disagree with their own trials; None when there is nothing to explain."""
    report = upgrade_report(report)
    note = footnote(report["identity"])
    if note:
        return note
    drifting = [name for name, ok in report["self_consistent"].items() if ok is False]
    if not drifting:
        return None
    why = "" if report["identity"] else " (this report does not say why: it predates the identity check)"
    return f"NO* for {', '.join(drifting)}: its own trials differ from each other{why}"


def longest_row(token_ids_per_run: Sequence[Sequence[Sequence[int]]]) -> int:
    return max((len(row) for rows in token_ids_per_run for row in rows), default=0)
