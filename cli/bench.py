"""Headless A/B benchmark: the naive and the pipelined loop (and optionally HF generate) on one prompt; with
--requests N, under load: N requests through B slots of continuous batching (cli.load, docs/LOAD.md).

Protocol: every contestant first runs once untimed (compilation, CUDA-graph capture and library set-up happen
there and are reported apart as warm-up); then k timed trials, the order of contestants alternating between
trials so that neither always runs first; medians over trials; a check that all contestants produced the same
tokens. Tokens/s counts the new tokens of all sequences (through EOS) over the host wall time of the run.

    python -m core.bench --model synthetic:llama-1b --prompt-tokens 32 --max-new-tokens 256 \\
        --cache static --compile reduce-overhead --trials 5 --hf --json results.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from core.caches import usable_compile_caches
from core.request.options import DECODE_LAYERS_TRANSFORM, STEP_GRAPH

# Before torch is imported: core.kernels registers its triton kernels at import, which reads inductor's cache folder.
CACHE_NOTICES = usable_compile_caches()

try:  # Ctrl-C while torch and transformers load (seconds) is an answer too, not a traceback
    import torch

    from cli.common import (
        fail,
        failure_line,
        ignore_interrupts,
        interrupt_signals,
        interrupted_code,
        say,
        signal_name,
        write_html,
    )
    from cli.load import run_load_cli
    from core.compare import InterruptedRun, compare, run_contestant
    from core.documents.files import check_output_path, check_profile_dir, write_json
    from core.documents.kinds import BENCH
    from core.documents.schema import bench_report, load
    from core.loops.prompt import synthetic_prompt
    from core.measure.nvtx import with_ranges
    from core.measure.trace import build_trace
    from core.models.loading import LoadedModel, load_model
    from core.models.specs import BUILTIN_SPECS, DEFAULT_MODEL
    from core.parallel.ranks import agreed_stop, noted_interrupts, run_ranks
    from core.phases import PROFILE, TRIAL, phase_named
    from core.report.build import TABLE_KEY, audit_lines, compile_note, format_table
    from core.report.diff import diff_reports, diff_text
    from core.report.explain import what_this_run_shows
    from core.request.load_schema import add_load_arguments, given_load_flags
    from core.request.options import HF_MODULES_HELP, LOOPS, BenchRequest
    from core.request.run_schema import (
        BENCH_MODULE,
        OneLineParser,
        add_run_arguments,
        request_from_values,
        values_from_args,
    )
    from core.text import command_name, printable
    from core.tuning import Tuning
except KeyboardInterrupt:
    sys.stderr.write("core.bench: interrupted while starting (loading torch); nothing was run\n")
    raise SystemExit(130) from None


class _DefaultsWhereUseful(argparse.HelpFormatter):
    """Appends "(default: X)" where X says something and the help text does not already give the default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default is None or action.default is False or not action.option_strings \
                or action.default == argparse.SUPPRESS:
            return text
        return f"{text} (default: %(default)s)".strip()


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=command_name(BENCH_MODULE, "syncscope-bench"), description=__doc__.split("\n\n")[0],
                       formatter_class=_DefaultsWhereUseful)
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"a built-in spec ({', '.join(BUILTIN_SPECS)}), a Hugging Face id or a local path")
    p.add_argument("--device", default=None, help="cuda, cpu, cuda:1 ... (default: CUDA when present)")
    p.add_argument("--dtype", default=None, help="bf16, fp16, fp32 (default: bf16 on CUDA, fp32 on CPU)")
    p.add_argument("--tp", type=int, default=1, metavar="N",
                   help="tensor parallel over N GPUs (N processes; also works under torchrun)")
    p.add_argument("--hf-modules", action="store_true", help=HF_MODULES_HELP)
    p.add_argument("--prompt-tokens", type=int, default=None, help="use N fixed pseudo-random token ids instead")
    add_run_arguments(p)  # --prompt, --max-new-tokens ... --top-p: core.request.options.RUN_OPTIONS
    p.add_argument("--eos-token-id", type=int, action="append", default=None, help="override EOS (repeatable)")
    p.add_argument("--stream", action="store_true", help="hand every token to a streaming callback, as a server")
    p.add_argument("--json", dest="json_path", default=None, help="write the full report here")
    p.add_argument("--html", dest="html_path", default=None, metavar="PATH",
                   help="after the run, write it here as one self-contained HTML file to share: the verdict, the "
                        "tables, the charts and the timeline, which open offline in any browser (needs plotly: "
                        "the dashboard extra)")
    p.add_argument("--trace", dest="trace_path", default=None, metavar="PATH",
                   help="write a Chrome trace-event JSON of every run (host and device lanes; open it in "
                        "https://ui.perfetto.dev); with --profile, the profiler's kernels on the same time axis; "
                        "on CUDA it turns --nvtx on too")
    p.add_argument("--profile", metavar="DIR", default=None,
                   help="after the trials, run one loop more under torch.profiler and write its kernel table "
                        "and trace here (one set per rank)")
    p.add_argument("--profile-loop", choices=LOOPS, default="pipelined", help="the loop --profile runs")
    p.add_argument("--progress", action="store_true",
                   help="one line on stderr as each warm-up, extra run and full round of trials begins or ends "
                        "('core.bench: round 2 of 5 done')")
    add_load_arguments(p)
    p.add_argument("--diff", "--compare", nargs=2, metavar=("A.json", "B.json"), default=None, dest="diff",
                   help="run nothing: diff two reports (.json or .json.gz): the settings that differ, each "
                        "contestant's rate in both and B/A with its interval and call (against the drift between "
                        "two processes, or a control), the per-step waits (--compare: its old name)")
    return p


