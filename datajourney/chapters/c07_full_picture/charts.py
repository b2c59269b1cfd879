"""Chapter 7's own charts (the shared helpers are in :mod:`datajourney.core.charts`)."""
from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from datajourney.core.charts import PALETTE, SERIES_PALETTE, bars_label, range_bars, subtitle

_BLUE, _ORANGE, _GREEN, _PINK, _SKY, _VERMILLION, _YELLOW = SERIES_PALETTE
#: The colour of each series of the page, the same in every chart. The page draws more series than there are
#: colours, so a colour comes back, never in the next chart: the step's phases (first and last chart) take five
#: colours, and the two measures of the chart after the first the two left; the loader's six stages take six
#: colours, so the charts either side of theirs draw one series each (images/s; compute per step) in the seventh,
#: their settings (page cache; CPU load) told apart by bar pattern or line dash; the formats, drawn next to the
#: phases again, take the two colours the phases leave. Reference lines (thresholds, ceilings) and the GPU's own
#: activity (kernels, copies: each in its own lane) are black or grey.
SERIES_COLOURS = {"data wait": _VERMILLION, "copy to GPU": _YELLOW, "forward": _BLUE, "backward": _SKY,
                  "optimizer": _GREEN,
                  "compute share (%)": _ORANGE, "share of the ceiling (%)": _PINK,
                  "images/s": _BLUE,
                  "read": _SKY, "decode": _ORANGE, "normalise": _GREEN, "collate": _PINK, "pin": _YELLOW,
                  "handover": _VERMILLION,
                  "compute per step": _BLUE,
                  "ImageFolder": _ORANGE, "MDS": _PINK}
#: Reference lines and the GPU's own activity: no series colour.
REFERENCE, GPU_KERNELS, GPU_COPIES = "#555555", PALETTE[7], "#999999"
#: How the settings of one series tell themselves apart: bar patterns, line dashes and marker symbols.
PATTERNS, DASHES = ("/", ""), ("solid", "dash", "dot", "dashdot", "longdash")
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x")


#: Readable names of the profiler's phases (the record_function ranges), for legends and hovers.
PHASE_NAMES = {"DATALOADER_WAIT": "data wait", "H2D_TRANSFER": "copy to GPU", "FORWARD": "forward",
               "BACKWARD": "backward", "OPTIMIZER": "optimizer"}
#: Phase colours shared by the chapter 7 charts (by the phases' readable names: :data:`SERIES_COLOURS`).
PHASE_COLOURS = {ph: SERIES_COLOURS[name] for ph, name in PHASE_NAMES.items()}
#: The formats' names in legends, and their colours.
FORMAT_NAMES = {"imagefolder": "ImageFolder", "mds": "MDS"}
FORMAT_COLOURS = {fmt: SERIES_COLOURS[name] for fmt, name in FORMAT_NAMES.items()}


def _format_facets(summary: pd.DataFrame):

    fmts = list(dict.fromkeys(summary["format"]))
    names = {"imagefolder": "ImageFolder (one file per image)", "mds": "MDS shards"}
    fig = make_subplots(rows=len(fmts), cols=1, vertical_spacing=0.16 if len(fmts) > 1 else 0.1,
                        subplot_titles=[names.get(f, f) for f in fmts])   # one above the other: the scenarios'
    fig.update_layout(height=160 + 300 * len(fmts))                      # labels get the column's width
    return fig, fmts


def _short(summary: pd.DataFrame, sep: str = ", ") -> pd.Series:
    """'W=4' / 'W=0, 1 thread' / 'W=4, tuned': the scenario within its format (``sep="<br>"``
    puts the variant on a second line, so that category labels stay short and unrotated)."""
    return "W=" + summary["workers"].astype(int).astype(str) + summary["variant"].map(
        lambda v: "" if v == "default" else f"{sep}{v}")


