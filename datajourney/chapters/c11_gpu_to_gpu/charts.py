"""Chapter 11's own charts (the shared helpers are in :mod:`datajourney.core.charts`)."""
from __future__ import annotations

import re

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from datajourney.core.charts import (
    PALETTE,
    bars_facets,
    lines_facets,
    lines_with_band,
    series_colours,
    size_ticks,
    subtitle,
)
from datajourney.core.units import size_label

# -- chapter 11 --
#: The page's series in one order, which gives each its colour in every chart (``series_colours``): the phases of
#: a step, the transport options (a legend name "setting · option" takes its option's colour), the scaling
#: curve's own lines. More series than colours: the scaling curve's lines take the phases' colours again, and
#: neither chart stands next to the other.
SERIES = ("forward", "optimizer", "backward (compute)", "waiting for the all-reduce (exposed NCCL)",
          "direct", "P2P off", "P2P and SHM off", "one GPU, no DDP", "one-bucket DDP", "best option")
COLOURS = series_colours(list(SERIES), list(SERIES))
#: How the traces of one option tell their settings apart (GPUs, collective): line dashes, bar patterns.
DASHES, PATTERNS = ("solid", "dash", "dot", "dashdot"), ("", "/", ".", "x")


def by_option(fig: go.Figure) -> go.Figure:
    """Each named trace of ``fig`` in its series' colour (:data:`SERIES`; for "setting · option", the option's),
    the settings of one option told apart by dash (lines) or pattern (bars), in the order they first appear."""
    settings: dict[str, list[str]] = {}
    for t in fig.data:
        key = (t.name or "").split(" · ")[-1]
        if key not in COLOURS:
            continue
        names = settings.setdefault(key, [])
        if t.name not in names:
            names.append(t.name)
        k = names.index(t.name)
        if t.type == "bar":
            t.marker.color = COLOURS[key]
            t.marker.pattern.shape = PATTERNS[k % len(PATTERNS)]
        else:
            t.line.color = COLOURS[key]
            t.line.dash = DASHES[k % len(DASHES)]
    return fig


def ladder_chart(lad: pd.DataFrame) -> go.Figure:
    """Steps/s per GPU of every rung (``page.ladder_frame``): bars at the mean over the timed windows, error
    bars from their slowest to their fastest window, said on the axis by the code that draws them; coloured by
    option (:func:`by_option`)."""
    return by_option(bars_facets(lad, x="step", color="label", facet=None, unit="steps/s",
                                 title="Steps/s per GPU or process", xaxis="rung",
                                 yaxis="steps/s per GPU (mean over the timed windows)", per="timed windows"))


def topology_matrix(topo: pd.DataFrame, *, title: str, legend: dict) -> go.Figure:
    """``nvidia-smi topo -m`` as a grid: one cell per device pair, coloured by link kind, labelled
    with the link as nvidia-smi prints it; the hover explains the link."""

    devs = list(dict.fromkeys(list(topo["a"]) + list(topo["b"])))
    kinds = sorted({("NV" if re.fullmatch(r"NV\d+", str(v)) else str(v)) for v in topo["link"]})
    code = {k: i for i, k in enumerate(kinds)}
    z, text, hover = [], [], []
    for a in devs:
        zr, tr, hr = [], [], []
        for b in devs:
            v = topo[(topo["a"] == a) & (topo["b"] == b)]["link"]
            v = str(v.iloc[0]) if len(v) else ""
            k = "NV" if re.fullmatch(r"NV\d+", v) else v
            zr.append(code.get(k))
            tr.append(v)
            hr.append(f"{a} ↔ {b}: {v} — {legend.get(k, '')}")
        z.append(zr), text.append(tr), hover.append(hr)
    n = max(1, len(kinds) - 1)
    scale = [[i / n, PALETTE[i % len(PALETTE)]] for i in range(len(kinds))] if len(kinds) > 1 else [[0, PALETTE[0]],
                                                                                                     [1, PALETTE[0]]]
    fig = go.Figure(go.Heatmap(z=z, x=devs, y=devs, text=text, texttemplate="%{text}", customdata=hover,
                               hovertemplate="%{customdata}<extra></extra>", colorscale=scale, showscale=False))
    fig.update_layout(title=title, height=160 + 60 * len(devs), width=None)
    fig.update_yaxes(autorange="reversed", title_text="device")
    fig.update_xaxes(title_text="device (cell: link as nvidia-smi topo -m prints it)")
    return fig


