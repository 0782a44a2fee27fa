"""dashboard.edge.http_guard (and dashboard.edge.downloads): what one request, session, address or visitor may cost the
server, checked against the served app: in-process on the shared runner, and app.py as a process of its own for
memory."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from gradio.utils import get_upload_folder
from gradio_client import Client, handle_file

from core.parallel.launch import free_port
from dashboard.edge import http_guard
from dashboard.edge.downloads import PREFIX, DownloadFolders, remove_stale_roots
from dashboard.edge.gradio_files import GradioFiles
from dashboard.edge.http_guard import LoginGate, launch_options
from dashboard.edge.session_store import LeanStateHolder
from dashboard.ui import CSS, build_demo
from dashboard.ui.form import page_values
from dashboard.ui.tabs.compare import OUTPUTS
from dashboard.ui.tabs.replay import REPLAY_OUTPUTS
from tests.conftest import TINY, bench_report, fast_settings, page_client
from tests.helpers import wait_until

REPO = Path(__file__).resolve().parent.parent
BODY_LIMIT = 256 * 1024
USER, PASSWORD = "alice", "secret"
# The guarded page's upload quota, scaled down from the server's (dashboard.service.limits) as the body limit is.
UPLOAD_REQUEST = 16 * 2**20
UPLOAD_VISITOR = 2 * UPLOAD_REQUEST
UPLOAD_FOLDER = 4 * UPLOAD_REQUEST


def serve_guarded(runner, logins: LoginGate, files: GradioFiles | None = None):
    """The page as app.py serves it (the guard's launch options, a login), on `runner`; (demo, url)."""
    demo = build_demo(runner, defaults=fast_settings())
    demo.queue(default_concurrency_limit=4)
    files = files or GradioFiles(Path(get_upload_folder()))
    http_guard.forget_files_on_unload(demo, files)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, ssr_mode=False,
                css=CSS, auth=(USER, PASSWORD), max_file_size=100 * 2**20,
                **launch_options(max_body_bytes=BODY_LIMIT, max_sessions=50, logins=logins, files=files))
    return demo, f"http://127.0.0.1:{port}/"


@pytest.fixture(scope="module")
def guarded(tiny_runner):
    files = GradioFiles(Path(get_upload_folder()), folder_bytes=UPLOAD_FOLDER, visitor_bytes=UPLOAD_VISITOR,
                        request_bytes=UPLOAD_REQUEST)
    demo, url = serve_guarded(tiny_runner, LoginGate(delay_s=0.2), files)
    demo.files = files
    yield demo, url
    demo.close()
    demo.dashboard.downloads.close()
    files.close()


@pytest.fixture
def slow_failures(tiny_runner):
    """A page of its own whose failed logins are answered after 0.5 s (others' clients log in too)."""
    logins = LoginGate(delay_s=0.5)
    demo, url = serve_guarded(tiny_runner, logins)
    yield url, logins
    demo.close()
    demo.dashboard.downloads.close()


def client(url: str) -> Client:
    return page_client(url, auth=(USER, PASSWORD))


def logged_in(url: str) -> dict[str, str]:
    """The cookies of a login to the page at `url`."""
    answer = httpx.post(url + "login", data={"username": USER, "password": PASSWORD})
    assert answer.status_code == 200, answer.text
    return dict(answer.cookies)


def raw_post(port: int, path: str, length: int, first: bytes = b"{", cookies: dict[str, str] | None = None,
             content_type: str = "application/json") -> str:
    """The server's answer to a POST that announces `length` bytes and sends only `first` (the connection closed after
    it: an app's answer would otherwise keep it open for the server's keep-alive time)."""
    head = [f"POST {path} HTTP/1.1", "Host: x", f"Content-Type: {content_type}", f"Content-Length: {length}",
            "Connection: close"]
    if cookies:
        head.append("Cookie: " + "; ".join(f"{k}={v}" for k, v in cookies.items()))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + first)
        answer = b""
        while chunk := sock.recv(4096):  # the server closes the connection after its answer
            answer += chunk
        return answer.decode()


