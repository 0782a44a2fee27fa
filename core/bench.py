"""Headless A/B benchmark: the naive and the pipelined loop (and optionally HF generate) on one prompt.

Protocol: every contestant first runs once untimed (compilation, CUDA-graph capture and library set-up happen
there and are reported apart as warm-up); then k timed trials, the order of contestants alternating between
trials so that neither always runs first; medians over trials; a check that all contestants produced the same
tokens. Tokens/s counts the new tokens of all sequences (through EOS) over the host wall time of the run.

    python -m core.bench --model synthetic:llama-1b --prompt-tokens 32 --max-new-tokens 256 \\
        --cache static --compile reduce-overhead --trials 5 --hf --json results.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, replace
from typing import Any

import torch

from core import identity
from core.generation import TokenEvent, cut_at_eos, encode_prompt, inductor_overrides, resolve_eos_ids, run
from core.models import LoadedModel, check_support, load_model
from core.options import (
    ALL_LOOPS,
    HF,
    HF_DEFERRED,
    HF_MODULES_HELP,
    LOOPS,
    NO_CHECK,
    PIPELINED_AGAIN,
    BenchRequest,
    Cancelled,
    GenerationOptions,
    check_tuning_environment,
    effective_options,
    hf_generate_options,
)
from core.pdl import pdl_in_effect
from core.run_schema import OneLineParser, add_run_arguments, request_from_values, values_from_args
from core.specs import DEFAULT_MODEL
from core.stats import percentile, spread, verdict, verdict_sentence
from core.step_times import StepClock, Timings

SCHEMA = "syncscope.bench/1"
COPY_BANDWIDTH_BYTES_PER_S = 4.28e12  # device-to-device copy measured on the H200 (read + write bytes)

BenchEvent = dict[str, Any]


def compare(
    loaded: LoadedModel,
    request: BenchRequest,
    *,
    on_event: Callable[[BenchEvent], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """Run the protocol and return the JSON-ready report. `on_event` sees phases, tokens and each run's timings.

    Warm-up runs stream their tokens too (trial None): they are untimed, so watching them costs nothing measured."""
    _check_device_for(loaded, request)
    check_support(loaded, effective_options("naive", request.options, loaded.device.type)[0].compile)
    emit = on_event or (lambda event: None)
    stop = should_stop or (lambda: False)
    streaming = request.stream or on_event is not None
    runs: list[dict[str, Any]] = []
    warmups: dict[str, dict[str, Any]] = {}
    origin_s = time.perf_counter()  # every run's `started_ms` counts from here, so a trace lays them on one axis
    with deterministic_algorithms(request.deterministic) as nondeterministic_ops:
        for name in request.contestants:
            emit({"type": "phase", "phase": "warmup", "contestant": name, "t": time.perf_counter()})
            # With should_stop, a listener gets `stop` checked every step, so a cancel lands within a step even
            # during a long warm-up.
            watcher = _token_listener(emit, name, None) if streaming or should_stop else None
            began_s, graphs_before, compiling_before = time.perf_counter(), compiled_graph_count(), compiling_ms()
            warmups[name] = {**_warmup_entry(_run_one(loaded, request, name, watcher, stop), began_s, origin_s),
                             "graphs_compiled": compiled_graph_count() - graphs_before,
                             "compiling_ms": compiling_ms() - compiling_before}
        for trial in _trial_indices(request, runs):
            order = request.contestants if trial % 2 == 0 else tuple(reversed(request.contestants))
            for position, name in enumerate(order):
                emit({"type": "phase", "phase": "trial", "contestant": name, "trial": trial,
                      "t": time.perf_counter()})
                listener = _token_listener(emit, name, trial) if streaming else None
                graphs_before, compiling_before = compiled_graph_count(), compiling_ms()
                outcome = _run_one(loaded, request, name, listener, stop)
                started_ms = (outcome.pop("started_s") - origin_s) * 1000
                entry = {"contestant": name, "trial": trial, "order": position, "started_ms": started_ms, **outcome,
                         "graphs_compiled": compiled_graph_count() - graphs_before,
                         "compiling_ms": compiling_ms() - compiling_before}
                runs.append(entry)
                emit({"type": "run", "t": time.perf_counter(), **entry})
    report = build_report(loaded, request, runs, warmups)
    report["origin_perf_counter_s"] = origin_s  # where started_ms counts from; places a profiler trace beside it
    if request.deterministic:
        report["nondeterministic_ops"] = sorted(nondeterministic_ops)
    return report


def _check_device_for(loaded: LoadedModel, request: BenchRequest) -> None:
    if HF_DEFERRED in request.contestants and loaded.device.type != "cuda":
        raise ValueError("hf-deferred needs CUDA: transformers' DeferredStopCheck records CUDA events")


def _trial_indices(request: BenchRequest, runs: list[dict[str, Any]]) -> Iterator[int]:
    """0 .. trials-1, then more whole rounds while some contestant has been timed less than min_seconds."""
    trial = 0
    while trial < request.trials or _least_timed_s(request, runs) < request.min_seconds:
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


def first_difference(a: list[list[int]], b: list[list[int]]) -> int | None:
    """Index of the first token where two results differ (over all rows), or None when identical."""
    for row_a, row_b in zip(a, b):
        for index, (x, y) in enumerate(zip(row_a, row_b)):
            if x != y:
                return index
        if len(row_a) != len(row_b):
            return min(len(row_a), len(row_b))
    return None if len(a) == len(b) else 0


def _token_listener(emit: Callable[[BenchEvent], None], name: str,
                    trial: int | None) -> Callable[[TokenEvent], None]:
    def listener(event: TokenEvent) -> None:
        emit({"type": "tokens", "contestant": name, "trial": trial, "step": event.step,
              "tokens": event.tokens, "host_time_s": event.host_time_s})

    return listener


def _run_one(loaded: LoadedModel, request: BenchRequest, name: str,
             listener: Callable[[TokenEvent], None] | None, stop: Callable[[], bool]) -> dict[str, Any]:
    if stop():
        raise Cancelled("cancelled")
    loop = "pipelined" if name == PIPELINED_AGAIN else name
    if loop in ALL_LOOPS:
        options = replace(request.options, loop=loop)
        result = run(loaded, request.prompt, options, on_tokens=_stoppable(listener, stop))
        return {"token_ids": result.token_ids, "texts": result.texts, "timings": result.timings.to_dict(),
                "notices": result.notices, "started_s": result.started_s}
    started_s = time.perf_counter()  # generate() has no step timings to place, only its call
    token_ids, timings = hf_generate(loaded, request.prompt, request.options, deferred=name == HF_DEFERRED)
    texts = [loaded.tokenizer.decode(ids, skip_special_tokens=True) for ids in token_ids]
    notices = hf_generate_options(request.options, loaded.device.type)[1]
    return {"token_ids": token_ids, "texts": texts, "timings": timings.to_dict(), "notices": notices,
            "started_s": started_s}


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
    return {"total_ms": timings["total_ms"], "setup_ms": timings["warmup_ms"],
            "compile_ms": timings["compile_ms"], "started_ms": (began_s - origin_s) * 1000,
            "wall_ms": (time.perf_counter() - began_s) * 1000}


# ------------------------------------------------------------------------------------------- HF generate

def hf_generate(loaded: LoadedModel, prompt: Any, options: GenerationOptions,
                deferred: bool = False) -> tuple[list[list[int]], Timings]:
    """transformers' own generate() with the same cache and compile settings, timed on the host."""
    from transformers import GenerationConfig

    options, _ = hf_generate_options(options, loaded.device.type)
    input_ids, attention_mask = encode_prompt(loaded, prompt)
    config = GenerationConfig(
        max_new_tokens=options.max_new_tokens, do_sample=options.do_sample,
        temperature=options.temperature if options.do_sample else None,
        top_k=options.top_k if options.do_sample else None, top_p=options.top_p if options.do_sample else None,
        pad_token_id=loaded.tokenizer.pad_token_id, bos_token_id=loaded.model.generation_config.bos_token_id,
        eos_token_id=None if options.ignore_eos else (resolve_eos_ids(loaded, options.eos_token_id) or None),
        cache_implementation="static" if options.cache == "static" else None,
        disable_compile=options.compile == "off",
    )
    if options.compile != "off":
        from transformers import CompileConfig

        config.compile_config = CompileConfig(mode=options.compile)
    if options.seed is not None:
        torch.manual_seed(options.seed)
    clock = StepClock(loaded.device, 1)
    clock.start()
    with _deferred_stop_check(deferred), torch.inference_mode():
        output = loaded.model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config)
    clock.stop()
    rows = output[:, input_ids.shape[1]:].tolist()
    token_ids = cut_at_eos(rows, [] if options.ignore_eos else resolve_eos_ids(loaded, options.eos_token_id))
    total_ms = (clock.t_end - clock.t0) * 1000
    new_tokens = sum(map(len, token_ids))
    timings = Timings(clock="host", total_ms=total_ms, ttft_ms=None, tokens_per_s=new_tokens / (total_ms / 1000),
                      new_tokens=new_tokens, kept_steps=len(rows[0]), computed_steps=len(rows[0]), step_ms=[],
                      ms_per_token_p50=total_ms / max(1, len(rows[0])), ms_per_token_p95=0.0,
                      host_queued_ms=[], host_known_ms=[])
    return token_ids, timings


