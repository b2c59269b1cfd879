"""Interactive plotly charts that work in Jupyter and in the static, offline book.

:func:`setup` registers a renderer that emits both plotly's own mimetype (JupyterLab
draws it natively) and a ``text/html`` fragment without plotly.js or MathJax (the book
renders that; plotly.js is served once per page by :mod:`datajourney.book`). Colours
are the Okabe–Ito palette, which stays distinguishable with the common colour-vision
deficiencies.
"""
from __future__ import annotations

import json
import math
import numbers as numbers_
import re

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.io._base_renderers import MimetypeRenderer

from datajourney.core.phrasing import superscript
from datajourney.core.units import size_label  # noqa: F401 - charts label byte sizes with it

#: Okabe & Ito (2008), "Color Universal Design": safe for deuteranopia/protanopia/tritanopia.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]


class BookRenderer(MimetypeRenderer):
    """plotly JSON for live notebooks + an HTML fragment for the static book."""

    def to_mimebundle(self, fig_dict):
        tidy(fig_dict)
        return {"application/vnd.plotly.v1+json": fig_dict, "text/html": html(fig_dict)}


def html(fig_dict: dict, *, trusted_script: bool = True) -> str:
    """A figure's HTML fragment as the book renders it (no plotly.js, no MathJax), with its ``post_script``
    (``layout.meta``). A figure read from elsewhere (``trusted_script`` False, e.g. a run directory's
    notebook) keeps its script only when it is a registered one with its state (:func:`script`)."""
    meta = (fig_dict.get("layout") or {}).get("meta")
    post = meta.get("post_script") if isinstance(meta, dict) else None
    if post is not None and not trusted_script:
        post = _registered(post)
        meta = {k: v for k, v in meta.items() if k != "post_script"} | ({"post_script": post} if post else {})
        fig_dict = {**fig_dict, "layout": {**fig_dict["layout"], "meta": meta}}
    return pio.to_html(fig_dict, include_plotlyjs=False, include_mathjax=False, full_html=False,
                       config={"displaylogo": False, "responsive": True}, post_script=post)


#: The templates of the scripts a chart may run (:func:`script_template`).
_SCRIPTS: set[str] = set()


def script_template(template: str) -> str:
    """Register a chart script: JavaScript with one ``%s`` where :func:`script` puts the chart's state."""
    _SCRIPTS.add(template)
    return template


def script(template: str, state) -> str:
    """A chart's ``post_script``: a registered ``template`` with ``state`` as JSON in which no string can end
    the ``<script>`` element (``<``, ``>`` and ``&`` as JSON escapes)."""
    if template not in _SCRIPTS:
        raise ValueError("a chart script must be registered with script_template")
    state_json = json.dumps(state).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return template.replace("%s", state_json, 1)


def _registered(post) -> str | None:
    """``post`` written again by :func:`script` when it is a registered template around a JSON state; else None."""
    if not isinstance(post, str):
        return None
    for template in _SCRIPTS:
        head, _, tail = template.partition("%s")
        if len(post) >= len(head) + len(tail) and post.startswith(head) and post.endswith(tail):
            try:
                return script(template, json.loads(post[len(head):len(post) - len(tail)]))
            except ValueError:
                continue
    return None


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
    names = _axis_names(fig_dict)
    shared = _shared_values(layout, data, names)
    for name in names:
        axis = layout.setdefault(name, {})
        values = shared.get(name) or _axis_values(data, name)
        axis.setdefault("automargin", True)
        if _is_category(axis, values):
            _numeric_categories(axis, values)
            continue
        numbers = [float(v) for v in values if isinstance(v, numbers_.Real) and not isinstance(v, bool)
                   and math.isfinite(v)]
        axis.setdefault("exponentformat", "none")
        axis.setdefault("separatethousands", True)
        was_log = axis.get("type") == "log"
        if was_log:   # drawn linear when its range is narrow: a count axis then gets whole ticks all the same
            kept = set(meta.get(_LOG_KEY, [])) if isinstance(meta, dict) else set()
            _log_axis(fig_dict, name, axis, [v for v in numbers if v > 0 and math.isfinite(v)],
                      narrow_too=name[0] in kept)
        if axis.get("type") in (None, "linear", "-") and numbers and (
                name[0] in counts or (not was_log and all(v.is_integer() for v in numbers))):
            _integer_ticks(axis, numbers)
    _wrap_axis_titles(layout, _plot_px(fig_dict))
    _legend_under_axis_titles(layout)
    _title_above(layout)
    return fig_dict


