"""The load options table (core.request.load.LOAD_OPTIONS) put to work, as run_schema puts RUN_OPTIONS: the CLI's
flag group, a server's limits, a form's (or argv's) values coerced into a `LoadRequest`, and the command that repeats
one. Torch-free: the dashboard's server uses it too.

Every caller goes through `request_from_values`: the page with its limits, the CLI with none, so a value is parsed
and checked one way ("8-32", "1,2,4", "true") and a message names it as its caller shows it (a flag or a label).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import core.request.load as load
from core.request.load import NAMES, OPTIONS, RANGE, REALS, WHOLES, WORKLOAD, LoadOption, LoadRequest
from core.request.options import CHOICE, FLAG, REAL, WHOLE, GenerationOptions, require
from core.request.run_schema import as_flag, bench_words, finite_number, quoted, shell_quote

SWEEP_POINTS = 16  # the points the sweeps may add to the main one on a local page
EXPOSED_SWEEP_POINTS = 4  # on a page others can reach: every contestant runs each point, so this is the multiplier


@dataclass(frozen=True)
class LoadLimits:
    """How much one run under load may ask for on a page: each option's highest value by name (the table's
    `page_high`, or `exposed_high` where others can reach the page), and the points the sweeps may add."""

    highs: Mapping[str, float]
    sweep_points: int

    @classmethod
    def local(cls) -> LoadLimits:
        return cls({o.name: o.page_high for o in load.LOAD_OPTIONS if o.page_high is not None}, SWEEP_POINTS)

    @classmethod
    def exposed(cls) -> LoadLimits:
        return cls({o.name: o.exposed_high for o in load.LOAD_OPTIONS if o.exposed_high is not None},
                   EXPOSED_SWEEP_POINTS)

    def high(self, option: LoadOption) -> float | None:
        """The highest value of `option` here: the lower of the table's bound and this page's limit."""
        limit = self.highs.get(option.name)
        if limit is None or option.high is None:
            return option.high if limit is None else limit
        return min(limit, option.high)

    def describe(self) -> str:
        named = [f"{load.load_option(name).called} {high:g}" for name, high in self.highs.items()]
        return f"at most: {', '.join(named)}, and {self.sweep_points} points added by the sweeps"


def load_defaults(gpu: bool = False) -> dict[str, Any]:
    """Every load option's default by name: a CPU page's and the CLI's, or a GPU page's where `gpu`."""
    return {option.name: option.default_for(gpu) for option in load.LOAD_OPTIONS}


# ------------------------------------------------------------------------------------------------ values -> request

def request_from_values(values: Mapping[str, Any], *, limits: LoadLimits | None = None,
                        random_weights: bool | None = None, by_flag: bool = False,
                        eos_token_id: int | list[int] | None = None) -> LoadRequest:
    """The LoadRequest that `values` (load options by name, as a form or argv gives them; a missing one takes its
    default, or its `by_model` default where `random_weights` says which weights the model has) ask for. ValueError
    with one readable line otherwise, naming the option as the CLI (`by_flag`) or the page does, and `limits` where
    one of them is the bound."""
    typed = {}
    for option in load.LOAD_OPTIONS:
        given = values.get(option.name)
        if given is None:
            given = option.by_model[not random_weights] if option.by_model and random_weights is not None \
                else option.default
        called = option.cli_flag if by_flag else option.called
        typed[option.name] = coerce(option, given, limits, called)
    request = _request(typed, eos_token_id)
    added = len(request.points()) - 1
    if limits is not None and added > limits.sweep_points:
        raise ValueError(f"the sweeps add {added} points to the main one, more than {limits.sweep_points} "
                         f"({limit_note(limits)})")
    return request


def _request(typed: Mapping[str, Any], eos_token_id: int | list[int] | None) -> LoadRequest:
    """The request of checked values: each to the part its row names."""
    parts: dict[str, dict[str, Any]] = {WORKLOAD: {}, OPTIONS: {}, load.REQUEST: {}}
    for option in load.LOAD_OPTIONS:
        value = typed[option.name]
        if option.part == WORKLOAD and option.kind == RANGE:
            parts[WORKLOAD].update(zip(option.fields, value))
        elif option.part == WORKLOAD:
            parts[WORKLOAD][(option.fields or (option.name,))[0]] = value
        else:
            parts[option.part][option.name] = value
    workload = load.WorkloadSpec(**parts[WORKLOAD])
    options = GenerationOptions(loop="naive", cache="static", max_new_tokens=workload.max_new_tokens,
                                eos_token_id=eos_token_id, **parts[OPTIONS])
    return load.LoadRequest(workload=workload, options=options, **parts[load.REQUEST])


def limit_note(limits: LoadLimits) -> str:
    return f"this server's limit: a run under load here may ask for {limits.describe()}"


def coerce(option: LoadOption, value: Any, limits: LoadLimits | None = None, called: str | None = None) -> Any:
    """`value` (from a form: a float, a numeric string, "8-32", "1,2,4", a list...) as `option`'s kind, within its
    bounds and `limits`; a message names it `called` (default: as the page does)."""
    called = called or option.called
    if option.kind == FLAG:
        return as_flag(value, called)
    if option.kind == CHOICE:
        require(value in option.choices, f"unknown {called} {quoted(value)}; use one of: "
                                         f"{', '.join(map(str, option.choices))}")
        return value
    if option.kind == NAMES:
        return _names(option, value, called)
    high = limits.high(option) if limits is not None else option.high
    note = f" ({limit_note(limits)})" if limits is not None and high != option.high else ""
    if option.kind == RANGE:
        return _range(option, value, called, high, note)
    if option.kind in (WHOLES, REALS):
        one = WHOLE if option.kind == WHOLES else REAL
        return tuple(_number(option, one, each, f"a value of {called}", high, note) for each in listed(value, called))
    return _number(option, option.kind, value, called, high, note)


def _number(option: LoadOption, kind: str, value: Any, called: str, high: float | None, note: str) -> int | float:
    number = finite_number(called, value)
    if kind == WHOLE and number != int(number):
        raise ValueError(f"{called} must be a whole number, got {quoted(value)}")
    low = option.low if option.low is not None else -float("inf")
    if not low <= number <= (high if high is not None else float("inf")):
        raise ValueError(f"{called} must be {load.bounds_text(option.low, high)}, got {quoted(value)}"
                         f"{note if high is not None and number > high else ''}")
    return int(number) if kind == WHOLE else number


def _range(option: LoadOption, value: Any, called: str, high: float | None, note: str) -> tuple[int, int]:
    """"MIN-MAX" (or one number, or a pair) as (MIN, MAX): the prompt lengths of the CLI and of the form."""
    if isinstance(value, tuple | list) and len(value) == 2:
        low_text, high_text = map(str, value)
    else:
        low_text, _, high_text = str(value if value is not None else "").strip().partition("-")
    try:
        shortest, longest = int(low_text), int(high_text or low_text)
    except ValueError:
        raise ValueError(f"{called} must be MIN-MAX, as 8-32; got {quoted(value)}") from None
    if not (option.low or 1) <= shortest <= longest:
        raise ValueError(f"{called} must be MIN-MAX with {option.low or 1} <= MIN <= MAX, got {quoted(value)}")
    if high is not None and longest > high:
        raise ValueError(f"{called} must be at most {high:g} (MAX), got {longest}{note}")
    return shortest, longest


def _names(option: LoadOption, value: Any, called: str) -> tuple[str, ...]:
    """Some of the option's choices, in the table's order ("naive,pipelined" or a list)."""
    names = [w.strip() for w in value.split(",") if w.strip()] if isinstance(value, str) else list(value or [])
    unknown = [name for name in names if name not in option.choices]
    if unknown:
        raise ValueError(f"unknown {called} {', '.join(map(quoted, unknown))}; use some of: "
                         f"{', '.join(option.choices)}")
    require(bool(names), f"choose at least one of the {called}")
    return tuple(name for name in option.choices if name in names)


def listed(value: Any, called: str) -> list[Any]:
    """A list's values ("1,2,4,8", or a list), each once, in the order given; none for an empty field."""
    words = [w.strip() for w in value.split(",") if w.strip()] if isinstance(value, str) else list(value or [])
    for index, word in enumerate(words):
        require(word not in words[:index], f"{called}: {word} is given twice")
    return words


