"""Interactive plotly charts that work in Jupyter and in the static, offline book.

:func:`setup` registers a renderer that emits both plotly's own mimetype (JupyterLab
draws it natively) and a ``text/html`` fragment without plotly.js or MathJax (the book
renders that; plotly.js is served once per page by :mod:`datajourney.book`). Colours
are the Okabe–Ito palette, which stays distinguishable with the common colour-vision
deficiencies.
"""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.io._base_renderers import MimetypeRenderer

#: Okabe & Ito (2008), "Color Universal Design": safe for deuteranopia/protanopia/tritanopia.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]


class BookRenderer(MimetypeRenderer):
    """plotly JSON for live notebooks + an HTML fragment for the static book."""

    def to_mimebundle(self, fig_dict):
        tidy(fig_dict)
        meta = (fig_dict.get("layout") or {}).get("meta")
        html = pio.to_html(
            fig_dict, include_plotlyjs=False, include_mathjax=False, full_html=False,
            config={"displaylogo": False, "responsive": True},
            post_script=meta.get("post_script") if isinstance(meta, dict) else None,
        )
        return {"application/vnd.plotly.v1+json": fig_dict, "text/html": html}


def tidy(fig_dict: dict) -> dict:
    """Rules every chart follows, applied as it is shown: no legend with a single entry, and
    log axes labelled at powers of ten only (plotly's minor digits read as values)."""
    layout = fig_dict.setdefault("layout", {})
    shown = [t for t in fig_dict.get("data", []) if t.get("showlegend", True) is not False]
    if len({t.get("legendgroup") or t.get("name") for t in shown}) <= 1 and "showlegend" not in layout:
        layout["showlegend"] = False
    for key, axis in list(layout.items()):
        if key.startswith(("xaxis", "yaxis")) and isinstance(axis, dict) and axis.get("type") == "log":
            letter, ref = key[0], key[0] + key[5:]   # "yaxis2" -> ("y", "y2")
            values = [float(v) for t in fig_dict.get("data", []) if t.get(f"{letter}axis", letter) == ref
                      for v in _plain(t.get(letter)) if isinstance(v, (int, float)) and v > 0]
            if values and max(values) / min(values) >= 20:   # two decades or so: label powers of ten
                axis.setdefault("dtick", 1)
                axis.setdefault("minor", {"ticks": "outside", "showgrid": True})
    return fig_dict


def _plain(values) -> list:
    """Trace coordinates as a list (numpy arrays and plotly's base64 'bdata' dicts decoded)."""
    if values is None:
        return []
    if isinstance(values, dict) and "bdata" in values:
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).tolist()
    return list(values) if not isinstance(values, (str, bytes)) else []


def setup() -> None:
    """Make every figure shown in this kernel use the book renderer and palette."""
    pio.renderers["datajourney"] = BookRenderer()
    pio.renderers.default = "datajourney"
    tmpl = go.layout.Template(pio.templates["plotly_white"])
    tmpl.layout.colorway = PALETTE
    tmpl.layout.font = dict(size=13)
    tmpl.layout.hoverlabel = dict(namelength=-1)
    tmpl.layout.margin = dict(t=70, l=70, r=30, b=60)
    pio.templates["datajourney"] = tmpl
    pio.templates.default = "datajourney"


def bars_with_error(
    summary: pd.DataFrame, *, x: str, color: str, title: str, xaxis: str, yaxis: str,
    facet: str | None = None, unit: str = "MB/s", colours: dict | None = None,
) -> go.Figure:
    """Grouped bars of a :func:`datajourney.book.stats.summarise` table (mean, error bar = sample std).

    Bars start at zero on a linear axis: their heights are compared as ratios."""
    facets = list(dict.fromkeys(summary[facet])) if facet else [None]
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=len(facets), shared_yaxes=True,
                        subplot_titles=[f"{facet}: {f}" for f in facets] if facet else None)
    seen = set()
    for ci, fv in enumerate(facets, start=1):
        part = summary if fv is None else summary[summary[facet] == fv]
        for name, g in part.groupby(color, sort=False):
            colour = (colours or {}).get(name, PALETTE[list(dict.fromkeys(summary[color])).index(name) % len(PALETTE)])
            fig.add_bar(
                x=g[x].astype(str), y=g["mean"], name=str(name), legendgroup=str(name),
                showlegend=name not in seen, marker_color=colour,
                error_y=dict(type="data", array=g["std"], visible=True),
                customdata=g[["std", "min", "max", "n"]].to_numpy(),
                hovertemplate=(f"<b>{name}</b><br>{xaxis}: %{{x}}<br>mean %{{y:,.1f}} {unit}"
                               f"<br>± %{{customdata[0]:,.1f}} (std)<br>min %{{customdata[1]:,.1f}}, "
                               f"max %{{customdata[2]:,.1f}}<br>runs: %{{customdata[3]}}<extra></extra>"),
                row=1, col=ci,
            )
            seen.add(name)
    fig.update_layout(title=title, barmode="group", legend_title_text=color)
    fig.update_xaxes(title_text=xaxis, type="category")
    fig.update_yaxes(title_text=yaxis, row=1, col=1, rangemode="tozero")
    return fig


