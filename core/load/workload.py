"""A workload: N requests, each with its prompt, its output length and its arrival time, built once from a seed so that
every contestant gets the same requests. Torch-free: the page's server checks and describes workloads too.

- prompts: token counts drawn from a seeded distribution (synthetic shapes: ids drawn with the same seed), or the
  built-in prompt texts in turn (real models; `BUILT_IN_PROMPTS`, of varied lengths);
- output lengths: "lognormal" (median `output_median`, clipped to [1, max_new_tokens]: the request stops there as at its
  EOS, which a model with random weights never says) or "max" (every request may run to max_new_tokens; a real model
  stops at its EOS);
- arrivals: all at once (rate 0, offline) or by a seeded Poisson process at `rate` requests a second (online).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from core.request.options import is_int, require

OUTPUT_LENGTHS = ("lognormal", "max")
PROMPT_SOURCES = ("synthetic", "built-in")
MAX_REQUESTS = 4096
MAX_SLOTS = 256
SYNTHETIC_IDS = (100, 10_100)  # as core.loops.prompt.synthetic_prompt: ids every tokenizer here has
LOGNORMAL_SIGMA = 0.8  # the spread of output lengths: with median 64, a quarter are under 37 and a quarter over 110

# Questions of varied length, for real models (each gets the chat template where the tokenizer has one).
BUILT_IN_PROMPTS = (
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain in two sentences why the sky is blue.",
    "List five fruits that are red.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "What is 17 times 23? Show your working.",
    "Translate 'good morning, how are you?' into Spanish, French and German.",
    "Summarise the plot of Romeo and Juliet in one paragraph for a ten-year-old.",
    "Give three tips for writing clear technical documentation, each with an example.",
    "Describe how a bicycle works, part by part, as if to someone who has never seen one.",
    "Why do cats purr?",
    "Write a limerick about a programmer who forgot to close a bracket.",
)


@dataclass(frozen=True)
class WorkloadSpec:
    """What a workload is drawn from; `build()` gives its requests. Checked when made."""

    requests: int = 12
    max_new_tokens: int = 64
    rate: float = 0.0  # requests a second (Poisson); 0: all arrive at once
    prompts: str = "synthetic"
    prompt_min: int = 8  # synthetic prompts: token counts uniform in [prompt_min, prompt_max]
    prompt_max: int = 32
    output_lengths: str = "lognormal"
    output_median: int = 0  # 0: half of max_new_tokens
    seed: int = 0

    def __post_init__(self) -> None:
        _whole(self.requests, "requests", 1, MAX_REQUESTS)
        _whole(self.max_new_tokens, "max new tokens", 1, 1_000_000)
        require(isinstance(self.rate, int | float) and not isinstance(self.rate, bool) and math.isfinite(self.rate)
                and self.rate >= 0, f"the arrival rate must be a number of requests a second >= 0 (0: all at once), "
                                    f"got {self.rate!r}")
        require(self.prompts in PROMPT_SOURCES, f"unknown prompt source {self.prompts!r}; use one of: "
                                                f"{', '.join(PROMPT_SOURCES)}")
        _whole(self.prompt_min, "the shortest prompt", 1, 1_000_000)
        _whole(self.prompt_max, "the longest prompt", self.prompt_min, 1_000_000)
        require(self.output_lengths in OUTPUT_LENGTHS, f"unknown output length distribution {self.output_lengths!r}; "
                                                       f"use one of: {', '.join(OUTPUT_LENGTHS)}")
        _whole(self.output_median, "the median output length", 0, self.max_new_tokens)
        _whole(self.seed, "the workload seed", 0, 2**63 - 1)

    @property
    def median_output(self) -> int:
        return self.output_median or max(1, self.max_new_tokens // 2)

    def build(self) -> Workload:
        """The requests, the same for the same spec on every machine (Python's seeded Mersenne Twister)."""
        draw = random.Random(self.seed)
        requests = []
        arrival = 0.0
        for index in range(self.requests):
            if self.rate > 0 and index > 0:
                arrival += draw.expovariate(self.rate)
            prompt = self._prompt(draw, index)
            requests.append(Request(index=index, prompt=prompt, max_new_tokens=self._output_length(draw),
                                    arrival_s=arrival))
        return Workload(spec=self, requests=tuple(requests))

    def _prompt(self, draw: random.Random, index: int) -> tuple[int, ...] | str:
        if self.prompts == "built-in":
            return BUILT_IN_PROMPTS[index % len(BUILT_IN_PROMPTS)]
        length = draw.randint(self.prompt_min, self.prompt_max)
        return tuple(draw.randrange(*SYNTHETIC_IDS) for _ in range(length))

    def _output_length(self, draw: random.Random) -> int:
        if self.output_lengths == "max":
            return self.max_new_tokens
        drawn = draw.lognormvariate(math.log(self.median_output), LOGNORMAL_SIGMA)
        return min(self.max_new_tokens, max(1, round(drawn)))

    def with_rate(self, rate: float) -> WorkloadSpec:
        return replace(self, rate=rate)

    def describe(self) -> str:
        arrivals = "all at once" if self.rate == 0 else f"Poisson arrivals at {self.rate:g} requests/s"
        prompts = (f"prompts of {self.prompt_min}-{self.prompt_max} tokens" if self.prompts == "synthetic"
                   else f"the {len(BUILT_IN_PROMPTS)} built-in prompts in turn")
        outputs = (f"output lengths log-normal around {self.median_output}, at most {self.max_new_tokens}"
                   if self.output_lengths == "lognormal" else f"up to {self.max_new_tokens} new tokens or EOS")
        return f"{self.requests} requests, {arrivals}; {prompts}; {outputs}; seed {self.seed}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Request:
    """One request: its prompt (token ids, or text for the chat template), how many tokens it may produce at most (it
    stops there as at an EOS), and when it arrives, in seconds from the run's start."""

    index: int
    prompt: tuple[int, ...] | str
    max_new_tokens: int
    arrival_s: float


@dataclass(frozen=True)
class Workload:
    spec: WorkloadSpec
    requests: tuple[Request, ...] = field(default_factory=tuple)

    @property
    def longest_output(self) -> int:
        return max(r.max_new_tokens for r in self.requests)

    def summary(self) -> dict[str, Any]:
        """What the report keeps of the workload beside its spec: each request's output cap and arrival."""
        return {"spec": self.spec.to_json(), "description": self.spec.describe(),
                "output_caps": [r.max_new_tokens for r in self.requests],
                "arrivals_s": [round(r.arrival_s, 6) for r in self.requests]}


def parse_list(text: str, what: str, kind: type = int) -> list[Any]:
    """"1,2,4,8" as numbers of `kind` (a sweep's values), each once, in the order given; ValueError in one line."""
    words = [w.strip() for w in str(text).split(",") if w.strip()]
    require(bool(words), f"{what} is empty: give numbers separated by commas, as 1,2,4,8")
    values = []
    for word in words:
        try:
            value = kind(word)
        except ValueError:
            raise ValueError(f"{what}: {word!r} is not a {'whole number' if kind is int else 'number'}") from None
        require(value not in values, f"{what}: {word} is given twice")
        values.append(value)
    return values


def _whole(value: Any, called: str, low: int, high: int) -> None:
    require(is_int(value) and low <= value <= high, f"{called} must be a whole number between {low} and {high}, "
                                                    f"got {value!r}")
