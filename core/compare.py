"""The fair A/B protocol: the naive and the pipelined loop (and optionally HF generate) on one prompt.

Every contestant first runs once untimed (its warm-up: compilation, CUDA-graph capture and library set-up happen
there and are reported apart); then k timed trials, the order of contestants alternating between trials so that
neither always runs first; medians over trials; a check that all contestants produced the same tokens
(core.report.build). Tokens/s counts the new tokens of all sequences (through EOS) over the host wall time of the run.
"""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import torch

from core.audit.sync import SyncAudit, loop_steps
from core.loops.generation import TokenEvent, run
from core.loops.hf_generate import hf_run
from core.measure.kernel_measurement import kernel_measurement
from core.measure.nvtx import run_range, wanted, with_ranges
from core.measure.stats import timeline_center_steps
from core.models.loading import LoadedModel, check_support
from core.parallel.tensor_parallel import gather_objects
from core.phases import AUDIT, KERNEL_MEASUREMENT, TRIAL, WARMUP
from core.report.build import build_report
from core.request.options import (
    ALL_LOOPS,
    HF_DEFERRED,
    LOOPS,
    PIPELINED_AGAIN,
    BenchRequest,
    Cancelled,
    effective_options,
    hf_generate_options,
)

BenchEvent = dict[str, Any]


class InterruptedRun(KeyboardInterrupt):
    """An interrupt (Ctrl-C, or SIGTERM where the caller turns it into one) after every contestant had finished at
    least one timed trial: `report` is the report of the finished rounds, marked "interrupted". A KeyboardInterrupt
    still, so that whoever does not look for it stops as before."""

    def __init__(self, report: dict[str, Any]) -> None:
        super().__init__("interrupted")
        self.report = report


class CancelledRun(Cancelled):
    """A cancel (the page's Cancel button) after every contestant had finished at least one timed trial: `report`
    is the report of the finished rounds, marked "interrupted" as InterruptedRun's is. A Cancelled still."""

    def __init__(self, report: dict[str, Any]) -> None:
        super().__init__("cancelled")
        self.report = report