def _shared_values(layout: dict, data: list, names: list[str]) -> dict[str, list]:
    """For axes tied together (``matches``: facets with a shared y), every tied axis's values, so that the one axis
    that shows tick labels places them over the range all panels draw, not over its own panel's."""
    groups: dict[str, list[str]] = {}
    for name in names:
        ref = (layout.get(name) or {}).get("matches")
        root = f"{ref[0]}axis{ref[1:]}" if isinstance(ref, str) and ref else name
        groups.setdefault(root, []).append(name)
    out = {}
    for members in groups.values():
        if len(members) > 1:
            values = [v for m in members for v in _axis_values(data, m)]
            out.update({m: values for m in members})
    return out


#: Key of ``layout.meta`` listing the axis letters (``"x"``, ``"y"``) that :func:`count_axis` marked.
_COUNT_KEY = "count_axes"
#: Category labels longer than this turn bars horizontal (one panel) or wrap (several panels).
LONG_LABEL = 12
#: Rough width of a 13 px character, of the book's text column and of a plot area in it (the column less
#: the tick labels beside the plot), to fit titles and labels before anything is drawn.
_CHAR_PX, _COLUMN_PX, _PLOT_PX = 7.2, 720, 400
#: Category labels on horizontal bars wrap past this many characters (they set the left margin).
_HBAR_LABEL = 28


#: Key of ``layout.meta`` listing the axis letters that :func:`log_axis` keeps logarithmic.
_LOG_KEY = "log_axes"


def log_axis(fig: go.Figure, axis: str = "x") -> go.Figure:
    """Keep every ``axis`` ("x" or "y") of ``fig`` logarithmic however narrow its range (:func:`tidy` draws a
    narrow log axis linear): for a chart whose script moves its points later, over a wider range."""
    return _mark_axis(fig, _LOG_KEY, axis)


def count_axis(fig: go.Figure, axis: str = "x") -> go.Figure:
    """Mark every ``axis`` ("x" or "y") of ``fig`` as counting whole things (workers, GPUs, events):
    its ticks fall on integers only, never "1.5 GPUs" (applied by :func:`tidy` when shown)."""
    return _mark_axis(fig, _COUNT_KEY, axis)


def _mark_axis(fig: go.Figure, key: str, axis: str) -> go.Figure:
    """``axis`` added to the letters ``layout.meta[key]`` lists, for :func:`tidy` to read when the chart is shown."""
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    fig.update_layout(meta={**meta, key: sorted({*meta.get(key, []), axis})})
    return fig


def _legend_below(fig_dict: dict) -> None:
    """A legend on the right whose names are long (over :data:`LEGEND_CHARS`) goes below the plot, across:
    beside it, it would leave the plot a sliver."""
    layout = fig_dict["layout"]
    legend = layout.get("legend") or {}
    if layout.get("showlegend") is False or legend.get("orientation") == "h" or "x" in legend or "y" in legend:
        return
    names = [_visible(t["name"]) for t in fig_dict.get("data", []) if t.get("name")
             and t.get("showlegend", True) is not False]
    if names and max(map(len, names)) > LEGEND_CHARS:
        layout["legend"] = {**legend, "orientation": "h", "yanchor": "top", "y": -0.25, "x": 0}


#: Legend names longer than this move the legend below the plot.
LEGEND_CHARS = 24


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


def tick_text(v: float, powers: bool | None = None) -> str:
    """A tick value as plain text: 0.05, 2, 1,000, 100,000; from a million on a power of ten (10⁶, 2×10⁹),
    whose labels stay short enough to sit side by side on a log axis. ``powers``: the style of the whole axis
    (:func:`_log_axis` passes it), so that an axis reaching 10⁶ reads 10², 10³, 10⁴… throughout, never 100,000
    beside 10⁶."""
    if v >= (100 if powers else 1e6) and powers is not False:
        e = math.floor(math.log10(v) + 1e-9)
        m = round(v / 10.0 ** e, 6)
        power = "10" + superscript(e)
        return power if m == 1 else f"{m:g}×{power}"
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


