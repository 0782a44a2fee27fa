"""The run options table (core.request.options.RUN_OPTIONS) put to work: the CLI's flags, values by name coerced into a
`BenchRequest`, and the command line that repeats a request. Torch-free: the dashboard's server uses it too.

Every caller goes through `request_from_values`: the page with its limits, the CLI with none. What a loop gets is
checked here once (and by the dataclasses' own bounds), so the loops trust it.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.request.options import (
    CHOICE,
    CLI_ONLY,
    CONTESTANT,
    FLAG,
    HF,
    HF_DEFERRED,
    LOOPS,
    MAX_PROMPT_CHARS,
    OPTIONS,
    REAL,
    RUN_OPTION,
    RUN_OPTIONS,
    TEXT,
    WHOLE,
    BenchRequest,
    GenerationOptions,
    RunOption,
    compile_needs_static_cache,
)
from core.tuning import Tuning


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


# Run options' old names (as argv, a form or an API call may still give them) and old CLI flags, kept working.
OLD_OPTION_NAMES = {"no_kernel_trial": "no_kernel_measurement"}
OLD_FLAGS = {"no_kernel_measurement": ("--no-kernel-trial",)}


def option_defaults(gpu: bool = False) -> dict[str, Any]:
    """Every run option's default, by name: the page's and app.py's on a GPU where `gpu`, else the CLI's."""
    return {option.name: option.default_for(gpu) for option in RUN_OPTIONS}


# ------------------------------------------------------------------------------------ values -> request

def request_from_values(values: Mapping[str, Any], *, limits: Limits | None = None, deferred_with_hf: bool = False,
                        prompt_ids: list[int] | None = None, eos_token_id: int | list[int] | None = None,
                        stream: bool = True, by_flag: bool = False) -> tuple[BenchRequest, list[str]]:
    """The BenchRequest that `values` (run options by name, as a form or argv gives them; missing ones take their
    default) ask for, and a notice for each thing adjusted. ValueError with one readable line otherwise.

    `limits` caps what a page may ask for (the CLI has none); with `deferred_with_hf` (a page on CUDA) asking for
    HF generate() also runs it with its DeferredStopCheck forced on; `prompt_ids` replace the prompt text (the
    CLI's --prompt-tokens); `eos_token_id` overrides the model's EOS; `by_flag`: messages name the CLI's flags."""
    known = {OLD_OPTION_NAMES.get(name, name): value for name, value in values.items()
             if OLD_OPTION_NAMES.get(name, name) in RUN_OPTION}
    given = {**option_defaults(), **known}
    typed = {option.name: coerce(option, given[option.name], limits, option.cli_flag if by_flag else option.called)
             for option in RUN_OPTIONS}
    notices: list[str] = []
    cache, notice = static_cache_for(typed["compile"], typed["cache"])
    typed["cache"] = cache
    notices += [notice] if notice else []
    options = GenerationOptions(**{o.name: typed[o.name] for o in RUN_OPTIONS if o.part == OPTIONS},
                                eos_token_id=eos_token_id)
    batch, prompt = typed["batch"], prompt_ids or typed["prompt"]
    request = BenchRequest(prompt=[prompt] * batch if batch > 1 else prompt, options=options,
                           trials=typed["trials"], contestants=contestants(typed, deferred_with_hf), stream=stream,
                           min_seconds=typed["min_seconds"], deterministic=typed["deterministic"],
                           audit=typed["audit"], no_kernel_measurement=typed["no_kernel_measurement"])
    return request, notices


def static_cache_for(compile_mode: str, cache: str) -> tuple[str, str | None]:
    """The cache a compile mode can run with, and a notice when that meant turning the static cache on."""
    if compile_needs_static_cache(compile_mode, cache):
        return "static", "compile needs StaticCache (a dynamic cache changes shape every step): turned it on"
    return cache, None


def contestants(typed: Mapping[str, Any], deferred_with_hf: bool = False) -> tuple[str, ...]:
    """The two loops, then the contestants the flags ask for, in the table's order."""
    chosen = [name for option in RUN_OPTIONS if option.part == CONTESTANT and typed.get(option.name)
              for name in option.contestants]
    if deferred_with_hf and HF in chosen and HF_DEFERRED not in chosen:
        chosen.append(HF_DEFERRED)
    return (*LOOPS, *chosen)


def coerce(option: RunOption, value: Any, limits: Limits | None = None, called: str | None = None) -> Any:
    """`value` (from a form: a float, a numeric string...) as `option`'s kind, within its bounds and `limits`;
    a message names it `called` (default: as the page does)."""
    called = called or option.called
    if option.kind == TEXT:
        return _checked_text(value, called)
    if option.kind == FLAG:
        return as_flag(value, called)
    if option.kind == CHOICE:
        value = value or option.default
        option.check(value, called)
        return value
    number = finite_number(called, value)
    if option.kind == WHOLE:
        if number != int(number):
            raise ValueError(f"{called} must be a whole number, got {value!r}")
        number = int(number)
    high = getattr(limits, option.limit) if limits is not None and option.limit else None
    option.check(number, called, high)
    return number


_FLAG_WORDS = {"true": True, "false": False}


def as_flag(value: Any, called: str) -> bool:
    """A flag from a form (a bool) or an API call (also the words true and false, in any case); anything else ("no",
    "1", "") is refused rather than guessed at."""
    if isinstance(value, bool):
        return value
    word = value.strip().lower() if isinstance(value, str) else None
    if word in _FLAG_WORDS:
        return _FLAG_WORDS[word]
    raise ValueError(f"{called} must be true or false, got {value!r}")


def finite_number(called: str, value: Any) -> float:
    """`value` from a form or a flag (a float, a numeric string) as a finite float; a message names it `called`."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"{called} is empty: enter a number")
    if isinstance(value, bool):
        raise ValueError(f"{called} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{called} must be a number, got {quoted(value)}") from None
    if not math.isfinite(number):
        raise ValueError(f"{called} must be a finite number, got {quoted(value)}")
    return number


def quoted(value: Any) -> str:
    """A value as a message quotes it: short, one line."""
    text = f"{value:g}" if isinstance(value, float) else repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:40] + "…"


def _checked_text(text: Any, called: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"the {called} is empty: type something" + (" for the model to answer"
                                                                        if called == "prompt" else ""))
    if len(text) > MAX_PROMPT_CHARS:
        raise ValueError(f"the {called} is {len(text)} characters long; the limit here is {MAX_PROMPT_CHARS}")
    return text


# ------------------------------------------------------------------------------------------ the CLI's flags

class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line on stderr (`prog: error: ...`) and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def add_run_arguments(parser: argparse.ArgumentParser | Any, *, form_defaults: bool = False) -> None:
    """A flag per run option. With `form_defaults` (app.py) each defaults to None, "the page's default for this
    device", and the help says both defaults."""
    for option in RUN_OPTIONS:
        if option.group == CLI_ONLY and form_defaults:
            continue
        parser.add_argument(option.cli_flag, *OLD_FLAGS.get(option.name, ()), dest=option.name,
                            **_argparse_kwargs(option, form_defaults))


def _argparse_kwargs(option: RunOption, form_defaults: bool) -> dict[str, Any]:
    help_text = option.help
    if option.name in OLD_FLAGS:
        help_text += f" ({', '.join(OLD_FLAGS[option.name])}: its old name)"
    if form_defaults and option.gpu_default is not None:
        help_text += f" (default: {option.gpu_default} on a GPU, {option.default} on the CPU)"
    elif form_defaults and option.kind != FLAG:
        help_text += f" (default: {option.default})"
    if option.kind == FLAG:
        return {"action": "store_true", "default": None if form_defaults else False, "help": help_text}
    kwargs: dict[str, Any] = {"default": None if form_defaults else option.default, "help": help_text}
    if option.kind == CHOICE:
        kwargs["choices"] = option.choices
    elif option.kind in (WHOLE, REAL):
        kwargs["type"] = int if option.kind == WHOLE else float
        if option.choices:
            kwargs["choices"] = option.choices
    return kwargs


def values_from_args(args: argparse.Namespace, gpu: bool = False) -> dict[str, Any]:
    """The run options that parsed flags give, by name; a flag left at None takes the default for `gpu`."""
    given = {option.name: getattr(args, option.name) for option in RUN_OPTIONS if hasattr(args, option.name)}
    return {name: option_defaults(gpu)[name] if value is None else value for name, value in given.items()}


# -------------------------------------------------------------------------------- request -> command line

def command_words(request: BenchRequest) -> list[str]:
    """The run-option flags that ask for `request` again (table order; an `only_with` option only with its flag)."""
    words: list[str] = []
    for option in RUN_OPTIONS:
        value = request.value(option.name)
        if option.only_with and not request.value(option.only_with):
            continue
        if option.kind == FLAG:
            words += [option.cli_flag] if value else []
        elif option.name == "min_seconds":
            words += [option.cli_flag, f"{value:g}"] if value else []
        elif option.name != "prompt" or isinstance(value, str):
            words += [option.cli_flag, f"{value:g}" if option.kind == REAL else str(value)]
    return words


def cli_command(request: BenchRequest, model: str, device: str | None = None, dtype: str | None = None,
                tp: int = 1, hf_modules: bool = False, tuning: Tuning | None = None,
                prompt_tokens: int | None = None) -> str:
    """The `python -m core.bench` command that reproduces `request`, after the variables of the tuning switches that
    differ from their default in `tuning` (None: none do). `prompt_tokens`: the prompt is the CLI's fixed synthetic
    prompt of that many token ids (--prompt-tokens)."""
    differing = (tuning or Tuning()).assignments()
    assignments = [f"{name}={shell_quote(value)} " for name, value in differing.items()]
    words = [*bench_words(), "--model", model]
    words += ["--device", device] if device else []
    words += ["--dtype", dtype] if dtype else []
    words += ["--tp", str(tp)] if tp > 1 else []
    words += ["--hf-modules"] if hf_modules else []
    words += ["--prompt-tokens", str(prompt_tokens)] if prompt_tokens else []
    words += command_words(request)
    eos = request.options.eos_token_id
    for token in [] if eos is None else [eos] if isinstance(eos, int) else eos:
        words += ["--eos-token-id", str(token)]
    words += ["--stream"] if request.stream else []
    return "".join(assignments) + " ".join(shell_quote(word) for word in words)


# The benchmark's module as this process imports it: core.bench in a checkout, syncscope.core.bench installed
BENCH_MODULE = __name__.removesuffix("request.run_schema") + "bench"


def bench_words() -> list[str]:
    """The first words of every command that repeats a run: this interpreter, running the benchmark's module as this
    process imports it (BENCH_MODULE), so that the command runs where this one did."""
    return [python_command(), "-m", BENCH_MODULE]


def python_command(executable: str | None = None, cwd: str | None = None) -> str:
    """The interpreter a reproduce command starts with, as one word that runs it from the current directory: this
    process's (`sys.executable`, which has torch and this project's packages), relative where it lies inside `cwd`
    (".venv/bin/python"), else its name where PATH finds the same file, else its absolute path; "python" where the
    interpreter is not known."""
    executable = sys.executable if executable is None else executable
    if not executable:
        return "python"
    cwd = os.getcwd() if cwd is None else cwd
    path = os.path.abspath(executable)
    if os.path.commonpath([path, os.path.abspath(cwd)]) == os.path.abspath(cwd):
        relative = os.path.relpath(path, cwd)
        return relative if os.sep in relative else f".{os.sep}{relative}"  # a bare name would be looked up on PATH
    on_path = shutil.which(os.path.basename(path))
    if on_path and os.path.exists(path) and os.path.samefile(on_path, path):
        return os.path.basename(path)
    return path


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
