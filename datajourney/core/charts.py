"""Interactive plotly charts that work in Jupyter and in the static, offline book.

:func:`setup` registers a renderer that emits both plotly's own mimetype (JupyterLab
draws it natively) and a ``text/html`` fragment without plotly.js or MathJax (the book
renders that; plotly.js is served once per page by :mod:`datajourney.book`). Colours
are the Okabe–Ito palette, which stays distinguishable with the common colour-vision
deficiencies.
"""
from __future__ import annotations

import math
import numbers as numbers_
import re

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.io._base_renderers import MimetypeRenderer

from datajourney.core.findings import size_label  # noqa: F401 - charts label byte sizes with it

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
    """Rules every chart follows, applied as it is shown (so charts built anywhere obey them): no legend
    with a single entry; numeric legends and categories in numeric order; plain numbers (thousands
    separated, never "1.73e+3"); axes that make room for their labels; a title above the plot that
    cannot meet an axis title; long category labels on horizontal bars or wrapped, never rotated; log
    axes only over a wide range, labelled 1, 2, 5, 10…; integer ticks on count axes."""
    layout = fig_dict.setdefault("layout", {})
    data = fig_dict.get("data", [])
    shown = [t for t in data if t.get("showlegend", True) is not False]
    if len({t.get("legendgroup") or t.get("name") for t in shown}) <= 1 and "showlegend" not in layout:
        layout["showlegend"] = False
    _plain_formats(fig_dict)
    _legend_below(fig_dict)
    _legend_order(data)
    _long_categories(fig_dict)
    _crowded_categories(fig_dict)
    meta = layout.get("meta")
    counts = set(meta.get(_COUNT_KEY, [])) if isinstance(meta, dict) else set()
    for name in _axis_names(fig_dict):
        axis = layout.setdefault(name, {})
        values = _axis_values(data, name)
        axis.setdefault("automargin", True)
        if _is_category(axis, values):
            _numeric_categories(axis, values)
            continue
        numbers = [float(v) for v in values if isinstance(v, numbers_.Real) and not isinstance(v, bool)
                   and math.isfinite(v)]
        axis.setdefault("exponentformat", "none")
        axis.setdefault("separatethousands", True)
        if axis.get("type") == "log":
            _log_axis(fig_dict, name, axis, [v for v in numbers if v > 0])
        elif axis.get("type") in (None, "linear", "-") and numbers and (
                name[0] in counts or all(v.is_integer() for v in numbers)):
            _integer_ticks(axis, numbers)
    _wrap_axis_titles(layout, _plot_px(fig_dict))
    _title_above(layout)
    return fig_dict


#: Key of ``layout.meta`` listing the axis letters (``"x"``, ``"y"``) that :func:`count_axis` marked.
_COUNT_KEY = "count_axes"
#: Category labels longer than this turn bars horizontal (one panel) or wrap (several panels).
LONG_LABEL = 12
#: Rough width of a 13 px character, of the book's text column and of a plot area in it (the column less
#: the tick labels beside the plot), to fit titles and labels before anything is drawn.
_CHAR_PX, _COLUMN_PX, _PLOT_PX = 7.2, 720, 400
#: Category labels on horizontal bars wrap past this many characters (they set the left margin).
_HBAR_LABEL = 28


def count_axis(fig: go.Figure, axis: str = "x") -> go.Figure:
    """Mark every ``axis`` ("x" or "y") of ``fig`` as counting whole things (workers, GPUs, events):
    its ticks fall on integers only, never "1.5 GPUs" (applied by :func:`tidy` when shown)."""
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    fig.update_layout(meta={**meta, _COUNT_KEY: sorted({*meta.get(_COUNT_KEY, []), axis})})
    return fig


def _legend_below(fig_dict: dict) -> None:
    """A legend on the right whose names are long (over :data:`_LEGEND_CHARS`) goes below the plot, across:
    beside it, it would leave the plot a sliver."""
    layout = fig_dict["layout"]
    legend = layout.get("legend") or {}
    if layout.get("showlegend") is False or legend.get("orientation") == "h" or "x" in legend or "y" in legend:
        return
    names = [_visible(t["name"]) for t in fig_dict.get("data", []) if t.get("name")
             and t.get("showlegend", True) is not False]
    if names and max(map(len, names)) > _LEGEND_CHARS:
        layout["legend"] = {**legend, "orientation": "h", "yanchor": "top", "y": -0.25, "x": 0}


#: Legend names longer than this move the legend below the plot.
_LEGEND_CHARS = 24


def _plot_px(fig_dict: dict) -> float:
    """Rough width of the plot area: the text column less the y axis's tick labels and a legend on the right."""
    layout, data = fig_dict["layout"], fig_dict.get("data", [])
    labels = (layout.get("yaxis") or {}).get("ticktext") or [v for t in data for v in _plain(t.get("y"))
                                                             if isinstance(v, str)]
    widest = max((len(line) for c in labels for line in _visible(re.sub(r"<br\s*/?>", "\n", str(c))).split("\n")),
                 default=6)
    right = 0
    if layout.get("showlegend") is not False and (layout.get("legend") or {}).get("orientation") != "h":
        names = [_visible(t["name"]) for t in data if t.get("name") and t.get("showlegend", True) is not False]
        right = max(map(len, names)) * _CHAR_PX + 60 if names else 0
    return max(200.0, _COLUMN_PX - max(widest, 6) * _CHAR_PX - 50 - right)


def _axis_names(fig_dict: dict) -> list[str]:
    """Every axis of the figure's layout: those it names and those its traces sit on ("x2" -> "xaxis2")."""
    layout = fig_dict["layout"]
    names = {k for k, v in layout.items() if re.fullmatch(r"[xy]axis\d*", k) and isinstance(v, dict)}
    for t in fig_dict.get("data", []):
        if t.get("type") in ("pie", "sunburst", "treemap", "table", "sankey", "indicator"):
            continue
        for letter in "xy":
            names.add(letter + "axis" + (t.get(f"{letter}axis") or letter)[1:])
    return sorted(names)


def _on_axis(trace: dict, name: str) -> bool:
    return (trace.get(f"{name[0]}axis") or name[0]) == name[0] + name[5:]


def _axis_values(data: list, name: str) -> list:
    """The coordinates that the traces on axis ``name`` put on it."""
    return [v for t in data if _on_axis(t, name) for v in _plain(t.get(name[0]))]


def _is_category(axis: dict, values: list) -> bool:
    return axis.get("type") in ("category", "multicategory") or (
        axis.get("type") in (None, "-") and any(isinstance(v, str) for v in values))


def _number(text) -> float | None:
    """``text`` as a number when it is one ("16", "1,024", "0.5"), else None."""
    try:
        return float(str(text).replace(",", ""))
    except ValueError:
        return None


def _numeric_categories(axis: dict, values: list) -> None:
    """Categories that are all numbers ("1", "4", "16") in numeric order, unless an order was given."""
    cats = list(dict.fromkeys(str(v) for v in values))
    if "categoryarray" in axis or axis.get("categoryorder") not in (None, "trace"):
        return
    if cats and all(_number(c) is not None for c in cats):
        axis.update(categoryorder="array", categoryarray=sorted(cats, key=_number))


def _natural_key(name: str):
    """``name`` split into (prefix, number, suffix) when it holds exactly one number ("W=4", "16 threads")."""
    parts = re.split(r"(-?\d[\d,]*(?:\.\d+)?)", str(name))
    return None if len(parts) != 3 else (parts[0], _number(parts[1]), parts[2])


