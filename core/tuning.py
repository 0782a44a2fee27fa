"""The tuning switches: which kernels a decode step runs and how they are compiled, one row each. Torch-free.

A switch is set by its environment variable (`SWITCHES`' `variable`), read and checked once when a process starts
(`Tuning.from_environment`: the CLI, app.py, each engine process), and from then on travels as the `Tuning`: the
model is prepared with it (core.models.loading.load_model), the step compiled with it (core.loops.step), the report
records it whole (`environment.tuning`), the reproduce command sets the switches that differ from their default, and a
diff shows every switch that differs. No kernel and no step reads the environment (load_model given no `Tuning` reads it
as it loads, for a caller of its own).

`python -m core.tuning --labels` prints the labels of benchmarks/lab/calls/floor_ab.sh: one per value of a switch
that is not its default, with the assignment it stands for, and `default`. docs/TUNING.md has what each switch was
measured at, and the switches that lost their A/B and were removed (`RETIRED`: an old report's command may still set
one, and its diff says so).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

VARIABLE_PREFIX = "SYNCSCOPE_"
JSON_OBJECT = "a JSON object"  # the choices of a switch whose value is a JSON object (its row's `choices` is empty)
# From this hidden size on, the kernels read late by default: Llama-8B's (4,096) measured faster so, Llama-1B's (2,048)
# slower (docs/TUNING.md, "Every read before the arithmetic")
LATE_READS_FROM_HIDDEN = 4096


@dataclass(frozen=True)
class Switch:
    """One tuning switch: its environment variable, its choices (the first the default; none for a JSON object, whose
    default is {}), what it does in one sentence, and its key (the `Tuning` field and the key of the report's
    `environment.tuning`: the variable without its prefix, in lower case)."""

    variable: str
    choices: tuple[str, ...]
    does: str
    key: str

    def __post_init__(self) -> None:
        if self.variable != VARIABLE_PREFIX + self.key.upper():
            raise ValueError(f"switch {self.key!r}: its variable must be {VARIABLE_PREFIX + self.key.upper()}")

    @property
    def default(self) -> Any:
        return self.choices[0] if self.choices else {}

    @property
    def choices_text(self) -> str:
        return ", ".join(self.choices) if self.choices else JSON_OBJECT

    def parse(self, raw: str) -> Any:
        """The value of `raw` (the variable as set; blank: the default). ValueError in one line naming the variable
        and its choices."""
        raw = raw.strip()
        if not self.choices:
            return _json_object(self.variable, raw)
        choice = raw.lower() or self.default
        if choice not in self.choices:
            raise ValueError(f"{self.variable} must be one of {self.choices_text}, got {choice!r}")
        return choice

    def text(self, value: Any) -> str:
        """`value` as the variable would be set to it (a JSON object as JSON)."""
        return json.dumps(value) if not self.choices else str(value)

    def labels(self) -> list[str]:
        """floor_ab.sh's label of each value that is not the default, e.g. "o-proj-inductor"."""
        return [f"{self.key.replace('_', '-')}-{value}" for value in self.choices[1:]]


SWITCHES: tuple[Switch, ...] = (
    Switch("SYNCSCOPE_DECODE_ATTENTION", ("auto", "reduce", "split", "sdpa", "triton"),
           "the compiled decode steps' attention kernel, fixed when the model is prepared (core.kernels.attention); "
           "auto: triton on CUDA where it takes the model, else reduce", "decode_attention"),
    Switch("SYNCSCOPE_INDUCTOR_OPTIONS", (),
           "inductor options added to every compile, over those of the mode and of the switches below",
           "inductor_options"),
    Switch("SYNCSCOPE_PDL", ("off", "safe", "inductor"),
           "programmatic dependent launch of inductor's kernels in step-graph compiles on Hopper and newer: safe "
           "waits before each kernel's first access, inductor where inductor places it (core.kernels.pdl)", "pdl"),
    Switch("SYNCSCOPE_TP_ALL_REDUCE", ("auto", "one-shot", "nccl"),
           "tensor parallelism's all-reduces: auto fuses each decoder layer's with the residual add and RMSNorm "
           "after it (core.kernels.tp_fusion), one-shot takes PyTorch's symmetric-memory all-reduce in step-graph "
           "mode, nccl keeps NCCL everywhere", "tp_all_reduce"),
    Switch("SYNCSCOPE_TP_BARRIER", ("push", "asm", "atomic"),
           "how the fused all-reduce learns that the other GPUs' rows are there: push stores them into the peers' "
           "buffers, asm and atomic meet at flags (core.kernels.tp_kernels)", "tp_barrier"),
    Switch("SYNCSCOPE_O_PROJ", ("library", "inductor"),
           "the attention's output projection in compiled steps where the gemv kernel does not take it: the BLAS "
           "library's product, opaque to inductor, or inductor's own (core.kernels.fusion)", "o_proj"),
    Switch("SYNCSCOPE_DECODE_PRODUCTS", ("auto", "triton", "inductor"),
           "the batch-1 products of compiled CUDA steps: core.kernels.triton_gemv's kernel (triton) or inductor's; "
           "auto is triton in step-graph compiles and inductor in the others (core.kernels.products)",
           "decode_products"),
    Switch("SYNCSCOPE_DECODE_LAYER", ("on", "off"),
           "a Llama-layout decoder layer's batch-1 step-graph step in six kernels where the products are the gemv "
           "kernel's, fixed when the model is prepared (core.kernels.decode_layer)", "decode_layer"),
    Switch("SYNCSCOPE_STEP_COMMIT", ("argmax", "whole"),
           "what a greedy step-graph step compiles after the forward: the token choice only, or all of the step's "
           "bookkeeping with it (core.loops.step)", "step_commit"),
    Switch("SYNCSCOPE_KERNEL_READS", ("auto", "first", "late"),
           "when the project's decode kernels (attention, the gemv products, the q/k/v kernel) read what they use "
           "after their arithmetic: first, before any of it, or late, where used (core.kernels.reads); auto: late "
           f"where the model's hidden size is {LATE_READS_FROM_HIDDEN} or more, else first", "kernel_reads"),
)
SWITCH = {switch.key: switch for switch in SWITCHES}


