"""core.report.explain: a report in plain sentences, and two reports diffed, against committed H200 reports and a CPU
run."""

import copy
import json
import re
from pathlib import Path

import pytest

from core.documents.files import read_report_bytes
from core.report.diff import diff_reports, diff_text
from core.report.explain import duration, plus_minus, what_this_run_shows

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "lab" / "results"
RO_1B = RESULTS / "h200-2026-12-01" / "audit-ro-1b.json.gz"
EAGER_1B = RESULTS / "h200-2026-12-01" / "audit-eager-1b.json.gz"
OLD_STEP_GRAPH = RESULTS / "h200-2026-11-29" / "llama-1b-step-graph.json.gz"


def load(path: Path) -> dict:
    return json.loads(read_report_bytes(path))


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory) -> dict:
    """A CPU report as the CLI writes it today, audited, on the tiny random model."""
    from core.bench import main

    out = tmp_path_factory.mktemp("cpu") / "cpu.json"
    assert main(["--model", "tiny-random", "--device", "cpu", "--prompt-tokens", "8", "--max-new-tokens", "6",
                 "--trials", "3", "--ignore-eos", "--audit", "--json", str(out)]) == 0
    return json.loads(out.read_text(encoding="utf-8"))


def microseconds(text: str, after: str) -> float:
    """The first duration in `text` after `after`, in µs."""
    value, unit = re.search(re.escape(after) + r".*?([\d.,]+) (µs|ms)", text).groups()
    return float(value.replace(",", "")) * (1000 if unit == "ms" else 1)


def test_the_1b_reduce_overhead_report_says_naive_waits_about_a_millisecond_in_its_item_and_names_its_ratio():
    report = load(RO_1B)
    sentences = what_this_run_shows(report)
    assert 2 <= len(sentences) <= 4
    text = " ".join(sentences)
    naive = sentences[0]
    assert naive.startswith("naive waited") and "`.item()` at core/loops/generation.py:54" in naive
    assert 800 <= microseconds(naive, "naive waited") <= 1200  # the summary's 946 µs: about 1 ms
    assert f"{report['verdict']['ratio']:.2f}x" in text and "beyond this run's noise (95% interval 1.26-1.45x)" in text
    idle = report["summary"]["naive"]["device_idle_ms_per_step"] * 1000
    assert microseconds(text, "The GPU then idled") == pytest.approx(idle, abs=1)
    removed = (report["summary"]["naive"]["device_idle_ms_per_step"]
               - report["summary"]["pipelined"]["device_idle_ms_per_step"]) * 1000
    assert microseconds(sentences[2], "idled") == pytest.approx(idle - removed, abs=1)
    assert f"{removed:.0f} µs less than with naive" in sentences[2]
    assert "read nothing from the device" in sentences[2]


def test_an_eager_report_within_its_noise_says_so_and_names_milliseconds_of_device_idle():
    sentences = what_this_run_shows(load(EAGER_1B))
    text = " ".join(sentences)
    # The ± of a spread (±21%) beside 1.38x would contradict "within": the sentence quotes the interval that decided.
    assert "within this run's noise (95% interval 0.70-2.51x): no difference shown" in text
    assert re.search(r"The GPU then idled \d+\.\d ms per step", text)


def test_a_cpu_report_says_why_nothing_is_expected_and_where_naive_reads(cpu_report):
    sentences = what_this_run_shows(cpu_report)
    assert 2 <= len(sentences) <= 4
    assert sentences[0].startswith("On the CPU no difference between the loops is expected")
    assert "no device to keep busy" in sentences[0]
    assert "`.item()` at core/loops/generation.py:" in sentences[1] and "would block the host on a GPU" in sentences[1]
    assert f"pipelined/naive {cpu_report['verdict']['ratio']:.2f}x" in sentences[-1]
    assert "GPU then idled" not in " ".join(sentences)


def test_a_cpu_verdict_beyond_noise_is_not_blamed_on_the_sync(cpu_report):
    report = copy.deepcopy(cpu_report)
    report["verdict"].update(call="faster", ratio=1.2, noise=0.03, interval=[1.1, 1.3], confidence=0.99)
    last = what_this_run_shows(report)[-1]
    assert "1.20x, faster, beyond this run's noise (99% interval 1.10-1.30x)" in last
    assert "not a wait the pipelined loop avoids" in last


def test_a_report_written_before_the_waits_and_verdicts_still_gives_sentences():
    sentences = what_this_run_shows(load(OLD_STEP_GRAPH))
    assert 2 <= len(sentences) <= 4
    assert "no per-step timestamps" in sentences[0]
    assert "with no verdict on the noise" in sentences[-1]


def test_an_interrupted_report_says_it_was_cut_short(cpu_report):
    report = {**cpu_report, "interrupted": True, "interruption": {"phase": "trials", "trials_done": 2,
                                                                  "trials_planned": 9}}
    assert what_this_run_shows(report)[-1].endswith("; the run was cut short after 2 of 9 rounds of trials.")
    for phase in ("kernel measurement", "kernel trial"):  # today's phase id, and its old one in older reports
        report["interruption"].update(phase=phase, trials_done=9)
        assert what_this_run_shows(report)[-1].endswith("; the run was cut short in its kernel measurement, after "
                                                        "every round of trials.")


def test_a_report_without_both_loops_names_its_rates_and_ratios(cpu_report):
    report = copy.deepcopy(cpu_report)
    del report["summary"]["naive"]
    report["ratios"] = {"pipelined/pipelined-again": 1.01}
    sentences = what_this_run_shows(report)
    assert len(sentences) == 2 and "pipelined at" in sentences[0] and "pipelined/pipelined-again 1.01x" in sentences[1]