def lines_with_band(
    summary: pd.DataFrame, *, x: str, color: str, title: str, xaxis: str, yaxis: str,
    log_x: bool = True, log_y: bool = False, unit: str = "MB/s", x_format=str,
    centre: str = "mean", low: str = "min", high: str = "max", band_label: str = "min–max",
) -> go.Figure:
    """One line per ``color`` value: the ``centre`` column with error bars from ``low`` to ``high``.

    The hover names what the bars are (``band_label``: "min–max" over runs by default, or
    e.g. "p10–p90" for percentiles), so a reader never mistakes a range for a std."""
    fig = go.Figure()
    for i, (name, g) in enumerate(summary.groupby(color, sort=False)):
        g = g.sort_values(x)
        n = g["n"] if "n" in g else pd.Series([None] * len(g), index=g.index)
        fig.add_scatter(
            x=g[x], y=g[centre], name=str(name), mode="lines+markers",
            line=dict(color=PALETTE[i % len(PALETTE)]),
            error_y=dict(type="data", symmetric=False, array=g[high] - g[centre],
                         arrayminus=g[centre] - g[low]),
            customdata=list(zip(g[x].map(x_format), g[low], g[high], n, strict=True)),
            hovertemplate=(f"<b>{name}</b><br>{xaxis}: %{{customdata[0]}}<br>{centre} %{{y:,.3~g}} {unit}"
                           f"<br>{band_label}: %{{customdata[1]:,.3~g}} – %{{customdata[2]:,.3~g}}"
                           f"<br>n = %{{customdata[3]}}<extra></extra>"),
        )
    fig.update_layout(title=title, legend_title_text=color)
    fig.update_xaxes(title_text=xaxis, type="log" if log_x else "linear")
    fig.update_yaxes(title_text=yaxis + f" (bars: {band_label})", type="log" if log_y else "linear")
    return fig


def size_label(n: int) -> str:
    """4096 -> '4 KiB', 1048576 -> '1 MiB'."""
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << k and n % (1 << k) == 0:
            return f"{n >> k} {unit}"
    return f"{n} B"


def lines(df: pd.DataFrame, *, x: str, y: str, color: str, title: str, xaxis: str, yaxis: str,
          unit: str = "", log_x: bool = False, log_y: bool = False) -> go.Figure:
    """One line per ``color`` value of single measurements (no spread)."""
    fig = go.Figure()
    for i, (name, g) in enumerate(df.groupby(color, sort=False)):
        g = g.sort_values(x)
        fig.add_scatter(x=g[x], y=g[y], name=str(name), mode="lines+markers", line=dict(color=PALETTE[i % 8]),
                        hovertemplate=f"<b>{name}</b><br>{xaxis}: %{{x}}<br>{yaxis}: %{{y:,.1f}} {unit}<extra></extra>")
    fig.update_layout(title=title, legend_title_text=color)
    fig.update_xaxes(title_text=xaxis, type="log" if log_x else "linear")
    fig.update_yaxes(title_text=yaxis, type="log" if log_y else "linear", rangemode="tozero")
    return fig


def stacked_step_bars(summary: pd.DataFrame, *, x: str, xaxis: str, title: str) -> go.Figure:
    """Per-step time split into data wait and compute (steady-state means)."""
    fig = go.Figure()
    lab = summary[x].astype(str)
    fig.add_bar(x=lab, y=summary["wait_ms"], name="waiting for data", marker_color=PALETTE[5],
                error_y=dict(type="data", array=summary["wait_std_ms"].fillna(0)),
                customdata=summary[["predicted_wait_ms", "idle_share"]].to_numpy(),
                hovertemplate=("W=%{x}: data wait %{y:,.1f} ms<br>model: %{customdata[0]:,.1f} ms"
                               "<br>GPU idle %{customdata[1]:.0%}<extra></extra>"))
    fig.add_bar(x=lab, y=summary["compute_ms"], name="computing", marker_color=PALETTE[0],
                hovertemplate="W=%{x}: compute %{y:,.1f} ms<extra></extra>")
    fig.update_layout(title=title, barmode="stack", legend_title_text="step phase")
    fig.update_xaxes(title_text=xaxis, type="category")
    fig.update_yaxes(title_text="time per step (ms)")
    return fig


