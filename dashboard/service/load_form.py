"""The Under load tab's values: each load option's first value on the form, and the values a form (or an API call)
sends checked into a core.request.load.LoadRequest within this server's LoadLimits, or refused in one line before
any work. Both come from the load options table (core.request.load.LOAD_OPTIONS) through
core.request.load_schema, as the CLI's flags do. No torch or gradio here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import core.request.load as load
from core.request.load import NAMES, RANGE, REALS, WHOLES, LoadRequest
from core.request.load_schema import LoadLimits, load_defaults, request_from_values, words_of
from dashboard.service.limits import LOCAL_LOAD_LIMITS


def form_defaults(gpu: bool = False) -> dict[str, Any]:
    """The form's first values by option name, as its fields hold them: a sweep or the prompt lengths as text
    ("1,4,16", "8-32"), the contestants as a list; those of a CPU page, or larger ones (and compiled) on a GPU."""
    defaults = load_defaults(gpu)
    return {option.name: form_value(option, defaults[option.name]) for option in load.LOAD_OPTIONS}


def form_value(option: load.LoadOption, value: Any) -> Any:
    if option.kind in (WHOLES, REALS, RANGE):
        return words_of(option, value)
    return list(value) if option.kind == NAMES else value


def request_from_form(values: Mapping[str, Any], limits: LoadLimits = LOCAL_LOAD_LIMITS) -> LoadRequest:
    """The LoadRequest that a form's `values` ask for (missing ones take a CPU page's defaults); ValueError with one
    readable line, which names this server's limit where one was the bound."""
    return request_from_values(values, limits=limits)
