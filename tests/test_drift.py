"""Two runs judged with an interval on B / A (core.report.diff.diff_reports): the Welch interval, the drift
allowance per device kind (core.measure.drift), the control contestant, the calls and their words; and the A/A case of
issue 39 on the CPU."""

from __future__ import annotations

import copy
import math
import random
import re
import statistics

import pytest

from core.measure.drift import NOT_COMPARABLE, PROCESS_DRIFT, device_kind, drift_between, not_comparable
from core.measure.stats import welch_ratio_interval, widened
from core.report.diff import CALLS, diff_reports, diff_text
from core.report.explain import plus_minus
from core.request.options import RUN_OPTION
from core.tuning import SWITCHES, Tuning


def report(rates: dict[str, list[float]], device: str = "cuda", keys: int | None = None, command: str | None = None,
           **options) -> dict:
    """A report as core.bench writes it, with what diff_reports reads: per-trial rates of each contestant (trials
    of one round share an index), the summary's medians, the options, the device and the static cache's keys."""
    clock = "host" if device == "cpu" else "cuda-events"
    opts = {"loop": "naive", "max_new_tokens": 64, "cache": "static" if keys else "dynamic", "compile": "off",
            "lag": 1, "streams": 1, **options}
    runs = [{"contestant": name, "trial": trial, "order": order,
             "timings": {"decode_tokens_per_s": rate, "tokens_per_s": rate * 0.9, "total_ms": 64e3 / rate,
                         "clock": clock}}
            for order, (name, trial, rate) in enumerate((name, trial, rate) for name, values in rates.items()
                                                        for trial, rate in enumerate(values))]
    return {"schema": "syncscope.bench/1", "model": {"spec": "tiny-random"},
            "environment": {"device": device, "gpu": "NVIDIA H200" if device == "cuda" else None},
            "request": {"prompt": "Hello", "options": opts, "trials": 3, "contestants": list(rates)},
            "summary": {name: {"decode_tokens_per_s": statistics.median(values),
                               "tokens_per_s": statistics.median(values) * 0.9} for name, values in rates.items()},
            "runs": runs, "identity": {"keys": keys}, "command": command}


STEADY = [500.0, 502.0, 498.0]


def scaled(values: list[float], factor: float) -> list[float]:
    return [v * factor for v in values]


def rows(result: dict) -> dict[str, dict]:
    return {row["name"]: row for row in result["contestants"]}


# ------------------------------------------------------------------------------------------- the interval

def test_the_welch_interval_matches_the_textbook_formula():
    ratio, low, high = welch_ratio_interval([0.0, 0.1, 0.2], [0.3, 0.5, 0.7])
    # var/n: 0.01/3 and 0.04/3; Welch-Satterthwaite df 2.94, rounded down to 2: t 4.303
    half = 4.303 * math.sqrt(0.01 / 3 + 0.04 / 3)
    assert ratio == pytest.approx(math.exp(0.4))
    assert (low, high) == pytest.approx((math.exp(0.4 - half), math.exp(0.4 + half)))
    assert welch_ratio_interval([0.0, 0.1, 0.2], [0.3, 0.5, 0.7], confidence=0.99)[2] > high


def test_the_interval_of_a_over_b_is_that_of_b_over_a_turned_round():
    ab = welch_ratio_interval([0.0, 0.2, 0.1], [0.4, 0.3])
    ba = welch_ratio_interval([0.4, 0.3], [0.0, 0.2, 0.1])
    assert ab == pytest.approx((1 / ba[0], 1 / ba[2], 1 / ba[1]))
    with pytest.raises(ValueError, match="two values a side"):
        welch_ratio_interval([0.1], [0.2, 0.3])


def test_two_samples_without_spread_give_a_point():
    assert welch_ratio_interval([0.0, 0.0], [0.1, 0.1]) == pytest.approx((math.exp(0.1),) * 3)


