"""Gradio's per-session state, kept lean and under a rule (issue 42: server memory that levels off, sessions capped
per client address).

Gradio keeps a state for every session it has seen (a browser page, or an API client's session) until its store is
full, so a server whose visitors each come once (API clients, most of them) grew by a session's state a run. Here:

- a session's state is lean (`LeanSessionState`): no copy of each component's configuration and last value, which
  only Gradio's deep links read (not offered);
- a session that is idle (no event of its queued or running, no stream of its open) and has no open page goes
  `idle_s` after its last request: its state, its message queue in Gradio's queue and, for an API session, the files
  Gradio copied for it. An API client that comes back later with the same session gets a new state, which is all
  /run needs;
- on an exposed server an address holds at most `per_address` sessions, and behind the share tunnel (one address for
  every visitor) at most that many without an open page; the store holds at most `max_sessions`. Past either bound
  the oldest idle session goes, those without an open page first; a session with an event queued or running never
  goes;
- a browser page whose session went is answered, when it acts again, in one line that says to reload it
  (`DROPPED_LINE`); its downloads stay until it closes.

`SessionKeeper` keeps the rule: dashboard.edge.http_guard tells it who arrives and which streams open and close, and
`LeanStateHolder` (Gradio's store, adopted at the server's start) asks it to make room. No torch here.
"""

from __future__ import annotations

import collections
import datetime
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gradio.state_holder import SessionState, StateHolder

from dashboard.service.limits import IDLE_SESSION_S, MAX_SESSIONS, is_loopback

DROPPED_LINE = ("This page's session was let go by the server (it keeps a bounded number of sessions for each "
                "address, the idle ones going first): reload the page to go on; your runs and history are kept.")
MAX_DROPPED_PAGES = 10_000  # pages whose session went, remembered to answer them in one line


@dataclass(frozen=True)
class SessionRule:
    """At most `max_sessions` states in all and `per_address` for one address (None: no bound per address); an idle
    session without an open page goes `idle_s` after its last request."""

    max_sessions: int = MAX_SESSIONS
    per_address: int | None = None
    idle_s: float = IDLE_SESSION_S


@dataclass
class _Session:
    address: str | None
    used: float
    pages: int = 0  # open heartbeats: the page is open in a browser
    streams: int = 0  # open event streams (/queue/data)
    page: bool = False  # it was a browser page (it opened a heartbeat)


