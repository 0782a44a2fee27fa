"""The audit report (`python -m core.audit --json`, core.audit.report): the fields the page reads as types, and their
check; core.audit writes more."""

from typing import Any, NotRequired, TypedDict

from core.documents.fields import all_numbers, is_number
from core.documents.kinds import ReportError
from core.request.options import is_int


class AuditReport(TypedDict):
    schema: str
    created: str
    sites: list[dict[str, Any]]
    steps: int
    decode_steps: int
    reads: int
    step_starts_ms: list[float]
    reads_per_step: list[float]
    events: list[dict[str, Any]]
    environment: dict[str, Any]
    note: NotRequired[str]


def check_audit(report: dict[str, Any]) -> None:
    """An audit report's fields that the page reads."""
    def expect(condition: bool, what: str) -> None:
        if not condition:
            raise ReportError(f"the audit report is incomplete or damaged: {what}")

    expect(isinstance(report.get("sites"), list) and all(isinstance(s, dict) for s in report["sites"]),
           "no valid 'sites'")
    for key in ("steps", "decode_steps", "reads"):
        expect(is_int(report.get(key)), f"'{key}' is not a number")
    for key in ("step_starts_ms", "reads_per_step"):
        values = report.get(key) or []
        expect(isinstance(values, list) and all_numbers(values), f"'{key}' is not a list of numbers")
    for event in report.get("events") or []:
        expect(isinstance(event, dict) and is_number(event.get("t_ms")), "an event has no time")
    for site in report["sites"]:
        expect(is_number(site.get("count")) and isinstance(site.get("line"), int), "a site has no count or line")