@pytest.mark.parametrize("trials", [3, 5])
def test_simulated_runs_of_one_rate_are_called_under_5_percent_of_the_time(trials):
    """The interval alone (no allowance): lognormal trial noise, a different noise in each run."""
    rng = random.Random(39 + trials)
    called = 0
    for _ in range(4000):
        a = [rng.gauss(0, 0.03) for _ in range(trials)]
        b = [rng.gauss(0, rng.choice((0.01, 0.06))) for _ in range(trials)]
        _, low, high = welch_ratio_interval(a, b)
        called += low > 1 or high < 1
    assert called / 4000 <= 0.055  # 5% by design, at most; rounding the df down keeps it under


def test_widening_divides_the_low_end_and_multiplies_the_high_end():
    assert widened(0.9, 1.2, 0.1) == pytest.approx((0.9 / 1.1, 1.32))
    assert widened(0.9, 1.2, 0.0) == (0.9, 1.2)


# ------------------------------------------------------------------------------------------- the drift figures

def test_a_gpu_has_both_figures_and_says_where_they_were_measured():
    assert set(PROCESS_DRIFT) == {"cuda"}, "the CPU's drift is the load of whatever else runs there: no figure"
    for figure in PROCESS_DRIFT.values():
        assert 0 < figure.against_control < figure.rates and "process_drift" in figure.measured


def test_the_figure_for_two_reports_is_their_kind_and_none_where_no_figure_is_measured():
    cuda, cpu = {"device": "cuda", "gpu": "NVIDIA H200"}, {"device": "cpu"}
    assert drift_between(cuda, {"device": "cuda:0"}) == ("cuda", PROCESS_DRIFT["cuda"])
    assert drift_between(cpu, cpu) == ("cpu", None)
    for a, b in ((cpu, cuda), (None, cpu), ({}, {})):
        assert drift_between(a, b) == (None, None)
    assert not_comparable(cpu, cuda) == not_comparable(cpu, cpu) == NOT_COMPARABLE["cpu"]
    assert not_comparable({}, cuda) == NOT_COMPARABLE[None]
    assert "benchmarks/process_drift.py" in NOT_COMPARABLE["cpu"], "how to measure one's own machine"
    assert (device_kind({"device": "mps"}), device_kind("cpu")) == (None, None)


def test_only_the_pipelined_loops_options_leave_the_naive_loop_alone():
    affecting = {option.name for option in RUN_OPTION.values() if option.affects}
    assert affecting == {"lag", "streams"}
    assert RUN_OPTION["lag"].affects == ("pipelined", "pipelined-again")


# ------------------------------------------------------------------------------------------- the control

def test_when_only_lag_differs_naive_is_the_control_and_its_drift_is_not_called():
    a = report({"naive": STEADY, "pipelined": STEADY})
    b = report({"naive": scaled(STEADY, 0.7), "pipelined": scaled(STEADY, 0.7)}, lag=2)
    result = diff_reports(a, b)
    assert result["differs"] == ["lag"] and result["control"] == "naive" and result["no_control"] is None
    naive, pipelined = rows(result)["naive"], rows(result)["pipelined"]
    assert naive["control"] and naive["call"] == "control" and naive["ratio"] == pytest.approx(0.7)
    assert naive["interval_used"] == naive["interval"]  # the control's B/A is the drift itself: nothing added
    assert pipelined["basis"] == "against control" and pipelined["estimate"] == pytest.approx(1.0)
    assert pipelined["call"] == "within noise", "both loops fell alike: the machine, not lag"
    assert pipelined["allowance"] == PROCESS_DRIFT["cuda"].against_control
    assert result["note"].startswith("Control: naive (lag cannot change it)")


def test_against_the_control_a_real_change_of_the_pipelined_loop_is_called():
    a = report({"naive": STEADY, "pipelined": STEADY})
    b = report({"naive": scaled(STEADY, 0.8), "pipelined": scaled(STEADY, 0.8 * 1.25)}, streams=2)
    pipelined = rows(diff_reports(a, b))["pipelined"]
    assert pipelined["call"] == "faster" and pipelined["estimate"] == pytest.approx(1.25)
    low, high = pipelined["interval_used"]
    assert low > 1 and (low, high) == pytest.approx(widened(*pipelined["interval"], pipelined["allowance"]))
    slower = rows(diff_reports(b, a))["pipelined"]
    assert slower["call"] == "slower" and slower["estimate"] == pytest.approx(0.8)


