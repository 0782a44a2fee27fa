"""A workload: N requests, each with its prompt, its output length and its arrival time, built once from a seed so that
every contestant gets the same requests, from its spec (core.request.load.WorkloadSpec). Torch-free.

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
from dataclasses import dataclass, field
from typing import Any

from core.request.load import WorkloadSpec

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


def build_workload(spec: WorkloadSpec) -> Workload:
    """The requests of `spec`, the same on every machine (Python's seeded Mersenne Twister)."""
    draw = random.Random(spec.seed)
    requests = []
    arrival = 0.0
    for index in range(spec.requests):
        if spec.rate > 0 and index > 0:
            arrival += draw.expovariate(spec.rate)
        prompt = _prompt(spec, draw, index)
        requests.append(Request(index=index, prompt=prompt, max_new_tokens=_output_length(spec, draw),
                                arrival_s=arrival))
    return Workload(spec=spec, requests=tuple(requests))


def _prompt(spec: WorkloadSpec, draw: random.Random, index: int) -> tuple[int, ...] | str:
    if spec.prompts == "built-in":
        return BUILT_IN_PROMPTS[index % len(BUILT_IN_PROMPTS)]
    length = draw.randint(spec.prompt_min, spec.prompt_max)
    return tuple(draw.randrange(*SYNTHETIC_IDS) for _ in range(length))


def _output_length(spec: WorkloadSpec, draw: random.Random) -> int:
    if spec.output_lengths == "max":
        return spec.max_new_tokens
    drawn = draw.lognormvariate(math.log(spec.median_output), LOGNORMAL_SIGMA)
    return min(spec.max_new_tokens, max(1, round(drawn)))

