"""dashboard.edge.session_store (issue 42, item 2 and item 10): idle sessions without a page go, an address holds so
many sessions (behind the share tunnel: so many without an open page), the idle ones without an open page going first,
busy ones never; a page whose session went is answered in one line. The keeper on a fake store and queue, and the HTTP
guard in front of a fake app."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace

import httpx
import pytest

from dashboard.edge.http_guard import RequestGuard, launch_options
from dashboard.edge.session_store import DROPPED_LINE, LeanStateHolder, SessionKeeper, SessionRule
from dashboard.ui.form import page_values
from tests.conftest import fast_settings, page_client
from tests.helpers import FakeClock

HOME, NEIGHBOUR, TUNNEL = "192.0.2.2", "192.0.2.3", "127.0.0.1"


def keeper(rule: SessionRule, dropped: list[str] | None = None) -> tuple[SessionKeeper, FakeClock, SimpleNamespace]:
    """A keeper adopting a fake Gradio store, whose queue (`queue.running`: session hashes) the test sets."""
    clock, queue = FakeClock(), SimpleNamespace(running=[])
    gradio_queue = SimpleNamespace(event_queue_per_concurrency_id={}, pending_messages_per_session={},
                                   pending_event_ids_session={})
    holder = SimpleNamespace(session_data={}, time_last_used={}, lock=threading.Lock(), capacity=10_000,
                             blocks=SimpleNamespace(_queue=gradio_queue))
    kept = SessionKeeper(rule, clock=clock, on_drop=(dropped.append if dropped is not None else None))
    kept.holder = holder  # type: ignore[assignment]

    def busy() -> set[str]:
        return set(queue.running)

    kept._busy = busy  # type: ignore[method-assign]
    return kept, clock, queue


def visit(kept: SessionKeeper, session: str, address: str, page: bool = False) -> bool:
    """A request of `session` that makes its state (as Gradio would), with its page open when `page`."""
    if not kept.arrived(session, address):
        return False
    if page:
        kept.opened(session, address, page=True)
    kept.making(session)
    kept.holder.session_data[session] = object()  # type: ignore[union-attr]
    return True


def held(kept: SessionKeeper) -> list[str]:
    return sorted(kept.holder.session_data)  # type: ignore[union-attr]


def test_an_idle_session_without_a_page_goes_after_its_idle_time_and_a_busy_or_open_one_stays():
    dropped: list[str] = []
    kept, clock, queue = keeper(SessionRule(idle_s=60), dropped)
    visit(kept, "api", HOME)
    visit(kept, "busy", HOME)
    visit(kept, "page", HOME, page=True)
    queue.running.append("busy")
    clock.now += 59
    visit(kept, "later", HOME)
    assert held(kept) == ["api", "busy", "later", "page"], "none idle for 60 s yet"
    clock.now += 2
    visit(kept, "newest", HOME)
    assert held(kept) == ["busy", "later", "newest", "page"]
    assert dropped == ["api"], "an API session's files go with it"
    assert kept.arrived("api", HOME), "an API session that comes back gets a new state, without a word"


def test_an_exposed_address_holds_at_most_its_sessions_the_idle_ones_without_a_page_going_first():
    kept, _, queue = keeper(SessionRule(per_address=3, idle_s=3600))
    visit(kept, "page", HOME, page=True)
    visit(kept, "api-1", HOME)
    visit(kept, "api-2", HOME)
    visit(kept, "other", NEIGHBOUR)
    queue.running.append("api-1")
    visit(kept, "api-3", HOME)
    assert held(kept) == ["api-1", "api-3", "other", "page"], "the oldest idle one without a page went"
    visit(kept, "api-4", HOME)
    assert held(kept) == ["api-1", "api-4", "other", "page"], "again the one without a page"
    queue.running.append("api-4")
    visit(kept, "api-5", HOME)
    assert held(kept) == ["api-1", "api-4", "api-5", "other"], "then the idle page; a running one never"
    assert not kept.arrived("page", HOME), "a page whose session went is told so"
    assert not visit(kept, "page", HOME) and "page" not in held(kept)


def test_behind_the_tunnel_open_pages_are_not_counted_and_sessions_without_a_page_are_capped():
    kept, _, _ = keeper(SessionRule(per_address=2, idle_s=3600))
    pages = [f"page-{i}" for i in range(5)]
    for page in pages:
        visit(kept, page, TUNNEL, page=True)
    for i in range(10):
        visit(kept, f"script-{i}", TUNNEL)
    assert held(kept) == sorted([*pages, "script-8", "script-9"]), "every visitor's page kept, the script's two"
    kept.closed("page-0", page=True)
    visit(kept, "script-10", TUNNEL)
    assert "page-0" in held(kept) and "script-8" not in held(kept), "the older session without a page went first"


def test_the_store_holds_at_most_max_sessions_those_without_an_open_page_going_first():
    kept, _, _ = keeper(SessionRule(max_sessions=3, idle_s=3600))
    visit(kept, "page", TUNNEL, page=True)
    for i in range(4):
        visit(kept, f"api-{i}", TUNNEL)
    assert held(kept) == ["api-2", "api-3", "page"]


def test_the_lean_store_asks_its_keeper_and_makes_lean_states():
    import gradio as gr
    from gradio.state_holder import StateHolder

    from dashboard.edge.session_store import LeanSessionState

    with gr.Blocks() as demo:
        gr.Markdown("x")
    holder = StateHolder()
    holder.set_blocks(demo)
    SessionKeeper(SessionRule(max_sessions=2, idle_s=3600)).adopt(holder)
    assert isinstance(holder, LeanStateHolder)
    for session in ("a", "b", "c"):
        demo._queue.pending_event_ids_session[session] = set()
        assert isinstance(holder[session], LeanSessionState)
    assert list(holder.session_data) == ["b", "c"] and "a" not in demo._queue.pending_event_ids_session


# ------------------------------------------------------------------------------------------ through the guard

def scope(path: str, address: str, method: str = "GET", body: bytes = b"", query: bytes = b"") -> dict:
    headers = [(b"content-length", str(len(body)).encode())] if body else []
    return {"type": "http", "method": method, "path": path, "query_string": query, "headers": headers,
            "client": (address, 5000)}


async def call(guard: RequestGuard, request: dict, body: bytes = b"") -> tuple[int, bytes]:
    sent: list[dict] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    await guard(request, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_through_the_guard_a_page_whose_session_went_is_answered_in_one_line():
    kept, _, _ = keeper(SessionRule(per_address=1, idle_s=3600))
    seen: list[str] = []

    async def app(request: dict, receive, send) -> None:
        if request["method"] == "POST":
            seen.append(json.loads((await receive())["body"])["session_hash"])
        if seen:  # Gradio makes the session's state
            kept.making(seen[-1])
            kept.holder.session_data[seen[-1]] = object()  # type: ignore[union-attr]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    guard = RequestGuard(app, sessions=kept)

    def join(session: str) -> tuple[int, bytes]:
        body = json.dumps({"data": [], "fn_index": 0, "session_hash": session}).encode()
        return asyncio.run(call(guard, scope("/gradio_api/queue/join", HOME, "POST", body), body))

    async def heartbeat() -> int:
        """The page's heartbeat, counted open while it streams; how many were open meanwhile."""
        opened: list[int] = []

        async def hearts(request: dict, receive, send) -> None:
            opened.append(kept._sessions["page"].pages)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"data: ALIVE\n\n"})

        await call(RequestGuard(hearts, sessions=kept), scope("/gradio_api/heartbeat/page", HOME))
        return opened[0]

    assert join("page")[0] == 200
    assert asyncio.run(heartbeat()) == 1 and kept._sessions["page"].pages == 0 and kept._sessions["page"].page
    kept.opened("page", HOME, page=True)  # the page is open again
    assert join("script")[0] == 200, "the address's one session: the page's went"
    status, answer = join("page")
    assert status == 410 and json.loads(answer)["detail"] == DROPPED_LINE
    assert seen == ["page", "script"], "the app never saw the refused request"
    assert "\n" not in DROPPED_LINE and "reload" in DROPPED_LINE


