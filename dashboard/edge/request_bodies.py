"""Request bodies that must arrive: a deadline for each body, a cap on its size, and a cap on the bytes that all the
bodies being received hold in memory together. An ASGI app reads its body through a `BodyReader`'s `receive`;
when a body is cut off, the reader raises `BodyCut` (or the exception type it is given) carrying the answer the
request gets. No gradio here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from dashboard.service.limits import BODY_GRACE_S, BODY_OVERHEAD_BYTES, MAX_BUFFERED_BYTES, MIN_BODY_RATE

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]


class BodyCut(Exception):
    """A request body the server stopped reading, and the one-line answer its request gets."""

    def __init__(self, status: int, line: str):
        super().__init__(line)
        self.status, self.line = status, line


def body_deadline_s(length: int, grace_s: float = BODY_GRACE_S, rate: float = MIN_BODY_RATE) -> float:
    """Seconds a body of `length` bytes may take to arrive."""
    return grace_s + length / rate


@dataclass(eq=False)
class _Held:
    """One body being received: the bytes it holds, and the event that cuts it off."""
    bytes: int = 0
    cut: asyncio.Event = field(default_factory=asyncio.Event)


class BodyBudget:
    """The bytes held by the bodies still being received, over all requests (each with `overhead` for the server's
    own buffers): at most `max_bytes`. Past it, the body
    holding the most is cut off (it may be the one whose bytes just came), so that slow bodies cannot hold the server's
    memory while a small, whole one still goes through. One event loop's: not thread-safe."""

    def __init__(self, max_bytes: int = MAX_BUFFERED_BYTES, overhead: int = BODY_OVERHEAD_BYTES):
        self.max_bytes, self.overhead = max_bytes, overhead
        # The bodies that have brought bytes and are not whole yet, oldest first (of two as large, the older is cut).
        self._held: dict[_Held, None] = {}

    @property
    def held_bytes(self) -> int:
        return sum(held.bytes for held in self._held)

    def add(self, held: _Held, size: int, arriving: bool = True) -> None:
        """`size` more bytes of a body (`arriving`: more of it to come)."""
        held.bytes += size + (self.overhead if arriving and not held.bytes else 0)
        self._held.setdefault(held)
        while self.held_bytes > self.max_bytes:
            largest = max(self._held, key=lambda h: h.bytes)
            self.close(largest)
            largest.cut.set()

    def close(self, held: _Held) -> None:
        """The body has arrived (or its request ended): its bytes are no longer counted."""
        self._held.pop(held, None)


_BUSY = "the server is receiving too many request bodies at once: try again"


class BodyReader:
    """`receive` for an app, reading one request's body: at most `limit` bytes, within `deadline_s`, counted in
    `budget` (if any) until it is whole. After the body, `receive` is the server's own (a disconnect)."""

    def __init__(self, receive: Receive, limit: int, deadline_s: float, budget: BodyBudget | None = None,
                 cut_type: Callable[[int, str], Exception] = BodyCut, keep: bool = False):
        self._receive, self.limit, self._budget, self._cut_type = receive, limit, budget, cut_type
        self._deadline, self._allowed_s = asyncio.get_running_loop().time() + deadline_s, deadline_s
        self._held = _Held()
        self.seen, self.whole, self.cut, self.keep = 0, False, None, keep
        self.chunks: list[bytes] = []  # the body, when kept

    async def receive(self) -> Message:
        if self.whole:
            return await self._receive()
        message = await self._next()
        if message["type"] == "http.request":
            chunk = message.get("body", b"")
            self.seen += len(chunk)
            if self.seen > self.limit:
                self._stop(413, f"the request body is over this server's limit of {self.limit:,} bytes")
            if self.keep:
                self.chunks.append(chunk)
            if self._budget is not None:
                self._budget.add(self._held, len(chunk), arriving=message.get("more_body", False))
            if self._held.cut.is_set():
                self._stop(503, _BUSY)
            if not message.get("more_body", False):
                self.done()
        else:
            self.done()
        return message

    def done(self) -> None:
        """The body is whole, or no longer wanted: its bytes leave the budget."""
        self.whole = True
        if self._budget is not None:
            self._budget.close(self._held)

    async def _next(self) -> Message:
        remaining = self._deadline - asyncio.get_running_loop().time()
        arrived = asyncio.ensure_future(self._receive())
        cut = asyncio.ensure_future(self._held.cut.wait())
        try:
            await asyncio.wait({arrived, cut}, timeout=max(remaining, 0.0), return_when=asyncio.FIRST_COMPLETED)
        finally:
            cut.cancel()
            if not arrived.done():
                arrived.cancel()
        if arrived.done() and not arrived.cancelled():
            return arrived.result()
        if self._held.cut.is_set():
            self._stop(503, _BUSY)
        self._stop(408, f"the request body did not arrive in time: {self.seen:,} bytes in {self._allowed_s:.0f} s")

    def _stop(self, status: int, line: str) -> NoReturn:
        self.done()
        self.cut = BodyCut(status, line)
        raise self._cut_type(status, line)