def compare(
    loaded: LoadedModel,
    request: BenchRequest,
    *,
    on_event: Callable[[BenchEvent], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_progress: Callable[[BenchEvent], None] | None = None,
    between_rounds: Callable[[bool], bool] | None = None,
) -> dict[str, Any]:
    """Run the protocol and return the JSON-ready report. `on_event` sees phases, tokens and each run's timings;
    `on_progress` sees only the phases and a {"type": "round", "done", "planned"} event after each full round of
    trials, and, unlike `on_event`, does not make the runs stream their tokens.

    Warm-up runs stream their tokens too (trial None): they are untimed, so watching them costs nothing measured.
    An interrupt after the first full round raises InterruptedRun with the report of the finished rounds, and a
    cancel (`should_stop`) there CancelledRun; before it, the KeyboardInterrupt or Cancelled as it came.
    `between_rounds(wanted)` is called before the warm-ups, after each warm-up and before each round, where every
    rank of a tensor-parallel group stands at the same place: it returns whether another round is wanted, as the
    ranks agree (one rank's clock decides --min-seconds), or raises KeyboardInterrupt to stop there
    (core.parallel.ranks.agreed_stop)."""
    _check_device_for(loaded, request)
    loops_ran = effective_options("naive", request.options, loaded.device.type)[0]
    check_support(loaded, loops_ran.compile)
    # What each contestant runs with on this device (CUDA-only modes on the CPU): the report records these.
    effective = {name: effective_options(name, request.options, loaded.device.type) for name in request.contestants}

    def emit(event: BenchEvent) -> None:
        if on_event is not None and event["type"] != "round":  # a round is progress only: the page counts runs
            on_event(event)
        if on_progress is not None and event["type"] in ("phase", "round"):
            on_progress(event)

    stop = should_stop or (lambda: False)
    agree = between_rounds or (lambda wanted: wanted)
    streaming = request.stream or on_event is not None
    runs: list[dict[str, Any]] = []
    warmups: dict[str, dict[str, Any]] = {}
    audits = kernels = interruption = None
    origin_s = time.perf_counter()  # every run's `started_ms` counts from here, so a trace lays them on one axis
    with deterministic_algorithms(request.deterministic) as nondeterministic_ops:
        agree(False)
        for name in request.contestants:
            emit(WARMUP.event(name, time.perf_counter()))
            # With should_stop, a listener gets `stop` checked every step, so a cancel lands within a step even
            # during a long warm-up.
            watcher = _token_listener(emit, name, None) if streaming or should_stop else None
            began_s, graphs_before, split_before = time.perf_counter(), compiled_graph_count(), warm_up_split()
            outcome = run_contestant(loaded, request, name, watcher, stop, run_kind="warm-up")
            warmups[name] = {**_warmup_entry(outcome, began_s, origin_s),
                             "graphs_compiled": compiled_graph_count() - graphs_before,
                             **{key: value - split_before[key] for key, value in warm_up_split().items()}}
            agree(False)
        rounds, phase = 0, TRIAL
        try:
            for trial in _trial_indices(request, runs, agree):
                _timed_round(loaded, request, trial, runs, origin_s, emit, stop, streaming)
                rounds = trial + 1
                emit({"type": "round", "done": rounds, "planned": max(request.trials, rounds),
                      "t": time.perf_counter()})
            phase = AUDIT
            audits = _audited_runs(loaded, request, runs, origin_s, emit, stop) if request.audit else None
            phase = KERNEL_MEASUREMENT
            kernels = _kernel_measurements(loaded, request, runs, emit, stop) \
                if loaded.device.type == "cuda" and not request.no_kernel_measurement else None
        except (KeyboardInterrupt, Cancelled) as stopped:
            if rounds == 0:
                raise
            finished = [r for r in runs if r["trial"] < rounds]
            interruption = {"phase": phase.id, "trials_done": rounds, "trials_planned": max(request.trials, rounds),
                            "runs_left_out": len(runs) - len(finished),
                            "by": "cancel" if isinstance(stopped, Cancelled) else "interrupt"}
            runs[:] = finished  # an unfinished round would give its first contestants one trial more
            audits = kernels = None
    report = build_report(loaded, request, runs, warmups, audits, kernels, effective=effective, loops_ran=loops_ran)
    report["origin_perf_counter_s"] = origin_s  # where started_ms counts from; places a profiler trace beside it
    if request.deterministic:
        report["nondeterministic_ops"] = sorted(nondeterministic_ops)
    if interruption is not None:
        report.update(interrupted=True, interruption=interruption)
        raise CancelledRun(report) if interruption["by"] == "cancel" else InterruptedRun(report)
    return report


def _timed_round(loaded: LoadedModel, request: BenchRequest, trial: int, runs: list[dict[str, Any]],
                 origin_s: float, emit: Callable[[BenchEvent], None], stop: Callable[[], bool],
                 streaming: bool) -> None:
    """One timed trial of every contestant, in this round's order (reversed every other round)."""
    order = request.contestants if trial % 2 == 0 else tuple(reversed(request.contestants))
    for position, name in enumerate(order):
        emit(TRIAL.event(name, time.perf_counter(), trial))
        listener = _token_listener(emit, name, trial) if streaming else None
        graphs_before, compiling_before = compiled_graph_count(), compiling_ms()
        outcome = run_contestant(loaded, request, name, listener, stop, run_kind=f"trial {trial}")
        started_ms = (outcome.pop("started_s") - origin_s) * 1000
        entry = {"contestant": name, "trial": trial, "order": position, "started_ms": started_ms, **outcome,
                 "graphs_compiled": compiled_graph_count() - graphs_before,
                 "compiling_ms": compiling_ms() - compiling_before}
        runs.append(entry)
        emit({"type": "run", "t": time.perf_counter(), **entry})


def _audited_runs(loaded: LoadedModel, request: BenchRequest, runs: list[dict[str, Any]], origin_s: float,
                  emit: Callable[[BenchEvent], None], stop: Callable[[], bool]) -> dict[str, dict[str, Any]]:
    """After the trials, each contestant once more under the sync audit (core.audit.sync): its reads, and
    the audited run's decode rate against the timed trials' median (what the audit costs). On CUDA its steps are
    NVTX ranges, so that an Nsight Systems capture shows each read in its step."""
    audits, request = {}, with_ranges(request, loaded.device.type)
    for name in request.contestants:
        emit(AUDIT.event(name, time.perf_counter()))
        if stop():
            raise Cancelled("cancelled")
        audit = SyncAudit(loaded.device)
        loop = name in ALL_LOOPS or name == PIPELINED_AGAIN
        marks = None if loop else functools.partial(audit.step, launch=False)
        with audit, loop_steps(audit):
            outcome = run_contestant(loaded, request, name, None, stop, on_step=marks, run_kind="audited run")
        result = audit.result(started_ms=(audit.started_s - origin_s) * 1000,
                              **_audit_cost(outcome["timings"], [r for r in runs if r["contestant"] == name]))
        # Under tensor parallelism every rank audits its own run; the report keeps each rank's reads per step.
        result["ranks"] = gather_objects({"reads_per_decode_step": result["reads_per_decode_step"],
                                          "most_reads_in_a_decode_step": result["most_reads_in_a_decode_step"]})
        audits[name] = result
    return audits


def _kernel_measurements(loaded: LoadedModel, request: BenchRequest, runs: list[dict[str, Any]],
                         emit: Callable[[BenchEvent], None], stop: Callable[[], bool]) -> dict[str, dict[str, Any]]:
    """After the trials, each contestant once more under CUPTI (core.measure.kernel_measurement): kernel-busy per
    step."""
    measured = {}
    centers = timeline_center_steps({name: [r for r in runs if r["contestant"] == name] for name in LOOPS
                                     if name in request.contestants})
    for name in request.contestants:
        emit(KERNEL_MEASUREMENT.event(name, time.perf_counter()))
        if stop():
            raise Cancelled("cancelled")
        steps = [r["timings"]["ms_per_token_p50"] for r in runs
                 if r["contestant"] == name and r["timings"].get("ms_per_token_p50")]
        result = kernel_measurement(functools.partial(run_contestant, loaded, request, name, None, stop,
                                                      run_kind="kernel measurement"),
                                    statistics.median(steps) if steps else None, centers.get(name))
        result["ranks"] = gather_objects({"kernel_busy_fraction": result.get("kernel_busy_fraction")})
        measured[name] = result
    return measured


def _audit_cost(audited: dict[str, Any], timed: list[dict[str, Any]]) -> dict[str, Any]:
    """The audited run's rate, and its ratio to the timed trials' median: below 1, what the audit's wrappers cost."""
    key = "decode_tokens_per_s" if audited.get("decode_tokens_per_s") else "tokens_per_s"
    rates = [r["timings"][key] for r in timed if r["timings"].get(key)]
    rate = audited.get(key)
    return {"rate_metric": key, "audited_rate": rate,
            "rate_vs_timed": rate / statistics.median(rates) if rate and rates else None}


def _check_device_for(loaded: LoadedModel, request: BenchRequest) -> None:
    if HF_DEFERRED in request.contestants and loaded.device.type != "cuda":
        raise ValueError("hf-deferred needs CUDA: transformers' DeferredStopCheck records CUDA events")


def _trial_indices(request: BenchRequest, runs: list[dict[str, Any]],
                   agree: Callable[[bool], bool]) -> Iterator[int]:
    """0 .. trials-1, then more whole rounds while some contestant has been timed less than min_seconds (on some
    rank: the ranks of a group must run the same rounds)."""
    trial = 0
    while agree(trial < request.trials or _least_timed_s(request, runs) < request.min_seconds):
        yield trial
        trial += 1


def _least_timed_s(request: BenchRequest, runs: list[dict[str, Any]]) -> float:
    return min(sum(r["timings"]["total_ms"] for r in runs if r["contestant"] == name) / 1000
               for name in request.contestants)


@contextlib.contextmanager
def deterministic_algorithms(enabled: bool) -> Iterator[set[str]]:
    """PyTorch's deterministic algorithms for the duration (warn-only); yields the ops that warned they are not."""
    seen: set[str] = set()
    if not enabled:
        yield seen
        return
    import warnings

    # cuBLAS reads this when deterministic algorithms are on; without it PyTorch raises on every matmul.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield seen
        seen.update(str(w.message).split(" does not have a deterministic")[0] for w in caught
                    if "deterministic" in str(w.message))
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def compiled_graph_count() -> int:
    """How many graphs torch.compile has produced in this process: a timed run should add none."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def compiling_ms() -> float:
    """Milliseconds torch.compile has spent compiling in this process, by its own timer (tracing and inductor, every
    recompile included; not CUDA-graph capture)."""
    from torch._dynamo.utils import compilation_time_metrics

    return sum(compilation_time_metrics.get("_compile.compile_inner", ())) * 1000



# inductor's own timers (torch._dynamo.utils.compilation_time_metrics) of Triton autotuning at a kernel's first run
_RUNTIME_AUTOTUNING = ("CachingAutotuner.benchmark_all_configs", "CachingAutotuner.coordinate_descent_tuning")


def warm_up_split() -> dict[str, float]:
    """Milliseconds this process has spent, so far: compiling (`compiling_ms`: tracing and inductor, its template
    autotuning included), tuning Triton kernels at their first run (`autotuning_ms`: inductor's runtime autotuning
    and coordinate descent) and capturing step graphs (`capturing_ms`). The differences around a warm-up split it."""
    from torch._dynamo.utils import compilation_time_metrics

    from core.loops.step import CAPTURE_MS

    autotuning = sum(sum(compilation_time_metrics.get(key, ())) for key in _RUNTIME_AUTOTUNING) * 1000
    return {"compiling_ms": compiling_ms(), "autotuning_ms": autotuning, "capturing_ms": sum(CAPTURE_MS)}


def _token_listener(emit: Callable[[BenchEvent], None], name: str,
                    trial: int | None) -> Callable[[TokenEvent], None]:
    def listener(event: TokenEvent) -> None:
        emit({"type": "tokens", "contestant": name, "trial": trial, "step": event.step,
              "tokens": event.tokens, "host_time_s": event.host_time_s})

    return listener


def run_contestant(loaded: LoadedModel, request: BenchRequest, name: str,
                   listener: Callable[[TokenEvent], None] | None, stop: Callable[[], bool],
                   on_step: Callable[[], None] | None = None, run_kind: str = "run") -> dict[str, Any]:
    """One run of a contestant: a loop (core.loops.generation.run) or generate() (`on_step`: its step marks). With
    request.options.nvtx (on CUDA) the run is an NVTX range, "<name> <run_kind>" ("naive trial 2"), around the
    ranges of its steps (core.measure.nvtx)."""
    if stop():
        raise Cancelled("cancelled")
    with run_range(f"{name} {run_kind}", wanted(request.options, loaded.device.type)):
        return _one_run(loaded, request, name, listener, stop, on_step)


def _one_run(loaded: LoadedModel, request: BenchRequest, name: str, listener: Callable[[TokenEvent], None] | None,
             stop: Callable[[], bool], on_step: Callable[[], None] | None) -> dict[str, Any]:
    loop = "pipelined" if name == PIPELINED_AGAIN else name
    if loop in ALL_LOOPS:
        options = replace(request.options, loop=loop)
        result = run(loaded, request.prompt, options, on_tokens=_stoppable(listener, stop), contestant=name)
        return {"token_ids": result.token_ids, "texts": result.texts, "timings": result.timings.to_dict(),
                "notices": result.notices, "started_s": result.started_s, "prompt_tokens": result.prompt_tokens}
    started_s = time.perf_counter()  # generate() has no step timings to place, only its call
    generated = hf_run(loaded, request.prompt, request.options, deferred=name == HF_DEFERRED, on_step=on_step)
    texts = [loaded.tokenizer.decode(ids, skip_special_tokens=True) for ids in generated.token_ids]
    notices = hf_generate_options(request.options, loaded.device.type)[1]
    return {"token_ids": generated.token_ids, "texts": texts, "timings": generated.timings.to_dict(),
            "notices": notices, "started_s": started_s, "prompt_tokens": generated.prompt_tokens}


def _stoppable(listener: Callable[[TokenEvent], None] | None,
               stop: Callable[[], bool]) -> Callable[[TokenEvent], None] | None:
    if listener is None:
        return None

    def guarded(event: TokenEvent) -> None:
        if stop():
            raise Cancelled("cancelled")
        listener(event)

    return guarded


def _warmup_entry(outcome: dict[str, Any], began_s: float, origin_s: float) -> dict[str, Any]:
    """The untimed first run: setting up its decode shape (`setup_ms`: compile, capture) and then one whole run,
    `wall_ms` in all. Reports written before the decode setup had its name call `setup_ms` "engine_warmup_ms"."""
    timings = outcome["timings"]
    return {"total_ms": timings["total_ms"], "setup_ms": timings["setup_ms"],
            "compile_ms": timings["compile_ms"], "started_ms": (began_s - origin_s) * 1000,
            "wall_ms": (time.perf_counter() - began_s) * 1000}