@contextlib.contextmanager
def _deferred_stop_check(enabled: bool) -> Iterator[None]:
    """Turn on transformers' DeferredStopCheck for CUDA (5.24 enables it only on mps)."""
    if not enabled:
        yield
        return
    from transformers.generation import utils as generation_utils

    check = generation_utils.DeferredStopCheck
    original = check.__dict__["is_supported"]
    check.is_supported = staticmethod(lambda device, cache, cache_is_returned, is_assistant: not is_assistant)
    try:
        yield
    finally:
        check.is_supported = original


# ------------------------------------------------------------------------------------------------ report

def build_report(loaded: LoadedModel, request: BenchRequest, runs: list[dict[str, Any]],
                 warmups: dict[str, dict[str, Any]]) -> dict[str, Any]:
    summary = {name: summarize([r for r in runs if r["contestant"] == name]) for name in request.contestants}
    reference = next((r["token_ids"] for r in runs if r["contestant"] == request.contestants[0]), None)
    for entry in runs:
        entry["first_difference"] = first_difference(entry["token_ids"], reference)
    identical = {name: all(r["first_difference"] is None for r in runs if r["contestant"] == name)
                 for name in request.contestants}
    self_consistent = {name: _self_consistent(runs, name) for name in request.contestants}
    effective = {name: effective_options(name, request.options, loaded.device.type) for name in request.contestants}
    loops_ran = effective_options("naive", request.options, loaded.device.type)[0]
    return {
        "schema": SCHEMA,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "environment": environment(loaded, loops_ran.compile),
        "model": model_facts(loaded),
        "request": {"prompt": request.prompt, "options": asdict(request.options), "trials": request.trials,
                    "contestants": list(request.contestants), "stream": request.stream,
                    "min_seconds": request.min_seconds, "deterministic": request.deterministic},
        # What each contestant ran with: the device can change what was asked (CUDA-only modes on the CPU).
        "effective": {name: {"options": asdict(options), "notices": notices}
                      for name, (options, notices) in effective.items()},
        "warmup": warmups,
        "runs": runs,
        "summary": summary,
        "ratios": ratios(summary),
        "verdict": verdict(runs) if {"naive", "pipelined"} <= set(request.contestants) else None,
        "identical": identical,
        "all_identical": all(identical.values()),
        # When a contestant disagrees with itself across trials, a mismatch is run-to-run numerics, not the loop.
        "self_consistent": self_consistent,
        "identity": _identity(loaded, replace(request, options=loops_ran), runs, identical, self_consistent),
    }


