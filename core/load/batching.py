"""The continuous-batching loops over B slots (core.load.slots): the naive and the pipelined loop, and the loop that
never checks as the ceiling. They share everything (the slots, the step, admission, the host's bookkeeping) but how
the host learns which rows finished and what they produced:

- naive: after each step it reads the step's record row (tokens and finished flags) to the host, retires the
  finished rows and admits waiting requests into their slots before the next step;
- naive-per-row: the naive loop as people write it (`if finished[i].item(): ...`, then `token = chosen[i].item()`
  to stream it): after each step, for each row a request holds, one read of its finished flag and one of its token,
  2 reads per live row a step where the naive loop makes one; the rest is the naive loop's;
- pipelined: each record row goes by a non_blocking copy into pinned memory and is read `lag` steps later, once its
  event says it landed; a finished row keeps its slot, its extra steps computed and discarded, until the host learns
  it finished; then the next request is admitted there;
- no-check (the ceiling): told each request's output length beforehand (from the naive loop's warm-up), it frees
  every slot at the right step without looking, copies the record rows to pinned memory as the pipelined loop does,
  and reads them once, at the end. No real server can do this; it bounds what learning the stops costs.

A request's first token is the token its row feeds into the first decode step after its admission: the host learns
it from that step's record row (fed tokens), as it learns the rest. A request's tokens reach `on_tokens` as the loop
learns them.

    # 1) admit arrived requests into free slots   2) queue one decode step of every slot
    # 3) learn what some earlier step produced (naive: this one, at once; pipelined: `lag` steps back)
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from core.audit.dispatch import host_memory
from core.load.slots import RECORD_FIELDS, Slots, unpack_record
from core.measure.step_times import StepClock
from core.request.load import NAIVE, NAIVE_PER_ROW, PIPELINED
from core.request.options import NO_CHECK
from core.request.workload import Workload

BATCHED_LOOPS = (NAIVE, NAIVE_PER_ROW, PIPELINED, NO_CHECK)
IDLE_POLL_S = 0.0005  # how often an idle loop looks for the next arrival, at most


@dataclass
class RequestResult:
    """One request's run: when it arrived, was admitted, gave its first token and finished (seconds from the run's
    start, on the host, as the loop learned them), its tokens, its slot and its steps: the first decode step it was
    in, the step that produced its last token, and the step after which the host freed its slot (the steps between
    the last two were computed for nothing)."""

    index: int
    arrival_s: float
    prompt_tokens: int
    tokens: list[int] = field(default_factory=list)
    slot: int | None = None
    admitted_s: float | None = None
    first_token_s: float | None = None
    finished_s: float | None = None
    first_step: int | None = None
    last_step: int | None = None
    released_step: int | None = None

    @property
    def wasted_steps(self) -> int:
        return (self.released_step - self.last_step) if self.released_step is not None else 0

    def to_json(self) -> dict[str, Any]:
        def ms(value: float | None) -> float | None:
            return None if value is None else round(value * 1000, 3)

        return {"index": self.index, "arrival_ms": ms(self.arrival_s), "admitted_ms": ms(self.admitted_s),
                "first_token_ms": ms(self.first_token_s), "finished_ms": ms(self.finished_s),
                "prompt_tokens": self.prompt_tokens, "tokens": len(self.tokens), "slot": self.slot,
                "first_step": self.first_step, "last_step": self.last_step, "released_step": self.released_step}


@dataclass
class BatchedRun:
    """What one run of a loop over a workload produced: each request's result, the decode steps it computed and
    their timings (core.measure.step_times, one entry per decode step)."""

    loop: str
    requests: list[RequestResult]
    steps: int
    slots: int
    total_s: float
    timings: dict[str, Any]
    started_s: float
    setup_ms: float = 0.0  # the slots' set-up before this run (compile, capture), where this run was their first

    @property
    def output_tokens(self) -> int:
        return sum(len(r.tokens) for r in self.requests)


TokensListener = Callable[[int, list[int], float], None]  # (request index, its new tokens, host time)


class _Host:
    """The host's view of the slots: which request holds which, who waits, what each request has produced."""

    def __init__(self, workload: Workload, prompt_ids: Sequence[list[int]], slots: Slots,
                 on_tokens: TokensListener | None):
        self.requests = workload.requests
        self.prompt_ids = prompt_ids
        self.slots = slots
        self.on_tokens = on_tokens
        self.results = [RequestResult(r.index, r.arrival_s, len(prompt_ids[r.index])) for r in self.requests]
        self.order = sorted(range(len(self.requests)), key=lambda i: (self.requests[i].arrival_s, i))
        self.arrived = 0  # how many of `order` have arrived
        self.waiting: collections.deque[int] = collections.deque()
        self.holder: list[int | None] = [None] * slots.count
        self.free = list(range(slots.count - 1, -1, -1))  # popped from the end: slot 0 first
        self.finished = 0
        self.t0 = 0.0
        self.known_at_end_s = 0.0  # the ceiling: when its last record row landed

    def start(self) -> None:
        self.t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def unfinished(self) -> bool:
        return self.finished < len(self.requests)

    def busy(self) -> bool:
        return len(self.free) < len(self.holder)

    def take_arrivals(self) -> None:
        now = self.now()
        while self.arrived < len(self.order) and self.requests[self.order[self.arrived]].arrival_s <= now:
            self.waiting.append(self.order[self.arrived])
            self.arrived += 1

    def admit(self, next_step: int) -> None:
        """Waiting requests into free slots, before decode step `next_step`."""
        while self.free and self.waiting:
            index, slot = self.waiting.popleft(), self.free.pop()
            self.slots.admit(slot, self.prompt_ids[index], self.requests[index].max_new_tokens)
            result = self.results[index]
            result.slot, result.admitted_s, result.first_step = slot, self.now(), next_step
            self.holder[slot] = index

    def wait_for_arrival(self) -> None:
        """Nothing to decode: sleep until the next request arrives."""
        if self.arrived < len(self.order):
            left = self.requests[self.order[self.arrived]].arrival_s - self.now()
            if left > 0:
                time.sleep(min(left, max(IDLE_POLL_S, left)))

    def learn(self, step: int, row: list[int], released_step: int, known_s: float | None = None) -> None:
        """What decode step `step` produced (its record row), learned after step `released_step` was queued."""
        fed, chosen, live, finished = unpack_record(row, len(self.holder))
        known_s = self.now() if known_s is None else known_s
        for slot, index in enumerate(self.holder):
            if index is None:
                continue
            result = self.results[index]
            if step < result.first_step:  # the row's earlier holder's step, read after its slot was given again
                continue
            new = []
            if step == result.first_step:
                new.append(fed[slot])
                result.first_token_s = known_s
            if live[slot]:
                new.append(chosen[slot])
            if new:
                result.tokens.extend(new)
                if self.on_tokens is not None:
                    self.on_tokens(index, new, known_s)
            if finished[slot]:
                result.last_step, result.released_step, result.finished_s = step, released_step, known_s
                self.holder[slot] = None
                self.free.append(slot)
                self.finished += 1