def request_from_args(args: argparse.Namespace) -> tuple[BenchRequest, list[str]]:
    """The request that parsed flags ask for, and notices of what was adjusted (core.request.run_schema: the same check
    as the page's, without its limits)."""
    eos = args.eos_token_id[0] if args.eos_token_id and len(args.eos_token_id) == 1 else args.eos_token_id
    prompt_ids = synthetic_prompt(args.prompt_tokens) if args.prompt_tokens is not None else None
    request, notices = request_from_values(values_from_args(args), prompt_ids=prompt_ids, eos_token_id=eos,
                                           stream=args.stream, by_flag=True)
    return replace(request, prompt_tokens=args.prompt_tokens), notices


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for notice in CACHE_NOTICES:
        sys.stderr.write(f"core.bench: note: {printable(notice)}\n")
    if args.diff:
        return diff_files(*args.diff)
    if args.requests is not None:
        return run_load_cli(args)
    given = given_load_flags(args)
    if given:
        return fail(0, f"{', '.join(given)}: for a run under load, which --requests N turns on", 2)
    try:
        request, notices = request_from_args(args)
        check_output_path(args.json_path)
        check_output_path(args.html_path, "--html")
        check_output_path(args.trace_path, "--trace")
        check_profile_dir(args.profile)
        tuning = Tuning.from_environment()  # once, before any work: a malformed switch is refused here
        if args.tp < 1:
            raise ValueError(f"--tp must be 1 or more, got {args.tp}")
        if args.deterministic:  # cuBLAS reads it once, when this process first uses it
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    except ValueError as exc:
        return fail(0, str(exc), 2)
    if args.tp > 1 and "WORLD_SIZE" not in os.environ:
        return run_ranks(args.tp, list(argv) if argv is not None else sys.argv[1:], main)
    in_a_rank = args.tp > 1  # started by run_ranks or torchrun: the ranks stop together (core.parallel.ranks)
    with noted_interrupts(int(os.environ.get("RANK", 0))) if in_a_rank else interrupt_signals() as received:
        return run_bench(args, request, notices, received, tuning)


def diff_files(path_a: str, path_b: str) -> int:
    """`--diff A B`: the two reports side by side (core.report.diff.diff_text); a file that is not a
    report, or is larger than a report may be (core.documents.files.MAX_REPORT_BYTES, decompressed too), is one line on
    stderr and exit code 2."""
    try:
        reports = [bench_report(load(Path(path), expect=BENCH)) for path in (path_a, path_b)]
    except ValueError as exc:
        return fail(0, str(exc), 2)
    print(printable(diff_text(diff_reports(*reports))))
    return 0


