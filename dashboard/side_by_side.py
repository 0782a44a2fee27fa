"""Two reports side by side (core.explain.compare_reports, drawn by dashboard.compare_view and dashboard.timeline):
a summary line, the settings, the rates and the per-step waits as tables, and both timelines on one time axis. The
History section compares two of a visitor's runs with it, Replay two report files."""

from __future__ import annotations

from typing import Any, Self

import gradio as gr

from core.report_comparison import compare_reports
from dashboard import compare_view, timeline
from dashboard.report_text import plain

COMPONENTS = ("status", "settings", "rates", "waits", "timeline")


class SideBySide:
    """Where two reports side by side are shown; `components` by name (COMPONENTS)."""

    def __init__(self, components: dict[str, Any]):
        self.components = components

    @classmethod
    def build(cls, prefix: str) -> Self:
        """The components, their elem_ids starting with `prefix`."""
        table = {"interactive": False, "wrap": True, "datatype": "str"}
        k = {"status": gr.Markdown(elem_id=f"{prefix}-status"),
             "settings": gr.Dataframe(value=compare_view.empty_table(compare_view.SETTINGS_HEADERS),
                                      label="Settings (those that differ first, highlighted)",
                                      elem_id=f"{prefix}-settings", **table),
             "rates": gr.Dataframe(value=compare_view.empty_table(compare_view.RATES_HEADERS),
                                   label="Rates: medians over each run's trials", elem_id=f"{prefix}-rates", **table),
             "waits": gr.Dataframe(value=compare_view.empty_table(compare_view.WAITS_HEADERS),
                                   label="Per decode step", elem_id=f"{prefix}-waits", **table)}
        k["timeline"] = gr.Plot(elem_id=f"{prefix}-lanes", show_label=False)
        return cls(k)

    @property
    def outputs(self) -> list[Any]:
        return list(self.components.values())

    def status(self, text: str) -> dict:
        """Only the summary line changes: a choice is missing or a report cannot be opened."""
        return {self.components["status"]: text}

    def show(self, a: dict[str, Any], b: dict[str, Any], label_a: str, label_b: str) -> dict:
        k = self.components
        try:
            result = compare_reports(a, b)
            return {k["status"]: compare_view.summary_md(result, plain),
                    k["settings"]: compare_view.settings_table(result), k["rates"]: compare_view.rates_table(result),
                    k["waits"]: compare_view.waits_table(result),
                    k["timeline"]: timeline.compare_timelines(a, b, label_a, label_b)}
        except Exception as exc:  # two reports that passed the checks but cannot be set side by side: say so
            return {k["status"]: f"**Cannot compare these two:** {plain(type(exc).__name__)}: {plain(exc)}"}
