"""The Under load tab's figures (and Replay's, for a load report), built from plain data so they can be tested
without a browser: each timed trial's throughput (live, from the `load-run` events, or from a report), the slots
picture (a bar per request over the decode steps, the steps past its stop hatched), and the sweep's curves.

They share dashboard.views.charts' look (its `figure` wrapper, placeholders and colours); dashboard.views.load_view
gives the data. Text from a report is escaped before plotly sees it (plotly reads a few HTML tags, links among them).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from core.request.load import HF_BATCH, HF_BATCH_ASYNC, NAIVE_PER_ROW
from dashboard.views import charts, load_view

COLORS = {**charts.COLORS, NAIVE_PER_ROW: "#E69F00", HF_BATCH: "#009E73", HF_BATCH_ASYNC: "#CC79A7"}
PAST_STOP_COLOR = "#9e9e9e"
PAST_STOP = "computed past a stop"
# Requests coloured one by one cycle through these (Okabe-Ito's and Tableau's, without black and grey).
REQUEST_PALETTE = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#4E79A7",
                   "#F28E2B", "#59A14F", "#B07AA1", "#9C755F", "#76B7B2", "#EDC948", "#E15759", "#FF9DA7")
BY_CONTESTANT, BY_REQUEST = "contestant", "request"
COLOR_MODES = (BY_CONTESTANT, BY_REQUEST)
SLOT_ROW_PX = 22
PANEL_EXTRA_PX = 70
PANEL_LABEL_PX = 20  # the contestant's name above its panel
MAX_SLOTS_HEIGHT = 1400
THROUGHPUT_TITLE = "Output tokens/s of each timed trial"
Spec = dict[str, Any]


def color(contestant: str) -> str:
    return COLORS.get(contestant, "#7f7f7f")


def _text(value: Any) -> str:
    return html.escape(str(value), quote=False)


# ------------------------------------------------------------------------------------------------ throughput

def throughput_figure(runs: Sequence[dict[str, Any]]) -> go.Figure:
    """Each timed trial's output tokens/s, a line per contestant over the trials in the order they ran (point by
    point); `runs` as dashboard.service.load_live keeps them, or load_view.trial_runs gives them from a report."""
    if not runs:
        return charts.empty_figure(THROUGHPUT_TITLE, "Each timed trial's output tokens/s appears here as it ends.")
    slots = {run.get("slots") for run in runs}
    rates = {run.get("rate") for run in runs}
    labels: dict[tuple[Any, ...], str] = {}
    for run in runs:
        key = (run.get("slots"), run.get("rate"), run.get("trial"))
        labels.setdefault(key, _trial_label(run, len(slots) > 1 or len(rates) > 1))
    traces = []
    for contestant in dict.fromkeys(run.get("contestant") for run in runs):
        mine = [run for run in runs if run.get("contestant") == contestant]
        x = [labels[(run.get("slots"), run.get("rate"), run.get("trial"))] for run in mine]
        traces.append({"type": "scatter", "mode": "lines+markers", "name": _text(load_view.name(str(contestant))),
                       "x": x, "y": [run.get("tokens_per_s") for run in mine],
                       "line": {"color": color(str(contestant)), "width": 2}, "marker": {"size": 7},
                       "hovertemplate": "%{x}: %{y:,.1f} tokens/s<extra>%{fullData.name}</extra>"})
    layout = {"xaxis": {"type": "category", "categoryorder": "array", "categoryarray": list(labels.values()),
                        "title": {"text": "timed trial"}},
              "yaxis": {"title": {"text": "output tokens/s"}, "rangemode": "tozero"}}
    return charts.figure(traces, layout, THROUGHPUT_TITLE, height=300,
                         subtitle="every request's tokens over the trial's wall time")


def _trial_label(run: dict[str, Any], with_point: bool) -> str:
    trial = run.get("trial")
    label = f"trial {trial + 1}" if isinstance(trial, int) else "trial"
    if not with_point:
        return label
    return f"{load_view.point_name({'slots': run.get('slots'), 'rate': run.get('rate') or 0})} · {label}"


# ------------------------------------------------------------------------------------------------ slots

def slots_figure(point: dict[str, Any], contestants: Sequence[str], color_by: str = BY_CONTESTANT) -> go.Figure:
    """The slots picture of one point: a panel per contestant (stacked, one decode-step axis), a row per slot, a bar
    per request from its first decode step to its last, and the steps computed past its stop (until the host freed the
    slot) hatched in grey. Colours by contestant, or by request (`color_by`)."""
    title = f"Slots over decode steps at {load_view.point_name(point)}"
    chosen = [c for c in contestants if c in load_view.slotted(point)]
    if not chosen:
        return charts.empty_figure(title, "Choose a loop that runs on slots (naive, pipelined or the ceiling): "
                                          "transformers' batching does not say which slot a request held.")
    slot_count = max(1, int(point.get("slots") or 1))
    panel_px = slot_count * SLOT_ROW_PX + PANEL_EXTRA_PX
    gap = 0.08 if len(chosen) > 1 else 0.0
    height = min(MAX_SLOTS_HEIGHT, 60 + panel_px * len(chosen))
    traces: list[Spec] = []
    layout: Spec = {"barmode": "overlay", "bargap": 0.25, "uniformtext": {"mode": "hide", "minsize": 9},
                    "annotations": [], "hovermode": "closest",
                    "margin": {**charts.MARGIN, "t": charts.MARGIN["t"] + PANEL_LABEL_PX}}
    share = (1.0 - gap * (len(chosen) - 1)) / len(chosen)
    for index, contestant in enumerate(chosen):
        axis = "" if index == 0 else str(index + 1)
        top = 1.0 - index * (share + gap)
        bars = load_view.slot_bars(point["contestants"][contestant])
        traces += _request_bars(bars, contestant, axis, color_by, legend=index == 0)
        traces += _past_stop_bars(bars, contestant, axis, legend=not any(t["name"] == PAST_STOP for t in traces))
        layout[f"yaxis{axis}"] = {"domain": [max(0.0, top - share), top], "title": {"text": "slot"},
                                  "range": [slot_count - 0.5, -0.5], "tickmode": "linear" if slot_count <= 16 else
                                  "auto", "tick0": 0, "dtick": 1, "zeroline": False, "anchor": f"x{axis}"}
        layout[f"xaxis{axis}"] = {"matches": "x" if index else None, "anchor": f"y{axis}", "rangemode": "tozero",
                                  "showticklabels": index == len(chosen) - 1,
                                  "title": {"text": "decode step"} if index == len(chosen) - 1 else {}}
        layout["annotations"].append({"text": f"<b>{_text(load_view.name(contestant))}</b>", "showarrow": False,
                                      "xref": "paper", "yref": "paper", "x": 0.0, "xanchor": "left", "y": top,
                                      "yanchor": "bottom", "font": {"size": 12}})
    layout = {key: ({k: v for k, v in value.items() if v is not None} if isinstance(value, dict) else value)
              for key, value in layout.items()}
    return charts.figure(traces, layout, title, height=height,
                         subtitle="a bar per request, its first decode step to its last; hatched: steps computed past "
                                  "its stop, until the host freed its slot")


def _request_bars(bars: list[dict[str, Any]], contestant: str, axis: str, color_by: str, legend: bool) -> list[Spec]:
    if not bars:
        return []
    by_request = color_by == BY_REQUEST
    colors = [REQUEST_PALETTE[int(bar["request"] or 0) % len(REQUEST_PALETTE)] for bar in bars] if by_request \
        else color(contestant)
    hover = [_bar_hover(bar, contestant) for bar in bars]
    return [{"type": "bar", "orientation": "h", "name": "request (its decode steps)" if by_request else
             _text(load_view.name(contestant)), "legendgroup": "requests" if by_request else contestant,
             "showlegend": legend or not by_request,
             "y": [bar["slot"] for bar in bars], "base": [bar["first"] for bar in bars],
             "x": [bar["last"] - bar["first"] + 1 for bar in bars], "text": [str(bar["request"]) for bar in bars],
             "textposition": "inside", "insidetextanchor": "middle", "textfont": {"color": "white", "size": 10},
             "marker": {"color": colors, "line": {"width": 0.5, "color": "white"}}, "width": 0.8,
             "hovertext": hover, "hoverinfo": "text", "xaxis": f"x{axis}", "yaxis": f"y{axis}"}]


def _past_stop_bars(bars: list[dict[str, Any]], contestant: str, axis: str, legend: bool) -> list[Spec]:
    past = [bar for bar in bars if bar["released"] > bar["last"]]
    if not past:
        return []
    hover = [f"request {_text(bar['request'])} ({_text(load_view.name(contestant))}): "
             f"{bar['released'] - bar['last']:g} step(s) computed past its stop, in slot {_text(bar['slot'])}"
             for bar in past]
    return [{"type": "bar", "orientation": "h", "name": PAST_STOP, "legendgroup": "past",
             "showlegend": legend, "y": [bar["slot"] for bar in past], "base": [bar["last"] + 1 for bar in past],
             "x": [bar["released"] - bar["last"] for bar in past],
             "marker": {"color": "#e0e0e0", "line": {"width": 0.5, "color": PAST_STOP_COLOR},
                        "pattern": {"shape": "/", "fgcolor": PAST_STOP_COLOR, "size": 6, "solidity": 0.4}},
             "width": 0.8, "hovertext": hover, "hoverinfo": "text", "xaxis": f"x{axis}", "yaxis": f"y{axis}"}]


def _bar_hover(bar: dict[str, Any], contestant: str) -> str:
    lines = [f"request {_text(bar['request'])} ({_text(load_view.name(contestant))}), slot {_text(bar['slot'])}",
             f"decode steps {bar['first']:g}–{bar['last']:g}: {_text(bar['tokens'])} tokens"]
    times = [(label, bar.get(key)) for label, key in (("arrived", "arrival_ms"), ("first token", "first_token_ms"),
                                                       ("last token", "finished_ms"))]
    said = ", ".join(f"{label} {value:,.1f} ms" for label, value in times if isinstance(value, int | float))
    if said:
        lines.append(said)
    return "<br>".join(lines)


# ------------------------------------------------------------------------------------------------ sweep

SWEEP_TITLE = "Output tokens/s against slots B"
RATE_TITLE = "TTFT p99 against the arrival rate"


def sweep_figure(series: dict[str, Any]) -> go.Figure:
    """Output tokens/s against B, per contestant (load_view.sweep_series)."""
    curves = series["tokens_per_s_by_slots"]
    if not curves:
        return charts.empty_figure(SWEEP_TITLE, "Give a slots sweep (as 1,2,4,8) to see how each loop's throughput "
                                                "grows with the batch.")
    ticks = sorted({x for curve in curves.values() for x in curve["x"]})
    rate = series["main"]["rate"]
    subtitle = "every request arriving at once" if not rate else f"requests arriving at {rate:g} a second"
    return charts.figure(_curve_traces(curves, "B=%{x}: %{y:,.1f} tokens/s"),
                         {"xaxis": {"title": {"text": "slots B (requests decoded together)"}, "type": "log",
                                    "tickvals": ticks, "ticktext": [str(t) for t in ticks]},
                          "yaxis": {"title": {"text": "output tokens/s"}, "rangemode": "tozero"}},
                         SWEEP_TITLE, height=320, subtitle=subtitle)


def rate_figure(series: dict[str, Any]) -> go.Figure:
    """TTFT p99 against the arrival rate, per contestant that sees its tokens' times (load_view.sweep_series)."""
    curves = series["ttft_p99_by_rate"]
    if not curves:
        return charts.empty_figure(RATE_TITLE, "Give a rate sweep (as 0,2,8 requests a second) to see how long the "
                                               "first token takes as requests arrive faster.")
    return charts.figure(_curve_traces(curves, "%{x:g} requests/s: %{y:,.1f} ms"),
                         {"xaxis": {"title": {"text": "arrival rate, requests/s (0: all at once)"}},
                          "yaxis": {"title": {"text": "time to first token, p99, ms"}, "rangemode": "tozero"}},
                         RATE_TITLE, height=320, subtitle=f"at B={series['main']['slots']}")


def _curve_traces(curves: dict[str, dict[str, list[float]]], hover: str) -> list[Spec]:
    return [{"type": "scatter", "mode": "lines+markers", "name": _text(load_view.name(contestant)), "x": curve["x"],
             "y": curve["y"], "line": {"color": color(contestant), "width": 2}, "marker": {"size": 8},
             "hovertemplate": f"{hover}<extra>%{{fullData.name}}</extra>"} for contestant, curve in curves.items()]


def report_figures(report: dict[str, Any], point: str | None = None, contestants: Sequence[str] | None = None,
                   color_by: str = BY_CONTESTANT) -> dict[str, go.Figure]:
    """Every figure of a load report by name ("throughput", "slots", "sweep", "rate"): the slots picture of the point
    called `point` (the main one by default), of `contestants` (by default the naive and the pipelined loop)."""
    chosen = load_view.point_named(report, point)
    series = load_view.sweep_series(report)
    shown = list(contestants) if contestants is not None else load_view.default_slotted(chosen)
    return {"throughput": throughput_figure(load_view.trial_runs(report)),
            "slots": slots_figure(chosen, shown, color_by), "sweep": sweep_figure(series), "rate": rate_figure(series)}