def _legend_order(data: list) -> None:
    """Legend entries that differ only in a number (threads 1, 4, 16, 64) in numeric order."""
    names = list(dict.fromkeys(t.get("name") for t in data if t.get("name") is not None
                               and t.get("showlegend", True) is not False))
    keys = {n: _natural_key(n) for n in names}
    if len(names) < 2 or any(k is None for k in keys.values()) or len({(k[0], k[2]) for k in keys.values()}) != 1:
        return
    rank = {n: 1000 + i for i, n in enumerate(sorted(names, key=lambda n: keys[n][1]))}
    for t in data:
        if t.get("name") in rank:
            t.setdefault("legendrank", rank[t["name"]])


_FORMAT = re.compile(r"(%\{[^}:]+:[^}]*?)(~?)[ge]\}")


def _plain_formats(fig_dict: dict) -> None:
    """d3's ``g`` and ``e`` formats print 1730 as "1.73e+3": use ``r`` (as many significant digits, plain)."""
    def fix(value):
        if isinstance(value, str):
            return _FORMAT.sub(lambda m: f"{m.group(1)}~r}}", value)
        if isinstance(value, (list, tuple)):
            return [fix(v) for v in value]
        return value

    for t in fig_dict.get("data", []):
        for key in ("hovertemplate", "texttemplate"):
            if key in t:
                t[key] = fix(t[key])
    layout = fig_dict["layout"]
    for key, axis in layout.items():
        if re.fullmatch(r"[xy]axis\d*", key) and isinstance(axis, dict) and re.search(r"[ge]$", axis.get(
                "tickformat") or ""):
            axis["tickformat"] = axis["tickformat"][:-1].rstrip("~") + "~r"


def _nice(step: float) -> float:
    """The smallest 1, 2 or 5 × 10ⁿ at least ``step``."""
    if step <= 0:
        return 1.0
    e = 10 ** math.floor(math.log10(step))
    return next(m * e for m in (1, 2, 5, 10) if m * e >= step * (1 - 1e-9))


def _integer_ticks(axis: dict, values: list[float]) -> None:
    """Ticks every whole 1, 2, 5, 10… units (about six of them), so a count axis never reads "1.5"."""
    if axis.get("tickmode") == "array" or "tickvals" in axis or (axis.get("dtick") or 0) >= 1:
        return
    lo, hi = (axis["range"] if isinstance(axis.get("range"), (list, tuple)) and None not in axis["range"]
              else (min(values), max(values)))
    axis.update(tickmode="linear", tick0=0, dtick=max(1, int(_nice((hi - lo) / 6))), tickformat=",d")


def tick_text(v: float) -> str:
    """A tick value as plain text: 0.05, 2, 1,000 (no exponent)."""
    return f"{v:,.0f}" if v >= 1 else f"{v:.{max(0, -math.floor(math.log10(v)))}f}"


_LOG_WORDS = [(re.compile(r"\s*\(log scale\)"), ""), (re.compile(r",\s*log scale"), ""),
              (re.compile(r"log scale[;,]\s*"), ""), (re.compile(r"\(log[;,]\s*"), "("),
              (re.compile(r",\s*log\)"), ")")]


def _unlog(text):
    """``text`` without its "log scale" wording (for an axis that is drawn linear after all)."""
    if not isinstance(text, str):
        return text
    for pattern, repl in _LOG_WORDS:
        text = pattern.sub(repl, text)
    return text


def _log_axis(fig_dict: dict, name: str, axis: dict, values: list[float]) -> None:
    """A log axis over less than :data:`LOG_SPAN` of range is drawn linear (its title and hovers lose the
    "log scale" words); a wider one is labelled 1, 2, 5, 10… (powers of ten alone past three decades),
    never with plotly's small "2, 3" digits."""
    if not values:
        return
    lo, hi = min(values), max(values)
    if hi / lo < LOG_SPAN:
        axis["type"] = "linear"
        for key in ("range", "dtick", "tick0", "minor"):
            axis.pop(key, None)
        title = axis.get("title")
        if isinstance(title, dict):
            title["text"] = _unlog(title.get("text"))
        else:
            axis["title"] = _unlog(title)
        for t in fig_dict.get("data", []):
            if _on_axis(t, name) and "hovertemplate" in t:
                t["hovertemplate"] = _unlog(t["hovertemplate"])
        return
    if axis.get("tickmode") == "array" or "tickvals" in axis:
        return _thin_ticks(axis, name, values, _plot_px(fig_dict))
    lo_d, hi_d = axis.get("domain") or (0, 1)
    px = (_plot_px(fig_dict) if name[0] == "x" else (fig_dict["layout"].get("height") or 450) - 150) * (hi_d - lo_d)
    label = (len(tick_text(hi)) * _CHAR_PX + 14) if name[0] == "x" else 20
    per_decade = px / (math.log10(hi / lo) + 0.5)
    steps = (1, 2, 5) if per_decade >= 3 * label else (1,)
    every = max(1, math.ceil(label / per_decade))   # decades between labels
    vals = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 2)
            for m in steps if lo / 5 <= m * 10.0 ** e <= hi * 5 and e % every == 0]
    for key in ("dtick", "tick0"):
        axis.pop(key, None)
    axis.update(tickmode="array", tickvals=vals, ticktext=[tick_text(v) for v in vals])
    axis.setdefault("minor", {"showgrid": False})


def _thin_ticks(axis: dict, name: str, values: list[float], plot_px: float) -> None:
    """Given tick labels (``tickvals``/``ticktext``) on an x axis, every one that would touch the one
    before it left out (at a log axis's positions): sizes from 4 KiB to 1 GiB or rates up to 10⁹ do not fit
    a narrow plot side by side."""
    vals, text = list(axis.get("tickvals") or []), list(axis.get("ticktext") or [])
    if name[0] != "x" or len(vals) < 3 or len(text) != len(vals) or not all(
            isinstance(v, numbers_.Real) and v > 0 for v in vals):
        return
    lo, hi = min([*values, *vals]), max([*values, *vals])
    if hi <= lo:
        return
    lo_d, hi_d = axis.get("domain") or (0, 1)
    px = plot_px * (hi_d - lo_d) / math.log10(hi / lo * 1.3)
    keep, last = [], None
    for v, t in sorted(zip(vals, text, strict=True)):
        here = math.log10(v) * px
        if last is None or here - last[0] >= (len(_visible(t)) + last[1]) / 2 * _CHAR_PX + 12:
            keep.append((v, t))
            last = (here, len(_visible(t)))
    axis.update(tickvals=[v for v, _ in keep], ticktext=[t for _, t in keep])


#: The smallest range (largest ÷ smallest value) that an axis needs before it is drawn on a log scale.
LOG_SPAN = 30


def _wrap(text: str, width: int) -> str:
    """``text`` broken with <br> at spaces so that no line is longer than ``width`` characters."""
    import textwrap

    lines = []
    for line in re.split(r"<br\s*/?>", text):
        lines += textwrap.wrap(line, max(width, 8), break_long_words=False) or [""]
    return "<br>".join(lines)


def _visible(text: str) -> str:
    return re.sub(r"<[^>]+>", "", str(text))


def _wrap_axis_titles(layout: dict, plot_px: float) -> None:
    """Axis titles longer than their axis break onto more lines: a y title taller than the plot would
    run into the chart's title."""
    height = layout.get("height") or 450
    for key, axis in layout.items():
        if not (re.fullmatch(r"[xy]axis\d*", key) and isinstance(axis, dict)):
            continue
        title = axis.get("title")
        title = title if isinstance(title, dict) else {"text": title}
        text = title.get("text")
        if not isinstance(text, str) or not text:
            continue
        lo, hi = axis.get("domain") or (0, 1)
        px = (height - 220) * (hi - lo) if key[0] == "y" else (plot_px - 40) * (hi - lo)
        width = int(max(px, 120) / _CHAR_PX)
        if any(len(_visible(line)) > width for line in re.split(r"<br\s*/?>", text)):
            axis["title"] = {**title, "text": _wrap(text, width)}


