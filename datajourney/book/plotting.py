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


#: Phase colours shared by the chapter 7 charts.
PHASE_COLOURS = {"DATALOADER_WAIT": PALETTE[5], "H2D_TRANSFER": PALETTE[6], "FORWARD": PALETTE[0],
                 "BACKWARD": PALETTE[4], "OPTIMIZER": PALETTE[2]}
FORMAT_COLOURS = {"imagefolder": PALETTE[0], "mds": PALETTE[1]}


def _format_facets(summary: pd.DataFrame):
    from plotly.subplots import make_subplots

    fmts = list(dict.fromkeys(summary["format"]))
    names = {"imagefolder": "ImageFolder (one file per image)", "mds": "MDS shards"}
    fig = make_subplots(rows=1, cols=len(fmts), shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=[names.get(f, f) for f in fmts])
    return fig, fmts


def _short(summary: pd.DataFrame) -> pd.Series:
    """'W=4' / 'W=0, 1 thread' / 'W=4, tuned': the scenario within its format."""
    return "W=" + summary["workers"].astype(int).astype(str) + summary["variant"].map(
        lambda v: "" if v == "default" else f", {v}")


def phase_bars(summary: pd.DataFrame, *, phases, title: str) -> go.Figure:
    """Stacked per-step phase times (means over runs), one bar per scenario, one panel per format.
    Every segment's hover gives the whole step, OPTIMIZER included (too thin to see at this scale)."""
    fig, fmts = _format_facets(summary)
    for ci, fmt in enumerate(fmts, start=1):
        d = summary[summary["format"] == fmt]
        x = list(_short(d))
        detail = d[list(phases) + ["step_ms", "runs"]].to_numpy()
        lines = "<br>".join(f"{ph}: %{{customdata[{k}]:,.2f}} ms" for k, ph in enumerate(phases))
        for ph in phases:
            fig.add_bar(x=x, y=d[ph], name=ph, legendgroup=ph, showlegend=ci == 1, marker_color=PHASE_COLOURS.get(ph),
                        customdata=detail,
                        hovertemplate=(f"<b>%{{x}}</b> ({fmt})<br>{lines}"
                                       f"<br>step %{{customdata[{len(phases)}]:,.1f}} ms"
                                       f"<br>means over %{{customdata[{len(phases) + 1}]}} runs"
                                       "<br><i>OPTIMIZER is too thin to see at this scale</i><extra></extra>"),
                        row=1, col=ci)
    fig.update_layout(title=title, barmode="stack", legend_title_text="phase")
    fig.update_xaxes(title_text="DataLoader workers (variant)", type="category")
    fig.update_yaxes(title_text="time per step (ms, mean over runs)", row=1, col=1)
    return fig


