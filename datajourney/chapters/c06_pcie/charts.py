"""Chapter 6's own charts (the shared helpers are in :mod:`datajourney.core.charts`)."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from datajourney.core.charts import lines_with_band, series_colours, size_ticks, subtitle
from datajourney.core.units import size_label

#: The page's series in one order, which gives each its colour in every chart (``series_colours``): the copy paths
#: of the bandwidth sweep, one core's memcpy, the paired rounds, the copy modes. A pageable host-to-device copy keeps
#: its bandwidth-sweep colour in the staging chart, where the source's state is told by the dash. More series than
#: colours: the colours come round again on the copy modes, whose chart shows none of the others.
SERIES = ("H2D, pinned", "D2H, pinned", "H2D, pageable", "D2H, pageable", "memcpy one core", "added by the copy (ms)",
          "SM clock, kernel-only call (MHz)", "blocking", "non_blocking")
COLOURS = series_colours(list(SERIES), list(SERIES))
#: The staging chart's measures as its legend names them: "source state · copy", the copy named as in the bandwidth
#: sweep (its colour), the state drawn by :data:`DASHES`.
STAGING_LABELS = {"H2D pageable, source cached": "source cached · H2D, pageable",
                  "H2D pageable, cache flushed": "cache flushed · H2D, pageable",
                  "H2D pageable, huge pages": "huge pages · H2D, pageable", "D2H pageable": "D2H, pageable",
                  "memcpy one core, source cached": "source cached · memcpy one core",
                  "memcpy one core, cache flushed": "cache flushed · memcpy one core"}
#: The source's state in the staging chart, as a line's dash.
DASHES = {"source cached": "solid", "cache flushed": "dash", "huge pages": "dot"}


# --------------------------------------------------------------------------- chapter 6
def overlap_ratio_chart(summary: pd.DataFrame, *, title: str, too_short: str = "too short to tell") -> go.Figure:
    """Overlap of a copy with CPU work: one panel per host memory (pageable, pinned), one line per
    mode (blocking, non_blocking); the point is the median of the per-round ratios, the bars its
    10th–90th percentile over rounds. Every size keeps its place on the x axis; a size whose copy was
    too short to judge has no point but a grey "no verdict" label (naming the mode when only one
    mode lacks a verdict), so the chart never leads with noise; when no row can be judged every row
    is drawn faded. The "serial" and "fully hidden" lines are labelled outside the plot, on the right,
    where no point can sit; the legend is below."""

    mems = [m for m in ("pageable", "pinned") if m in set(summary["memory"])]
    fig = make_subplots(rows=1, cols=len(mems), shared_yaxes=True, subplot_titles=[f"{m} memory" for m in mems])
    judged = summary[summary["verdict"] != too_short]
    show = judged if len(judged) else summary
    faded = not len(judged)
    order = sorted(summary["size"].unique())
    labels = [size_label(int(s)) for s in order]
    for ci, mem in enumerate(mems, start=1):
        # keep every size on the axis, with or without a point
        fig.add_scatter(x=labels, y=[None] * len(labels), mode="markers", showlegend=False, hoverinfo="skip",
                        marker=dict(opacity=0), row=1, col=ci)
        for mode in ("blocking", "non_blocking"):
            g = show[(show["memory"] == mem) & (show["mode"] == mode)].sort_values("size")
            if not len(g):
                continue
            y = 100 * g["overlap"]
            fig.add_scatter(
                x=g["size"].map(lambda s: size_label(int(s))), y=y, name=mode, legendgroup=mode,
                showlegend=not any(t.name == mode for t in fig.data),
                mode="lines+markers", opacity=0.35 if faded else 1.0,
                line=dict(color=COLOURS[mode]), marker=dict(size=9),
                error_y=dict(type="data", symmetric=False, array=100 * g["overlap_p90"] - y,
                             arrayminus=y - 100 * g["overlap_p10"]),
                customdata=g[["copy_ms", "cpu_ms", "both_ms", "overlap_p10", "overlap_p90", "n", "verdict"]].to_numpy(),
                hovertemplate=(f"<b>{mem} + {mode}</b>, %{{x}}<br>overlap %{{y:.0f}}% "
                               "(median of %{customdata[5]} rounds)"
                               "<br>p10–p90: %{customdata[3]:.0%} – %{customdata[4]:.0%}"
                               "<br>copy %{customdata[0]:.2f} ms, CPU work %{customdata[1]:.2f} ms, "
                               "together %{customdata[2]:.2f} ms<br>%{customdata[6]}<extra></extra>"),
                row=1, col=ci)
        if not faded:
            short = summary[(summary["memory"] == mem) & (summary["verdict"] == too_short)]
            for size, g in short.groupby("size", sort=True):
                modes = sorted(set(g["mode"]))
                text = "no verdict" if len(modes) == 2 else f"no verdict ({modes[0]})"
                # upright, so that the labels of neighbouring sizes never run into one another
                fig.add_annotation(x=size_label(int(size)), y=50, text=text, showarrow=False, textangle=-90,
                                   font=dict(size=11, color="#777777"), row=1, col=ci)
        fig.update_xaxes(type="category", categoryorder="array", categoryarray=labels, title_text="copy size",
                         row=1, col=ci)
    for y, text in ((0, "serial"), (100, "fully hidden")):
        fig.add_hline(y=y, line=dict(dash="dot", color="#777777"))
        fig.add_annotation(xref="paper", x=1.0, xanchor="left", y=y, yref="y", text=text, showarrow=False,
                           font=dict(size=11, color="#555555"))
    fig.update_layout(title=subtitle(title + (" (every row too short to judge: drawn faded)" if faded else ""),
                                            "point: median, bars: p10–p90"),
                      legend=dict(title_text="copy mode", orientation="h", yanchor="top", y=-0.3, x=0),
                      margin=dict(r=100, b=110))
    fig.update_yaxes(title_text="overlap (%)", row=1, col=1)
    return fig


def staging_chart(summary: pd.DataFrame, *, llc_bytes: int | None, title: str) -> go.Figure:
    """Pageable copies and one core's memcpy of the same source against size (median, bars p10–p90),
    with the last-level cache size marked. A line's colour is its copy's (the bandwidth sweep's for the bus copies,
    :data:`SERIES`), its dash the source's state (:data:`DASHES`: solid cached, dashed flushed, dotted huge pages)."""
    summary = summary.assign(measure=summary["measure"].map(lambda m: STAGING_LABELS.get(m, m)))
    order = [label for label in STAGING_LABELS.values() if label in set(summary["measure"])]
    fig = lines_with_band(summary, x="size", color="measure", title=title, xaxis="buffer size (bytes, log scale)",
                          yaxis="copy rate, bus copies and one core's memcpy (GB/s)", unit="GB/s", order=order,
                          x_format=size_label, centre="median", low="p10", high="p90", band_label="p10–p90")
    for t in fig.data:
        state, _, copy = t.name.rpartition(" · ")
        t.line.color = COLOURS.get(copy, t.line.color)
        t.line.dash = DASHES.get(state, "solid")
    if llc_bytes:
        fig.add_vline(x=llc_bytes, line=dict(dash="dash", color="#555555"),
                      annotation_text=f"last-level cache {size_label(llc_bytes)}", annotation_position="top")
    fig.update_layout(legend_title_text="measure")
    fig.update_yaxes(rangemode="tozero")
    return size_ticks(fig, summary["size"], powers=True)


