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
    """Token lengths of all samples, with the first batch highlighted."""
    fig = go.Figure()
    fig.add_histogram(x=lengths, name="all samples", marker_color=PALETTE[0], opacity=0.75, nbinsx=60,
                      hovertemplate="%{x} tokens: %{y} samples<extra>all samples</extra>")
    fig.add_histogram(x=lengths[:batch_size], name=f"first batch ({batch_size})", marker_color=PALETTE[1],
                      nbinsx=60, hovertemplate="%{x} tokens: %{y} samples<extra>first batch</extra>")
    fig.update_layout(title=title, barmode="overlay", legend_title_text="population")
    fig.update_xaxes(title_text=f"tokens per sample (context length {context:,})")
    fig.update_yaxes(title_text="samples")
    return fig


def occupancy_heatmap(fraction_real, *, bin_width: int, title: str) -> go.Figure:
    """One batch as rows × positions: share of real tokens in each group of ``bin_width`` positions."""
    import numpy as np

    z = np.asarray(fraction_real)
    x = [i * bin_width for i in range(z.shape[1])]
    fig = go.Figure(go.Heatmap(
        z=z, x=x, y=list(range(z.shape[0])), zmin=0, zmax=1,
        colorscale=[[0, "#F0F0F0"], [1, PALETTE[0]]], colorbar=dict(title="real", tickformat=".0%"),
        hovertemplate=(f"row %{{y}}, positions %{{x}}–%{{x}}+{bin_width - 1}<br>real tokens %{{z:.0%}}"
                       "<extra></extra>")))
    fig.update_layout(title=title, height=420)
    fig.update_xaxes(title_text="position in row (tokens)")
    fig.update_yaxes(title_text="row in batch", autorange="reversed")
    return fig


def mask_heatmap(mask, doc_ids, *, title: str) -> go.Figure:
    """An attention mask (query × key) coloured by document, padding grey."""
    import numpy as np

    m = np.asarray(mask, dtype=float)
    d = np.asarray(doc_ids)
    z = np.where(m > 0, d[:, None] + 1.0, np.nan)
    n = int(d.max()) + 1
    scale = [[0, "#DDDDDD"]] + [[(k + 1) / n, PALETTE[k % 8]] for k in range(n)]
    fig = go.Figure(go.Heatmap(z=z, zmin=0, zmax=n, colorscale=scale, showscale=False,
                               customdata=np.broadcast_to(d[:, None], m.shape),
                               hovertemplate="query %{y} → key %{x}<br>document %{customdata}<extra></extra>"))
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


# ------------------------------------------------------------------ chapters 2 and 3: small multiples
def _facet_grid(n: int, titles: list[str], shared_y: bool):
    from plotly.subplots import make_subplots

    return make_subplots(rows=1, cols=n, shared_yaxes=shared_y, subplot_titles=titles,
                         horizontal_spacing=0.08 if not shared_y else 0.04)


def bars_facets(summary: pd.DataFrame, *, x: str, color: str, facet: str, title: str, xaxis: str, yaxis: str,
                unit: str = "MB/s", shared_y: bool = False, names: dict | None = None) -> go.Figure:
    """Grouped bars of a :func:`datajourney.book.stats.summarise` table in one panel per ``facet``
    value, each panel on its own linear axis from zero (bar heights compare as ratios within a
    panel). Error bars: one sample standard deviation; the hover adds min, max and runs."""
    facets = list(dict.fromkeys(summary[facet]))
    series = list(dict.fromkeys(summary[color]))
    fig = _facet_grid(len(facets), [f"{facet}: {f}" for f in facets], shared_y)
    for ci, fv in enumerate(facets, start=1):
        part = summary[summary[facet] == fv]
        for i, name in enumerate(series):
            g = part[part[color] == name]
            if g.empty:
                continue
            label = (names or {}).get(name, str(name))
            fig.add_bar(
                x=g[x].astype(str), y=g["mean"], name=label, legendgroup=label, showlegend=ci == 1,
                marker_color=PALETTE[i % len(PALETTE)],
                error_y=dict(type="data", array=g["std"], visible=True),
                customdata=g[["std", "min", "max", "n"]].to_numpy(),
                hovertemplate=(f"<b>{label}</b> ({facet}: {fv})<br>{xaxis}: %{{x}}<br>mean %{{y:,.3~g}} {unit}"
                               f"<br>± %{{customdata[0]:,.3~g}} (std, error bar)<br>min %{{customdata[1]:,.3~g}}, "
                               f"max %{{customdata[2]:,.3~g}}<br>runs: %{{customdata[3]}}<extra></extra>"),
                row=1, col=ci,
            )
    fig.update_layout(title=title, barmode="group", legend_title_text=color,
                      legend=dict(orientation="h", yanchor="top", y=-0.22, x=0))
    fig.update_xaxes(title_text=xaxis, type="category")
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(title_text=yaxis + " (bars: ± std)", row=1, col=1)
    return fig


