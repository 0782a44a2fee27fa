"""What a new user hits (issue 12): text never becomes HTML, bounded work when exposed, an honest headline, dashes
where a number means nothing, a readable live view, start-up and CLI errors in one line, and a Replay tab that
refuses damaged reports in one line."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gradio_client import Client, handle_file

import app
from core.options import BenchRequest, GenerationOptions
from core.stats import verdict, verdict_sentence
from dashboard.jobs import CANCELLED
from dashboard.reports import SUMMARY_HEADERS, parse_report, summary_rows
from dashboard.settings import EXPOSED_LIMITS, Limits, RunSettings
from dashboard.ui import OUTPUTS, REPLAY_OUTPUTS, headline_md, plain
from tests.conftest import TINY, bench_report, fast_settings, make_runner, serving
from tests.test_dashboard_client import form, shown, text_of

REPO = Path(__file__).resolve().parent.parent
EVIL = '<img src=x onerror=alert(1)> **bold** <a href="http://evil.example">link</a> https://evil.example'


@pytest.fixture(scope="module")
def served_app(tiny_runner):
    yield from serving(tiny_runner)


# ------------------------------------------------------------------------------------------ 1. text, not HTML

def test_user_text_is_escaped_for_markdown():
    shown_text = plain(EVIL)
    assert "<" not in shown_text and ">" not in shown_text
    assert "\\*\\*bold\\*\\*" in shown_text and "https\\://evil\\.example" in shown_text
    assert text_of(shown_text) == EVIL  # the characters survive; only their meaning goes


def test_a_model_name_never_reaches_the_page_as_html(served_app):
    raw = dict(zip(OUTPUTS, Client(served_app.url, verbose=False).predict(*form(model=EVIL), api_name="/run")))
    assert "<img" not in raw["status"] and "<a " not in raw["status"] and "&lt;img" in raw["status"]
    assert EVIL not in raw["banner"] and "onerror" not in raw["banner"], "one user's failure is not in the banner"
    assert raw["model"] == TINY, "the spec that failed to load does not stay selected"


def test_a_report_with_html_in_its_fields_is_shown_as_text(served_app, tiny, tmp_path):
    report = bench_report(tiny)
    report["model"]["spec"] = EVIL
    report["environment"]["gpu"] = "<b>GPU</b>"
    report["created"] = '<img src="http://evil.example/x.png">'
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(report))
    out = dict(zip(REPLAY_OUTPUTS, Client(served_app.url, verbose=False).predict(handle_file(str(path)),
                                                                               api_name="/replay")))
    assert "<b>" not in out["status"] and "<img" not in out["status"] and "<a " not in out["status"]
    assert "onerror" in text_of(out["status"])  # shown, as text


# ------------------------------------------------------------------------------- 2. bounded work when exposed


def test_the_form_says_what_a_shared_server_allows(tiny_runner):
    from dashboard.ui import build_demo

    saved = tiny_runner.limits
    tiny_runner.limits = EXPOSED_LIMITS
    try:
        demo = build_demo(tiny_runner, defaults=fast_settings())
        texts = [b.value for b in demo.blocks.values() if getattr(b, "elem_id", None) == "limits"]
        assert texts and "at most 1024 new tokens, batch 8" in text_of(texts[0])
    finally:
        tiny_runner.limits = saved


# ------------------------------------------------------------------------------------- 3-5. honest numbers


def test_decode_phase_leads_and_prefill_is_beside_it(tiny):
    report = bench_report(tiny, trials=3, ignore_eos=True, max_new_tokens=24)
    for run in report["runs"]:
        t = run["timings"]
        assert t["decode_tokens"] == t["new_tokens"] - 1
        assert t["decode_ms"] == pytest.approx(t["total_ms"] - t["ttft_ms"])
        # Prefill is left out of it: the rate is the decode tokens over the decode time alone. (Whether it is above
        # the whole-run rate depends on whether prefill took longer than a decode step, which a tiny CPU model
        # need not do.)
        assert t["decode_tokens_per_s"] == pytest.approx(t["decode_tokens"] / t["decode_ms"] * 1000)
    assert report["verdict"]["metric"] == "decode_tokens_per_s"
    text = text_of(headline_md(report))
    assert text.startswith("pipelined/naive") and "decode-phase tokens/s" in text and "TTFT" in text
    assert summary_rows(report)[0][1] == round(report["summary"]["naive"]["decode_tokens_per_s"], 1)


# --------------------------------------------------------------------------------------------- 8. live view


def test_a_new_run_clears_the_previous_runs_verdict_and_charts_at_once(served_app):
    client = Client(served_app.url, verbose=False)
    client.predict(*form(), api_name="/run")
    job = client.submit(*form(prompt="A second question"), api_name="/run")
    first = None
    for update in job:
        first = dict(zip(OUTPUTS, update))
        break
    job.result()
    assert "appears here when it finishes" in first["headline"]
    assert first["summary"]["data"] in ([], [[]]) and first["command"] == ""


def test_the_banner_names_the_model_being_timed_while_the_run_goes():
    runner = make_runner(monitor=False)
    app_ = next(serving(runner))
    try:
        job = Client(app_.url, verbose=False).submit(*form(model="synthetic:smollm2-135m", max_new_tokens=8),
                                                     api_name="/run")
        banners = [dict(zip(OUTPUTS, update))["banner"] for update in job]
        live = [text_of(b) for b in banners[:-1] if isinstance(b, str)]
        assert any("Model: synthetic:smollm2-135m" in b for b in live), "named before the run's final update"
        assert not any("Model: tiny-random" in b for b in live[live.index(next(b for b in live if "smollm2" in b)):])
    finally:
        app_.demo.close()
        runner.close()


# ----------------------------------------------------------------------------------- 10-12. start-up, CLI

def test_a_port_in_use_is_one_line_and_exit_2(capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert app.main(["--port", str(port), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"port {port} on 127.0.0.1 is already in use" in err


def test_help_gives_each_default_once():
    text = app.build_parser().format_help()
    assert "(default: None)" not in text and "(default ...) (default" not in text
    assert "(default: 7860)" in text


def test_the_start_line_speaks_of_the_flag_not_of_launch(tmp_path):
    from tests.conftest import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "app.py", "--model", TINY, "--device", "cpu", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "Serving on" in line:
                break
        text = "".join(lines)
        assert "add --share for a public link" in text and "share=True" not in text
    finally:
        proc.terminate()
        proc.wait(30)


# --------------------------------------------------------------------------------------------- 13. replay

def damaged_reports(tiny) -> dict[str, str]:
    good = bench_report(tiny)
    variants = {}
    for name, damage in {
        "run without timings": lambda r: r["runs"][0].pop("timings"),
        "steps that are text": lambda r: r["runs"][0]["timings"].update(step_ms=["fast"]),
        "no trial number": lambda r: r["runs"][0].pop("trial"),
        "summary entry not an object": lambda r: r["summary"].update(naive=3),
        "warm-up without a number": lambda r: r["warmup"]["naive"].update(total_ms="long"),
        "recorded spans broken": lambda r: r.update(dashboard={"spans": [{"t0": "x"}], "series": {}}),
        "infinite rate": lambda r: r["runs"][0]["timings"].update(tokens_per_s=float("inf")),
    }.items():
        report = json.loads(json.dumps(good))
        damage(report)
        variants[name] = json.dumps(report)
    return variants


def test_every_damaged_report_gets_one_line_and_leaves_the_page_as_it_was(served_app, tiny, tmp_path):
    client = Client(served_app.url, verbose=False)
    for name, text in damaged_reports(tiny).items():
        path = tmp_path / "damaged.json"
        path.write_text(text)
        out = shown(dict(zip(REPLAY_OUTPUTS, client.predict(handle_file(str(path)), api_name="/replay"))))
        assert out["status"].startswith("Cannot open this file: the report is incomplete or damaged"), name
        assert "\n" not in out["status"].strip(), name
        unchanged = (None, {"__type__": "update"})
        assert out["tokens_plot"] in unchanged and out["summary"] in unchanged, f"{name}: the page stays as it was"
