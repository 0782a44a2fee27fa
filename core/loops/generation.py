"""Two token-generation loops over one shared decode step.

The *naive* loop asks the device after every step whether generation is over (`.item()` on the stop flag),
so the host waits for the device each step and cannot queue the next one meanwhile.
The *pipelined* loop copies the stop flag and the new tokens asynchronously into pinned host memory and reads
them `lag` steps later, so the host keeps the device's queue full. Steps it computes past the end (overshoot)
are discarded. Everything else (prefill, the decode step, cache, compile, sampling, stop rules) is shared.
The one step the pipelined loop waits for is prefill: it reads the first token as soon as that copy lands, before
queuing step 1 (on a GPU the device idles for one launch gap, once per run), so its time to first token is naive's
and both loops' decode phase (core.measure.step_times) starts at the same point: the first token known, step 1 not yet
queued.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from core.audit.dispatch import host_memory
from core.loops.prompt import EncodedPrompt, Prompt, check_length, cut_at_eos, encode
from core.loops.step import DecodeSetup, DecodeState, decode_setup_for, synchronize
from core.measure.nvtx import StepRanges, run_range
from core.measure.step_times import StepClock, Timings
from core.models.loading import LoadedModel, compile_failure
from core.parallel.tensor_parallel import gather_device_spans
from core.request.options import NO_CHECK, GenerationOptions, adapt_to_device

SETUP_STEPS = 4  # the decode steps of a shape's setup run (compile, capture), before its first timed run

# ------------------------------------------------------------------------------------------- 1) the loops

def _naive_loop(ctx: _LoopContext, prompt: EncodedPrompt, options: GenerationOptions) -> tuple[int, int]:
    state = ctx.setup.state
    for index in range(options.max_new_tokens):
        ctx.queue_step(index, prompt)
        ctx.clock.waiting(index)
        # What a streamer does: one more sync (the one that blocks, when there is a streamer).
        tokens = state.out[index].tolist() if ctx.on_tokens is not None else None
        finished = read_stop_flag(state, index)
        ctx.clock.known(index)  # before the watcher's callback, so a wait span is the wait alone
        if tokens is not None:
            ctx.deliver(index, tokens)
        if finished:
            return index + 1, index + 1
    return options.max_new_tokens, options.max_new_tokens


def read_stop_flag(state: DecodeState, index: int) -> bool:
    """The naive loop's per-step sync: the host waits here until the device has computed step `index`."""
    return bool(state.done[index].item())



def _pipelined_loop(ctx: _LoopContext, prompt: EncodedPrompt, options: GenerationOptions) -> tuple[int, int]:
    mirror = ctx.mirror
    mirror.state = ctx.setup.state
    last = options.max_new_tokens
    for index in range(last):
        ctx.queue_step(index, prompt)
        mirror.send(index)
        # The first token is read as soon as prefill's copy lands, before step 1 is queued: the time to first token
        # is naive's, for the price of one wait (on a GPU, one launch gap before step 1) per run, not per step.
        seen = index - options.lag if index > 0 else 0
        if (index == 0 or seen > 0) and _receive(ctx, mirror, seen):
            return seen + 1, index + 1
    for seen in range(max(1, last - options.lag), last):
        if _receive(ctx, mirror, seen):
            return seen + 1, last
    return last, last



def _receive(ctx: _LoopContext, mirror: HostMirror, index: int) -> bool:
    """Read step `index` from pinned host memory once its copy has landed; True when generation is over."""
    ctx.clock.waiting(index)
    mirror.wait(index)
    ctx.clock.known(index)
    if ctx.on_tokens is not None:
        ctx.deliver(index, mirror.tokens[index].tolist())  # host memory: no device sync
    return bool(mirror.done[index])



def _no_check_loop(ctx: _LoopContext, prompt: EncodedPrompt, options: GenerationOptions) -> tuple[int, int]:
    """Upper-bound baseline: all max_new_tokens steps, never asking whether generation is over."""
    for index in range(options.max_new_tokens):
        ctx.queue_step(index, prompt)
    ctx.clock.waiting(0)  # one wait for everything; each later step is read from what it brought back
    synchronize(ctx.setup.device)
    done = ctx.setup.state.done[: options.max_new_tokens].tolist()
    kept = next((i + 1 for i, flag in enumerate(done) if flag), options.max_new_tokens)
    for index in range(kept):
        if index:
            ctx.clock.waiting(index)
        tokens = ctx.setup.state.out[index].tolist() if ctx.on_tokens is not None else None
        ctx.clock.known(index)
        if tokens is not None:
            ctx.deliver(index, tokens)
    return kept, options.max_new_tokens


# ------------------------------------------------------------------------- 2) what the loops share