def _identity(loaded: LoadedModel, request: BenchRequest, runs: list[dict[str, Any]], identical: dict[str, bool],
              self_consistent: dict[str, bool]) -> dict[str, Any]:
    width = encode_prompt(loaded, request.prompt)[0].shape[1]
    keys = identity.attended_keys(width, request.options, identity.longest_row([r["token_ids"] for r in runs]))
    return identity.explain(identical, self_consistent, device_type=loaded.device.type,
                            dtype=str(loaded.dtype).replace("torch.", ""), keys=keys,
                            compile_mode=request.options.compile,
                            fused_attention=_fused_attention(loaded, request.options.compile),
                            pdl=pdl_in_effect(loaded.device, request.options.compile, inductor_overrides()))


def _fused_attention(loaded: LoadedModel, compile_mode: str) -> bool:
    """Whether the decode steps ran a fused attention kernel whose sums may fall differently from run to run:
    everywhere but core.attention's compiled kernels with a fixed order of sums ("reduce", "split" and "triton",
    whose bf16 trials all repeated bitwise on the H200)."""
    return compile_mode == "off" or loaded.decode_attention not in ("reduce", "split", "triton")


def _self_consistent(runs: list[dict[str, Any]], name: str) -> bool:
    outputs = [r["token_ids"] for r in runs if r["contestant"] == name]
    return all(ids == outputs[0] for ids in outputs)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def median_of(key: str) -> float | None:
        values = [r["timings"][key] for r in runs if r["timings"].get(key) is not None]
        return statistics.median(values) if values else None

    rates = [r["timings"]["tokens_per_s"] for r in runs]
    decode = [r["timings"]["decode_tokens_per_s"] for r in runs if r["timings"].get("decode_tokens_per_s")]
    steps = [ms for r in runs for ms in r["timings"]["step_ms"]]
    gaps = [g for r in runs for g in r["timings"].get("gpu_gap_ms", [])]
    return {
        "trials": len(runs),
        "tokens_per_s": statistics.median(rates),
        "tokens_per_s_all": rates,
        "spread": spread(rates),
        "decode_tokens_per_s": statistics.median(decode) if decode else None,
        "decode_tokens_per_s_all": decode,
        "decode_spread": spread(decode) if decode else None,
        "total_ms": median_of("total_ms"),
        "ttft_ms": median_of("ttft_ms"),
        "ttft_gpu_ms": median_of("ttft_gpu_ms"),
        "ms_per_token_p50": statistics.median(steps) if steps else median_of("ms_per_token_p50"),
        "ms_per_token_p95": percentile(steps, 95) if steps else None,
        "gpu_busy_fraction": median_of("gpu_busy_fraction"),
        "gpu_gap_ms_mean": statistics.fmean(gaps) if gaps else None,
        "gpu_gap_ms_p50": percentile(gaps, 50) if gaps else None,
        "gpu_gap_ms_p99": percentile(gaps, 99) if gaps else None,
        "gpu_gap_ms_max": max(gaps) if gaps else None,
        "new_tokens": median_of("new_tokens"),
        "overshoot_steps": median_of("overshoot_steps"),
    }