# ------------------------------------------------------------------------------------------ the served page

@pytest.fixture(scope="module")
def kept_page(tiny_runner):
    """The page as app.py serves it (the guard's launch options), sessions idle IDLE_S going; (demo, url, port)."""
    from core.parallel.launch import free_port
    from dashboard.ui import CSS, build_demo

    demo = build_demo(tiny_runner, defaults=fast_settings())
    demo.queue(default_concurrency_limit=4)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, ssr_mode=False,
                css=CSS, **launch_options(idle_session_s=IDLE_S))
    yield demo, f"http://127.0.0.1:{port}/", port
    demo.close()


IDLE_S = 1.0


def held_states(demo) -> set[str]:
    return set(demo.server_app.state_holder.session_data)


@contextlib.contextmanager
def open_page(port: int, session: str) -> Iterator[None]:
    """A browser page's heartbeat for `session`, open until the block ends."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as heartbeat:
        heartbeat.sendall(f"GET /gradio_api/heartbeat/{session} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert b"ALIVE" in heartbeat.recv(4096) or b"ALIVE" in heartbeat.recv(4096)
        yield


def cancel_in(url: str, session: str) -> str:
    visitor = page_client(url)
    visitor.session_hash = session
    return visitor.predict(api_name="/cancel")


@pytest.mark.slow
def test_runs_each_in_a_new_session_leave_no_states_behind_once_idle(kept_page):
    """Item 10: each run a new session (as API clients make them): the states and the copies of components they held
    level off instead of growing a session's worth a run."""
    demo, url, _ = kept_page
    visitor = page_client(url)
    form = page_values(fast_settings(max_new_tokens=1))

    def runs(count: int) -> collections.Counter:
        for _ in range(count):
            visitor.session_hash = str(uuid.uuid4())
            assert visitor.predict(**form, api_name="/run")[0].startswith("**Done in")
        time.sleep(IDLE_S + 0.5)
        cancel_in(url, str(uuid.uuid4()))  # a new session: the idle ones go
        gc.collect()
        return collections.Counter(type(o).__name__ for o in gc.get_objects())

    first = runs(10)
    later = runs(30)
    assert len(held_states(demo)) <= 2, "only the newest sessions are held"
    for kind in ("LeanSessionState", "BlocksConfig", "DownloadButton", "Dataframe", "Dropdown"):
        assert later[kind] <= first[kind] + 2, f"{kind}: {first[kind]} after 10 runs, {later[kind]} after 40"


