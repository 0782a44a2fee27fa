"""Soaks the test suite runs shorter: each the promise of a test, at the length the promise was made for.

    python benchmarks/soak.py cancels --count 10        # tests/test_engine_process.py: four in the suite
    python benchmarks/soak.py server-runs               # tests/test_http_guard.py: 120 runs and 10 prompts there
    python benchmarks/soak.py runner-runs --runs 100    # tests/test_runner.py: 40 runs there

`cancels`: "compile, Run, Cancel during warm-up" again and again (issue 32's "done when" says ten times): each cancel
lands while inductor compiles on the CPU, where it cannot, so the engine is killed after the grace period and
restarted; none of those restarts may count as a loss, and a normal run works after the last.
`server-runs`: app.py on tiny-random; 20 runs to settle, 100 more, 20 prompts of 32 MB (each refused, 413), 80 more,
each run in a new session: app.py's own RSS (the engine apart) must end within 30 MiB of where it settled.
`runner-runs`: the dashboard's Runner in this process (its engine in its own) runs 10 short runs, then `--runs`
more: this process's RSS and the engine's must each grow less than 50 MiB, the queue keep at most its newest
finished jobs (64) and the history at most its 500 rows.

Each prints one JSON object of what it measured, with "kept": whether the promise held (the exit code says it too:
0 kept, 1 not). The slow bodies' soak is `python benchmarks/server_edge.py --slow-bodies` (200 bodies of 4 MB).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TINY = "tiny-random"
RUN = dict(prompt="Hello there", model=TINY, max_new_tokens=16, trials=1)  # the tests' fast_settings()
COMPILING = dict(RUN, compile="default", cache="static", max_new_tokens=8)
SERVER_RUN = dict(RUN, max_new_tokens=1, ignore_eos=True)
REFUSED_PROMPT_BYTES = 32 * 2**20
MIB = 2**20


def wait_until(predicate: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


# ------------------------------------------------------------------------------------------------ cancels

def cancels(count: int, grace_s: float) -> dict[str, Any]:
    """`count` cancels in a row, each during a compile that cannot be interrupted, then a normal run."""
    from dashboard.service.jobs import CANCELLED
    from dashboard.service.runner import Runner

    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"  # every compile takes seconds: no cache serves it
    runner = Runner(None, device="cpu", monitor=False, engine={"cancel_grace_s": grace_s})
    try:
        runner.load(TINY, timeout=180)
        each = [_one_cancel(runner, CANCELLED) for _ in range(count)]
        identical = runner.run(RUN, timeout=180)["all_identical"]
        starts, streak = runner.engine_client.starts, runner.supervisor.policy.streak
    finally:
        runner.close()
    restarting = sum(c["restarted_the_engine"] for c in each)  # a cancel that lands before the compile does not
    kept = all(c["cancelled"] and c["streak"] == 0 for c in each) and starts > restarting and identical
    return {"count": count, "grace_s": grace_s, "cancels": each, "restarting_cancels": restarting,
            "engine_starts": starts, "losses_in_a_row": streak, "next_run_identical": identical, "kept": kept}


def _one_cancel(runner: Any, cancelled: str) -> dict[str, Any]:
    job = runner.submit(dict(COMPILING))
    running = wait_until(lambda: runner.snapshot(job)["state"] == "running", 120)
    time.sleep(0.3)  # inside the warm-up's compile
    asked = time.monotonic()
    runner.cancel(job.id)
    ended = job.wait(60)
    return {"running": running, "cancelled": ended and job.state == cancelled,
            "seconds": round(time.monotonic() - asked, 2), "streak": runner.supervisor.policy.streak,
            "restarted_the_engine": "did not stop within" in (job.error or ""), "error": job.error}


# -------------------------------------------------------------------------------------------- server runs

def server_runs(settle: int, before: int, refused: int, after: int, clients: int) -> dict[str, Any]:
    """app.py's RSS after runs and refused prompts, from where it stood after `settle` runs."""
    from gradio_client import Client

    from benchmarks.server_rss import rss_mib, runs_in_parallel, start_app
    from core.parallel.launch import free_port
    from dashboard.ui.form import page_values

    port = free_port()
    proc = start_app(port)
    try:
        visitors = [Client(f"http://127.0.0.1:{port}/", verbose=False, ssl_verify=False) for _ in range(clients)]
        form = page_values(SERVER_RUN)
        statuses: list[str] = []
        runs_in_parallel(visitors, form, settle, statuses)
        time.sleep(1.0)
        settled = rss_mib(proc.pid)
        runs_in_parallel(visitors, form, before, statuses)
        answers = [_refused(visitors[0], form) for _ in range(refused)]
        runs_in_parallel(visitors, form, after, statuses)
        time.sleep(1.0)
        end = rss_mib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(60)
    done = sum(status.startswith("**Done in") for status in statuses)
    kept = done == len(statuses) and all(answers) and end - settled < 30
    return {"runs": len(statuses), "runs_done": done, "refused_413": sum(answers), "refused": refused,
            "settled_rss_mib": round(settled, 1), "end_rss_mib": round(end, 1), "grew_mib": round(end - settled, 1),
            "bound_mib": 30, "kept": kept}


