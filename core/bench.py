"""Headless A/B benchmark: the naive and the pipelined loop (and optionally HF generate) on one prompt; with
--requests N, under load: N requests through B slots of continuous batching (core.load, docs/LOAD.md).

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
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from core.caches import usable_compile_caches
from core.request.options import DECODE_LAYERS_TRANSFORM, STEP_GRAPH

# Before torch is imported: core.kernels registers its triton kernels at import, which reads inductor's cache folder.
CACHE_NOTICES = usable_compile_caches()

try:  # Ctrl-C while torch and transformers load (seconds) is an answer too, not a traceback
    import torch

    from core.compare import InterruptedRun, compare, run_contestant
    from core.documents.files import check_output_path, check_profile_dir, write_json
    from core.documents.schema import BENCH, bench_report, load
    from core.loops.prompt import synthetic_prompt
    from core.measure.nvtx import with_ranges
    from core.measure.trace import build_trace
    from core.models.loading import LoadedModel, load_model
    from core.models.specs import BUILTIN_SPECS, DEFAULT_MODEL, is_random_weights
    from core.parallel.ranks import agreed_stop, interrupts_handled, noted_interrupts, run_ranks
    from core.phases import PROFILE, TRIAL, phase_named
    from core.report.build import DTYPE_FLAGS, TABLE_KEY, audit_lines, compile_note, format_table
    from core.report.diff import diff_reports, diff_text
    from core.report.explain import what_this_run_shows
    from core.request.load import LoadRequest
    from core.request.load_schema import add_load_arguments, given_load_flags, load_command
    from core.request.load_schema import request_from_values as load_request_from_values
    from core.request.load_schema import values_from_args as load_values_from_args
    from core.request.options import HF_MODULES_HELP, LOOPS, BenchRequest
    from core.request.run_schema import OneLineParser, add_run_arguments, request_from_values, values_from_args
    from core.text import escaped, printable
    from core.tuning import Tuning
except KeyboardInterrupt:
    sys.stderr.write("core.bench: interrupted while starting (loading torch); nothing was run\n")
    raise SystemExit(130) from None

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal's number, as a shell reports it
# --html runs the dashboard's exporter as a module of this installation: dashboard.export_html in the checkout,
# syncscope.dashboard.export_html installed, from the folder above the top-level package.
_PACKAGE = __package__ or "core"
EXPORT_MODULE = ".".join([*_PACKAGE.split(".")[:-1], "dashboard", "export_html"])
PACKAGE_ROOT = Path(__file__).resolve().parents[len(_PACKAGE.split("."))]
EXPORT_TIMEOUT_S = 300
NEEDS_DASHBOARD = ("exporting a run as HTML needs plotly and the dashboard's code (the dashboard extra), which are not "
                   "installed here: run pip install \".[dashboard]\" in the syncscope checkout")
_MISSING_MODULE = re.compile(r"^(ModuleNotFoundError|ImportError)\b")


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
        return _fail(0, f"{', '.join(given)}: for a run under load, which --requests N turns on", 2)
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
        return _fail(0, str(exc), 2)
    if args.tp > 1 and "WORLD_SIZE" not in os.environ:
        return run_ranks(args.tp, list(argv) if argv is not None else sys.argv[1:], main)
    in_a_rank = args.tp > 1  # started by run_ranks or torchrun: the ranks stop together (core.parallel.ranks)
    with noted_interrupts(int(os.environ.get("RANK", 0))) if in_a_rank else interrupt_signals() as received:
        return run_bench(args, request, notices, received, tuning)


def load_request_from_args(args: argparse.Namespace) -> LoadRequest:
    """The run under load that parsed flags ask for (core.request.load_schema: the same check as the page's, without
    its limits); the prompts and output lengths not given follow the model's weights (random or real)."""
    values = load_values_from_args(args)
    if args.prompt_tokens is not None:
        values["prompt_lengths"] = (args.prompt_tokens, args.prompt_tokens)
    eos = args.eos_token_id[0] if args.eos_token_id and len(args.eos_token_id) == 1 else args.eos_token_id
    return load_request_from_values(values, random_weights=is_random_weights(args.model), by_flag=True,
                                    eos_token_id=eos)


