"""The Gradio page: its title, the banner, the tabs (dashboard.ui.tabs: Compare with its History section, Under load,
Replay, Your loop) and the Explain section, put together by `build_demo(runner)`.

Everything the page shows comes from `dashboard.service.runner` (one queue in front of the engine process) and
`dashboard.views` (figures from plain data). `build_demo(runner)` builds the page without launching it, so tests
can serve it in-process. Text that came from a user or a file is shown as text, never as HTML (`plain`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from core.documents.files import MAX_REPORT_BYTES
from core.request.run_schema import option_defaults
from dashboard.edge.downloads import DownloadFolders
from dashboard.edge.session_copies import SessionCopies
from dashboard.service.runner import Runner
from dashboard.ui.page import PageConfig, PageContext
from dashboard.ui.tabs.compare import CompareTab
from dashboard.ui.tabs.replay import ReplayTab
from dashboard.ui.tabs.under_load import UnderLoadTab
from dashboard.ui.tabs.your_loop import YourLoopTab
from dashboard.views import run_charts, timeline
from dashboard.views.banner import ServerBanner

CSS = """
.pane textarea { font-family: ui-monospace, monospace; font-size: 13px; }
#status { min-height: 2.2em; }
.rate { font-size: 15px; }
#summary, #replay-summary, #summary-more, #replay-summary-more, #history { overflow-x: auto; }
#summary-more table, #replay-summary-more table { min-width: 1200px; }
#history table { min-width: 1200px; }
#audit-sites { overflow-x: auto; }
#audit-sites table { min-width: 1210px; }  /* audit_view.SITE_WIDTHS: scrolls sideways rather than squeezing */
/* A table wider than its column scrolls sideways inside itself. At 1400 px "Where the time went" and the history
   looked cut on the right: Gradio's scrollbar is thin and half-transparent (and hidden until used where scrollbars
   overlay), so it gets a full one on a visible track, and while columns lie past the right edge (WIDE_TABLES_JS marks
   the table "more-right") that edge fades out and a label says so. */