def _title_above(layout: dict) -> None:
    """The chart's title sits above the plot area and pushes the top margin (plotly's title automargin),
    from the chart's left edge, clear of subplot titles and labels drawn on top of the plot. Its first
    line is the title, further lines its subtitle (plotly draws a multi-line title anchored at its first
    line, down into the plot); a title too long for the column gets a smaller font, then a subtitle."""
    title = layout.get("title")
    title = dict(title) if isinstance(title, dict) else {"text": title}
    if not title.get("text"):
        return
    main, *rest = re.split(r"<br\s*/?>", str(title["text"]))
    if len(_visible(main)) > _TITLE_CHARS * 17 / 12:
        cut = main.rfind(" ", 0, int(_TITLE_CHARS * 17 / 12))
        main, rest = main[:cut], [main[cut + 1:], *rest]
    if len(_visible(main)) > _TITLE_CHARS:
        title["font"] = {"size": max(12, int(17 * _TITLE_CHARS / len(_visible(main)))), **(title.get("font") or {})}
    sub = [re.sub(r"</?sup>", "", line) for line in rest]
    old = (title.get("subtitle") or {}).get("text")
    if sub or old:
        text = "<br>".join([*sub, *([old] if old else [])])
        title["subtitle"] = {**(title.get("subtitle") or {}), "text": _wrap(text, int(_TITLE_CHARS * 17 / 12))}
    title["text"] = main
    lines = 0
    for a in layout.get("annotations") or []:
        ref = str(a.get("yref") or "")
        if (ref == "paper" or ref.endswith("domain")) and (a.get("y") or 0) >= 0.98 and a.get("yanchor") in (
                None, "auto", "bottom"):
            lines = max(lines, str(a.get("text") or "").count("<br") + 1)
    pad = {"b": 10 + 22 * lines, "l": 10}
    layout["title"] = {"automargin": True, "yref": "paper", "y": 1, "yanchor": "bottom", "xref": "container", "x": 0,
                       "xanchor": "left", **title, "pad": {**pad, **(title.get("pad") or {})}}


#: Characters of a chart title (17 px) that fit the text column.
_TITLE_CHARS = 72


_SWAP = {"x": "y", "y": "x", "x0": "y0", "y0": "x0", "x1": "y1", "y1": "x1", "xref": "yref", "yref": "xref",
         "xshift": "yshift", "yshift": "xshift", "error_x": "error_y", "error_y": "error_x"}


def _swap_ref(ref):
    return re.sub(r"^([xy])", lambda m: "y" if m.group(1) == "x" else "x", ref) if isinstance(ref, str) else ref


def _long_categories(fig_dict: dict) -> None:
    """Vertical bars whose category labels are longer than :data:`LONG_LABEL` characters: one panel turns
    into horizontal bars (labels read left to right, first category on top); several panels keep
    their bars and wrap the labels, unrotated."""
    data, layout = fig_dict.get("data", []), fig_dict["layout"]
    bars = [t for t in data if t.get("type") == "bar" and t.get("orientation") in (None, "v")]
    if not bars:
        return
    cats = list(dict.fromkeys(str(v) for t in bars for v in _plain(t.get("x")) if isinstance(v, str)))
    longest = max((len(line) for c in cats for line in _visible(re.sub(r"<br\s*/?>", "\n", c)).split("\n")),
                  default=0)
    if longest <= LONG_LABEL:
        return
    one_panel = all((t.get("xaxis") or "x") == "x" and (t.get("yaxis") or "y") == "y" for t in data)
    simple = all(t.get("type") == "bar" or all(v is None for v in _plain(t.get("x"))) for t in data)
    if one_panel and simple:
        for t in data:
            swapped = {_SWAP.get(k, k): v for k, v in t.items()}
            for key in ("hovertemplate", "texttemplate"):
                if isinstance(swapped.get(key), str):
                    swapped[key] = re.sub(r"%\{([xy])", lambda m: "%{" + ("y" if m.group(1) == "x" else "x"),
                                          swapped[key])
            if t.get("type") == "bar":
                swapped["orientation"] = "h"
            t.clear()
            t.update(swapped)
        layout["xaxis"], layout["yaxis"] = layout.get("yaxis", {}), layout.get("xaxis", {})
        for key in ("domain", "anchor"):
            for axis in (layout["xaxis"], layout["yaxis"]):
                axis.pop(key, None)
        layout["yaxis"].setdefault("autorange", "reversed")
        text = [_wrap(c, _HBAR_LABEL) for c in cats]
        if text != cats:
            layout["yaxis"].update(tickmode="array", tickvals=cats, ticktext=text)
        lines = max(t.count("<br>") + 1 for t in text)
        for kind in ("shapes", "annotations"):
            for item in layout.get(kind) or []:
                swapped = {_SWAP.get(k, k): (_swap_ref(v) if k in ("xref", "yref") else v) for k, v in item.items()
                           if k not in ("xanchor", "yanchor")}
                item.clear()
                item.update(swapped)
        per_cat = len(bars) if layout.get("barmode") in (None, "group") else 1
        row = max(18 * per_cat, 17 * lines) + 12
        layout["height"] = max(layout.get("height") or 0, 260, 160 + len(cats) * row)
        return
    for name in _axis_names(fig_dict):
        if name[0] != "x":
            continue
        on = list(dict.fromkeys(str(v) for t in bars if _on_axis(t, name) for v in _plain(t.get("x"))))
        if not on:
            continue
        lo, hi = layout.get(name, {}).get("domain") or (0, 1)
        width = int(_plot_px(fig_dict) * (hi - lo) / len(on) / _CHAR_PX) - 1
        layout.setdefault(name, {}).update(tickmode="array", tickvals=on, ticktext=[_wrap(c, width) for c in on],
                                           tickangle=0)


def _crowded_categories(fig_dict: dict) -> None:
    """Short category labels that would not fit side by side in their panel stand upright (-90°):
    plotly's own choice misjudges labels of several lines."""
    layout = fig_dict["layout"]
    for name in _axis_names(fig_dict):
        axis = layout.get(name) or {}
        if name[0] != "x" or "tickangle" in axis:
            continue
        on = list(dict.fromkeys(str(v) for t in fig_dict.get("data", []) if _on_axis(t, name)
                                for v in _plain(t.get("x")) if isinstance(v, str)))
        if not on:
            continue
        lo, hi = axis.get("domain") or (0, 1)
        widest = max(len(line) for c in on for line in _visible(re.sub(r"<br\s*/?>", "\n", c)).split("\n"))
        if len(on) * (widest * _CHAR_PX + 8) > _plot_px(fig_dict) * (hi - lo):
            layout.setdefault(name, {})["tickangle"] = -90


def value_slider(name: str, label: str, values, current: float, y: float) -> dict:
    """A plotly slider over ``values``, starting at the one nearest ``current``, that only reports its
    value: its steps run no plotly method, so a chart's own ``post_script`` recomputes the figure on
    ``plotly_sliderchange`` (``e.slider.name``, ``e.step.value``)."""
    active = min(range(len(values)), key=lambda i: abs(values[i] - current))
    return dict(name=name, active=active, y=y, yanchor="top", len=0.9, x=0.05, pad=dict(t=0, b=10),
                font=dict(size=11), currentvalue=dict(prefix=f"{label}: ", xanchor="left", font=dict(size=13)),
                steps=[dict(method="skip", label=f"{v:g}", value=str(v), args=[]) for v in values])


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


#: Fewest runs behind a point before it gets an error bar: one run has no spread, and two give a range
#: that a bar would overstate.
MIN_RUNS_FOR_BARS = 3