@dataclass
class _LoopContext:
    setup: DecodeSetup
    cache: Any
    clock: StepClock
    on_tokens: Callable[[TokenEvent], None] | None
    eos_ids: frozenset[int]
    ignore_eos: bool
    mirror: HostMirror | None = None
    ranges: StepRanges | None = None  # NVTX step ranges (options.nvtx), else None
    finished_rows: set[int] = field(default_factory=set)

    def queue_step(self, index: int, prompt: EncodedPrompt) -> None:
        """Queue step `index` (0: prefill) between the clock's two host marks; on the CPU this computes it. With NVTX
        ranges, step `index`'s opens just before the first mark and holds the loop's iteration."""
        if self.ranges is not None:
            self.ranges.step(index)
        self.clock.before_step(index)
        if index == 0:
            self.setup.prefill(prompt, self.cache)
        else:
            self.setup.decode(index, self.cache)
        self.clock.after_step(index)

    def deliver(self, index: int, tokens: list[int]) -> None:
        """Hand one step's tokens to the watcher; rows that ended before this step get None."""
        visible = tuple(None if row in self.finished_rows else token for row, token in enumerate(tokens))
        if not self.ignore_eos:
            self.finished_rows.update(row for row, token in enumerate(visible) if token in self.eos_ids)
        self.on_tokens(TokenEvent(step=index, tokens=visible, host_time_s=time.perf_counter()))



def _timed_run(
    setup: DecodeSetup,
    prompt: EncodedPrompt,
    options: GenerationOptions,
    on_tokens: Callable[[TokenEvent], None] | None,
    contestant: str | None = None,
) -> tuple[int, int, StepClock]:
    """One run of the chosen loop; returns (steps kept, steps computed, the clock). With options.nvtx each step has
    an NVTX range named by `contestant` (default: the loop) and its index."""
    clock = StepClock.for_run(setup, options.max_new_tokens)
    # Pinned buffers and events are set up before the clock starts, so their first allocation is never timed.
    mirror = HostMirror.for_run(setup, options) if options.loop == "pipelined" else None
    ranges = StepRanges(contestant or options.loop, options.max_new_tokens) if options.nvtx else None
    clock.start()
    cache = setup.begin(prompt, options)
    context = _LoopContext(setup=setup, cache=cache, clock=clock, on_tokens=on_tokens,
                           eos_ids=frozenset(setup.eos_ids_list), ignore_eos=options.ignore_eos, mirror=mirror,
                           ranges=ranges)
    loop = {"naive": _naive_loop, "pipelined": _pipelined_loop, NO_CHECK: _no_check_loop}[options.loop]
    try:
        kept, computed = loop(context, prompt, options)
    finally:
        if ranges is not None:
            ranges.close()  # the last step's range, also when a watcher cancelled the run or a step failed
    clock.stop()
    return kept, computed, clock



class HostMirror:
    """Pinned host copies of each step's tokens and stop flag, sent with non_blocking copies and an event.

    With streams=2 the copies run on a second CUDA stream that waits for the step's event, so they never sit in
    the compute stream's queue between two steps.
    """

    def __init__(self, device: torch.device, max_steps: int, batch: int, streams: int):
        cuda = device.type == "cuda"
        self.cuda = cuda
        self.rows = host_memory(torch.empty(max_steps, batch + 1, dtype=torch.long, pin_memory=cuda))
        self.tokens = self.rows[:, :-1]
        self.done = self.rows[:, -1]
        self.copy_stream = torch.cuda.Stream(device) if cuda and streams == 2 else None
        self.events: list[Any] = [torch.cuda.Event() for _ in range(max_steps)] if cuda else []
        self.ready: list[Any] = [torch.cuda.Event() for _ in range(max_steps)] if self.copy_stream else []
        self.state: DecodeState = None  # type: ignore[assignment]

    @classmethod
    def for_run(cls, setup: DecodeSetup, options: GenerationOptions) -> HostMirror:
        key = ("mirror", options.max_new_tokens, setup.batch, options.streams)
        mirror = setup.reusables.get(key)
        if mirror is None:
            mirror = setup.reusables[key] = cls(setup.device, options.max_new_tokens, setup.batch,
                                                  options.streams)
        return mirror

    def send(self, index: int) -> None:
        state = self.state
        if self.copy_stream is None:
            self.rows[index].copy_(state.record[index], non_blocking=True)
            if self.cuda:
                self.events[index].record()
            return
        self.ready[index].record()
        with torch.cuda.stream(self.copy_stream):
            self.copy_stream.wait_event(self.ready[index])
            self.rows[index].copy_(state.record[index], non_blocking=True)
            self.events[index].record(self.copy_stream)

    def wait(self, index: int) -> None:
        if self.cuda:
            self.events[index].synchronize()