.table-container .virtual-table-viewport { scrollbar-width: auto; scrollbar-color: #8a8a8a #e6e6e6; }
.table-container.more-right .table-wrap::after {  /* above the table's sticky header */
  content: ""; position: absolute; top: 0; right: 0; bottom: 0; width: 72px; pointer-events: none; z-index: 50;
  background: linear-gradient(to right, rgba(255, 255, 255, 0), var(--block-background-fill, #fff) 80%);
}
.table-container.more-right .table-wrap::before {
  content: "more columns →"; position: absolute; right: 8px; bottom: 8px; pointer-events: none; z-index: 51;
  padding: 2px 8px; border-radius: 10px; font-size: 12px; background: #555; color: #fff;
}
/* A phone: the results right under Run (the remaining controls follow them), no plotly toolbar over the titles,
   titles small enough to fit the chart's width, and no span labels (the legend names the colours). */
@media (max-width: 720px) {
  /* Run inside the first screen: a smaller title and banner; the banner's lines vary with the server's state, so
     past a third of the screen it scrolls inside itself. */
  .prose h1 { font-size: 22px !important; line-height: 1.25 !important; margin-bottom: 4px !important; }
  .prose:has(> h1) p { font-size: 13px !important; }
  #banner .prose, #banner .prose * { font-size: 12.5px !important; }
  #banner { max-height: 32vh; overflow-y: auto !important; }
  #compare-row { flex-direction: column; }
  #controls-col { display: contents; }
  #controls-col > * { order: 0; width: 100%; }
  #results-col { order: 1; width: 100%; }
  #controls-col > #run-row ~ * { order: 2; }
  #controls-col > #run-note { order: 0; }  /* the answer to a second click stays beside Run */
  .js-plotly-plot .modebar-container { display: none; }
  .js-plotly-plot .gtitle { font-size: 12px !important; }
  .js-plotly-plot .gtitle-subtitle { font-size: 10px !important; }
  /* span labels (live_charts.span_shapes: the 10 px annotations of these charts) are placed for a desktop width */
  :is(#plot-tokens, #plot-device, #replay-plot-tokens, #replay-plot-device)
    .annotation-text[style*="font-size: 10px"] { display: none; }
}
"""

EXPLAIN = (Path(__file__).with_name("explain.md")).read_text(encoding="utf-8")  # the page's Explain section
# Runs once in each visitor's browser: a table with columns past its right edge is marked "more-right" (CSS fades that
# edge), again as it scrolls, as the page changes and as the window is resized; at most once a frame.
WIDE_TABLES_JS = """
() => {
  let queued = false;
  const mark = () => {
    queued = false;
    document.querySelectorAll(".table-container .virtual-table-viewport").forEach((viewport) => {
      const hidden = viewport.scrollWidth - viewport.clientWidth - viewport.scrollLeft;
      viewport.closest(".table-container")?.classList.toggle("more-right", hidden > 2);
    });
  };
  const soon = () => { if (!queued) { queued = true; requestAnimationFrame(mark); } };
  document.addEventListener("scroll", soon, true);
  window.addEventListener("resize", soon);
  new MutationObserver(soon).observe(document.body, {childList: true, subtree: true, characterData: true});
  soon();
}
"""

BANNER_REFRESH_S = 2.0


@dataclass(frozen=True)
class Dashboard:
    """The built page, as build_demo leaves it on `demo.dashboard`: its shared context and its tabs."""

    page: PageContext
    compare: CompareTab
    replay: ReplayTab
    your_loop: YourLoopTab
    under_load: UnderLoadTab

    @property
    def downloads(self) -> DownloadFolders:
        return self.page.downloads

    @property
    def notes(self) -> list[str]:
        """Server-level notices for the banner (e.g. a share link that failed)."""
        return self.page.banner.notes

    def banner(self) -> str:
        return self.page.banner.text()

    def owner(self, request: gr.Request | None) -> str:
        return self.page.owner(request)

    def page_closed(self, request: gr.Request | None) -> None:
        """A page closed: its visitor's download folder goes once no other page of that browser is open."""
        self.page.visitors.leave(request, when_last=self.page.downloads.forget)


def build_demo(runner: Runner, *, defaults: Mapping[str, Any] | None = None,
               replay_files: Mapping[str, Path] | None = None, audit_files: Mapping[str, Path] | None = None,
               live_interval_s: float = 0.25,
               chart_interval_s: float = 1.0, title: str = "syncscope",
               max_report_bytes: int = MAX_REPORT_BYTES) -> gr.Blocks:
    """The page for `runner`; launch it with `demo.queue(...)` and `demo.launch(..., max_file_size=max_report_bytes)`
    (see app.py)."""
    config = PageConfig(defaults={**option_defaults(runner.uses_cuda), **(defaults or {})},
                        replay_files=dict(replay_files or {}), audit_files=dict(audit_files or {}),
                        live_interval_s=live_interval_s,
                        chart_interval_s=chart_interval_s,
                        max_report_bytes=max_report_bytes)
    banner = ServerBanner(runner)
    run_charts.prebuild()
    timeline.prebuild()
    with gr.Blocks(title=title, analytics_enabled=False) as demo:
        gr.Markdown("# syncscope: where does the GPU wait for the host?\nThe naive decode loop (one host sync per "
                    "step) and the pipelined loop (stop flag read a few steps late), side by side, timed fairly.")
        banner_md = gr.Markdown(banner.text(), elem_id="banner", label="banner", show_label=False)
        # What this page shows (its tab, and the report open in Replay), so the banner can describe that.
        view_state = gr.State({"tab": "compare", "replay": None})
        # Always ticking: every open page shows the server's state (model, loads, restarts) within seconds.
        timer = gr.Timer(BANNER_REFRESH_S)
        timer.tick(banner.for_view, inputs=[view_state], outputs=[banner_md], api_visibility="private",
                   show_progress="hidden", queue=False)
        page = PageContext(runner, config, banner, banner_md=banner_md, view_state=view_state,
                           browser_state=gr.BrowserState(None, storage_key="syncscope-browser"))
        with gr.Tabs():
            with gr.Tab("Compare", id="compare") as compare_tab:
                compare = CompareTab.build(page)
            with gr.Tab("Replay", id="replay", elem_id="replay-tab") as replay_tab:
                replay = ReplayTab.build(page, demo)
            with gr.Tab("Your loop", id="audit", elem_id="audit-tab") as audit_tab:
                your_loop = YourLoopTab.build(page)
            with gr.Tab("Under load", id="load", elem_id="load-tab") as load_tab:  # last: on a phone it folds first
                under_load = UnderLoadTab.build(page)
        for tab, name in ((compare_tab, "compare"), (load_tab, "load"), (replay_tab, "replay"),
                          (audit_tab, "audit")):
            tab.select(_tab_chosen(banner, name), inputs=[view_state], outputs=[view_state, banner_md],
                       api_visibility="private", show_progress="hidden", queue=False)
        demo.load(compare.on_load, inputs=[page.browser_state], outputs=[page.browser_state, *compare.outputs],
                  api_visibility="private", show_progress="hidden", concurrency_limit=None)
        demo.load(under_load.on_load, inputs=[page.browser_state], outputs=under_load.outputs,
                  api_visibility="private", show_progress="hidden", concurrency_limit=None)
        with gr.Accordion("Explain: the sync, the numbers, the toggles, and why NVML utilization is coarse",
                          open=False):
            gr.Markdown(EXPLAIN, elem_id="explain")
        gr.api(compare.history.report_of_run, api_name="report", concurrency_limit=4, concurrency_id="reports")
        demo.load(None, js=WIDE_TABLES_JS)
    compare.session_copies = under_load.session_copies = SessionCopies(demo)
    demo.dashboard = Dashboard(page, compare, replay, your_loop, under_load)  # type: ignore[attr-defined]
    return demo


def _tab_chosen(banner: ServerBanner, name: str) -> Callable[[Any], tuple[dict[str, Any], str]]:
    def chosen(view: Any) -> tuple[dict[str, Any], str]:
        return banner.on_tab(name, view)
    return chosen