@pytest.mark.slow
def test_an_open_page_keeps_its_state_and_a_page_whose_state_went_is_told_in_one_line(kept_page):
    demo, url, port = kept_page
    keeper = demo.server_app.state_holder.keeper
    kept_rule, keeper.rule = keeper.rule, SessionRule(max_sessions=3, idle_s=IDLE_S)
    try:
        acting_after_a_while(demo, url, port)
    finally:
        keeper.rule = kept_rule


def acting_after_a_while(demo, url: str, port: int) -> None:
    with open_page(port, "page-1"), open_page(port, "page-2"):
        assert cancel_in(url, "page-1") == "Nothing to cancel."
        time.sleep(IDLE_S + 0.5)
        for i in range(4):  # sessions without a page: they go first, and the idle open page stays
            assert cancel_in(url, f"api-{i}") == "Nothing to cancel."
        assert "page-1" in held_states(demo)
        assert cancel_in(url, "page-1") == "Nothing to cancel.", "an open page idle a while still acts"
        with open_page(port, "page-3"), open_page(port, "page-4"):
            cancel_in(url, "page-2")
            cancel_in(url, "page-3")
            cancel_in(url, "page-4")  # four open pages, three states: the least recently used, page-1's, goes
            assert held_states(demo) == {"page-2", "page-3", "page-4"}
            body = {"data": [], "fn_index": 0, "session_hash": "page-1", "event_data": None, "trigger_id": None}
            answer = httpx.post(url + "gradio_api/queue/join", json=body, timeout=30)
            assert answer.status_code == 410 and answer.json()["detail"] == DROPPED_LINE
            assert "page-1" not in held_states(demo), "the refused request made no state"


@pytest.mark.browser
def test_in_a_browser_an_idle_open_page_runs_again_and_a_page_whose_session_went_says_reload(kept_page, tmp_path):
    from tests.test_dashboard_browser import CHROMIUM, click_run_and_wait, launch_browser, open_replay, opened_page

    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    demo, url, _ = kept_page
    keeper = demo.server_app.state_holder.keeper
    with sync_playwright() as playwright:
        browser = launch_browser(playwright)
        try:
            page = opened_page(browser, url)
            click_run_and_wait(page)
            assert "Done" in page.inner_text("#status")
            done = "document.querySelector('#history')?.innerText.split(/\\s+/).filter(w => w === 'done').length"
            page.wait_for_function(f"{done} >= 1")
            runs = page.evaluate(done)
            time.sleep(IDLE_S + 0.5)
            cancel_in(url, str(uuid.uuid4()))  # a new session: the idle ones without a page go
            page.click("#run-btn")
            page.wait_for_function(f"{done} === {runs + 1}")
            assert "Done" in page.inner_text("#status"), "the open page, idle past the idle time, runs again"
            page.wait_for_function("!document.querySelector('#download-report').disabled")
            with page.expect_download() as download:
                page.click("#download-report")
            report = tmp_path / "report.json"
            download.value.save_as(report)
            open_replay(page, report)
            assert "Showing" in page.inner_text("#replay-status"), "its download replays"
            page.get_by_role("tab", name="Compare").click()
            kept_rule, keeper.rule = keeper.rule, SessionRule(max_sessions=1, idle_s=IDLE_S)
            try:
                cancel_in(url, str(uuid.uuid4()))  # one state in all: the page's goes
            finally:
                keeper.rule = kept_rule
            page.click("#run-btn")
            page.get_by_text("reload the page to go on").first.wait_for(timeout=30_000)
            assert page.get_by_text("reload the page to go on").first.is_visible()
            page.reload()
            page.wait_for_selector("#run-btn")
            page.wait_for_function(f"{done} === {runs + 1}")  # its runs are kept
            page.click("#run-btn")
            page.wait_for_function(f"{done} === {runs + 2}")
            assert "Done" in page.inner_text("#status"), "after the reload the page runs again"
        finally:
            browser.close()