def series_order(values) -> list:
    """The distinct ``values`` in order of appearance, or in numeric order when each holds one number
    with the same words around it (threads 1, 4, 16, 64; "W=2", "W=8")."""
    seen = list(dict.fromkeys(values))
    keys = [_natural_key(v) for v in seen]
    if len(seen) > 1 and all(k is not None for k in keys) and len({(k[0], k[2]) for k in keys}) == 1:
        return [v for _, v in sorted(zip([k[1] for k in keys], seen, strict=True), key=lambda p: p[0])]
    return seen


def _runs_text(lo: float, hi: float, n, unit: str, band_label: str) -> str:
    """The hover's spread of one point: the range with the number of runs, or why no bar is drawn."""
    from datajourney.core.findings import num, span

    if n is None or n != n:
        return span(lo, hi, unit)
    n = int(n)
    if n < 2:
        return "none (one run)"
    if n < MIN_RUNS_FOR_BARS:
        return f"{num(lo, unit)} and {num(hi, unit)} ({n} runs, too few for a bar)"
    over = "" if "over" in band_label else (f" over {n} runs" if band_label.startswith("min–max") else f" (n = {n})")
    return span(lo, hi, unit) + over


def range_bars(centre, low, high, n=None) -> dict:
    """Error bars from ``low`` to ``high`` around ``centre``, drawn only at points with at least
    :data:`MIN_RUNS_FOR_BARS` runs (``n`` None: every point)."""
    centre, low, high = (list(map(float, v)) for v in (centre, low, high))
    ns = list(n) if n is not None else [None] * len(centre)
    keep = [k is None or (k == k and k >= MIN_RUNS_FOR_BARS) for k in ns]
    return dict(type="data", symmetric=False, visible=any(keep),
                array=[h - c if s else None for c, h, s in zip(centre, high, keep, strict=True)],
                arrayminus=[c - lo if s else None for c, lo, s in zip(centre, low, keep, strict=True)])


def bars_label(n, band_label: str) -> str:
    """What a chart's error bars are, for its axis title: "bars: min–max over 5 runs", or "one run"
    when no point has runs enough for a bar."""
    ns = sorted({int(k) for k in (n if n is not None else []) if k is not None and k == k})
    if not ns:
        return f"bars: {band_label}"
    if ns[-1] < MIN_RUNS_FOR_BARS:
        return "one run" if ns[-1] == 1 else f"{ns[-1]} runs at most: no error bars"
    runs = str(ns[0]) if ns[0] == ns[-1] else f"{ns[0]}–{ns[-1]}"
    label = band_label if "over" in band_label or not band_label.startswith("min–max") else \
        f"{band_label} over {runs} runs"
    if ns[0] < MIN_RUNS_FOR_BARS:
        return f"bars: {band_label}, drawn where {MIN_RUNS_FOR_BARS} runs or more"
    return f"bars: {label}"


def lines_with_band(
    summary: pd.DataFrame, *, x: str, color: str, title: str, xaxis: str, yaxis: str,
    log_x: bool = True, log_y: bool = False, unit: str = "MB/s", x_format=str,
    centre: str = "mean", low: str = "min", high: str = "max", band_label: str = "min–max",
) -> go.Figure:
    """One line per ``color`` value (numeric values in numeric order): the ``centre`` column with error
    bars from ``low`` to ``high`` where a point has :data:`MIN_RUNS_FOR_BARS` runs or more (``n``).

    The hover names what the bars are (``band_label``: "min–max" over runs by default, or
    e.g. "p10–p90" for percentiles), so a reader never mistakes a range for a std."""
    fig = go.Figure()
    for i, name in enumerate(series_order(summary[color])):
        g = summary[summary[color] == name].sort_values(x)
        n = g["n"] if "n" in g else None
        spread = [_runs_text(a, b, k, unit, band_label) for a, b, k in
                  zip(g[low], g[high], n if n is not None else [None] * len(g), strict=True)]
        fig.add_scatter(
            x=g[x], y=g[centre], name=str(name), mode="lines+markers",
            line=dict(color=PALETTE[i % len(PALETTE)]), error_y=range_bars(g[centre], g[low], g[high], n),
            customdata=list(zip(g[x].map(x_format), spread, strict=True)),
            hovertemplate=(f"<b>{name}</b><br>{xaxis}: %{{customdata[0]}}<br>{centre} %{{y:,.3~r}} {unit}"
                           f"<br>{band_label}: %{{customdata[1]}}<extra></extra>"),
        )
    fig.update_layout(title=title, legend_title_text=color)
    fig.update_xaxes(title_text=xaxis, type="log" if log_x else "linear")
    fig.update_yaxes(title_text=f"{yaxis} ({bars_label(summary.get('n'), band_label)})",
                     type="log" if log_y else "linear")
    return fig


def lines(df: pd.DataFrame, *, x: str, y: str, color: str, title: str, xaxis: str, yaxis: str,
          unit: str = "", log_x: bool = False, log_y: bool = False) -> go.Figure:
    """One line per ``color`` value (numeric values in numeric order) of single measurements (no spread)."""
    fig = go.Figure()
    for i, name in enumerate(series_order(df[color])):
        g = df[df[color] == name].sort_values(x)
        fig.add_scatter(x=g[x], y=g[y], name=str(name), mode="lines+markers", line=dict(color=PALETTE[i % 8]),
                        hovertemplate=f"<b>{name}</b><br>{xaxis}: %{{x}}<br>{yaxis}: %{{y:,.1f}} {unit}<extra></extra>")
    fig.update_layout(title=title, legend_title_text=color)
    fig.update_xaxes(title_text=xaxis, type="log" if log_x else "linear")
    fig.update_yaxes(title_text=yaxis, type="log" if log_y else "linear", rangemode="tozero")
    return fig


