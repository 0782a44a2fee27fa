"""dashboard.service.run_history: each owner's finished runs, bounded, as CSV and JSON downloads."""

from __future__ import annotations

import csv
import io
import json

from dashboard.service.run_history import HISTORY_FIELDS, HISTORY_SCHEMA, RunHistory, history_row


def row(run: int, **fields) -> dict:
    return {**history_row(run, "done", None, "tiny-random", None, None), **fields}


def test_each_owner_sees_their_own_runs_newest_last():
    history = RunHistory()
    history.add("alice", row(1))
    history.add("bob", row(2))
    history.add("alice", row(3))
    assert [r["run"] for r in history.rows("alice")] == [1, 3]
    assert [r["run"] for r in history.rows()] == [1, 2, 3]
    history.rows("alice")[0]["run"] = 99
    assert history.rows("alice")[0]["run"] == 1, "a copy: the kept rows do not change"


def test_the_history_is_bounded():
    history = RunHistory(limit=5)
    for run in range(12):
        history.add(None, row(run))
    assert len(history) == 5 and [r["run"] for r in history.rows()] == list(range(7, 12))


def test_the_downloads_hold_the_rows_in_their_columns():
    history = RunHistory()
    history.add("alice", row(1, error="=cmd()"))
    rows = list(csv.DictReader(io.StringIO(history.csv("alice"))))
    assert tuple(rows[0]) == HISTORY_FIELDS and rows[0]["run"] == "1" and rows[0]["error"] == "'=cmd()"
    data = json.loads(history.json("alice"))
    assert data["schema"] == HISTORY_SCHEMA == "syncscope.history/1" and data["runs"][0]["run"] == 1
    assert json.loads(history.json("nobody"))["runs"] == []
