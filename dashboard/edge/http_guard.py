"""The HTTP guard: what one request, one session or one address may cost the server, settled before Gradio sees it.

- Under a login, a request with a body is answered 401 unread until its sender has logged in (Gradio itself checks
  the login only once FastAPI has read the body).
- A request body over `max_body_bytes` is answered 413 in one line and never read; a body must arrive within its
  deadline (408), and the bodies being received hold at most `max_buffered_bytes` together
  (dashboard.edge.request_bodies).
- Uploads (`/gradio_api/upload`) must say their length and stay under the quota of dashboard.edge.gradio_files: the
  size and number of files of one request, what one visitor (a client address) and the folder hold, the oldest
  going first; a page's uploads and the copies Gradio made for it go when it closes (`forget_files_on_unload`).
- Logins are checked one at a time and a failed one is answered after a delay (`LoginGate`): guessing is bounded
  for everyone together, and nobody's wrong passwords refuse the right one.
- Gradio's per-session state keeps a copy of every component's configuration and last value (the prompt, the texts,
  each figure's JSON: about 0.3 MiB a session, for up to 10,000 sessions) for its deep links only. Here the session
  state keeps what the handlers need, under the rule of dashboard.edge.session_store (idle sessions without a page go,
  at most so many per address and `max_sessions` in all; the guard tells it who arrives and which page and event
  streams are open, and answers a page whose session went in one line), and the deep-link route, which wrote a
  session's values to disk, is not offered.

`launch_options(...)` gives the keyword arguments of `demo.launch` that put all of this in place. No torch here.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import gradio as gr
from gradio.route_utils import MultiPartException
from gradio.utils import get_upload_folder
from starlette.middleware import Middleware
from starlette.requests import HTTPConnection

from dashboard.edge.gradio_files import GradioFiles, UploadRefused
from dashboard.edge.request_bodies import BodyBudget, BodyCut, BodyReader, body_deadline_s
from dashboard.edge.session_store import DROPPED_LINE, SessionKeeper, SessionRule
from dashboard.service.limits import (
    FAILED_LOGIN_DELAY_S,
    IDLE_SESSION_S,
    LOGIN_BODY_BYTES,
    MAX_BODY_BYTES,
    MAX_BUFFERED_BYTES,
    MAX_LOGINS_WAITING,
    MAX_SESSIONS,
)

UPLOAD_PATH = "/gradio_api/upload"
DEEP_LINK_PATH = "/gradio_api/deep_link"
LOGIN_PATH = "/login"
JOIN_PATH = "/gradio_api/queue/join"  # an event's request: its body names the uploads it uses
DATA_PATH = "/gradio_api/queue/data"  # an event's answers: they name the files Gradio copied for the page
HEARTBEAT_PATH = "/gradio_api/heartbeat/"  # + a session: open while its page is
EVENT_PATHS = (JOIN_PATH, "/gradio_api/run/", "/gradio_api/api/")  # an event's request: its body names its session
_SESSION = re.compile(rb'"session_hash"\s*:\s*"([^"\\]{1,200})"')

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class LoginGate:
    """Logins one at a time, a failed one answered only after `delay_s` (its turn held meanwhile): at most one
    password is tried per `delay_s`, from all addresses together, and a right one is let in on its turn whatever
    others sent before it. At most `max_waiting` logins wait; past that, 503."""

    def __init__(self, delay_s: float = FAILED_LOGIN_DELAY_S, max_waiting: int = MAX_LOGINS_WAITING):
        self.delay_s, self.max_waiting = delay_s, max_waiting
        self.waiting = 0
        self._turn: asyncio.Lock | None = None  # made on the server's event loop, at its first login

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        if self.waiting >= self.max_waiting:
            raise BodyCut(503, "too many logins are waiting: try again in a few seconds")
        self._turn = self._turn or asyncio.Lock()
        self.waiting += 1
        try:
            async with self._turn:
                yield
        finally:
            self.waiting -= 1


class _UploadCut(BodyCut, MultiPartException):
    """A cut upload, of the type Gradio's upload route catches to remove the files it had begun."""

    def __init__(self, status: int, line: str):
        BodyCut.__init__(self, status, line)
        self.message = line


