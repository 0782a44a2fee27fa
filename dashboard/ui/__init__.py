"""The Gradio page: `build_demo(runner)` and its `CSS` (dashboard.ui.demo), what the tabs share (page), the run form
(form), the diff panel (diff_panel) and the tabs (dashboard.ui.tabs). The one layer that imports gradio for its
components; it may import every other layer (tests/test_dashboard_layers.py)."""

from dashboard.ui.demo import CSS, EXPLAIN, build_demo

__all__ = ["CSS", "EXPLAIN", "build_demo"]
