"""The Under load tab in headless Chromium: a small workload runs, its table and slots picture are drawn, and its
downloaded report replays; a reload during a run and after it shows the whole run again (issue 67, item 2); and a
table wider than its column says it scrolls (issue 58, items 5 and 6)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core.documents.kinds import LOAD, kind_of
from dashboard.views import load_view
from tests.conftest import serving
from tests.test_dashboard_browser import TIMEOUT_MS, browser, click_run_and_wait, opened_page, row_cells  # noqa: F401

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def served_app(tiny_runner):
    yield from serving(tiny_runner)


@pytest.fixture
def page(browser: Any, served_app: Any) -> Any:  # noqa: F811
    page = opened_page(browser, served_app.url)
    yield page
    page.context.close()


def fill(page: Any, elem_id: str, value: str) -> None:
    page.locator(f"#{elem_id} input, #{elem_id} textarea").first.fill(value)


def bars_drawn(page: Any, plot: str) -> int:
    page.locator(f"#{plot} .js-plotly-plot").first.wait_for(state="visible", timeout=TIMEOUT_MS)
    return page.locator(f"#{plot} .js-plotly-plot .barlayer .point").count()


def set_up_a_small_workload(page: Any, **more: str) -> None:
    """The Under load tab's form: 6 short requests over 2 slots, one trial, our loops only; `more` by field id."""
    page.get_by_role("tab", name="Under load").click()
    settings = {"load-requests": "6", "load-max-batch": "2", "load-max-new-tokens": "10",
                "load-prompt-lengths": "4-12", "load-trials": "1", **more}
    for elem_id, value in settings.items():
        fill(page, elem_id, value)
    page.get_by_text("Contestants and checks").click()
    for name in ("hf-batch (transformers' continuous batching)", "hf-batch-async (transformers' async batching, CUDA)"):
        page.get_by_label(name).uncheck()
    fill(page, "load-solo-checks", "2")


def wait_until_done(page: Any) -> None:
    page.wait_for_function("document.querySelector('#load-status')?.innerText.match(/Done|Failed|Not started/)",
                           timeout=TIMEOUT_MS)


def test_a_small_workload_runs_draws_its_table_and_slots_and_its_report_replays(page, tmp_path):
    set_up_a_small_workload(page)
    page.click("#load-run-btn")
    wait_until_done(page)
    assert page.inner_text("#load-status").startswith("Done in"), page.inner_text("#load-status")
    findings = page.inner_text("#load-findings")
    assert "What this run shows" in findings
    table = page.inner_text("#load-table")
    assert "naive" in table and "pipelined" in table and "ceiling (no-check)" in table and "hf-batch" not in table
    assert bars_drawn(page, "load-plot-slots") >= 2 * 6, "a bar per request of each loop, and the steps past a stop"
    assert page.locator("#load-plot-throughput .js-plotly-plot .scatterlayer .trace").count() == 3

    with page.expect_download() as download:
        page.click("#load-download-report")
    path = tmp_path / "load.json"
    download.value.save_as(path)
    assert kind_of(json.loads(path.read_text())) == LOAD

    page.get_by_role("tab", name="Replay").click()
    page.locator("#replay-upload input[type=file]").set_input_files(str(path))
    page.wait_for_function("document.querySelector('#replay-status')?.innerText.match(/Showing|Cannot/)",
                           timeout=TIMEOUT_MS)
    assert "a load report: tiny-random on cpu" in page.inner_text("#replay-status")
    assert "pipelined" in page.inner_text("#replay-load-table")
    assert page.inner_text("#replay-load-findings") == findings, "Replay words the report as the run's tab did"
    assert bars_drawn(page, "replay-load-plot-slots") >= 2 * 6
    assert not page.locator("#replay-bench").is_visible()


def headers(page: Any, table: str) -> list[str]:
    return [text for cell in page.locator(f"#{table} thead th").all() if (text := cell.inner_text().strip())]


def rows(page: Any, table: str) -> list[list[str]]:
    drawn = []
    while cells := row_cells(page, f"#{table}", len(drawn)):
        drawn.append(cells)
    return drawn


def assert_the_whole_run_is_shown(page: Any, requests: int) -> None:
    """The run's findings, contestants table, slots picture, sweep charts and table, and its report's download."""
    assert page.inner_text("#load-status").startswith("Done in"), page.inner_text("#load-status")
    assert "What this run shows" in page.inner_text("#load-findings")
    assert headers(page, "load-table") == list(load_view.TABLE_HEADERS)
    loops = ["naive", "pipelined", "ceiling (no-check)"]
    assert [row[0] for row in rows(page, "load-table")] == loops
    assert headers(page, "load-sweep") == ["point", *(f"{loop} tok/s" for loop in loops), "pipelined / naive"]
    assert [row[0] for row in rows(page, "load-sweep")] == ["B=1, all at once", "B=2, all at once"]
    assert bars_drawn(page, "load-plot-slots") >= 2 * requests, "a bar per request of each loop"
    page.locator("#load-plot-sweep .js-plotly-plot").first.wait_for(state="visible", timeout=TIMEOUT_MS)
    assert page.locator("#load-plot-sweep .js-plotly-plot .scatterlayer .trace").count() == len(loops)
    page.wait_for_function("!document.querySelector('#load-download-report').disabled", timeout=10_000)


def test_a_reload_during_a_run_and_after_it_shows_the_whole_run(page):
    """As a Compare run is kept: the reloaded page streams the run again, then shows all of it, and so does a reload
    after it (these came back empty: the table headed 0 1 2 ... 12, the charts blank)."""
    set_up_a_small_workload(page, **{"load-requests": "12", "load-max-new-tokens": "24", "load-trials": "2",
                                     "load-sweep-batch": "1,2"})
    page.click("#load-run-btn")
    page.wait_for_function("document.querySelector('#load-status')?.innerText.match(/B=|Warming|Timing|Decoding/)")
    for _ in range(2):  # during the run, then after it
        page.reload()
        page.wait_for_selector("#run-btn")
        page.get_by_role("tab", name="Under load").click()
        wait_until_done(page)
        assert_the_whole_run_is_shown(page, requests=12)


def test_a_table_wider_than_its_column_says_it_scrolls_sideways(page):
    """At 1400 px "Where the time went" is wider than the results column: its right edge says more columns follow,
    until it is scrolled to the end."""
    click_run_and_wait(page)
    container = page.locator("#summary-more .table-container")
    page.wait_for_function("document.querySelector('#summary-more .table-container')?.classList.contains('more-right')",
                           timeout=TIMEOUT_MS)
    label = page.evaluate("getComputedStyle(document.querySelector('#summary-more .table-wrap'), '::before').content")
    assert "more columns" in label
    page.evaluate("(v) => { v.scrollLeft = v.scrollWidth; }",
                  page.locator("#summary-more .virtual-table-viewport").element_handle())
    page.wait_for_function("!document.querySelector('#summary-more .table-container').classList.contains('more-right')",
                           timeout=5000)
    assert "more-right" not in (container.get_attribute("class") or "")