# ---------------------------------------------------------------------------------------------- 3) a run

@dataclass(frozen=True)
class TokenEvent:
    """New tokens of one decode step: one entry per sequence, None where that sequence had already ended."""

    step: int
    tokens: tuple[int | None, ...]
    host_time_s: float


@dataclass
class GenerationResult:
    """What one run produced: per-sequence token ids (through the first EOS), their text, and timings."""

    token_ids: list[list[int]]
    texts: list[str]
    prompt_tokens: int
    options: GenerationOptions
    timings: Timings
    notices: list[str] = field(default_factory=list)
    started_s: float = 0.0  # perf_counter when the timed run began: the origin of its timings' host times

    @property
    def text(self) -> str:
        return self.texts[0]


def generate(loaded: LoadedModel, prompt: Prompt, *, on_tokens: Callable[[TokenEvent], None] | None = None,
             **options: Any) -> GenerationResult:
    """Generate with the naive or the pipelined loop; see the module docstring for how they differ. `options` are
    GenerationOptions' fields by name (loop, max_new_tokens, cache, compile, lag, ...), each defaulting as there."""
    return run(loaded, prompt, GenerationOptions(**options), on_tokens=on_tokens)


def run(
    loaded: LoadedModel,
    prompt: Prompt,
    options: GenerationOptions,
    *,
    on_tokens: Callable[[TokenEvent], None] | None = None,
    contestant: str | None = None,
) -> GenerationResult:
    """`generate` with the options already gathered (and checked: GenerationOptions cannot be made invalid).
    `contestant` names the run's NVTX ranges (options.nvtx; default: the loop's name)."""
    notices: list[str] = []
    options = _adapt_to_device(loaded, options, notices)
    encoded = encode(loaded, prompt)
    check_length(loaded, encoded.width, options.max_new_tokens)
    setup = decode_setup_for(loaded, encoded.input_ids.shape, options)
    contestant = contestant or options.loop
    try:
        setup_ms = _set_up(setup, encoded, options, contestant) if not setup.ready else 0.0
        with torch.inference_mode():
            kept, computed, clock = _timed_run(setup, encoded, options, on_tokens, contestant)
    except Exception as exc:  # the compiler's pages of text become one line; any other error is raised as it is
        failure = compile_failure(loaded, options.compile, exc)
        if failure is None:
            raise
        raise failure from exc
    token_ids = cut_at_eos(setup.state.out[:kept].T.tolist(), [] if options.ignore_eos else setup.eos_ids_list)
    timings = clock.summary(kept_steps=kept, computed_steps=computed, new_tokens=sum(map(len, token_ids)),
                            setup_ms=setup_ms, compile_ms=setup.take_compile_ms(setup_ms),
                            rows=len(token_ids))
    timings.rank_device_spans = gather_device_spans(clock.t0, timings.device_start_ms, timings.device_end_ms)
    if options.loop == NO_CHECK:
        _forget_host_observations(timings)
    texts = [loaded.tokenizer.decode(ids, skip_special_tokens=True) for ids in token_ids]
    return GenerationResult(token_ids=token_ids, texts=texts, prompt_tokens=encoded.width,
                            options=options, timings=timings, notices=notices, started_s=clock.t0)


def _forget_host_observations(timings: Timings) -> None:
    """The no-check loop learns all its tokens at the end, so when each became known says nothing about it."""
    timings.ttft_ms = timings.decode_tokens = timings.decode_ms = timings.decode_tokens_per_s = None
    if timings.clock == "host":
        timings.step_ms, timings.ms_per_token_p50, timings.ms_per_token_p95 = [], None, None



def _set_up(setup: DecodeSetup, prompt: EncodedPrompt, options: GenerationOptions, contestant: str) -> float:
    """The setup run of a new shape: SETUP_STEPS untimed steps of the naive loop, so that compilation, CUDA-graph
    capture and library set-up stay out of the timings; returns its milliseconds. With options.nvtx it is one NVTX
    range, "<contestant> setup run", with no step ranges in it (its steps are the naive loop's, whoever runs it)."""
    start = time.perf_counter()
    steps = replace(options, max_new_tokens=min(options.max_new_tokens, SETUP_STEPS), loop="naive", nvtx=False)
    with torch.inference_mode(), run_range(f"{contestant} setup run", options.nvtx):
        _timed_run(setup, prompt, steps, None)
    synchronize(setup.device)
    setup.ready = True
    return (time.perf_counter() - start) * 1000


def _adapt_to_device(loaded: LoadedModel, options: GenerationOptions, notices: list[str]) -> GenerationOptions:
    adapted, changes = adapt_to_device(options, loaded.device.type)
    notices.extend(changes)
    return adapted