def test_a_body_over_the_limit_is_answered_413_in_one_line_before_it_is_read(guarded):
    _, url = guarded
    answer = raw_post(port_of(url), "/gradio_api/queue/join", 32 * 2**20, cookies=logged_in(url))
    head, _, body = answer.partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 413")
    assert body == f"the request body of {32 * 2**20:,} bytes is over this server's limit of {BODY_LIMIT:,} bytes\n"


def test_a_chunked_body_over_the_limit_is_cut_off_with_413(guarded):
    _, url = guarded

    def chunks():
        for _ in range(BODY_LIMIT // 65536 + 2):
            yield b"x" * 65536

    answer = httpx.post(url + "gradio_api/queue/join", content=chunks(), headers={"content-type": "application/json"},
                        cookies=logged_in(url))
    assert answer.status_code == 413 and answer.text == (f"the request body is over this server's limit of "
                                                        f"{BODY_LIMIT:,} bytes\n")


def test_a_refused_prompt_fails_the_call_and_the_next_run_works(guarded):
    _, url = guarded
    visitor = client(url)
    with pytest.raises(Exception, match="413"):
        visitor.predict(**page_values(fast_settings(prompt="x" * (2 * BODY_LIMIT))), api_name="/run")
    status = visitor.predict(**page_values(fast_settings(max_new_tokens=2)), api_name="/run")[0]
    assert status.startswith("**Done in")


def test_a_report_upload_may_be_larger_than_the_body_limit(guarded, tiny, tmp_path):
    _, url = guarded
    report = bench_report(tiny, max_new_tokens=2)
    report["padding"] = "x" * (2 * BODY_LIMIT)  # a field the page does not read
    path = tmp_path / "big.json"
    path.write_text(json.dumps(report))
    status = client(url).predict(handle_file(str(path)), api_name="/replay")[0]
    assert status.startswith("Showing the uploaded file")


def test_under_a_login_a_body_is_not_read_before_the_sender_has_logged_in(guarded):
    _, url = guarded
    answer = raw_post(port_of(url), "/gradio_api/queue/join", BODY_LIMIT // 2)  # announced, one byte sent
    head, _, body = answer.partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 401")
    assert body == "log in first: this server reads no request body before its login\n"
    upload = raw_post(port_of(url), "/gradio_api/upload", UPLOAD_REQUEST // 2, content_type="multipart/form-data")
    assert upload.startswith("HTTP/1.1 401")
    assert raw_post(port_of(url), "/gradio_api/queue/join", 1, cookies=logged_in(url)).startswith("HTTP/1.1 422")


def test_five_wrong_passwords_from_one_address_do_not_keep_the_right_one_out(slow_failures):
    url, logins = slow_failures
    for i in range(5):
        started = time.monotonic()
        wrong = httpx.post(url + "login", data={"username": USER, "password": f"guess{i}"})
        assert wrong.status_code == 400 and time.monotonic() - started >= logins.delay_s
    assert httpx.post(url + "login", data={"username": USER, "password": PASSWORD}).status_code == 200


def test_failed_logins_are_checked_one_at_a_time_each_answered_after_the_delay(slow_failures):
    url, logins = slow_failures
    answers: list[int] = []

    def guess(i: int) -> None:
        answers.append(httpx.post(url + "login", data={"username": USER, "password": f"guess{i}"}).status_code)

    threads = [threading.Thread(target=guess, args=(i,)) for i in range(4)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [400] * 4
    assert time.monotonic() - started >= 4 * logins.delay_s  # four guesses at once take four delays, not one


def test_a_login_body_is_small_and_read_before_its_turn(slow_failures):
    url, _ = slow_failures
    answer = raw_post(port_of(url), "/login", 10 * 2**20, b"username=",
                      content_type="application/x-www-form-urlencoded")
    assert answer.startswith("HTTP/1.1 413")


def test_sessions_keep_no_copy_of_each_components_value_and_deep_links_are_off(guarded):
    demo, url = guarded
    visitor = client(url)
    visitor.predict(**page_values(fast_settings(max_new_tokens=2, prompt="remember me not")), api_name="/run")
    holder = demo.server_app.state_holder
    assert isinstance(holder, LeanStateHolder) and holder.capacity == 50
    session = holder.session_data[visitor.session_hash]
    assert "remember me not" not in json.dumps(list(session.components), default=str)
    cookies = visitor.cookies
    answer = httpx.get(url + f"gradio_api/deep_link?session_hash={visitor.session_hash}", cookies=cookies)
    assert answer.status_code == 404 and answer.text == "deep links are not offered by this server\n"


@pytest.mark.slow
def test_the_session_store_holds_at_most_its_capacity(guarded):
    demo, url = guarded
    visitor = client(url)
    for _ in range(60):  # the cancel endpoint is quick and runs without the queue
        visitor.session_hash = str(uuid.uuid4())
        visitor.predict(api_name="/cancel")
    assert len(demo.server_app.state_holder.session_data) <= 50


# ------------------------------------------------------------------------------------------------ Item 4

def test_a_10_mb_field_of_a_replayed_report_gives_a_short_status_line(guarded, tiny, tmp_path):
    _, url = guarded
    report = bench_report(tiny, max_new_tokens=2)
    report["model"]["spec"] = "m" * 10_000_000
    report["environment"]["gpu"] = "<b>GPU</b>" + "g" * 1_000_000
    path = tmp_path / "huge-fields.json"
    path.write_text(json.dumps(report))
    out = dict(zip(REPLAY_OUTPUTS, client(url).predict(handle_file(str(path)), api_name="/replay")))
    assert out["status"].startswith("Showing the uploaded file: mmmm")
    assert len(out["status"]) < 1000 and "10,000,000 characters in all" in out["status"]
    assert "1,000,010 characters in all" in out["status"] and "<b>" not in out["status"]


# ------------------------------------------------------------------------------------------------ Item 7

@pytest.mark.parametrize(("given", "ran_with"), [("false", False), ("TRUE", True), (True, True)])
def test_a_flag_given_as_true_or_false_through_the_api_means_that(guarded, given, ran_with):
    _, url = guarded
    values = {**page_values(fast_settings(max_new_tokens=2)), "ignore_eos": given, "cache": given}
    out = dict(zip(OUTPUTS, client(url).predict(**values, api_name="/run")))
    assert out["status"].startswith("**Done in"), out["status"]
    assert ("--ignore-eos" in out["command"]) is ran_with
    assert ("--cache static" in out["command"]) is ran_with


@pytest.mark.parametrize("given", ["no", "yes", "1", "nope"])
def test_a_flag_given_any_other_word_through_the_api_is_refused_in_one_line(guarded, given):
    _, url = guarded
    values = {**page_values(fast_settings(max_new_tokens=2)), "ignore_eos": given}
    status = client(url).predict(**values, api_name="/run")[0]
    assert status == f"**Not started:** ignore eos must be true or false, got '{given}'"


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].strip("/"))


def download_path(value) -> Path:
    """A download button's file, from a path or an update that carries one."""
    return Path(value["value"] if isinstance(value, dict) else value)


def test_a_visitors_download_folder_uploads_and_gradios_copies_go_when_their_page_closes(guarded, tiny, tmp_path):
    demo, url = guarded
    visitor = client(url)
    visitor.predict(**page_values(fast_settings(max_new_tokens=2)), api_name="/run")
    report = tmp_path / "report.json"
    report.write_text(json.dumps(bench_report(tiny, max_new_tokens=2)))
    assert visitor.predict(handle_file(str(report)), api_name="/replay")[0].startswith("Showing the uploaded file")
    folder = demo.dashboard.downloads.folder_for(visitor.session_hash)
    assert any(folder.iterdir())
    page_files = demo.files.files_of(visitor.session_hash)  # the upload, and Gradio's copies of the downloads
    assert any(p.name == "report.json" for p in page_files) and any(p.suffix == ".csv" for p in page_files)
    assert all(p.is_file() for p in page_files)
    with httpx.stream("GET", url + f"gradio_api/heartbeat/{visitor.session_hash}", cookies=visitor.cookies,
                      timeout=30) as beat:
        next(beat.iter_lines())  # the page is alive...
    wait_until(lambda: not folder.exists(), timeout=30)  # ...and then gone
    wait_until(lambda: not any(p.exists() for p in page_files), timeout=30)


def test_download_folders_are_bounded_per_server_and_removed_with_it(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    gone = tmp_path / f"{PREFIX}999999999-abc"  # a server that no longer runs
    gone.mkdir()
    old_style = tmp_path / f"{PREFIX}k2j3h4"  # from before the process id was in the name
    old_style.mkdir()
    alive = tmp_path / f"{PREFIX}{subprocess.os.getppid()}-def"
    alive.mkdir()
    folders = DownloadFolders(max_visitors=3)
    assert not gone.exists() and not old_style.exists() and alive.exists()
    made = [folders.folder_for(f"visitor{i}") for i in range(5)]
    assert [f.exists() for f in made] == [False, False, True, True, True] and len(folders) == 3
    folders.folder_for("visitor2")  # used again: the newest
    folders.folder_for("visitor5")
    assert made[2].exists() and not made[3].exists()
    folders.close()
    assert not folders.root.exists()
    assert remove_stale_roots(tmp_path) == []


# ------------------------------------------------------------------------------------------------ Item 3

def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@contextlib.contextmanager
def app_py(**environ: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """app.py as it is started, on tiny-random, in a process of its own (its RSS is the server's alone)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "app.py", "--model", TINY, "--device", "cpu", "--port", str(port),
                             "--max-new-tokens", "1", "--trials", "1"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, **environ})
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    try:
        wait_until(lambda: any("Serving on" in line for line in lines) or proc.poll() is not None, timeout=180)
        assert proc.poll() is None, "".join(lines)[-3000:]
        yield proc, f"http://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        proc.wait(60)


@pytest.fixture(scope="module")
def app_process():
    """One app.py for this module's tests that only watch it: the 120 runs, then the 200 slow bodies (file order),
    each measuring its RSS from where it stands when it begins. (The test that stops its server has its own.)"""
    with app_py() as served:
        yield served


@pytest.fixture
def app_process_returning_freed_memory():
    """app.py with glibc's mmap threshold fixed at 1 MiB: a freed large block goes back to the system at once, so its
    RSS shows what the server keeps, not the heap's high-water mark (by default glibc raises the threshold after a
    large free and serves the next large block from a heap that keeps it)."""
    with app_py(MALLOC_MMAP_THRESHOLD_=str(2**20)) as served:
        yield served


# Runs (4 visitors share each count), then the refused prompts, then more runs: the soak's are 20, 100, 20 and 80
# (`python benchmarks/soak.py server-runs`).
SETTLING_RUNS, RUNS_BEFORE_REFUSED, REFUSED_PROMPTS, RUNS_AFTER_REFUSED = 20, 60, 10, 40


@pytest.mark.slow
def test_120_runs_and_10_refused_32_mb_prompts_leave_the_server_within_30_mib_of_where_it_settled(app_process):
    """The server's RSS (app.py's own, the engine apart) after 100 runs, each in a new session, and 10 prompts of
    32 MB refused at the door, within 30 MiB of where it stood after 20 runs. One refused prompt kept would be
    32 MiB alone; the runs add about 0.1 MiB each here (13.5 MiB over 100 measured), so a leak of 0.3 MiB a run
    (the copies Gradio kept of each session were 0.39) goes over. The promise's 200 runs and 20 prompts (35 s on
    the 2-core machine, this 26 s) are `python benchmarks/soak.py server-runs`."""
    proc, url = app_process
    visitors = [page_client(url) for _ in range(4)]
    form = page_values({**fast_settings(max_new_tokens=1), "ignore_eos": True})
    statuses: list[str] = []

    def runs(visitor: Client, count: int) -> None:
        for _ in range(count):
            visitor.session_hash = str(uuid.uuid4())  # each run a new session, as a new visitor's would be
            statuses.append(visitor.predict(**form, api_name="/run")[0])

    def in_parallel(count: int) -> None:
        threads = [threading.Thread(target=runs, args=(v, count // len(visitors))) for v in visitors]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    in_parallel(SETTLING_RUNS)
    time.sleep(1.0)
    settled = rss_mib(proc.pid)
    in_parallel(RUNS_BEFORE_REFUSED)
    for _ in range(REFUSED_PROMPTS):
        with pytest.raises(Exception, match="413"):
            visitors[0].predict(**{**form, "prompt": "x" * (32 * 2**20)}, api_name="/run")
    in_parallel(RUNS_AFTER_REFUSED)
    time.sleep(1.0)
    after = rss_mib(proc.pid)
    total = SETTLING_RUNS + RUNS_BEFORE_REFUSED + RUNS_AFTER_REFUSED
    assert len(statuses) == total and all(s.startswith("**Done in") for s in statuses), set(statuses)
    assert after - settled < 30, f"server RSS {settled:.1f} MiB after {SETTLING_RUNS} runs, {after:.1f} after {total}"


def slow_body(port: int, length: int, answers: list[str], sent: threading.Barrier) -> None:
    """A POST of `length` bytes of which all but the last are sent; its answer's status line."""
    with socket.create_connection(("127.0.0.1", port), timeout=180) as sock:
        sock.sendall(f"POST /gradio_api/queue/join HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {length}\r\n\r\n".encode())
        with contextlib.suppress(OSError):  # the server may answer and close before all is sent
            sock.sendall(b"{" + b" " * (length - 2))
        sent.wait()
        try:
            answers.append(sock.recv(4096).decode(errors="replace").split("\r\n", 1)[0])
        except OSError as exc:
            answers.append(f"closed: {exc}")


SLOW_BODY_BYTES = 2_000_000 - 1  # the soak's 4 MB bodies: `python benchmarks/server_edge.py --slow-bodies`


@pytest.mark.slow
def test_200_slow_bodies_are_cut_off_and_raise_the_servers_rss_by_less_than_100_mib(app_process):
    """200 connections each send all but the last byte of a 2 MB body at once: the bodies the guard's buffer budget
    (8 MiB) cannot hold are cut off at once (503), the few it holds at their deadline (408: 10 s and a second per
    256 KiB, 17.6 s here; the limit's 4 MB bodies wait 25.3 s, and raised the RSS as much: +62 to +67 MiB for 2 MB,
    +53 to +64 for 4 MB). Unguarded, 200 bodies of 2 MB would be 380 MiB."""
    proc, url = app_process
    httpx.get(url + "config")
    time.sleep(1.0)
    before = rss_mib(proc.pid)
    answers: list[str] = []
    sent = threading.Barrier(201)
    threads = [threading.Thread(target=slow_body, args=(port_of(url), SLOW_BODY_BYTES, answers, sent), daemon=True)
               for _ in range(200)]
    for thread in threads:
        thread.start()
    sent.wait()
    peak = before
    while any(thread.is_alive() for thread in threads):
        peak = max(peak, rss_mib(proc.pid))
        time.sleep(0.2)
    assert len(answers) == 200 and set(answers) <= {"HTTP/1.1 503 Service Unavailable", "HTTP/1.1 408 Request Timeout"}
    # The promise is +100 MiB (+53-64 measured on a quiet 2-core machine). What the connections hold before the guard
    # sees their bytes grows when the server's event loop is starved: +106 MiB with a CPU-bound process beside the
    # suite's two workers. So a machine with more runnable processes than cores gets half as much again.
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    bound = 100 if load <= 1 else 150
    assert peak - before < bound, (f"server RSS {before:.1f} MiB before, {peak:.1f} MiB at its peak (bound {bound} "
                                   f"MiB at a load of {load:.1f} a core)")


@pytest.mark.slow
def test_replaying_a_report_with_a_10_mb_field_leaves_nothing_of_it_in_the_server(
        app_process_returning_freed_memory, tiny, tmp_path):
    proc, url = app_process_returning_freed_memory
    report = bench_report(tiny, max_new_tokens=2)
    report["model"]["spec"] = "m" * 10_000_000
    path = tmp_path / "huge-spec.json"
    path.write_text(json.dumps(report))
    visitor = page_client(url)

    def replay() -> str:
        visitor.session_hash = str(uuid.uuid4())
        return visitor.predict(handle_file(str(path)), api_name="/replay")[0]

    assert len(replay()) < 1000
    time.sleep(1.0)
    settled = rss_mib(proc.pid)
    statuses: list[str] = []
    growth: list[float] = []  # MiB each five replays added
    for _ in range(4):
        statuses += [replay() for _ in range(5)]
        time.sleep(1.0)
        growth.append(rss_mib(proc.pid) - settled - sum(growth))
        if len(growth) >= 2 and growth[-1] < 10:
            break
    assert all(len(status) < 1000 for status in statuses)
    # A field kept per replay would add 10 MB each time, 50 MB every five. The allocator's high-water mark takes one
    # step of 20-35 MiB on the way (on a busy 2-core machine; in the first five while app.py's start parsed every
    # bundled report, in the second since it reads an index), so the bound is that the growth stops: some five after
    # the first add less than one field, and all of them together less than the step and one field.
    assert growth[-1] < 10, f"server RSS grew {growth} MiB over each five replays: something keeps the field"
    assert sum(growth) < 60, f"server RSS grew {growth} MiB over each five replays of a report with a 10 MB field"


# ------------------------------------------------------------------------------------------------ Item 42.3: uploads

def multipart(files: dict[str, bytes], boundary: str = "b0undary") -> bytes:
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
             f"Content-Type: application/json\r\n\r\n".encode() + data + b"\r\n" for name, data in files.items()]
    return b"".join(parts) + f"--{boundary}--\r\n".encode()