def run_bench(args: argparse.Namespace, request: BenchRequest, notices: Sequence[str] = (),
              received: list[int] | None = None, tuning: Tuning | None = None) -> int:
    """Load, compare, print and write: this process alone, or one rank of a tensor-parallel group. `notices` say
    what the flags' check adjusted (rank 0 prints them with the table); `received` fills with the signals that
    interrupted it (interrupt_signals, or on a rank noted_interrupts); `tuning`: the switches read at the start
    (None: the defaults)."""
    rank, profiled, received = 0, None, received if received is not None else []
    try:
        if args.tp > 1:
            from core.parallel.tensor_parallel import init_tensor_parallel

            rank = int(os.environ.get("RANK", 0))
            init_tensor_parallel(rank, int(os.environ["WORLD_SIZE"]), None, args.device)
        loaded = load_model(args.model, device=args.device, dtype=args.dtype, tp=args.tp, hf_modules=args.hf_modules,
                            tuning=tuning or Tuning())
        if args.trace_path:  # NVTX ranges in every run, so that an Nsight Systems capture lines up with the trace
            request = with_ranges(request, loaded.device.type)
        started = time.perf_counter()
        report = compare(loaded, request, on_progress=_progress_line if args.progress and rank == 0 else None,
                         between_rounds=agreed_stop(received, loaded.device) if args.tp > 1 else None)
        try:
            profiled = _profile(loaded, request, args, rank) if args.profile else None
        except KeyboardInterrupt:
            rounds = len(report["runs"]) // len(request.contestants)
            report.update(interrupted=True, interruption={"phase": PROFILE.id, "trials_done": rounds,
                                                          "trials_planned": rounds, "runs_left_out": 0})
            raise InterruptedRun(report) from None
    except InterruptedRun as stopped:
        return _keep_interrupted(args, loaded, request, stopped.report, notices, started, rank, received)
    except KeyboardInterrupt:
        if rank == 0:
            sys.stderr.write(f"core.bench: interrupted ({signal_name(received)}) before every contestant had "
                             "finished a timed trial; no report written\n")
        return interrupted_code(received)
    except ValueError as exc:
        return fail(rank, str(exc), 2)
    except torch.cuda.OutOfMemoryError:
        return fail(rank, "CUDA out of memory; try a smaller --batch or model", 3)
    except Exception as exc:  # a command line answers in one line, not a traceback
        return fail(rank, failure_line(exc), 1)
    if rank != 0:
        return 0
    ignore_interrupts()  # the run is done: a Ctrl-C now would only lose its report
    report["wall_s"] = time.perf_counter() - started
    written = _print_and_write(args, loaded, request, report, notices)
    if profiled is not None:
        from core.measure.profiling import format_summary

        say(f"\nprofile of one more {args.profile_loop} run (rank 0), written to {args.profile}:")
        say(format_summary(profiled, profiled["step_ms_p50"], top=12))
    if args.trace_path:
        trace_written = write_json(args.trace_path, build_trace(report, profiled), "trace") == args.trace_path
        written = written and trace_written
    if args.html_path:
        written = write_html(args.html_path, report) and written
    return 0 if written else 1


def _keep_interrupted(args: argparse.Namespace, loaded: LoadedModel, request: BenchRequest, report: dict[str, Any],
                      notices: Sequence[str], started: float, rank: int, received: Sequence[int]) -> int:
    """An interrupt after the first full round: the table of the finished rounds, with a note, the report and the
    trace."""
    if rank != 0:
        return interrupted_code(received)
    ignore_interrupts()
    report["wall_s"] = time.perf_counter() - started
    report["interruption"]["signal"] = signal_name(received)
    _print_and_write(args, loaded, request, report, notices)
    if args.trace_path:
        write_json(args.trace_path, build_trace(report, None), "trace")
    if args.html_path:
        write_html(args.html_path, report)
    return interrupted_code(received)


