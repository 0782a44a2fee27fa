"""What a document's check asks of a field: a number, a list of numbers, a contestant's name; and the one sentence a
damaged field is refused with (core.documents.kinds.ReportError)."""

import json
import math
import re
from typing import Any

from core.documents.kinds import ReportError
from core.text import clip

_NAME = re.compile(r"[\w.+-]{1,64}")
_PLAIN_NUMBERS = frozenset((int, float))


def expect(condition: bool, problem: str) -> None:
    if not condition:
        raise ReportError(f"the report is incomplete or damaged: {clip(problem)}")  # it may quote the file


def expect_numbers(section: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    """Each of `keys` in `section` is absent, null, a number, or a list of numbers and nulls; else a ReportError that
    names the field and its value."""
    for key in keys:
        value = section.get(key)
        items = value if isinstance(value, list) else [value]
        bad = next((v for v in items if v is not None and not is_number(v)), None)
        if bad is not None:
            raise ReportError(f"the report is incomplete or damaged: {clip(f'{where}.{key}', 120)} is "
                              f"{clip(json.dumps(bad), 40)}, not a number")


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def all_numbers(values: list[Any]) -> bool:
    """Whether every item of `values` is `is_number`. A report's step times are up to a million numbers, and the
    committed reports 1.1 million together (2 s a load of them all, item by item): a list of plain ints and floats
    whose sum is finite holds no inf or nan, which C answers at once; any other list is asked item by item."""
    try:
        if set(map(type, values)) <= _PLAIN_NUMBERS and math.isfinite(sum(values)):
            return True
    except OverflowError:  # an int too large for a float: item by item, as before
        pass
    return all(is_number(v) for v in values)


def is_name(value: Any) -> bool:
    return isinstance(value, str) and bool(_NAME.fullmatch(value))


def are_sentences(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(n, str) for n in value)