def ddp_phase_bars(df: pd.DataFrame, *, title: str) -> go.Figure:
    """Per-step phases of each DDP rung as stacked horizontal bars, one panel per path. Columns:
    ``path``, ``rung``, ``forward``, ``backward``, ``exposed``, ``optimizer`` (ms; ``backward``
    without ``exposed``, the NCCL time that did not overlap compute)."""

    paths = list(dict.fromkeys(df["path"]))
    counts = [int((df["path"] == p).sum()) for p in paths]
    fig = make_subplots(rows=len(paths), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        row_heights=[max(c, 1) for c in counts], subplot_titles=paths)
    parts = [(k, name, COLOURS[name]) for k, name in (
        ("forward", "forward"), ("backward", "backward (compute)"),
        ("exposed", "waiting for the all-reduce (exposed NCCL)"), ("optimizer", "optimizer"))]
    for ri, p in enumerate(paths, start=1):
        d = df[df["path"] == p]
        detail = d[[k for k, _, _ in parts] + ["step"]].to_numpy()
        lines = "<br>".join(f"{name}: %{{customdata[{i}]:,.1f}} ms" for i, (_, name, _) in enumerate(parts))
        for k, name, colour in parts:
            fig.add_bar(y=list(d["rung"]), x=d[k], orientation="h", name=name, legendgroup=k, showlegend=ri == 1,
                        marker_color=colour, customdata=detail,
                        hovertemplate=(f"<b>%{{y}}</b> ({p})<br>{lines}<br>timed step %{{customdata[4]:,.1f}} ms"
                                       "<br>phases: medians of CUDA events; the exposed NCCL time is from the "
                                       "profiled steps<extra></extra>"), row=ri, col=1)
        fig.update_yaxes(type="category", autorange="reversed", row=ri, col=1)
    fig.update_layout(title=title, barmode="stack", legend_title_text="phase",
                      height=140 + 30 * sum(counts) + 60 * len(paths))
    fig.update_xaxes(title_text="ms per step (medians of the timed steps)", row=len(paths), col=1)
    return fig


def bench_chart(bl: pd.DataFrame, label: str = "") -> go.Figure:
    """The collectives' bus bandwidth against the message size (``page.bench_frame``), one line per collective and
    path, the band from the slowest to the fastest repeat; ``label`` marks another run's chart."""
    fig = lines_with_band(bl, x="size", color="series", unit="GB/s", centre="busbw_GBps", low="busbw_min",
                          high="busbw_max", band_label="min–max over repeats", x_format=size_label,
                          xaxis="message size (bytes, log scale)", yaxis="bus bandwidth (GB/s)",
                          title=subtitle("Collective bus bandwidth by size" + label, "points: median"))
    return size_ticks(by_option(fig), bl["size"])


def scaling_charts(steps: pd.DataFrame, bw: pd.DataFrame) -> list[go.Figure]:
    """The scaling curve of every run shown (``page.scaling_long``): steps/s per GPU as a share of its own one GPU
    without DDP, and the all-reduce's bus bandwidth, by the number of GPUs (each only where it has points); one panel
    per run, titled by the run."""
    figs = []
    if len(steps):
        figs.append(by_option(lines_facets(steps, x="processes", color="line", facet="run", centre="pct",
                                           low="pct_min", high="pct_max", band_label="min–max over windows", unit="%",
                                           shared_y=True, xaxis="GPUs (processes)", yaxis="% of one GPU",
                                           title=subtitle("Steps/s per GPU as a share of one GPU without DDP",
                                                          "points: mean"))))
    if len(bw):
        figs.append(by_option(lines_facets(bw, x="processes", color="line", facet="run", centre="mean",
                                           band_label="min–max over repeats", unit="GB/s",
                                           title=subtitle(f"All-reduce bus bandwidth at "
                                                          f"{size_label(int(bw['bytes'].iloc[0]))}", "points: median"),
                                           xaxis="GPUs (processes)", yaxis="bus bandwidth (GB/s)")))
    return figs


def ladder_figures(res, gpu, lad: pd.DataFrame, phases) -> list[go.Figure]:
    """The ladder's chart (``lad``: ``page.ladder_frame``) and where a step's time goes (``phases``: the
    ``page.phases_frame`` of this run and, on a machine without CUDA, of the reference run ``gpu``)."""
    figs = [ladder_chart(lad)] if len(lad) else []
    for src in [s for s in ([res] if res.metadata["cuda"] else [res, gpu]) if s is not None]:
        ph = phases(src)
        if len(ph):
            label = "" if src is res else " — reference run"
            figs.append(ddp_phase_bars(ph, title="Where a step's time goes" + label))
    return figs
