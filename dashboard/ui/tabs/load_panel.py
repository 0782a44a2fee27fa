"""A load report on the page: what it shows in sentences, the contestants table of a point, the slots picture, the
sweep's curves and table, each trial's throughput, the CLI's text and the command that repeats it. The Under load tab
shows its run's report here, and Replay a load report it opens: both from the report dict alone
(dashboard.views.load_view, dashboard.views.load_charts), the sentences too (core.load.words).
"""

from __future__ import annotations

import logging
from typing import Any, Self

import gradio as gr

from dashboard.views import charts, load_charts, load_view
from dashboard.views.load_view import findings_md

PANEL_OUTPUTS = ("findings", "point", "table", "slots_of", "slots_plot", "sweep_plot", "rate_plot", "sweep_table",
                 "throughput_plot", "cli_text", "command")
NOTHING_YET = "*What the run shows appears here when it finishes.*"

log = logging.getLogger(__name__)


class LoadReportPanel:
    """`components` by name: PANEL_OUTPUTS, "color_by" and "report" (a gr.State of the report shown, which the
    point, slots and colour controls redraw from)."""

    def __init__(self, components: dict[str, Any]):
        self.components = components

    @classmethod
    def build(cls, prefix: str, with_throughput: bool = True) -> Self:
        """The panel's components, ids prefixed with `prefix`; without `with_throughput` the caller draws each trial's
        throughput itself (the Under load tab, live) and "throughput_plot" is None."""
        p: dict[str, Any] = {"report": gr.State(None)}
        p["findings"] = gr.Markdown(NOTHING_YET, elem_id=f"{prefix}-findings")
        p["point"] = gr.Dropdown([], value=None, label="Point (slots B, arrival rate)", elem_id=f"{prefix}-point",
                                 interactive=True, info="the table and the slots picture show this point")
        p["table"] = gr.Dataframe(headers=list(load_view.TABLE_HEADERS), value=[], interactive=False, wrap=True,
                                  datatype="str", elem_id=f"{prefix}-table", elem_classes=["wide-table"],
                                  column_widths=load_view.TABLE_WIDTHS,
                                  label="Contestants (medians over the timed trials)")
        with gr.Row():
            p["slots_of"] = gr.CheckboxGroup([], value=[], label="Slots picture of", elem_id=f"{prefix}-slots-of")
            p["color_by"] = gr.Radio(list(load_charts.COLOR_MODES), value=load_charts.BY_CONTESTANT,
                                     label="Colour the bars by", elem_id=f"{prefix}-color-by")
        p["slots_plot"] = gr.Plot(elem_id=f"{prefix}-plot-slots", show_label=False, label="slots picture")
        with gr.Row():
            p["sweep_plot"] = gr.Plot(elem_id=f"{prefix}-plot-sweep", show_label=False, label="slots sweep")
            p["rate_plot"] = gr.Plot(elem_id=f"{prefix}-plot-rate", show_label=False, label="rate sweep")
        p["sweep_table"] = gr.Dataframe(value=[], interactive=False, wrap=True, datatype="str",
                                        elem_id=f"{prefix}-sweep", elem_classes=["wide-table"],
                                        label="The sweep: output tokens/s at each point")
        p["throughput_plot"] = gr.Plot(elem_id=f"{prefix}-plot-throughput", show_label=False,
                                       label="throughput of each trial") if with_throughput else None
        with gr.Accordion("The run as the CLI prints it", open=False):
            p["cli_text"] = gr.Textbox(lines=12, max_lines=30, interactive=False, show_label=False,
                                       elem_id=f"{prefix}-cli-text", elem_classes=["pane"], buttons=["copy"])
        p["command"] = gr.Textbox(label="Reproduce from the command line", interactive=False,
                                  elem_id=f"{prefix}-command", buttons=["copy"])
        panel = cls(p)
        panel._wire()
        return panel

    def _wire(self) -> None:
        p = self.components
        controls = [p["report"], p["point"], p["slots_of"], p["color_by"]]
        p["point"].input(self.on_point, inputs=controls, outputs=[p["table"], p["slots_of"], p["slots_plot"]],
                         api_visibility="private", show_progress="hidden")
        for control in (p["slots_of"], p["color_by"]):
            control.input(self.redraw_slots, inputs=controls, outputs=[p["slots_plot"]], api_visibility="private",
                          show_progress="hidden")

    @property
    def outputs(self) -> list[Any]:
        """What `shown` and `cleared` update: PANEL_OUTPUTS (those built), then the colour control and the report's
        state."""
        p = self.components
        return [p[name] for name in PANEL_OUTPUTS if p[name] is not None] + [p["color_by"], p["report"]]

    # ---- a report

    def shown(self, report: dict[str, Any]) -> dict[Any, Any]:
        """Every part of the panel for `report`, its sentences worded here."""
        p, said = self.components, load_view.sentences(report)
        main = load_view.section(report)["points"][0]
        chosen = load_view.default_slotted(main)
        figures = load_charts.report_figures(report, contestants=chosen)
        update = {p["report"]: report, p["findings"]: findings_md(report, said),
                  p["point"]: gr.Dropdown(choices=load_view.point_names(report), value=load_view.point_name(main)),
                  p["table"]: load_view.contestant_rows(main["contestants"]),
                  p["slots_of"]: gr.CheckboxGroup(choices=slot_choices(main), value=chosen),
                  p["color_by"]: load_charts.BY_CONTESTANT,
                  p["slots_plot"]: figures["slots"], p["sweep_plot"]: figures["sweep"], p["rate_plot"]: figures["rate"],
                  p["sweep_table"]: {"headers": load_view.sweep_headers(report), "data": load_view.sweep_rows(report)},
                  p["cli_text"]: "\n".join(said.text),
                  p["command"]: str(report.get("command") or "")}
        if p["throughput_plot"] is not None:
            update[p["throughput_plot"]] = figures["throughput"]
        return update

    def cleared(self, findings: str = NOTHING_YET) -> dict[Any, Any]:
        """The panel with no report: what a new run or another kind of report replaces."""
        p = self.components
        update = {p["report"]: None, p["findings"]: findings, p["point"]: gr.Dropdown(choices=[], value=None),
                  p["table"]: [], p["slots_of"]: gr.CheckboxGroup(choices=[], value=[]),
                  p["slots_plot"]: None, p["sweep_plot"]: None, p["rate_plot"]: None, p["sweep_table"]: [],
                  p["cli_text"]: "", p["command"]: ""}
        if p["throughput_plot"] is not None:
            update[p["throughput_plot"]] = None
        return update

    # ---- the controls

    def on_point(self, report: Any, point: Any, slots_of: Any, color_by: Any) -> tuple[Any, Any, Any]:
        """Another point chosen: its table, its loops with slots, and their slots picture."""
        if not isinstance(report, dict):
            return [], gr.CheckboxGroup(choices=[], value=[]), None
        try:
            chosen = load_view.point_named(report, point)
            names = load_view.slotted(chosen)
            keep = [name for name in (slots_of or []) if name in names] or load_view.default_slotted(chosen)
            return (load_view.contestant_rows(chosen["contestants"]),
                    gr.CheckboxGroup(choices=slot_choices(chosen), value=keep),
                    load_charts.slots_figure(chosen, keep, _color_mode(color_by)))
        except Exception:  # a report that passed the checks but breaks a chart: say so in the chart, keep the page
            log.exception("a load report's point could not be drawn")
            return [], gr.CheckboxGroup(choices=[], value=[]), _cannot_draw()

    def redraw_slots(self, report: Any, point: Any, slots_of: Any, color_by: Any) -> Any:
        if not isinstance(report, dict):
            return None
        try:
            chosen = load_view.point_named(report, point)
            return load_charts.slots_figure(chosen, list(slots_of or []), _color_mode(color_by))
        except Exception:
            log.exception("a load report's slots could not be drawn")
            return _cannot_draw()


def _cannot_draw() -> Any:
    return charts.empty_figure("Slots over decode steps", "This report's slots could not be drawn: a field it reads "
                                                          "is not what core.bench writes.")


def slot_choices(point: dict[str, Any]) -> list[tuple[str, str]]:
    return [(load_view.name(name), name) for name in load_view.slotted(point)]


def _color_mode(value: Any) -> str:
    return value if value in load_charts.COLOR_MODES else load_charts.BY_CONTESTANT
