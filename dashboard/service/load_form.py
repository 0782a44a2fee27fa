"""The Under load tab's settings: their defaults, and the values a form (or an API call) sends checked into the
engine's LoadSettings (engine.protocol) within this server's LoadLimits, or refused in one line before any work.

What the server can check without torch is checked here: every field's kind and bounds, the limits, and the
workload itself (core.load.workload.WorkloadSpec checks itself). The rest (core.load.protocol.LoadRequest's checks)
runs in the engine, whose ValueError ends the job with its one line. No torch or gradio here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core.load.workload import MAX_SLOTS, OUTPUT_LENGTHS, PROMPT_SOURCES, WorkloadSpec, parse_list
from core.request.options import NO_CHECK, RUN_OPTION
from core.request.run_schema import finite_number, quoted
from dashboard.service.limits import LOCAL_LOAD_LIMITS, LoadLimits
from engine.protocol import LoadSettings

# core.load.protocol.LOAD_CONTESTANTS (that module imports torch), with the names the CLI's table gives them.
LOAD_CONTESTANTS = ("naive", "pipelined", NO_CHECK, "hf-batch", "hf-batch-async")
CONTESTANT_LABELS = {"naive": "naive", "pipelined": "pipelined", NO_CHECK: "ceiling (no-check)",
                     "hf-batch": "hf-batch (transformers' continuous batching)",
                     "hf-batch-async": "hf-batch-async (transformers' async batching, CUDA)"}
MAX_RATE = 10_000.0  # requests a second: far past what any device here serves
COMPILE_CHOICES = RUN_OPTION["compile"].page_choices or RUN_OPTION["compile"].choices

# The form's fields by name (the /run_load endpoint's parameters), with their defaults on the CPU.
LOAD_DEFAULTS: dict[str, Any] = {
    "requests": 12, "slots": 4, "rate": 0.0, "max_new_tokens": 32, "prompts": "synthetic", "prompt_lengths": "8-32",
    "output_lengths": "lognormal", "output_median": 0, "workload_seed": 0, "compile": "off", "lag": 1, "trials": 2,
    "sweep_slots": "", "sweep_rates": "", "contestants": list(LOAD_CONTESTANTS), "audit": True, "solo_checks": 8,
}
GPU_DEFAULTS: dict[str, Any] = {"requests": 64, "slots": 8, "max_new_tokens": 128, "compile": "reduce-overhead",
                                "trials": 3, "sweep_slots": "1,4,16"}


def load_defaults(gpu: bool = False) -> dict[str, Any]:
    """The form's first values: those of a run on the CPU, or larger ones (and compiled) on a GPU."""
    return {**LOAD_DEFAULTS, **(GPU_DEFAULTS if gpu else {})}


def settings_from_values(values: Mapping[str, Any], limits: LoadLimits = LOCAL_LOAD_LIMITS) -> LoadSettings:
    """The LoadSettings that a form's `values` ask for (missing ones take their CPU defaults); ValueError with one
    readable line, which names this server's limit where one was passed."""
    given = {**LOAD_DEFAULTS, **{k: v for k, v in values.items() if k in LOAD_DEFAULTS}}
    check = _Checker(limits)
    max_new_tokens = check.whole(given["max_new_tokens"], "max new tokens", 1, limits.max_new_tokens,
                                 LOCAL_LOAD_LIMITS.max_new_tokens)
    prompt_min, prompt_max = check.prompt_lengths(given["prompt_lengths"])
    workload = WorkloadSpec(
        requests=check.whole(given["requests"], "requests", 1, limits.requests, LOCAL_LOAD_LIMITS.requests),
        max_new_tokens=max_new_tokens, rate=check.rate(given["rate"], "the arrival rate"),
        prompts=check.choice(given["prompts"], "prompts", PROMPT_SOURCES), prompt_min=prompt_min,
        prompt_max=prompt_max, output_lengths=check.choice(given["output_lengths"], "output lengths", OUTPUT_LENGTHS),
        output_median=check.whole(given["output_median"], "the median output length (0: half of max new tokens)", 0,
                                  max_new_tokens),
        seed=check.whole(given["workload_seed"], "the workload seed", 0, 2**63 - 1))
    slots = check.whole(given["slots"], "slots", 1, limits.slots, min(MAX_SLOTS, LOCAL_LOAD_LIMITS.slots))
    settings = LoadSettings(
        workload=workload, slots=slots, compile=check.choice(given["compile"], "compile mode", COMPILE_CHOICES),
        lag=check.whole(given["lag"], "pipeline lag", 1, int(RUN_OPTION["lag"].high or 64)),
        trials=check.whole(given["trials"], "trials", 1, limits.trials, LOCAL_LOAD_LIMITS.trials),
        contestants=check.contestants(given["contestants"]),
        sweep_slots=tuple(check.whole(b, "a slots value of the sweep", 1, limits.slots, LOCAL_LOAD_LIMITS.slots)
                          for b in check.listed(given["sweep_slots"], "the slots sweep", int)),
        sweep_rates=tuple(check.rate(r, "a rate of the sweep")
                          for r in check.listed(given["sweep_rates"], "the rate sweep", float)),
        audit=check.flag(given["audit"], "the sync audit"),
        solo_checks=check.whole(given["solo_checks"], "solo checks", 0, limits.solo_checks,
                                LOCAL_LOAD_LIMITS.solo_checks))
    added = len(settings.points()) - 1
    if added > limits.sweep_points:
        raise ValueError(f"the sweeps add {added} points to the main one, more than {limits.sweep_points} "
                         f"({check.limit_note()})")
    return settings


