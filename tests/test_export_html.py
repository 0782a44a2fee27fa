"""A run as one HTML file to share offline (issue 60, item 5): dashboard.views.run_html from a bench, page or load
report, the command `python -m dashboard.export_html`, `core.bench --html`, the page's "as HTML" downloads, and the file
drawn in headless Chromium with the network off."""

from __future__ import annotations

import html
import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import plotly.offline
import pytest

from benchmarks.hostile_audits import EVIL
from core.documents.files import read_report_bytes
from core.documents.schema import load
from dashboard.service.page_record import PageRecord, page_report
from dashboard.views import export_html
from dashboard.views.run_html import run_html
from dashboard.views.run_summary import DETAIL_HEADERS, EVIDENCE_HEADERS
from tests.conftest import bench_report
from tests.test_dashboard_browser import browser  # noqa: F401

REPO = Path(__file__).resolve().parent.parent
H200_REPORT = REPO / "benchmarks/lab/results/h200-2026-12-01/audit-ro-1b.json.gz"
BENCH_CHARTS = ["timeline", "tokens/s", "device", "step latency", "idle gap"]
LOAD_CHARTS = ["slots B=2, all at once", "slots B=1, all at once", "slots sweep", "rate sweep", "throughput"]
REMOTE = re.compile(r"""(?:src|href|action|poster|srcset)\s*=\s*["']?\s*(?:https?:)?//""", re.IGNORECASE)
ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "script", "body", "header", "main", "footer", "section", "h1",
                "h2", "h3", "p", "pre", "code", "b", "em", "strong", "br", "ul", "li", "div", "span", "table",
                "caption", "thead", "tbody", "tr", "th", "td", "details", "summary"}


