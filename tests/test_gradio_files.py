"""dashboard.edge.gradio_files: the server's folder for Gradio's files, the uploads' quota and a page's files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dashboard.edge.gradio_files import PREFIX, GradioFiles, UploadRefused, remove_stale_folders, server_folder

MIB = 2**20


def upload(files: GradioFiles, visitor: str, size: int, name: str) -> Path:
    """An upload as Gradio writes it (a folder per file, named by its content) after the quota admitted it."""
    files.admit(visitor, size)
    path = files.root / f"{name:0>64}" / f"{name}.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"x" * size)
    files.arrived(visitor, size, [str(path)])
    return path


@pytest.fixture
def files(tmp_path) -> GradioFiles:
    return GradioFiles(tmp_path, folder_bytes=4 * MIB, visitor_bytes=2 * MIB, request_bytes=MIB)


def test_an_upload_over_the_request_limit_is_refused_before_it_is_read(files):
    with pytest.raises(UploadRefused) as refused:
        files.admit("a", 5 * 90 * MIB)
    assert refused.value.status == 413 and "limit of 1,048,576 bytes a request" in refused.value.line


def test_a_visitor_holds_at_most_their_quota_their_oldest_uploads_going_first(files):
    made = [upload(files, "a", MIB, str(i)) for i in range(4)]
    assert [p.exists() for p in made] == [False, False, True, True]
    assert not made[0].parent.exists()  # Gradio's folder for the file goes with it
    other = upload(files, "b", MIB, "b")
    assert other.exists() and files.upload_bytes == 3 * MIB


def test_the_folder_holds_at_most_its_quota_everyones_oldest_going_first(files):
    made = [upload(files, visitor, MIB, visitor) for visitor in "abcde"]
    assert [p.exists() for p in made] == [False, True, True, True, True] and files.upload_bytes == 4 * MIB


def test_uploads_being_received_count_and_past_the_quota_the_next_waits_for_them(files):
    files.admit("a", MIB)
    files.admit("a", MIB)
    with pytest.raises(UploadRefused) as refused:
        files.admit("a", MIB)
    assert refused.value.status == 503
    files.arrived("a", MIB, [])  # one failed: its room is free again
    files.admit("a", MIB)


def test_a_pages_uploads_and_copies_go_when_it_closes_unless_another_page_has_them(files):
    used = upload(files, "a", 1000, "used")
    never = upload(files, "a", 1000, "never")
    copy = files.root / ("c" * 64) / "history.csv"
    copy.parent.mkdir()
    copy.write_text("run,rate\n")
    join = json.dumps({"data": [{"path": str(used), "meta": {"_type": "gradio.FileData"}}], "session_hash": "p1"})
    files.claim("p1", files.paths_in(join.encode()))
    files.claim("p1", files.paths_in(b'data: {"output": {"data": [{"path": "' + str(copy).encode() + b'"}]}}'))
    files.claim("p2", [copy])
    assert files.files_of("p1") == [used, copy]
    files.forget("p1")
    assert not used.exists() and copy.exists() and never.exists()  # p2 has the copy; no page used `never`
    files.forget("p2")
    assert not copy.exists() and never.exists()


def test_an_upload_no_page_used_goes_after_its_time(tmp_path):
    now = [0.0]
    files = GradioFiles(tmp_path, request_bytes=MIB, keep_s=60.0, clock=lambda: now[0])
    old = upload(files, "a", 10, "old")
    now[0] = 61.0
    new = upload(files, "a", 10, "new")
    assert not old.exists() and new.exists()


def test_files_outside_the_folder_are_never_claimed_nor_removed(tmp_path):
    files = GradioFiles(tmp_path / "gradio")
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    named = files.paths_in(b'{"path": "' + str(files.root).encode() + b'/../outside.txt"}')
    assert named == [outside]
    files.claim("p", [*named, outside])
    files.forget("p")
    assert files.files_of("p") == [] and outside.read_text() == "keep me"


def test_the_server_folder_is_its_own_and_those_of_servers_gone_are_removed(tmp_path):
    gone = tmp_path / f"{PREFIX}999999999-abc"
    gone.mkdir()
    alive = tmp_path / f"{PREFIX}{os.getppid()}-def"
    alive.mkdir()
    mine = server_folder(tmp_path)
    assert mine.name.startswith(f"{PREFIX}{os.getpid()}-") and mine.is_dir()
    assert not gone.exists() and alive.exists()
    assert remove_stale_folders(tmp_path) == []
