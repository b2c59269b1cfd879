"""Display helpers so notebook cells stay one line: key results, tables, published figures.

Every value that comes from a run (table cells and headers, parameters, run ids, notes made of
a run's strings) is escaped before it is shown, so that ``<``, ``&``, ``*`` or ``_`` in it show as
written (``/proc/<pid>/io``) and never become markup: a result file is data from another host.
"""
from __future__ import annotations

import html as _html
import math
import numbers
import os
import re
from collections.abc import Callable

import pandas as pd
from IPython.display import HTML, Markdown, display

from datajourney.chapters import published
from datajourney.core import phrasing, results
from datajourney.core.facts import host_label
from datajourney.core.phrasing import Finding, as_markdown
from datajourney.core.units import num

#: Cell padding, headers that wrap, numbers right-aligned and text left-aligned; a scroll box stays around
#: every table as the last resort (a cell that cannot wrap).
_TABLE_STYLE = [
    {"selector": "", "props": "border-collapse: collapse; margin: 0.5em 0 1em 0; font-size: 0.85em;"},
    {"selector": "th, td", "props": "padding: 0.3em 0.5em; border-bottom: 1px solid #ddd;"},
    {"selector": "td", "props": "text-align: right; font-variant-numeric: tabular-nums;"},
    {"selector": "th", "props": "text-align: left; vertical-align: bottom; white-space: normal;"},
    {"selector": "caption", "props": "caption-side: top; text-align: left; font-weight: 600; padding: 0.3em 0;"},
]
#: Width (px) of the box a table sits in, in the book's text column at a 1,280 px window (704 at 1,300), and a
#: cell's padding and border: a table whose narrowest layout (every header and text cell wrapped at its spaces) is
#: wider is split into parts that fit, key columns in each.
COLUMN_PX, CELL_PAD_PX = 688, 14
#: Width (px) of a character of a table's text (0.85 em of the page's 16 px), by kind, as the built book draws it in
#: a headless Chromium; headers are bold, so wider. Kinds: narrow letters and punctuation, m/w/% (the widest),
#: other capitals, lower case, digits (tabular), wide symbols, anything else.
_CHAR_KINDS = (("narrow", set("ijlftrI.,:;'|!()[]{} ")), ("wide", set("mwMW%")), ("symbol", set("≥≈→÷×±—…≤−–+=<>")))
_CHAR_PX = {False: {"narrow": 5.0, "lower": 8.0, "upper": 9.0, "wide": 12.5, "digit": 8.5, "symbol": 10.6,
                    "other": 7.0},
            True: {"narrow": 5.8, "lower": 9.2, "upper": 10.2, "wide": 13.6, "digit": 9.9, "symbol": 11.0,
                   "other": 7.0}}


def say(text: str) -> None:
    """Show Markdown that was built from results (numbers and directions computed); nothing when it is
    empty (an empty Markdown output shows in the book as its repr, "<IPython.core.display.Markdown object>")."""
    if text and str(text).strip():
        display(Markdown(text))


def escape(value) -> str:
    """``value`` as text that shows as written in Markdown and in HTML: HTML's special characters as
    entities, Markdown's emphasis, code, link and table characters escaped with a backslash, characters that
    hide or reorder text dropped (:func:`~datajourney.core.phrasing.visible`)."""
    return re.sub(r"([\\`*_\[\]|#~])", r"\\\1", _html.escape(phrasing.visible(value), quote=False))


def _cell(value) -> str:
    """A table cell as HTML text: numbers formatted, anything else escaped (it may come from a run)."""
    if isinstance(value, bool) or value is None:
        return "—" if value is None else str(value)
    if isinstance(value, float):
        return "—" if not math.isfinite(value) else num(value)
    if isinstance(value, numbers.Integral):
        return num(int(value))   # a count (NumPy's too): every digit, the book's separators and minus sign
    return _text(value)


def _text(value) -> str:
    """A string (cell, header, caption) as HTML text: escaped, characters that hide or reorder text dropped."""
    return _html.escape(phrasing.visible(value))


def _char_kind(c: str) -> str:
    kind = next((k for k, chars in _CHAR_KINDS if c in chars), None)
    return kind or ("upper" if c.isupper() or c == "_" else "lower" if c.islower() else "digit" if c.isdigit()
                    else "other")