def test_a_setting_that_changes_every_loop_leaves_no_control_and_widens_by_the_device_drift():
    a = report({"naive": STEADY, "pipelined": STEADY})
    b = report({"naive": scaled(STEADY, 1.1), "pipelined": scaled(STEADY, 1.5)}, compile="default")
    result = diff_reports(a, b)
    assert result["control"] is None and result["no_control"] == "compile differs, which can change every contestant"
    naive, pipelined = rows(result)["naive"], rows(result)["pipelined"]
    assert naive["basis"] == pipelined["basis"] == "drift allowance"
    assert naive["allowance"] == PROCESS_DRIFT["cuda"].rates
    assert naive["interval"][0] > 1 and naive["call"] == "within noise", "10% is inside what two processes differ by"
    assert pipelined["call"] == "faster"
    assert f"differ by up to {PROCESS_DRIFT['cuda'].rates:.0%} on a GPU" in result["note"]


def test_lag_that_changes_the_static_cache_leaves_no_control():
    a = report({"naive": STEADY, "pipelined": STEADY}, keys=256)
    same = diff_reports(a, report({"naive": STEADY, "pipelined": STEADY}, keys=256, lag=2))
    assert same["control"] == "naive"
    longer = diff_reports(a, report({"naive": STEADY, "pipelined": STEADY}, keys=512, lag=64))
    assert longer["control"] is None and "(256 keys in A, 512 in B)" in longer["no_control"]
    unknown = diff_reports(a, report({"naive": STEADY, "pipelined": STEADY}, keys=None, lag=2, cache="static"))
    assert unknown["control"] is None and "do not say" in unknown["no_control"]


def test_with_the_same_settings_naive_is_the_control():
    a = report({"naive": STEADY, "pipelined": STEADY})
    result = diff_reports(a, copy.deepcopy(a))
    assert result["differs"] == [] and result["control"] == "naive"
    assert [row["call"] for row in result["contestants"]] == ["control", "within noise"]
    assert "(the settings are the same)" in result["note"]


def test_no_check_is_the_control_where_naive_did_not_run():
    a = report({"pipelined": STEADY, "no-check": STEADY})
    assert diff_reports(a, report({"pipelined": STEADY, "no-check": STEADY}, lag=3))["control"] == "no-check"


def test_generate_has_its_own_decode_path_and_keeps_the_drift_allowance_beside_a_control():
    a = report({"naive": STEADY, "pipelined": STEADY, "hf": STEADY})
    b = report({"naive": STEADY, "pipelined": STEADY, "hf": scaled(STEADY, 1.05)}, lag=2)
    result = diff_reports(a, b)
    hf = rows(result)["hf"]
    assert result["control"] == "naive" and hf["basis"] == "drift allowance" and hf["call"] == "within noise"
    assert hf["metric"] == "decode_tokens_per_s" and "hf, with a decode path of its own" in result["note"]


def test_every_tuning_switch_is_a_setting():
    a = report({"naive": STEADY, "pipelined": STEADY})
    a["environment"]["tuning"] = Tuning().as_report()
    for switch in SWITCHES:
        b = copy.deepcopy(a)
        b["environment"]["tuning"][switch.key] = switch.choices[-1] if switch.choices else {"max_autotune": False}
        result = diff_reports(a, b)
        assert result["differs"] == [switch.variable] and result["control"] is None, switch.key
    assert diff_reports(a, report({"naive": STEADY, "pipelined": STEADY}))["differs"] == [], \
        "a report from before the tuning was recorded, with no switch set: every switch at its default"


