"""The contestants under load, on one workload: the fair protocol of core.compare, for continuous batching.

For each point (a number of slots B, and an arrival rate): every contestant runs once untimed (its warm-up:
compiles, CUDA-graph captures, transformers' own warm-up), then k timed trials, the order alternating between
rounds; medians over trials. Then, untimed and at the main point only: each batched loop once more under the sync
audit (its reads per decode step), and on CUDA once more under CUPTI (kernel-busy). Each request's tokens are
checked against its solo decode (the naive loop alone, static cache, no compile), as many requests as `solo_checks`
asks, and across trials.

What is measured, per contestant (core.load.stats): output tokens/s and requests/s over the run's wall time; per
request, time to first token and time per output token (p50, p99); the slot steps computed past a stop (the waste
of learning late); the host's wait and the device's idle per decode step; kernel-busy from the kernel measurement.
A sweep over B (offline) and over the rate (online) gives the curves.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from core.audit.sync import SyncAudit
from core.load.batching import BATCHED_LOOPS, NAIVE, BatchedRun, run_batched, step_bound
from core.load.hf_batching import HF_BATCHING, forget_managers, hf_batching_problem, run_hf_batching
from core.load.slots import Slots, slot_cache_problem
from core.load.stats import run_summary, summarize_trials
from core.loops.generation import run as solo_run
from core.loops.prompt import check_length, prompt_rows, resolve_eos_ids
from core.measure.kernel_measurement import kernel_measurement
from core.models.loading import LoadedModel, check_support
from core.phases import AUDIT, KERNEL_MEASUREMENT, TRIAL, WARMUP
from core.request.load import LoadRequest, load_option
from core.request.options import NO_CHECK, Cancelled, GenerationOptions, adapt_to_device, require, static_cache_length
from core.request.workload import Workload

RING = 130  # record rows on the device: more than the longest lag (64) and the steps a copy may trail by
LoadEvent = dict[str, Any]


def run_load(loaded: LoadedModel, request: LoadRequest, *, on_event: Callable[[LoadEvent], None] | None = None,
             should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Every point of `request`, each contestant on the same workload; the report's `load` section."""
    emit = on_event or (lambda event: None)
    stop = should_stop or (lambda: False)
    options, notices = adapt_to_device(request.options, loaded.device.type)
    problem = slot_cache_problem(loaded.model)
    require(problem is None, f"{loaded.spec} cannot run under load here: {problem}")
    check_support(loaded, options.compile)
    contestants, skipped = runnable_contestants(loaded, request.contestants)
    notices += skipped
    base = request.workload.build()
    prompt_ids = [_ids(loaded, r.prompt) for r in base.requests]
    for ids, r in zip(prompt_ids, base.requests):
        check_length(loaded, len(ids), r.max_new_tokens)
    eos_ids = [] if options.ignore_eos else resolve_eos_ids(loaded, options.eos_token_id)
    cache_len = static_cache_length(max(map(len, prompt_ids)), base.longest_output, options.lag)
    check_memory(loaded, max(b for b, _ in request.points()), cache_len)
    solo = _solo_tokens(loaded, base, prompt_ids, options, request.solo_checks, emit, stop)
    place = _Place(emit)
    points: list[dict[str, Any]] = []
    cut = None
    try:
        for index, (slots, rate) in enumerate(request.points()):
            workload = replace(request.workload, rate=rate).build() if rate != base.spec.rate else base
            # the audit and the kernel measurement at the main point only: each is one more run of every loop
            asked = request if index == 0 else replace(request, audit=False, no_kernel_measurement=True)
            points.append(_point(loaded, asked, options, contestants, workload, prompt_ids, slots, cache_len,
                                 eos_ids, solo, place, stop))
    except (KeyboardInterrupt, Cancelled) as stopped:
        if not points:  # the main point did not finish: there is nothing whole to keep
            raise
        cut = place.interruption(stopped, request, points)
    forget_managers(loaded)
    main = points[0]
    section = {"workload": base.summary(), "request": request.settings(), "slots": request.max_batch,
               "options": _options_json(options),
               "contestants_asked": list(request.contestants), "notices": list(dict.fromkeys(notices)),
               "cache_len": cache_len, "solo_checked": len(solo), "contestants": main["contestants"],
               "points": points, "sweep": _sweep_kind(request)}
    if cut is not None:
        section["interrupted"] = cut
        raise CancelledLoad(section) if cut["by"] == "cancel" else InterruptedLoad(section)
    return section