def ratios(summary: dict[str, dict[str, Any]]) -> dict[str, float]:
    """pipelined over each other contestant: end to end, and for the decode phase where both have one."""
    out = {}
    pipelined = summary.get("pipelined", {})
    for other in ("naive", NO_CHECK, PIPELINED_AGAIN, HF, HF_DEFERRED):
        base = summary.get(other, {})
        if pipelined.get("tokens_per_s") and base.get("tokens_per_s"):
            out[f"pipelined/{other}"] = pipelined["tokens_per_s"] / base["tokens_per_s"]
        if pipelined.get("decode_tokens_per_s") and base.get("decode_tokens_per_s"):
            out[f"decode pipelined/{other}"] = pipelined["decode_tokens_per_s"] / base["decode_tokens_per_s"]
    return out


def environment(loaded: LoadedModel, compile_mode: str) -> dict[str, Any]:
    import transformers


    gpu = torch.cuda.get_device_name(loaded.device) if loaded.device.type == "cuda" else None
    return {"device": str(loaded.device), "gpu": gpu, "dtype": str(loaded.dtype).replace("torch.", ""),
            "tp": loaded.tp, "tp_all_reduce": loaded.all_reduce_text or None,
            "inductor_options": inductor_overrides() or None,
            "pdl": pdl_in_effect(loaded.device, compile_mode, inductor_overrides()),
            "model_transforms": list(loaded.transforms),  # sentences; the same as facts in the next two
            "decode_attention": loaded.decode_attention, "fused_projections": list(loaded.fused_projections),
            "gpus": _gpu_facts(loaded),
            "torch": str(torch.__version__), "transformers": str(transformers.__version__),
            "python": platform.python_version(), "host": platform.node()}