def upload(url: str, files: dict[str, bytes], **headers: str) -> httpx.Response:
    return httpx.post(url + "gradio_api/upload", content=multipart(files), cookies=logged_in(url),
                      headers={"content-type": "multipart/form-data; boundary=b0undary", **headers})


@pytest.fixture
def own_uploads(tiny_runner):
    """A guarded page with an upload store of its own, which no other test adds to or expires from."""
    files = GradioFiles(Path(get_upload_folder()), folder_bytes=UPLOAD_FOLDER, visitor_bytes=UPLOAD_VISITOR,
                        request_bytes=UPLOAD_REQUEST)
    demo, url = serve_guarded(tiny_runner, LoginGate(delay_s=0.2), files)
    yield files, url
    demo.close()
    demo.dashboard.downloads.close()
    files.close()


def test_an_upload_must_say_its_length_and_stay_under_the_request_limit_and_is_refused_unread(own_uploads):
    files, url = own_uploads
    for _ in range(4):  # the hostile visitor's 5 x 90 MB, scaled to this page's request limit
        answer = raw_post(port_of(url), "/gradio_api/upload", 5 * int(0.9 * UPLOAD_REQUEST), b"--b0undary\r\n",
                          cookies=logged_in(url), content_type="multipart/form-data; boundary=b0undary")
        assert answer.startswith("HTTP/1.1 413") and "bytes a request" in answer
    chunked = httpx.post(url + "gradio_api/upload", content=iter([multipart({"a.json": b"{}"})]),
                         cookies=logged_in(url), headers={"content-type": "multipart/form-data; boundary=b0undary"})
    assert chunked.status_code == 411 and chunked.text == "an upload must say its length (Content-Length)\n"
    assert files.upload_bytes == 0
    accepted = upload(url, {"small.json": b"{}"})
    assert accepted.status_code == 200 and files.upload_bytes == 2, "the store counts what it does keep"