class InterruptedLoad(KeyboardInterrupt):
    """An interrupt (Ctrl-C, or SIGTERM where the caller turns it into one) after the main point had finished:
    `section` is the load section of the points that finished, its `interrupted` part saying what was cut. A
    KeyboardInterrupt still, so that whoever does not look for it stops as before."""

    def __init__(self, section: dict[str, Any]) -> None:
        super().__init__("interrupted")
        self.section = section


class CancelledLoad(Cancelled):
    """A cancel (the page's Cancel button) after the main point had finished: `section` as InterruptedLoad's; the
    engine sets `report`, the load report of it, which goes with the job's end. A Cancelled still."""

    def __init__(self, section: dict[str, Any]) -> None:
        super().__init__("cancelled")
        self.section = section
        self.report: dict[str, Any] | None = None


class _Place:
    """Passes every event on, noting where the run is: the point begun last, and its phase and contestant."""

    def __init__(self, emit: Callable[[LoadEvent], None]) -> None:
        self.emit = emit
        self.point: dict[str, Any] | None = None
        self.phase: str | None = None
        self.contestant: str | None = None

    def __call__(self, event: LoadEvent) -> None:
        if event["type"] == "point":
            self.point, self.phase, self.contestant = {"slots": event["slots"], "rate": event["rate"]}, None, None
        elif event["type"] == "phase":
            self.phase, self.contestant = event["phase"], event["contestant"]
        self.emit(event)  # noted first: a listener that stops the run here stops it at this place

    def interruption(self, stopped: BaseException, request: LoadRequest,
                     points: list[dict[str, Any]]) -> dict[str, Any]:
        """What was cut: the point (left out of the report whole), its phase ("set-up" before its first warm-up:
        the slots' compile and capture) and contestant, and the points that finished and did not."""
        done = [(p["slots"], p["rate"]) for p in points]
        left = [{"slots": b, "rate": r} for b, r in request.points() if (b, r) not in done]
        return {"by": "cancel" if isinstance(stopped, Cancelled) else "interrupt", "point": self.point,
                "phase": self.phase or SET_UP, "contestant": self.contestant, "points_done": len(points),
                "points_planned": len(request.points()), "points_left_out": left}


SET_UP = "set-up"  # a point cut before its first warm-up began: while its slots were built (compile and capture)


def _sweep_kind(request: LoadRequest) -> str | None:
    kinds = [name for name, values in (("slots", request.sweep_batch), ("rate", request.sweep_rate)) if values]
    return "+".join(kinds) or None


