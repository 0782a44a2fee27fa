"""What a run asks for, checked without torch: generation options, benchmark requests and their names.

The dashboard's server process builds and validates these without importing torch; the engine process that runs
them imports `core.generation` and `core.bench`, which re-export everything here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

LOOPS = ("naive", "pipelined")
NO_CHECK = "no-check"  # baseline, not a loop anyone should ship: never looks at EOS while running (upper bound)
ALL_LOOPS = (*LOOPS, NO_CHECK)
CACHES = ("dynamic", "static")
STEP_GRAPH = "step-graph"  # the whole decode step (inductor kernels) captured in one CUDA graph
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs", STEP_GRAPH)
CUDA_GRAPH_COMPILE_MODES = ("reduce-overhead", "max-autotune", STEP_GRAPH)

HF = "hf"
HF_DEFERRED = "hf-deferred"
# An A/A control: the pipelined loop entered a second time. Its ratio to `pipelined` is the run's own noise.
PIPELINED_AGAIN = "pipelined-again"
CONTESTANTS = (*ALL_LOOPS, PIPELINED_AGAIN, HF, HF_DEFERRED)
DEFAULT_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
MAX_MIN_SECONDS = 600.0
# The --hf-modules flag of both the CLI and the app (core.models.prepare_for_decode says what it turns off).
HF_MODULES_HELP = ("keep transformers' modules as they are: separate q/k/v and gate/up projections, and KV heads "
                   "copied per query head in compiled steps (default: fused, and read in place)")
# Environment variables that change what a run computes or how fast; a command that reproduces a run carries those
# that are set. Each is read here, where the CLI and the app check them all before any work
# (check_tuning_environment); the module that acts on one documents it.
DECODE_ATTENTION_ENV = "SYNCSCOPE_DECODE_ATTENTION"  # core.attention
DECODE_ATTENTION_KERNELS = ("reduce", "split", "sdpa", "triton")
DECODE_ATTENTION_CHOICES = ("auto", *DECODE_ATTENTION_KERNELS)  # auto: triton on CUDA where it can, else reduce
INDUCTOR_OPTIONS_ENV = "SYNCSCOPE_INDUCTOR_OPTIONS"  # core.generation
PDL_ENV = "SYNCSCOPE_PDL"  # core.pdl
PDL_CHOICES = ("off", "safe", "inductor")
TP_ALL_REDUCE_ENV = "SYNCSCOPE_TP_ALL_REDUCE"  # core.parallel
TP_ALL_REDUCE_CHOICES = ("auto", "nccl")
TUNING_ENV = (DECODE_ATTENTION_ENV, INDUCTOR_OPTIONS_ENV, PDL_ENV, TP_ALL_REDUCE_ENV)


@dataclass(frozen=True)
class GenerationOptions:
    loop: str = "naive"
    max_new_tokens: int = 64
    cache: str = "dynamic"
    compile: str = "off"
    lag: int = 1
    streams: int = 1
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    eos_token_id: int | Sequence[int] | None = None
    ignore_eos: bool = False

    def validate(self) -> None:
        require(self.loop in ALL_LOOPS, f"unknown loop {self.loop!r}; use one of: {', '.join(ALL_LOOPS)}")
        require(self.cache in CACHES, f"unknown cache {self.cache!r}; use one of: {', '.join(CACHES)}")
        require(self.compile in COMPILE_MODES,
                f"unknown compile mode {self.compile!r}; use one of: {', '.join(COMPILE_MODES)}")
        require(self.compile == "off" or self.cache == "static",
                "compile needs cache='static': a dynamic cache changes shape every step and would recompile")
        require(is_int(self.max_new_tokens) and self.max_new_tokens >= 1,
                f"max_new_tokens must be a whole number >= 1, got {self.max_new_tokens!r}")
        require(is_int(self.lag) and self.lag >= 1, f"lag must be a whole number >= 1, got {self.lag!r}")
        require(self.streams in (1, 2), f"streams must be 1 or 2, got {self.streams!r}")
        require(self.temperature > 0, f"temperature must be > 0, got {self.temperature!r}")
        require(is_int(self.top_k) and self.top_k >= 0, f"top_k must be a whole number >= 0, got {self.top_k!r}")
        require(0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p!r}")
        require(self.seed is None or is_int(self.seed), f"seed must be a whole number, got {self.seed!r}")


@dataclass(frozen=True)
class BenchRequest:
    """One comparison: the prompt, the shared options, which contestants, and how many timed trials.

    `min_seconds` adds whole rounds of trials until every contestant has been timed at least that long, so the
    coarse device counters (NVML) get enough samples of each; `deterministic` turns on PyTorch's deterministic
    algorithms for the run (and the cuBLAS workspace setting they need)."""

    prompt: Any
    options: GenerationOptions
    trials: int = 3
    contestants: tuple[str, ...] = LOOPS
    stream: bool = False
    min_seconds: float = 0.0
    deterministic: bool = False

    def validate(self) -> None:
        self.options.validate()
        require(is_int(self.trials) and self.trials >= 1, f"trials must be a whole number >= 1, got {self.trials!r}")
        require(isinstance(self.min_seconds, int | float) and not isinstance(self.min_seconds, bool)
                and 0 <= self.min_seconds <= MAX_MIN_SECONDS,
                f"min_seconds must be between 0 and {MAX_MIN_SECONDS:g}, got {self.min_seconds!r}")
        unknown = [c for c in self.contestants if c not in CONTESTANTS]
        if unknown or not self.contestants:
            raise ValueError(f"unknown contestant(s) {unknown}; use some of: {', '.join(CONTESTANTS)}")
        require(len(set(self.contestants)) == len(self.contestants),
                f"a contestant is named twice: {', '.join(self.contestants)}")

    @property
    def batch(self) -> int:
        prompt = self.prompt
        if isinstance(prompt, list) and prompt and not all(is_int(p) for p in prompt):
            return len(prompt)
        return 1


def adapt_to_device(options: GenerationOptions, device_type: str) -> tuple[GenerationOptions, list[str]]:
    """The options the loops run with on this kind of device, and a notice for each thing changed: CUDA graphs and
    CUDA streams exist only on NVIDIA GPUs."""
    notices: list[str] = []
    if device_type == "cuda":
        return options, notices
    if options.compile == STEP_GRAPH:
        notices.append("compile=step-graph captures the decode step in a CUDA graph, which needs an NVIDIA GPU; "
                       "running without compile (mode 'off') on the CPU")
        options = replace(options, compile="off")
    elif options.compile in CUDA_GRAPH_COMPILE_MODES:
        notices.append(f"compile={options.compile} uses CUDA graphs, which need an NVIDIA GPU; "
                       "compiled without them (mode 'default') on the CPU")
        options = replace(options, compile="default")
    if options.streams == 2:
        notices.append("streams=2 needs CUDA streams; on the CPU it runs as streams=1")
        options = replace(options, streams=1)
    return options, notices


def hf_generate_options(options: GenerationOptions, device_type: str) -> tuple[GenerationOptions, list[str]]:
    """What transformers' generate() runs with, and notices: it has no step-graph (its closest is reduce-overhead),
    and it compiles only on CUDA-class devices (transformers' `_valid_auto_compile_criteria`)."""
    if options.compile == "off":
        return options, []
    if device_type != "cuda":
        return replace(options, compile="off"), [
            f"hf: transformers' generate() compiles only on GPUs; compile={options.compile} ran without compile "
            "(mode 'off') on the CPU"]
    if options.compile == STEP_GRAPH:
        return replace(options, compile="reduce-overhead"), [
            "hf: generate() cannot run a step-graph; it ran its closest equivalent, compile=reduce-overhead"]
    return options, []


def effective_options(contestant: str, options: GenerationOptions,
                      device_type: str) -> tuple[GenerationOptions, list[str]]:
    """The options `contestant` runs with on this kind of device, and why they differ from those asked for."""
    if contestant in (HF, HF_DEFERRED):
        return hf_generate_options(options, device_type)
    return adapt_to_device(options, device_type)


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

# How a tensor-parallel model's all-reduces run when symmetric memory is available (core.parallel).
ONE_SHOT_ALL_REDUCE = "one-shot symmetric-memory all-reduce in step-graph mode, NCCL in the other modes"


def env_choice(name: str, choices: Sequence[str], environ: Mapping[str, str] | None = None) -> str:
    """The value of the environment variable `name`, one of `choices` (its first when unset or empty)."""
    environ = os.environ if environ is None else environ
    choice = environ.get(name, "").strip().lower() or choices[0]
    if choice not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {choice!r}")
    return choice


def inductor_options_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The inductor options a user adds to every compile, a JSON object in SYNCSCOPE_INDUCTOR_OPTIONS."""
    environ = os.environ if environ is None else environ
    raw = environ.get(INDUCTOR_OPTIONS_ENV, "").strip()
    if not raw:
        return {}
    try:
        options = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{INDUCTOR_OPTIONS_ENV} is not valid JSON ({exc.msg}): {raw!r}") from exc
    require(isinstance(options, dict), f"{INDUCTOR_OPTIONS_ENV} must be a JSON object of inductor options, got {raw!r}")
    return options


def check_tuning_environment(environ: Mapping[str, str] | None = None) -> None:
    """Refuse a malformed tuning variable (TUNING_ENV) with a one-line reason, before any work starts."""
    env_choice(DECODE_ATTENTION_ENV, DECODE_ATTENTION_CHOICES, environ)
    env_choice(PDL_ENV, PDL_CHOICES, environ)
    env_choice(TP_ALL_REDUCE_ENV, TP_ALL_REDUCE_CHOICES, environ)
    inductor_options_from_env(environ)


class Cancelled(Exception):
    """A run was asked to stop (by its caller, a cancel button, or a time limit)."""