def _log_axis(fig_dict: dict, name: str, axis: dict, values: list[float], narrow_too: bool = False) -> None:
    """A log axis over less than :data:`LOG_SPAN` of range is drawn linear (its title and hovers lose the
    "log scale" words), unless ``narrow_too`` (:func:`log_axis`); a wider one is labelled 1, 2, 5, 10…
    (powers of ten alone past three decades), never with plotly's small "2, 3" digits."""
    if not values:
        return
    lo, hi = min(values), max(values)
    if isinstance(axis.get("range"), (list, tuple)) and None not in axis["range"] and narrow_too:
        lo, hi = min(lo, 10 ** axis["range"][0]), max(hi, 10 ** axis["range"][1])   # ticks over what is drawn
    if hi / lo < LOG_SPAN and not narrow_too:
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
    length = _plot_px(fig_dict) if name[0] == "x" else _plot_height(fig_dict["layout"])
    if axis.get("tickmode") == "array" or "tickvals" in axis:
        return _thin_ticks(axis, name, values, length)
    lo_d, hi_d = axis.get("domain") or (0, 1)
    px = length * (hi_d - lo_d)
    decades = range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 2)
    candidates = [m * 10.0 ** e for e in decades for m in (1, 2, 5) if lo / 5 <= m * 10.0 ** e <= hi * 5]
    widest = max((len(tick_text(v)) for v in candidates), default=1)  # the longest label that may be drawn
    label = (widest * _CHAR_PX + 14) if name[0] == "x" else 20
    per_decade = px / (math.log10(hi / lo) + 0.5)
    steps = (1, 2, 5) if per_decade >= 3 * label else (1,)
    every = max(1, math.ceil(label / per_decade))   # decades between labels
    vals = [m * 10.0 ** e for e in decades for m in steps if lo / 5 <= m * 10.0 ** e <= hi * 5 and e % every == 0]
    for key in ("dtick", "tick0"):
        axis.pop(key, None)
    powers = hi >= 1e6   # the data reach a million (a candidate tick past them is not what is drawn)
    axis.update(tickmode="array", tickvals=vals, ticktext=[tick_text(v, powers) for v in vals])
    axis.setdefault("minor", {"showgrid": False})


def _plot_height(layout: dict) -> float:
    """Rough height of the plot area: the figure's less its top and bottom margins (a legend below the plot takes
    its share of them), and less a subtitle's lines (a title's second line takes them from the plot, so ticks that
    fit without it can touch with it)."""
    title = layout.get("title")
    text = (title.get("text") if isinstance(title, dict) else title) or ""
    sub = (title.get("subtitle") or {}).get("text") if isinstance(title, dict) else None
    lines = len(re.findall(r"<sup>", text)) + (1 if sub else 0)
    margin, legend = layout.get("margin") or {}, layout.get("legend") or {}
    below = legend.get("orientation") == "h" and (legend.get("y") or 1) < 0 and "b" not in margin
    return ((layout.get("height") or 450) - margin.get("t", 80) - margin.get("b", 70) - (40 if below else 0)
            - lines * (_SUBTITLE_GAP + _SUBTITLE_LINE))


def _thin_ticks(axis: dict, name: str, values: list[float], length_px: float) -> None:
    """Given tick labels (``tickvals``/``ticktext``) on a log axis ``length_px`` long, those :func:`_thinned` keeps:
    sizes from 4 KiB to 1 GiB or rates up to 10⁹ do not fit a narrow plot side by side."""
    vals, text = list(axis.get("tickvals") or []), list(axis.get("ticktext") or [])
    if len(text) != len(vals) or not all(isinstance(v, numbers_.Real) and v > 0 for v in vals):
        return
    lo_d, hi_d = axis.get("domain") or (0, 1)
    pairs = sorted(zip(vals, text, strict=True))
    vals, text = _thinned([v for v, _ in pairs], [t for _, t in pairs], length_px * (hi_d - lo_d), name[0],
                          span=(min([*values, *vals]), max([*values, *vals])))
    axis.update(tickvals=vals, ticktext=text)


def _thinned(vals: list, text: list[str], length_px: float, letter: str, span=None) -> tuple[list, list[str]]:
    """The tick labels (``vals`` sorted, ``text`` theirs) that fit side by side on a log ``letter`` axis ("x" or "y")
    ``length_px`` long over ``span`` (default: the ticks' own range): an even stride (:func:`_stride`), the smallest
    and the largest always kept, so the reader sees where the range ends."""
    lo, hi = span if span else (vals[0], vals[-1]) if vals else (1, 1)
    if len(vals) < 3 or hi <= lo:
        return vals, text
    px = length_px / math.log10(hi / lo * 1.3)
    room = max(len(_visible(t)) for t in text) * _CHAR_PX + 12 if letter == "x" else 26   # one width: even
    keep = _stride([math.log10(v) * px for v in vals], room)
    return [vals[i] for i in keep], [text[i] for i in keep]


#: The smallest range (largest ÷ smallest value) that an axis needs before it is drawn on a log scale.
LOG_SPAN = 30


def _lines(text: str) -> list[str]:
    """A chart text's lines (plotly breaks a line at ``<br>``)."""
    return re.split(r"<br\s*/?>", text)


def _wrap(text: str, width: int) -> str:
    """``text`` broken with <br> at spaces so that no line is longer than ``width`` characters."""
    import textwrap

    lines = []
    for line in _lines(text):
        lines += textwrap.wrap(line, max(width, 8), break_long_words=False) or [""]
    return "<br>".join(lines)


