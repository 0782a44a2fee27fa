"""core.documents.files: reports are read alike whether plain or gzipped; a damaged .gz is a ValueError, as bad JSON
is."""

from __future__ import annotations

import codecs
import gzip
import json
import os
import stat
from pathlib import Path

import pytest

from core.documents.files import read_report_bytes, report_paths, write_json
from core.documents.kinds import BENCH
from core.documents.schema import bench_report, load

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "lab" / "results"


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


@pytest.mark.parametrize("damage", [b"not gzip at all", gzip.compress(b'{"a": 1}' * 100, mtime=0)[:-20]],
                         ids=["not gzip", "cut short"])
def test_a_damaged_gzip_is_a_value_error_naming_the_file(tmp_path, damage):
    (tmp_path / "r.json.gz").write_bytes(damage)
    with pytest.raises(ValueError, match=r"r\.json\.gz: it is not a readable gzip file"):
        read_report_bytes(tmp_path / "r.json.gz")


def test_a_gzip_that_inflates_past_the_limit_is_refused_having_held_no_more_than_the_limit(tmp_path):
    import tracemalloc

    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (256 * 2**20), compresslevel=1))  # 256 MiB in about 1 MiB
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"bomb\.json\.gz: it decompresses to more than 4 MiB") as refused:
            read_report_bytes(bomb, limit=4 * 2**20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"{peak / 2**20:.1f} MiB held to refuse it"
    assert "\n" not in str(refused.value)


def test_a_device_or_a_pipe_that_never_ends_is_refused_without_reading_it_whole(tmp_path):
    import threading

    with pytest.raises(ValueError, match="/dev/zero: it is a device, not a file"):
        read_report_bytes(Path("/dev/zero"))
    read_end, write_end = os.pipe()

    def endless() -> None:
        try:
            while True:
                os.write(write_end, b" " * 65536)
        except OSError:  # the reader closed its end
            os.close(write_end)

    writer = threading.Thread(target=endless, daemon=True)
    writer.start()
    try:
        with pytest.raises(ValueError, match="it holds more than 1 MiB, the most a report here may hold"):
            read_report_bytes(Path(f"/proc/self/fd/{read_end}"), limit=2**20)
    finally:
        os.close(read_end)
    writer.join(5)
    (tmp_path / "big.json").write_bytes(b" " * 2049)
    with pytest.raises(ValueError, match=r"big\.json: the file is 0\.00 MiB; reports here are limited to 2,048 bytes"):
        read_report_bytes(tmp_path / "big.json", limit=2048)


def test_a_report_with_a_byte_order_mark_opens_everywhere_reports_are_read(tmp_path):
    from dashboard.service.page_record import open_report

    text = (RESULTS / "h200-2026-12-01" / "example-audit-naive_loop.json").read_bytes()  # any JSON will do here
    (tmp_path / "bom.json").write_bytes(codecs.BOM_UTF8 + text)
    (tmp_path / "bom.json.gz").write_bytes(gzip.compress(codecs.BOM_UTF8 + text))
    assert read_report_bytes(tmp_path / "bom.json") == text == read_report_bytes(tmp_path / "bom.json.gz")
    report = read_report_bytes(RESULTS / "h200-2026-12-01" / "audit-ro-1b.json.gz")
    with_mark = codecs.BOM_UTF8 + report
    assert open_report(with_mark).report["model"]["spec"] == "synthetic:llama-1b"
    assert open_report(with_mark.decode("utf-8")).report["model"]["spec"] == "synthetic:llama-1b"
    (tmp_path / "ro.json").write_bytes(with_mark)
    assert bench_report(load(tmp_path / "ro.json", expect=BENCH))["model"]["spec"] == "synthetic:llama-1b"


def test_the_json_goes_through_a_temporary_file_beside_it_and_an_atomic_replace(tmp_path, monkeypatch, capsys):
    target = tmp_path / "r.json"
    replaced = []
    real_replace = os.replace

    def watching(source, destination):
        replaced.append((os.path.dirname(source), json.loads(Path(source).read_text(encoding="utf-8"))))
        assert not target.exists(), "the target is untouched until the rename"
        real_replace(source, destination)

    monkeypatch.setattr(os, "replace", watching)
    assert write_json(str(target), {"schema": "syncscope.bench/1", "x": 1}, "report") == str(target)
    assert replaced == [(str(tmp_path), {"schema": "syncscope.bench/1", "x": 1})]
    assert os.listdir(tmp_path) == ["r.json"] and capsys.readouterr().out == f"wrote {target}\n"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0600


def test_a_second_write_to_one_path_says_what_it_replaced_and_keeps_the_permissions(tmp_path, capsys):
    target = tmp_path / "r.json"
    write_json(str(target), {"schema": "syncscope.bench/1", "created": "2026-12-01T11:20:43+00:00"}, "report", 1)
    target.chmod(0o640)
    capsys.readouterr()
    write_json(str(target), {"schema": "syncscope.bench/1", "created": "2026-12-01T12:00:00+00:00"}, "report", 1)
    assert capsys.readouterr().out == f"replaced {target} (it held a report from 2026-12-01T11:20:43+00:00)\n"
    assert json.loads(target.read_text())["created"] == "2026-12-01T12:00:00+00:00"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    target.write_text("notes")
    write_json(str(target), {"a": 1}, "trace")
    assert "it held a file last written " in capsys.readouterr().out


def test_a_write_that_fails_leaves_no_temporary_file_and_the_old_report_whole(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    target.write_text('{"old": true}')

    def failing(source, destination):
        raise OSError(28, "No space left on device")

    import tempfile

    monkeypatch.setattr(os, "replace", failing)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "elsewhere"))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    saved = write_json(str(target), {"new": True}, "report")
    assert json.loads(target.read_text()) == {"old": True}
    assert sorted(os.listdir(tmp_path)) == ["elsewhere", "r.json"]  # no temporary file left beside it
    assert os.path.dirname(saved) == str(tmp_path / "elsewhere")
    assert json.loads(Path(saved).read_text()) == {"new": True}


def test_a_device_file_is_written_in_place_not_replaced(capsys):
    assert write_json("/dev/null", {"a": 1}, "report") == "/dev/null"
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


@pytest.mark.parametrize(("content", "problem"), [
    (None, "cannot read it"), (b"", "the file is empty"), (b"{not json", "not valid JSON"),
    (b'{"schema": "other/1"}', "not a syncscope benchmark report"), (b"\xff\xfe", "not UTF-8 text"),
    (b'{"schema": "syncscope.bench/1", "summary": {}}', "holds no measured run"), (b"[1, 2]", "not a syncscope"),
])
def test_a_file_that_is_not_a_report_is_one_line_naming_it(tmp_path, content, problem):
    path = tmp_path / "x.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ValueError, match=problem) as refused:
        load(path, expect=BENCH)
    assert str(refused.value).startswith(f"{path}: ") and "\n" not in str(refused.value)