def test_a_switch_of_an_old_reports_command_is_a_setting_and_so_is_one_removed_since():
    tp = "SYNCSCOPE_TP_BARRIER=asm python -m core.bench --model tiny-random"
    a = report({"naive": STEADY, "pipelined": STEADY}, command="python -m core.bench --model tiny-random")
    result = diff_reports(a, report({"naive": STEADY, "pipelined": STEADY}, command=tp))
    assert result["differs"] == ["SYNCSCOPE_TP_BARRIER"] and result["control"] is None
    off = "SYNCSCOPE_APPEND_IN_ATTENTION=off python -m core.bench --model tiny-random"
    on = "SYNCSCOPE_APPEND_IN_ATTENTION=on python -m core.bench --model tiny-random"
    a = report({"naive": STEADY, "pipelined": STEADY}, command=off)
    result = diff_reports(a, report({"naive": STEADY, "pipelined": STEADY}, command=on))
    assert result["differs"] == ["SYNCSCOPE_APPEND_IN_ATTENTION"] and result["control"] is None
    assert [(row["a"], row["b"]) for row in result["settings"] if row["differs"]] == [("off", "on")]
    today = report({"naive": STEADY, "pipelined": STEADY})
    today["environment"]["tuning"] = Tuning().as_report()
    assert diff_reports(a, today)["differs"] == [], "off, its default, is what runs now"
    assert diff_reports(report({"naive": STEADY, "pipelined": STEADY}, command=on), today)["differs"] == [
        "SYNCSCOPE_APPEND_IN_ATTENTION"]


def test_an_option_added_after_a_report_was_written_ran_as_its_default_there():
    new = report({"naive": STEADY, "pipelined": STEADY}, nvtx=False)
    old = copy.deepcopy(new)
    del old["request"]["options"]["nvtx"]
    assert diff_reports(old, new)["differs"] == []


# ------------------------------------------------------------------------------------------- too little to judge

def test_too_few_trials_says_how_many_each_run_had():
    a = report({"naive": STEADY, "pipelined": STEADY})
    b = report({"naive": STEADY[:1], "pipelined": STEADY[:1]}, lag=2)
    result = diff_reports(a, b)
    assert result["control"] is None and "3 trials in both runs" in result["no_control"]
    naive = rows(result)["naive"]
    assert naive["call"] == "too few trials" and naive["interval_used"] is None
    assert "from 3 trials in A and 1 in B: too few trials" in naive["sentence"]


def test_an_old_report_without_per_trial_runs_compares_with_noise_unknown():
    a = report({"naive": STEADY, "pipelined": STEADY})
    old = copy.deepcopy(a)
    del old["runs"], old["identity"], old["command"]
    result = diff_reports(old, a)
    assert {row["call"] for row in result["contestants"]} == {"noise unknown"}
    assert "A kept no per-trial rates" in rows(result)["naive"]["sentence"]
    assert "noise unknown" in diff_text(result)


def test_a_contestant_without_a_rate_is_no_data():
    a = report({"naive": STEADY, "pipelined": STEADY})
    b = copy.deepcopy(a)
    b["summary"]["pipelined"] = {"decode_tokens_per_s": None, "tokens_per_s": None}
    assert rows(diff_reports(a, b))["pipelined"]["call"] == "no data"


def test_every_call_is_one_of_the_words():
    a = report({"naive": STEADY, "pipelined": STEADY})
    for b in (report({"naive": STEADY, "pipelined": scaled(STEADY, 2)}, compile="default"),
              report({"naive": STEADY[:2], "pipelined": STEADY[:2]}), copy.deepcopy(a)):
        assert all(row["call"] in CALLS for row in diff_reports(a, b)["contestants"])


# ------------------------------------------------------------------------------------------- the words

def test_the_cli_prints_each_contestants_sentence_and_how_they_were_judged():
    a = report({"naive": STEADY, "pipelined": STEADY})
    b = report({"naive": scaled(STEADY, 0.5), "pipelined": scaled(STEADY, 0.5)}, lag=4)
    result = diff_reports(a, b)
    text = diff_text(result)
    assert result["note"] in text and all(row["sentence"] in text for row in result["contestants"])
    naive, pipelined = rows(result)["naive"], rows(result)["pipelined"]
    assert naive["confidence"] == 0.95, "timed on the GPU's clock"
    assert naive["sentence"].startswith("naive is the control: its B/A 0.500x (95% interval")
    assert naive["sentence"].endswith("is the drift between the two runs, and the others are judged against it.")
    assert pipelined["sentence"].startswith("pipelined: B/A 0.500x, 1.000x against the control naive (95% interval "
                                            "of the ratio to the control")
    assert pipelined["sentence"].endswith("on a GPU): within noise, no change shown.")