def _visible(text: str) -> str:
    return re.sub(r"<[^>]+>", "", str(text))


def _one_parenthesis(text: str) -> str:
    """An axis title's two closing parentheses joined into one ("IOPS (reads/s) (log scale)" → "IOPS (reads/s, log
    scale)"); the same words twice said once."""
    m = re.search(r"\(([^()]*)\)\s*\(([^()]*)\)\s*$", text)
    if not m:
        return text
    a, b = m.group(1).strip(), m.group(2).strip()
    return f"{text[:m.start()]}({a if a == b else f'{a}, {b}'})"


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
        text = _one_parenthesis(text)
        axis["title"] = {**title, "text": text}
        lo, hi = axis.get("domain") or (0, 1)
        px = (height - 220) * (hi - lo) if key[0] == "y" else (plot_px - 40) * (hi - lo)
        width = int(max(px, 120) / _CHAR_PX)
        if any(len(_visible(line)) > width for line in _lines(text)):
            axis["title"] = {**title, "text": _wrap(text, width)}


#: Height of a line of an axis title (px).
_AXIS_TITLE_LINE = 17


def _legend_under_axis_titles(layout: dict) -> None:
    """A legend below the plot starts under the x axes' titles however many lines they take: its place is a share
    of the plot's height that leaves room for a one-line title, so each further line moves it down by one."""
    legend = layout.get("legend") or {}
    y = legend.get("y")
    if legend.get("orientation") != "h" or not isinstance(y, (int, float)) or y >= 0:
        return
    extra = max((len(_lines(axis["title"]["text"])) - 1 for key, axis in layout.items()
                 if re.fullmatch(r"xaxis\d*", key) and isinstance(axis, dict)
                 and isinstance(axis.get("title"), dict) and isinstance(axis["title"].get("text"), str)), default=0)
    if extra:
        layout["legend"] = {**legend, "y": y - extra * _AXIS_TITLE_LINE / max(_plot_height(layout), 100)}


def _title_above(layout: dict) -> None:
    """The chart's title sits above the plot area and pushes the top margin (plotly's title automargin),
    from the chart's left edge, clear of subplot titles and labels drawn on top of the plot. Its first
    line is the title, further lines its subtitle (plotly draws a multi-line title anchored at its first
    line, down into the plot); a title too long for the column gets a smaller font, then a subtitle."""
    title = layout.get("title")
    title = dict(title) if isinstance(title, dict) else {"text": title}
    if not title.get("text"):
        return
    main, *rest = _lines(str(title["text"]))
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
    # clear of the top y tick's label, which plotly centres on the plot's top edge (half a 12 px line above it),
    # of the labels on the plot's top edge (subplot titles), and of the subtitle: plotly hangs it under the title,
    # inside the title's padding, so the padding holds its lines
    text = (title.get("subtitle") or {}).get("text")
    below = _SUBTITLE_GAP + _SUBTITLE_LINE * (len(re.findall(r"<br\s*/?>", text)) + 1) if text else 0
    pad = {"b": 16 + 22 * lines + below, "l": 10}
    layout["title"] = {"automargin": True, "yref": "paper", "y": 1, "yanchor": "bottom", "xref": "container", "x": 0,
                       "xanchor": "left", **title, "pad": {**pad, **(title.get("pad") or {})}}