class _PinnedRows:
    """Pinned host copies of record rows, sent with non_blocking copies and an event each (the pipelined loop's and
    the ceiling's mirror); `rows` of them, reused in turn."""

    def __init__(self, slots: Slots, rows: int):
        cuda = slots.device.type == "cuda"
        self.slots, self.cuda, self.count = slots, cuda, rows
        self.rows = host_memory(torch.empty(rows, RECORD_FIELDS * slots.count, dtype=torch.long, pin_memory=cuda))
        self.events = [torch.cuda.Event() for _ in range(rows)] if cuda else []

    def send(self, step: int) -> None:
        at = step % self.count
        self.rows[at].copy_(self.slots.state.record[step % self.slots.ring], non_blocking=True)
        if self.cuda:
            self.events[at].record()

    def read(self, step: int) -> list[int]:
        """Step `step`'s row once its copy has landed."""
        at = step % self.count
        if self.cuda:
            self.events[at].synchronize()
        return self.rows[at].tolist()  # host memory: no device sync


def run_batched(loop: str, slots: Slots, workload: Workload, prompt_ids: Sequence[list[int]], *, eos_ids: list[int],
                ignore_eos: bool, lag: int = 1, known_lengths: Sequence[int] | None = None,
                on_tokens: TokensListener | None = None, clock_steps: int | None = None,
                on_step: Callable[[int], None] | None = None, on_queued: Callable[[int], None] | None = None,
                should_stop: Callable[[], bool] | None = None) -> BatchedRun:
    """One run of `loop` over `workload` in `slots`. `known_lengths`: each request's output length, for the ceiling.
    `on_step(i)` / `on_queued(i)` mark where decode step i begins and where its work is queued (the sync audit's
    marks); `should_stop()` is asked once a step (a cancel). `clock_steps` bounds the steps timed (default: enough for
    any schedule of this workload)."""
    host = _Host(workload, prompt_ids, slots, on_tokens)
    capacity = clock_steps or step_bound(workload, slots.count, lag)
    clock = _clock_for(slots, capacity)
    run = {NAIVE: _naive, NAIVE_PER_ROW: _naive_per_row, PIPELINED: _pipelined, NO_CHECK: _ceiling}[loop]
    with torch.inference_mode():
        slots.begin(eos_ids, ignore_eos)
        setup_ms = slots.set_up() if not slots.ready else 0.0
        context = _LoopContext(slots, host, clock, capacity, on_step, on_queued, should_stop or (lambda: False))
        if loop == NO_CHECK and known_lengths is None:
            raise ValueError("the ceiling needs each request's output length (from the naive loop's warm-up)")
        clock.start()
        host.start()
        steps = run(context, lag=lag, known_lengths=known_lengths)
        clock.stop()
        if context.after_stop is not None:  # the ceiling's bookkeeping of what it learned at the end, not timed
            context.after_stop()
    total_s = clock.t_end - clock.t0
    timings = clock.summary(kept_steps=steps, computed_steps=steps, new_tokens=sum(len(r.tokens)
                            for r in host.results), setup_ms=0.0, compile_ms=0.0, rows=slots.count).to_dict() \
        if steps else {}
    if steps and clock.cuda:
        timings.update(_device_idle(clock, slots, steps))
    return BatchedRun(loop=loop, requests=host.results, steps=steps, slots=slots.count, total_s=total_s,
                      timings=timings, started_s=clock.t0, setup_ms=setup_ms)


