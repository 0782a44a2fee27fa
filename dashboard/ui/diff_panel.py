"""Two reports side by side (core.report.diff.diff_reports, drawn by dashboard.views.diff_tables and
dashboard.views.timeline): a summary line, the settings, the rates and the per-step waits as tables, and both timelines
on one time axis. The History section diffs two of a visitor's runs with it, Replay two report files."""

from __future__ import annotations

import logging
from typing import Any, Self

import gradio as gr

from core.report.diff import diff_reports
from dashboard.views import diff_tables, timeline
from dashboard.views.report_text import plain

COMPONENTS = ("status", "settings", "rates", "waits", "timeline")
CANNOT_DIFF = "both passed the format checks, but a field the diff reads is not what core.bench writes"
log = logging.getLogger(__name__)


class DiffPanel:
    """Where two reports side by side are shown; `components` by name (COMPONENTS)."""

    def __init__(self, components: dict[str, Any]):
        self.components = components

    @classmethod
    def build(cls, prefix: str) -> Self:
        """The components, their elem_ids starting with `prefix`."""
        table = {"interactive": False, "wrap": True, "datatype": "str"}
        k = {"status": gr.Markdown(elem_id=f"{prefix}-status"),
             "settings": gr.Dataframe(value=diff_tables.empty_table(diff_tables.SETTINGS_HEADERS),
                                      label="Settings (those that differ first, highlighted)",
                                      elem_id=f"{prefix}-settings", **table),
             "rates": gr.Dataframe(value=diff_tables.empty_table(diff_tables.RATES_HEADERS),
                                   label="Rates: medians over each run's trials", elem_id=f"{prefix}-rates", **table),
             "waits": gr.Dataframe(value=diff_tables.empty_table(diff_tables.WAITS_HEADERS),
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
            result = diff_reports(a, b)
            return {k["status"]: diff_tables.summary_md(result, plain),
                    k["settings"]: diff_tables.settings_table(result), k["rates"]: diff_tables.rates_table(result),
                    k["waits"]: diff_tables.waits_table(result),
                    k["timeline"]: timeline.diff_timelines(a, b, label_a, label_b)}
        except Exception:  # two reports that passed the checks but cannot be set side by side: say so in words
            log.exception("two reports that passed the checks could not be diffed")
            return {k["status"]: f"**Cannot diff these two:** {plain(CANNOT_DIFF)}."}
