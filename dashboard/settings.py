"""The run form: what a user may ask for, checked into a `BenchRequest`, and the CLI command that repeats it.

No torch here: the server validates a form without importing it.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.options import (
    COMPILE_MODES,
    DEFAULT_PROMPT,
    HF,
    HF_DEFERRED,
    LOOPS,
    NO_CHECK,
    PIPELINED_AGAIN,
    TUNING_ENV,
    BenchRequest,
    GenerationOptions,
)

MAX_PROMPT_CHARS = 20_000
MAX_LAG = 64


@dataclass(frozen=True)
class Limits:
    """How much one run may ask for. `max_run_s`: a run still going after this long is stopped (None: no limit)."""

    max_new_tokens: int = 4096
    batch: int = 64
    trials: int = 20
    min_seconds: float = 60.0
    max_run_s: float | None = None

    def describe(self) -> str:
        time_limit = f", and each run is stopped after {self.max_run_s:.0f} s" if self.max_run_s else ""
        return (f"at most {self.max_new_tokens} new tokens, batch {self.batch}, {self.trials} trials and "
                f"{self.min_seconds:g} s per contestant{time_limit}")


LOCAL_LIMITS = Limits()
# When the page is reachable by others (a share link or a non-local address), one visitor must not hold the single
# device queue for long: these bound a run to a few minutes on a GPU.
EXPOSED_LIMITS = Limits(max_new_tokens=1024, batch=8, trials=10, min_seconds=10.0, max_run_s=300.0)


@dataclass(frozen=True)
class RunSettings:
    """What a user asks for; numbers may arrive as floats or strings from a form and are checked by `to_request`."""

    prompt: str = DEFAULT_PROMPT
    model: str | None = None  # None: whatever is loaded
    max_new_tokens: Any = 128
    batch: Any = 1
    ignore_eos: bool = False
    sample: bool = False
    seed: Any = 0
    temperature: Any = 1.0
    top_k: Any = 0
    top_p: Any = 1.0
    static_cache: bool = False
    compile: str = "off"
    lag: Any = 1
    streams: Any = 1
    trials: Any = 3
    min_seconds: Any = 0.0
    include_hf: bool = False
    include_no_check: bool = False
    include_aa: bool = False
    deterministic: bool = False

    def to_request(self, cuda: bool = False, limits: Limits = LOCAL_LIMITS) -> tuple[BenchRequest, list[str]]:
        """The BenchRequest this asks for, plus notices about what was adjusted; ValueError with a clear message.

        On CUDA, "include HF generate()" also runs generate() with its DeferredStopCheck forced on."""
        notices: list[str] = []
        prompt = _checked_prompt(self.prompt)
        batch = whole("batch size", self.batch, 1, limits.batch)
        compile_mode = str(self.compile or "off")
        if compile_mode not in COMPILE_MODES:
            raise ValueError(f"unknown compile mode {compile_mode!r}; use one of: {', '.join(COMPILE_MODES)}")
        static = bool(self.static_cache)
        if compile_mode != "off" and not static:
            static = True
            notices.append("compile needs StaticCache (a dynamic cache changes shape every step): turned it on")
        options = GenerationOptions(
            max_new_tokens=whole("max new tokens", self.max_new_tokens, 1, limits.max_new_tokens),
            cache="static" if static else "dynamic", compile=compile_mode,
            lag=whole("pipeline lag", self.lag, 1, MAX_LAG), streams=whole("streams", self.streams, 1, 2),
            do_sample=bool(self.sample), temperature=real("temperature", self.temperature, 0.0, 100.0, open_low=True),
            top_k=whole("top-k", self.top_k, 0, 1_000_000), top_p=real("top-p", self.top_p, 0.0, 1.0, open_low=True),
            seed=whole("seed", self.seed, 0, 2**63 - 1), ignore_eos=bool(self.ignore_eos),
        )
        hf = ([HF, HF_DEFERRED] if cuda else [HF]) if self.include_hf else []
        contestants = (*LOOPS, *([NO_CHECK] if self.include_no_check else []),
                       *([PIPELINED_AGAIN] if self.include_aa else []), *hf)
        request = BenchRequest(prompt=[prompt] * batch if batch > 1 else prompt, options=options,
                               trials=whole("trials", self.trials, 1, limits.trials), contestants=contestants,
                               stream=True, min_seconds=real("min seconds", self.min_seconds, 0.0, limits.min_seconds),
                               deterministic=bool(self.deterministic))
        request.validate()
        return request, notices


def whole(name: str, value: Any, low: int, high: int) -> int:
    """A whole number in [low, high] from an int, an integral float or a numeric string."""
    number = _number(name, value)
    if number != int(number):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if not low <= number <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {int(number)}")
    return int(number)


def real(name: str, value: Any, low: float, high: float, *, open_low: bool = False) -> float:
    """A finite number in [low, high], or (low, high] with open_low."""
    number = _number(name, value)
    if (number <= low if open_low else number < low) or number > high:
        bracket = "(" if open_low else "["
        raise ValueError(f"{name} must be in {bracket}{low:g}, {high:g}], got {number:g}")
    return number


def _number(name: str, value: Any) -> float:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"{name} is empty: enter a number")
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return number


def _checked_prompt(prompt: Any) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("the prompt is empty: type something for the model to answer")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"the prompt is {len(prompt)} characters long; the limit here is {MAX_PROMPT_CHARS}")
    return prompt


def cli_command(request: BenchRequest, prompt: str, model: str, device: str | None = None,
                dtype: str | None = None, tp: int = 1, hf_modules: bool = False,
                environ: Mapping[str, str] | None = None) -> str:
    """The `python -m core.bench` command that reproduces a dashboard run, after the tuning variables (TUNING_ENV)
    set in `environ` (default: this process's environment, which the engine processes inherit)."""
    o = request.options
    environ = os.environ if environ is None else environ
    assignments = [f"{name}={shell_quote(environ[name])} " for name in TUNING_ENV if environ.get(name, "").strip()]
    parts = ["python", "-m", "core.bench", "--model", model]
    parts += ["--device", device] if device else []
    parts += ["--dtype", dtype] if dtype else []
    parts += ["--tp", str(tp)] if tp > 1 else []
    parts += ["--hf-modules"] if hf_modules else []
    parts += ["--prompt", prompt, "--batch", str(request.batch),
              "--max-new-tokens", str(o.max_new_tokens), "--cache", o.cache, "--compile", o.compile,
              "--lag", str(o.lag), "--streams", str(o.streams), "--seed", str(o.seed)]
    if o.do_sample:
        parts += ["--sample", "--temperature", f"{o.temperature:g}", "--top-k", str(o.top_k), "--top-p", f"{o.top_p:g}"]
    parts += ["--ignore-eos"] if o.ignore_eos else []
    parts += ["--trials", str(request.trials)]
    parts += ["--min-seconds", f"{request.min_seconds:g}"] if request.min_seconds else []
    parts += ["--deterministic"] if request.deterministic else []
    flags = {NO_CHECK: "--no-check", PIPELINED_AGAIN: "--aa", HF: "--hf", HF_DEFERRED: "--hf-deferred"}
    parts += [flag for name, flag in flags.items() if name in request.contestants]
    return "".join(assignments) + " ".join(shell_quote(part) for part in [*parts, "--stream"])


def shell_quote(word: str) -> str:
    """`word` for a POSIX shell, shown as it runs: shlex.quote, except that a word holding characters that do not
    print as themselves (control, bidirectional and zero-width characters, line breaks, spaces other than U+0020)
    becomes bash's $'...' with those characters escaped, so that nothing hidden reorders or changes the command."""
    if word.isprintable():
        return shlex.quote(word)
    return "$'" + "".join(_ansi_c_escape(char) for char in word) + "'"


def _ansi_c_escape(char: str) -> str:
    if char in "\\'":
        return "\\" + char
    if char.isprintable():
        return char
    # UTF-8 bytes rather than a \u escape, which bash leaves as it is in a locale that cannot show the character.
    return "".join(f"\\x{byte:02x}" for byte in char.encode("utf-8", "surrogatepass"))