def _device_idle(clock: StepClock, slots: Slots, steps: int) -> dict[str, float]:
    """The device's idle time from the first decode step's start to the last one's end: what is in neither a step nor
    an admission (both on one stream, one after the other), in all and per step."""
    span = clock.starts[0].elapsed_time(clock.ends[steps - 1])
    stepping = sum(clock.starts[i].elapsed_time(clock.ends[i]) for i in range(steps))
    admitting = slots.admission_device_ms(clock.starts[0])
    idle = max(0.0, span - stepping - admitting)
    return {"device_idle_ms": idle, "device_idle_ms_per_step": idle / steps, "admission_device_ms": admitting}


def step_bound(workload: Workload, slots: int, lag: int) -> int:
    """Decode steps no loop needs more of on this workload: every request alone, one after the other, each with its
    lag (B=1 is the slowest schedule), plus one step per request for a first token that ends it."""
    return sum(max(1, r.max_new_tokens) for r in workload.requests) + (lag + 1) * len(workload.requests) + 8


@dataclass
class _LoopContext:
    slots: Slots
    host: _Host
    clock: StepClock
    capacity: int
    on_step: Callable[[int], None] | None
    on_queued: Callable[[int], None] | None
    should_stop: Callable[[], bool]
    after_stop: Callable[[], None] | None = None

    def queue(self, step: int) -> None:
        if step >= self.capacity:
            raise RuntimeError(f"the run went past {self.capacity} decode steps, more than its workload can need")
        if self.should_stop():
            from core.request.options import Cancelled

            raise Cancelled("cancelled")
        if self.on_step is not None:
            self.on_step(step)
        self.clock.before_step(step)
        self.slots.decode()
        self.clock.after_step(step)
        if self.on_queued is not None:
            self.on_queued(step)


# ------------------------------------------------------------------------------------------------------ the loops

def _naive(ctx: _LoopContext, lag: int, known_lengths: Sequence[int] | None) -> int:
    return _read_each_step(ctx, read_record_row)


def _naive_per_row(ctx: _LoopContext, lag: int, known_lengths: Sequence[int] | None) -> int:
    return _read_each_step(ctx, lambda slots, step: read_row_by_row(slots, step, ctx.host))


def _read_each_step(ctx: _LoopContext, read: Callable[[Slots, int], list[int]]) -> int:
    """The naive loops: after each step the host waits for what it produced (`read` gives its record row), learns
    it and admits waiting requests into the slots it freed before queueing the next."""
    slots, host, clock = ctx.slots, ctx.host, ctx.clock
    step = 0
    while host.unfinished():
        host.take_arrivals()
        host.admit(step)
        if not host.busy():
            host.wait_for_arrival()
            continue
        ctx.queue(step)
        clock.waiting(step)
        row = read(slots, step)
        clock.known(step)
        host.learn(step, row, released_step=step)
        step += 1
    return step


def read_record_row(slots: Slots, step: int) -> list[int]:
    """The naive loop's per-step sync: the host waits here until the device has computed step `step`."""
    return slots.state.record[step % slots.ring].tolist()


