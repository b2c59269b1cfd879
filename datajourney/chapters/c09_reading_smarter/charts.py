"""Chapter 9's own charts (the shared helpers are in :mod:`datajourney.core.charts`)."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from datajourney.core import charts
from datajourney.core.charts import PALETTE


def hbars(rows: pd.DataFrame, *, title: str, xaxis: str, unit: str, line: float | None = None,
          line_label: str = "", log_x: bool | str = "auto", leave_out=()) -> go.Figure:
    """Horizontal bars (long labels stay readable) of ``rows`` (``label``, ``mean``, ``min``, ``max``, ``n``),
    largest on top, min–max bars where a row has :data:`MIN_RUNS_FOR_BARS` runs or more; ``line``: a
    dashed reference value.

    ``log_x="auto"`` draws a log axis when the values span more than :data:`LOG_SPAN` (one fast path would
    make every other a sliver); on a log axis each row is a dot with its range, not a bar, because a bar's
    length from an arbitrary floor means nothing. ``leave_out``: labels not drawn, each named with its
    value under the title (for one value off every other's scale)."""
    from datajourney.core.units import num

    gone = rows[rows["label"].isin(list(leave_out))]
    r = rows[~rows["label"].isin(list(leave_out))].sort_values("mean")
    values = [v for v in r["mean"] if v > 0]
    log = bool(values) and (max(values) / min(values) > charts.LOG_SPAN if log_x == "auto" else bool(log_x))
    n = r["n"] if "n" in r else None
    spread = [charts.runs_text(a, b, k, unit, "min–max") for a, b, k in
              zip(r["min"], r["max"], n if n is not None else [None] * len(r), strict=True)]
    err = charts.range_bars(r["mean"], r["min"], r["max"], n)
    hover = f"<b>%{{y}}</b><br>mean %{{x:,.3~r}} {unit}<br>min–max: %{{customdata}}<extra></extra>"
    if log:
        fig = go.Figure(go.Scatter(y=r["label"], x=r["mean"], mode="markers", marker=dict(size=11, color=PALETTE[0]),
                                   error_x=err, customdata=spread, hovertemplate=hover))
    else:
        fig = go.Figure(go.Bar(y=r["label"], x=r["mean"], orientation="h", marker_color=PALETTE[0], error_x=err,
                               customdata=spread, hovertemplate=hover))
    if line is not None:
        fig.add_vline(x=line, line=dict(dash="dash", color="#555555"), annotation_text=line_label,
                      annotation_position="top")
    notes = [f"not drawn: {g['label']}, {num(g['mean'], unit)}" for _, g in gone.iterrows()]
    fig.update_layout(title=charts.subtitle(title, charts.bars_label(n, "min–max"), *notes), showlegend=False,
                      height=max(260, 80 + 34 * len(r)))
    fig.update_xaxes(title_text=f"{xaxis} (log scale)" if log else xaxis, type="log" if log else "linear",
                     **({} if log else {"rangemode": "tozero"}))
    fig.update_yaxes(type="category")
    return fig
