"""Chapter 10's own charts (the shared helpers are in :mod:`datajourney.core.charts`)."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from datajourney.core import charts


# -- chapter 10 --
def heatmap_pair(df: pd.DataFrame, *, value: str, facet: str, title: str, unit: str, scale: float = 1.0,
                 names: dict | None = None) -> go.Figure:
    """One heatmap per ``facet`` value over sequence length (y) × batch size (x), the cell text the
    value (mean over runs) in ``unit``; one colour scale shared by the panels."""
    facets = list(dict.fromkeys(df[facet]))
    fig = charts.facet_grid(len(facets), [str((names or {}).get(f, f)) for f in facets], True)
    zmax = float(df[value].max() * scale)
    for ci, fv in enumerate(facets, start=1):
        g = df[df[facet] == fv].pivot(index="seq", columns="batch", values=value) * scale
        fig.add_heatmap(z=g.to_numpy(), x=[str(c) for c in g.columns], y=[str(i) for i in g.index],
                        zmin=0, zmax=zmax, coloraxis="coloraxis", text=g.round(3).to_numpy(),
                        texttemplate="%{text:,.3~r}",
                        hovertemplate=f"batch %{{x}}, sequence %{{y}}: %{{z:,.3~r}} {unit}<extra></extra>",
                        row=1, col=ci)
        fig.update_xaxes(title_text="batch size", type="category", row=1, col=ci)
    fig.update_yaxes(title_text="sequence length", type="category", row=1, col=1)
    fig.update_layout(title=title, coloraxis=dict(colorscale="Blues", colorbar=dict(title=unit)))
    return fig