def measured_vs_model(summary: pd.DataFrame, *, title: str) -> go.Figure:
    """Measured data wait (points, ± std) against the model (lines), one colour per work kind."""
    fig = go.Figure()
    for i, (kind, g) in enumerate(summary.groupby("work", sort=False)):
        g = g.sort_values("workers")
        c = PALETTE[i % 8]
        fig.add_scatter(x=g["workers"], y=g["predicted_wait_ms"], mode="lines", name=f"{kind}: model",
                        line=dict(color=c, dash="dash"), legendgroup=kind,
                        hovertemplate=f"<b>{kind}</b> model<br>W=%{{x}}: %{{y:,.1f}} ms<extra></extra>")
        fig.add_scatter(x=g["workers"], y=g["wait_ms"], mode="markers", name=f"{kind}: measured",
                        marker=dict(color=c, size=9), legendgroup=kind,
                        error_y=dict(type="data", array=g["wait_std_ms"].fillna(0)),
                        customdata=g[["d_ms", "compute_ms", "au"]].to_numpy(),
                        hovertemplate=(f"<b>{kind}</b> measured<br>W=%{{x}}: wait %{{y:,.1f}} ms"
                                       "<br>D = %{customdata[0]:.2f} ms, compute %{customdata[1]:.1f} ms"
                                       "<br>AU %{customdata[2]:.0%}<extra></extra>"))
    fig.update_layout(title=title, legend_title_text="work")
    fig.update_xaxes(title_text="DataLoader workers W")
    fig.update_yaxes(title_text="data wait per step (ms, log scale)", type="log")
    return fig


def au_chart(summary: pd.DataFrame, *, threshold: float, title: str) -> go.Figure:
    fig = lines(summary.assign(au_pct=100 * summary["au"]), x="workers", y="au_pct", color="work", title=title,
                xaxis="DataLoader workers W", yaxis="AU (%)", unit="%")
    fig.add_hline(y=100 * threshold, line=dict(dash="dot", color="#555555"),
                  annotation_text=f"{threshold:.0%}: keeping up")
    fig.update_yaxes(range=[0, 105])
    return fig


def boundary_timeline(df: pd.DataFrame, *, steps_per_epoch: int, title: str) -> go.Figure:
    """Wait of each step over two epochs, one line per (persistent_workers, prefetch_factor)."""
    d = df.assign(config="persistent=" + df["persistent_workers"].astype(str)
                  + ", prefetch=" + df["prefetch_factor"].astype(str))
    fig = lines(d, x="step", y="wait_ms", color="config", title=title, xaxis="training step",
                yaxis="data wait (ms, log scale)", unit="ms", log_y=True)
    fig.add_vline(x=steps_per_epoch - 0.5, line=dict(dash="dot", color="#555555"), annotation_text="epoch 2")
    return fig