def test_an_upload_of_more_files_than_allowed_keeps_none_of_them(guarded):
    _, url = guarded
    answer = upload(url, {f"f{i}.json": f'{{"n": {i}}}'.encode() for i in range(5)})
    assert answer.status_code == 413 and answer.text == "an upload may carry at most 4 files; this one had 5\n"
    folder = Path(get_upload_folder())
    assert not any((folder / d).is_dir() and (folder / d / "f0.json").exists() for d in os.listdir(folder))
    one = upload(url, {"one.json": b'{"n": "one"}'})
    assert one.status_code == 200 and Path(one.json()[0]).is_file()


def test_a_visitors_uploads_stay_within_their_quota(guarded):
    demo, url = guarded
    size = int(0.3 * UPLOAD_REQUEST)  # six fit in the visitor's quota (6.7 of them)
    paths = [upload(url, {f"q{i}.json": bytes([65 + i]) * size}).json()[0] for i in range(8)]
    assert [Path(p).exists() for p in paths] == [False] * 2 + [True] * 6  # the oldest went
    assert demo.files.upload_bytes <= UPLOAD_VISITOR


def asgi_call(app, path: str, headers: dict[str, str], chunks: list[bytes]) -> tuple[int, bytes]:
    """One request to an ASGI app in-process: `chunks` of its body, and then nothing more (a stalled sender)."""
    import asyncio

    async def main() -> tuple[int, bytes]:
        left, answer = list(chunks), {"status": 0, "body": b""}

        async def receive():
            if left:
                return {"type": "http.request", "body": left.pop(0), "more_body": True}
            await asyncio.Event().wait()

        async def send(message):
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
            else:
                answer["body"] += message.get("body", b"")

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "path": path,
                 "raw_path": path.encode(), "query_string": b"", "root_path": "", "scheme": "http",
                 "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80),
                 "headers": [(k.encode(), v.encode()) for k, v in headers.items()]}
        await app(scope, receive, send)
        return answer["status"], answer["body"]

    return asyncio.run(asyncio.wait_for(main(), timeout=60))


