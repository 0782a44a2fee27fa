"""dashboard.http_guard (and dashboard.downloads): what one request, session, address or visitor may cost the server,
checked against the served app: in-process on the shared runner, and app.py as a process of its own for memory."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from gradio_client import Client, handle_file

from core.parallel.launch import free_port
from dashboard import http_guard
from dashboard.downloads import PREFIX, DownloadFolders, remove_stale_roots
from dashboard.form import page_values
from dashboard.http_guard import LeanStateHolder, LoginLimiter, launch_options
from dashboard.tabs.compare import OUTPUTS
from dashboard.tabs.replay import REPLAY_OUTPUTS
from dashboard.ui import CSS, build_demo
from tests.conftest import TINY, bench_report, fast_settings
from tests.helpers import wait_until

REPO = Path(__file__).resolve().parent.parent
BODY_LIMIT = 256 * 1024
USER, PASSWORD = "alice", "secret"


def serve_guarded(runner, logins: LoginLimiter):
    """The page as app.py serves it (the guard's launch options, a login), on `runner`; (demo, url)."""
    demo = build_demo(runner, defaults=fast_settings())
    demo.queue(default_concurrency_limit=4)
    http_guard.forget_downloads_on_unload(demo)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, ssr_mode=False,
                css=CSS, auth=(USER, PASSWORD), max_file_size=100 * 2**20,
                **launch_options(max_body_bytes=BODY_LIMIT, max_sessions=50, logins=logins))
    return demo, f"http://127.0.0.1:{port}/"


@pytest.fixture(scope="module")
def guarded(tiny_runner):
    demo, url = serve_guarded(tiny_runner, LoginLimiter(1000, 60.0))
    yield demo, url
    demo.close()
    demo.dashboard.downloads.close()


@pytest.fixture
def strict_login(tiny_runner):
    """A page of its own whose login allows 3 failures a minute per address (others' clients log in too)."""
    logins = LoginLimiter(3, 60.0)
    demo, url = serve_guarded(tiny_runner, logins)
    yield url, logins
    demo.close()
    demo.dashboard.downloads.close()


def client(url: str) -> Client:
    return Client(url, auth=(USER, PASSWORD), verbose=False)


def raw_post(port: int, path: str, length: int, first: bytes = b"{") -> str:
    """The server's answer to a POST that announces `length` bytes and sends only `first`."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {length}\r\n\r\n".encode() + first)
        answer = b""
        while chunk := sock.recv(4096):  # the server closes the connection after its answer
            answer += chunk
        return answer.decode()


def test_a_body_over_the_limit_is_answered_413_in_one_line_before_it_is_read(guarded):
    _, url = guarded
    answer = raw_post(int(url.rsplit(":", 1)[1].strip("/")), "/gradio_api/queue/join", 32 * 2**20)
    head, _, body = answer.partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 413")
    assert body == f"the request body of {32 * 2**20:,} bytes is over this server's limit of {BODY_LIMIT:,} bytes\n"


def test_a_chunked_body_over_the_limit_is_cut_off_with_413(guarded):
    _, url = guarded

    def chunks():
        for _ in range(BODY_LIMIT // 65536 + 2):
            yield b"x" * 65536

    answer = httpx.post(url + "gradio_api/queue/join", content=chunks(), headers={"content-type": "application/json"})
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


def test_failed_logins_are_limited_per_address_then_answered_429(strict_login):
    url, logins = strict_login
    wrong = [httpx.post(url + "login", data={"username": USER, "password": f"guess{i}"}) for i in range(3)]
    assert [answer.status_code for answer in wrong] == [400, 400, 400]
    limited = httpx.post(url + "login", data={"username": USER, "password": PASSWORD})  # not even checked now
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 50
    assert limited.text.startswith("too many failed logins from this address: try again in ")
    assert limited.text.count("\n") == 1
    assert logins.wait_s("127.0.0.1") > 50 and logins.wait_s("10.0.0.2") == 0  # counted per address


def test_the_login_limit_counts_failures_in_a_sliding_window():
    now = [0.0]
    limiter = LoginLimiter(failures=2, window_s=10.0, clock=lambda: now[0])
    limiter.failed("a")
    assert limiter.wait_s("a") == 0
    now[0] = 4.0
    limiter.failed("a")
    assert limiter.wait_s("a") == pytest.approx(6.0) and limiter.wait_s("b") == 0
    now[0] = 10.5  # the first failure is out of the window
    assert limiter.wait_s("a") == 0


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


def download_path(value) -> Path:
    """A download button's file, from a path or an update that carries one."""
    return Path(value["value"] if isinstance(value, dict) else value)


