"""Chapter 8's charts: one name and one colour for each pool and each loader in every chart of the page
(the shared helpers are in :mod:`datajourney.core.charts`)."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from datajourney.core import charts

#: The two pools, named once for every chart of the chapter, threads first (and so in the first colour).
POOLS = {"thread": "threads (ThreadPoolExecutor)", "process": "processes (ProcessPoolExecutor)"}
#: The pools' own class names, as the tables of the page give them, to the same names.
_POOL_NAMES = {"ThreadPoolExecutor": POOLS["thread"], "ProcessPoolExecutor": POOLS["process"], **POOLS}
#: The share of a count's slot left empty between neighbouring counts' groups of markers.
LOADER_GAP = 0.3


def _pools(lines: pd.DataFrame) -> pd.DataFrame:
    return lines.assign(executor=lines["executor"].map(lambda e: _POOL_NAMES.get(e, e)))


def primitive_chart(lines: pd.DataFrame) -> go.Figure:
    """Images/s of decode + resize + batch by pool size, one panel per decoder (``page.primitive_lines``)."""
    return charts.lines_facets(_pools(lines), x="concurrency", color="executor", facet="decoder",
                               order=list(POOLS.values()), title="Decode + resize + batch: images/s by pool size",
                               xaxis="threads or processes (log scale)", yaxis="images/s", unit="img/s",
                               log_x=True, y_format=",.0f")


def op_chart(lines: pd.DataFrame, decoder: str) -> go.Figure:
    """Milliseconds per image of each operation by pool size, one panel per operation (``page.op_lines``);
    ``decoder``: the decoder's name as the page gives it ("Pillow")."""
    return charts.lines_facets(_pools(lines), x="concurrency", color="executor", facet="op", order=list(POOLS.values()),
                               title=f"{decoder}: time per image of each operation",
                               xaxis="threads or processes (log scale)", yaxis="ms per image", unit="ms", log_x=True)


def loader_chart(lines: pd.DataFrame) -> go.Figure:
    """Images/s of every loader by workers or threads (``page.loader_lines``), on an axis of the counts measured
    (one category each): loaders measured at the same count are drawn as a group of markers around it, each at its
    own count, never shifted along a numeric axis to another count."""
    counts = sorted({int(c) for c in lines["concurrency"]})
    fig = charts.lines_with_band(lines, x="concurrency", color="loader", title="Loaders from cold files: images/s",
                                 xaxis="workers or threads", yaxis="images/s", unit="img/s", log_x=False)
    for t in fig.data:
        t.x = [str(int(v)) for v in t.x]
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=[str(c) for c in counts])
    return fig.update_layout(scattermode="group", scattergap=LOADER_GAP)


def startup_chart(lines: pd.DataFrame) -> go.Figure:
    """Seconds to the first batch by workers, one line per start method, one panel per Dataset size
    (``page.startup_lines``; one run each, which the axis says)."""
    fig = charts.lines_facets(lines, x="workers", color="start_method", facet="dataset",
                              order=["fork", "forkserver", "spawn"], title="DataLoader: time to the first batch",
                              xaxis="workers", yaxis="seconds to the first batch", unit="s", y_format=",.2f")
    return charts.count_axis(fig, "x")