@dataclass(frozen=True)
class RetiredSwitch:
    """A switch that lost its A/B and was removed with its code (docs/TUNING.md, "Tried and removed"): what its
    default (its first choice) did is what runs now. Kept so that an old report that set it diffs as it ran; its
    variable is no longer read."""

    key: str
    choices: tuple[str, ...]
    did: str

    @property
    def default(self) -> str:
        return self.choices[0]

    @property
    def variable(self) -> str:
        return VARIABLE_PREFIX + self.key.upper()


RETIRED: tuple[RetiredSwitch, ...] = (
    RetiredSwitch("kernel_pdl", ("off", "wait", "prefetch"),
                  "programmatic dependent launch for the project's own Triton kernels"),
    RetiredSwitch("decode_swiglu", ("down", "gate-up"), "which kernel of the fused layer computed silu(gate) * up"),
    RetiredSwitch("attention_prefetch", ("off", "on"), "the fused layer's attention asking L2 for the next weight"),
    RetiredSwitch("product_prefetch", ("off", "on"), "each fused product asking L2 for the next one's weight"),
    RetiredSwitch("append_in_attention", ("off", "on"), "the rotary embedding and the cache write inside attention"),
)


@dataclass(frozen=True)
class Tuning:
    """The value of every switch (SWITCHES; the field of each is its key), checked when made: a process reads it from
    its environment once, at its start, and hands it on."""

    decode_attention: str = SWITCH["decode_attention"].default
    inductor_options: dict[str, Any] = field(default_factory=dict)
    pdl: str = SWITCH["pdl"].default
    tp_all_reduce: str = SWITCH["tp_all_reduce"].default
    tp_barrier: str = SWITCH["tp_barrier"].default
    o_proj: str = SWITCH["o_proj"].default
    decode_products: str = SWITCH["decode_products"].default
    decode_layer: str = SWITCH["decode_layer"].default
    step_commit: str = SWITCH["step_commit"].default
    kernel_reads: str = SWITCH["kernel_reads"].default

    def __post_init__(self) -> None:
        for switch in SWITCHES:
            value = getattr(self, switch.key)
            if switch.choices and value not in switch.choices:
                raise ValueError(f"{switch.variable} must be one of {switch.choices_text}, got {value!r}")
            if not switch.choices and not isinstance(value, dict):
                raise ValueError(f"{switch.variable} must be {JSON_OBJECT}, got {value!r}")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Tuning:
        """The switches as `environ` (this process's environment by default) sets them; unset or blank: the default.
        ValueError in one line naming the first malformed variable and its choices."""
        environ = os.environ if environ is None else environ
        return cls(**{switch.key: switch.parse(environ.get(switch.variable, "")) for switch in SWITCHES})

    def as_report(self) -> dict[str, Any]:
        """Every switch by key, as the report's `environment.tuning` holds it."""
        return {switch.key: getattr(self, switch.key) for switch in SWITCHES}

    def assignments(self) -> dict[str, str]:
        """The variables of the switches that differ from their default, each as it would be set."""
        return {switch.variable: switch.text(getattr(self, switch.key)) for switch in SWITCHES
                if getattr(self, switch.key) != switch.default}

    def decode_products_for(self, step_graph: bool) -> str:
        """The batch-1 products of a compile: "triton" or "inductor" ("auto" resolved: "triton" for a step-graph
        compile)."""
        if self.decode_products == "auto":
            return "triton" if step_graph else "inductor"
        return self.decode_products

    def kernel_reads_for(self, hidden_size: int) -> str:
        """When the project's kernels read for a model of `hidden_size`: "first" or "late" ("auto" resolved by the
        A/B of docs/TUNING.md, "Every read before the arithmetic")."""
        if self.kernel_reads == "auto":
            return "late" if hidden_size >= LATE_READS_FROM_HIDDEN else "first"
        return self.kernel_reads


def _json_object(variable: str, raw: str) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{variable} is not valid JSON ({exc.msg}): {raw!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{variable} must be {JSON_OBJECT} of inductor options, got {raw!r}")
    return value


def labels() -> list[tuple[str, str]]:
    """floor_ab.sh's labels and the assignment each stands for: `default` (none), then one per value of a switch
    that is not its default."""
    return [("default", ""), *((label, f"{switch.variable}={value}") for switch in SWITCHES
                               for label, value in zip(switch.labels(), switch.choices[1:], strict=True))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__spec__.name if __spec__ else __name__}",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--labels", action="store_true",
                        help="print each label floor_ab.sh takes and the assignment it stands for, one a line")
    args = parser.parse_args(argv)
    if args.labels:
        for label, assignment in labels():
            print(f"{label} {assignment}".rstrip())
        return 0
    try:
        tuning = Tuning.from_environment()
    except ValueError as exc:
        sys.stderr.write(f"core.tuning: error: {exc}\n")
        return 2
    for switch in SWITCHES:
        print(f"{switch.variable}={switch.text(getattr(tuning, switch.key))}  ({switch.choices_text})")
    return 0


if {f.name for f in fields(Tuning)} != set(SWITCH):
    raise ImportError("core.tuning: Tuning's fields and SWITCHES' keys must be the same")

if __name__ == "__main__":
    sys.exit(main())