def _gpu_facts(loaded: LoadedModel) -> list[dict[str, Any]]:
    """NVML's facts (driver, clock and power limits, ...) of the GPUs this run used: every rank's, under TP."""
    if loaded.device.type != "cuda":
        return []
    from core.gpu_monitor import gpu_facts, nvml_index

    first = loaded.device.index or 0
    return gpu_facts([nvml_index(first + offset) for offset in range(loaded.tp)] if loaded.tp > 1
                     else [nvml_index(first)])


def model_facts(loaded: LoadedModel) -> dict[str, Any]:
    """Sizes, and the HBM floor of one batch-1 decode step: each GPU reads its share of the weights once."""
    weight_bytes = loaded.weight_bytes
    return {"spec": loaded.spec, "parameters": loaded.num_parameters, "weight_bytes": weight_bytes,
            "hbm_floor_ms_per_step": weight_bytes / loaded.tp / COPY_BANDWIDTH_BYTES_PER_S * 1000}


# ---------------------------------------------------------------------------------------------------- CLI

class _DefaultsWhereUseful(argparse.HelpFormatter):
    """Appends "(default: X)" where X says something and the help text does not already give the default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default is None or action.default is False or not action.option_strings \
                or action.default == argparse.SUPPRESS:
            return text
        return f"{text} (default: %(default)s)".strip()


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m core.bench", description=__doc__.split("\n\n")[0],
                       formatter_class=_DefaultsWhereUseful)
    p.add_argument("--model", default=DEFAULT_MODEL, help="built-in spec, HF id or local path")
    p.add_argument("--device", default=None, help="cuda, cpu, cuda:1 ... (default: CUDA when present)")
    p.add_argument("--dtype", default=None, help="bf16, fp16, fp32 (default: bf16 on CUDA, fp32 on CPU)")
    p.add_argument("--tp", type=int, default=1, metavar="N",
                   help="tensor parallel over N GPUs (N processes; also works under torchrun)")
    p.add_argument("--hf-modules", action="store_true", help=HF_MODULES_HELP)
    p.add_argument("--prompt-tokens", type=int, default=None, help="use N fixed pseudo-random token ids instead")
    add_run_arguments(p)  # --prompt, --max-new-tokens ... --top-p: core.options.RUN_OPTIONS
    p.add_argument("--eos-token-id", type=int, action="append", default=None, help="override EOS (repeatable)")
    p.add_argument("--stream", action="store_true", help="hand every token to a streaming callback, as a server")
    p.add_argument("--json", dest="json_path", default=None, help="write the full report here")
    p.add_argument("--trace", dest="trace_path", default=None, metavar="PATH",
                   help="write a Chrome trace-event JSON of every run (host and device lanes; open it in "
                        "https://ui.perfetto.dev); with --profile, the profiler's kernels on the same time axis")
    p.add_argument("--profile", metavar="DIR", default=None,
                   help="after the trials, run one loop more under torch.profiler and write its kernel table "
                        "and trace here (one set per rank)")
    p.add_argument("--profile-loop", choices=LOOPS, default="pipelined", help="the loop --profile runs")
    return p


def request_from_args(args: argparse.Namespace) -> tuple[BenchRequest, list[str]]:
    """The request that parsed flags ask for, and notices of what was adjusted (core.run_schema: the same check as
    the page's, without its limits)."""
    eos = args.eos_token_id[0] if args.eos_token_id and len(args.eos_token_id) == 1 else args.eos_token_id
    prompt_ids = synthetic_prompt(args.prompt_tokens) if args.prompt_tokens is not None else None
    return request_from_values(values_from_args(args), prompt_ids=prompt_ids, eos_token_id=eos, stream=args.stream,
                               by_flag=True)


def synthetic_prompt(length: int) -> list[int]:
    """Fixed pseudo-random token ids (ids 100..10099): the same prompt on every machine."""
    if length < 1:
        raise ValueError(f"--prompt-tokens must be >= 1, got {length}")
    generator = torch.Generator().manual_seed(1234)
    return torch.randint(100, 10100, (length,), generator=generator).tolist()


def format_table(report: dict[str, Any]) -> str:
    rows = [f"{'contestant':<16} {'decode tok/s':>12} {'tok/s':>9} {'spread':>7} {'ttft ms':>8} {'ms/tok p50':>10} "
            f"{'p95':>7} {'busy':>6} {'gap ms':>7} {'same':>5}"]
    for name, s in report["summary"].items():
        rows.append(
            f"{name:<16} {_num(s.get('decode_tokens_per_s')):>12} {s['tokens_per_s']:>9.1f} "
            f"{_pct(s['spread'], 1):>7} {_num(s['ttft_ms']):>8} "
            f"{_num(s['ms_per_token_p50'], 3):>10} {_num(s['ms_per_token_p95'], 3):>7} "
            f"{_pct(s['gpu_busy_fraction']):>6} {_num(s['gpu_gap_ms_mean'], 3):>7} "
            f"{identity.sameness(report, name):>5}")
    rows.append("  ".join(f"{k} = {v:.3f}x" for k, v in report["ratios"].items()))
    if report.get("verdict"):
        rows.append(verdict_sentence(report["verdict"]))
    note = identity.difference_note(report)
    if note:
        rows.append(note)
    return "\n".join(rows)


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}%}"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        request, notices = request_from_args(args)
        check_output_path(args.json_path)
        check_output_path(args.trace_path, "--trace")
        check_profile_dir(args.profile)
        check_tuning_environment()  # a malformed SYNCSCOPE_* tuning variable is refused before any work
        if args.tp < 1:
            raise ValueError(f"--tp must be 1 or more, got {args.tp}")
        if args.deterministic:  # cuBLAS reads it once, when this process first uses it
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    except ValueError as exc:
        sys.stderr.write(f"core.bench: error: {exc}\n")
        return 2
    if args.tp > 1 and "WORLD_SIZE" not in os.environ:
        from engine.ranks import run_ranks

        return run_ranks(args.tp, list(argv) if argv is not None else sys.argv[1:])
    return run_bench(args, request, notices)


