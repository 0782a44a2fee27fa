"""The Under load tab in headless Chromium: a small workload runs, its table and slots picture are drawn, and its
downloaded report replays; and a table wider than its column says it scrolls (issue 58, items 5 and 6)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core.documents.kinds import LOAD, kind_of
from tests.conftest import serving
from tests.test_dashboard_browser import TIMEOUT_MS, browser, click_run_and_wait, opened_page  # noqa: F401

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


def test_a_small_workload_runs_draws_its_table_and_slots_and_its_report_replays(page, tmp_path):
    page.get_by_role("tab", name="Under load").click()
    for elem_id, value in (("load-requests", "6"), ("load-max-batch", "2"), ("load-max-new-tokens", "10"),
                           ("load-prompt-lengths", "4-12"), ("load-trials", "1")):
        fill(page, elem_id, value)
    page.get_by_text("Contestants and checks").click()
    for name in ("hf-batch (transformers' continuous batching)", "hf-batch-async (transformers' async batching, CUDA)"):
        page.get_by_label(name).uncheck()
    fill(page, "load-solo-checks", "2")
    page.click("#load-run-btn")
    page.wait_for_function("document.querySelector('#load-status')?.innerText.match(/Done|Failed|Not started/)",
                           timeout=TIMEOUT_MS)
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
