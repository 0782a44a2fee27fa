"""The load report (`python -m core.bench --requests N --json`, core.load.report): its keys as types, and its check.
Its `load` section is a `LoadSection` with one `LoadContestant` per contestant at each point."""

from typing import Any, NotRequired, TypedDict

from core.documents.fields import are_sentences, expect, expect_numbers, is_name, is_number
from core.request.options import is_int


class LoadRequestResult(TypedDict):
    """One request of a run under load (core.load.batching.RequestResult.to_json): ms from the run's start."""

    index: int
    arrival_ms: float
    admitted_ms: float | None
    first_token_ms: float | None  # None where the contestant learns its tokens only at the end (the ceiling)
    finished_ms: float | None
    prompt_tokens: int
    tokens: int
    slot: int | None
    first_step: int | None
    last_step: int | None
    released_step: int | None


class LoadContestant(TypedDict):
    """One contestant at one point (core.load.stats.summarize_trials): medians over its trials, the requests of its
    median trial, and whether each request's tokens equal its solo decode."""

    tokens_per_s: float
    requests_per_s: float
    total_ms: float
    ttft_ms_p50: float | None
    ttft_ms_p99: float | None
    tpot_ms_p50: float | None
    tpot_ms_p99: float | None
    steps: float | None
    slot_steps: float | None
    wasted_slot_steps: float | None
    host_wait_us_per_step: float | None
    device_idle_us_per_step: float | None
    trials: int
    per_trial: list[dict[str, Any]]
    requests: list[LoadRequestResult]
    identical_to_solo: bool | None  # None when no request was checked
    repeatable: bool
    reads_per_decode_step: NotRequired[float | None]  # only where the sync audit ran: every wait, copies included
    copies_per_decode_step: NotRequired[float | None]  # of those, blocking copies to the device
    kernel_busy_fraction: NotRequired[float | None]  # only where the kernel measurement ran
    sync_audit: NotRequired[dict[str, Any]]
    kernel_measurement: NotRequired[dict[str, Any]]


class LoadPoint(TypedDict):
    slots: int
    rate: float
    workload: dict[str, Any]
    contestants: dict[str, LoadContestant]


class LoadInterruption(TypedDict):
    """What an interrupted run under load left out (core.load.protocol: the point being run when it was cut is
    left out whole, so every point in the report has every contestant's trials)."""

    by: str  # "interrupt" (a signal) or "cancel" (the page's Cancel)
    point: dict[str, Any] | None  # the point cut: {"slots", "rate"}
    phase: str  # the phase cut (core.phases' id), or "set-up" (the point's slots being built)
    contestant: str | None  # the contestant whose phase was cut, None in the set-up
    points_done: int
    points_planned: int
    points_left_out: list[dict[str, Any]]  # {"slots", "rate"} of each point not in the report, the cut one first
    signal: NotRequired[str]  # the CLI's: SIGINT or SIGTERM


class LoadSection(TypedDict):
    workload: dict[str, Any]
    request: NotRequired[dict[str, Any]]  # core.request.load.LoadRequest.settings(): every load option by name
    slots: int
    options: dict[str, Any]
    notices: list[str]
    cache_len: int
    solo_checked: int
    contestants: dict[str, LoadContestant]  # the main point's (the request's B and rate)
    points: list[LoadPoint]  # the main point first, then the sweeps'
    sweep: str | None  # "slots", "rate", "slots+rate" or None
    interrupted: NotRequired[LoadInterruption]  # only in the report of a run cut after its main point


class LoadReport(TypedDict):
    schema: str
    created: str
    environment: dict[str, Any]
    model: dict[str, Any]
    command: str
    load: LoadSection
    wall_s: NotRequired[float]


LOAD_NUMBERS = ("tokens_per_s", "requests_per_s", "total_ms", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50",
                "tpot_ms_p99", "steps", "slot_steps", "wasted_slot_steps", "host_wait_us_per_step",
                "device_idle_us_per_step", "reads_per_decode_step", "copies_per_decode_step", "kernel_busy_fraction")
LOAD_REQUEST_NUMBERS = ("arrival_ms", "admitted_ms", "first_token_ms", "finished_ms", "prompt_tokens", "tokens", "slot",
                        "first_step", "last_step", "released_step")


def check_load(report: dict[str, Any]) -> None:
    """A load report's fields that the CLI's text, the page and Replay read."""
    section = report.get("load")
    expect(isinstance(section, dict), "no valid 'load' section")
    expect(isinstance(report.get("model"), dict) and isinstance(report["model"].get("spec"), str),
           "it does not name its model (no 'model.spec')")
    expect(isinstance(report["environment"], dict), "its 'environment' section is not an object")
    expect(isinstance(section.get("workload"), dict), "its load section has no workload")
    expect(isinstance(section.get("options"), dict), "its load section's options are not an object")
    expect(is_int(section.get("slots")) and is_int(section.get("cache_len")), "its load section has no slots")
    points = section.get("points")
    expect(isinstance(points, list) and bool(points), "its load section has no points")
    for index, point in enumerate(points):
        where = f"load.points[{index}]"
        expect(isinstance(point, dict) and is_int(point.get("slots")) and is_number(point.get("rate")),
               f"{where} has no slots and rate")
        _check_contestants(point.get("contestants"), where)
    _check_contestants(section.get("contestants"), "load")
    expect(are_sentences(section.get("notices", [])), "load.notices are not sentences")
    if "interrupted" in section:
        _check_interruption(section["interrupted"])


def _check_interruption(cut: Any) -> None:
    expect(isinstance(cut, dict) and cut.get("by") in ("interrupt", "cancel"),
           "load.interrupted does not say what cut the run")
    expect(is_int(cut.get("points_done")) and is_int(cut.get("points_planned")),
           "load.interrupted does not count its points")
    expect(isinstance(cut.get("points_left_out"), list)
           and all(isinstance(p, dict) and is_int(p.get("slots")) and is_number(p.get("rate"))
                   for p in cut["points_left_out"]), "load.interrupted.points_left_out is not a list of points")


def _check_contestants(contestants: Any, where: str) -> None:
    expect(isinstance(contestants, dict) and bool(contestants), f"{where} has no contestants")
    for name, entry in contestants.items():
        expect(is_name(name), f"{where}: {str(name)[:40]!r} is not a contestant name")
        expect(isinstance(entry, dict) and is_number(entry.get("tokens_per_s")),
               f"{where}.contestants.{name} has no tokens_per_s number")
        expect_numbers(entry, LOAD_NUMBERS, f"{where}.contestants.{name}")
        requests = entry.get("requests")
        expect(isinstance(requests, list) and all(isinstance(r, dict) for r in requests),
               f"{where}.contestants.{name}.requests is not a list")
        for index, request in enumerate(requests):
            expect_numbers(request, LOAD_REQUEST_NUMBERS, f"{where}.contestants.{name}.requests[{index}]")
        for key in ("identical_to_solo", "repeatable"):
            expect(entry.get(key) is None or isinstance(entry.get(key), bool),
                   f"{where}.contestants.{name}.{key} is not true or false")