#: Characters of a chart title (17 px) that fit the text column.
_TITLE_CHARS = 72
#: Space (px) plotly leaves between a title and its subtitle, and the height of a subtitle's line (12 px text).
_SUBTITLE_GAP, _SUBTITLE_LINE = 10, 17


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
    ``plotly_sliderchange`` (``e.slider.name``, ``e.step.value``). A step is labelled with three significant
    digits at most in its fraction (a run's own 31.5632 ms reads 31.6; 1024 stays 1024), its value kept exact."""
    active = min(range(len(values)), key=lambda i: abs(values[i] - current))
    return dict(name=name, active=active, y=y, yanchor="top", len=0.9, x=0.05, pad=dict(t=0, b=10),
                font=dict(size=11), currentvalue=dict(prefix=f"{label}: ", xanchor="left", font=dict(size=13)),
                steps=[dict(method="skip", label=_slider_label(v), value=str(v), args=[]) for v in values])


def _slider_label(v: float) -> str:
    return f"{round(v, max(0, 2 - math.floor(math.log10(abs(v))))):g}" if v else "0"


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


def runs_text(lo: float, hi: float, n, unit: str, band_label: str, per: str = "runs") -> str:
    """The hover's spread of one point: the range with the number of runs (``per``: what ``n`` counts,
    e.g. "timed windows"), or why no bar is drawn."""
    from datajourney.core.units import num, span

    if n is None or n != n:
        return span(lo, hi, unit)
    n = int(n)
    one = per.split()[-1].removesuffix("s")
    if n < 2:
        return f"none (one {one})"
    if n < MIN_RUNS_FOR_BARS:
        return f"{num(lo, unit)} and {num(hi, unit)} ({n} {per}, too few for a bar)"
    over = "" if "over" in band_label else (f" over {n} {per}" if band_label.startswith("min–max") else f" (n = {n})")
    return span(lo, hi, unit) + over


def _spreads(g: pd.DataFrame, low: str, high: str, unit: str, band_label: str, per: str = "runs"):
    """The runs behind each point of ``g`` (its ``n`` column, None without one) and each point's hover spread."""
    n = g["n"] if "n" in g else None
    return n, [runs_text(a, b, k, unit, band_label, per)
               for a, b, k in zip(g[low], g[high], n if n is not None else [None] * len(g), strict=True)]


def range_bars(centre, low, high, n=None) -> dict:
    """Error bars from ``low`` to ``high`` around ``centre``, drawn only at points with at least
    :data:`MIN_RUNS_FOR_BARS` runs (``n`` None: every point)."""
    centre, low, high = (list(map(float, v)) for v in (centre, low, high))
    ns = list(n) if n is not None else [None] * len(centre)
    keep = [k is None or (k == k and k >= MIN_RUNS_FOR_BARS) for k in ns]
    return dict(type="data", symmetric=False, visible=any(keep),
                array=[h - c if s else None for c, h, s in zip(centre, high, keep, strict=True)],
                arrayminus=[c - lo if s else None for c, lo, s in zip(centre, low, keep, strict=True)])


def bars_label(n, band_label: str, per: str = "runs") -> str:
    """What a chart's error bars are, for its axis title: "bars: min–max over 5 runs", or "one run"
    when no point has runs enough for a bar (``per``: what ``n`` counts, e.g. "timed windows"). The one
    place a chart says what its error bars are: a caption or title never says it in other words."""
    ns = sorted({int(k) for k in (n if n is not None else []) if k is not None and k == k})
    if not ns:
        return f"bars: {band_label}"
    if ns[-1] < MIN_RUNS_FOR_BARS:
        return f"one {per.split()[-1].removesuffix('s')}" if ns[-1] == 1 else \
            f"{ns[-1]} {per} at most: no error bars"
    runs = str(ns[0]) if ns[0] == ns[-1] else f"{ns[0]}–{ns[-1]}"
    label = band_label if "over" in band_label or not band_label.startswith("min–max") else \
        f"{band_label} over {runs} {per}"
    if ns[0] < MIN_RUNS_FOR_BARS:
        return f"bars: {band_label}, drawn where {MIN_RUNS_FOR_BARS} runs or more"
    return f"bars: {label}"


def series_in(values, order: list | None = None) -> list:
    """The series of a chart: those of ``order`` that are present, in its order (so a series keeps its
    place, hence its colour, in every chart of a chapter), then any others (:func:`series_order`)."""
    present = series_order(values)
    if not order:
        return present
    return [v for v in order if v in present] + [v for v in present if v not in order]


def series_colours(series: list, order: list | None = None) -> dict:
    """A colour per series: by its place in ``order`` where it has one (the same in every chart that passes the
    same order, even where some series are missing), the others after it; past the last colour of
    :data:`SERIES_PALETTE` the colours come round again (a chapter with more series than colours orders them so
    that neighbouring charts share none)."""
    order = list(order or [])
    extra = [s for s in series if s not in order]
    return {s: SERIES_PALETTE[(order.index(s) if s in order else len(order) + extra.index(s)) % len(SERIES_PALETTE)]
            for s in series}


#: The colours :func:`series_colours` gives series: the palette less its black, which marks reference lines.
SERIES_PALETTE = [c for c in PALETTE if c != "#000000"]


def dodged(xs, i: int, k: int, spread: float) -> list[float]:
    """The x positions of series ``i`` of ``k``, spread sideways (by a factor, so as much on a log axis) by up
    to ``2**±spread/2``: series measured at the same x stay apart instead of hiding each other."""
    shift = 0.0 if k < 2 else spread * (i / (k - 1) - 0.5)
    return [float(v) * 2 ** shift for v in xs]


#: Column names that name a chart's series without telling a reader anything: no legend title for them.
UNTITLED = frozenset({"label", "series", "line", "kind", "source", "name"})


def legend_title(column: str) -> str:
    """The legend's title for series coloured by ``column``: the column's name where it says what the series are
    ("num_workers", "format"), none where it is a code-side name (:data:`UNTITLED`)."""
    return "" if column in UNTITLED else column


def lines_with_band(
    summary: pd.DataFrame, *, x: str, color: str, title: str, xaxis: str, yaxis: str,
    log_x: bool = True, log_y: bool = False, unit: str = "MB/s", x_format=str,
    centre: str = "mean", low: str = "min", high: str = "max", band_label: str = "min–max",
    order: list | None = None, dodge: float = 0.0,
) -> go.Figure:
    """One line per ``color`` value (numeric values in numeric order, or ``order``): the ``centre`` column
    with error bars from ``low`` to ``high`` where a point has :data:`MIN_RUNS_FOR_BARS` runs or more
    (``n``); ``dodge``: series spread sideways (:func:`dodged`; the hover keeps the measured x).

    The hover names what the bars are (``band_label``: "min–max" over runs by default, or
    e.g. "p10–p90" for percentiles), so a reader never mistakes a range for a std."""
    fig = go.Figure()
    series = series_in(summary[color], order)
    colour = series_colours(series, order)
    for i, name in enumerate(series):
        g = summary[summary[color] == name].sort_values(x)
        n, spread = _spreads(g, low, high, unit, band_label)
        fig.add_scatter(
            x=dodged(g[x], i, len(series), dodge) if dodge else g[x], y=g[centre], name=str(name),
            mode="lines+markers",
            line=dict(color=colour[name]), error_y=range_bars(g[centre], g[low], g[high], n),
            customdata=list(zip(g[x].map(x_format), spread, strict=True)),
            hovertemplate=(f"<b>{name}</b><br>{xaxis}: %{{customdata[0]}}<br>{centre} %{{y:,.3~r}} {unit}"
                           f"<br>{band_label}: %{{customdata[1]}}<extra></extra>"),
        )
    fig.update_layout(title=subtitle(title, bars_label(summary.get("n"), band_label)),
                      legend_title_text=legend_title(color))
    fig.update_xaxes(title_text=xaxis, type="log" if log_x else "linear")
    fig.update_yaxes(title_text=yaxis, type="log" if log_y else "linear")
    return fig


def lines(df: pd.DataFrame, *, x: str, y: str, color: str, title: str, xaxis: str, yaxis: str,
          unit: str = "", log_x: bool = False, log_y: bool = False) -> go.Figure:
    """One line per ``color`` value (numeric values in numeric order) of single measurements (no spread)."""
    fig = go.Figure()
    for i, name in enumerate(series_order(df[color])):
        g = df[df[color] == name].sort_values(x)
        fig.add_scatter(x=g[x], y=g[y], name=str(name), mode="lines+markers", line=dict(color=PALETTE[i % 8]),
                        hovertemplate=f"<b>{name}</b><br>{xaxis}: %{{x}}<br>{yaxis}: %{{y:,.1f}} {unit}<extra></extra>")
    fig.update_layout(title=title, legend_title_text=legend_title(color))
    fig.update_xaxes(title_text=xaxis, type="log" if log_x else "linear")
    fig.update_yaxes(title_text=yaxis, type="log" if log_y else "linear", rangemode="tozero")
    return fig


def subtitle(title: str, *notes: str) -> str:
    """A chart title with a smaller second line: what its points and error bars are (:func:`bars_label`), and any
    other note, joined by "; ". Axis titles name the quantity and its unit only."""
    note = "; ".join(n for n in notes if n)
    if not note:
        return title
    head, sep, had = title.rpartition("<br><sup>")
    if sep and had.endswith("</sup>"):   # one second line: a title that has one already gets the note added to it
        return f"{head}<br><sup>{had.removesuffix('</sup>')}; {note}</sup>"
    return f"{title}<br><sup>{note}</sup>"


# ------------------------------------------------------------------ chapters 2 and 3: small multiples
def facet_grid(n: int, titles: list[str] | None, shared_y: bool):
    from plotly.subplots import make_subplots

    return make_subplots(rows=1, cols=n, shared_yaxes=shared_y, subplot_titles=titles,
                         horizontal_spacing=0.08 if not shared_y else 0.04)


def bars_facets(summary: pd.DataFrame, *, x: str, color: str, facet: str | None, title: str, xaxis: str, yaxis: str,
                unit: str = "MB/s", shared_y: bool = False, names: dict | None = None,
                band_label: str = "min–max", per: str = "runs", order: list | None = None) -> go.Figure:
    """Grouped bars of a :func:`datajourney.core.stats.summarise` table in one panel per ``facet``
    value, each panel on its own linear axis from zero (bar heights compare as ratios within a
    panel; ``facet`` None: one panel), one colour per ``color`` value (by its place in ``order``:
    :func:`series_colours`). Error bars: min–max over the runs, where a bar has
    :data:`MIN_RUNS_FOR_BARS` runs or more; the hover gives the range and the runs."""
    facets = list(dict.fromkeys(summary[facet])) if facet else [None]
    series = series_in(summary[color], order)
    colour = series_colours(series, order)
    fig = facet_grid(len(facets), [_panel_title(facet_label(facet, f), len(facets)) for f in facets] if facet
                     else None, shared_y)
    for ci, fv in enumerate(facets, start=1):
        part = summary[summary[facet] == fv] if facet else summary
        for name in series:
            g = part[part[color] == name]
            if g.empty:
                continue
            label = (names or {}).get(name, str(name))
            n, spread = _spreads(g, "min", "max", unit, band_label, per)
            fig.add_bar(
                x=g[x].astype(str), y=g["mean"], name=label, legendgroup=label, showlegend=ci == 1,
                marker_color=colour[name], error_y=range_bars(g["mean"], g["min"], g["max"], n),
                customdata=spread,
                hovertemplate=(f"<b>{label}</b>" + (f" ({facet}: {fv})" if facet else "")
                               + f"<br>{xaxis}: %{{x}}<br>mean %{{y:,.3~r}} {unit}"
                               f"<br>{band_label}: %{{customdata}}<extra></extra>"),
                row=1, col=ci,
            )
    fig.update_layout(title=subtitle(title, bars_label(summary.get("n"), band_label, per)), barmode="group",
                      legend_title_text=legend_title(color), legend=dict(orientation="h", yanchor="top", y=-0.22, x=0))
    fig.update_xaxes(title_text=xaxis, type="category")
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(title_text=yaxis, row=1, col=1)
    return fig


def facet_label(facet: str, value) -> str:
    """A panel's title: its value where the value names itself ("guest-cold", "Pillow", "reference run, 4 GPUs"),
    "column: value" where it is a bare number ("GPUs: 2"), never the table's column name before a word."""
    text = str(value)
    return text if any(ch.isalpha() for ch in text) else f"{facet}: {text}"


#: Characters of a panel's title that fit the panel's width when a chart has this many panels side by side.
PANEL_TITLE_CHARS = {1: 90, 2: 28, 3: 24}


def _panel_title(text: str, panels: int) -> str:
    """A panel's title on as many lines as its width needs (broken after a comma, else a space), so that the
    outermost panel's never runs past the chart's edge."""
    room = PANEL_TITLE_CHARS.get(panels, 18)
    lines, rest = [], text
    while len(rest) > room:
        cut = max(rest.rfind(", ", 0, room + 1), rest.rfind(" ", 0, room + 1))
        if cut <= 0:
            break
        lines.append(rest[:cut + (1 if rest[cut] == "," else 0)].rstrip())
        rest = rest[cut + 1:].lstrip()
    return "<br>".join([*lines, rest])


def lines_facets(summary: pd.DataFrame, *, x: str, color: str, facet: str, title: str, xaxis: str, yaxis: str,
                 unit: str = "", centre: str = "mean", low: str = "min", high: str = "max",
                 band_label: str = "min–max", log_x: bool = False, log_y: bool = False, shared_y: bool = False,
                 names: dict | None = None, y_format: str = ",.3~r", order: list | None = None) -> go.Figure:
    """One panel per ``facet`` value, one line per ``color`` value (numeric values in numeric order, or
    ``order``: :func:`series_in`): ``centre`` with error bars from ``low`` to ``high`` where a point has
    :data:`MIN_RUNS_FOR_BARS` runs or more (named by ``band_label`` on the axis and in the hover)."""
    facets = list(dict.fromkeys(summary[facet]))
    series = series_in(summary[color], order)
    colour = series_colours(series, order)
    fig = facet_grid(len(facets), [_panel_title(facet_label(facet, f), len(facets)) for f in facets], shared_y)
    for ci, fv in enumerate(facets, start=1):
        part = summary[summary[facet] == fv]
        for name in series:
            g = part[part[color] == name].sort_values(x)
            if g.empty:
                continue
            label = (names or {}).get(name, str(name))
            n, spread = _spreads(g, low, high, unit, band_label)
            fig.add_scatter(
                x=g[x], y=g[centre], name=label, legendgroup=label, showlegend=ci == 1, mode="lines+markers",
                line=dict(color=colour[name]), error_y=range_bars(g[centre], g[low], g[high], n),
                customdata=spread,
                hovertemplate=(f"<b>{label}</b> ({facet}: {fv})<br>{xaxis}: %{{x}}<br>{centre} %{{y:{y_format}}} {unit}"
                               f"<br>{band_label}: %{{customdata}}<extra></extra>"),
                row=1, col=ci,
            )
    fig.update_layout(title=subtitle(title, bars_label(summary.get("n"), band_label)),
                      legend_title_text=legend_title(color), legend=dict(orientation="h", yanchor="top", y=-0.22, x=0))
    fig.update_xaxes(title_text=xaxis, type="log" if log_x else "linear")
    fig.update_yaxes(type="log" if log_y else "linear")
    if not log_y:
        fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(title_text=yaxis, row=1, col=1)
    return fig


def latency_distribution(cdf: pd.DataFrame, *, floor_us: float, title: str, order: list | None = None) -> go.Figure:
    """Cumulative distribution of single-request latencies (one line per series, log x; colours by place in
    ``order``: :func:`series_colours`), with a vertical marker at ``floor_us``, the fastest a NAND flash read
    is (one label in every chapter)."""
    from datajourney.core.units import num

    floor_label = f"flash floor, about {num(floor_us, 'µs')}"
    fig = go.Figure()
    present = list(dict.fromkeys(cdf["series"]))
    colour = series_colours(present, order)
    for name, g in cdf.groupby("series", sort=False):
        g = g.sort_values("quantile")
        fig.add_scatter(x=g["us"], y=100 * g["quantile"], name=str(name), mode="lines+markers",
                        line=dict(color=colour[name]), marker=dict(size=5),
                        hovertemplate=(f"<b>{name}</b><br>%{{y:.3~r}}% of requests took at most %{{x:,.3~r}} µs"
                                       "<extra></extra>"))
    fig.add_vline(x=floor_us, line=dict(dash="dot", color="#555555"))
    fig.add_annotation(x=math.log10(floor_us), y=1.0, yref="paper", yanchor="bottom",
                       text=floor_label, showarrow=False, xanchor="left", font=dict(size=11, color="#555555"))
    fig.update_layout(title=title, legend_title_text="requests", legend=dict(orientation="h", yanchor="top", y=-0.22))
    fig.update_xaxes(title_text="latency of one request (µs, log scale)", type="log")
    fig.update_yaxes(title_text="requests at or below (percent)", range=[0, 101])
    return fig


def _stride(at: list[float], room: float) -> list[int]:
    """Which of the ticks at positions ``at`` (sorted, in px) to label: every k-th from the first, the last always
    kept, with ``room`` px between labels; the most labels, and of as many, a stride that ends on the last tick by
    itself (even spacing)."""
    n, found = len(at), [(2, True, [0, len(at) - 1])]
    for step in range(1, n):
        idx = list(range(0, n, step))
        even = idx[-1] == n - 1
        if not even:
            idx = [i for i in idx if at[-1] - at[i] >= room] + [n - 1]
        if all(at[b] - at[a] >= room for a, b in zip(idx, idx[1:])):
            found.append((len(idx), even, idx))
    return max(found, key=lambda f: (f[0], f[1]))[2]


def size_ticks(fig: go.Figure, values, label=None, *, axis: str = "x", powers: bool = False) -> go.Figure:
    """Label every ``axis`` axis of ``fig`` (drawn on a log scale) in byte sizes ('4 KiB', '1 MiB'), at
    ``values`` (the sizes measured) or, with ``powers``, at the powers of two inside their range (for measured
    sizes that are not round), instead of plotly's decimal digits. Labels that would touch are left out, by their
    positions on the log axis, the smallest and the largest always kept: the reader sees where the range ends."""
    vals = sorted({int(v) for v in values if isinstance(v, numbers_.Real) and math.isfinite(v) and v >= 1})
    if powers and vals:   # the powers of two inside the data's range (a tick outside it is never drawn)
        inner = [1 << k for k in range(math.ceil(math.log2(vals[0])), math.floor(math.log2(vals[-1])) + 1)]
        vals = inner if len(inner) >= 2 else [vals[0], vals[-1]] if len(vals) > 1 else vals
    axes = list(fig.select_xaxes() if axis == "x" else fig.select_yaxes())
    share = min((d[1] - d[0] for d in (ax.domain or (0, 1) for ax in axes)), default=1)
    vals, text = _thinned(vals, [(label or size_label)(v) for v in vals], (_PLOT_PX if axis == "x" else 300) * share,
                          axis)
    update = dict(type="log", tickmode="array", tickvals=vals, ticktext=text, minor=dict(showgrid=False))
    (fig.update_xaxes if axis == "x" else fig.update_yaxes)(**update)
    return log_axis(fig, axis)   # sizes labelled where they lie: log however narrow the range
