"""`python -m core.bench --requests N`: the contestants under load (core.load, docs/LOAD.md) on one workload, its
table and findings, and its files (--json, --trace, --html). The request is the load options' (core.request.load),
read from the flags as the page reads its form (core.request.load_schema)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch

from cli.common import (
    PROG,
    fail,
    failure_line,
    ignore_interrupts,
    interrupt_signals,
    interrupted_code,
    say,
    signal_name,
    write_html,
)
from core.documents.files import check_output_path, write_json
from core.load.batching import BATCHED_LOOPS
from core.load.protocol import InterruptedLoad, run_load, runnable_contestants
from core.load.report import build_load_report, load_trace
from core.load.words import load_text
from core.models.loading import LoadedModel, load_model
from core.models.specs import is_random_weights
from core.phases import phase_named
from core.report.build import DTYPE_FLAGS
from core.request.load import LoadRequest, load_option
from core.request.load_schema import load_command, request_from_values, values_from_args
from core.request.options import CUDA_GRAPH_COMPILE_MODES
from core.text import printable
from core.tuning import Tuning

SINGLE_RUN_ONLY = ("do_sample", "profile", "hf", "no_check", "aa")  # flags that mean nothing under load


def load_request_from_args(args: argparse.Namespace) -> LoadRequest:
    """The run under load that parsed flags ask for (the same check as the page's, without its limits); the prompts
    and output lengths not given follow the model's weights (random or real)."""
    values = values_from_args(args)
    if args.prompt_tokens is not None:
        values["prompt_lengths"] = (args.prompt_tokens, args.prompt_tokens)
    eos = args.eos_token_id[0] if args.eos_token_id and len(args.eos_token_id) == 1 else args.eos_token_id
    return request_from_values(values, random_weights=is_random_weights(args.model), by_flag=True, eos_token_id=eos)


def run_load_cli(args: argparse.Namespace) -> int:
    """`--requests N`: check everything, then load, run, print and write."""
    try:
        request = load_request_from_args(args)
        check_output_path(args.json_path)
        check_output_path(args.html_path, "--html")
        check_output_path(args.trace_path, "--trace")
        tuning = Tuning.from_environment()  # once, before any work: a malformed switch is refused here
        if args.tp != 1:
            raise ValueError("under load (--requests) the loops run on one device: leave out --tp")
        if any(getattr(args, name) for name in SINGLE_RUN_ONLY):
            raise ValueError("--sample, --profile, --hf, --no-check and --aa are for a single request; under load "
                             "--contestants names who runs")
    except ValueError as exc:
        return fail(0, str(exc), 2)
    started = time.perf_counter()
    with interrupt_signals() as received:
        try:
            loaded = load_model(args.model, device=args.device, dtype=args.dtype, hf_modules=args.hf_modules,
                                tuning=tuning)
            contestants = runnable_contestants(loaded, request.contestants)[0]
            sys.stderr.write(f"{PROG}: {plan_line(request, contestants, loaded.device.type)}\n")
            section = run_load(loaded, request, on_event=_load_progress if args.progress else None)
        except InterruptedLoad as cut:
            return _keep_interrupted(args, loaded, request, cut.section, started, received)
        except KeyboardInterrupt:
            sys.stderr.write(f"{PROG}: interrupted ({signal_name(received)}) under load before its first point "
                             "finished; no report written\n")
            return interrupted_code(received)
        except ValueError as exc:
            return fail(0, str(exc), 2)
        except torch.cuda.OutOfMemoryError:
            return fail(0, f"CUDA out of memory; try fewer slots ({load_option('max_batch').cli_flag}) or shorter "
                           "requests", 3)
        except Exception as exc:  # a command line answers in one line, not a traceback
            return fail(0, failure_line(exc), 1)
    ignore_interrupts()
    return 0 if _print_and_write(args, _report(loaded, request, section, started)) else 1


def plan_line(request: LoadRequest, contestants: Sequence[str], device_type: str) -> str:
    """What a run under load will do, counted in runs of its workload (a run's time depends on the model, the device
    and the loop: this is not a forecast in seconds)."""
    points, trials = request.points(), request.trials
    runs = len(points) * len(contestants) * (1 + trials)
    batched = sum(name in BATCHED_LOOPS for name in contestants)
    extra = [f"{batched} under the sync audit"] if request.audit and batched else []
    if device_type == "cuda" and not request.no_kernel_measurement and batched:
        extra.append(f"{batched} under CUPTI")
    more = f", and at B={points[0][0]} {' and '.join(extra)}" if extra else ""
    line = (f"under load: {runs} runs of {request.workload.requests} requests ({len(points)} point(s) x "
            f"{len(contestants)} contestant(s) x 1 warm-up + {trials} trial(s)){more}")
    compiled = request.options.compile
    if device_type == "cuda" and compiled != "off":
        captured = " and captures" if compiled in CUDA_GRAPH_COMPILE_MODES else ""
        line += f"; each B's warm-up compiles{captured} its step first, untimed"
    return line


def _keep_interrupted(args: argparse.Namespace, loaded: LoadedModel, request: LoadRequest, section: dict[str, Any],
                      started: float, received: Sequence[int]) -> int:
    """An interrupt after the main point: the text and files of the points that finished, then the signal's code."""
    ignore_interrupts()  # a second Ctrl-C now would only lose what finished
    section["interrupted"]["signal"] = signal_name(received)
    _print_and_write(args, _report(loaded, request, section, started))
    return interrupted_code(received)


def _report(loaded: LoadedModel, request: LoadRequest, section: dict[str, Any], started: float) -> dict[str, Any]:
    device = None if loaded.device.type == "cuda" and not loaded.device.index else str(loaded.device)
    command = load_command(request, loaded.spec, device=device, dtype=DTYPE_FLAGS.get(loaded.dtype))
    report = build_load_report(loaded, request, section, command)
    report["wall_s"] = time.perf_counter() - started
    return report


def _print_and_write(args: argparse.Namespace, report: dict[str, Any]) -> bool:
    """The report's lines, then its files; False where one could not be written (after one line on stderr)."""
    text = load_text(report)
    for line in text:
        say(line)
    written = not args.json_path or write_json(args.json_path, report, "report", indent=1) == args.json_path
    if args.trace_path:
        written = write_json(args.trace_path, load_trace(report), "trace") == args.trace_path and written
    if args.html_path:
        written = write_html(args.html_path, report) and written
    return written


def _load_progress(event: dict[str, Any]) -> None:
    """--progress under load: each point and phase as it begins, one line on stderr."""
    if event["type"] == "point":
        line = f"B={event['slots']}, rate {event['rate']:g}"
    elif event["type"] == "phase":
        phase = phase_named(event.get("phase"))
        line = f"{phase.noun if phase else event.get('phase')} of {event['contestant']}"
    else:
        return
    sys.stderr.write(f"{PROG}: {printable(line)}\n")
    sys.stderr.flush()