def run_load_cli(args: argparse.Namespace) -> int:
    """`--requests N`: the contestants under load (core.load), its table and findings, --json, --trace and --html."""
    from core.load.protocol import run_load
    from core.load.report import build_load_report, load_findings, load_text, load_trace

    try:
        request = load_request_from_args(args)
        check_output_path(args.json_path)
        check_output_path(args.html_path, "--html")
        check_output_path(args.trace_path, "--trace")
        tuning = Tuning.from_environment()  # once, before any work: a malformed switch is refused here
        if args.tp != 1:
            raise ValueError("under load (--requests) the loops run on one device: leave out --tp")
        if args.do_sample or args.profile or args.hf or args.no_check or args.aa:
            raise ValueError("--sample, --profile, --hf, --no-check and --aa are for a single request; under load "
                             "--contestants names who runs")
    except ValueError as exc:
        return _fail(0, str(exc), 2)
    started = time.perf_counter()
    with interrupt_signals() as received:
        try:
            loaded = load_model(args.model, device=args.device, dtype=args.dtype, hf_modules=args.hf_modules,
                                tuning=tuning)
            section = run_load(loaded, request, on_event=_load_progress if args.progress else None)
        except KeyboardInterrupt:
            sys.stderr.write(f"core.bench: interrupted ({_signal_name(received)}) under load; no report written\n")
            return _interrupted_code(received)
        except ValueError as exc:
            return _fail(0, str(exc), 2)
        except torch.cuda.OutOfMemoryError:
            return _fail(0, "CUDA out of memory; try fewer slots (--max-batch) or shorter requests", 3)
        except Exception as exc:  # a command line answers in one line, not a traceback
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return _fail(0, f"{type(exc).__name__}: {first_line}", 1)
    _ignore_interrupts()
    device = None if loaded.device.type == "cuda" and not loaded.device.index else str(loaded.device)
    command = load_command(request, loaded.spec, device=device, dtype=DTYPE_FLAGS.get(loaded.dtype))
    report = build_load_report(loaded, request, section, command)
    report["wall_s"] = time.perf_counter() - started
    text = load_text(report)
    for line in text:
        _say(line)
    written = not args.json_path or write_json(args.json_path, report, "report", indent=1) == args.json_path
    if args.trace_path:
        written = write_json(args.trace_path, load_trace(report), "trace") == args.trace_path and written
    if args.html_path:
        described = {"findings": load_findings(report), "text": text}
        written = write_html(args.html_path, report, described) and written
    return 0 if written else 1


def _load_progress(event: dict[str, Any]) -> None:
    """--progress under load: each point and phase as it begins, one line on stderr."""
    if event["type"] == "point":
        line = f"B={event['slots']}, rate {event['rate']:g}"
    elif event["type"] == "phase":
        phase = phase_named(event.get("phase"))
        line = f"{phase.noun if phase else event.get('phase')} of {event['contestant']}"
    else:
        return
    sys.stderr.write(f"core.bench: {printable(line)}\n")
    sys.stderr.flush()


def diff_files(path_a: str, path_b: str) -> int:
    """`--diff A B`: the two reports side by side (core.report.diff.diff_text); a file that is not a
    report, or is larger than a report may be (core.documents.files.MAX_REPORT_BYTES, decompressed too), is one line on
    stderr and exit code 2."""
    try:
        reports = [bench_report(load(Path(path), expect=BENCH)) for path in (path_a, path_b)]
    except ValueError as exc:
        return _fail(0, str(exc), 2)
    print(printable(diff_text(diff_reports(*reports))))
    return 0


@contextlib.contextmanager
def interrupt_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM both raise KeyboardInterrupt while inside, so that an interrupted run can keep its finished
    trials; a second signal is not let to cut that short (it says so), a third ends the process at once. Yields the
    signals received, in order. Outside the main thread (where handlers cannot be set) a no-op."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def interrupt(signum: int, frame: Any) -> None:
        received.append(signum)
        if len(received) == 1:
            raise KeyboardInterrupt
        if len(received) == 2:
            sys.stderr.write("core.bench: keeping what finished; interrupt once more to quit without it\n")
            return
        os._exit(EXIT_CODES.get(received[0], 130))

    with interrupts_handled(interrupt):
        yield received


def _ignore_interrupts() -> None:
    """While an interrupted run's report is written: a second Ctrl-C would leave it unwritten."""
    if threading.current_thread() is threading.main_thread():
        for signum in EXIT_CODES:
            signal.signal(signum, signal.SIG_IGN)


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
            sys.stderr.write(f"core.bench: interrupted ({_signal_name(received)}) before every contestant had "
                             "finished a timed trial; no report written\n")
        return _interrupted_code(received)
    except ValueError as exc:
        return _fail(rank, str(exc), 2)
    except torch.cuda.OutOfMemoryError:
        return _fail(rank, "CUDA out of memory; try a smaller --batch or model", 3)
    except Exception as exc:  # a command line answers in one line, not a traceback
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return _fail(rank, f"{type(exc).__name__}: {first_line}", 1)
    if rank != 0:
        return 0
    _ignore_interrupts()  # the run is done: a Ctrl-C now would only lose its report
    report["wall_s"] = time.perf_counter() - started
    written = _print_and_write(args, loaded, request, report, notices)
    if profiled is not None:
        from core.measure.profiling import format_summary

        _say(f"\nprofile of one more {args.profile_loop} run (rank 0), written to {args.profile}:")
        _say(format_summary(profiled, profiled["step_ms_p50"], top=12))
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
        return _interrupted_code(received)
    _ignore_interrupts()
    report["wall_s"] = time.perf_counter() - started
    report["interruption"]["signal"] = _signal_name(received)
    _print_and_write(args, loaded, request, report, notices)
    if args.trace_path:
        write_json(args.trace_path, build_trace(report, None), "trace")
    if args.html_path:
        write_html(args.html_path, report)
    return _interrupted_code(received)