def run_bench(args: argparse.Namespace, request: BenchRequest, notices: Sequence[str] = ()) -> int:
    """Load, compare, print and write: this process alone, or one rank of a tensor-parallel group. `notices` say
    what the flags' check adjusted (rank 0 prints them with the table)."""
    rank = 0
    try:
        if args.tp > 1:
            from core.parallel import init_tensor_parallel

            rank = int(os.environ.get("RANK", 0))
            init_tensor_parallel(rank, int(os.environ["WORLD_SIZE"]), None, args.device)
        loaded = load_model(args.model, device=args.device, dtype=args.dtype, tp=args.tp, hf_modules=args.hf_modules)
        started = time.perf_counter()
        report = compare(loaded, request)
        profiled = _profile(loaded, request, args, rank) if args.profile else None
    except ValueError as exc:
        return _fail(rank, str(exc), 2)
    except torch.cuda.OutOfMemoryError:
        return _fail(rank, "CUDA out of memory; try a smaller --batch or model", 3)
    except KeyboardInterrupt:
        sys.stderr.write("core.bench: interrupted\n")
        return 130
    except Exception as exc:  # a command line answers in one line, not a traceback
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return _fail(rank, f"{type(exc).__name__}: {first_line}", 1)
    if rank != 0:
        return 0
    report["wall_s"] = time.perf_counter() - started
    written = _print_and_write(args, loaded, request, report, notices)
    if profiled is not None:
        from core.profiling import format_summary

        print(f"\nprofile of one more {args.profile_loop} run (rank 0), written to {args.profile}:")
        print(format_summary(profiled, profiled["step_ms_p50"], top=12))
    if args.trace_path:
        trace_written = write_json(args.trace_path, build_trace(report, profiled), "trace") == args.trace_path
        written = written and trace_written
    return 0 if written else 1