def read_row_by_row(slots: Slots, step: int, host: _Host) -> list[int]:
    """The per-row loop's syncs: for each row a request holds, its finished flag and then its token, each read on its
    own, put together as the record row the host learns from (rows no request holds left 0, unread). At a request's
    first step its token read takes the prefill's token and whether the row went on with it (a request whose prefill
    ended it is held, not live): one `.tolist()` of three values, still one read."""
    count, row = slots.count, [0] * (RECORD_FIELDS * slots.count)
    record = slots.state.record[step % slots.ring]
    for slot, index in enumerate(host.holder):
        if index is None:
            continue
        fields = record[slot::count]  # this row's fed token, chosen token, live before, finished after: a view
        first = step == host.results[index].first_step
        finished = fields[3].item()
        # Past its first step a held row was live before the step: a step that finished it freed it at once.
        fed, chosen, live = fields[:3].tolist() if first else (0, fields[1].item(), 1)
        row[slot], row[count + slot], row[2 * count + slot], row[3 * count + slot] = fed, chosen, live, finished
    return row


def _pipelined(ctx: _LoopContext, lag: int, known_lengths: Sequence[int] | None) -> int:
    slots, host, clock = ctx.slots, ctx.host, ctx.clock
    mirror = _mirror_for(slots, slots.ring)
    in_flight: collections.deque[int] = collections.deque()
    step = 0

    def receive() -> None:
        seen = in_flight.popleft()
        clock.waiting(seen)
        row = mirror.read(seen)
        clock.known(seen)
        host.learn(seen, row, released_step=step - 1)

    while host.unfinished():
        host.take_arrivals()
        host.admit(step)
        if not host.busy():
            while in_flight:  # rows of slots already known free: nothing to learn, read to keep the clock whole
                receive()
            host.wait_for_arrival()
            continue
        ctx.queue(step)
        mirror.send(step)
        in_flight.append(step)
        step += 1
        while len(in_flight) > lag:
            receive()
    while in_flight:
        receive()
    return step


def _ceiling(ctx: _LoopContext, lag: int, known_lengths: Sequence[int] | None) -> int:
    """Frees each slot after the step that produces its request's last token, told beforehand; reads every record
    row once, after the last step."""
    host = ctx.host
    lengths = list(known_lengths or [])
    mirror = _mirror_for(ctx.slots, ctx.capacity)
    ends: dict[int, int] = {}  # slot -> the last step its request needs (its first token came from the prefill)
    admitted = step = 0
    while admitted < len(host.requests) or ends:
        host.take_arrivals()
        for slot in [s for s, end in ends.items() if end < step]:
            del ends[slot]
            host.free.append(slot)
        host.admit(step)
        for slot, index in enumerate(host.holder):
            if index is not None:  # just admitted: the host learns its tokens at the end, from the rows
                ends[slot] = step + max(lengths[index] - 2, 0)
                host.holder[slot] = None
                admitted += 1
        if not ends:
            host.wait_for_arrival()
            continue
        ctx.queue(step)
        mirror.send(step)
        step += 1
    _wait_for_the_last_row(ctx, mirror, step)
    ctx.after_stop = lambda: _learn_at_the_end(ctx, mirror, step)
    return step


def _wait_for_the_last_row(ctx: _LoopContext, mirror: _PinnedRows, steps: int) -> None:
    """The ceiling's one wait: every row's copy has landed once the last one has (one stream, in order)."""
    ctx.clock.waiting(0)
    if mirror.cuda and steps:
        mirror.events[(steps - 1) % mirror.count].synchronize()
    for step in range(steps):
        ctx.clock.waiting(step)
        ctx.clock.known(step)
    ctx.host.known_at_end_s = ctx.host.now()


def _learn_at_the_end(ctx: _LoopContext, mirror: _PinnedRows, steps: int) -> None:
    """The ceiling's look at what it computed: every row, in order, as if each request were in its slot from its first
    step; every token known when the last row landed."""
    host, known_s = ctx.host, ctx.host.known_at_end_s
    by_step: dict[int, list[int]] = collections.defaultdict(list)
    for result in host.results:
        by_step[result.first_step].append(result.index)
    for step in range(steps):
        for index in by_step.get(step, ()):
            host.holder[host.results[index].slot] = index
        host.learn(step, mirror.rows[step % mirror.count].tolist(), released_step=step, known_s=known_s)


def _mirror_for(slots: Slots, rows: int) -> _PinnedRows:
    key = ("pinned rows", rows)
    mirror = slots.reusables.get(key)
    if mirror is None:
        mirror = slots.reusables[key] = _PinnedRows(slots, rows)
    return mirror


def _clock_for(slots: Slots, capacity: int) -> StepClock:
    """One clock per capacity, its CUDA events made once (hundreds per run would cost host time)."""
    key = ("clock", capacity)
    clock = slots.reusables.get(key)
    if clock is None:
        clock = slots.reusables[key] = StepClock(slots.device, capacity)
    return clock