def stacked_step_bars(summary: pd.DataFrame, *, x: str, xaxis: str, title: str) -> go.Figure:
    """Per-step time split into data wait and compute (steady-state means; error bars and hover:
    the 10th–90th percentile of the steps, and the standard deviation)."""
    fig = go.Figure()
    lab = summary[x].astype(str)
    err_w, lo_w, hi_w, what = _spread(summary, "wait")
    err_c, lo_c, hi_c, _ = _spread(summary, "compute")
    std_w = summary["wait_std_ms"].fillna(0)
    std_c = summary["compute_std_ms"].fillna(0) if "compute_std_ms" in summary else summary["compute_ms"] * 0
    fig.add_bar(x=lab, y=summary["wait_ms"], name="waiting for data", marker_color=PALETTE[5], error_y=err_w,
                customdata=list(zip(summary["predicted_wait_ms"], summary["idle_share"], lo_w, hi_w, std_w,
                                    summary["steps"], strict=True)),
                hovertemplate=("W=%{x}: data wait, mean %{y:,.1f} ms ± %{customdata[4]:,.1f} (std)"
                               "<br>p10–p90 of the steps: %{customdata[2]:,.1f} – %{customdata[3]:,.1f} ms"
                               "<br>model: %{customdata[0]:,.1f} ms · GPU idle %{customdata[1]:.0%}"
                               "<br>steps: %{customdata[5]}<extra></extra>"))
    fig.add_bar(x=lab, y=summary["compute_ms"], name="computing", marker_color=PALETTE[0], error_y=err_c,
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
    return f"{title}<br><sup>error bars: {what}</sup>"


def measured_vs_model(summary: pd.DataFrame, *, title: str) -> go.Figure:
    """Measured data wait (points, error bars p10–p90 of the steps) against the model (dashed line),
    one panel per kind of work, the workers as categories (W = 0, 1, 2 are not squeezed together),
    one log axis shared by the panels. A log axis cannot show zero: where the model predicts no
    wait, a hollow triangle sits on the axis floor instead of a line plunging to nothing."""
    import numpy as np
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
    for i, kind in enumerate(kinds, start=1):
        g = summary[summary["work"] == kind].sort_values("workers")
        x = g["workers"].astype(int).astype(str)
        model = g["predicted_wait_ms"].where(g["predicted_wait_ms"] > 0)
        fig.add_scatter(x=x, y=model, mode="lines+markers", name="model", connectgaps=False, legendgroup="model",
                        showlegend=i == 1, line=dict(color=PALETTE[1], dash="dash"),
                        marker=dict(color=PALETTE[1], symbol="line-ew-open", size=12),
                        hovertemplate=f"<b>{kind}</b> model<br>W=%{{x}}: %{{y:,.1f}} ms<extra></extra>",
                        row=1, col=i)
        zero = g[g["predicted_wait_ms"] <= 0]
        if len(zero):
            fig.add_scatter(x=zero["workers"].astype(int).astype(str), y=[floor] * len(zero), mode="markers",
                            name="model: no wait (on the axis floor)", legendgroup="zero", showlegend=i == 1,
                            marker=dict(color=PALETTE[1], symbol="triangle-down-open", size=10),
                            hovertemplate=(f"<b>{kind}</b> model<br>W=%{{x}}: no wait (0 ms, drawn on the axis "
                                           "floor)<extra></extra>"), row=1, col=i)
        err, lo, hi, what = _spread(g, "wait")
        fig.add_scatter(x=x, y=g["wait_ms"], mode="markers", name="measured (mean)", legendgroup="measured",
                        showlegend=i == 1, marker=dict(color=PALETTE[0], size=9), error_y=err,
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
    for i, (pers, part) in enumerate(g.groupby("persistent_workers", sort=True)):
        name = "persistent_workers=True" if pers else "persistent_workers=False"
        fig.add_scatter(x=part["step"], y=part["median"], name=name, mode="lines+markers",
                        line=dict(color=PALETTE[[5, 0][i % 2]]),
                        error_y=range_bars(part["median"], part["min"], part["max"], part["n"]),
                        customdata=list(zip(part["min"], part["max"], part["n"], strict=True)),
                        hovertemplate=(f"<b>{name}</b><br>step %{{x}}: median wait %{{y:,.1f}} ms"
                                       "<br>min–max over runs: %{customdata[0]:,.1f} – %{customdata[1]:,.1f} ms"
                                       "<br>runs: %{customdata[2]}<extra></extra>"))
    fig.add_vline(x=steps_per_epoch - 0.5, line=dict(dash="dot", color="#555555"), annotation_text="epoch 2")
    fig.update_layout(title=_bars_note(title, "min–max over runs (points: median)"), legend_title_text="workers",
                      margin=dict(t=100))
    fig.update_xaxes(title_text="training step")
    fig.update_yaxes(title_text="data wait (ms, log scale)", type="log")
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


#: Phase colours shared by the chapter 7 charts.
PHASE_COLOURS = {"DATALOADER_WAIT": PALETTE[5], "H2D_TRANSFER": PALETTE[6], "FORWARD": PALETTE[0],
                 "BACKWARD": PALETTE[4], "OPTIMIZER": PALETTE[2]}
FORMAT_COLOURS = {"imagefolder": PALETTE[0], "mds": PALETTE[1]}


#: Readable names of the profiler's phases (the record_function ranges), for legends and hovers.
PHASE_NAMES = {"DATALOADER_WAIT": "data wait", "H2D_TRANSFER": "copy to GPU", "FORWARD": "forward",
               "BACKWARD": "backward", "OPTIMIZER": "optimizer"}


def _subtitle(title: str, note: str) -> str:
    """A chart title with a smaller second line (what the bars and error bars are)."""
    return f"{title}<br><sup>{note}</sup>"


def _format_facets(summary: pd.DataFrame):
    from plotly.subplots import make_subplots

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
    from plotly.subplots import make_subplots

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
    fig.update_layout(title=_subtitle(title, "mean over runs of each phase per step"), barmode="stack",
                      legend_title_text="phase", height=120 + 34 * sum(counts) + 60 * len(fmts))
    fig.update_xaxes(title_text="ms per step", row=len(fmts), col=1)
    return fig


def au_and_ceiling(summary: pd.DataFrame, *, title: str, au_rule: float = 0.90, keep_up: float = 0.95) -> go.Figure:
    """AU (%) and throughput as % of its own step's ceiling (eager or CUDA graphs) per scenario: mean over runs, error
    bars min–max.
    The two thresholds are dashed lines named in the legend (no annotations to collide)."""
    fig, fmts = _format_facets(summary)
    for ci, fmt in enumerate(fmts, start=1):
        d = summary[summary["format"] == fmt]
        x = list(_short(d, "<br>"))
        au, lo, hi = 100 * d["au"], 100 * d.get("au_min", d["au"]), 100 * d.get("au_max", d["au"])
        fig.add_bar(x=x, y=au, name="AU (%)", legendgroup="au", showlegend=ci == 1, marker_color=PALETTE[0],
                    error_y=range_bars(au, lo, hi, d["runs"]),
                    customdata=list(zip(lo, hi, d["runs"], strict=True)),
                    hovertemplate=("<b>%{x}</b><br>AU %{y:.1f}% (mean)<br>min–max %{customdata[0]:.1f}–"
                                   "%{customdata[1]:.1f}% over %{customdata[2]} runs<extra></extra>"), row=ci, col=1)
        pc = d["pct_of_ceiling"]
        plo, phi = d.get("pct_of_ceiling_min", pc), d.get("pct_of_ceiling_max", pc)
        fig.add_bar(
            x=x,
            y=pc,
            name="% of ceiling",
            legendgroup="pc",
            showlegend=ci == 1,
            marker_color=PALETTE[1],
            error_y=range_bars(pc, plo, phi, d["runs"]),
            customdata=list(zip(plo, phi, d["runs"], strict=True)),
            hovertemplate=(
                "<b>%{x}</b><br>%{y:.1f}% of its own step's ceiling (mean)<br>min–max %{customdata[0]:.1f}–"
                "%{customdata[1]:.1f}% over %{customdata[2]} runs<extra></extra>"
            ),
            row=ci,
            col=1,
        )
        for y, name, colour in ((100 * au_rule, f"AU rule ({100 * au_rule:.0f}%)", PALETTE[0]),
                                (100 * keep_up, f"keeping up ({100 * keep_up:.0f}% of ceiling)", PALETTE[1])):
            fig.add_hline(y=y, line=dict(dash="dash", color=colour, width=1.5), row=ci, col=1)
            if ci == 1:  # a legend entry for the line (the line itself carries no label to collide)
                fig.add_scatter(x=[None], y=[None], mode="lines", name=name, line=dict(dash="dash", color=colour),
                                hoverinfo="skip", row=ci, col=1)
    fig.update_layout(title=_subtitle(title, "bars: mean over runs; error bars: min–max over runs"), barmode="group",
                      legend_title_text="measure")
    fig.update_xaxes(title_text="DataLoader workers", type="category")
    fig.update_yaxes(title_text="%", range=[0, 110])
    return fig


def wait_per_step(steps: pd.DataFrame, *, title: str) -> go.Figure:
    """Small multiples: one panel per scenario (workers, variant), one line per format: the
    median data wait of each step over the runs, with a min–max band; a linear axis per panel
    (the waits differ by orders of magnitude between panels, not within one)."""
    import math

    from plotly.subplots import make_subplots

    keys = list(dict.fromkeys(zip(steps["workers"].astype(int), steps["variant"], strict=True)))
    cols = min(4, len(keys))
    rows = math.ceil(len(keys) / cols)
    titles = [f"W={w}" + ("" if v == "default" else f", {v}") for w, v in keys]
    fig = make_subplots(rows=rows, cols=cols, shared_xaxes=True, shared_yaxes=False, subplot_titles=titles,
                        vertical_spacing=0.12 if rows > 1 else 0.1, horizontal_spacing=0.06)
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
    fig.update_layout(title=_subtitle(title, "line: median over runs; band: min–max over runs; each panel its own "
                                             "scale"), legend_title_text="format", height=260 * rows + 140)
    fig.update_yaxes(type="linear", rangemode="tozero", nticks=4)
    fig.update_yaxes(title_text="ms", col=1)
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
                        error_y=range_bars(g["compute_ms"], g["compute_min"], g["compute_max"], g["n"]),
                        customdata=g[["compute_min", "compute_max", "n", "compute_p90_ms", "main_cores"]].to_numpy(),
                        hovertemplate=(f"<b>{name}</b><br>%{{x}} busy processes<br>compute %{{y:,.2f}} ms (mean)"
                                       "<br>min–max %{customdata[0]:,.2f}–%{customdata[1]:,.2f} ms over "
                                       "%{customdata[2]} runs<br>p90 of steps %{customdata[3]:,.2f} ms"
                                       "<br>training process %{customdata[4]:.2f} cores<extra></extra>"))
    xs = [load["busy"].min(), load["busy"].max()]
    fig.add_scatter(x=xs, y=[ceiling_ms, ceiling_ms], mode="lines", name="ceiling, no load (mean of its runs)",
                    line=dict(dash="dash", color="#555555", width=1.5),
                    hovertemplate=f"{ceiling_ms:.2f} ms<extra></extra>")
    fig.update_layout(title=_subtitle(title, "compute per step: mean over runs; error bars: min–max over runs"),
                      legend_title_text="mode")
    fig.update_xaxes(title_text="busy processes doing the loader's CPU work")
    fig.update_yaxes(title_text="ms", rangemode="tozero")
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
    fig.update_layout(title=_subtitle(title, "mean over runs of each stage"), barmode="stack",
                      legend_title_text="stage")
    fig.update_xaxes(title_text="DataLoader workers", type="category")
    fig.update_yaxes(title_text="ms per image")
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


# --------------------------------------------------------------------------- chapter 6
def overlap_ratio_chart(summary: pd.DataFrame, *, title: str, too_short: str = "too short to tell") -> go.Figure:
    """Overlap of a copy with CPU work: one panel per host memory (pageable, pinned), one line per
    mode (blocking, non_blocking); the point is the median of the per-round ratios, the bars its
    10th–90th percentile over rounds. Every size keeps its place on the x axis; a size whose copy was
    too short to judge has no point but a grey "no verdict" label (naming the mode when only one
    mode lacks a verdict), so the chart never leads with noise; when no row can be judged every row
    is drawn faded. The "serial" and "fully hidden" lines are labelled outside the plot, on the right,
    where no point can sit; the legend is below."""
    from plotly.subplots import make_subplots

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
        for i, mode in enumerate(("blocking", "non_blocking")):
            g = show[(show["memory"] == mem) & (show["mode"] == mode)].sort_values("size")
            if not len(g):
                continue
            y = 100 * g["overlap"]
            fig.add_scatter(
                x=g["size"].map(lambda s: size_label(int(s))), y=y, name=mode, legendgroup=mode,
                showlegend=not any(t.name == mode for t in fig.data),
                mode="lines+markers", opacity=0.35 if faded else 1.0,
                line=dict(color=PALETTE[i]), marker=dict(size=9),
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
                text = "no verdict" if len(modes) == 2 else f"no verdict<br>({modes[0]})"
                fig.add_annotation(x=size_label(int(size)), y=50, text=text, showarrow=False,
                                   font=dict(size=11, color="#777777"), row=1, col=ci)
        fig.update_xaxes(type="category", categoryorder="array", categoryarray=labels, title_text="copy size",
                         row=1, col=ci)
    for y, text in ((0, "serial"), (100, "fully hidden")):
        fig.add_hline(y=y, line=dict(dash="dot", color="#777777"))
        fig.add_annotation(xref="paper", x=1.0, xanchor="left", y=y, yref="y", text=text, showarrow=False,
                           font=dict(size=11, color="#555555"))
    fig.update_layout(title=title + (" (every row too short to judge: drawn faded)" if faded else ""),
                      legend=dict(title_text="copy mode", orientation="h", yanchor="top", y=-0.3, x=0),
                      margin=dict(r=100, b=110))
    fig.update_yaxes(title_text="overlap (%; point: median, bars: p10–p90)", row=1, col=1)
    return fig


def staging_chart(summary: pd.DataFrame, *, llc_bytes: int | None, title: str) -> go.Figure:
    """Pageable copies and one core's memcpy of the same source against size (median, bars p10–p90),
    with the last-level cache size marked. Copies over the bus are solid, CPU-only memcpy dotted."""
    fig = lines_with_band(summary, x="size", color="measure", title=title, xaxis="buffer size (bytes, log scale)",
                          yaxis="copy rate, bus copies and one core's memcpy (GB/s)", unit="GB/s",
                          x_format=size_label, centre="median", low="p10", high="p90", band_label="p10–p90")
    for t in fig.data:
        if t.name.startswith("memcpy"):
            t.line.dash = "dot"
    if llc_bytes:
        fig.add_vline(x=llc_bytes, line=dict(dash="dash", color="#555555"),
                      annotation_text=f"last-level cache {size_label(llc_bytes)}", annotation_position="top")
    fig.update_layout(legend_title_text="measure")
    fig.update_yaxes(rangemode="tozero")
    return fig


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
                    marker=dict(color=PALETTE[0], size=8),
                    hovertemplate="round %{x}: the copy added %{y:.2f} ms<extra></extra>")
    fig.add_hline(y=0, line=dict(dash="dot", color="#777777"), annotation_text="fully hidden",
                  annotation_position="bottom left")
    fig.add_hline(y=copy_ms, line=dict(dash="dot", color="#777777"), annotation_text="serial (copy alone)",
                  annotation_position="top left")
    fig.update_layout(yaxis=dict(title_text="time the copy added (ms; single rounds)", tickformat=",.1f"))
    if "sm_clock_mhz" in inter and inter["sm_clock_mhz"].notna().any():
        clk = inter[inter["name"] == "kernel"].set_index("round")["sm_clock_mhz"]
        fig.add_scatter(x=clk.index, y=clk, mode="lines", name="SM clock, kernel-only call (MHz)", yaxis="y2",
                        line=dict(color=PALETTE[1]), hovertemplate="round %{x}: SM clock %{y:.0f} MHz<extra></extra>")
        fig.update_layout(yaxis2=dict(title_text="SM clock, kernel-only call (MHz)", overlaying="y", side="right",
                                      showgrid=False, tickformat="d"))
    fig.update_layout(title=title, legend=dict(title_text="series", orientation="h", yanchor="top", y=-0.25, x=0),
                      margin=dict(r=80, b=120))
    fig.update_xaxes(title_text="round (kernel-only, copy-only and kernel+copy in random order)")
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
    from plotly.subplots import make_subplots

    d = calibration[calibration["phase"] == "drift"]
    t = (d["t_start_s"] - d["t_start_s"].iloc[0]) * 1e3
    clocks = "sm_clock_mhz" in d and d["sm_clock_mhz"].notna().any()
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_scatter(x=t, y=d["step_ms"], mode="lines+markers", name="step time", line=dict(color=PALETTE[0]),
                    hovertemplate="%{x:,.0f} ms into the run: step %{y:.2f} ms<extra></extra>")
    if clocks:
        fig.add_scatter(x=t, y=d["sm_clock_mhz"], mode="lines", name="SM clock (NVML)", secondary_y=True,
                        line=dict(color=PALETTE[1], dash="dot"),
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
    from plotly.subplots import make_subplots

    agg = {"step_ms": ["mean", "min", "max", "count"]}
    clocks = "sm_clock_mhz" in idle and idle["sm_clock_mhz"].notna().any()
    if clocks:
        agg["sm_clock_mhz"] = ["mean"]
        agg["power_w"] = ["mean"]
    g = idle.groupby("gap_ms").agg(agg)
    g.columns = ["_".join(c) for c in g.columns]
    g = g.reset_index()
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_scatter(x=g["gap_ms"], y=g["step_ms_mean"], mode="lines+markers", name="step after the gap",
                    line=dict(color=PALETTE[0]),
                    error_y=range_bars(g["step_ms_mean"], g["step_ms_min"], g["step_ms_max"], g["step_ms_count"]),
                    customdata=list(zip(g["step_ms_min"], g["step_ms_max"], g["step_ms_count"], strict=True)),
                    hovertemplate=("idle gap %{x} ms: step %{y:.2f} ms (mean)<br>min–max over repeats: "
                                   "%{customdata[0]:.2f} – %{customdata[1]:.2f} ms<br>repeats: %{customdata[2]}"
                                   "<extra></extra>"))
    if clocks:
        fig.add_scatter(x=g["gap_ms"], y=g["sm_clock_mhz_mean"], mode="lines+markers", name="SM clock (NVML)",
                        secondary_y=True, line=dict(color=PALETTE[1], dash="dot"), marker=dict(symbol="diamond"),
                        customdata=g["power_w_mean"],
                        hovertemplate="idle gap %{x} ms: SM clock %{y:,.0f} MHz, power %{customdata:,.0f} W"
                                      "<extra></extra>")
        fig.update_yaxes(title_text="SM clock during the step (MHz)", secondary_y=True, showgrid=False,
                         tickmode="auto", nticks=6, tickformat=",.0f")
    fig.add_hline(y=g_ms, line=dict(dash="dash", color="#555555"), annotation_text="calibrated G",
                  annotation_position="bottom right")
    fig.update_layout(title=_bars_note(title, "min–max over repeats (points: mean)"), legend_title_text="",
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
    for i, (cost, part) in enumerate(g.groupby("cost", sort=False)):
        fig.add_scatter(x=part["prefetch_factor"].astype(str), y=part["mean"], name=f"{cost} cost per sample",
                        mode="lines+markers", line=dict(color=PALETTE[[0, 5][i % 2]]),
                        error_y=range_bars(part["mean"], part["min"], part["max"], part["n"]),
                        customdata=list(zip(part["min"], part["max"], part["n"], strict=True)),
                        hovertemplate=(f"<b>{cost}</b><br>prefetch_factor %{{x}}: mean wait %{{y:,.2f}} ms"
                                       "<br>min–max over runs: %{customdata[0]:,.2f} – %{customdata[1]:,.2f} ms"
                                       "<br>runs: %{customdata[2]}<extra></extra>"))
    fig.update_layout(title=_bars_note(title, "min–max over runs (points: mean)"), legend_title_text="work",
                      margin=dict(t=100))
    fig.update_xaxes(title_text="prefetch_factor", type="category")
    fig.update_yaxes(title_text="mean data wait per step (ms)", rangemode="tozero")
    return fig


# ------------------------------------------------------------------ chapters 2 and 3: small multiples
def _facet_grid(n: int, titles: list[str] | None, shared_y: bool):
    from plotly.subplots import make_subplots

    return make_subplots(rows=1, cols=n, shared_yaxes=shared_y, subplot_titles=titles,
                         horizontal_spacing=0.08 if not shared_y else 0.04)


def bars_facets(summary: pd.DataFrame, *, x: str, color: str, facet: str | None, title: str, xaxis: str, yaxis: str,
                unit: str = "MB/s", shared_y: bool = False, names: dict | None = None,
                band_label: str = "min–max") -> go.Figure:
    """Grouped bars of a :func:`datajourney.core.stats.summarise` table in one panel per ``facet``
    value, each panel on its own linear axis from zero (bar heights compare as ratios within a
    panel; ``facet`` None: one panel). Error bars: min–max over the runs, where a bar has
    :data:`MIN_RUNS_FOR_BARS` runs or more; the hover gives the range and the runs."""
    facets = list(dict.fromkeys(summary[facet])) if facet else [None]
    series = series_order(summary[color])
    fig = _facet_grid(len(facets), [f"{facet}: {f}" for f in facets] if facet else None, shared_y)
    for ci, fv in enumerate(facets, start=1):
        part = summary[summary[facet] == fv] if facet else summary
        for i, name in enumerate(series):
            g = part[part[color] == name]
            if g.empty:
                continue
            label = (names or {}).get(name, str(name))
            n = g["n"] if "n" in g else None
            spread = [_runs_text(a, b, k, unit, band_label) for a, b, k in
                      zip(g["min"], g["max"], n if n is not None else [None] * len(g), strict=True)]
            fig.add_bar(
                x=g[x].astype(str), y=g["mean"], name=label, legendgroup=label, showlegend=ci == 1,
                marker_color=PALETTE[i % len(PALETTE)], error_y=range_bars(g["mean"], g["min"], g["max"], n),
                customdata=spread,
                hovertemplate=(f"<b>{label}</b>" + (f" ({facet}: {fv})" if facet else "")
                               + f"<br>{xaxis}: %{{x}}<br>mean %{{y:,.3~r}} {unit}"
                               f"<br>{band_label}: %{{customdata}}<extra></extra>"),
                row=1, col=ci,
            )
    fig.update_layout(title=title, barmode="group", legend_title_text=color,
                      legend=dict(orientation="h", yanchor="top", y=-0.22, x=0))
    fig.update_xaxes(title_text=xaxis, type="category")
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(title_text=f"{yaxis} ({bars_label(summary.get('n'), band_label)})", row=1, col=1)
    return fig


def lines_facets(summary: pd.DataFrame, *, x: str, color: str, facet: str, title: str, xaxis: str, yaxis: str,
                 unit: str = "", centre: str = "mean", low: str = "min", high: str = "max",
                 band_label: str = "min–max", log_x: bool = False, log_y: bool = False, shared_y: bool = False,
                 names: dict | None = None, y_format: str = ",.3~r") -> go.Figure:
    """One panel per ``facet`` value, one line per ``color`` value (numeric values in numeric order):
    ``centre`` with error bars from ``low`` to ``high`` where a point has :data:`MIN_RUNS_FOR_BARS` runs
    or more (named by ``band_label`` on the axis and in the hover)."""
    facets = list(dict.fromkeys(summary[facet]))
    series = series_order(summary[color])
    fig = _facet_grid(len(facets), [f"{facet}: {f}" for f in facets], shared_y)
    for ci, fv in enumerate(facets, start=1):
        part = summary[summary[facet] == fv]
        for i, name in enumerate(series):
            g = part[part[color] == name].sort_values(x)
            if g.empty:
                continue
            label = (names or {}).get(name, str(name))
            n = g["n"] if "n" in g else None
            spread = [_runs_text(a, b, k, unit, band_label) for a, b, k in
                      zip(g[low], g[high], n if n is not None else [None] * len(g), strict=True)]
            fig.add_scatter(
                x=g[x], y=g[centre], name=label, legendgroup=label, showlegend=ci == 1, mode="lines+markers",
                line=dict(color=PALETTE[i % len(PALETTE)]), error_y=range_bars(g[centre], g[low], g[high], n),
                customdata=spread,
                hovertemplate=(f"<b>{label}</b> ({facet}: {fv})<br>{xaxis}: %{{x}}<br>{centre} %{{y:{y_format}}} {unit}"
                               f"<br>{band_label}: %{{customdata}}<extra></extra>"),
                row=1, col=ci,
            )
    fig.update_layout(title=title, legend_title_text=color, legend=dict(orientation="h", yanchor="top", y=-0.22, x=0))
    fig.update_xaxes(title_text=xaxis, type="log" if log_x else "linear")
    fig.update_yaxes(type="log" if log_y else "linear")
    if not log_y:
        fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(title_text=f"{yaxis} ({bars_label(summary.get('n'), band_label)})", row=1, col=1)
    return fig


def hbars(rows: pd.DataFrame, *, title: str, xaxis: str, unit: str, line: float | None = None,
          line_label: str = "", log_x: bool | str = "auto", leave_out=()) -> go.Figure:
    """Horizontal bars (long labels stay readable) of ``rows`` (``label``, ``mean``, ``min``, ``max``, ``n``),
    largest on top, min–max bars where a row has :data:`MIN_RUNS_FOR_BARS` runs or more; ``line``: a
    dashed reference value.

    ``log_x="auto"`` draws a log axis when the values span more than :data:`LOG_SPAN` (one fast path would
    make every other a sliver); on a log axis each row is a dot with its range, not a bar, because a bar's
    length from an arbitrary floor means nothing. ``leave_out``: labels not drawn, each named with its
    value under the title (for one value off every other's scale)."""
    from datajourney.core.findings import num

    gone = rows[rows["label"].isin(list(leave_out))]
    r = rows[~rows["label"].isin(list(leave_out))].sort_values("mean")
    values = [v for v in r["mean"] if v > 0]
    log = bool(values) and (max(values) / min(values) > LOG_SPAN if log_x == "auto" else bool(log_x))
    n = r["n"] if "n" in r else None
    spread = [_runs_text(a, b, k, unit, "min–max") for a, b, k in
              zip(r["min"], r["max"], n if n is not None else [None] * len(r), strict=True)]
    err = range_bars(r["mean"], r["min"], r["max"], n)
    hover = f"<b>%{{y}}</b><br>mean %{{x:,.3~r}} {unit}<br>min–max: %{{customdata}}<extra></extra>"
    if log:
        fig = go.Figure(go.Scatter(y=r["label"], x=r["mean"], mode="markers", marker=dict(size=11, color=PALETTE[0]),
                                   error_x=err, customdata=spread, hovertemplate=hover))
    else:
        fig = go.Figure(go.Bar(y=r["label"], x=r["mean"], orientation="h", marker_color=PALETTE[0], error_x=err,
                               customdata=spread, hovertemplate=hover))
    if line is not None:
        fig.add_vline(x=line, line=dict(dash="dash", color="#555555"), annotation_text=line_label,
                      annotation_position="top")
    notes = [f"not drawn: {g['label']}, {num(g['mean'], unit)}" for _, g in gone.iterrows()]
    scale = "log scale, " if log else ""
    fig.update_layout(title=_subtitle(title, "; ".join(notes)) if notes else title, showlegend=False,
                      height=max(260, 80 + 34 * len(r)))
    fig.update_xaxes(title_text=f"{xaxis} ({scale}{bars_label(n, 'min–max')})", type="log" if log else "linear",
                     **({} if log else {"rangemode": "tozero"}))
    fig.update_yaxes(type="category")
    return fig


def latency_distribution(cdf: pd.DataFrame, *, floor_us: float, title: str, floor_label: str) -> go.Figure:
    """Cumulative distribution of single-request latencies (one line per series, log x), with a
    vertical marker at ``floor_us`` (e.g. the fastest a flash read can be)."""
    fig = go.Figure()
    for i, (name, g) in enumerate(cdf.groupby("series", sort=False)):
        g = g.sort_values("quantile")
        fig.add_scatter(x=g["us"], y=100 * g["quantile"], name=str(name), mode="lines+markers",
                        line=dict(color=PALETTE[i % len(PALETTE)]), marker=dict(size=5),
                        hovertemplate=(f"<b>{name}</b><br>%{{y:.3~r}}% of requests took at most %{{x:,.3~r}} µs"
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
    instead of plotly's log-axis digits; every second (third…) value when all would not fit side by
    side in the narrowest panel."""
    vals = sorted({int(v) for v in values})
    text = [(label or size_label)(v) for v in vals]
    widths = [d[1] - d[0] for d in (ax.domain or (0, 1) for ax in fig.select_xaxes())] or [1]
    room = _PLOT_PX * min(widths) / (max(map(len, text), default=1) * _CHAR_PX + 14)
    step = max(1, math.ceil(len(vals) / max(room, 1)))
    fig.update_xaxes(tickmode="array", tickvals=vals[::step], ticktext=text[::step], minor=dict(showgrid=False))
    return fig


def _share_label(v: float, digits: int | None = None) -> str:
    """A percentage (0–100) with as few digits as read well, but never '100%' below 100 nor '0%' above 0."""
    d = digits if digits is not None else (1 if v < 10 else 0)
    while d < 6 and ((v < 100 and round(v, d) >= 100) or (v > 0 and round(v, d) == 0)):
        d += 1
    return f"{v:.{d}f}%"


def efficiency_bars(df: pd.DataFrame, *, title: str) -> go.Figure:
    """Efficiency of each layout in each population (``layout``, ``population``, ``efficiency`` in %).

    Exact counts, not measurements: no error bars."""
    fig = go.Figure()
    for i, (pop, g) in enumerate(df.groupby("population", sort=False)):
        fig.add_bar(x=g["layout"], y=g["efficiency"], name=str(pop), marker_color=PALETTE[i % len(PALETTE)],
                    text=[_share_label(v) for v in g["efficiency"]], textposition="outside",
                    customdata=[_share_label(v, digits=2) for v in g["efficiency"]],
                    hovertemplate=f"<b>{pop}</b><br>%{{x}}: %{{customdata}} of positions are real tokens"
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
        hovertemplate=("<b>%{y}</b><br>%{x:,.3~r} s for all samples<br>bar: min–max %{customdata[0]:,.3~r} – "
                       "%{customdata[1]:,.3~r} s<br>%{customdata[2]}<extra>" + source + "</extra>")))
    fig.update_layout(title=title, height=120 + 50 * len(df))
    fig.update_xaxes(title_text="time for all samples (s, log scale; bar: min–max)", type="log")
    fig.update_yaxes(title_text="layout", autorange="reversed")
    return fig


# -- chapter 8 --


# -- chapter 9 --


# -- chapter 10 --
def heatmap_pair(df: pd.DataFrame, *, value: str, facet: str, title: str, unit: str, scale: float = 1.0,
                 names: dict | None = None) -> go.Figure:
    """One heatmap per ``facet`` value over sequence length (y) × batch size (x), the cell text the
    value (mean over runs) in ``unit``; one colour scale shared by the panels."""
    facets = list(dict.fromkeys(df[facet]))
    fig = _facet_grid(len(facets), [str((names or {}).get(f, f)) for f in facets], True)
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



# -- chapter 11 --
def topology_matrix(topo: pd.DataFrame, *, title: str, legend: dict) -> go.Figure:
    """``nvidia-smi topo -m`` as a grid: one cell per device pair, coloured by link kind, labelled
    with the link as nvidia-smi prints it; the hover explains the link."""
    import re

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
    from plotly.subplots import make_subplots

    paths = list(dict.fromkeys(df["path"]))
    counts = [int((df["path"] == p).sum()) for p in paths]
    fig = make_subplots(rows=len(paths), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        row_heights=[max(c, 1) for c in counts], subplot_titles=paths)
    parts = [("forward", "forward", PALETTE[0]), ("backward", "backward (compute)", PALETTE[2]),
             ("exposed", "waiting for the all-reduce (exposed NCCL)", PALETTE[5]),
             ("optimizer", "optimizer", PALETTE[1])]
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


# -- end of chapters --
