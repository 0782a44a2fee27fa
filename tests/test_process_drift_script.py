"""benchmarks/process_drift.py: the same command in several processes, or committed reports of identical settings,
and how far their rates (and their ratios to the naive loop) drift apart."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest

from tests.test_drift import STEADY, report, scaled

REPO = Path(__file__).resolve().parents[1]


def load_script():
    spec = importlib.util.spec_from_file_location("process_drift", REPO / "benchmarks" / "process_drift.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pairwise_drift_is_max_over_min_less_one():
    figures = load_script().pairwise([100.0, 110.0, 125.0])
    assert figures["largest"] == pytest.approx(0.25) and figures["median"] == pytest.approx(125 / 110 - 1)
    assert load_script().pairwise([1.0]) == {"largest": None, "median": None}


def test_the_device_calls_form_parses_and_a_json_flag_is_refused():
    script = load_script()
    args, bench = script.parse_args(["-n", "6", "--out", "d.json", "--", "--model", "synthetic:smollm2-135m",
                                     "--cache", "static", "--compile", "reduce-overhead", "--max-new-tokens", "256",
                                     "--trials", "5", "--ignore-eos"])
    assert (args.processes, args.out, args.reports) == (6, "d.json", None) and bench[:2] == ["--model",
                                                                                            "synthetic:smollm2-135m"]
    for wrong in (["--", "--model", "tiny-random", "--json", "x.json"], [], ["-n", "1", "--", "--model", "x"],
                  ["--reports", "here", "--", "--model", "x"]):
        with pytest.raises(SystemExit):
            script.parse_args(wrong)


def test_reports_of_identical_settings_are_grouped_and_their_drift_measured(tmp_path, capsys):
    first = report({"naive": STEADY, "pipelined": STEADY})
    second = report({"naive": scaled(STEADY, 1.2), "pipelined": scaled(STEADY, 1.2 * 1.01)})
    other = report({"naive": STEADY, "pipelined": STEADY}, compile="default")
    for name, document in (("a.json", first), ("b.json", second), ("c.json", other)):
        (tmp_path / name).write_text(json.dumps(document))
    (tmp_path / "not-a-report.json").write_text(json.dumps({"comparisons": []}))
    out = tmp_path / "drift.json"
    assert load_script().main(["--reports", str(tmp_path), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    [group] = result["groups"]  # the compiled report has nobody of its settings to drift from
    assert group["reports"] == [str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    assert group["contestants"]["naive"]["largest"] == pytest.approx(0.2)
    assert group["against_control"]["pipelined"]["largest"] == pytest.approx(0.01)
    assert result["largest"] == pytest.approx(0.212) and result["largest_against_control"] == pytest.approx(0.01)
    assert capsys.readouterr().out.strip().splitlines()[-1] == \
        "largest between processes: rates 21.2%, against the control 1.0%"


def test_a_report_without_per_trial_runs_has_no_ratio_to_the_control():
    script = load_script()
    with_runs = report({"naive": STEADY, "pipelined": STEADY})
    without = copy.deepcopy(with_runs)
    del without["runs"]
    figures = script.drift([with_runs, without])
    assert figures["contestants"]["pipelined"]["largest"] == 0 and figures["against_control"] == {}


@pytest.mark.slow  # two processes of core.bench end to end
def test_two_processes_of_the_tiny_model_give_every_contestants_drift(tmp_path, capsys):
    out = tmp_path / "drift.json"
    assert load_script().main(["-n", "2", "--keep", str(tmp_path / "reports"), "--out", str(out), "--",
                               "--model", "tiny-random", "--max-new-tokens", "4", "--trials", "2"]) == 0
    result = json.loads(out.read_text())
    assert len(result["processes"]) == 2 and set(result["contestants"]) == {"naive", "pipelined"}
    assert all(len(row["rates"]) == 2 for row in result["contestants"].values())
    assert result["environment"]["device"] == "cpu" and "--max-new-tokens 4" in result["command"]
    assert (tmp_path / "reports" / "process-2.json").is_file()
    assert capsys.readouterr().out.splitlines()[0].startswith("process 1/2 (")