def test_a_visitors_download_folder_goes_when_their_page_closes(guarded):
    demo, url = guarded
    visitor = client(url)
    out = dict(zip(OUTPUTS, visitor.predict(**page_values(fast_settings(max_new_tokens=2)), api_name="/run")))
    assert download_path(out["csv"]).is_file()  # Gradio's copy, in its own cache
    folder = demo.dashboard.downloads.folder_for(visitor.session_hash)
    assert any(folder.iterdir())
    with httpx.stream("GET", url + f"gradio_api/heartbeat/{visitor.session_hash}", cookies=visitor.cookies,
                      timeout=30) as beat:
        next(beat.iter_lines())  # the page is alive...
    wait_until(lambda: not folder.exists(), timeout=30)  # ...and then gone
    assert download_path(out["csv"]).is_file()


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


@pytest.fixture
def app_process():
    with app_py() as served:
        yield served


@pytest.fixture
def app_process_returning_freed_memory():
    """app.py with glibc's mmap threshold fixed at 1 MiB: a freed large block goes back to the system at once, so its
    RSS shows what the server keeps, not the heap's high-water mark (by default glibc raises the threshold after a
    large free and serves the next large block from a heap that keeps it)."""
    with app_py(MALLOC_MMAP_THRESHOLD_=str(2**20)) as served:
        yield served


@pytest.mark.slow
def test_200_runs_and_20_refused_32_mb_prompts_leave_the_server_within_30_mib_of_where_it_settled(app_process):
    proc, url = app_process
    visitors = [Client(url, verbose=False) for _ in range(4)]
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

    in_parallel(20)
    time.sleep(1.0)
    settled = rss_mib(proc.pid)
    in_parallel(100)
    for _ in range(20):
        with pytest.raises(Exception, match="413"):
            visitors[0].predict(**{**form, "prompt": "x" * (32 * 2**20)}, api_name="/run")
    in_parallel(80)
    time.sleep(1.0)
    after = rss_mib(proc.pid)
    assert len(statuses) == 200 and all(s.startswith("**Done in") for s in statuses), set(statuses)
    assert after - settled < 30, f"server RSS {settled:.1f} MiB after 20 runs, {after:.1f} MiB after 200"


@pytest.mark.slow
def test_replaying_a_report_with_a_10_mb_field_leaves_nothing_of_it_in_the_server(
        app_process_returning_freed_memory, tiny, tmp_path):
    proc, url = app_process_returning_freed_memory
    report = bench_report(tiny, max_new_tokens=2)
    report["model"]["spec"] = "m" * 10_000_000
    path = tmp_path / "huge-spec.json"
    path.write_text(json.dumps(report))
    visitor = Client(url, verbose=False)

    def replay() -> str:
        visitor.session_hash = str(uuid.uuid4())
        return visitor.predict(handle_file(str(path)), api_name="/replay")[0]

    assert len(replay()) < 1000
    time.sleep(1.0)
    settled = rss_mib(proc.pid)
    statuses = [replay() for _ in range(5)]
    time.sleep(1.0)
    first = rss_mib(proc.pid) - settled
    statuses += [replay() for _ in range(5)]
    time.sleep(1.0)
    second = rss_mib(proc.pid) - settled - first
    assert all(len(status) < 1000 for status in statuses)
    # A field kept per replay would add 10 MB each time. The allocator's high-water mark moves with the machine's
    # load (20-35 MiB over the first five on a busy 2-core machine), so the bound is that the growth stops: the
    # second five add less than one field.
    assert first < 50, f"server RSS grew {first:.1f} MiB over 5 replays of a report with a 10 MB field"
    assert second < 10, f"server RSS grew {second:.1f} MiB more over 5 more replays: something keeps the field"