def _word_px(word: str, bold: bool = False) -> float:
    """How wide ``word`` is drawn in a table (a header's text is bold)."""
    return sum(_CHAR_PX[bold][_char_kind(c)] for c in _html.unescape(word))


def _min_px(header: str, cells: list[str]) -> float:
    """The narrowest a column can be drawn: its widest word, plus the cell's padding. Headers and text wrap where a
    browser breaks a line: at spaces and after a hyphen or an en dash ("reference-h200-…", "1.2–3.4"), never at a
    slash ("images/s") nor inside a number."""
    words = [(w, bold) for t, bold in ((header, True), *((c, False) for c in cells))
             for w in re.split(r"\s+|(?<=[-–])", str(t)) if w]
    return max((_word_px(w, bold) for w, bold in words), default=_CHAR_PX[False]["digit"]) + CELL_PAD_PX


#: The column :func:`table_html` adds, numbering the rows, to a table shown in parts whose rows no leading columns
#: tell apart (or whose key columns leave no room beside them): each part then starts with it.
ROW = "row"


def column_parts(df: pd.DataFrame, width: float = COLUMN_PX) -> list[list]:
    """The columns of ``df`` in parts that each fit ``width`` px at their narrowest: one part when the table
    fits; else the key columns (the fewest leading columns that tell the rows apart) repeated in every part,
    and the other columns, in their order, spread evenly over as few parts as fit. A part that continues a
    table always names its rows: where no leading columns tell them apart, or the key columns leave no room
    for the widest other column, each part starts with :data:`ROW`, the rows' numbers, instead."""
    cols = list(df.columns)
    px = {c: _min_px(str(c), [_cell(v) for v in df[c]]) for c in cols}
    if sum(px.values()) <= width or len(cols) < 3:
        return [cols]
    keys = next((cols[:i] for i in range(1, len(cols) - 1) if not df[cols[:i]].astype(str).duplicated().any()),
                None)
    if keys is None or sum(px[k] for k in keys) + max(px[c] for c in cols if c not in keys) > width:
        keys, px[ROW] = [ROW], _min_px(ROW, [f"{len(df):,}"])
    rest, room = [c for c in cols if c not in keys], width - sum(px[k] for k in keys)

    def pack(cap: float) -> list[list]:
        parts: list[list] = []
        for c in rest:
            if parts and sum(px[k] for k in parts[-1]) + px[c] <= cap:
                parts[-1].append(c)
            else:
                parts.append([c])
        return parts

    fewest = pack(room)
    total, k = sum(px[c] for c in rest), len(fewest)
    caps = [max(max(px[c] for c in rest), total / k + (room - total / k) * i / 20) for i in range(21)]
    even = next(p for p in (pack(min(cap, room)) for cap in caps) if len(p) == k)   # the most even packing
    return [keys + p for p in even]


def _one_table_html(df: pd.DataFrame, caption: str | None) -> str:
    text = [c for c in df.columns if len(df) and df[c].map(lambda v: isinstance(v, str)).all()]
    styler = (df.style.hide(axis="index").format(_cell).format_index(_text, axis=1)
              .set_table_styles(_TABLE_STYLE))
    if text:
        styler = styler.set_properties(subset=text, **{"text-align": "left"})
    if caption:
        styler = styler.set_caption(_text(caption))
    return f'<div style="overflow-x: auto; max-width: 100%">{styler.to_html()}</div>'


#: Columns that count what each row pools: the same in every row, they are said once in the caption ("2 runs each").
_COUNTS = {"runs": ("run", "runs"), "paired rounds": ("paired round", "paired rounds"), "epochs": ("epoch", "epochs")}
#: Headers of columns that span the runs of a row (a range, the lowest, the highest): with one run a row they repeat
#: its value.
_SPAN = re.compile(r"over (its |the |\d+ )?runs|min–max|lowest run|highest run")