def paired_rounds_chart(calls: pd.DataFrame, *, copy_ms: float, title: str) -> go.Figure:
    """Copy/kernel overlap, round by round: what the copy added to the matrix products (kernel+copy
    minus kernel-only of the same round), with 0 (fully hidden) and the copy's own time (serial)
    marked; the SM clock of the kernel-only call on a second axis (right, whole MHz) when NVML was
    read. Each axis is titled after its own series; the legend sits below the plot, clear of the
    right axis."""
    inter = calls[calls["design"] == "interleaved"]
    w = inter.pivot(index="round", columns="name", values="ms")
    added = (w["both"] - w["kernel"]).rename("added")
    fig = go.Figure()
    fig.add_scatter(x=added.index, y=added, mode="markers", name="added by the copy (ms)",
                    marker=dict(color=COLOURS["added by the copy (ms)"], size=8),
                    hovertemplate="round %{x}: the copy added %{y:.2f} ms<extra></extra>")
    fig.add_hline(y=0, line=dict(dash="dot", color="#777777"), annotation_text="fully hidden",
                  annotation_position="bottom left")
    fig.add_hline(y=copy_ms, line=dict(dash="dot", color="#777777"), annotation_text="serial (copy alone)",
                  annotation_position="top left")
    fig.update_layout(yaxis=dict(title_text="time the copy added (ms; single rounds)", tickformat=",.1f"))
    if "sm_clock_mhz" in inter and inter["sm_clock_mhz"].notna().any():
        clk = inter[inter["name"] == "kernel"].set_index("round")["sm_clock_mhz"]
        fig.add_scatter(x=clk.index, y=clk, mode="lines", name="SM clock, kernel-only call (MHz)", yaxis="y2",
                        line=dict(color=COLOURS["SM clock, kernel-only call (MHz)"]),
                        hovertemplate="round %{x}: SM clock %{y:.0f} MHz<extra></extra>")
        fig.update_layout(yaxis2=dict(title_text="SM clock, kernel-only call (MHz)", overlaying="y", side="right",
                                      showgrid=False, tickformat="d"))
    fig.update_layout(title=title, legend=dict(title_text="series", orientation="h", yanchor="top", y=-0.25, x=0),
                      margin=dict(r=80, b=120))
    fig.update_xaxes(title_text="round (kernel-only, copy-only and kernel+copy in random order)")
    return fig