def length_histogram(lengths: pd.Series, *, context: int, batch_size: int, title: str) -> go.Figure:
    """Token lengths of the two populations in two panels with the same bins: all samples (top) and
    the first batch (bottom, its own count axis so that a batch of 32 stays readable next to
    thousands of samples)."""
    import numpy as np
    from plotly.subplots import make_subplots

    a = np.asarray(lengths)
    first = a[:batch_size]
    size = max(1, int(np.ceil((a.max() + 1) / 60)))
    bins = dict(start=0, end=int(a.max()) + size, size=size)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=[f"all samples ({len(a):,})", f"first batch ({len(first)} samples)"])
    for row, (vals, name, colour) in enumerate(((a, "all samples", PALETTE[0]),
                                                (first, "first batch", PALETTE[1])), start=1):
        fig.add_histogram(x=vals, xbins=bins, name=name, marker_color=colour, showlegend=False,
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
    import math

    import numpy as np

    z = np.asarray(fraction_real)
    n = row_len or z.shape[1] * bin_width
    x = [i * bin_width for i in range(z.shape[1])]
    ranges = [f"{c * bin_width:,}–{min((c + 1) * bin_width, n) - 1:,}" if bin_width > 1 else f"{c:,}"
              for c in range(math.ceil(n / bin_width))][:z.shape[1]]
    fig = go.Figure(go.Heatmap(
        z=z, x=x, y=list(range(z.shape[0])), zmin=0, zmax=1,
        customdata=np.broadcast_to(np.array(ranges, dtype=object), z.shape),
        colorscale=[[0, "#F0F0F0"], [1, PALETTE[0]]], colorbar=dict(title="real", tickformat=".0%"),
        hovertemplate="row %{y}, positions %{customdata}<br>real tokens %{z:.0%}<extra></extra>"))
    fig.update_layout(title=title, height=420)
    fig.update_xaxes(title_text="position in row (tokens)")
    fig.update_yaxes(title_text="row in batch", autorange="reversed")
    return fig


def mask_heatmap(mask, doc_ids, *, title: str) -> go.Figure:
    """An attention mask (query × key): allowed pairs coloured by document, padding grey,
    masked-out pairs blank."""
    import numpy as np

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


def phase_bars(summary: pd.DataFrame, *, phases, title: str) -> go.Figure:
    """Stacked per-step phase times, one bar per (format, workers) scenario."""
    lab = summary["format"] + ", W=" + summary["workers"].astype(str)
    fig = go.Figure()
    colours = [PALETTE[5], PALETTE[6], PALETTE[0], PALETTE[4], PALETTE[2]]
    for i, ph in enumerate(phases):
        fig.add_bar(x=lab, y=summary[ph], name=ph, marker_color=colours[i % len(colours)],
                    hovertemplate=f"%{{x}}<br>{ph}: %{{y:,.2f}} ms<extra></extra>")
    fig.update_layout(title=title, barmode="stack", legend_title_text="phase")
    fig.update_xaxes(title_text="scenario (format, DataLoader workers)", type="category")
    fig.update_yaxes(title_text="time per step (ms)")
    return fig


def au_and_ceiling(summary: pd.DataFrame, *, title: str) -> go.Figure:
    """AU (%) and throughput as % of the ceiling per scenario."""
    lab = summary["format"] + ", W=" + summary["workers"].astype(str)
    fig = go.Figure()
    fig.add_bar(x=lab, y=100 * summary["au"], name="AU (%)", marker_color=PALETTE[0],
                hovertemplate="%{x}<br>AU %{y:.1f}%<extra></extra>")
    fig.add_bar(x=lab, y=summary["pct_of_ceiling"], name="% of ceiling", marker_color=PALETTE[1],
                hovertemplate="%{x}<br>%{y:.1f}% of the ceiling<extra></extra>")
    fig.add_hline(y=90, line=dict(dash="dot", color=PALETTE[0]), annotation_text="AU 90%")
    fig.add_hline(y=95, line=dict(dash="dot", color=PALETTE[1]), annotation_text="95% of ceiling",
                  annotation_position="bottom right")
    fig.update_layout(title=title, barmode="group", legend_title_text="measure")
    fig.update_xaxes(title_text="scenario (format, DataLoader workers)", type="category")
    fig.update_yaxes(title_text="percent", range=[0, 110])
    return fig


def efficiency_bars(df: pd.DataFrame, *, title: str) -> go.Figure:
    """Efficiency of each layout in each population (``layout``, ``population``, ``efficiency`` in %).

    Exact counts, not measurements: no error bars."""
    fig = go.Figure()
    for i, (pop, g) in enumerate(df.groupby("population", sort=False)):
        fig.add_bar(x=g["layout"], y=g["efficiency"], name=str(pop), marker_color=PALETTE[i % len(PALETTE)],
                    text=[f"{v:.1f}%" if v < 10 else f"{v:.0f}%" for v in g["efficiency"]], textposition="outside",
                    hovertemplate=f"<b>{pop}</b><br>%{{x}}: %{{y:.2f}}% of positions are real tokens"
                                  "<br>(exact count, no spread)<extra></extra>")
    fig.update_layout(title=title, barmode="group", legend_title_text="population")
    fig.update_xaxes(title_text="layout", type="category")
    fig.update_yaxes(title_text="real tokens (% of positions)", range=[0, 110], rangemode="tozero")
    return fig


def cost_dots(df: pd.DataFrame, *, title: str, source: str) -> go.Figure:
    """Time for all samples per layout: a dot at the estimate and a bar from min to max
    (``layout``, ``seconds``, ``low``, ``high``, ``how``), on a log axis (dots, not bars, so the
    log scale does not distort lengths)."""
    fig = go.Figure(go.Scatter(
        x=df["seconds"], y=df["layout"], mode="markers", marker=dict(size=11, color=PALETTE[0]), name=source,
        error_x=dict(type="data", symmetric=False, array=df["high"] - df["seconds"],
                     arrayminus=df["seconds"] - df["low"]),
        customdata=list(zip(df["low"], df["high"], df["how"], strict=True)),
        hovertemplate=("<b>%{y}</b><br>%{x:,.3~g} s for all samples<br>bar: min–max %{customdata[0]:,.3~g} – "
                       "%{customdata[1]:,.3~g} s<br>%{customdata[2]}<extra>" + source + "</extra>")))
    fig.update_layout(title=title, height=120 + 50 * len(df))
    fig.update_xaxes(title_text="time for all samples (s, log scale; bar: min–max)", type="log")
    fig.update_yaxes(title_text="layout", autorange="reversed")
    return fig
