"""Fair sharing of the one device queue (issue 42): how much of it one client may hold.

Sessions cost nothing (a script opens as many as it likes), so a bound per session binds nobody; the client here is
its address. On an exposed server (`EXPOSED_SHARING`):

- a visitor (a browser, or one API session) has at most one run queued or running (the runner's own rule; a run
  under load counts as a run, here and below);
- an address has at most `per_address` runs queued or running, and at most `visitors_per_address` visitors who were
  given a run in the last `window_s`;
- newcomers (visitors none of whose runs has finished yet) from one address have at most `newcomers_per_address`
  runs queued or running. An address that stands for many visitors (loopback on an exposed server: Gradio's share
  tunnel, or a proxy on this host) is not held to the two bounds above, but to this one, so that a flood of fresh
  sessions through the tunnel holds that many places and visitors who have finished a run queue as before;
- the queue runs its clients in turn (`share_key`: dashboard.service.job_queue orders by it), so a client's second run
  waits behind every other client's first.

A local server (`LOCAL_SHARING`) keeps only the first rule. No torch or gradio here.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dashboard.service.jobs import DONE, RUNS, Job
from dashboard.service.limits import is_loopback

MAX_REMEMBERED = 10_000  # addresses and visitors remembered, the least recent forgotten first


@dataclass(frozen=True)
class ShareRule:
    """The bounds (None: none)."""

    per_address: int | None = None
    visitors_per_address: int | None = None
    newcomers_per_address: int | None = None
    window_s: float = 600.0


LOCAL_SHARING = ShareRule()
EXPOSED_SHARING = ShareRule(per_address=2, visitors_per_address=8, newcomers_per_address=2)


def sharing_for(exposed: bool) -> ShareRule:
    return EXPOSED_SHARING if exposed else LOCAL_SHARING


@dataclass(frozen=True)
class Client:
    """Who asks for a run: its owner (a browser's id, or an API session) and the address it came from."""

    owner: str
    address: str | None = None

    @property
    def many(self) -> bool:
        """Whether the address may stand for many visitors (the share tunnel, a proxy on this host)."""
        return self.address is not None and is_loopback(self.address)

    @property
    def share_key(self) -> str | None:
        """Whose turn a run takes: the address's, or the visitor's own behind an address shared by many."""
        if self.address is None or self.many:
            return None
        return f"address {self.address}"



class FairShare:
    """Admits a client's run, or refuses it in one line (`admit`); remembers who was given one (`seen`) and who has
    finished one (`finished`)."""

    def __init__(self, rule: ShareRule = LOCAL_SHARING, clock: Callable[[], float] = time.monotonic):
        self.rule, self._clock = rule, clock
        self._proven: collections.OrderedDict[str, None] = collections.OrderedDict()  # owners with a finished run
        self._visitors: collections.OrderedDict[str, collections.OrderedDict[str, float]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def newcomer(self, owner: str | None) -> bool:
        with self._lock:
            return owner is not None and owner not in self._proven

    def admit(self, client: Client, pending: Iterable[Job]) -> None:
        """ValueError (one line) when `client` may not queue a run now, `pending` being the jobs queued or running."""
        if client.address is None:
            return
        runs = [j for j in pending if j.work in RUNS and j.address == client.address]
        if not client.many:
            self._admit_address(client, runs)
        self._admit_newcomer(client, runs)

    def stamp(self, job: Job, client: Client) -> Job:
        """`job` marked with what the queue and later admissions read of its client."""
        job.address, job.share_key, job.newcomer = client.address, client.share_key, self.newcomer(client.owner)
        return job

    def finished(self, job: Job) -> None:
        """A run ended: one that finished proves its owner no newcomer."""
        if job.work not in RUNS or job.state != DONE or job.owner is None:
            return
        with self._lock:
            self._proven[job.owner] = None
            self._proven.move_to_end(job.owner)
            _trim(self._proven)

    def _admit_address(self, client: Client, runs: list[Job]) -> None:
        most = self.rule.per_address
        if most is not None and len(runs) >= most:
            raise ValueError(f"{_runs(len(runs))} from your address {_are(len(runs))} already queued or running, "
                             f"this server's limit for one address: wait for one to finish")
        most = self.rule.visitors_per_address
        if most is not None:
            recent = self._recent_visitors(client.address or "")
            if client.owner not in recent and len(recent) >= most:
                minutes = self.rule.window_s / 60
                raise ValueError(f"{len(recent)} visitors from your address were given runs in the last "
                                 f"{minutes:.0f} minutes, this server's limit for one address: try again later")

    def _admit_newcomer(self, client: Client, runs: list[Job]) -> None:
        most = self.rule.newcomers_per_address
        if most is None or not self.newcomer(client.owner):
            return
        fresh = sum(j.newcomer for j in runs)
        if fresh >= most:
            raise ValueError(f"{_runs(fresh)} of visitors with no finished run yet {_are(fresh)} queued or running "
                             f"from your address, this server's limit: try again when one has finished")

    def _recent_visitors(self, address: str) -> collections.OrderedDict[str, float]:
        with self._lock:
            seen = self._visitors.get(address, collections.OrderedDict())
            while seen and next(iter(seen.values())) <= self._clock() - self.rule.window_s:
                seen.popitem(last=False)
            return seen

    def seen(self, client: Client) -> None:
        """`client` was given a run: it counts among its address's visitors for `window_s`."""
        if client.many or self.rule.visitors_per_address is None or client.address is None:
            return
        with self._lock:
            seen = self._visitors.setdefault(client.address, collections.OrderedDict())
            seen[client.owner] = self._clock()
            seen.move_to_end(client.owner)
            _trim(seen)
            self._visitors.move_to_end(client.address)
            _trim(self._visitors)


def _trim(remembered: collections.OrderedDict) -> None:
    while len(remembered) > MAX_REMEMBERED:
        remembered.popitem(last=False)


def _runs(count: int) -> str:
    return f"{count} run{'s' if count != 1 else ''}"


def _are(count: int) -> str:
    return "are" if count != 1 else "is"