def phase_bars(summary: pd.DataFrame, *, phases, title: str) -> go.Figure:
    """Stacked per-step phase times (means over runs), one horizontal bar per scenario, one panel
    per format (one above the other), phases under their readable names. Every segment's hover
    gives the whole step, the optimizer included (too thin to see at this scale)."""

    fmts = list(dict.fromkeys(summary["format"]))
    names = {"imagefolder": "ImageFolder (one file per image)", "mds": "MDS shards"}
    counts = [int((summary["format"] == f).sum()) for f in fmts]
    fig = make_subplots(rows=len(fmts), cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        row_heights=[max(c, 1) for c in counts], subplot_titles=[names.get(f, f) for f in fmts])
    for ri, fmt in enumerate(fmts, start=1):
        d = summary[summary["format"] == fmt]
        y = list(_short(d))
        detail = d[list(phases) + ["step_ms", "runs"]].to_numpy()
        lines = "<br>".join(f"{PHASE_NAMES.get(ph, ph)}: %{{customdata[{k}]:,.2f}} ms" for k, ph in enumerate(phases))
        for ph in phases:
            name = PHASE_NAMES.get(ph, ph)
            fig.add_bar(y=y, x=d[ph], orientation="h", name=name, legendgroup=ph, showlegend=ri == 1,
                        marker_color=PHASE_COLOURS.get(ph), customdata=detail,
                        hovertemplate=(f"<b>%{{y}}</b> ({fmt})<br>{lines}"
                                       f"<br>step %{{customdata[{len(phases)}]:,.1f}} ms"
                                       f"<br>means over %{{customdata[{len(phases) + 1}]}} runs"
                                       "<br><i>the optimizer is too thin to see at this scale</i><extra></extra>"),
                        row=ri, col=1)
        fig.update_yaxes(type="category", autorange="reversed", row=ri, col=1)
    fig.update_layout(title=title, barmode="stack", legend_title_text="phase",
                      height=120 + 34 * sum(counts) + 60 * len(fmts))
    fig.update_xaxes(title_text="ms per step (mean over runs of each phase)", row=len(fmts), col=1)
    return fig


def au_and_ceiling(summary: pd.DataFrame, *, title: str, au_rule: float = 0.90, keep_up: float = 0.95) -> go.Figure:
    """The compute share (the step's compute phases ÷ its wall time, %) and the share of the ceiling (images/s as
    % of its own step's ceiling, eager or CUDA graphs: the glossary's AU, steps × G ÷ wall time), per scenario:
    mean over runs, error bars min–max where a scenario has runs enough (the y title says which). The legend
    names each bar for what it divides. The x title sits under the last panel only: the first panel's upright
    labels would push it into the next panel's title.
    The two thresholds are dashed lines named in the legend (no annotations to collide), in
    names short enough to keep the legend beside the plot: a legend moved below makes plotly.js lay the
    plot out twice and leave the bar layer where the first layout put it, about 9 points above the axis
    (measured in a headless browser, with the names 9 characters longer)."""
    fig, fmts = _format_facets(summary)
    for ci, fmt in enumerate(fmts, start=1):
        d = summary[summary["format"] == fmt]
        x = list(_short(d, "<br>"))
        au, lo, hi = 100 * d["au"], 100 * d.get("au_min", d["au"]), 100 * d.get("au_max", d["au"])
        fig.add_bar(x=x, y=au, name="compute share (%)", legendgroup="au", showlegend=ci == 1,
                    marker_color=SERIES_COLOURS["compute share (%)"],
                    error_y=range_bars(au, lo, hi, d["runs"]),
                    customdata=list(zip(lo, hi, d["runs"], strict=True)),
                    hovertemplate=("<b>%{x}</b><br>compute share %{y:.1f}% (mean)<br>min–max %{customdata[0]:.1f}–"
                                   "%{customdata[1]:.1f}% over %{customdata[2]} runs<extra></extra>"), row=ci, col=1)
        pc = d["pct_of_ceiling"]
        plo, phi = d.get("pct_of_ceiling_min", pc), d.get("pct_of_ceiling_max", pc)
        fig.add_bar(
            x=x,
            y=pc,
            name="share of the ceiling (%)",
            legendgroup="pc",
            showlegend=ci == 1,
            marker_color=SERIES_COLOURS["share of the ceiling (%)"],
            error_y=range_bars(pc, plo, phi, d["runs"]),
            customdata=list(zip(plo, phi, d["runs"], strict=True)),
            hovertemplate=(
                "<b>%{x}</b><br>%{y:.1f}% of its own step's ceiling (mean)<br>min–max %{customdata[0]:.1f}–"
                "%{customdata[1]:.1f}% over %{customdata[2]} runs<extra></extra>"
            ),
            row=ci,
            col=1,
        )
        lines = {100 * au_rule: (f"keeps up: {100 * au_rule:.0f}%", REFERENCE),
                 100 * keep_up: (f"keeps up: {100 * keep_up:.0f}%", REFERENCE)}   # one line where they agree
        for y, (name, colour) in lines.items():
            fig.add_hline(y=y, line=dict(dash="dash", color=colour, width=1.5), row=ci, col=1)
            if ci == 1:  # a legend entry for the line (the line itself carries no label to collide)
                fig.add_scatter(x=[None], y=[None], mode="lines", name=name, line=dict(dash="dash", color=colour),
                                hoverinfo="skip", row=ci, col=1)
    fig.update_layout(title=subtitle(title, "mean over runs", bars_label(summary["runs"], "min–max")),
                      barmode="group", legend_title_text="measure")
    fig.update_xaxes(type="category")
    fig.update_xaxes(title_text="DataLoader workers", row=len(fmts), col=1)
    fig.update_yaxes(title_text="%", range=[0, 110])
    return fig


