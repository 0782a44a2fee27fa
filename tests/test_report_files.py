"""core.report_files: reports are read alike whether plain or gzipped; a damaged .gz is a ValueError, as bad JSON is."""

from __future__ import annotations

import gzip

import pytest

from core.report_files import read_report_bytes, report_paths


def test_plain_and_gzipped_reports_read_alike_and_are_listed_in_order(tmp_path):
    text = b'{"schema": "syncscope.bench/1"}'
    (tmp_path / "b.json").write_bytes(text)
    (tmp_path / "a.json.gz").write_bytes(gzip.compress(text))
    (tmp_path / "deeper").mkdir()
    (tmp_path / "deeper" / "c.json").write_bytes(text)
    (tmp_path / "notes.txt").write_text("not a report")
    assert [p.name for p in report_paths(tmp_path)] == ["a.json.gz", "b.json"]
    assert [p.name for p in report_paths(tmp_path, recursive=True)] == ["a.json.gz", "b.json", "c.json"]
    assert {read_report_bytes(p) for p in report_paths(tmp_path, recursive=True)} == {text}


@pytest.mark.parametrize("damage", [b"not gzip at all", gzip.compress(b'{"a": 1}' * 100)[:-20]])
def test_a_damaged_gzip_is_a_value_error_naming_the_file(tmp_path, damage):
    (tmp_path / "r.json.gz").write_bytes(damage)
    with pytest.raises(ValueError, match=r"r\.json\.gz is not a readable gzip file"):
        read_report_bytes(tmp_path / "r.json.gz")