def _constants_in_caption(df: pd.DataFrame, caption: str | None) -> tuple[pd.DataFrame, str | None]:
    """``df`` without the numeric columns that read the same in every row, each said once in the caption instead:
    a count (two rows or more) as "2 runs each", any other (three rows or more: two alike may be the point) as
    "cached at start: 0% in every row". With one run a row, the columns that span a row's runs go too (they would
    repeat its value)."""
    if len(df) < 2:
        return df, caption
    said, drop = [], []
    for c in list(df.columns)[1:]:
        shown = {_cell(v) for v in df[c]}
        numeric = all(isinstance(v, numbers.Number) and not isinstance(v, bool) for v in df[c])
        if not numeric or len(shown) != 1 or "—" in shown or len(df.columns) - len(drop) <= 2:
            continue
        if len(df) < 3 and str(c) not in _COUNTS:
            continue
        value, drop = shown.pop(), drop + [c]
        if str(c) in _COUNTS:
            one, many = _COUNTS[str(c)]
            said.append(f"one {one} each" if value == "1" else f"{value} {many} each")
            if value == "1":
                drop += [s for s in df.columns if _SPAN.search(str(s)) and s not in drop]
            continue
        name, unit = (m.groups() if (m := re.fullmatch(r"(.*\S) \(([^()]*)\)", str(c))) else (str(c), ""))
        said.append(f"{name}: {value}{unit if unit == '%' else ' ' + unit if unit else ''} in every row")
    if not said:
        return df, caption
    note = "; ".join(said)
    if not caption:
        return df.drop(columns=drop), note[0].upper() + note[1:]
    if re.search(r"\([^()]* [^()]*\)$", caption):   # a closing remark in words: the note joins it
        return df.drop(columns=drop), f"{caption[:-1]}; {note})"
    return df.drop(columns=drop), f"{caption} ({note})"


def table_html(df: pd.DataFrame, caption: str | None = None) -> str:
    """A DataFrame as a padded HTML table (three significant digits, thousands separated) that fits the text
    column: headers wrap, and a table too wide even so is shown in parts (:func:`column_parts`), each with
    the key columns first (a part after the first is captioned by the caption's head, "Scenarios (continued)"); each
    part sits in a box that scrolls sideways should a cell still not fit. A number the same in every row is said
    once, in the caption (:func:`_constants_in_caption`)."""
    df, caption = _constants_in_caption(df, caption)
    parts = column_parts(df)
    if parts[0][0] == ROW and ROW not in df.columns:
        df = pd.concat([pd.DataFrame({ROW: range(1, len(df) + 1)}, index=df.index), df], axis=1)
    head = re.split(r": |; |, | \(", caption, maxsplit=1)[0] if caption else None   # "Scenarios (continued)"
    return "".join(_one_table_html(df[cols], caption if i == 0 else (f"{head} (continued)" if head else None))
                   for i, cols in enumerate(parts))


#: A table with more rows than this is shown folded: its caption and row count, the rows a click away, so that a
#: page's length is its text and charts, not its longest tables.
FOLD_ROWS = 24


def folded_html(df: pd.DataFrame, caption: str | None = None, *, fold: bool = False) -> str:
    """:func:`table_html`, folded in a ``<details>`` block named by its caption and row count when the table has more
    than :data:`FOLD_ROWS` rows, or when ``fold`` asks for it (a table of detail that a page's text does not need)."""
    html = table_html(df, caption)
    if len(df) <= FOLD_ROWS and not fold:
        return html
    what = _text(caption) if caption else "The table"
    return f"<details><summary>{what} ({len(df):,} rows: open to show)</summary>\n\n{html}\n\n</details>"


def table(df: pd.DataFrame, caption: str | None = None, *, fold: bool = False) -> None:
    """Show a DataFrame as a padded HTML table (:func:`table_html`), folded when it is long or ``fold`` asks for it
    (:func:`folded_html`)."""
    display(HTML(folded_html(df, caption, fold=fold)))


def _param_text(value, unit: str = "") -> str:
    """A parameter's value as a reader wants it: sizes (declared with unit bytes) in KiB/MiB/GiB, yes/no
    for a switch, "not set" for None (the help says what that means), and no thousands separator inside a
    list, where "[16, 64, 1,024]" would read as four items."""
    from datajourney.core.units import size_label

    def one(v, in_list: bool = False):
        if isinstance(v, str) and os.path.isabs(v):  # a directory of the machine that ran it, not the reader's
            return "a directory on the machine that ran it"
        if v is None:
            return "not set"
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, int) and v >= 1024 and unit == "bytes":
            return size_label(v)
        if isinstance(v, int):
            return str(v) if in_list else f"{v:,}"
        return str(v)

    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(one(v, in_list=True) for v in value) + "]"
    return one(value)


