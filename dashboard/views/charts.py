"""The look every chart of the page shares (the run's charts, the load view's, the timeline, the audit's): its
colours, the `figure` wrapper, placeholders, titles wrapped for a phone, numbers written out. Figures are built from
plain data (lists and dicts), so they can be tested without a browser.

Figures are written as plain dicts and wrapped once. Plotly's per-property validation costs 10-100 ms per figure,
and live charts are rebuilt many times while a run streams, in the server process, which shares the machine's cores
with the engine process timing the decode loop; so it is off by default (`VALIDATE`), and the tests build every
figure with it on.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

# The A/A control gets a hue of its own: a lighter green than pipelined's was all but the same tint under a span.
# Okabe-Ito's colour-blind-safe palette; naive and pipelined as on the timeline (vermillion, blue), and each trace
# also carries its name in the legend.
COLORS = {"naive": "#D55E00", "pipelined": "#0072B2", "pipelined-again": "#F0E442", "no-check": "#000000",
          "hf": "#009E73", "hf-deferred": "#CC79A7"}
DASHES = {"pipelined-again": "dash"}
HEIGHT = 360
MAX_POINTS = 20_000
VALIDATE = False
_TEMPLATE = pio.templates["plotly_white"].to_plotly_json()

# The legend sits at the bottom of the figure, under the x axis title; the title has the top margin to itself.
MARGIN = {"l": 55, "r": 55, "t": 50, "b": 10}
LEGEND = {"orientation": "h", "yref": "container", "y": 0.0, "yanchor": "bottom", "x": 0.0, "xanchor": "left",
          "itemsizing": "constant"}
MESSAGE_WIDTH = 65  # characters per line of a placeholder's message
TITLE_WIDTH = 48  # characters per line of a chart title: what fits a phone's chart at the page's 12 px there
SUBTITLE_WIDTH = 62
TITLE_LINE_PX = 18

Spec = dict[str, Any]


def color(name: str) -> str:
    return COLORS.get(name, "#7f7f7f")


def dash(name: str) -> str:
    return DASHES.get(name, "solid")


def figure(data: list[Spec], layout: Spec, title: str, height: int = HEIGHT, subtitle: str | None = None) -> go.Figure:
    """Wrap trace and layout dicts, with the page's common look."""
    # Plotly does not wrap titles: a long one is broken onto lines that fit a phone's chart (the page's CSS sets
    # the font smaller there), and the top margin grows by a line for each.
    heading = {"text": wrap(title, TITLE_WIDTH), "font": {"size": 15}, "yref": "container", "y": 1.0,
               "yanchor": "top", "pad": {"t": 12}}
    extra_lines = heading["text"].count("<br>")
    if subtitle:
        heading["subtitle"] = {"text": wrap(subtitle, SUBTITLE_WIDTH), "font": {"size": 12, "color": "#555"}}
        extra_lines += heading["subtitle"]["text"].count("<br>")
    # Validation drops empty lists; dropping them here keeps unvalidated figures the same.
    given = {key: value for key, value in layout.items() if value != []}
    margin = dict(given.pop("margin", MARGIN))
    margin["t"] += TITLE_LINE_PX * extra_lines
    base = {"title": heading, "height": height + TITLE_LINE_PX * extra_lines, "template": _TEMPLATE,
            "margin": margin, "legend": LEGEND}
    return go.Figure(data=data, layout={**base, **given}, _validate=VALIDATE)


def empty_figure(title: str, message: str) -> go.Figure:
    """A placeholder that says what will appear, or why nothing can."""
    note = {"text": wrap(message), "showarrow": False, "x": 0.5, "y": 0.5, "xref": "paper", "yref": "paper",
            "font": {"size": 13, "color": "#666"}}
    return figure([], {"annotations": [note], "xaxis": {"visible": False}, "yaxis": {"visible": False}}, title)


def wrap(message: str, width: int = MESSAGE_WIDTH) -> str:
    """The message broken onto lines of at most `width` characters at word boundaries, joined by <br>."""
    paragraphs = message.split("<br>")
    lines = [line for p in paragraphs for line in textwrap.wrap(p, width, break_long_words=False,
                                                                  break_on_hyphens=False) or [""]]
    return "<br>".join(lines)


def line(x: list[Any], y: list[Any], name: str, line_color: str, dash: str = "solid", width: float = 2,
         **extra: Any) -> Spec:
    return {"type": "scatter", "mode": "lines", "x": x, "y": y, "name": name,
            "line": {"color": line_color, "dash": dash, "width": width}, **extra}


def zero_based(values: Sequence[float], min_top: float) -> list[float]:
    """[0, top]: the values with 10% headroom, and never less than min_top, so a constant is a flat line."""
    return [0.0, max(max(values) * 1.1, min_top)]


def readable(value: float, digits: int = 3) -> str:
    """`value` to `digits` significant digits (whole numbers from 10**digits on), written out: 1,352 and 0.0123,
    never 1.35e+03."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