class Parsed(HTMLParser):
    """The elements of a page (a script's text is not parsed as HTML, as a browser does not), its charts' figures by
    name, and the scripts that run."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.names: dict[str, str] = {}  # chart id -> its name
        self.figures: dict[str, dict[str, Any]] = {}  # chart id -> its figure
        self.running: list[dict[str, str | None]] = []  # the attributes of each script that runs
        self.styles: list[str] = []
        self._open: tuple[str, dict[str, str | None]] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.tags.append((tag, found))
        if tag == "div" and found.get("class") == "chart":
            self.names[str(found["id"])] = str(found["data-name"])
        if tag == "script" and found.get("type") != "application/json":
            self.running.append(found)
        self._open = (tag, found)

    def handle_data(self, data: str) -> None:
        tag, found = self._open or ("", {})
        if tag == "script" and found.get("class") == "figure":
            self.figures[str(found["data-chart"])] = json.loads(data)
        elif tag == "style":
            self.styles.append(data)

    def charts(self) -> dict[str, dict[str, Any]]:
        assert set(self.names) == set(self.figures), "each chart has its figure"
        return {self.names[chart]: self.figures[chart] for chart in self.names}


def title_of(figure: dict[str, Any]) -> str:
    return figure["layout"]["title"]["text"]


@pytest.fixture(scope="module")
def tiny_report(tiny) -> dict[str, Any]:
    return bench_report(tiny, trials=2)


@pytest.fixture(scope="module")
def h200_html() -> str:
    return run_html(load(H200_REPORT))


@pytest.fixture(scope="module")
def load_report(tiny) -> dict[str, Any]:
    from core.load.protocol import run_load
    from core.load.report import build_load_report
    from core.request.load import LoadRequest, WorkloadSpec
    from core.request.load_schema import load_command

    request = LoadRequest(workload=WorkloadSpec(requests=6, max_new_tokens=8, prompt_min=8, prompt_max=16),
                          max_batch=2, trials=1, contestants=("naive", "pipelined"), solo_checks=2, audit=True,
                          sweep_batch=(1,))
    return build_load_report(tiny, request, run_load(tiny, request), load_command(request, "tiny-random",
                                                                                  device="cpu"))


@pytest.fixture(scope="module")
def findings(load_report) -> list[str]:
    from core.load.words import load_findings

    return load_findings(load_report)


# ------------------------------------------------------------------------------------------------ what it shows

def test_a_bench_report_shows_its_verdict_words_tables_every_chart_and_the_audits_sites(h200_html):
    page = Parsed(h200_html)
    shown = page.charts()
    assert list(shown) == BENCH_CHARTS
    assert [title_of(f) for f in shown.values()][:2] == ["Host and device, step by step", "Tokens/s over time"]
    assert all(figure["data"] for name, figure in shown.items() if name != "device"), "each chart draws the run"
    assert "pipelined/naive = 1.368x (decode-phase tokens/s): pipelined is faster" in h200_html
    assert "<strong>What this run shows:</strong> naive waited 946 µs per step in <code>.item()</code>" in h200_html
    assert all(f"<th>{header}</th>" in h200_html for header in (*EVIDENCE_HEADERS, *DETAIL_HEADERS))
    assert "<h3>naive: 1 read of a device value or blocking copy per decode step, over 254 decode steps</h3>" in \
        h200_html
    assert "core/loops/generation.py:54" in h200_html and "return bool(state.done[index].item())" in h200_html
    title = re.search(r"<title>(.*?)</title>", h200_html).group(1)
    assert title == "syncscope: synthetic:llama-1b on NVIDIA H200, 2026-12-01T11:20:43+00:00"
    assert "<pre>python -m core.bench --model synthetic:llama-1b --dtype bf16" in h200_html
    assert h200_html.count(plotly.offline.get_plotlyjs()) == 1, "plotly.js inlined once"
    assert len(h200_html.encode()) < 9 * 2**20


def test_a_page_report_shows_the_pages_own_series_and_notices(tiny_report):
    record = PageRecord(t_end=2.0, series={"naive": {"t": [0.0, 1.0, 2.0], "tokens_per_s": [5.0, 6.0, 7.0]}},
                        notices=("the form lowered max new tokens to 8",))
    text = run_html(load(json.dumps(page_report(tiny_report, record))))
    assert "Note: the form lowered max new tokens to 8" in text
    tokens = Parsed(text).charts()["tokens/s"]
    assert [trace["name"] for trace in tokens["data"] if trace.get("y")] == ["naive"], "the page's own series"
    assert "outputs identical: yes" in text and "tiny-random on cpu (float32)" in text


def test_a_load_report_shows_its_findings_each_points_table_and_slots_the_sweep_and_the_audit(load_report, findings):
    text = run_html(load_report)
    page = Parsed(text)
    assert list(page.charts()) == LOAD_CHARTS
    assert f"<li>{findings[0]}</li>" in text.replace("&#x27;", "'")
    assert "<h2>B=2, all at once (the main point)</h2>" in text and "<h2>B=1, all at once</h2>" in text
    assert "<caption>The sweep: output tokens/s at each point</caption>" in text
    assert "<h3>naive: 1 read of a device value per decode step" in text and "core/load/batching.py" in text
    assert "The run as the CLI prints it" in text and "the sweep, output tokens/s" in text
    assert "<title>syncscope under load: tiny-random on cpu, " in text
    damaged = {**load_report, "load": {key: value for key, value in load_report["load"].items()
                                       if key != "solo_checked"}}
    without = run_html(damaged).replace("&#x27;", "'")
    assert "No findings: its findings could not be worded (KeyError: 'solo_checked')" in without
    assert "The run as the CLI prints it" not in without and list(Parsed(without).charts()) == LOAD_CHARTS


def test_every_text_from_a_hostile_report_is_escaped(tiny_report):
    hostile = json.loads(json.dumps(tiny_report))
    hostile["model"]["spec"] = hostile["request"]["prompt"] = hostile["command"] = EVIL
    for run in hostile["runs"]:
        run.update(texts=[EVIL], notices=[EVIL])
    hostile["sync_audit"] = {EVIL: {"reads_per_decode_step": 1.0, "decode_steps": 6, "note": EVIL, "sites": [
        {"file": EVIL, "line": 3, "code": EVIL, "kind": EVIL, "fix": EVIL, "fix_code": EVIL, "callers": [EVIL],
         "thread": EVIL, "per_step": 1.0, "in_decode_steps": 6}]}}
    text = run_html(load(json.dumps(hostile)))
    page = Parsed(text)
    assert {tag for tag, _ in page.tags} <= ALLOWED_TAGS, "no <img> or <a> from the report"
    assert not [(tag, name) for tag, found in page.tags for name in found if name.startswith("on")]
    assert len(page.running) == 2 and not any("src" in found for found in page.running)
    assert "&lt;img src=x onerror=alert(1)&gt;" in text and "<strong>bold</strong>" not in text
    assert len(page.charts()) == len(BENCH_CHARTS)


def test_the_file_asks_for_nothing_over_the_network(h200_html, tiny_report, load_report):
    for text in (h200_html, run_html(tiny_report), run_html(load_report)):
        page = Parsed(text)
        assert not {"link", "img", "iframe", "object", "embed", "base", "form", "audio", "video"} & \
            {tag for tag, _ in page.tags}
        assert not [value for _, found in page.tags for name, value in found.items()
                    if name in ("src", "href", "srcset", "action", "poster")]
        assert not any("url(" in style or "@import" in style for style in page.styles)
        assert not REMOTE.search(text.replace(plotly.offline.get_plotlyjs(), "")), "no remote address but plotly's own"
        policy = next(found["content"] for tag, found in page.tags if found.get("http-equiv") ==
                      "Content-Security-Policy")
        assert policy.startswith("default-src 'none';") and "unsafe-inline" not in policy.split("script-src")[1]


def test_the_pages_markdown_becomes_html_and_text_stays_text():
    from dashboard.views.markdown_html import markdown_html
    from dashboard.views.report_text import plain
    from dashboard.views.run_summary import code_quoted

    assert markdown_html("**Verdict** · NO* (see note)  \n*a note* with `x.item()`") == \
        "<p><strong>Verdict</strong> · NO* (see note)<br><em>a note</em> with <code>x.item()</code></p>"
    assert markdown_html("**What ran:** here\n\n- one\n- two") == \
        "<p><strong>What ran:</strong> here</p>\n<ul><li>one</li><li>two</li></ul>"
    assert markdown_html(plain(EVIL)) == f"<p>{html.escape(EVIL.strip(), quote=False)}</p>"
    assert markdown_html(code_quoted("at `<b>x</b>` and `*y*`")) == \
        "<p>at <code>&lt;b&gt;x&lt;/b&gt;</code> and <code>*y*</code></p>"
    assert markdown_html("<script>alert(1)</script> &amp; **unclosed") == \
        "<p>&lt;script&gt;alert(1)&lt;/script&gt; &amp; **unclosed</p>"


# ------------------------------------------------------------------------------------------------ the commands

def test_the_command_writes_the_file_and_refuses_what_is_not_a_report_in_one_line(tmp_path, capsys, load_report,
                                                                                  findings):
    out = tmp_path / "run.html"
    assert export_html.main([str(H200_REPORT), str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n" and list(Parsed(out.read_text()).charts()) == BENCH_CHARTS
    (tmp_path / "other.json").write_text('{"schema": "something/1"}')
    (tmp_path / "audit.json").write_bytes(read_report_bytes(REPO / "benchmarks/lab/results/cpu-2026-12-01/"
                                                                   "audit-naive_loop.json"))
    for name, said in (("other.json", "not a syncscope benchmark report"), ("audit.json", "Your loop tab"),
                       ("missing.json", "cannot read it")):
        assert export_html.main([str(tmp_path / name), str(tmp_path / "x.html")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err and err.startswith("python -m dashboard.export_html: error: ")
    assert export_html.main([str(H200_REPORT), str(tmp_path / "no" / "x.html")]) == 2
    assert "the folder" in capsys.readouterr().err
    (tmp_path / "load.json").write_text(json.dumps(load_report))
    assert export_html.main([str(tmp_path / "load.json"), str(out)]) == 0
    assert f"<li>{findings[-1]}</li>" in out.read_text().replace("&#x27;", "'") and "No findings" not in out.read_text()


def test_core_bench_html_writes_the_file_after_the_run(tmp_path, capsys):
    from core.bench import main

    out, report = tmp_path / "run.html", tmp_path / "run.json"
    assert main(["--model", "tiny-random", "--device", "cpu", "--max-new-tokens", "8", "--trials", "2",
                 "--html", str(out), "--json", str(report)]) == 0
    said = capsys.readouterr().out
    assert f"wrote {report}\nwrote {out}\n" in said
    text = out.read_text()
    assert list(Parsed(text).charts()) == BENCH_CHARTS and "<title>syncscope: tiny-random on cpu, " in text
    assert json.loads(report.read_text())["command"].split(" -m ")[1][:40] in text


def test_core_bench_html_under_load_writes_the_file_with_the_sentences_it_printed(tmp_path, capsys):
    from core.bench import main

    out = tmp_path / "load.html"
    assert main(["--model", "tiny-random", "--device", "cpu", "--requests", "6", "--max-batch", "2",
                 "--max-new-tokens", "8", "--trials", "1", "--contestants", "naive,pipelined", "--solo-checks", "2",
                 "--html", str(out)]) == 0
    said = capsys.readouterr().out
    first_finding = said.split("What this run shows:\n")[1].splitlines()[0].strip()
    text = out.read_text().replace("&#x27;", "'")
    assert f"<li>{first_finding}</li>" in text and "No findings" not in text and said.endswith(f"wrote {out}\n")


def test_core_bench_checks_the_html_path_before_any_work_and_lists_the_flag(tmp_path, capsys):
    from core.bench import main

    assert main(["--model", "tiny-random", "--device", "cpu", "--html", str(tmp_path / "no" / "run.html")]) == 2
    assert capsys.readouterr().err == (f"core.bench: error: --html {tmp_path / 'no' / 'run.html'}: the folder "
                                       f"{tmp_path / 'no'} does not exist\n")
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "--html PATH" in capsys.readouterr().out


def test_core_bench_says_in_one_line_how_to_get_the_dashboard_when_the_export_cannot_run(tmp_path, capsys,
                                                                                       monkeypatch, tiny_report):
    from cli import common

    monkeypatch.setitem(sys.modules, "plotly", None)  # the dashboard extra is not installed: importing it fails
    monkeypatch.delitem(sys.modules, "dashboard.views.run_html", raising=False)  # imported again, it needs plotly
    assert common.write_html(str(tmp_path / "run.html"), tiny_report) is False
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"core.bench: error: --html {tmp_path / 'run.html'}: exporting")
    assert 'needs plotly (the dashboard extra), which is not installed here: run pip install ".[dashboard]"' in err
    assert not (tmp_path / "run.html").exists()


# ------------------------------------------------------------------------------------------------ the page

def test_the_pages_tabs_offer_the_run_as_html(tiny_report, load_report, findings):
    from dashboard.ui.tabs.under_load import UnderLoadTab
    from tests.test_ui import quiet_page

    page = quiet_page()
    replayed = page.replay.replay_upload(json.dumps(tiny_report).encode())["html_file"]
    assert page.history.downloads("someone", tiny_report)["html_file"].visible is False, "made when asked"
    compared = page.history._write_html("someone", tiny_report, None)
    job = SimpleNamespace(report=load_report, owner="someone")
    under_load = UnderLoadTab(page.context, {}, panel=None)._write_html(job)  # type: ignore[arg-type]
    for path in (replayed.value["path"], compared, under_load):  # the replay button's is Gradio's copy
        text = Path(path).read_text()
        assert "<title>syncscope" in text and "tiny-random on cpu" in text and Parsed(text).charts()
    assert replayed.interactive
    folder = page.context.downloads.folder_for("someone")
    assert sorted(p.name for p in folder.glob("*.html")) == ["syncscope-load-report.html", "syncscope-report.html"]
    assert f"<li>{findings[0]}</li>" in Path(under_load).read_text().replace("&#x27;", "'")


# ------------------------------------------------------------------------------------------------ in a browser

@pytest.mark.browser
@pytest.mark.parametrize("kind", ["bench", "load"])
def test_the_file_draws_every_chart_with_the_network_off(browser, tmp_path, kind, tiny_report, load_report):  # noqa: F811
    text = run_html(tiny_report) if kind == "bench" else run_html(load_report)
    path = tmp_path / "run.html"
    path.write_text(text, encoding="utf-8")
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_offline(True)
    asked: list[str] = []
    problems: list[str] = []

    def only_the_file(route: Any) -> None:
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            asked.append(route.request.url)
            route.abort()

    context.route("**/*", only_the_file)
    page = context.new_page()
    page.on("console", lambda message: problems.append(message.text) if message.type in ("error", "warning") else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.goto(path.as_uri())
    charts = len(Parsed(text).charts())
    page.wait_for_function(f"document.querySelectorAll('.js-plotly-plot svg.main-svg').length >= {charts}",
                           timeout=30_000)
    drawn = page.evaluate("() => Array.from(document.querySelectorAll('div.chart')).map("
                          "c => c.classList.contains('js-plotly-plot') && !!c.querySelector('svg'))")
    context.close()
    assert charts == len(BENCH_CHARTS if kind == "bench" else LOAD_CHARTS) and drawn == [True] * charts
    assert asked == [] and problems == [], (asked, problems)


def test_make_html_writes_the_visitors_last_run_and_shows_its_download(tiny_report, monkeypatch):
    from tests.test_ui import quiet_page

    page = quiet_page()
    history = page.history
    monkeypatch.setattr(history.page, "owner", lambda request: "someone")
    monkeypatch.setattr(history.page.runner, "latest_run", lambda owner, *work: None, raising=False)
    assert history.make_html(None).visible is False, "no run yet: nothing to make"
    monkeypatch.setattr(history.page.runner, "latest_run",
                        lambda owner, *work: SimpleNamespace(report=tiny_report, page=None), raising=False)
    shown = history.make_html(None)
    assert shown.visible and shown.interactive and "<title>syncscope" in Path(shown.value["path"]).read_text()