# ------------------------------------------------------------------------------------------------ the CLI's flags

def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """A flag per load option that a single run does not have (the others are core.request.run_schema's): each
    defaults to None, "not given", so that one given without --requests can be named."""
    group = parser.add_argument_group("under load (continuous batching; --requests N turns it on)")
    for option in load.LOAD_OPTIONS:
        if option.run_flag:
            continue
        kwargs: dict[str, Any] = {"dest": option.name, "default": None, "metavar": option.metavar}
        if option.kind in (WHOLE, REAL):
            kwargs["type"] = int if option.kind == WHOLE else float
        elif option.kind == CHOICE:
            kwargs.update(choices=option.choices, metavar=None)
        elif option.kind == FLAG:
            kwargs = {"dest": option.name, "action": "store_true", "default": None}
        group.add_argument(option.cli_flag, help=_help(option), **kwargs)


def _help(option: LoadOption) -> str:
    shown = None if option.by_model or option.name == "requests" else words_of(option, option.default)
    return f"{option.help} (default: {shown})" if shown and "default" not in option.help else option.help


def given_load_flags(args: argparse.Namespace) -> list[str]:
    """The load-only flags given (those that mean nothing without --requests), in the table's order."""
    return [option.cli_flag for option in load.LOAD_OPTIONS
            if not option.run_flag and option.name != "requests" and getattr(args, option.name, None) is not None]


def values_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The load options that parsed flags give, by name (the run options' flags included); those not given left
    out, to take their default."""
    return {option.name: getattr(args, option.name) for option in load.LOAD_OPTIONS
            if getattr(args, option.name, None) is not None}


# -------------------------------------------------------------------------------- request -> command line

def words_of(option: LoadOption, value: Any) -> str:
    """`value` as the flag of `option` takes it."""
    if option.kind == RANGE:
        return f"{value[0]}-{value[1]}"
    if option.kind in (WHOLES, REALS, NAMES):
        return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def command_words(request: LoadRequest) -> list[str]:
    """The load-option flags that ask for `request` again, in the table's order: --requests, each option whose
    default depends on the model, and every other one off its default."""
    words: list[str] = []
    for option in load.LOAD_OPTIONS:
        value = request.value(option.name)
        if option.name != "requests" and not option.by_model and value == option.default:
            continue
        words += [option.cli_flag] if option.kind == FLAG else [option.cli_flag, words_of(option, value)]
    return words


def load_command(request: LoadRequest, model: str, *, device: str | None = None, dtype: str | None = None) -> str:
    """The `python -m core.bench` command that repeats this run under load."""
    words = [*bench_words(), "--model", model]
    words += ["--device", device] if device else []
    words += ["--dtype", dtype] if dtype else []
    return " ".join(shell_quote(word) for word in [*words, *command_words(request)])