def _signal_name(received: Sequence[int]) -> str:
    return signal.Signals(received[0]).name if received else "SIGINT"


def _interrupted_code(received: Sequence[int]) -> int:
    return EXIT_CODES.get(received[0], 130) if received else 130


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


def _fail(rank: int, message: str, code: int) -> int:
    where = f"rank {rank}: " if rank else ""
    sys.stderr.write(f"core.bench: error: {where}{escaped(message)}\n")  # one line, whatever it quotes
    return code


def _print_and_write(args: argparse.Namespace, loaded: LoadedModel, request: BenchRequest,
                     report: dict[str, Any], notices: Sequence[str] = ()) -> bool:
    """Print the table and write the report; False (after one line on stderr) when --json could not be written."""
    tp = f", tensor parallel over {loaded.tp}, all-reduce: {loaded.all_reduce_text}" if loaded.tp > 1 else ""
    transforms = transforms_used(loaded.transforms, report)
    tp += f", {', '.join(transforms)}" if transforms else ", transformers' modules as they are"
    _say(f"{loaded.spec} on {report['environment']['gpu'] or loaded.device} ({report['environment']['dtype']}{tp}),"
          f" {len(report['runs']) // len(request.contestants)} trials, options "
          f"{request.options.cache}/{request.options.compile}")
    if report.get("interrupted"):
        _say(f"note: {interrupted_note(report)}")
    for notice in dict.fromkeys([*notices, *(n for ran in report["effective"].values() for n in ran["notices"])]):
        _say(f"note: {notice}")
    compiled = compile_note(report)
    if compiled:
        _say(compiled)
    _say(format_table(report))
    _say(f"({TABLE_KEY})")
    for line in audit_lines(report):
        _say(line)
    _say("What this run shows:")
    for sentence in what_this_run_shows(report):
        _say(f"  {sentence}")
    _say(f"reproduce: {report['command']}")
    return not args.json_path or write_json(args.json_path, report, "report", indent=1) == args.json_path


def write_html(path: str, report: dict[str, Any], described: dict[str, list[str]] | None = None) -> bool:
    """--html: the report as one self-contained HTML file, made by `python -m dashboard.export_html` in a child
    process (core never imports the dashboard); `described`: a load report's sentences. False after one line on
    stderr when it could not be written (plotly or the dashboard's code not installed, a full disk)."""
    try:
        with tempfile.TemporaryDirectory(prefix="syncscope-html-") as folder:
            source = Path(folder) / "report.json"
            source.write_text(json.dumps(report), encoding="utf-8")
            argv = [sys.executable, "-m", EXPORT_MODULE, str(source), os.path.abspath(path)]
            if described is not None:
                (Path(folder) / "described.json").write_text(json.dumps(described), encoding="utf-8")
                argv += ["--described", str(Path(folder) / "described.json")]
            failure = _export(argv)
    except OSError as exc:  # the temporary folder: a full disk
        failure = f"the report could not be handed to the export ({exc.strerror or exc}); nothing was written"
    if failure is None:
        print(f"wrote {path}")
        return True
    _fail(0, f"--html {path}: {failure}", 1)
    return False


def _export(argv: list[str]) -> str | None:
    """Run the exporter; why it failed, in one line, or None when it wrote the file."""
    try:
        done = subprocess.run(argv, cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired:
        return f"the export took more than {EXPORT_TIMEOUT_S} s; nothing was written"
    except OSError as exc:
        return f"the export could not start ({exc.strerror or exc})"
    return None if done.returncode == 0 else export_failure(done.stderr)


def export_failure(stderr: str) -> str:
    """Why the export failed, in one line: the child's own line, or for a module it could not import, how to get it."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else "the export ended without saying why"
    if _MISSING_MODULE.search(last):
        return NEEDS_DASHBOARD
    return last.split(": error: ", 1)[-1]


def _say(text: str) -> None:
    """A line (or lines) of the CLI's output: a model's name or a report's field cannot act on the terminal."""
    print(printable(text))


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
