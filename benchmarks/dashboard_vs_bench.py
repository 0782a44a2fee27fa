"""Does the dashboard slow what it measures? The served app with clients attached, against headless core.bench.

    python benchmarks/dashboard_vs_bench.py --models synthetic:smollm2-135m synthetic:llama-1b \\
        --modes reduce-overhead step-graph --out results/dashboard_vs_bench.json

What a user runs, on both sides. For each (model, compile mode), in this order:
1. headless: `python -m core.bench ...`, the exact command the page shows under its summary, in its own process;
2. dashboard: `python app.py` (started once, its engine in its own process), client A streams /run the way the
   page does (every live update is received and decoded), and client B submits the same run at the same moment,
   so it waits in the queue, streaming its status, and then runs: two dashboard samples with another client on;
3. headless again, the same command: the drift between 1 and 3 is the noise floor of the comparison.
Reported: median tokens/s (end to end and decode phase) of each path and their ratio, the GPU idle gap between
decode steps (CUDA events: p50, p99, max over all trials) for both paths, and how long the engine took to start
and to load each model. All trials of a path are pooled (headless: before + after; dashboard: A + B).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from core.measure.stats import percentile  # noqa: E402
from core.request.options import DEFAULT_PROMPT, LOOPS  # noqa: E402
from core.request.run_schema import cli_command, request_from_values  # noqa: E402
from dashboard.ui.form import page_values  # noqa: E402
from dashboard.ui.tabs.compare import OUTPUTS  # noqa: E402

Form = dict[str, Any]  # run options by name (core.request.options.RUN_OPTIONS) and the model


def settings_for(model: str, mode: str, args: argparse.Namespace) -> Form:
    return dict(prompt=DEFAULT_PROMPT, model=model, max_new_tokens=args.max_new_tokens, ignore_eos=True,
                cache="static", compile=mode, trials=args.trials)


# ------------------------------------------------------------------------------------------------ headless

def headless(settings: Form, device: str | None, workdir: Path, tag: str) -> dict[str, Any]:
    request, _ = request_from_values(settings, deferred_with_hf=device != "cpu")
    command = cli_command(request, settings["model"], device=device)
    out = workdir / f"{tag}.json"
    started = time.perf_counter()
    # The page's command starts with "python": run it with this interpreter.
    argv = [sys.executable, *shlex.split(command)[1:], "--json", str(out)]
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"headless run failed: {result.stderr.strip()[-2000:]}")
    report = json.loads(out.read_text())
    report["process_wall_s"] = time.perf_counter() - started
    report["command"] = command
    return report


# ------------------------------------------------------------------------------------------------ the app

class App:
    """app.py in its own process; its stdout is read for the engine's start and load lines."""

    def __init__(self, model: str, device: str | None, port: int):
        command = [sys.executable, "app.py", "--model", model, "--port", str(port)]
        command += ["--device", device] if device else []
        self.started = time.perf_counter()
        self.process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.lines: list[tuple[float, str]] = []
        self.url = f"http://127.0.0.1:{port}/"
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append((time.perf_counter() - self.started, line.rstrip()))

    def wait_for(self, pattern: str, timeout: float = 600) -> float:
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            for stamp, line in self.lines[seen:]:
                if re.search(pattern, line):
                    return stamp
            seen = len(self.lines)
            if self.process.poll() is not None:
                raise RuntimeError("app.py exited:\n" + "\n".join(line for _, line in self.lines[-30:]))
            time.sleep(0.1)
        raise TimeoutError(f"no line matching {pattern!r} from app.py within {timeout} s")

    def startup(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"loads": []}
        for stamp, line in self.lines:
            if m := re.search(r"engine process ready in ([\d.]+) s", line):
                facts["engine_ready_s"] = float(m.group(1))
                facts["engine_ready_since_launch_s"] = stamp
            if m := re.search(r"loaded (\S+) on (\S+) in ([\d.]+) s", line):
                facts["loads"].append({"model": m.group(1), "device": m.group(2), "load_s": float(m.group(3)),
                                       "since_launch_s": stamp})
            if "Serving on" in line:
                facts["serving_since_launch_s"] = stamp
        return facts

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()


def stream_run(url: str, settings: Form, results: dict[str, Any], name: str, go: threading.Event) -> None:
    """One client doing what the page does: submit /run, receive every streamed update, keep the report."""
    from gradio_client import Client

    from dashboard.service.page_record import parse_report  # the page saves the report inside its own document

    client = Client(url, verbose=False)
    go.wait()
    started = time.perf_counter()
    job = client.submit(**page_values(settings), api_name="/run")
    updates = 0
    for _ in job:
        updates += 1
    final = dict(zip(OUTPUTS, job.outputs()[-1]))
    results[name] = {"updates": updates + 1, "client_wall_s": time.perf_counter() - started,
                     "status": final["status"], "report": parse_report(Path(final["report_file"]).read_bytes())
                     if final.get("report_file") else None}