def test_two_cpu_runs_are_not_called_and_print_no_interval_wider_than_the_runs_own():
    """Issue 60: a fixed factor of 17, measured on another machine, gave CPU diffs intervals of 0.009-91x."""
    rng = random.Random(60)
    noisy = {name: [500 * math.exp(rng.gauss(0, 0.15)) for _ in range(3)] for name in ("naive", "pipelined")}
    a = report(noisy, device="cpu")
    b = report({name: scaled(values, 0.6) for name, values in noisy.items()}, device="cpu")
    for result in (diff_reports(a, b), diff_reports(a, report(noisy, device="cpu", compile="default"))):
        text = diff_text(result)
        widths = [float(high) / float(low) for low, high in re.findall(r"(\d+\.\d+)-(\d+\.\d+)x", text)]
        assert max(widths, default=1.0) < 10, text
        assert {row["call"] for row in result["contestants"]} <= {"control", "not comparable"}
        assert result["drift"]["rates"] is None and "cannot be compared at this precision" in result["note"]
        assert "process_drift.py" in result["note"], "the note names how to measure this machine's drift"
    naive, pipelined = rows(diff_reports(a, b))["naive"], rows(diff_reports(a, b))["pipelined"]
    assert naive["call"] == "control" and naive["interval_used"] == naive["interval"], "the trials' own interval"
    assert "judged against it" not in naive["sentence"]
    assert pipelined["interval_used"] is None and pipelined["sentence"] == (
        "pipelined: B/A 0.600x, 1.000x against the control naive; not called: no drift between two processes is "
        "measured on the CPU.")
    assert "No change from A to B is called" in text


def test_each_runs_own_verdict_is_quoted_with_the_noise_figure_the_run_printed():
    a = report({"naive": STEADY, "pipelined": STEADY})
    b = copy.deepcopy(a)
    a["verdict"] = {"ratio": 1.02, "call": "within-noise", "noise": 0.04, "interval": [0.805, 1.202],
                    "confidence": 0.99}
    b["verdict"] = {"ratio": 1.02, "call": "within-noise", "noise": 0.04}  # written before intervals
    text = diff_text(diff_reports(a, b))
    assert ("each run's own verdict, pipelined/naive: A 1.02x (within-noise, 99% interval 0.805-1.202x); "
            "B 1.02x (within-noise, ±4.0%)") in text


def test_a_drift_allowance_sentence_names_the_device_kinds_drift():
    a = report({"naive": STEADY, "pipelined": STEADY})
    b = report({"naive": scaled(STEADY, 2.0), "pipelined": STEADY}, compile="default")
    naive = rows(diff_reports(a, b))["naive"]
    drift = PROCESS_DRIFT["cuda"].rates
    assert naive["call"] == "faster" and naive["sentence"].startswith("naive: B/A 2.000x (95% interval ")
    assert naive["sentence"].endswith(f"widened by the {plus_minus(drift)} that two processes of the same settings "
                                      "differ by on a GPU): faster in B.")


# ------------------------------------------------------------------------------------------- issue 39's A/A case

@pytest.mark.slow
def test_runs_differing_only_in_lag_never_call_the_naive_loop(tiny):
    """Ten pairs of tiny-random runs on the CPU, lag 1 against lag 2..4: naive is the control every time, and is
    never called faster or slower (issue 39: 2 of 7 page comparisons said naive got faster)."""
    from tests.conftest import bench_report

    for index in range(10):
        a = bench_report(tiny, lag=1, trials=3, max_new_tokens=16)
        b = bench_report(tiny, lag=2 + index % 3, trials=3, max_new_tokens=16)
        result = diff_reports(a, b)
        assert result["differs"] == ["lag"] and result["control"] == "naive", result["no_control"]
        naive = rows(result)["naive"]
        assert naive["call"] == "control" and naive["interval"] is not None
        assert rows(result)["pipelined"]["basis"] == "against control"