def build_trace(report: dict[str, Any], profiled: dict[str, Any] | None) -> dict[str, Any]:
    """The report's trace; with a profile, the profiler's events moved onto the report's time axis.

    Kineto stamps events on CLOCK_REALTIME (`ts` µs + `baseTimeNanoseconds`); the report counts from a perf_counter
    (CLOCK_MONOTONIC) origin. The offset between the two clocks, read right after the profiled run, moves one onto
    the other."""
    from core.trace import chrome_trace, merge_profiler_trace

    trace = chrome_trace(report)
    if profiled and profiled.get("trace_file") and "origin_perf_counter_s" in report:
        import gzip

        with gzip.open(profiled["trace_file"], "rt", encoding="utf-8") as handle:
            kineto = json.load(handle)
        base_ns = int(kineto.get("baseTimeNanoseconds", 0))
        clock = profiled["clock"]
        shift_us = (base_ns - clock["offset_ns"]) / 1000 - report["origin_perf_counter_s"] * 1e6
        merge_profiler_trace(trace, kineto, shift_us)
        trace["metadata"]["profiler"] = {"file": profiled["trace_file"], "shift_us": shift_us,
                                         "clock_offset_error_us": clock["error_ns"] / 1000}
    return trace


def _profile(loaded: LoadedModel, request: BenchRequest, args: argparse.Namespace, rank: int) -> dict[str, Any]:
    """One more run of the chosen loop under the profiler; every rank runs it (the collectives need them all)."""
    from core.profiling import profile_run

    return profile_run(lambda: _run_one(loaded, request, args.profile_loop, None, lambda: False), args.profile, rank,
                       trace=rank == 0)


def _fail(rank: int, message: str, code: int) -> int:
    where = f"rank {rank}: " if rank else ""
    sys.stderr.write(f"core.bench: error: {where}{message}\n")
    return code


def _print_and_write(args: argparse.Namespace, loaded: LoadedModel, request: BenchRequest,
                     report: dict[str, Any], notices: Sequence[str] = ()) -> bool:
    """Print the table and write the report; False (after one line on stderr) when --json could not be written."""
    tp = f", tensor parallel over {loaded.tp}, all-reduce: {loaded.all_reduce_text}" if loaded.tp > 1 else ""
    tp += f", {', '.join(loaded.transforms)}" if loaded.transforms else ", transformers' modules as they are"
    print(f"{loaded.spec} on {report['environment']['gpu'] or loaded.device} ({report['environment']['dtype']}{tp}),"
          f" {len(report['runs']) // len(request.contestants)} trials, options "
          f"{request.options.cache}/{request.options.compile}")
    for notice in dict.fromkeys([*notices, *(n for ran in report["effective"].values() for n in ran["notices"])]):
        print(f"note: {notice}")
    compiled = compile_note(report)
    if compiled:
        print(compiled)
    print(format_table(report))
    return not args.json_path or write_json(args.json_path, report, "report", indent=1) == args.json_path