def dashboard(app: App, settings: Form) -> dict[str, Any]:
    results: dict[str, Any] = {}
    go = threading.Event()
    clients = [threading.Thread(target=stream_run, args=(app.url, settings, results, name, go))
               for name in ("A", "B")]
    clients[0].start()
    time.sleep(1.0)  # A submits first; B connects meanwhile and submits right after, so it queues behind A
    clients[1].start()
    go.set()
    for thread in clients:
        thread.join(1800)
    for name in ("A", "B"):
        if not results.get(name, {}).get("report"):
            raise RuntimeError(f"client {name} got no report: {results.get(name, {}).get('status')}")
    return results


# ------------------------------------------------------------------------------------------------ numbers

def path_numbers(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Pooled over the reports of one path: medians of tokens/s and the idle-gap distribution, per loop."""
    out = {}
    for name in LOOPS:
        runs = [r for report in reports for r in report["runs"] if r["contestant"] == name]
        gaps = [g for r in runs for g in r["timings"].get("gpu_gap_ms", [])]
        decode = [r["timings"]["decode_tokens_per_s"] for r in runs if r["timings"].get("decode_tokens_per_s")]
        out[name] = {
            "trials": len(runs),
            "tokens_per_s": statistics.median(r["timings"]["tokens_per_s"] for r in runs),
            "decode_tokens_per_s": statistics.median(decode) if decode else None,
            "gap_ms": {"p50": percentile(gaps, 50), "p99": percentile(gaps, 99), "max": max(gaps)} if gaps else None,
        }
    return out


def compare_paths(headless_reports: list[dict[str, Any]], dashboard_reports: list[dict[str, Any]]) -> dict[str, Any]:
    head, dash = path_numbers(headless_reports), path_numbers(dashboard_reports)
    drift = path_numbers(headless_reports[1:])
    first = path_numbers(headless_reports[:1])
    ratios = {name: {"tokens_per_s": dash[name]["tokens_per_s"] / head[name]["tokens_per_s"],
                     "decode_tokens_per_s": _ratio(dash[name]["decode_tokens_per_s"],
                                                   head[name]["decode_tokens_per_s"]),
                     "headless_after_over_before": drift[name]["tokens_per_s"] / first[name]["tokens_per_s"]}
              for name in LOOPS}
    return {"headless": head, "dashboard": dash, "dashboard_over_headless": ratios}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def print_row(model: str, mode: str, result: dict[str, Any]) -> None:
    for name in LOOPS:
        ratio = result["dashboard_over_headless"][name]
        head, dash = result["headless"][name], result["dashboard"][name]
        gaps = " | ".join(f"{p['gap_ms'][k]:.3f}/{d['gap_ms'][k]:.3f}" if p["gap_ms"] and d["gap_ms"] else "-"
                          for k in ("p50", "p99", "max") for p, d in [(head, dash)])
        print(f"{model:<24} {mode:<16} {name:<10} headless {head['tokens_per_s']:8.1f}  dashboard "
              f"{dash['tokens_per_s']:8.1f}  ratio {ratio['tokens_per_s']:.4f} (decode "
              f"{ratio['decode_tokens_per_s'] or 0:.4f}; headless after/before "
              f"{ratio['headless_after_over_before']:.4f})  gap ms p50|p99|max headless/dashboard {gaps}",
              flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["synthetic:smollm2-135m", "synthetic:llama-1b"])
    parser.add_argument("--modes", nargs="+", default=["reduce-overhead", "step-graph"])
    parser.add_argument("--device", default=None, help="passed to both paths (default: CUDA when present)")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--port", type=int, default=7861)
    parser.add_argument("--out", default="dashboard_vs_bench.json")
    parser.add_argument("--deadline-s", type=float, default=None, help="start no new case after this many seconds")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="dashboard-vs-bench-"))
    app = App(args.models[0], args.device, args.port)
    results: dict[str, Any] = {"settings": vars(args), "cases": []}
    try:
        app.wait_for(r"Serving on")
        for model in args.models:
            for mode in args.modes:
                if args.deadline_s and time.perf_counter() - app.started > args.deadline_s:
                    print(f"deadline reached: {model} {mode} not run", flush=True)
                    continue
                settings = settings_for(model, mode, args)
                tag = f"{model.replace(':', '-')}-{mode}"
                before = headless(settings, args.device, workdir, f"{tag}-before")
                runs = dashboard(app, settings)
                after = headless(settings, args.device, workdir, f"{tag}-after")
                dash_reports = [runs["A"]["report"], runs["B"]["report"]]
                case = {"model": model, "mode": mode, **compare_paths([before, after], dash_reports),
                        "clients": {k: {kk: vv for kk, vv in v.items() if kk != "report"} for k, v in runs.items()},
                        "command": before["command"],
                        "reports": {"headless_before": before, "headless_after": after, "dashboard_a": dash_reports[0],
                                    "dashboard_b": dash_reports[1]}}
                results["cases"].append(case)
                print_row(model, mode, case)
                Path(args.out).write_text(json.dumps(results))
    finally:
        app.stop()
        results["app"] = app.startup()
        results["app_log"] = [line for _, line in app.lines][-200:]
        Path(args.out).write_text(json.dumps(results))
    print(json.dumps(results["app"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