class RequestGuard:
    """ASGI middleware: the login before a body, the body limits, the upload quota, the login gate and the routes
    that are not offered (see the module)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int = MAX_BODY_BYTES,
                 max_buffered_bytes: int = MAX_BUFFERED_BYTES, logins: LoginGate | None = None,
                 files: GradioFiles | None = None, body_deadline: Callable[[int], float] = body_deadline_s,
                 sessions: SessionKeeper | None = None):
        self.app, self.max_body_bytes, self.body_deadline = app, max_body_bytes, body_deadline
        self.sessions = sessions
        self.budget = BodyBudget(max_buffered_bytes)
        self.logins = logins or LoginGate()
        self.files = files or GradioFiles(Path(get_upload_folder()))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "").rstrip("/")
        size = _content_length(scope)
        if path == DEEP_LINK_PATH:
            await _answer(send, 404, "deep links are not offered by this server")
        elif path != LOGIN_PATH and _has_body(scope) and not _logged_in(scope):
            await _answer(send, 401, "log in first: this server reads no request body before its login")
        elif path == LOGIN_PATH and scope.get("method") == "POST":
            await self._login(scope, receive, send)
        elif path == UPLOAD_PATH:
            await self._upload(scope, receive, send)
        elif size is not None and size > self.max_body_bytes:
            await _answer(send, 413, f"the request body of {size:,} bytes is over this server's limit of "
                                     f"{self.max_body_bytes:,} bytes")
        elif self.sessions is not None and scope.get("method") == "POST" and path.startswith(EVENT_PATHS):
            await self._event(scope, receive, send, self.sessions)
        elif self.sessions is not None and _streamed_session(scope) is not None:
            await self._stream(scope, receive, send, self.sessions)
        else:
            await self._read(scope, receive, send)

    async def _read(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app, reading its body under the limits, and the files a page used or was given claimed for it."""
        size = _content_length(scope)
        reader = BodyReader(receive, self.max_body_bytes, self.body_deadline(size or self.max_body_bytes), self.budget,
                            keep=scope.get("path", "").rstrip("/") == JOIN_PATH)
        await self._through(scope, reader, self._claiming(scope, send))
        if reader.keep and reader.whole and reader.cut is None:
            self._claim_from_body(b"".join(reader.chunks))

    async def _through(self, scope: Scope, reader: BodyReader, send: Send) -> None:
        """The app with `reader` as its receive; a body cut off gets the reader's answer instead of the app's."""
        started = False

        async def guarded(message: Message) -> None:
            nonlocal started
            if reader.cut is not None:  # the app's own answer to a body cut short gives way to the reader's
                return
            started = True
            await send(message)

        try:
            await self.app(scope, reader.receive, guarded)
        except Exception:
            if reader.cut is None:
                raise
        finally:
            reader.done()
        if reader.cut is not None and not started:
            await _answer(send, reader.cut.status, reader.cut.line)

    # ---------------------------------------------------------------------------------------------- sessions

    async def _event(self, scope: Scope, receive: Receive, send: Send, sessions: SessionKeeper) -> None:
        """An event's request, read whole first: a page whose session went is answered in one line (410), any other
        request counts for its session (dashboard.edge.session_store) and goes on to the app."""
        deadline = self.body_deadline(_content_length(scope) or self.max_body_bytes)
        reader = BodyReader(receive, self.max_body_bytes, deadline, self.budget, keep=True)
        try:
            while not reader.whole:
                if (await reader.receive())["type"] != "http.request":
                    return  # the client went away
        except BodyCut as cut:
            await _answer(send, cut.status, cut.line)
            return
        body = b"".join(reader.chunks)
        session = _SESSION.search(body)
        if session and not sessions.arrived(session.group(1).decode(errors="replace"), _address(scope)):
            await _answer_json(send, 410, {"detail": DROPPED_LINE, "error": DROPPED_LINE})
            return
        await self.app(scope, _replay(body, receive), send)
        if scope.get("path", "").rstrip("/") == JOIN_PATH:
            self._claim_from_body(body)

    async def _stream(self, scope: Scope, receive: Receive, send: Send, sessions: SessionKeeper) -> None:
        """A session's heartbeat or event stream, counted open while the app serves it."""
        session, page = _streamed_session(scope) or ("", False)
        sessions.opened(session, _address(scope), page)
        try:
            await self._read(scope, receive, send)
        finally:
            sessions.closed(session, page)

    # ---------------------------------------------------------------------------------------------- logins

    async def _login(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The login form read whole first (small, within its deadline), then checked on its turn."""
        size = _content_length(scope)
        if size is not None and size > LOGIN_BODY_BYTES:
            await _answer(send, 413, f"a login of {size:,} bytes is over this server's limit of {LOGIN_BODY_BYTES:,}")
            return
        reader = BodyReader(receive, LOGIN_BODY_BYTES, self.body_deadline(LOGIN_BODY_BYTES), self.budget, keep=True)
        try:
            while not reader.whole:
                await reader.receive()
            async with self.logins.turn():
                await self.app(scope, _replay(b"".join(reader.chunks), receive), self._delaying_failures(send))
        except BodyCut as cut:
            await _answer(send, cut.status, cut.line)

    def _delaying_failures(self, send: Send) -> Send:
        async def delayed(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] in (400, 401):  # wrong credentials
                await asyncio.sleep(self.logins.delay_s)
            await send(message)

        return delayed

    # ---------------------------------------------------------------------------------------------- uploads

    async def _upload(self, scope: Scope, receive: Receive, send: Send) -> None:
        files = self.files
        size, visitor = _content_length(scope), _address(scope)
        if size is None:
            await _answer(send, 411, "an upload must say its length (Content-Length)")
            return
        try:
            files.admit(visitor, size)
        except UploadRefused as refused:
            await _answer(send, refused.status, refused.line)
            return
        answer: list[Message] = []
        paths: list[str] = []
        try:
            reader = BodyReader(receive, size, self.body_deadline(size), cut_type=_UploadCut)
            await self._through(scope, reader, _kept(answer))
            paths = _uploaded_paths(answer)
        finally:
            files.arrived(visitor, size, paths)
        if len(paths) > files.files:
            files.remove(paths)
            await _answer(send, 413, f"an upload may carry at most {files.files} files; this one had {len(paths)}")
            return
        for message in answer:
            await send(message)

    # ---------------------------------------------------------------------------------------------- page files

    def _claiming(self, scope: Scope, send: Send) -> Send:
        """`send`, claiming for the page the files named in its event answers."""
        if scope.get("path", "").rstrip("/") != DATA_PATH:
            return send
        query = urllib.parse.parse_qs(scope.get("query_string", b"").decode(errors="replace"))
        page = (query.get("session_hash") or [""])[0]
        files = self.files

        async def claiming(message: Message) -> None:
            if page and message["type"] == "http.response.body":
                files.claim(page, files.paths_in(message.get("body", b"")))
            await send(message)

        return claiming

    def _claim_from_body(self, body: bytes) -> None:
        paths = self.files.paths_in(body)
        page = _SESSION.search(body)
        if paths and page:
            self.files.claim(page.group(1).decode(errors="replace"), paths)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives `body` whole, then the server's own (a disconnect)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _kept(messages: list[Message]) -> Send:
    async def keep(message: Message) -> None:
        messages.append(message)

    return keep


def _uploaded_paths(answer: list[Message]) -> list[str]:
    """The paths an upload's answer lists (none when it failed)."""
    if not answer or answer[0].get("status") != 200:
        return []
    try:
        paths = json.loads(b"".join(m.get("body", b"") for m in answer if m["type"] == "http.response.body"))
    except ValueError:
        return []
    return [p for p in paths if isinstance(p, str)] if isinstance(paths, list) else []


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _has_body(scope: Scope) -> bool:
    size = _content_length(scope)
    return bool(size) or any(name == b"transfer-encoding" for name, _ in scope.get("headers", ()))


def _streamed_session(scope: Scope) -> tuple[str, bool] | None:
    """(the session, whether it is its page's heartbeat) of a heartbeat or an event stream; None for another
    request."""
    path = scope.get("path", "")
    if path.startswith(HEARTBEAT_PATH):
        session = path[len(HEARTBEAT_PATH):].strip("/")
        return (session, True) if session else None
    if path.rstrip("/") == DATA_PATH:
        query = urllib.parse.parse_qs(scope.get("query_string", b"").decode(errors="replace"))
        session = (query.get("session_hash") or [""])[0]
        return (session, False) if session else None
    return None


def _address(scope: Scope) -> str:
    return (scope.get("client") or ("unknown", 0))[0]


def _logged_in(scope: Scope) -> bool:
    """Whether the request comes from a login Gradio gave (always, when the server has none)."""
    app = scope.get("app")
    if getattr(app, "auth", None) is None or getattr(app, "auth_dependency", None) is not None:
        return True
    cookies = HTTPConnection(scope).cookies
    token = cookies.get(f"access-token-{app.cookie_id}") or cookies.get(f"access-token-unsecure-{app.cookie_id}")
    return token is not None and token in app.tokens


async def _answer(send: Send, status: int, line: str, headers: dict[str, str] | None = None) -> None:
    body = (line + "\n").encode()
    fields = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
              (b"connection", b"close"), *((k.encode(), v.encode()) for k, v in (headers or {}).items())]
    await send({"type": "http.response.start", "status": status, "headers": fields})
    await send({"type": "http.response.body", "body": body})


