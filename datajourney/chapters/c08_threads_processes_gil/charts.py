"""Chapter 8's charts: one name and one colour for each pool and each loader in every chart of the page
(the shared helpers are in :mod:`datajourney.core.charts`).

The page draws more series than the palette has colours, so a colour comes back, never in the next chart: the
pools take the first two colours (sections 1 and 2), the loaders of section 3 the other five (one per kind of
loader, its decoder told by the line's dash and marker), the Dataset sizes of section 4 the first two again, and
the process groups of section 5's epoch three of the loaders' (two charts away)."""
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
#: Each kind of loader's colour (the five the pools leave), in every chart of the page.
LOADER_COLOURS = {"DataLoader": "#D55E00", "SPDL pipeline": "#009E73", "SPDL pipeline, batch decode": "#CC79A7",
                  "thread pool": "#56B4E9", "GPU decode (nvJPEG)": "#F0E442"}
#: Each decoder (and the SPDL pipeline's variant without a collate copy) as a line's dash and marker.
DECODER_STYLE = {"spdl.io": ("solid", "circle"), "Pillow": ("dot", "diamond"),
                 "Pillow, no collate copy": ("dashdot", "square")}
#: The epoch's process groups: colours of the loaders' (two charts before; the Dataset sizes sit between).
EPOCH_COLOURS = {"all processes": "#009E73", "each worker (mean)": "#CC79A7", "main process": "#56B4E9"}
#: The start methods in the order a reader meets them (fork is the default on Linux).
START_METHODS = ["fork", "forkserver", "spawn"]


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
    """Images/s of every loader by workers or threads (``page.loader_lines``: a series per ``loader``, named
    "decoder · kind"), on an axis of the counts measured (one category each): loaders measured at the same count are
    drawn as a group of markers around it, each at its own count, never shifted along a numeric axis to another
    count. A kind of loader keeps one colour (:data:`LOADER_COLOURS`), its decoder the dash and marker."""
    counts = sorted({int(c) for c in lines["concurrency"]})
    fig = charts.lines_with_band(lines, x="concurrency", color="loader", title="Loaders from cold files: images/s",
                                 xaxis="workers or threads", yaxis="images/s", unit="img/s", log_x=False)
    style = lines.drop_duplicates("loader").set_index("loader")
    for t in fig.data:
        t.x = [str(int(v)) for v in t.x]
        kind, setting = style.loc[t.name, "kind"], style.loc[t.name, "setting"]
        dash, symbol = DECODER_STYLE.get(setting, ("solid", "circle"))
        t.line.color, t.line.dash, t.marker.symbol = LOADER_COLOURS.get(kind, t.line.color), dash, symbol
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=[str(c) for c in counts])
    return fig.update_layout(scattermode="group", scattergap=LOADER_GAP, legend_title_text="decoder · loader")


def startup_chart(lines: pd.DataFrame) -> go.Figure:
    """Seconds to the first batch by start method, a bar per Dataset size, one panel per worker count
    (``page.startup_lines``; one run each, which the axis says)."""
    lines = lines.assign(order=lines["start method"].map(
        lambda m: START_METHODS.index(m) if m in START_METHODS else len(START_METHODS))).sort_values(
        ["order", "paths"]).drop(columns="order")
    sizes = list(dict.fromkeys(lines.sort_values("paths")["Dataset"]))
    return charts.bars_facets(lines, x="start method", color="Dataset", facet="DataLoader workers",
                              title="DataLoader: time to the first batch", xaxis="start method",
                              yaxis="seconds to the first batch", unit="s", order=sizes)
