"""What a run asks for, checked without torch: generation options, benchmark requests and their names.

The dashboard's server process builds and validates these without importing torch; the engine process that runs
them imports `core.loops.generation` and `core.bench`, which re-export everything here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
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
MAX_PROMPT_CHARS = 20_000
STATIC_CACHE_BUCKET = 256  # static caches come in multiples of this many keys
# The --hf-modules flag of both the CLI and the app (core.models.loading.prepare_for_decode says what it turns off).
HF_MODULES_HELP = ("keep transformers' modules as they are: separate q/k/v and gate/up projections, and KV heads "
                   "copied per query head in compiled steps (default: fused, and read in place)")
# core.kernels.decode_layer's transform of the model, as the report names it (its layers run so in step-graph steps)
DECODE_LAYERS_TRANSFORM = "decoder layers in six kernels"


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class GenerationOptions:
    """How the loops decode. Checked when made (`RUN_OPTIONS` holds each field's bounds), so the loops trust it."""

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
    seed: int | None = 0  # None: a fresh seed each run
    eos_token_id: int | Sequence[int] | None = None
    ignore_eos: bool = False
    nvtx: bool = False  # an NVTX range per run and decode step (core.measure.nvtx); read by the loops, timed or not

    def __post_init__(self) -> None:
        require(self.loop in ALL_LOOPS, f"unknown loop {self.loop!r}; use one of: {', '.join(ALL_LOOPS)}")
        for option in RUN_OPTIONS:
            if option.part == OPTIONS and not (option.name == "seed" and self.seed is None):
                option.check(getattr(self, option.name), option.noun or option.name)
        require(not compile_needs_static_cache(self.compile, self.cache),
                "compile needs cache='static': a dynamic cache changes shape every step and would recompile")


@dataclass(frozen=True)
class BenchRequest:
    """One run: the prompt, the shared options, which contestants, and how many timed trials.

    `min_seconds` adds whole rounds of trials until every contestant has been timed at least that long, so the
    coarse device counters (NVML) get enough samples of each; `deterministic` turns on PyTorch's deterministic
    algorithms for the run (and the cuBLAS workspace setting they need); `audit` runs each contestant once more after
    the trials under the sync audit (core.audit.sync); on CUDA each also runs once more under CUPTI (the kernel
    measurement, core.measure.kernel_measurement) unless `no_kernel_measurement`. `prompt_tokens` says that the prompt
    (each row of it) is the CLI's fixed synthetic prompt of that many token ids (--prompt-tokens,
    core.loops.prompt.synthetic_prompt); None for any other prompt. Checked when made."""

    prompt: Any
    options: GenerationOptions = field(default_factory=GenerationOptions)
    trials: int = 3
    contestants: tuple[str, ...] = LOOPS
    stream: bool = False
    min_seconds: float = 0.0
    deterministic: bool = False
    audit: bool = False
    no_kernel_measurement: bool = False
    prompt_tokens: int | None = None

    def __post_init__(self) -> None:
        for option in RUN_OPTIONS:
            if option.part == REQUEST and option.name in BENCH_REQUEST_FIELDS:
                option.check(getattr(self, option.name), option.name)
        unknown = [c for c in self.contestants if c not in CONTESTANTS]
        if unknown or not self.contestants:
            raise ValueError(f"unknown contestant(s) {unknown}; use some of: {', '.join(CONTESTANTS)}")
        require(len(set(self.contestants)) == len(self.contestants),
                f"a contestant is named twice: {', '.join(self.contestants)}")
        require(self.prompt_tokens is None or (is_int(self.prompt_tokens) and self.prompt_tokens >= 1),
                f"prompt tokens must be a whole number >= 1 or None, got {self.prompt_tokens!r}")

    @property
    def batch(self) -> int:
        prompt = self.prompt
        if isinstance(prompt, list) and prompt and not all(is_int(p) for p in prompt):
            return len(prompt)
        return 1

    def value(self, name: str) -> Any:
        """The value of the run option `name` (RUN_OPTIONS) in this request."""
        option = RUN_OPTION[name]
        if option.part == OPTIONS:
            return getattr(self.options, name)
        if option.part == CONTESTANT:
            return all(c in self.contestants for c in option.contestants)
        if name == "batch":
            return self.batch
        if name == "prompt":
            return self.prompt[0] if self.batch > 1 else self.prompt
        return getattr(self, name)


class Cancelled(Exception):
    """A run was asked to stop (by its caller, a cancel button, or a time limit)."""


# --------------------------------------------------------------------------------------- the run options

OPTIONS, REQUEST, CONTESTANT = "options", "request", "contestant"  # what an option sets: RunOption.part
PAGE_GROUPS = ("run", "loop", "sampling")  # where the page shows an option (RunOption.group), in the page's order
CLI_ONLY = "cli"  # the group of an option that only the command line offers
BENCH_REQUEST_FIELDS = ("trials", "min_seconds", "deterministic", "audit", "no_kernel_measurement")
TEXT, WHOLE, REAL, FLAG, CHOICE = "text", "whole", "real", "flag", "choice"  # RunOption.kind


class OptionNaming:
    """How a row of an options table (RunOption, core.request.load.LoadOption) is named and defaulted: its flag, the
    words a message names it by, and its default for a device."""

    name: str
    flag: str
    noun: str
    default: Any
    gpu_default: Any

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def called(self) -> str:
        return self.noun or self.name.replace("_", " ")

    def default_for(self, gpu: bool) -> Any:
        return self.gpu_default if gpu and self.gpu_default is not None else self.default


@dataclass(frozen=True)
class RunOption(OptionNaming):
    """One thing a run can be asked for, as the form, the CLI, the reproduce command and the history show it.

    `part` says what it sets: a GenerationOptions field, a BenchRequest field (or the prompt and its batch), or a
    contestant. `low`/`high` bound it everywhere; `limit` names the dashboard `Limits` field that caps it on a page;
    `gpu_default` is the page's default where a GPU runs the model; `only_with` names a flag without which the
    option means nothing (left out of the reproduce command). `group` places it on the page: run, loop, sampling.
    """

    name: str
    kind: str
    default: Any
    label: str
    help: str
    part: str = OPTIONS
    noun: str = ""  # how a message names it; default: the name with spaces
    flag: str = ""  # default: --name-with-dashes
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    limit: str | None = None
    choices: tuple[Any, ...] = ()
    page_choices: tuple[Any, ...] = ()  # the page offers these (default: all choices)
    gpu_default: Any = None
    only_with: str | None = None
    contestants: tuple[str, ...] = ()
    group: str = "run"
    history: bool = False  # a column of the run history
    # The contestants whose runs the option can change (empty: all). Two reports differing only in options that leave
    # a contestant out have that contestant as their control (core.report.diff.diff_reports).
    affects: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        require(self.group in (*PAGE_GROUPS, CLI_ONLY),
                f"run option {self.name!r}: group {self.group!r} has no place on the page; use one of "
                f"{', '.join(PAGE_GROUPS)} (the page's) or {CLI_ONLY!r} (the command line only)")

    def check(self, value: Any, called: str | None = None, high: float | None = None) -> None:
        """ValueError unless `value` is of this option's kind and within its bounds (`high` lowers the upper one)."""
        called = called or self.called
        if self.kind == CHOICE:
            require(value in self.choices, f"unknown {called} {value!r}; use one of: "
                                           f"{', '.join(map(str, self.choices))}")
            return
        if self.kind == FLAG:
            require(isinstance(value, bool), f"{called} must be true or false, got {value!r}")
            return
        if self.kind == TEXT:
            return
        whole = self.kind == WHOLE
        require(is_int(value) if whole else isinstance(value, int | float) and not isinstance(value, bool),
                f"{called} must be a {'whole number' if whole else 'number'}, got {value!r}")
        top = self.high if high is None else min(high, self.high if self.high is not None else high)
        low_ok = self.low is None or (value > self.low if self.open_low else value >= self.low)
        if not low_ok or (top is not None and value > top):
            raise ValueError(f"{called} must be {self.bounds_text(top)}, got {value:g}")

    def bounds_text(self, top: float | None) -> str:
        if self.kind == WHOLE and top is not None:
            return f"between {self.low:g} and {top:g}"
        if top is None:
            return f"{'>' if self.open_low else '>='} {self.low:g}"
        return f"in {'(' if self.open_low else '['}{self.low:g}, {top:g}]"


RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption("prompt", TEXT, DEFAULT_PROMPT, "Prompt", "prompt text (gets the chat template)", part=REQUEST,
              high=MAX_PROMPT_CHARS),
    RunOption("max_new_tokens", WHOLE, 64, "Max new tokens", "decode steps per run, at most", low=1,
              limit="max_new_tokens", gpu_default=256, history=True),
    RunOption("batch", WHOLE, 1, "Batch size", "sequences per run (the prompt repeated)", part=REQUEST,
              noun="batch size", low=1, limit="batch", history=True),
    RunOption("trials", WHOLE, 3, "Trials (3+ for a verdict)", "timed runs per contestant after the warm-up",
              part=REQUEST, low=1, limit="trials", gpu_default=5, history=True),
    RunOption("min_seconds", REAL, 0.0, "Min seconds per contestant",
              "more rounds of trials until every contestant has been timed this long", part=REQUEST, low=0,
              high=MAX_MIN_SECONDS, limit="min_seconds", gpu_default=2.0),
    RunOption("ignore_eos", FLAG, False, "Ignore EOS (always run to max)", "always generate max-new-tokens",
              history=True),
    RunOption("cache", CHOICE, "dynamic", "StaticCache", "KV cache; compile needs static", choices=CACHES,
              gpu_default="static", group="loop", history=True),
    RunOption("compile", CHOICE, "off", "Compile",
              "torch.compile mode; step-graph puts the whole decode step in one CUDA graph", noun="compile mode",
              choices=COMPILE_MODES, page_choices=tuple(m for m in COMPILE_MODES if m != "max-autotune-no-cudagraphs"),
              gpu_default="reduce-overhead", group="loop", history=True),
    RunOption("lag", WHOLE, 1, "Pipeline lag (steps)", "pipelined loop: steps between queueing and reading",
              noun="pipeline lag", low=1, high=64, group="loop", history=True,
              affects=("pipelined", PIPELINED_AGAIN)),  # and the static cache's length: diff_reports checks it
    RunOption("streams", WHOLE, 1, "Streams", "2: device-to-host copies on a second CUDA stream", low=1, high=2,
              choices=(1, 2), group="loop", history=True, affects=("pipelined", PIPELINED_AGAIN)),
    RunOption("hf", FLAG, False, "Include HF generate() (on CUDA also with its DeferredStopCheck on)",
              "add transformers' generate() as a contestant", part=CONTESTANT, contestants=(HF,), group="loop"),
    RunOption("hf_deferred", FLAG, False, "", "add generate() with DeferredStopCheck forced on", part=CONTESTANT,
              contestants=(HF_DEFERRED,), group=CLI_ONLY),
    RunOption("no_check", FLAG, False, "Include no-check baseline",
              "add the upper-bound baseline that never checks EOS while running", part=CONTESTANT,
              contestants=(NO_CHECK,), group="loop"),
    RunOption("aa", FLAG, False, "A/A control (pipelined twice)",
              "add the pipelined loop a second time: the ratio between the two is this run's noise",
              part=CONTESTANT, contestants=(PIPELINED_AGAIN,), group="loop"),
    RunOption("deterministic", FLAG, False, "Deterministic algorithms",
              "PyTorch's deterministic algorithms for the run (the report lists ops that have none). On the H200 "
              "this did not make bf16 decode reproducible past 256 keys; --dtype fp32 did", part=REQUEST,
              group="loop"),
    RunOption("audit", FLAG, False, "Find the syncs (one audited run more)",
              "after the trials, run each contestant once more under the sync audit: every host read of a device "
              "value, at its line, per decode step", part=REQUEST, group="loop"),
    RunOption("no_kernel_measurement", FLAG, False, "Skip the kernel measurement (CUDA)",
              "on CUDA, skip the extra run of each contestant under CUPTI that gives kernel-busy time per step",
              part=REQUEST, group="loop"),
    RunOption("nvtx", FLAG, False, "NVTX ranges per step (for Nsight Systems)",
              "CUDA: an NVTX range around every run and every decode step, named by contestant and step (\"pipelined "
              "step 17\"), for an Nsight Systems capture; on by itself in --audit's audited runs and with --trace",
              group="loop"),
    RunOption("do_sample", FLAG, False, "Seeded sampling", "sample instead of greedy decoding", flag="--sample",
              group="sampling"),
    RunOption("seed", WHOLE, 0, "Seed", "sampling seed, the same for every contestant", low=0, high=2**63 - 1,
              group="sampling"),
    RunOption("temperature", REAL, 1.0, "Temperature", "with --sample", low=0, high=100.0, open_low=True,
              only_with="do_sample", group="sampling"),
    RunOption("top_k", WHOLE, 0, "Top-k (0: off)", "with --sample; 0: off", noun="top-k", low=0, high=1_000_000,
              only_with="do_sample", group="sampling"),
    RunOption("top_p", REAL, 1.0, "Top-p", "with --sample", noun="top-p", low=0, high=1.0, open_low=True,
              only_with="do_sample", group="sampling"),
)
RUN_OPTION = {option.name: option for option in RUN_OPTIONS}


