"""Chapter 7's AU chart, drawn where its bars meet their axis.

:func:`datajourney.core.charts.au_and_ceiling` names its two threshold lines in legend entries longer
than the book's legend rule allows beside the plot (``charts._LEGEND_CHARS``), so the legend moves below
the plot; plotly.js then lays the plot out a second time for the legend's height and leaves the bar layer
where the first layout put it, about 18 px (9 points) above the axis. Short names keep the legend beside
the plot and the bars on their values (measured in a headless browser: with the long names every bar top
sat 9.4 points above its value, with the short ones on it). The lasting fix belongs in the core chart."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from datajourney.core import charts


def au_and_ceiling(summary: pd.DataFrame, *, title: str, au_rule: float = 0.90, keep_up: float = 0.95) -> go.Figure:
    """The core chart with its threshold lines named in at most ``charts._LEGEND_CHARS`` characters."""
    fig = charts.au_and_ceiling(summary, title=title, au_rule=au_rule, keep_up=keep_up)
    short = {"AU rule": f"AU rule: {100 * au_rule:.0f}%", "keeping up": f"keep-up: {100 * keep_up:.0f}% of ceiling"}
    for tr in fig.data:
        if tr.type == "scatter" and tr.name:
            for head, name in short.items():
                if tr.name.startswith(head):
                    tr.name = name
    return fig