async def _answer_json(send: Send, status: int, answer: dict[str, Any]) -> None:
    """An answer as Gradio's page reads one: it shows `detail` in a notice."""
    body = json.dumps(answer).encode()
    fields = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": fields})
    await send({"type": "http.response.body", "body": body})


# ------------------------------------------------------------------------------------------ session state

def _keeping(sessions: SessionKeeper) -> Callable[[Any], Any]:
    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        sessions.adopt(app.state_holder)  # the server's startup: before the first request
        yield

    return lifespan


def launch_options(max_body_bytes: int = MAX_BODY_BYTES, max_sessions: int = MAX_SESSIONS,
                   logins: LoginGate | None = None, files: GradioFiles | None = None,
                   max_buffered_bytes: int = MAX_BUFFERED_BYTES,
                   body_deadline: Callable[[int], float] = body_deadline_s,
                   sessions_per_address: int | None = None, idle_session_s: float = IDLE_SESSION_S,
                   sessions: SessionKeeper | None = None) -> dict[str, Any]:
    """Keyword arguments for `demo.launch(...)` that guard the served app (see the module). `files` keeps the quota
    of uploads and the pages' files: give forget_files_on_unload the same (by default, Gradio's folder as it is
    now)."""
    files = files or GradioFiles(Path(get_upload_folder()))
    sessions = sessions or SessionKeeper(SessionRule(max_sessions, sessions_per_address, idle_session_s),
                                         on_drop=files.forget)
    guard = Middleware(RequestGuard, max_body_bytes=max_body_bytes, max_buffered_bytes=max_buffered_bytes,
                       logins=logins, files=files, body_deadline=body_deadline, sessions=sessions)
    return {"app_kwargs": {"middleware": [guard], "lifespan": _keeping(sessions)},
            "state_session_capacity": max_sessions}


def forget_files_on_unload(demo: gr.Blocks, files: GradioFiles | None = None) -> None:
    """When a visitor's last open page closes, their download folder goes (dashboard.edge.downloads; a reload's old
    page closing leaves the new page's files), and so do the uploads each page used and the copies Gradio made of
    what it offered the page (`files`)."""
    dashboard = demo.dashboard  # type: ignore[attr-defined]

    def session_ended(request: gr.Request) -> None:
        dashboard.page_closed(request)
        if files is not None and request.session_hash:
            files.forget(request.session_hash)

    demo.unload(session_ended)
