"""core.compare: the fair A/B protocol (warm-ups apart, alternating order, trials until each contestant is timed long
enough, an A/A control)."""

import json

from core.compare import compare
from core.report.build import format_table
from core.request.options import BenchRequest, GenerationOptions


def test_compare_alternates_order_and_checks_identity(tiny):
    events = []
    request = BenchRequest(prompt="Hello there", options=GenerationOptions(max_new_tokens=8, ignore_eos=True),
                           trials=3, contestants=("naive", "pipelined", "hf"))
    report = compare(tiny, request, on_event=events.append)
    orders = [[r["contestant"] for r in report["runs"] if r["trial"] == t] for t in range(3)]
    assert orders[0] == ["naive", "pipelined", "hf"] and orders[1] == ["hf", "pipelined", "naive"]
    assert report["all_identical"] is True
    assert set(report["summary"]) == {"naive", "pipelined", "hf"}
    assert report["summary"]["naive"]["trials"] == 3
    assert report["ratios"]["pipelined/naive"] > 0
    assert set(report["warmup"]) == {"naive", "pipelined", "hf"}
    assert {e["type"] for e in events} >= {"phase", "tokens", "run"}
    assert "naive" in format_table(report)
    json.dumps(report)  # JSON-ready


def test_min_seconds_adds_rounds_until_each_contestant_ran_that_long(tiny):
    from core.compare import compare

    options = GenerationOptions(max_new_tokens=8)
    # Scaled to this machine: three of its own trials' time, so that one trial cannot be enough on a busy machine.
    one = compare(tiny, BenchRequest(prompt="Hello", options=options, trials=1))
    least = 3 * max(r["timings"]["total_ms"] for r in one["runs"]) / 1000
    report = compare(tiny, BenchRequest(prompt="Hello", options=options, trials=1, min_seconds=least))
    for name in ("naive", "pipelined"):
        timed = sum(r["timings"]["total_ms"] for r in report["runs"] if r["contestant"] == name) / 1000
        assert timed >= least
    assert report["summary"]["naive"]["trials"] > 1


def test_an_interrupt_after_two_rounds_keeps_the_finished_rounds_in_a_report_that_opens(tiny):
    import pytest

    from core.compare import InterruptedRun
    from dashboard.service.page_record import open_report

    request = BenchRequest(prompt="Hello", options=GenerationOptions(max_new_tokens=4, ignore_eos=True), trials=6)
    seen = []

    def interrupt_in_round_three(event):
        seen.append(event)
        if event.get("phase") == "trial" and event.get("trial") == 2 and event["contestant"] == "pipelined":
            raise KeyboardInterrupt  # after round 3's naive run: that run is left out

    with pytest.raises(InterruptedRun) as stopped:
        compare(tiny, request, on_progress=interrupt_in_round_three)
    report = stopped.value.report
    assert report["interrupted"] is True
    assert report["interruption"] == {"phase": "trial", "trials_done": 2, "trials_planned": 6, "runs_left_out": 1,
                                      "by": "interrupt"}
    assert sorted((r["contestant"], r["trial"]) for r in report["runs"]) == [
        ("naive", 0), ("naive", 1), ("pipelined", 0), ("pipelined", 1)]
    assert report["summary"]["naive"]["trials"] == 2 and report["verdict"]["call"] == "too-few-trials"
    assert [e["done"] for e in seen if e["type"] == "round"] == [1, 2]
    assert "tokens" not in {e["type"] for e in seen}, "progress alone does not stream the runs' tokens"
    assert open_report(json.dumps(report)).report["interrupted"] is True


def test_a_cancel_after_two_rounds_keeps_the_finished_rounds_as_the_interrupt_does(tiny):
    """The page's Cancel (should_stop) stops within a step, as before; after a full round the report of the finished
    rounds comes with it, marked cut short, as a Ctrl-C of the CLI keeps them."""
    import pytest

    from core.compare import CancelledRun
    from core.request.options import Cancelled

    request = BenchRequest(prompt="Hello", options=GenerationOptions(max_new_tokens=4, ignore_eos=True), trials=6)
    rounds: list[int] = []
    with pytest.raises(CancelledRun) as stopped:
        compare(tiny, request, should_stop=lambda: len(rounds) >= 2,
                on_progress=lambda event: rounds.append(event["done"]) if event["type"] == "round" else None)
    assert isinstance(stopped.value, Cancelled), "whoever catches Cancelled still stops as before"
    report = stopped.value.report
    assert report["interrupted"] is True and report["interruption"]["by"] == "cancel"
    assert report["interruption"]["trials_done"] == 2 and len(report["runs"]) == 4
    assert report["summary"]["pipelined"]["trials"] == 2
    with pytest.raises(Cancelled) as early:
        compare(tiny, request, should_stop=lambda: True)
    assert not isinstance(early.value, CancelledRun), "before a full round there is nothing to keep"


def test_an_interrupt_before_the_first_full_round_is_the_interrupt_itself(tiny):
    import pytest

    from core.compare import InterruptedRun

    def interrupt_in_round_one(event):
        if event.get("phase") == "trial" and event["contestant"] == "pipelined":
            raise KeyboardInterrupt

    request = BenchRequest(prompt="Hello", options=GenerationOptions(max_new_tokens=4), trials=3)
    with pytest.raises(KeyboardInterrupt) as stopped:
        compare(tiny, request, on_progress=interrupt_in_round_one)
    assert not isinstance(stopped.value, InterruptedRun)


def test_an_interrupt_during_the_audit_keeps_every_trial_and_says_the_audit_is_missing(tiny):
    import pytest

    from core.compare import InterruptedRun

    def interrupt_the_audit(event):
        if event.get("phase") == "audit":
            raise KeyboardInterrupt

    request = BenchRequest(prompt="Hello", options=GenerationOptions(max_new_tokens=4), trials=2, audit=True)
    with pytest.raises(InterruptedRun) as stopped:
        compare(tiny, request, on_progress=interrupt_the_audit)
    report = stopped.value.report
    assert report["interruption"]["phase"] == "audit" and report["interruption"]["trials_done"] == 2
    assert "sync_audit" not in report and len(report["runs"]) == 4