def runnable_contestants(loaded: LoadedModel, contestants: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The contestants that run here, naive first when the ceiling needs its lengths; a notice for each left out."""
    chosen, notices = [], []
    for name in contestants:
        problem = hf_batching_problem(loaded, name) if name in HF_BATCHING else None
        if problem:
            notices.append(f"{name} left out: {problem}")
        else:
            chosen.append(name)
    if NO_CHECK in chosen and NAIVE in chosen:
        chosen.remove(NAIVE)
        chosen.insert(0, NAIVE)
    return chosen, notices


def _ids(loaded: LoadedModel, prompt: Any) -> list[int]:
    return prompt_rows(loaded.tokenizer, prompt if isinstance(prompt, str) else list(prompt))[0]


# ------------------------------------------------------------------------------------------------ one point

def _point(loaded: LoadedModel, request: LoadRequest, options: GenerationOptions, contestants: list[str],
           workload: Workload, prompt_ids: list[list[int]], slots: int, cache_len: int, eos_ids: list[int],
           solo: dict[int, list[int]], emit: Callable[[LoadEvent], None], stop: Callable[[], bool]) -> dict[str, Any]:
    point = {"slots": slots, "rate": workload.spec.rate}
    emit({"type": "point", **point, "t": time.perf_counter()})
    board = _slots_for(loaded, slots, cache_len, options)
    runner = _Runner(loaded, board, workload, prompt_ids, options, eos_ids, emit, stop)
    warmups: dict[str, dict[str, Any]] = {}
    for name in contestants:
        emit({**WARMUP.event(name, time.perf_counter()), **point})
        began = time.perf_counter()
        run = runner.run(name, trial=None)
        warmups[name] = {"wall_ms": round((time.perf_counter() - began) * 1000, 3),
                         "run_ms": round(run.total_s * 1000, 3), "setup_ms": round(run.setup_ms, 3)}
        if name == NAIVE:
            runner.lengths = [len(r.tokens) for r in run.requests]
    trials: dict[str, list[BatchedRun]] = {name: [] for name in contestants}
    for trial in range(request.trials):
        order = contestants if trial % 2 == 0 else list(reversed(contestants))
        for name in order:
            emit({**TRIAL.event(name, time.perf_counter(), trial), **point})
            run = runner.run(name, trial=trial)
            trials[name].append(run)
            emit({"type": "load-run", "contestant": name, "trial": trial, **point, "t": time.perf_counter(),
                  **run_summary(run)})
    audits = _audits(runner, contestants, point, emit) if request.audit else {}
    kernels = _kernel_measurements(runner, contestants, trials, point, emit) \
        if loaded.device.type == "cuda" and not request.no_kernel_measurement else {}
    entries = {}
    for name in contestants:
        entry = summarize_trials(trials[name], solo)
        entry["warmup"] = warmups[name]
        if name in audits:
            entry["sync_audit"] = audits[name]
            entry["reads_per_decode_step"] = audits[name]["reads_per_decode_step"]
            entry["copies_per_decode_step"] = audits[name]["copies_per_decode_step"]
        if name in kernels:
            entry["kernel_measurement"] = kernels[name]
            entry["kernel_busy_fraction"] = kernels[name]["run_busy_fraction"]
        entries[name] = entry
    _identity_across(entries, trials)
    return {**point, "workload": workload.summary(), "contestants": entries}


class _Runner:
    """Runs one contestant once on the point's workload and slots."""

    def __init__(self, loaded: LoadedModel, slots: Slots, workload: Workload, prompt_ids: list[list[int]],
                 options: GenerationOptions, eos_ids: list[int], emit: Callable[[LoadEvent], None],
                 stop: Callable[[], bool]):
        self.loaded, self.slots, self.workload, self.prompt_ids = loaded, slots, workload, prompt_ids
        self.options, self.eos_ids, self.emit, self.stop = options, eos_ids, emit, stop
        self.lengths: list[int] | None = None

    def run(self, name: str, trial: int | None, **marks: Any) -> BatchedRun:
        if self.stop():
            raise Cancelled("cancelled")

        def tokens(index: int, new: list[int], at_s: float) -> None:
            self.emit({"type": "load-tokens", "contestant": name, "trial": trial, "request": index, "tokens": new,
                       "t": at_s})

        listener = tokens if trial is None or trial == 0 else None
        if name in BATCHED_LOOPS:
            return run_batched(name, self.slots, self.workload, self.prompt_ids, eos_ids=self.eos_ids,
                               ignore_eos=self.options.ignore_eos, lag=self.options.lag, known_lengths=self.lengths,
                               on_tokens=listener, should_stop=self.stop,
                               clock_steps=step_bound(self.workload, self.slots.count, self.options.lag), **marks)
        return run_hf_batching(self.loaded, name, self.workload, self.prompt_ids, slots=self.slots.count,
                               eos_ids=self.eos_ids, ignore_eos=self.options.ignore_eos,
                               compiled=self.options.compile != "off", on_tokens=listener)


def _audits(runner: _Runner, contestants: list[str], point: dict[str, Any],
            emit: Callable[[LoadEvent], None]) -> dict[str, dict[str, Any]]:
    """Each batched loop once more under the sync audit: its reads per decode step, at their lines."""
    audits = {}
    for name in contestants:
        if name not in BATCHED_LOOPS:
            continue
        emit({**AUDIT.event(name, time.perf_counter()), **point})
        audit = SyncAudit(runner.loaded.device)
        with audit:
            runner.run(name, trial=None, on_step=audit.step, on_queued=_queued_mark(audit))
            audit.end()
        result = audit.result()
        audits[name] = {key: result.get(key) for key in ("device", "steps", "decode_steps", "reads",
                                                          "reads_per_decode_step", "copies_per_decode_step",
                                                          "most_reads_in_a_decode_step", "lagged_waits", "sites")}
        if "note" in result:
            audits[name]["note"] = result["note"]
    return audits


def _queued_mark(audit: SyncAudit) -> Callable[[int], None]:
    return lambda step: audit.queued()


def _kernel_measurements(runner: _Runner, contestants: list[str], trials: dict[str, list[BatchedRun]],
                         point: dict[str, Any], emit: Callable[[LoadEvent], None]) -> dict[str, dict[str, Any]]:
    """Each batched loop once more under CUPTI, read per decode step as a single run's kernel measurement is
    (core.measure.kernel_measurement: kernel-busy, the gaps, the time by kind); and under load, kernel-busy over the
    whole run, from its first kernel to its last (the admissions' kernels count as busy: they run between the
    steps), and the slowdown of the measured run against the trials' median."""
    measured = {}
    for name in contestants:
        if name not in BATCHED_LOOPS:
            continue
        emit({**KERNEL_MEASUREMENT.event(name, time.perf_counter()), **point})
        measured[name] = _kernel_measurement(runner, name, trials[name])
    return measured


def _kernel_measurement(runner: _Runner, name: str, trials: list[BatchedRun]) -> dict[str, Any]:
    """One more run of `name` read as core.measure.kernel_measurement reads a single run (against the trials' median
    step), with kernel-busy over the whole run (`run_busy_fraction`) and its slowdown against the trials' median
    run (`run_slowdown`)."""
    ran: list[BatchedRun] = []

    def run_once() -> dict[str, Any]:
        ran.append(runner.run(name, trial=None))
        return {"timings": ran[-1].timings, "started_s": ran[-1].started_s}

    steps = [t.timings["ms_per_token_p50"] for t in trials if t.timings.get("ms_per_token_p50")]
    result = kernel_measurement(run_once, statistics.median(steps) if steps else None)
    timed = statistics.median(t.total_s for t in trials) if trials else None
    span_ms = result.get("device_span_ms") or 0.0
    result.update(run_busy_fraction=(result.get("kernel_busy_ms") or 0.0) / span_ms if span_ms > 0 else None,
                  run_slowdown=ran[0].total_s / timed if timed else None)
    return result


def _identity_across(entries: dict[str, dict[str, Any]], trials: dict[str, list[BatchedRun]]) -> None:
    """Whether each contestant gave every request the same tokens as the first batched loop did."""
    reference = next((name for name in trials if name in BATCHED_LOOPS and trials[name]), None)
    if reference is None:
        return
    want = [r.tokens for r in trials[reference][0].requests]
    for name, runs in trials.items():
        entries[name]["identical_to"] = {"contestant": reference,
                                         "identical": all([r.tokens for r in run.requests] == want for run in runs)}


# ------------------------------------------------------------------------------------------------ shared set-up

def _slots_for(loaded: LoadedModel, count: int, cache_len: int, options: GenerationOptions) -> Slots:
    """The slots of this shape, built on first use and kept on `loaded` (their compile and capture with them)."""
    key = ("slots", count, cache_len, options.compile)
    slots = loaded.setups.get(key)
    if slots is None:
        slots = loaded.setups[key] = Slots(loaded, count, cache_len, RING, options)
    slots.options = options
    return slots


def _solo_tokens(loaded: LoadedModel, workload: Workload, prompt_ids: list[list[int]], options: GenerationOptions,
                 count: int, emit: Callable[[LoadEvent], None], stop: Callable[[], bool]) -> dict[int, list[int]]:
    """The first `count` requests decoded alone (the naive loop, static cache, no compile): what each should give."""
    solo = {}
    alone = replace(options, loop="naive", compile="off", cache="static", nvtx=False)
    for request in workload.requests[:count]:
        if stop():
            raise Cancelled("cancelled")
        emit({"type": "solo", "request": request.index, "of": count, "t": time.perf_counter()})
        result = solo_run(loaded, [prompt_ids[request.index]], replace(alone, max_new_tokens=request.max_new_tokens))
        solo[request.index] = result.token_ids[0]
    return solo


def slot_cache_bytes(loaded: LoadedModel, slots: int, cache_len: int) -> int:
    """Bytes of the keys and values of `slots` rows of `cache_len` positions in every layer."""
    text = loaded.model.config.get_text_config()
    heads = (getattr(text, "num_key_value_heads", None) or text.num_attention_heads) // max(1, loaded.tp)
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    return 2 * text.num_hidden_layers * slots * heads * cache_len * head_dim * loaded.dtype.itemsize


def check_memory(loaded: LoadedModel, slots: int, cache_len: int) -> None:
    """ValueError in one line when the slots' cache (and transformers' paged one beside it, as large) would not fit
    in the memory free where the model runs."""
    from core.models.memory import free_host_bytes, gib

    need = 2 * slot_cache_bytes(loaded, slots, cache_len)
    if loaded.device.type == "cuda":
        free = torch.cuda.mem_get_info(loaded.device)[0]
        where = str(loaded.device)
    else:
        free, where = free_host_bytes(), "this host"
    if free is not None and need > free:
        raise ValueError(f"the KV cache of {slots} slots of {cache_len} positions (ours, and transformers' paged one "
                         f"beside it) needs {gib(need)}, and {gib(free)} is free on {where}: give fewer slots "
                         f"({load_option('max_batch').cli_flag}) or shorter requests")


def _options_json(options: GenerationOptions) -> dict[str, Any]:
    return {"cache": options.cache, "compile": options.compile, "lag": options.lag, "ignore_eos": options.ignore_eos,
            "eos_token_id": options.eos_token_id}