def test_a_huge_field_from_a_file_is_clipped_in_the_sentences():
    report = load(RO_1B)
    site = next(s for s in report["sync_audit"]["naive"]["sites"] if s["in_decode_steps"])
    site["file"] = "x" * 1_000_000
    assert max(len(s) for s in what_this_run_shows(report)) < 600


@pytest.mark.parametrize(("ms", "text"), [(0.0013, "1.3 µs"), (0.946, "946 µs"), (1.0449, "1.04 ms"),
                                          (14.98, "15.0 ms"), (1234.0, "1,234 ms")])
def test_durations_are_in_the_unit_a_reader_expects(ms, text):
    assert duration(ms) == text


def test_noise_keeps_two_significant_digits():
    assert (plus_minus(0.0004), plus_minus(0.027), plus_minus(0.21)) == ("±0.04%", "±2.7%", "±21%")


def test_compare_names_the_settings_that_differ_and_each_rate_in_both():
    a, b = load(RO_1B), load(EAGER_1B)
    result = diff_reports(a, b)
    assert result["differs"] == ["cache", "compile"]
    assert {row["name"] for row in result["settings"]} >= {"model", "gpu", "dtype", "max_new_tokens", "trials"}
    naive = next(row for row in result["contestants"] if row["name"] == "naive")
    assert naive["metric"] == "decode_tokens_per_s"
    assert naive["ratio"] == pytest.approx(b["summary"]["naive"]["decode_tokens_per_s"]
                                           / a["summary"]["naive"]["decode_tokens_per_s"])
    assert naive["call"] == "slower" and naive["a_waits"]["host_wait_ms"] == a["summary"]["naive"][
        "host_wait_ms_per_step"]
    assert naive["basis"] == "drift allowance" and naive["interval_used"][1] < 1 and naive["confidence"] == 0.95
    assert result["control"] is None and result["no_control"].startswith("cache differs")
    hf = next(row for row in result["contestants"] if row["name"] == "hf")
    assert hf["metric"] == "tokens_per_s"  # generate() has no decode rate
    assert result["verdicts"]["a"]["call"] == "faster" and result["verdicts"]["b"]["call"] == "within-noise"
    text = diff_text(result)
    assert "compile  reduce-overhead -> off" in text and "cache    static -> dynamic" in text
    assert re.search(r"naive\s+decode tok/s\s+604\.8\s+60\.0\s+0\.099x\s+slower\s+95% interval", text)
    assert "946 µs -> 58 µs" in text
    assert "No control: cache differs, which can change every contestant. Two processes of the same settings " \
           "differ by up to" in text and naive["sentence"] in text


def test_a_run_against_itself_has_naive_as_the_control_and_nothing_else_called():
    a = load(RO_1B)
    result = diff_reports(a, copy.deepcopy(a))
    assert result["differs"] == [] and result["control"] == "naive"
    calls = {row["name"]: row["call"] for row in result["contestants"]}
    assert calls == {"naive": "control", "pipelined": "within noise", "hf": "within noise",
                     "hf-deferred": "within noise"}
    assert "settings: the same in both runs" in diff_text(result)


def test_a_faster_b_beyond_the_drift_between_processes_is_faster_and_one_trial_is_too_few():
    a = load(RO_1B)
    b = copy.deepcopy(a)
    b["request"]["options"]["max_new_tokens"] = 128  # a setting that every loop reads: no control
    for run in b["runs"]:
        if run["timings"].get("decode_tokens_per_s"):
            run["timings"]["decode_tokens_per_s"] *= 1.5
    for s in b["summary"].values():
        if s.get("decode_tokens_per_s"):
            s["decode_tokens_per_s"] *= 1.5
    calls = {row["name"]: row["call"] for row in diff_reports(a, b)["contestants"]}
    assert calls["naive"] == calls["pipelined"] == "faster" and calls["hf"] == "within noise"
    b["runs"] = [r for r in b["runs"] if r["trial"] == 0]
    naive = diff_reports(a, b)["contestants"][0]
    assert naive["call"] == "too few trials" and "from 3 trials in A and 1 in B" in naive["sentence"]


def test_a_report_from_before_per_trial_runs_compares_with_noise_unknown():
    old, new = load(OLD_STEP_GRAPH), load(RO_1B)
    old.pop("runs", None)
    result = diff_reports(old, new)
    assert {row["call"] for row in result["contestants"]} == {"noise unknown"}
    assert "noise unknown" in diff_text(result)


def test_compare_lists_contestants_that_ran_in_one_report_only(cpu_report):
    result = diff_reports(load(RO_1B), cpu_report)
    assert result["only_in_a"] == ["hf", "hf-deferred"] and result["only_in_b"] == []
    assert {"device", "prompt"} <= set(result["differs"]) and "only in A: hf, hf-deferred" in diff_text(result)
    prompt = next(row for row in result["settings"] if row["name"] == "prompt")
    assert (prompt["a"], prompt["b"]) == ("32 token ids", "8 token ids")


def test_the_committed_interrupted_h200_report_opens_and_says_it_was_cut_short():
    from dashboard.service.page_record import open_report

    report = open_report(read_report_bytes(RESULTS / "h200-2026-12-01" / "interrupted-ro-1b.json.gz")).report
    assert report["interrupted"] is True and report["interruption"]["signal"] == "SIGINT"
    last = what_this_run_shows(report)[-1]
    assert last.endswith("; the run was cut short after 2 of 50 rounds of trials.") and "too few" in last