def lines_facets(summary: pd.DataFrame, *, x: str, color: str, facet: str, title: str, xaxis: str, yaxis: str,
                 unit: str = "", centre: str = "mean", low: str = "min", high: str = "max",
                 band_label: str = "min–max", log_x: bool = False, log_y: bool = False, shared_y: bool = False,
                 names: dict | None = None, y_format: str = ",.3~g") -> go.Figure:
    """One panel per ``facet`` value, one line per ``color`` value: ``centre`` with error bars
    from ``low`` to ``high`` (named by ``band_label`` on the axis and in the hover)."""
    facets = list(dict.fromkeys(summary[facet]))
    series = list(dict.fromkeys(summary[color]))
    fig = _facet_grid(len(facets), [f"{facet}: {f}" for f in facets], shared_y)
    for ci, fv in enumerate(facets, start=1):
        part = summary[summary[facet] == fv]
        for i, name in enumerate(series):
            g = part[part[color] == name].sort_values(x)
            if g.empty:
                continue
            label = (names or {}).get(name, str(name))
            n = g["n"] if "n" in g else pd.Series([None] * len(g), index=g.index)
            fig.add_scatter(
                x=g[x], y=g[centre], name=label, legendgroup=label, showlegend=ci == 1, mode="lines+markers",
                line=dict(color=PALETTE[i % len(PALETTE)]),
                error_y=dict(type="data", symmetric=False, array=g[high] - g[centre], arrayminus=g[centre] - g[low]),
                customdata=list(zip(g[low], g[high], n, strict=True)),
                hovertemplate=(f"<b>{label}</b> ({facet}: {fv})<br>{xaxis}: %{{x}}<br>{centre} %{{y:{y_format}}} {unit}"
                               f"<br>{band_label}: %{{customdata[0]:{y_format}}} – %{{customdata[1]:{y_format}}}"
                               f"<br>n = %{{customdata[2]}}<extra></extra>"),
                row=1, col=ci,
            )
    fig.update_layout(title=title, legend_title_text=color, legend=dict(orientation="h", yanchor="top", y=-0.22, x=0))
    fig.update_xaxes(title_text=xaxis, type="log" if log_x else "linear")
    fig.update_yaxes(type="log" if log_y else "linear")
    if not log_y:
        fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(title_text=f"{yaxis} (bars: {band_label})", row=1, col=1)
    return fig


def latency_distribution(cdf: pd.DataFrame, *, floor_us: float, title: str, floor_label: str) -> go.Figure:
    """Cumulative distribution of single-request latencies (one line per series, log x), with a
    vertical marker at ``floor_us`` (e.g. the fastest a flash read can be)."""
    fig = go.Figure()
    for i, (name, g) in enumerate(cdf.groupby("series", sort=False)):
        g = g.sort_values("quantile")
        fig.add_scatter(x=g["us"], y=100 * g["quantile"], name=str(name), mode="lines+markers",
                        line=dict(color=PALETTE[i % len(PALETTE)]), marker=dict(size=5),
                        hovertemplate=(f"<b>{name}</b><br>%{{y:.3~g}}% of requests took at most %{{x:,.3~g}} µs"
                                       "<extra></extra>"))
    fig.add_vline(x=floor_us, line=dict(dash="dot", color="#555555"))
    fig.add_annotation(x=float(__import__("math").log10(floor_us)), y=1.0, yref="paper", yanchor="bottom",
                       text=floor_label, showarrow=False, xanchor="left", font=dict(size=11, color="#555555"))
    fig.update_layout(title=title, legend_title_text="requests", legend=dict(orientation="h", yanchor="top", y=-0.22))
    fig.update_xaxes(title_text="latency of one request (µs, log scale)", type="log")
    fig.update_yaxes(title_text="requests at or below (percent)", range=[0, 101])
    return fig


def size_ticks(fig: go.Figure, values, label=None) -> go.Figure:
    """Label every x axis of ``fig`` at ``values`` only (e.g. byte sizes as '4 KiB', '1 MiB'),
    instead of plotly's log-axis digits."""
    vals = sorted({int(v) for v in values})
    fig.update_xaxes(tickmode="array", tickvals=vals, ticktext=[(label or size_label)(v) for v in vals],
                     minor=dict(showgrid=False))
    return fig
