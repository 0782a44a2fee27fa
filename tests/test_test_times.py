"""benchmarks/test_times.py: a clean-clone run's output becomes one row of docs/TIMINGS.md."""

from __future__ import annotations

from benchmarks.test_times import timing_row

OUTPUT = """...
============================= slowest 60 durations =============================
78.03s call     tests/test_engine_process.py::test_ten_cancels_during_compilation_in_a_row_then_a_normal_run_works
67.14s call     tests/test_decode_attention_script.py::test_every_kernel_runs_the_cli_and_gives_a_row
25.02s setup    tests/test_real_model.py::test_answers_the_known_question
1492 passed, 121 skipped in 697.79s (0:11:37)
"""


def test_a_runs_output_becomes_its_row():
    row = timing_row(OUTPUT, 812.4, "abc1234", machine="2 cores")
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1:8] == ["abc1234", "2 cores", "812", "698", "1492", "121", "0"]
    assert cells[8] == ("test_ten_cancels_during_compilation_in_a_row_then_a_normal_run_works 78, "
                        "test_every_kernel_runs_the_cli_and_gives_a_row 67, test_answers_the_known_question 25")


def test_a_run_that_printed_no_summary_still_gives_a_row():
    cells = [cell.strip() for cell in timing_row("make: *** Error 2", 5.0, "abc1234").strip("|").split("|")]
    assert cells[3:5] == ["5", "–"]