def compile_needs_static_cache(compile_mode: str, cache: str) -> bool:
    """Whether this pairing breaks the rule: torch.compile needs a static cache (a dynamic one changes shape every
    step and would recompile)."""
    return compile_mode != "off" and cache != "static"


def static_cache_length(prompt_tokens: int, max_new_tokens: int, lag: int) -> int:
    """Keys a static cache holds for a run: prompt, new tokens and the pipelined loop's overshoot, rounded up to
    STATIC_CACHE_BUCKET so that runs of similar length share one cache (and one compiled graph)."""
    needed = prompt_tokens + max_new_tokens + lag
    return -(-needed // STATIC_CACHE_BUCKET) * STATIC_CACHE_BUCKET


def adapt_to_device(options: GenerationOptions, device_type: str) -> tuple[GenerationOptions, list[str]]:
    """The options the loops run with on this kind of device, and a notice for each thing changed: CUDA graphs,
    CUDA streams and NVTX ranges exist only on NVIDIA GPUs."""
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
    if options.nvtx:
        notices.append("NVTX ranges need CUDA (Nsight Systems traces NVIDIA GPUs); this run on the CPU has none")
        options = replace(options, nvtx=False)
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


# How a tensor-parallel model's all-reduces run when symmetric memory is available (core.parallel.tensor_parallel).
ONE_SHOT_ALL_REDUCE = "one-shot symmetric-memory all-reduce in step-graph mode, NCCL in the other modes"
FUSED_ALL_REDUCE = ("decoder layers: all-reduce + residual add + RMSNorm in one symmetric-memory kernel at decode "
                    "(core.kernels.tp_fusion; NCCL for long prefills); other all-reduces: " + ONE_SHOT_ALL_REDUCE)