def test_a_stalled_upload_is_cut_off_at_its_deadline_and_leaves_no_file(tmp_path, monkeypatch):
    import gradio as gr

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))
    with gr.Blocks() as demo:
        gr.File()
    demo.max_file_size = None  # as launch() leaves it without a limit
    files = GradioFiles(tmp_path)
    options = launch_options(files=files, body_deadline=lambda size: 0.5)
    app = gr.routes.App.create_app(demo, app_kwargs=options["app_kwargs"])
    body = multipart({"big.json": b"x" * 300_000})
    status, answer = asgi_call(app, "/gradio_api/upload", {"content-type": "multipart/form-data; boundary=b0undary",
                                                            "content-length": str(len(body))}, [body[:200_000]])
    assert status == 408 and answer.startswith(b"the request body did not arrive in time: 200,000 bytes")
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    assert files.upload_bytes == 0


@pytest.mark.slow
def test_a_sigterm_removes_the_servers_gradio_folder_with_its_uploads(tmp_path):
    with app_py() as (proc, url):
        folder = next(Path(tempfile.gettempdir()).glob(f"syncscope-gradio-{proc.pid}-*"))
        answer = httpx.post(url + "gradio_api/upload", files={"files": ("r.json", b'{"a": 1}')})
        assert answer.status_code == 200 and Path(answer.json()[0]).is_relative_to(folder)
    assert proc.returncode is not None and not folder.exists()