def _refused(visitor: Any, form: dict[str, Any]) -> bool:
    """Whether a run with a 32 MB prompt is refused with 413."""
    try:
        visitor.predict(**{**form, "prompt": "x" * REFUSED_PROMPT_BYTES}, api_name="/run")
    except Exception as exc:  # gradio_client raises what the server answered
        return "413" in str(exc)
    return False


# -------------------------------------------------------------------------------------------- runner runs

def runner_runs(runs: int, warmup: int) -> dict[str, Any]:
    """This process's RSS and the engine's over `runs` short runs through the Runner, after `warmup` runs."""
    import psutil

    from dashboard.service.job_queue import KEEP_FINISHED_JOBS
    from dashboard.service.runner import Runner

    short = dict(prompt="Hello", model=TINY, max_new_tokens=8)
    runner = Runner(None, device="cpu", monitor=False)
    try:
        runner.load(TINY, timeout=180)
        for _ in range(warmup):
            runner.run(short)
        server, engine = psutil.Process(), psutil.Process(runner.engine_client.pids[0])
        server_start, engine_start = server.memory_info().rss, engine.memory_info().rss
        identical = all(runner.run(short)["all_identical"] for _ in range(runs))
        server_grew = (server.memory_info().rss - server_start) / MIB
        engine_grew = (engine.memory_info().rss - engine_start) / MIB
        remembered, history = len(runner.queue.remembered()), len(runner.history())
    finally:
        runner.close()
    kept = identical and server_grew < 50 and engine_grew < 50 and remembered <= KEEP_FINISHED_JOBS + 1 \
        and history <= 500
    return {"runs": runs, "warmup": warmup, "all_identical": identical, "server_grew_mib": round(server_grew, 1),
            "engine_grew_mib": round(engine_grew, 1), "bound_mib": 50, "jobs_remembered": remembered,
            "history_rows": history, "kept": kept}


# ---------------------------------------------------------------------------------------------------- CLI

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    soaks = parser.add_subparsers(dest="soak", required=True)
    cancel = soaks.add_parser("cancels", help="cancels during compilation in a row, then a normal run")
    cancel.add_argument("--count", type=int, default=10)
    cancel.add_argument("--grace-s", type=float, default=1.0, help="the engine's cancel grace period (the test's)")
    served = soaks.add_parser("server-runs", help="app.py's RSS over runs and refused 32 MB prompts")
    served.add_argument("--settle", type=int, default=20)
    served.add_argument("--runs-before", type=int, default=100, help="runs before the refused prompts")
    served.add_argument("--refused", type=int, default=20)
    served.add_argument("--runs-after", type=int, default=80, help="runs after the refused prompts")
    served.add_argument("--clients", type=int, default=4)
    runner = soaks.add_parser("runner-runs", help="the Runner's and its engine's RSS over many runs")
    runner.add_argument("--runs", type=int, default=100)
    runner.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.soak == "cancels":
        result = cancels(args.count, args.grace_s)
    elif args.soak == "server-runs":
        result = server_runs(args.settle, args.runs_before, args.refused, args.runs_after, args.clients)
    else:
        result = runner_runs(args.runs, args.warmup)
    text = json.dumps({"soak": args.soak, **result}, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0 if result["kept"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
