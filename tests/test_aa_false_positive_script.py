"""benchmarks/aa_false_positive.py on the CPU tiny model: A/A comparisons, both rules, JSON, a table last."""

from __future__ import annotations

import json

import pytest

from tests.test_stats import load_script


@pytest.mark.slow  # runs the script end to end; its rules are tested fast in test_stats.py
def test_a_short_a_a_run_keeps_every_trial_and_judges_both_rules(tmp_path, capsys):
    script = load_script()
    out = tmp_path / "aa.json"
    code = script.main(["--model", "tiny-random", "--device", "cpu", "--comparisons", "2", "--trials", "3",
                        "--max-new-tokens", "6", "--out", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    assert result["settings"]["trials"] == 3 and result["settings"]["contestants"] == ["pipelined", "pipelined-again"]
    assert len(result["comparisons"]) == 2
    for comparison in result["comparisons"]:
        assert len(comparison["runs"]) == 6
        assert comparison["old"] and comparison["new"] in ("within-noise", "faster", "slower")
    assert result["rates"]["comparisons"] == 2 and "false_positive_rate" in result["rates"]["new"]
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("A/A median-ratio distance")

    merged = tmp_path / "merged.json"
    assert script.main(["--rejudge", str(out), str(out), "--out", str(merged)]) == 0
    assert json.loads(merged.read_text())["rates"]["comparisons"] == 4


def test_reports_mode_finds_nested_reports_and_flags_a_disagreement(tmp_path, capsys):
    script = load_script()

    def runs(naive, pipelined):
        return [{"contestant": name, "trial": t, "timings": {"decode_tokens_per_s": v, "tokens_per_s": v}}
                for name, values in (("naive", naive), ("pipelined", pipelined)) for t, v in enumerate(values)]

    noisy = {"runs": runs([100.0, 104.0, 98.0], [110.0, 108.0, 112.0])}
    clear = {"runs": runs([400.0, 410.0, 405.0], [600.0, 610.0, 605.0]), "request": {"options": {"compile": "x"}}}
    (tmp_path / "r.json").write_text(json.dumps({"cases": [{"report": noisy}, {"report": clear}]}))
    assert script.main(["--reports", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "r.json/cases[0]/report" in text and "<-- differs" in text
    assert text.strip().splitlines()[-1].startswith("2 reports; old 'faster' with clearly separated trials")