def au_and_ceiling(summary: pd.DataFrame, *, title: str, au_rule: float = 0.90, keep_up: float = 0.95) -> go.Figure:
    """AU (%) and throughput as % of the ceiling per scenario: mean over runs, error bars min–max.
    The two thresholds are dashed lines named in the legend (no annotations to collide)."""
    fig, fmts = _format_facets(summary)
    for ci, fmt in enumerate(fmts, start=1):
        d = summary[summary["format"] == fmt]
        x = list(_short(d))
        au, lo, hi = 100 * d["au"], 100 * d.get("au_min", d["au"]), 100 * d.get("au_max", d["au"])
        fig.add_bar(x=x, y=au, name="AU (%)", legendgroup="au", showlegend=ci == 1, marker_color=PALETTE[0],
                    error_y=dict(type="data", symmetric=False, array=hi - au, arrayminus=au - lo),
                    customdata=list(zip(lo, hi, d["runs"], strict=True)),
                    hovertemplate=("<b>%{x}</b><br>AU %{y:.1f}% (mean)<br>min–max %{customdata[0]:.1f}–"
                                   "%{customdata[1]:.1f}% over %{customdata[2]} runs<extra></extra>"), row=1, col=ci)
        pc = d["pct_of_ceiling"]
        plo, phi = d.get("pct_of_ceiling_min", pc), d.get("pct_of_ceiling_max", pc)
        fig.add_bar(x=x, y=pc, name="% of ceiling", legendgroup="pc", showlegend=ci == 1, marker_color=PALETTE[1],
                    error_y=dict(type="data", symmetric=False, array=phi - pc, arrayminus=pc - plo),
                    customdata=list(zip(plo, phi, d["runs"], strict=True)),
                    hovertemplate=("<b>%{x}</b><br>%{y:.1f}% of the ceiling (mean)<br>min–max %{customdata[0]:.1f}–"
                                   "%{customdata[1]:.1f}% over %{customdata[2]} runs<extra></extra>"), row=1, col=ci)
        for y, name, colour in ((100 * au_rule, f"AU rule ({100 * au_rule:.0f}%)", PALETTE[0]),
                                (100 * keep_up, f"keeping up ({100 * keep_up:.0f}% of ceiling)", PALETTE[1])):
            fig.add_hline(y=y, line=dict(dash="dash", color=colour, width=1.5), row=1, col=ci)
            if ci == 1:  # a legend entry for the line (the line itself carries no label to collide)
                fig.add_scatter(x=[None], y=[None], mode="lines", name=name, line=dict(dash="dash", color=colour),
                                hoverinfo="skip", row=1, col=ci)
    fig.update_layout(title=title, barmode="group", legend_title_text="measure")
    fig.update_xaxes(title_text="DataLoader workers (variant)", type="category")
    fig.update_yaxes(title_text="percent (bars: mean, error bars: min–max over runs)", range=[0, 110], row=1, col=1)
    return fig


def wait_per_step(steps: pd.DataFrame, *, title: str) -> go.Figure:
    """Small multiples: one panel per scenario (workers, variant), one line per format: the
    median data wait of each step over the runs, with a min–max band."""
    import math

    from plotly.subplots import make_subplots

    keys = list(dict.fromkeys(zip(steps["workers"].astype(int), steps["variant"], strict=True)))
    cols = min(4, len(keys))
    rows = math.ceil(len(keys) / cols)
    titles = [f"W={w}" + ("" if v == "default" else f", {v}") for w, v in keys]
    fig = make_subplots(rows=rows, cols=cols, shared_xaxes=True, shared_yaxes=True, subplot_titles=titles,
                        vertical_spacing=0.12 if rows > 1 else 0.1, horizontal_spacing=0.03)
    names = {"imagefolder": "ImageFolder", "mds": "MDS"}
    for k, (w, v) in enumerate(keys):
        r, c = k // cols + 1, k % cols + 1
        part = steps[(steps["workers"] == w) & (steps["variant"] == v)]
        for fmt, g in part.groupby("format", sort=False):
            q = g.groupby("step")["DATALOADER_WAIT"].agg(["median", "min", "max", "count"]).reset_index()
            colour = FORMAT_COLOURS.get(fmt, PALETTE[2])
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
    fig.update_layout(title=title, legend_title_text="format", height=260 * rows + 120)
    fig.update_yaxes(type="log")
    fig.update_yaxes(title_text="data wait (ms, log)", col=1)
    fig.update_xaxes(title_text="training step", row=rows)
    return fig