def _data_dir_text(value, fingerprint: dict) -> str:
    """The data directory a run used, named the way the reader set it and never by the machine's own path:
    ``$DATAJOURNEY_DATA_DIR`` when that variable chose it, ``~/.cache/datajourney`` when nothing did, a
    directory given with ``-p data_dir`` as such. A result from before the choice was recorded
    (``storage.data_dir_from``) with the parameter unset is told apart by the directory it described."""
    from datajourney.core.paths import DATA_DIR_ENV

    storage = (fingerprint or {}).get("storage") or {}
    source = storage.get("data_dir_from")
    if source is None:
        source = ("data_dir" if value is not None else
                  "default" if str(storage.get("path") or "").endswith("/.cache/datajourney") else DATA_DIR_ENV)
    return {"data_dir": "a directory given with -p data_dir (on the machine that ran it)",
            DATA_DIR_ENV: f"${DATA_DIR_ENV} (the environment variable, on the machine that ran it)",
            "default": "~/.cache/datajourney (the default)"}[source]


def _specs(chapter: str) -> dict:
    """The chapter's declared parameters (their help says what each sets); none for an unknown chapter."""
    from datajourney.book import registry

    try:
        return registry.lookup(chapter).params.specs()
    except (KeyError, LookupError, ImportError, AttributeError):
        return {}


def parameters(res: results.Result, *, folded: bool = False) -> None:
    """The parameters this result was produced with (the notebook's editable defaults stay in Jupyter);
    ``folded``: inside a collapsed block, as chapters show it at the end of the page."""
    specs = _specs(res.chapter)
    rows = [{"parameter": k, "value": (_data_dir_text(v, res.fingerprint) if k == "data_dir" else
                                       _param_text(v, specs[k].unit if k in specs else "")),
             "what it sets": specs[k].help if k in specs else ""}
            for k, v in res.parameters.items() if k not in ("run_dir", "replay")]
    html = table_html(pd.DataFrame(rows), f"Parameters of run {res.run_id}")
    display(HTML(f"<details><summary>Parameters of this run</summary>{html}</details>" if folded else html))
    if res.replayed_from:
        from datajourney.core.fingerprint import git_commit, short_commit

        then = short_commit(res.fingerprint.get("software", {}).get("git_commit")) or "unknown"
        now = short_commit(git_commit()) or "unknown"
        say(f"<small>Measured in run {escape(res.run_id)} on {escape(res.fingerprint.get('date_utc', '?'))} by the "
            f"code of commit {escape(then)}; this page renders that run's result file with the code of commit "
            f"{escape(now)}.</small>")


def reference(chapter: str, this: results.Result, host: str | None, is_reference_run: bool):
    """The reference result to compare with: this run itself when it *is* the reference run."""
    if is_reference_run:
        return this
    return results.load_reference(chapter, host)


def _safe(fn: Callable, res) -> list | dict | None:
    """``fn(res)``, or None when the (older) reference result lacks what ``fn`` needs."""
    if res is None:
        return None
    try:
        return fn(res)
    except (KeyError, ValueError, IndexError):
        return None


def findings(items: list[Finding]) -> None:
    """Show findings (computed sentences) as a bullet list."""
    if items:
        say(as_markdown(items))


def three_columns(chapter: str, this: results.Result, ref: results.Result | None, metrics, is_reference_run: bool,
                  host: str | None = None,
                  caption: str = "Published figure · reference run · this run (MB = 10⁶ bytes)") -> None:
    """The published figure (with its setting), the reference run and this run, side by side."""
    # the machine the reference result was measured on (chapter 11's reference host holds a 4-GPU host's run)
    label = (f"reference run, {host_label(ref.fingerprint)}" if ref is not None and ref.fingerprint
             else f"reference run ({host or results.DEFAULT_REFERENCE_HOST})")
    df = published.three_columns(chapter, metrics(this), _safe(metrics, ref) if not is_reference_run else None,
                                 this_is_reference=is_reference_run, reference_label=label)
    if is_reference_run:
        caption = (caption.replace(" · this run", "")
                   + " — this book shows the reference run; a reader's run adds its own column")
    table(df, caption)
    sources = sorted({f.source for f in published.figures(chapter)})
    display(Markdown("<small>" + "<br>".join(f"{s}: {published.SOURCES[s]}" for s in sources) + "</small>"))
