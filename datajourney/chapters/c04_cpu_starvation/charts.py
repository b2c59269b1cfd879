"""Chapter 4's own charts (the shared helpers are in :mod:`datajourney.core.charts`)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from datajourney.core.charts import PALETTE, SERIES_PALETTE, bars_label, range_bars, subtitle

_BLUE, _ORANGE, _GREEN, _PINK, _SKY, _VERMILLION, _YELLOW = SERIES_PALETTE
#: The colour of each series of the page, the same in every chart, under one name per concept: the step's two
#: parts are "data wait" and "step compute G" (the what-if's names; a condition goes before the name, "after the
#: gap · step compute G", and the model's and the measured wait are "predicted · data wait" and "measured (mean)
#: · data wait", told apart by line and marker). The page draws more series than there are colours, so a colour
#: comes back, never in the next chart: the kinds of work take the palette's first colours in the order the
#: sweep lists them (as every chart that draws them does), so the charts beside theirs use none of those three
#: but the step's; the prefetch chart's cost profiles and the epoch-boundary chart's settings take colours that
#: neither their neighbours nor the what-if (data wait, step compute G, predicted AU in green) use.
SERIES_COLOURS = {"data wait": _VERMILLION, "step compute G": _BLUE, "SM clock (NVML)": _ORANGE,
                  "constant cost per sample": _PINK, "variable cost per sample": _YELLOW,
                  "persistent_workers=False": _ORANGE, "persistent_workers=True": _SKY}


def stacked_step_bars(summary: pd.DataFrame, *, x: str, xaxis: str, title: str) -> go.Figure:
    """Per-step time split into data wait and compute (steady-state means; error bars and hover:
    the 10th–90th percentile of the steps, and the standard deviation)."""
    fig = go.Figure()
    lab = summary[x].astype(str)
    err_w, lo_w, hi_w, what = _spread(summary, "wait")
    err_c, lo_c, hi_c, _ = _spread(summary, "compute")
    std_w = summary["wait_std_ms"].fillna(0)
    std_c = summary["compute_std_ms"].fillna(0) if "compute_std_ms" in summary else summary["compute_ms"] * 0
    fig.add_bar(x=lab, y=summary["wait_ms"], name="data wait", marker_color=SERIES_COLOURS["data wait"],
                error_y=err_w,
                customdata=list(zip(summary["predicted_wait_ms"], summary["idle_share"], lo_w, hi_w, std_w,
                                    summary["steps"], strict=True)),
                hovertemplate=("W=%{x}: data wait, mean %{y:,.1f} ms ± %{customdata[4]:,.1f} (std)"
                               "<br>p10–p90 of the steps: %{customdata[2]:,.1f} – %{customdata[3]:,.1f} ms"
                               "<br>model: %{customdata[0]:,.1f} ms · GPU idle %{customdata[1]:.0%}"
                               "<br>steps: %{customdata[5]}<extra></extra>"))
    fig.add_bar(x=lab, y=summary["compute_ms"], name="step compute G", marker_color=SERIES_COLOURS["step compute G"],
                error_y=err_c,
                customdata=list(zip(lo_c, hi_c, std_c, summary["steps"], strict=True)),
                hovertemplate=("W=%{x}: compute, mean %{y:,.1f} ms ± %{customdata[2]:,.1f} (std)"
                               "<br>p10–p90 of the steps: %{customdata[0]:,.1f} – %{customdata[1]:,.1f} ms"
                               "<br>steps: %{customdata[3]}<extra></extra>"))
    fig.update_layout(title=_bars_note(title, what), barmode="stack", legend_title_text="step phase",
                      margin=dict(t=100))
    fig.update_xaxes(title_text=xaxis, type="category")
    fig.update_yaxes(title_text="time per step (ms)", rangemode="tozero")
    return fig


def _bars_note(title: str, what: str) -> str:
    """A chart title with what its error bars are on a second, smaller line (axis titles keep the unit only)."""
    return subtitle(title, f"error bars: {what}")


def _range_note(title: str, n, per: str, centre: str) -> str:
    """A chart title with its min–max bars named as :func:`~datajourney.core.charts.bars_label` names them (no bars
    promised where too few runs drew none) and what its points are."""
    label = bars_label(n, "min–max", per)
    return subtitle(title, f"{'error ' if label.startswith('bars:') else ''}{label} (points: {centre})")


def measured_vs_model(summary: pd.DataFrame, *, title: str) -> go.Figure:
    """Measured data wait (points, error bars p10–p90 of the steps) against the model (dashed line),
    one panel per kind of work, the workers as categories (W = 0, 1, 2 are not squeezed together),
    one log axis shared by the panels. A log axis cannot show zero: where the model predicts no
    wait, a hollow triangle sits on the axis floor instead of a line plunging to nothing."""
    from plotly.subplots import make_subplots

    kinds = list(dict.fromkeys(summary["work"]))
    err_all = _spread(summary, "wait")
    lows = pd.concat([summary["wait_ms"], err_all[1]]).where(lambda v: v > 0).dropna()
    floor = 10 ** np.floor(np.log10(max(lows.min(), 1e-3))) if len(lows) else 0.1
    top = max(summary["wait_ms"].max(), summary["predicted_wait_ms"].max(), err_all[2].max())
    ws = [str(int(w)) for w in sorted(summary["workers"].unique())]
    fig = make_subplots(rows=1, cols=len(kinds), shared_yaxes=True, horizontal_spacing=0.03,
                        subplot_titles=[f"{k} (D = {summary[summary['work'] == k]['d_ms'].iloc[0]:.2f} ms)"
                                        for k in kinds])
    wait = SERIES_COLOURS["data wait"]
    for i, kind in enumerate(kinds, start=1):
        g = summary[summary["work"] == kind].sort_values("workers")
        x = g["workers"].astype(int).astype(str)
        model = g["predicted_wait_ms"].where(g["predicted_wait_ms"] > 0)
        fig.add_scatter(x=x, y=model, mode="lines+markers", name="predicted · data wait", connectgaps=False,
                        legendgroup="model", showlegend=i == 1, line=dict(color=wait, dash="dash"),
                        marker=dict(color=wait, symbol="line-ew-open", size=12),
                        hovertemplate=f"<b>{kind}</b> model<br>W=%{{x}}: %{{y:,.1f}} ms<extra></extra>",
                        row=1, col=i)
        zero = g[g["predicted_wait_ms"] <= 0]
        if len(zero):
            fig.add_scatter(x=zero["workers"].astype(int).astype(str), y=[floor] * len(zero), mode="markers",
                            name="predicted: none (on the axis floor) · data wait", legendgroup="zero",
                            showlegend=i == 1, marker=dict(color=wait, symbol="triangle-down-open", size=10),
                            hovertemplate=(f"<b>{kind}</b> model<br>W=%{{x}}: no wait (0 ms, drawn on the axis "
                                           "floor)<extra></extra>"), row=1, col=i)
        err, lo, hi, what = _spread(g, "wait")
        fig.add_scatter(x=x, y=g["wait_ms"], mode="markers", name="measured (mean) · data wait",
                        legendgroup="measured", showlegend=i == 1, marker=dict(color=wait, size=9), error_y=err,
                        customdata=list(zip(g["d_ms"], g["compute_ms"], g["au"], lo, hi, strict=True)),
                        hovertemplate=(f"<b>{kind}</b> measured<br>W=%{{x}}: mean wait %{{y:,.2f}} ms"
                                       f"<br>{what}: %{{customdata[3]:,.2f}} – %{{customdata[4]:,.2f}} ms"
                                       "<br>D = %{customdata[0]:.2f} ms, compute %{customdata[1]:.1f} ms"
                                       "<br>AU %{customdata[2]:.0%}<extra></extra>"), row=1, col=i)
    fig.update_layout(title=_bars_note(title, err_all[3]), legend=dict(orientation="h", y=-0.22, x=0),
                      margin=dict(t=100, b=110))
    fig.update_xaxes(title_text="workers W", type="category", categoryorder="array", categoryarray=ws)
    fig.update_yaxes(type="log", dtick=1, range=[np.log10(floor) - 0.1, np.log10(max(top, floor * 10)) + 0.15])
    fig.update_yaxes(title_text="data wait per step (ms)", row=1, col=1)
    return fig


def au_chart(summary: pd.DataFrame, *, threshold: float, title: str) -> go.Figure:
    """AU against the calibrated steady-state step, one line per kind of work, with the
    keeping-up threshold (from the chapter's constant)."""
    fig = go.Figure()
    for i, (kind, g) in enumerate(summary.groupby("work", sort=False)):
        g = g.sort_values("workers")
        share = g["compute_share"] if "compute_share" in g else 1 - g["idle_share"]
        fig.add_scatter(x=g["workers"], y=100 * g["au"], name=str(kind), mode="lines+markers",
                        line=dict(color=PALETTE[i % 8]),
                        customdata=list(zip(100 * share, g["compute_ms"], g["step_ms"], strict=True)),
                        hovertemplate=(f"<b>{kind}</b><br>W=%{{x}}: AU %{{y:.1f}}% (steps × G / wall)"
                                       "<br>measured compute / wall: %{customdata[0]:.1f}%"
                                       "<br>compute %{customdata[1]:.1f} ms of a %{customdata[2]:.1f} ms step"
                                       "<extra></extra>"))
    fig.add_hline(y=100 * threshold, line=dict(dash="dot", color="#555555"),
                  annotation_text=f"{100 * threshold:.0f}%: keeping up", annotation_position="bottom right")
    fig.update_layout(title=title, legend_title_text="work")
    fig.update_xaxes(title_text="DataLoader workers W")
    fig.update_yaxes(title_text="AU (%) against the calibrated step G", range=[0, 105])
    return fig


def boundary_timeline(df: pd.DataFrame, *, steps_per_epoch: int, title: str) -> go.Figure:
    """Wait of each step over two epochs with and without persistent workers: the median over
    runs, error bars min–max over runs (log axis: every wait is positive)."""
    if "prefetch_factor" in df and df["prefetch_factor"].nunique() > 1:
        df = df[df["prefetch_factor"] == 2] if 2 in set(df["prefetch_factor"]) else df
    run = df["run"] if "run" in df else 0
    g = (df.assign(run=run).groupby(["persistent_workers", "step"])["wait_ms"]
         .agg(median="median", min="min", max="max", n="count").reset_index())
    fig = go.Figure()
    for pers, part in g.groupby("persistent_workers", sort=True):
        name = "persistent_workers=True" if pers else "persistent_workers=False"
        fig.add_scatter(x=part["step"], y=part["median"], name=name, mode="lines+markers",
                        line=dict(color=SERIES_COLOURS[name]),
                        error_y=range_bars(part["median"], part["min"], part["max"], part["n"]),
                        customdata=list(zip(part["min"], part["max"], part["n"], strict=True)),
                        hovertemplate=(f"<b>{name}</b><br>step %{{x}}: median wait %{{y:,.1f}} ms"
                                       "<br>min–max over runs: %{customdata[0]:,.1f} – %{customdata[1]:,.1f} ms"
                                       "<br>runs: %{customdata[2]}<extra></extra>"))
    fig.add_vline(x=steps_per_epoch - 0.5, line=dict(dash="dot", color="#555555"), annotation_text="epoch 2")
    fig.update_layout(title=_range_note(title, g["n"], "runs", "median"), legend_title_text="workers",
                      margin=dict(t=100))
    fig.update_xaxes(title_text="training step")
    fig.update_yaxes(title_text="data wait (ms, log scale)", type="log")
    return fig


# ---------------------------------------------------------------- chapter 4: the step's own time
def _spread(df: pd.DataFrame, col: str):
    """Asymmetric error bars of a steady-state mean from its p10/p90 columns (older results: ± std)."""
    lo, hi = f"{col}_p10_ms", f"{col}_p90_ms"
    centre = df[f"{col}_ms"]
    if lo in df and hi in df and df[lo].notna().all():
        return dict(type="data", symmetric=False, array=(df[hi] - centre).clip(lower=0),
                    arrayminus=(centre - df[lo]).clip(lower=0)), df[lo], df[hi], "p10–p90 of the steps"
    std = df[f"{col}_std_ms"].fillna(0) if f"{col}_std_ms" in df else centre * 0
    return dict(type="data", array=std), centre - std, centre + std, "± std of the steps"


def step_drift(calibration: pd.DataFrame, *, g_ms: float, title: str) -> go.Figure:
    """The calibration's drift trace: the same step back-to-back from a rested GPU, its time and
    (when NVML was there) the SM clock on a second axis."""

    d = calibration[calibration["phase"] == "drift"]
    t = (d["t_start_s"] - d["t_start_s"].iloc[0]) * 1e3
    clocks = "sm_clock_mhz" in d and d["sm_clock_mhz"].notna().any()
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_scatter(x=t, y=d["step_ms"], mode="lines+markers", name="step compute G",
                    line=dict(color=SERIES_COLOURS["step compute G"]),
                    hovertemplate="%{x:,.0f} ms into the run: step %{y:.2f} ms<extra></extra>")
    if clocks:
        fig.add_scatter(x=t, y=d["sm_clock_mhz"], mode="lines", name="SM clock (NVML)", secondary_y=True,
                        line=dict(color=SERIES_COLOURS["SM clock (NVML)"], dash="dot"),
                        customdata=list(zip(d["power_w"], d["clock_reasons"].fillna(0).astype(int), strict=True)),
                        hovertemplate=("%{x:,.0f} ms: SM clock %{y:,.0f} MHz<br>power %{customdata[0]:,.0f} W"
                                       "<br>clock-limit reason bits %{customdata[1]}<extra></extra>"))
        fig.update_yaxes(title_text="SM clock (MHz)", secondary_y=True, showgrid=False, tickmode="auto", nticks=6,
                         tickformat=",.0f")
    fig.add_hline(y=g_ms, line=dict(dash="dash", color="#555555"), annotation_text="calibrated G",
                  annotation_position="top left")
    fig.update_layout(title=title, legend_title_text="")
    fig.update_xaxes(title_text="time since the first step after the rest (ms)")
    fig.update_yaxes(title_text="step time (ms, CUDA events)", secondary_y=False)
    return fig


def idle_gap_chart(idle: pd.DataFrame, *, g_ms: float, title: str) -> go.Figure:
    """The step after a controlled idle gap: mean over repeats, error bars min–max; the SM clock
    during that step on a second axis when NVML was there."""

    agg = {"step_ms": ["mean", "min", "max", "count"]}
    clocks = "sm_clock_mhz" in idle and idle["sm_clock_mhz"].notna().any()
    if clocks:
        agg["sm_clock_mhz"] = ["mean"]
        agg["power_w"] = ["mean"]
    g = idle.groupby("gap_ms").agg(agg)
    g.columns = ["_".join(c) for c in g.columns]
    g = g.reset_index()
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_scatter(x=g["gap_ms"], y=g["step_ms_mean"], mode="lines+markers", name="after the gap · step compute G",
                    line=dict(color=SERIES_COLOURS["step compute G"]),
                    error_y=range_bars(g["step_ms_mean"], g["step_ms_min"], g["step_ms_max"], g["step_ms_count"]),
                    customdata=list(zip(g["step_ms_min"], g["step_ms_max"], g["step_ms_count"], strict=True)),
                    hovertemplate=("idle gap %{x} ms: step %{y:.2f} ms (mean)<br>min–max over repeats: "
                                   "%{customdata[0]:.2f} – %{customdata[1]:.2f} ms<br>repeats: %{customdata[2]}"
                                   "<extra></extra>"))
    if clocks:
        fig.add_scatter(x=g["gap_ms"], y=g["sm_clock_mhz_mean"], mode="lines+markers", name="SM clock (NVML)",
                        secondary_y=True, line=dict(color=SERIES_COLOURS["SM clock (NVML)"], dash="dot"),
                        marker=dict(symbol="diamond"),
                        customdata=g["power_w_mean"],
                        hovertemplate="idle gap %{x} ms: SM clock %{y:,.0f} MHz, power %{customdata:,.0f} W"
                                      "<extra></extra>")
        fig.update_yaxes(title_text="SM clock during the step (MHz)", secondary_y=True, showgrid=False,
                         tickmode="auto", nticks=6, tickformat=",.0f")
    fig.add_hline(y=g_ms, line=dict(dash="dash", color="#555555"), annotation_text="calibrated G",
                  annotation_position="bottom right")
    fig.update_layout(title=_range_note(title, g["step_ms_count"], "repeats", "mean"), legend_title_text="",
                      margin=dict(t=100))
    fig.update_xaxes(title_text="idle gap before the step (ms)")
    fig.update_yaxes(title_text="step time (ms)", secondary_y=False)
    return fig


def prefetch_chart(prefetch: pd.DataFrame, *, title: str) -> go.Figure:
    """Mean data wait by prefetch_factor in the balanced case, one line per cost profile:
    mean over runs, error bars min–max over runs."""
    g = (prefetch.groupby(["cost", "prefetch_factor"], sort=True)["wait_ms"]
         .agg(mean="mean", min="min", max="max", n="count").reset_index())
    fig = go.Figure()
    for cost, part in g.groupby("cost", sort=False):
        name = f"{cost} cost per sample"
        fig.add_scatter(x=part["prefetch_factor"].astype(str), y=part["mean"], name=name,
                        mode="lines+markers", line=dict(color=SERIES_COLOURS[name]),
                        error_y=range_bars(part["mean"], part["min"], part["max"], part["n"]),
                        customdata=list(zip(part["min"], part["max"], part["n"], strict=True)),
                        hovertemplate=(f"<b>{cost}</b><br>prefetch_factor %{{x}}: mean wait %{{y:,.2f}} ms"
                                       "<br>min–max over runs: %{customdata[0]:,.2f} – %{customdata[1]:,.2f} ms"
                                       "<br>runs: %{customdata[2]}<extra></extra>"))
    fig.update_layout(title=_range_note(title, g["n"], "runs", "mean"), legend_title_text="work",
                      margin=dict(t=100))
    fig.update_xaxes(title_text="prefetch factor (batches each worker keeps ready)", type="category")
    fig.update_yaxes(title_text="mean data wait per step (ms)", rangemode="tozero")
    return fig