class SessionKeeper:
    """The sessions' bookkeeping and the rule (see the module). Thread-safe: Gradio makes states on worker threads."""

    def __init__(self, rule: SessionRule = SessionRule(), clock: Callable[[], float] = time.monotonic,
                 on_drop: Callable[[str], None] | None = None):
        self.rule, self._clock, self.on_drop = rule, clock, on_drop
        self.holder: StateHolder | None = None
        self._sessions: collections.OrderedDict[str, _Session] = collections.OrderedDict()  # least recent first
        self._dropped_pages: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._lock = threading.RLock()

    def adopt(self, holder: StateHolder) -> None:
        """Make Gradio's store of a served app a LeanStateHolder kept by this (before it holds any session)."""
        holder.__class__ = LeanStateHolder
        holder.keeper = self  # type: ignore[attr-defined]
        self.holder = holder

    # ---------------------------------------------------------------------------------- from the HTTP guard

    def arrived(self, session: str, address: str | None) -> bool:
        """A request of `session` from `address`; False when it is a page whose session went (answer DROPPED_LINE)."""
        with self._lock:
            if session in self._dropped_pages:
                return False
            self._know(session, address)
            return True

    def opened(self, session: str, address: str | None, page: bool) -> None:
        """A stream of `session` opened: its page's heartbeat (`page`), or an event's stream."""
        with self._lock:
            if session in self._dropped_pages:
                return
            known = self._know(session, address)
            if page:
                known.pages += 1
                known.page = True
            else:
                known.streams += 1

    def closed(self, session: str, page: bool) -> None:
        with self._lock:
            known = self._sessions.get(session)
            if known is None:
                return
            if page:
                known.pages = max(0, known.pages - 1)
            else:
                known.streams = max(0, known.streams - 1)
            self._touch(session)

    # ---------------------------------------------------------------------------------- from the store

    def making(self, session: str) -> None:
        """Gradio is about to make a state for `session`: the expired sessions go, and room is made."""
        with self._lock:
            self._expire()
            if session not in self._sessions:
                self._sessions[session] = _Session(None, self._clock())
            held = self._held()
            while len(held) >= self.rule.max_sessions and self._drop_one(held, busy=self._busy()):
                held = self._held()

    def used(self, session: str) -> None:
        with self._lock:
            if session in self._sessions:
                self._touch(session)

    def __len__(self) -> int:
        return len(self._sessions)

    # ---------------------------------------------------------------------------------- inside

    def _know(self, session: str, address: str | None) -> _Session:
        known = self._sessions.get(session)
        if known is None:
            self._make_room_for(address)
            known = self._sessions[session] = _Session(address, self._clock())
        known.address = known.address or address
        self._touch(session)
        return known

    def _touch(self, session: str) -> None:
        self._sessions[session].used = self._clock()
        self._sessions.move_to_end(session)

    def _held(self) -> list[str]:
        """The sessions with a state, least recently used first."""
        data = self.holder.session_data if self.holder is not None else {}
        return [s for s in self._sessions if s in data] + [s for s in data if s not in self._sessions]

    def _make_room_for(self, address: str | None) -> None:
        most = self.rule.per_address
        if most is None or address is None:
            return
        many = is_loopback(address)  # the share tunnel: every visitor; only sessions without an open page count

        def counted(known: _Session) -> bool:
            return known.address == address and not (many and known.pages)

        busy = self._busy()
        while True:  # sessions with a state: one the guard has seen and Gradio not yet made costs nothing
            mine = [s for s in self._held() if s in self._sessions and counted(self._sessions[s])]
            if len(mine) < most or not self._drop_one(mine, busy):
                return

    def _drop_one(self, candidates: Iterable[str], busy: set[str]) -> bool:
        """Drop the least recently used of `candidates` that may go, those without an open page first."""
        free = [s for s in candidates if s not in busy and not self._streaming(s)]
        choice = next((s for s in free if not self._open_page(s)), None) or next(iter(free), None)
        if choice is None:
            return False
        self._drop(choice)
        return True

    def _expire(self) -> None:
        old = self._clock() - self.rule.idle_s
        stale = [s for s, known in self._sessions.items() if known.used <= old and not known.pages]
        if stale:
            busy = self._busy()
            for session in stale:
                if session not in busy and not self._streaming(session):
                    self._drop(session)

    def _streaming(self, session: str) -> bool:
        known = self._sessions.get(session)
        return known is not None and known.streams > 0

    def _open_page(self, session: str) -> bool:
        known = self._sessions.get(session)
        return known is not None and known.pages > 0

    def _busy(self) -> set[str]:
        """Sessions with an event queued or running in Gradio's queue."""
        queue = getattr(getattr(self.holder, "blocks", None), "_queue", None)
        if queue is None:
            return set()
        queued = [e for q in list(queue.event_queue_per_concurrency_id.values()) for e in list(q.queue)]
        running = [e for job in list(queue.active_jobs) if job for e in job]
        return {e.session_hash for e in queued + running}

    def _drop(self, session: str) -> None:
        known = self._sessions.pop(session, None)
        if self.holder is not None:
            with self.holder.lock:
                self.holder.session_data.pop(session, None)
                self.holder.time_last_used.pop(session, None)
            queue = getattr(self.holder.blocks, "_queue", None)
            if queue is not None:
                queue.pending_messages_per_session.pop(session, None)
                # Nothing of it is queued or running: any id left there is of an event whose answers nobody read
                queue.pending_event_ids_session.pop(session, None)
        if known is not None and known.page:
            self._dropped_pages[session] = None
            while len(self._dropped_pages) > MAX_DROPPED_PAGES:
                self._dropped_pages.popitem(last=False)
        elif self.on_drop is not None:
            self.on_drop(session)  # an API session: the files Gradio copied for it (a page's go when it closes)


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
    """Gradio's session store, making LeanSessionState sessions under its keeper's rule."""

    keeper: SessionKeeper | None = None

    def __getitem__(self, session_id: str) -> SessionState:
        keeper = self.keeper
        if keeper is not None:
            if session_id in self.session_data:
                keeper.used(session_id)
            else:
                keeper.making(session_id)
        with self.lock:
            state = self.session_data.get(session_id)
            if state is None:
                state = self.session_data[session_id] = LeanSessionState(self.blocks)
            self.session_data.move_to_end(session_id)
            self.time_last_used[session_id] = datetime.datetime.now()
            while len(self.session_data) > self.capacity:  # Gradio's own bound, for a store no keeper keeps
                evicted, _ = self.session_data.popitem(last=False)
                self.time_last_used.pop(evicted, None)
        return state