class _Checker:
    """Each field's check, its message naming this server's limit where the bound is one."""

    def __init__(self, limits: LoadLimits):
        self.limits = limits

    def limit_note(self) -> str:
        return f"this server's limit: a run under load here may ask for {self.limits.describe()}"

    def whole(self, value: Any, called: str, low: int, high: int, ceiling: int | None = None) -> int:
        """`value` as a whole number in [low, high]; `ceiling`: the bound without this server's limits, so that a
        message says when `high` is the server's limit."""
        number = finite_number(called, value)
        if number != int(number):
            raise ValueError(f"{called} must be a whole number, got {quoted(value)}")
        if not low <= number <= high:
            limited = ceiling is not None and high < ceiling and number > high
            note = f" ({self.limit_note()})" if limited else ""
            raise ValueError(f"{called} must be between {low} and {high}, got {quoted(value)}{note}")
        return int(number)

    def rate(self, value: Any, called: str) -> float:
        number = finite_number(called, value)
        if not 0 <= number <= MAX_RATE:
            raise ValueError(f"{called} must be between 0 (all at once) and {MAX_RATE:g} requests a second, "
                             f"got {quoted(value)}")
        return float(number)

    def choice(self, value: Any, called: str, choices: Sequence[str]) -> str:
        if value not in choices:
            raise ValueError(f"unknown {called} {quoted(value)}; use one of: {', '.join(choices)}")
        return str(value)

    def flag(self, value: Any, called: str) -> bool:
        word = value.strip().lower() if isinstance(value, str) else None
        if isinstance(value, bool) or word in ("true", "false"):
            return value if isinstance(value, bool) else word == "true"
        raise ValueError(f"{called} must be true or false, got {quoted(value)}")

    def prompt_lengths(self, text: Any) -> tuple[int, int]:
        """"MIN-MAX" (or one number) in tokens, within this server's longest prompt."""
        low, _, high = str(text if text is not None else "").strip().partition("-")
        try:
            shortest, longest = int(low), int(high or low)
        except ValueError:
            raise ValueError(f"prompt lengths must be MIN-MAX in tokens, as 8-32; got {quoted(text)}") from None
        if not 1 <= shortest <= longest:
            raise ValueError(f"prompt lengths must be MIN-MAX with 1 <= MIN <= MAX, got {quoted(text)}")
        if longest > self.limits.prompt_tokens:
            raise ValueError(f"the longest prompt must be at most {self.limits.prompt_tokens} tokens, got {longest} "
                             f"({self.limit_note()})")
        return shortest, longest

    def listed(self, text: Any, called: str, kind: type) -> list[Any]:
        """A sweep's values ("1,2,4,8"); none for an empty field."""
        if text is None or not str(text).strip():
            return []
        return parse_list(str(text), called, kind)

    def contestants(self, chosen: Any) -> tuple[str, ...]:
        names = [chosen] if isinstance(chosen, str) else list(chosen or [])
        unknown = [name for name in names if name not in LOAD_CONTESTANTS]
        if unknown:
            raise ValueError(f"unknown contestant(s) {', '.join(map(quoted, unknown))}; use some of: "
                             f"{', '.join(LOAD_CONTESTANTS)}")
        if not names:
            raise ValueError("choose at least one contestant")
        return tuple(name for name in LOAD_CONTESTANTS if name in names)




