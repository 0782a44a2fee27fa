"""The HTTP guard: what one request, one session or one address may cost the server, settled before Gradio sees it.

- A request body over `max_body_bytes` is answered 413 in one line and never read (the upload route excepted:
  Gradio streams a file to disk there, under its own `max_file_size`).
- Failed logins are limited per client address (`LoginLimiter`): past the limit, 429 until the window has passed,
  without checking the password.
- Gradio's per-session state keeps a copy of every component's configuration and last value (the prompt, the texts,
  each figure's JSON: about 0.3 MiB a session, for up to 10,000 sessions) for its deep links only. Here the session
  state keeps what the handlers need (`LeanSessionState`), for at most `max_sessions` sessions, and the deep-link
  route, which wrote a session's values to disk, is not offered.
- A visitor's download folder goes when their page closes (`forget_downloads_on_unload`).

`launch_options(...)` gives the keyword arguments of `demo.launch` that put all of this in place. No torch here.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import gradio as gr
from gradio.state_holder import SessionState, StateHolder
from starlette.middleware import Middleware

from dashboard.limits import MAX_BODY_BYTES, MAX_SESSIONS

LOGIN_FAILURES = 5  # failed logins an address may make in LOGIN_WINDOW_S before it must wait
LOGIN_WINDOW_S = 60.0
MAX_ADDRESSES = 10_000  # addresses whose failed logins are remembered, newest first
UPLOAD_PATH = "/gradio_api/upload"
DEEP_LINK_PATH = "/gradio_api/deep_link"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class LoginLimiter:
    """Failed logins per client address: at most `failures` in any `window_s`, then none until the oldest of them
    is `window_s` old."""

    def __init__(self, failures: int = LOGIN_FAILURES, window_s: float = LOGIN_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic):
        self.failures, self.window_s, self._clock = failures, window_s, clock
        self._failed: collections.OrderedDict[str, collections.deque[float]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def wait_s(self, address: str) -> float:
        """Seconds before `address` may try to log in again (0: now)."""
        with self._lock:
            recent = self._recent(address)
            if len(recent) < self.failures:
                return 0.0
            return max(0.0, recent[0] + self.window_s - self._clock())

    def failed(self, address: str) -> None:
        with self._lock:
            recent = self._recent(address)
            recent.append(self._clock())
            self._failed[address] = recent
            self._failed.move_to_end(address)
            while len(self._failed) > MAX_ADDRESSES:
                self._failed.popitem(last=False)

    def _recent(self, address: str) -> collections.deque[float]:
        recent = self._failed.get(address, collections.deque(maxlen=self.failures))
        while recent and recent[0] <= self._clock() - self.window_s:
            recent.popleft()
        return recent


class _BodyTooLarge(Exception):
    pass


class RequestGuard:
    """ASGI middleware: the body cap, the login limit and the routes that are not offered (see the module)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int = MAX_BODY_BYTES, logins: LoginLimiter | None = None):
        self.app, self.max_body_bytes = app, max_body_bytes
        self.logins = logins or LoginLimiter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if path.rstrip("/") == DEEP_LINK_PATH:
            await _answer(send, 404, "deep links are not offered by this server")
            return
        size = _content_length(scope)
        if size is not None and size > self.max_body_bytes and path != UPLOAD_PATH:
            await _answer(send, 413, f"the request body of {size:,} bytes is over this server's limit of "
                                     f"{self.max_body_bytes:,} bytes")
            return
        if scope.get("method") == "POST" and path.rstrip("/") == "/login":
            await self._login(scope, receive, send)
        elif path == UPLOAD_PATH:
            await self.app(scope, receive, send)
        else:
            await self._capped(scope, receive, send)

    async def _capped(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app, with a body of unstated length (chunked) cut off at the limit and answered 413."""
        seen, over, started = 0, False, False

        async def counted() -> Message:
            nonlocal seen, over
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    over = True
                    raise _BodyTooLarge
            return message

        async def guarded(message: Message) -> None:
            nonlocal started
            if over:  # the app's own answer to a body cut short (a 400) gives way to the 413 below
                return
            started = True
            await send(message)

        try:
            await self.app(scope, counted, guarded)
        except Exception:
            if not over:
                raise
        if over and not started:
            await _answer(send, 413, f"the request body is over this server's limit of {self.max_body_bytes:,} "
                                     "bytes")

    async def _login(self, scope: Scope, receive: Receive, send: Send) -> None:
        address = (scope.get("client") or ("unknown", 0))[0]
        wait = self.logins.wait_s(address)
        if wait > 0:
            await _answer(send, 429, f"too many failed logins from this address: try again in {wait:.0f} s",
                          {"retry-after": f"{wait:.0f}"})
            return

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] in (400, 401):  # wrong credentials
                self.logins.failed(address)
            await send(message)

        await self._capped(scope, receive, watched)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _answer(send: Send, status: int, line: str, headers: dict[str, str] | None = None) -> None:
    body = (line + "\n").encode()
    fields = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
              (b"connection", b"close"), *((k.encode(), v.encode()) for k, v in (headers or {}).items())]
    await send({"type": "http.response.start", "status": status, "headers": fields})
    await send({"type": "http.response.body", "body": body})


# ------------------------------------------------------------------------------------------ session state

class _NothingKept(dict):
    """The configuration copy of a lean session: whatever Gradio puts in, nothing stays."""

    def __setitem__(self, key: Any, value: Any) -> None:
        return None


class LeanSessionState(SessionState):
    """Gradio's per-session state without its copy of each component's configuration and last value, which only
    Gradio's deep links read (not offered here). What a handler reads stays: the session's State values and the
    components an update replaced."""

    def __init__(self, blocks: Any):
        super().__init__(blocks)
        self.config_values = _NothingKept()

    def _update_config(self, key: int) -> None:
        return None

    def _update_value_in_config(self, key: int, value: Any) -> None:
        return None


class LeanStateHolder(StateHolder):
    """Gradio's session store, making LeanSessionState sessions (at most its `capacity`, the oldest dropped)."""

    def __getitem__(self, session_id: str) -> SessionState:
        with self.lock:
            if session_id not in self.session_data:
                self.session_data[session_id] = LeanSessionState(self.blocks)
        return super().__getitem__(session_id)


def make_sessions_lean(holder: StateHolder) -> None:
    """Turn Gradio's session store of a served app into a LeanStateHolder (before it holds any session)."""
    holder.__class__ = LeanStateHolder


@asynccontextmanager
async def _lean_sessions(app: Any) -> AsyncIterator[None]:
    make_sessions_lean(app.state_holder)  # the server's startup: before the first request
    yield


def launch_options(max_body_bytes: int = MAX_BODY_BYTES, max_sessions: int = MAX_SESSIONS,
                   logins: LoginLimiter | None = None) -> dict[str, Any]:
    """Keyword arguments for `demo.launch(...)` that guard the served app (see the module)."""
    guard = Middleware(RequestGuard, max_body_bytes=max_body_bytes, logins=logins)
    return {"app_kwargs": {"middleware": [guard], "lifespan": _lean_sessions},
            "state_session_capacity": max_sessions}


def forget_downloads_on_unload(demo: gr.Blocks) -> None:
    """When a visitor's page closes, their download folder goes (dashboard.downloads: Gradio keeps its own copies
    of what it offered)."""
    dashboard = demo.dashboard  # type: ignore[attr-defined]

    def session_ended(request: gr.Request) -> None:
        dashboard.downloads.forget(dashboard.owner(request))

    demo.unload(session_ended)