def wait_per_step(steps: pd.DataFrame, *, title: str) -> go.Figure:
    """Small multiples: one panel per scenario (workers, variant), one line per format: the
    median data wait of each step over the runs, with a min–max band; a linear axis per panel
    (the waits differ by orders of magnitude between panels, not within one)."""

    from plotly.subplots import make_subplots

    keys = list(dict.fromkeys(zip(steps["workers"].astype(int), steps["variant"], strict=True)))
    cols = min(4, len(keys))
    rows = math.ceil(len(keys) / cols)
    titles = [f"W={w}" + ("" if v == "default" else f", {v}") for w, v in keys]
    fig = make_subplots(rows=rows, cols=cols, shared_xaxes=True, shared_yaxes=False, subplot_titles=titles,
                        vertical_spacing=0.12 if rows > 1 else 0.1, horizontal_spacing=0.06)
    names = FORMAT_NAMES
    for k, (w, v) in enumerate(keys):
        r, c = k // cols + 1, k % cols + 1
        part = steps[(steps["workers"] == w) & (steps["variant"] == v)]
        for fmt, g in part.groupby("format", sort=False):
            q = g.groupby("step")["DATALOADER_WAIT"].agg(["median", "min", "max", "count"]).reset_index()
            colour = FORMAT_COLOURS.get(fmt, REFERENCE)
            fig.add_scatter(x=list(q["step"]) + list(q["step"])[::-1], y=list(q["max"]) + list(q["min"])[::-1],
                            fill="toself", fillcolor=colour, opacity=0.18, line=dict(width=0), hoverinfo="skip",
                            showlegend=False, legendgroup=fmt, row=r, col=c)
            fig.add_scatter(x=q["step"], y=q["median"], mode="lines", name=names.get(fmt, fmt), legendgroup=fmt,
                            showlegend=k == 0, line=dict(color=colour, width=1.5),
                            customdata=q[["min", "max", "count"]].to_numpy(),
                            hovertemplate=(f"<b>{names.get(fmt, fmt)}</b>, {titles[k]}<br>step %{{x}}: median "
                                           "%{y:,.2f} ms<br>min–max %{customdata[0]:,.2f}–"
                                           "%{customdata[1]:,.2f} ms over "
                                           "%{customdata[2]} runs<extra></extra>"), row=r, col=c)
    fig.update_layout(title=title, height=260 * rows + 140,
                      legend_title_text="format<br>(line: median,<br>band: min–max,<br>over runs)")
    fig.update_yaxes(type="linear", rangemode="tozero", nticks=4)
    fig.update_yaxes(title_text="ms", col=1)
    first, last = int(steps["step"].min()), int(steps["step"].max())
    fig.update_xaxes(range=[first - 1, last + 1])   # the first step's tick clear of the y axis's 0 in the corner
    fig.update_xaxes(title_text="training step", row=rows)
    return fig


