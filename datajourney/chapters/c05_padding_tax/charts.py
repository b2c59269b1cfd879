"""Chapter 5's own charts (the shared helpers are in :mod:`datajourney.core.charts`)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from datajourney.core.charts import PALETTE, series_colours, subtitle

#: The chapter's series in one order, so each keeps its colour in every chart of the page: the first batch (the
#: published figures' population, also the colour of the first batch's occupancy heatmaps) and all samples.
SERIES = ("first batch", "all samples")
COLOURS = series_colours(list(SERIES), list(SERIES))


def length_histogram(lengths: pd.Series, *, context: int, batch_size: int, title: str) -> go.Figure:
    """Token lengths of the two populations in two panels with the same bins: all samples (top) and
    the first batch (bottom, its own count axis so that a batch of 32 stays readable next to
    thousands of samples)."""

    a = np.asarray(lengths)
    first = a[:batch_size]
    size = max(1, int(np.ceil((a.max() + 1) / 60)))
    bins = dict(start=0, end=int(a.max()) + size, size=size)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=[f"all samples ({len(a):,})", f"first batch ({len(first)} samples)"])
    for row, (vals, name) in enumerate(((a, "all samples"), (first, "first batch")), start=1):
        fig.add_histogram(x=vals, xbins=bins, name=name, marker_color=COLOURS[name], showlegend=False,
                          hovertemplate=f"%{{x}} tokens: %{{y}} samples<extra>{name}</extra>", row=row, col=1)
        fig.add_vline(x=float(np.mean(vals)), line=dict(dash="dot", color="#555555"), row=row, col=1,
                      annotation_text=f"mean {np.mean(vals):,.0f}", annotation_position="top right")
    fig.update_layout(title=title, height=520, bargap=0.05)
    fig.update_xaxes(title_text=f"tokens per sample (a row of the context holds {context:,})", row=2, col=1)
    fig.update_yaxes(title_text="samples", row=1, col=1)
    fig.update_yaxes(title_text="samples", row=2, col=1)
    return fig


def occupancy_heatmap(fraction_real, *, bin_width: int, title: str, row_len: int | None = None) -> go.Figure:
    """One batch as rows × positions: share of real tokens in each group of ``bin_width`` positions.
    The hover names the exact positions of each group (the last group may be shorter)."""

    import numpy as np

    z = np.asarray(fraction_real)
    n = row_len or z.shape[1] * bin_width
    x = [i * bin_width for i in range(z.shape[1])]
    ranges = [f"{c * bin_width:,}–{min((c + 1) * bin_width, n) - 1:,}" if bin_width > 1 else f"{c:,}"
              for c in range(math.ceil(n / bin_width))][:z.shape[1]]
    fig = go.Figure(go.Heatmap(
        z=z, x=x, y=list(range(z.shape[0])), zmin=0, zmax=1,
        customdata=np.broadcast_to(np.array(ranges, dtype=object), z.shape),
        colorscale=[[0, "#F0F0F0"], [1, COLOURS["first batch"]]], colorbar=dict(title="real", tickformat=".0%"),
        hovertemplate="row %{y}, positions %{customdata}<br>real tokens %{z:.0%}<extra></extra>"))
    fig.update_layout(title=title, height=420)
    fig.update_xaxes(title_text="position in row (tokens)")
    fig.update_yaxes(title_text="row in batch", autorange="reversed")
    return fig


def mask_heatmap(mask, doc_ids, *, title: str) -> go.Figure:
    """An attention mask (query × key): allowed pairs coloured by document, padding grey,
    masked-out pairs blank."""

    m = np.asarray(mask, dtype=float)
    d = np.asarray(doc_ids)
    n = int(d.max()) + 1
    z = np.where(m > 0, d[:, None] + 1.0, np.nan)
    # one flat colour band per value: 0 = padding, k + 1 = document k
    scale = []
    for k in range(n + 1):
        colour = "#BBBBBB" if k == 0 else PALETTE[(k - 1) % len(PALETTE)]
        scale += [[k / (n + 1), colour], [(k + 1) / (n + 1), colour]]
    label = np.where(d[:, None] >= 0, np.char.add("document ", d[:, None].astype(str)), "padding")
    fig = go.Figure(go.Heatmap(z=z, zmin=-0.5, zmax=n + 0.5, colorscale=scale, showscale=False,
                               customdata=np.broadcast_to(label, m.shape),
                               hovertemplate="query %{y} → key %{x}: allowed<br>%{customdata}<extra></extra>"))
    fig.update_layout(title=title, height=460, width=520)
    fig.update_xaxes(title_text="key position (attended to)")
    fig.update_yaxes(title_text="query position", autorange="reversed")
    return fig


def _share_label(v: float, digits: int | None = None) -> str:
    """A percentage (0–100) with as few digits as read well, but never '100%' below 100 nor '0%' above 0."""
    d = digits if digits is not None else (1 if v < 10 else 0)
    while d < 6 and ((v < 100 and round(v, d) >= 100) or (v > 0 and round(v, d) == 0)):
        d += 1
    return f"{v:.{d}f}%"


def efficiency_bars(df: pd.DataFrame, *, title: str) -> go.Figure:
    """Efficiency of each layout in each population (``layout``, ``population``, ``efficiency`` in %; the
    populations named as in :data:`SERIES`, which gives their colours).

    Exact counts, not measurements: no error bars."""
    fig = go.Figure()
    pops = list(dict.fromkeys(df["population"]))
    colour = series_colours(pops, list(SERIES))
    for pop, g in df.groupby("population", sort=False):
        fig.add_bar(x=g["layout"], y=g["efficiency"], name=str(pop), marker_color=colour[pop],
                    text=[_share_label(v) for v in g["efficiency"]], textposition="outside", cliponaxis=False,
                    constraintext="none",   # a narrow bar never cuts its label ("99.99%" read "99.9")
                    customdata=[_share_label(v, digits=2) for v in g["efficiency"]],
                    hovertemplate=f"<b>{pop}</b><br>%{{x}}: %{{customdata}} of positions are real tokens"
                                  "<br>(exact count, no spread)<extra></extra>")
    fig.update_layout(title=title, barmode="group", legend_title_text="population")
    fig.update_xaxes(title_text="layout", type="category")
    fig.update_yaxes(title_text="real tokens (% of positions)", range=[0, 110], rangemode="tozero")
    return fig


def cost_dots(df: pd.DataFrame, *, title: str, source: str) -> go.Figure:
    """Time for all samples per layout: a dot at the estimate and a bar from min to max
    (``layout``, ``seconds``, ``low``, ``high``, ``how``), on a log axis (dots, not bars, so the
    log scale does not distort lengths); in the colour of all samples, the run it comes from (``source``) in
    the hover."""
    fig = go.Figure(go.Scatter(
        x=df["seconds"], y=df["layout"], mode="markers", marker=dict(size=11, color=COLOURS["all samples"]),
        name="all samples",
        error_x=dict(type="data", symmetric=False, array=df["high"] - df["seconds"],
                     arrayminus=df["seconds"] - df["low"]),
        customdata=list(zip(df["low"], df["high"], df["how"], strict=True)),
        hovertemplate=("<b>%{y}</b><br>%{x:,.3~r} s for all samples<br>bar: min–max %{customdata[0]:,.3~r} – "
                       "%{customdata[1]:,.3~r} s<br>%{customdata[2]}<extra>" + source + "</extra>")))
    fig.update_layout(title=subtitle(title, "bars: min–max"), height=120 + 50 * len(df))
    fig.update_xaxes(title_text="time for all samples (s, log scale)", type="log")
    fig.update_yaxes(title_text="layout", autorange="reversed")
    return fig