def compute_under_load(load: pd.DataFrame, *, ceiling_ms: float, title: str, labels: dict | None = None) -> go.Figure:
    """Compute per step of the GPU-resident loop against the number of busy processes, one line
    per mode: mean over runs, error bars min–max; the dashed line is the unloaded ceiling."""
    fig = go.Figure()
    for i, (mode, g) in enumerate(load.groupby("mode", sort=False)):
        g = g.sort_values("busy")
        name = (labels or {}).get(mode, mode)
        fig.add_scatter(x=g["busy"], y=g["compute_ms"], mode="lines+markers", name=name,
                        line=dict(color=PALETTE[i % len(PALETTE)]),
                        error_y=dict(type="data", symmetric=False, array=g["compute_max"] - g["compute_ms"],
                                     arrayminus=g["compute_ms"] - g["compute_min"]),
                        customdata=g[["compute_min", "compute_max", "n", "compute_p90_ms", "main_cores"]].to_numpy(),
                        hovertemplate=(f"<b>{name}</b><br>%{{x}} busy processes<br>compute %{{y:,.2f}} ms (mean)"
                                       "<br>min–max %{customdata[0]:,.2f}–%{customdata[1]:,.2f} ms over "
                                       "%{customdata[2]} runs<br>p90 of steps %{customdata[3]:,.2f} ms"
                                       "<br>training process %{customdata[4]:.2f} cores<extra></extra>"))
    xs = [load["busy"].min(), load["busy"].max()]
    fig.add_scatter(x=xs, y=[ceiling_ms, ceiling_ms], mode="lines", name="ceiling, no load (mean of its runs)",
                    line=dict(dash="dash", color="#555555", width=1.5),
                    hovertemplate=f"{ceiling_ms:.2f} ms<extra></extra>")
    fig.update_layout(title=title, legend_title_text="mode")
    fig.update_xaxes(title_text="busy processes doing the loader's CPU work")
    fig.update_yaxes(title_text="compute per step (ms; error bars min–max over runs)", rangemode="tozero")
    return fig


#: Colours of the loader stages (the data path).
STAGE_COLOURS = {"read": PALETTE[4], "decode": PALETTE[0], "normalise": PALETTE[2], "collate": PALETTE[3],
                 "pin": PALETTE[6], "handover": PALETTE[5], "other": "#999999"}


def stage_bars(stats: pd.DataFrame, *, title: str, batch_size: int) -> go.Figure:
    """Where a batch's data time goes, per image: the stages timed inside the loader (means over
    runs), stacked, one bar per scenario, one panel per format."""
    fig, fmts = _format_facets(stats)
    stages = ["read", "decode", "normalise", "collate", "pin", "handover", "other"]
    for ci, fmt in enumerate(fmts, start=1):
        d = stats[stats["format"] == fmt]
        x = list(_short(d))
        vals = {k: (d[f"{k}_ms"] / batch_size).fillna(0.0) for k in stages[:-1]}
        vals["other"] = (d["loader_other_ms"].clip(lower=0) / batch_size).fillna(0.0)  # defined at W=0 only
        for k in stages:
            fig.add_bar(x=x, y=vals[k].tolist(), name=k, legendgroup=k, showlegend=ci == 1,
                        marker_color=STAGE_COLOURS[k],
                        customdata=list(zip((vals[k] * batch_size).tolist(), d["DATALOADER_WAIT"].tolist(),
                                            d["runs"].tolist(), strict=True)),
                        hovertemplate=(f"<b>%{{x}}</b> ({fmt})<br>{k}: %{{y:,.3f}} ms per image"
                                       "<br>%{customdata[0]:,.2f} ms per batch<br>data wait %{customdata[1]:,.2f} ms"
                                       " per step<br>means over %{customdata[2]} runs<extra></extra>"), row=1, col=ci)
    fig.update_layout(title=title, barmode="stack", legend_title_text="stage")
    fig.update_xaxes(title_text="DataLoader workers (variant)", type="category")
    fig.update_yaxes(title_text="ms per image (mean over runs)", row=1, col=1)
    return fig


def step_timeline(timeline: pd.DataFrame, *, title: str) -> go.Figure:
    """One profiled step per trace as lanes of intervals (ms from the step's start): the phases on
    the main thread, the same phases as the GPU ran them, and the GPU's busy intervals."""
    from plotly.subplots import make_subplots

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
                colour = PHASE_COLOURS.get(name, PALETTE[7] if name == "kernels" else PALETTE[3])
                key = name if lane != "GPU: kernels" else "GPU kernels"
                fig.add_bar(y=[lane] * len(e), x=e["dur_ms"].astype(float).tolist(),
                            base=e["start_ms"].astype(float).tolist(), orientation="h", name=key,
                            legendgroup=key, showlegend=key not in shown, marker_color=colour,
                            customdata=e[["start_ms", "dur_ms", "count", "busy_ms"]].astype(float).to_numpy().tolist(),
                            hovertemplate=(f"<b>{name}</b> ({lane})<br>from %{{customdata[0]:,.3f}} ms for "
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