def compute_under_load(load: pd.DataFrame, *, ceiling_ms: float, title: str, labels: dict | None = None) -> go.Figure:
    """Compute per step of the GPU-resident loop against the number of busy processes, one line
    per mode: mean over runs, error bars min–max; the dashed grey line is the unloaded ceiling. One series
    (compute per step, in its colour), its modes told apart by dash and marker ("mode · compute per step")."""
    fig = go.Figure()
    for i, (mode, g) in enumerate(load.groupby("mode", sort=False)):
        g = g.sort_values("busy")
        name = f"{(labels or {}).get(mode, mode)} · compute per step"
        fig.add_scatter(x=g["busy"], y=g["compute_ms"], mode="lines+markers", name=name,
                        line=dict(color=SERIES_COLOURS["compute per step"], dash=DASHES[i % len(DASHES)]),
                        marker=dict(symbol=SYMBOLS[i % len(SYMBOLS)], size=8),
                        error_y=range_bars(g["compute_ms"], g["compute_min"], g["compute_max"], g["n"]),
                        customdata=g[["compute_min", "compute_max", "n", "compute_p90_ms", "main_cores"]].to_numpy(),
                        hovertemplate=(f"<b>{name}</b><br>%{{x}} busy processes<br>compute %{{y:,.2f}} ms (mean)"
                                       "<br>min–max %{customdata[0]:,.2f}–%{customdata[1]:,.2f} ms over "
                                       "%{customdata[2]} runs<br>p90 of steps %{customdata[3]:,.2f} ms"
                                       "<br>training process %{customdata[4]:.2f} cores<extra></extra>"))
    xs = [load["busy"].min(), load["busy"].max()]
    fig.add_scatter(x=xs, y=[ceiling_ms, ceiling_ms], mode="lines", name="ceiling, no load (mean of its runs)",
                    line=dict(dash="dash", color=REFERENCE, width=1.5),
                    hovertemplate=f"{ceiling_ms:.2f} ms<extra></extra>")
    fig.update_layout(title=subtitle(title, bars_label(load["n"], "min–max")), legend_title_text="mode")
    fig.update_xaxes(title_text="busy processes doing the loader's CPU work")
    fig.update_yaxes(title_text="compute per step, ms (mean)", rangemode="tozero")
    return fig


#: Colours of the loader stages (the data path; :data:`SERIES_COLOURS`), the untimed rest in grey.
STAGE_COLOURS = {**{k: SERIES_COLOURS[k] for k in ("read", "decode", "normalise", "collate", "pin", "handover")},
                 "other": "#999999"}


def stage_bars(stats: pd.DataFrame, *, title: str, batch_size: int) -> go.Figure:
    """Where a batch's data time goes, per image: the stages timed inside the loader (means over
    runs), stacked, one bar per scenario, one panel per format."""
    fig, fmts = _format_facets(stats)
    stages = ["read", "decode", "normalise", "collate", "pin", "handover", "other"]
    for ci, fmt in enumerate(fmts, start=1):
        d = stats[stats["format"] == fmt]
        x = list(_short(d, "<br>"))
        vals = {k: (d[f"{k}_ms"] / batch_size).fillna(0.0) for k in stages[:-1]}
        vals["other"] = (d["loader_other_ms"].clip(lower=0) / batch_size).fillna(0.0)  # defined at W=0 only
        for k in stages:
            fig.add_bar(x=x, y=vals[k].tolist(), name=k, legendgroup=k, showlegend=ci == 1,
                        marker_color=STAGE_COLOURS[k],
                        customdata=list(zip((vals[k] * batch_size).tolist(), d["DATALOADER_WAIT"].tolist(),
                                            d["runs"].tolist(), strict=True)),
                        hovertemplate=(f"<b>%{{x}}</b> ({fmt})<br>{k}: %{{y:,.3f}} ms per image"
                                       "<br>%{customdata[0]:,.2f} ms per batch<br>data wait %{customdata[1]:,.2f} ms"
                                       " per step<br>means over %{customdata[2]} runs<extra></extra>"), row=ci, col=1)
    fig.update_layout(title=title, barmode="stack", legend_title_text="stage")
    fig.update_xaxes(type="category")
    fig.update_xaxes(title_text="DataLoader workers", row=len(fmts), col=1)
    fig.update_yaxes(title_text="ms per image (mean over runs of each stage)")
    return fig