def _progress_line(event: dict[str, Any]) -> None:
    """--progress: what the protocol begins, and each full round of trials it finishes, one line on stderr."""
    if event["type"] == "round":
        line = f"round {event['done']} of {event['planned']} done"
    elif (phase := phase_named(event.get("phase"))) is not None and phase is not TRIAL:
        line = f"{phase.noun} of {event['contestant']}"
    else:
        return
    sys.stderr.write(f"core.bench: {printable(line)}\n")
    sys.stderr.flush()


def _profile(loaded: LoadedModel, request: BenchRequest, args: argparse.Namespace, rank: int) -> dict[str, Any]:
    """One more run of the chosen loop under the profiler; every rank runs it (the collectives need them all)."""
    from core.measure.profiling import profile_run

    def run_once() -> dict[str, Any]:
        return run_contestant(loaded, request, args.profile_loop, None, lambda: False, run_kind="profiled run")

    return profile_run(run_once, args.profile, rank, trace=rank == 0)


def _print_and_write(args: argparse.Namespace, loaded: LoadedModel, request: BenchRequest,
                     report: dict[str, Any], notices: Sequence[str] = ()) -> bool:
    """Print the table and write the report; False (after one line on stderr) when --json could not be written."""
    tp = f", tensor parallel over {loaded.tp}, all-reduce: {loaded.all_reduce_text}" if loaded.tp > 1 else ""
    transforms = transforms_used(loaded.transforms, report)
    tp += f", {', '.join(transforms)}" if transforms else ", transformers' modules as they are"
    say(f"{loaded.spec} on {report['environment']['gpu'] or loaded.device} ({report['environment']['dtype']}{tp}),"
          f" {len(report['runs']) // len(request.contestants)} trials, options "
          f"{request.options.cache}/{request.options.compile}")
    if report.get("interrupted"):
        say(f"note: {interrupted_note(report)}")
    for notice in dict.fromkeys([*notices, *(n for ran in report["effective"].values() for n in ran["notices"])]):
        say(f"note: {notice}")
    compiled = compile_note(report)
    if compiled:
        say(compiled)
    say(format_table(report))
    say(f"({TABLE_KEY})")
    for line in audit_lines(report):
        say(line)
    say("What this run shows:")
    for sentence in what_this_run_shows(report):
        say(f"  {sentence}")
    say(f"reproduce: {report['command']}")
    return not args.json_path or write_json(args.json_path, report, "report", indent=1) == args.json_path


COMPILED_ATTENTION = "compiled decode attention"  # the transform that runs only inside a compiled decode step


def transforms_used(transforms: Sequence[str], report: dict[str, Any]) -> list[str]:
    """What the decode path changed in the model, as far as this run used it: the compiled decode attention is left
    out where no contestant compiled (it runs only inside a compiled step), the fused decoder layers where none
    compiled in step-graph mode."""
    ran = {entry["options"].get("compile", "off") for entry in report["effective"].values()}
    compiled = bool(ran - {"off"})
    return [t for t in transforms if (compiled or not t.startswith(COMPILED_ATTENTION))
            and (STEP_GRAPH in ran or t != DECODE_LAYERS_TRANSFORM)]


def interrupted_note(report: dict[str, Any]) -> str:
    """What an interrupted report holds, in one sentence."""
    facts = report["interruption"]
    by = f" by {facts['signal']}" if facts.get("signal") else ""
    phase = phase_named(facts.get("phase"))
    if phase is not None and phase.after_trials:
        return (f"this run was cut short{by} during its {phase.noun}, after all {facts.get('trials_done')} rounds "
                f"of trials; the {phase.noun} is not in the report")
    left_out = facts.get("runs_left_out") or 0
    unfinished = f"; the {left_out} run(s) of the unfinished round are left out" if left_out else ""
    return (f"this run was cut short{by} after {facts.get('trials_done')} of {facts.get('trials_planned')} rounds of "
            f"trials: the table and the report hold the finished rounds{unfinished}")


def cli() -> None:
    """The `syncscope-bench` command."""
    raise SystemExit(main())


if __name__ == "__main__":
    raise SystemExit(main())
