"""What a run under load asks for, checked without torch: the contestants under load, the table of load options
(LOAD_OPTIONS) and the `LoadRequest` it describes. core.request.load_schema puts the table to work (the CLI's flag
group, a form's values checked into a request within a server's limits, the report's settings, the command that
repeats a run); the engine carries the request itself (engine.protocol.UnderLoad), as it carries a BenchRequest.

A load option is one row here and the field it sets: a LoadRequest field, a WorkloadSpec field (`fields`), or a
GenerationOptions field. A row marked `run_flag` shares the single run's flag (core.request.options.RUN_OPTIONS):
its default, kind and help are that run option's, so the two paths cannot disagree.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from core.request.options import (
    CHOICE,
    FLAG,
    LOOPS,
    NO_CHECK,
    REAL,
    RUN_OPTION,
    WHOLE,
    GenerationOptions,
    OptionNaming,
    is_int,
    require,
)

NAIVE, PIPELINED = LOOPS
NAIVE_PER_ROW = "naive-per-row"  # the naive loop reading each live row's stop and token with an .item() apiece
HF_BATCH, HF_BATCH_ASYNC = "hf-batch", "hf-batch-async"  # transformers' continuous batching (core.load.hf_batching)
LOAD_CONTESTANTS = (NAIVE, PIPELINED, NO_CHECK, HF_BATCH, HF_BATCH_ASYNC)  # run unless the contestants are named
CONTESTANT_CHOICES = (NAIVE, NAIVE_PER_ROW, PIPELINED, NO_CHECK, HF_BATCH, HF_BATCH_ASYNC)
CONTESTANT_LABELS = {NAIVE: "naive", NAIVE_PER_ROW: "naive, per row (an .item() per live row, twice)",
                     PIPELINED: "pipelined", NO_CHECK: "ceiling (no-check)",
                     HF_BATCH: "hf-batch (transformers' continuous batching)",
                     HF_BATCH_ASYNC: "hf-batch-async (transformers' async batching, CUDA)"}
MAX_RATE = 10_000.0  # requests a second: far past what any device here serves
MAX_REQUESTS = 4096
MAX_SLOTS = 256
OUTPUT_LENGTHS = ("lognormal", "max")
PROMPT_SOURCES = ("synthetic", "built-in")

WHOLES, REALS, NAMES, RANGE = "wholes", "reals", "names", "range"  # kinds of LoadOption beside options.py's
REQUEST, WORKLOAD, OPTIONS = "request", "workload", "options"  # what a load option sets: LoadOption.part
GROUPS = ("workload", "loops", "checks")  # where the page shows an option, in the page's order


@dataclass(frozen=True)
class LoadOption(OptionNaming):
    """One thing a run under load can be asked for, as the CLI, the Under load form, the server's limits, the report's
    settings and the reproduce command show it.

    `default` is the CLI's and a CPU page's, `gpu_default` the page's where a GPU runs the model; `by_model` the
    defaults (random weights, real weights) where neither the flag nor a form gives a value. `low`/`high` bound it
    everywhere (a list's values each), `page_high` on a local page (None: `high`), `exposed_high` on a page others can
    reach. `fields`: the WorkloadSpec field(s) it sets where its part is WORKLOAD (default: its name)."""

    name: str
    kind: str
    default: Any
    label: str
    help: str
    part: str = REQUEST
    noun: str = ""  # how a message names it; default: the name with spaces
    flag: str = ""  # default: --name-with-dashes
    metavar: str | None = None
    info: str = ""  # the page's hint under the field
    gpu_default: Any = None
    by_model: tuple[Any, Any] | None = None
    low: float | None = None
    high: float | None = None
    page_high: float | None = None
    exposed_high: float | None = None
    choices: tuple[Any, ...] = ()
    page_choices: tuple[Any, ...] = ()  # the page offers these (default: all choices)
    fields: tuple[str, ...] = ()
    run_flag: bool = False
    group: str = "workload"

    def __post_init__(self) -> None:
        require(self.group in GROUPS, f"load option {self.name!r}: group {self.group!r}; use one of {GROUPS}")

    def check(self, value: Any) -> None:
        """ValueError unless `value` is of this option's kind and within its bounds."""
        if self.kind in (WHOLES, REALS, NAMES):
            require(isinstance(value, tuple), f"{self.called} must be a tuple, got {value!r}")
            one = {WHOLES: WHOLE, REALS: REAL, NAMES: CHOICE}[self.kind]
            for each in value:
                _check_one(self, one, each)
            require(len(set(value)) == len(value), f"{self.called}: a value is given twice in {value!r}")
            require(self.kind != NAMES or bool(value), f"choose at least one of the {self.called}")
        elif self.kind == RANGE:
            require(isinstance(value, tuple) and len(value) == 2, f"{self.called} must be (MIN, MAX), got {value!r}")
            for each in value:
                _check_one(self, WHOLE, each)
            require(value[0] <= value[1], f"{self.called} must be MIN-MAX with MIN <= MAX, got {value!r}")
        else:
            _check_one(self, self.kind, value)


def _check_one(option: LoadOption, kind: str, value: Any) -> None:
    called = option.called
    if kind == CHOICE:
        require(value in option.choices, f"unknown {called} {value!r}; use one of: "
                                         f"{', '.join(map(str, option.choices))}")
    elif kind == FLAG:
        require(isinstance(value, bool), f"{called} must be true or false, got {value!r}")
    else:
        whole = kind == WHOLE
        require(is_int(value) if whole else isinstance(value, int | float) and not isinstance(value, bool),
                f"{called} must be a {'whole number' if whole else 'number'}, got {value!r}")
        require((option.low is None or value >= option.low) and (option.high is None or value <= option.high),
                f"{called} must be {bounds_text(option.low, option.high)}, got {value:g}")


def bounds_text(low: float | None, high: float | None) -> str:
    if high is None:
        return f">= {low:g}"
    return f"between {low:g} and {high:g}"


def _shared(name: str, *, group: str, gpu_default: Any = None, page_high: float | None = None,
            exposed_high: float | None = None, high: float | None = None, part: str = OPTIONS,
            fields: tuple[str, ...] = (), label: str = "", info: str = "") -> LoadOption:
    """The row of a run option that a run under load takes too, under the same flag, default and help (the form may
    label it its own way)."""
    run = RUN_OPTION[name]
    return LoadOption(name, run.kind, run.default, label or run.label, run.help, part=part, noun=run.noun,
                      flag=run.flag, info=info, gpu_default=gpu_default, low=run.low,
                      high=run.high if high is None else high, page_high=page_high, exposed_high=exposed_high,
                      choices=run.choices, page_choices=run.page_choices, fields=fields, run_flag=True, group=group)


LOAD_OPTIONS: tuple[LoadOption, ...] = (
    LoadOption("requests", WHOLE, 12, "Requests N", "run N requests through B slots of continuous batching (the naive "
               "and pipelined loops, the ceiling, transformers' continuous batching) instead of one request",
               part=WORKLOAD, metavar="N", gpu_default=64, low=1, high=MAX_REQUESTS, exposed_high=128),
    LoadOption("max_batch", WHOLE, 4, "Max batch B", "slots: requests decoded together", noun="max batch",
               metavar="B", info="requests decoded together (slots)", gpu_default=8, low=1, high=MAX_SLOTS,
               exposed_high=32),
    LoadOption("rate", REAL, 0.0, "Arrival rate (requests/s)",
               "arrivals: a seeded Poisson process of R requests a second (0: all at once)", part=WORKLOAD,
               noun="the arrival rate", metavar="R", info="0: all at once", low=0, high=MAX_RATE),
    _shared("max_new_tokens", part=WORKLOAD, group="workload", gpu_default=128, high=1_000_000, page_high=4096,
            exposed_high=512, info="a request's most"),
    LoadOption("prompts", CHOICE, "synthetic", "Prompts", "synthetic token ids, or the built-in questions in turn "
               "(default: synthetic for a model with random weights, the built-in questions for a real one)",
               part=WORKLOAD, by_model=("synthetic", "built-in"), choices=PROMPT_SOURCES),
    LoadOption("prompt_lengths", RANGE, (8, 32), "Prompt lengths (tokens)",
               "synthetic prompts: token counts drawn uniformly from MIN to MAX (--prompt-tokens N: N)", part=WORKLOAD,
               metavar="MIN-MAX", info="MIN-MAX, of synthetic prompts", low=1, high=1_000_000, page_high=8192,
               exposed_high=1024, fields=("prompt_min", "prompt_max")),
    LoadOption("output_lengths", CHOICE, "lognormal", "Output lengths",
               "lognormal: each request stops at a length drawn around --output-median, at most --max-new-tokens; "
               "max: at --max-new-tokens or EOS (default: lognormal for a model with random weights, max for a real "
               "one)", part=WORKLOAD, info="lognormal: stops drawn around the median", by_model=("lognormal", "max"),
               choices=OUTPUT_LENGTHS),
    LoadOption("output_median", WHOLE, 0, "Median output length",
               "the median of the log-normal output lengths (0: half of --max-new-tokens)", part=WORKLOAD,
               noun="the median output length", metavar="N", info="0: half of max new tokens", low=0),
    LoadOption("workload_seed", WHOLE, 0, "Workload seed", "the seed of the workload's draws", part=WORKLOAD,
               noun="the workload seed", metavar="S", info="the requests' draws", low=0, high=2**63 - 1,
               fields=("seed",)),
    _shared("compile", group="loops", gpu_default="reduce-overhead"),
    _shared("lag", group="loops"),
    _shared("ignore_eos", group="loops"),
    _shared("trials", part=REQUEST, group="loops", gpu_default=3, high=50, page_high=20, exposed_high=5,
            label="Trials", info="timed runs of each contestant"),
    LoadOption("sweep_batch", WHOLES, (), "Batch sweep (optional)", "also run at these B, as 1,2,4,8",
               noun="the batch sweep", metavar="LIST", info="B values also run, at the arrival rate",
               gpu_default=(1, 4, 16), low=1, high=MAX_SLOTS, exposed_high=32, group="loops"),
    LoadOption("sweep_rate", REALS, (), "Rate sweep (optional)", "also run at these rates, as 1,2,4",
               noun="the rate sweep", metavar="LIST", info="rates also run, at B slots", low=0, high=MAX_RATE,
               group="loops"),
    LoadOption("contestants", NAMES, LOAD_CONTESTANTS, "Contestants", f"some of {','.join(CONTESTANT_CHOICES)}",
               metavar="LIST", choices=CONTESTANT_CHOICES, group="checks"),
    _shared("audit", part=REQUEST, group="checks", gpu_default=True,
            label="Find the syncs (one audited run more per loop)"),
    _shared("no_kernel_measurement", part=REQUEST, group="checks"),
    LoadOption("solo_checks", WHOLE, 16, "Solo checks",
               "decode the first N requests alone too and check each one's tokens under batching", metavar="N",
               info="requests decoded alone, as the reference", low=0, page_high=64, exposed_high=16,
               group="checks"),
)


def load_option(name: str) -> LoadOption:
    """The row of LOAD_OPTIONS named `name` (read when asked: a test may add a row)."""
    return next(option for option in LOAD_OPTIONS if option.name == name)


def _default(name: str) -> Any:
    return load_option(name).default


@dataclass(frozen=True)
class WorkloadSpec:
    """What a workload is drawn from (core.request.workload.build_workload draws its requests); its fields' defaults
    and bounds are their LOAD_OPTIONS rows'. Checked when made.

    prompts: synthetic token ids of a length drawn from [prompt_min, prompt_max], or the built-in questions in turn;
    output lengths: "lognormal" (around `output_median`, 0: half of max_new_tokens; clipped to [1, max_new_tokens]:
    the request stops there as at its EOS) or "max"; arrivals: all at once (rate 0) or a seeded Poisson process."""

    requests: int = _default("requests")
    max_new_tokens: int = _default("max_new_tokens")
    rate: float = _default("rate")
    prompts: str = _default("prompts")
    prompt_min: int = _default("prompt_lengths")[0]
    prompt_max: int = _default("prompt_lengths")[1]
    output_lengths: str = _default("output_lengths")
    output_median: int = _default("output_median")
    seed: int = _default("workload_seed")

    def __post_init__(self) -> None:
        for option in LOAD_OPTIONS:
            if option.part == WORKLOAD:
                option.check(self.value(option))
        require(self.output_median <= self.max_new_tokens, f"the median output length must be between 0 and "
                                                           f"{self.max_new_tokens} (max new tokens), got "
                                                           f"{self.output_median}")

    def value(self, option: LoadOption) -> Any:
        values = tuple(getattr(self, f) for f in option.fields or (option.name,))
        return values if option.kind == RANGE else values[0]

    @property
    def median_output(self) -> int:
        return self.output_median or max(1, self.max_new_tokens // 2)

    def build(self) -> Any:
        """The requests (a core.request.workload.Workload), the same for the same spec on every machine."""
        from core.request.workload import build_workload

        return build_workload(self)

    def with_rate(self, rate: float) -> WorkloadSpec:
        return replace(self, rate=rate)

    def describe(self) -> str:
        from core.request.workload import BUILT_IN_PROMPTS

        arrivals = "all at once" if self.rate == 0 else f"Poisson arrivals at {self.rate:g} requests/s"
        prompts = (f"prompts of {self.prompt_min}-{self.prompt_max} tokens" if self.prompts == "synthetic"
                   else f"the {len(BUILT_IN_PROMPTS)} built-in prompts in turn")
        outputs = (f"output lengths log-normal around {self.median_output}, at most {self.max_new_tokens}"
                   if self.output_lengths == "lognormal" else f"up to {self.max_new_tokens} new tokens or EOS")
        return f"{self.requests} requests, {arrivals}; {prompts}; {outputs}; seed {self.seed}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LoadRequest:
    """One run under load: the workload, at most `max_batch` requests decoded together (the slots), the loops'
    options (the cache is static), the contestants, the trials, the sweeps (B values, arrival rates) around the main
    point, and the checks. Each field's default and bounds are its LOAD_OPTIONS row's; checked when made."""

    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    max_batch: int = _default("max_batch")
    options: GenerationOptions = field(default_factory=lambda: GenerationOptions(cache="static"))
    contestants: tuple[str, ...] = _default("contestants")
    trials: int = _default("trials")
    sweep_batch: tuple[int, ...] = _default("sweep_batch")
    sweep_rate: tuple[float, ...] = _default("sweep_rate")
    audit: bool = _default("audit")
    no_kernel_measurement: bool = _default("no_kernel_measurement")
    solo_checks: int = _default("solo_checks")

    def __post_init__(self) -> None:
        for option in LOAD_OPTIONS:
            if option.part != WORKLOAD:
                option.check(self.value(option.name))
        require(self.options.cache == "static", "under load the slots are rows of one static cache: --cache static")
        require(not self.options.do_sample, "under load the loops decode greedily (--sample is for single runs)")

    def value(self, name: str) -> Any:
        """The value of the load option `name` (LOAD_OPTIONS) in this request."""
        option = load_option(name)
        if option.part == WORKLOAD:
            return self.workload.value(option)
        return getattr(self.options if option.part == OPTIONS else self, name)

    def points(self) -> list[tuple[int, float]]:
        """(B, rate) of every point: the main one first, then the sweeps' (the B sweep at the main rate, the rate
        sweep at the main B), each once."""
        points = [(self.max_batch, self.workload.rate)]
        points += [(b, self.workload.rate) for b in self.sweep_batch]
        points += [(self.max_batch, r) for r in self.sweep_rate]
        return list(dict.fromkeys(points))

    def settings(self) -> dict[str, Any]:
        """What the report keeps of the request: every load option by name, as the table names it."""
        return {option.name: _plain(self.value(option.name)) for option in LOAD_OPTIONS}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