def step_timeline(timeline: pd.DataFrame, *, title: str) -> go.Figure:
    """One profiled step per trace as lanes of intervals (ms from the step's start): the phases on
    the main thread, the same phases as the GPU ran them, and the GPU's busy intervals."""

    by = "trace" if "trace" in timeline else "label"
    traces = list(dict.fromkeys(timeline[by]))
    labels = [timeline[timeline[by] == t]["label"].iloc[0] for t in traces]
    fig = make_subplots(rows=len(labels), cols=1, subplot_titles=labels, vertical_spacing=0.14, shared_xaxes=False)
    lanes = ["GPU: copies", "GPU: kernels", "GPU: phases", "CPU: phases"]
    shown = set()
    for r, tr in enumerate(traces, start=1):
        g = timeline[timeline[by] == tr]
        for lane in lanes:
            d = g[g["lane"] == lane]
            for name, e in d.groupby("name", sort=False):
                colour = PHASE_COLOURS.get(name, GPU_KERNELS if name == "kernels" else GPU_COPIES)
                key = PHASE_NAMES.get(name, name) if lane != "GPU: kernels" else "GPU kernels"
                fig.add_bar(y=[lane] * len(e), x=e["dur_ms"].astype(float).tolist(),
                            base=e["start_ms"].astype(float).tolist(), orientation="h", name=key,
                            legendgroup=key, showlegend=key not in shown, marker_color=colour,
                            customdata=e[["start_ms", "dur_ms", "count", "busy_ms"]].astype(float).to_numpy().tolist(),
                            hovertemplate=(f"<b>{PHASE_NAMES.get(name, name)}</b> ({lane})<br>from "
                                           "%{customdata[0]:,.3f} ms for "
                                           "%{customdata[1]:,.3f} ms" + (
                                               "" if lane.startswith("CPU") else
                                               "<br>GPU busy inside: %{customdata[3]:,.3f} ms<br>GPU activities: "
                                               "%{customdata[2]}") + "<extra></extra>"), row=r, col=1)
                shown.add(key)
        fig.update_yaxes(categoryorder="array", categoryarray=lanes, row=r, col=1)
    fig.update_xaxes(title_text="ms from the start of the step", row=len(labels), col=1)
    fig.update_layout(title=title, barmode="overlay", height=230 * len(labels) + 140, legend_title_text="activity",
                      bargap=0.25)
    return fig


def format_rates(rates: pd.DataFrame, *, ceiling: float, title: str) -> go.Figure:
    """Images/s each storage format fed at its best worker count, cold and warm side by side (error bars: the
    runs' minimum to maximum), against the chapter's ceiling (the step with its batch already in memory). One
    series (images/s, in its colour), its page-cache states told apart by bar pattern ("cold · images/s")."""
    fig = go.Figure()
    for cache, pattern in zip(("cold", "warm"), PATTERNS, strict=True):
        d = rates[rates["cache"] == cache]
        fig.add_bar(x=d["format"].tolist(), y=d["images_per_s"].tolist(), name=f"{cache} · images/s",
                    marker=dict(color=SERIES_COLOURS["images/s"], pattern=dict(shape=pattern)),
                    error_y=dict(type="data", symmetric=False, array=(d["high"] - d["images_per_s"]).tolist(),
                                 arrayminus=(d["images_per_s"] - d["low"]).tolist()),
                    customdata=d["workers"].tolist(),
                    hovertemplate=f"<b>%{{x}}</b>, {cache}<br>%{{y:,.0f}} images/s at num_workers=%{{customdata}}"
                                  "<extra></extra>")
    fig.add_hline(y=ceiling, line_dash="dash", line_color=REFERENCE,
                  annotation_text=f"ceiling {ceiling:,.0f} images/s", annotation_position="top left")
    fig.update_layout(title=subtitle(title, "bars: the runs' range"), barmode="group",
                      legend_title_text="page cache")
    fig.update_xaxes(title_text="storage format (each at its best worker count)", type="category")
    fig.update_yaxes(title_text="images/s", rangemode="tozero")
    return fig