def compile_note(report: dict[str, Any]) -> str | None:
    """One line on what torch.compile did, recompiles included: in the warm-ups, and in timed trials if it did."""
    warm = report.get("warmup", {}).values()
    graphs = sum(w.get("graphs_compiled", 0) for w in warm)
    seconds = sum(w.get("compiling_ms", 0.0) for w in warm) / 1000
    late = [r for r in report.get("runs", []) if r.get("graphs_compiled")]
    if not graphs and not late:
        return None
    line = f"compile: the warm-ups compiled {graphs} graph(s) in {seconds:.1f} s"
    if late:
        line += (f"; timed trials compiled {sum(r['graphs_compiled'] for r in late)} more (recompiles), and their "
                 "times include it")
    return line


def write_json(path: str, data: dict[str, Any], what: str, indent: int | None = None) -> str | None:
    """Write `data` as JSON to `path`. When that fails after all the work (a full disk), one line on stderr and the
    same data saved in the temporary folder, else the working folder, named in the line. Returns where it landed."""
    text = json.dumps(data, indent=indent)
    try:
        _write_text(path, text)
    except OSError as exc:
        saved, outcome = _save_elsewhere(text, what)
        sys.stderr.write(f"core.bench: error: could not write the {what} to {path} ({exc.strerror or exc}); "
                         f"{outcome}\n")
        return saved
    print(f"wrote {path}")
    return path


def _write_text(path: str, text: str) -> None:
    """Write `text` to `path`; a regular file left half written (a full disk) is removed, not left as bad JSON."""
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError:
        if os.path.isfile(path):
            with contextlib.suppress(OSError):
                os.remove(path)
        raise


def _save_elsewhere(text: str, what: str) -> tuple[str | None, str]:
    """Save what could not go where it was asked; (where, the end of the sentence that says so)."""
    import tempfile

    problems = []
    for folder in dict.fromkeys((tempfile.gettempdir(), os.getcwd())):
        try:
            handle, path = tempfile.mkstemp(prefix=f"syncscope-{what}-", suffix=".json", dir=folder)
            os.close(handle)
            _write_text(path, text)
        except OSError as exc:
            problems.append(f"{folder}: {exc.strerror or exc}")
            continue
        return path, f"the {what} was saved to {path} instead"
    return None, f"it could not be saved elsewhere either ({'; '.join(problems)})"


def check_output_path(path: str | None, flag: str = "--json") -> None:
    """ValueError now, before any work, when the file could not be written there at the end."""
    if not path:
        return
    target = os.path.abspath(path)
    folder = os.path.dirname(target)
    if os.path.isdir(target):
        raise ValueError(f"{flag} {path}: that is a directory; give a file name")
    if not os.path.isdir(folder):
        raise ValueError(f"{flag} {path}: the folder {folder} does not exist")
    writable = os.access(target, os.W_OK) if os.path.exists(target) else os.access(folder, os.W_OK)
    if not writable:
        raise ValueError(f"{flag} {path}: no permission to write there")


def check_profile_dir(path: str | None) -> None:
    """ValueError now when --profile names a folder that cannot be made or written."""
    if not path:
        return
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--profile {path}: cannot make that folder ({exc.strerror})") from exc
    if not os.access(path, os.W_OK):
        raise ValueError(f"--profile {path}: no permission to write there")


if __name__ == "__main__":
    raise SystemExit(main())
