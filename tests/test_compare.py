"""core.compare: the fair A/B protocol (warm-ups apart, alternating order, trials until each contestant is timed long
enough, an A/A control)."""

import json

from core.compare import compare
from core.options import BenchRequest, GenerationOptions
from core.report import format_table


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

    request = BenchRequest(prompt="Hello", options=GenerationOptions(max_new_tokens=8), trials=1, min_seconds=0.3)
    report = compare(tiny, request)
    for name in ("naive", "pipelined"):
        timed = sum(r["timings"]["total_ms"] for r in report["runs"] if r["contestant"] == name) / 1000
        assert timed >= 0.3
    assert report["summary"]["naive"]["trials"] > 1
