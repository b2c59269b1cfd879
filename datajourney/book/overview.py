"""The book's front door: on the title page the findings that matter most, on chapter 1's page the
pipeline map, each chapter's key number (published, reference host, this run) and chapter 12's answer,
all worded from the facts stored in result files (a file written before facts existed is analysed by
its chapter through the registry, the one place that happens). The reader's own run comes first,
headed with its host; the reference host's answer follows."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from datajourney.book import registry
from datajourney.book.registry import lookup
from datajourney.chapters import published
from datajourney.chapters.c12_conclusion import experiment as diagnosis
from datajourney.chapters.c12_conclusion import page as diagnosis_page
from datajourney.core import phrasing, results
from datajourney.core.charts import PALETTE
from datajourney.core.facts import FLAGGED, host_label


def front() -> list[tuple[str, str, str]]:
    """One key result per chapter for the front door, found from the registry: (chapter, fact key, what its
    headline measures), from each chapter package's ``HEADLINE`` (a key starting with "?" names the chapter's
    declared question, shown as its verdict, the chapter's own words); a chapter that names none shows its
    first exported key, labelled as its own facts label it."""
    out = []
    for c in registry.CHAPTERS:
        if not c.diagnosed or c.name == diagnosis.CHAPTER:
            continue
        if c.headline is not None:
            out.append((c.name, *c.headline))
        elif c.exports:
            out.append((c.name, c.exports[0], ""))
    return out


def _link(chapter: str, base: str = "") -> str:
    """A Markdown link to a chapter's notebook, which MyST resolves to its page; ``base`` is the path
    from the page that shows it to the notebooks (``""`` from chapter 1, ``"../notebooks/"`` from the title page)."""
    c = lookup(chapter)
    return f"[{c.number}. {c.title}]({base}{c.name}.ipynb)"


def _finding(res: results.Result | None, chapter: str, key: str):
    """The fact ``key`` of chapter ``chapter``'s result ``res`` (None when it has none)."""
    if res is None:
        return None
    try:
        return registry.analysed(res).facts.get(key)
    except (KeyError, ValueError, IndexError, TypeError):
        return None


def _headline(res: results.Result | None, chapter: str, key: str) -> str | None:
    if key.startswith("?"):
        return _answer(res, key)
    if _finding(res, chapter, key + FLAGGED) is not None:
        return "flagged: a measurement problem"
    return _value(_finding(res, chapter, key))


def _answer(res: results.Result | None, key: str) -> str | None:
    """A chapter's verdict on its question ``?<key>`` as its checklist row words it (None without one)."""
    if res is None:
        return None
    try:
        facts = registry.analysed(res).facts
    except (KeyError, ValueError, IndexError, TypeError):
        return None
    a = facts.advice_for(key[1:])
    return phrasing.verdict(a, facts) if a is not None else None


def _value(f) -> str | None:
    """A fact's headline as every page shows it (:func:`phrasing.headline`), None without a value."""
    return phrasing.headline(f) if f is not None and f.number is not None else None


def _published(chapter: str, f, res: results.Result | None = None) -> str:
    """The published figure beside the fact ``f`` (when its analysis names the same metric; marked where it is not
    comparable, :data:`diagnosis_page.NOT_COMPARABLE`). When ``f`` has none, the first fact the chapter exports
    (in ``res``) that reproduces a published figure in ``f``'s unit: that figure with its metric and the run's value
    of it, so a reproduced figure is never hidden behind a dash nor set beside a number of another kind."""
    fig = published.figure(chapter, f.published) if f is not None and f.published else None
    if fig is not None:
        return diagnosis_page.published_cell(chapter, fig, metric=False)
    try:
        facts = registry.analysed(res).facts if res is not None else None
    except (KeyError, ValueError, IndexError, TypeError):
        facts = None
    for key in (facts.exports if facts is not None else ()):
        g = facts.get(key)
        fig = published.figure(chapter, g.published) if g is not None and g.published else None
        if fig is not None and g.number is not None and f is not None and g.unit == f.unit:
            return f"{diagnosis_page.published_cell(chapter, fig)}; this run of it: {phrasing.headline(g)}"
    return "—"


def _what(res: results.Result | None, what: str, *, define: bool = False) -> str:
    """A headline's words with its cold reads named as the chapter names them: "guest-cold" where the chapter's
    result says its cold reads were served from below the virtual machine (``data["guest_cold"]``), defined in
    place with ``define``; the chapter's own cold label where its latency check could not tell."""
    try:
        data = registry.analysed(res).facts.data if res is not None else {}
    except (KeyError, ValueError, IndexError, TypeError):
        data = {}
    if data.get("guest_cold") is not True:
        label = data.get("cold_label")   # e.g. "cold (device or host cache: cannot tell)": the chapter's own words
        return re.sub(r"(?<![-\w])cold\b", label, what, count=1) if label and label != "cold" else what
    text = re.sub(r"(?<![-\w])cold\b", "guest-cold", what)
    return phrasing.define_guest_cold(text) if define else text


def _load(run_dir, chapter: str) -> results.Result | None:
    """Chapter ``chapter``'s result file in ``run_dir``, None when it is not there or unreadable."""
    f = Path(run_dir) / f"{chapter}.json" if run_dir is not None else None
    if f is None or not f.is_file():
        return None
    try:
        return results.Result.load(f)
    except (ValueError, KeyError):
        return None


def _load_dir(run_dir) -> dict:
    """Chapter -> Result for the chapters of :func:`front` whose result files ``run_dir`` holds."""
    if run_dir is None or not Path(run_dir).is_dir():
        return {}
    return {ch: r for ch, _, _ in front() if (r := _load(run_dir, ch)) is not None}


def front_table(this_dir=None, host: str | None = None, is_reference_run: bool = False) -> pd.DataFrame:
    """One row per chapter the diagnosis reads (2-11 and any new one): what its key number measures, the
    published figure, the reference run's value and, where ``this_dir`` holds the chapter's result (a
    finished or re-rendered run), this run's (that column only when there is one)."""
    mine = {} if is_reference_run else _load_dir(this_dir)
    rows = []
    for ch, key, what in front():
        reference = results.load_reference(ch, host)
        ref = _finding(reference, ch, key)
        mine_ch = mine.get(ch)
        f = ref or _finding(mine_ch, ch, key)
        what = _what(reference or mine_ch, what or (f.label if f is not None and f.label else key))
        row = {"chapter": _link(ch), "key number": what, "published": _published(ch, ref, reference),
               "reference host": _headline(reference, ch, key) or "not in the reference run"}
        if mine:
            row["this run"] = _headline(mine_ch, ch, key) or ("not run" if ch not in mine else "—")
        rows.append(row)
    return pd.DataFrame(rows)


def markdown_table(t: pd.DataFrame) -> str:
    """A DataFrame as a Markdown table (its links stay links; pipes in a cell escaped)."""
    def cell(v) -> str:
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(t.columns) + " |", "|" + " --- |" * len(t.columns)]
    return "\n".join(lines + ["| " + " | ".join(cell(v) for v in row) + " |" for row in t.itertuples(index=False)])


def front_markdown(this_dir=None, host: str | None = None, is_reference_run: bool = False) -> str:
    """Chapter 12's answer (:func:`front_door`), then :func:`front_table` as a Markdown table."""
    return front_door(this_dir, host, is_reference_run) + "\n\n" + markdown_table(
        front_table(this_dir, host, is_reference_run))


def hops_markdown() -> str:
    """The pipeline map as a table: each hop, what is measured there and links to the chapters that do."""
    rows = ["| hop | what is measured | chapters |", "| --- | --- | --- |"]
    for name, what, chapters in HOPS:
        links = ", ".join(_link(lookup(str(n)).name) for n in chapters if lookup(str(n)).available)
        rows.append(f"| {name} | {what} | {links or 'not measured yet'} |")
    return "\n".join(rows)


def weakest_text(res12: results.Result, who: str, base: str = "") -> str:
    """Chapter 12's answer in ``res12``, headed with its host: each workload's weakest link and what to
    change, worded by chapter 12's page from its facts (the same text as there)."""
    facts = registry.analysed(res12).facts
    op = diagnosis_page.opening(facts)
    lines = [f"* {f.text}" for f in op.findings] + [f"* {a.text}" for a in op.actions]
    head = f"**{who}, {phrasing.text(host_label(res12.fingerprint))}** (from {_link(diagnosis.CHAPTER, base)}):"
    return head + "\n\n" + "\n".join(lines).replace("](", f"]({base}" if base else "](")


def front_door(this_dir=None, host: str | None = None, is_reference_run: bool = False) -> str:
    """Chapter 12's answer on the reference host and, when this run's chapter 12 result is already
    there (a re-rendered run), on this run."""
    ref12 = results.load_reference(diagnosis.CHAPTER, host)
    mine = None if is_reference_run else _load(this_dir, diagnosis.CHAPTER)
    parts = [weakest_text(mine, "Your run")] if mine is not None else []
    if ref12 is not None:
        parts.append(weakest_text(ref12, "The reference host"))
    if mine is None and not is_reference_run:
        parts.append("This run's other chapters have not run yet when this page is computed: each of them "
                     f"opens with this run's key results, and {_link(diagnosis.CHAPTER)} gives this run's "
                     "answer (`./journey book` prints it at the end).")
    return "\n\n".join(parts)


#: The two chapter findings the title page states beside chapter 12's three answers: (chapter, key, topic).
TITLE_FINDINGS = [("02_random_vs_sequential", "cold_gap", "Storage layout"),
                  ("05_padding_tax", "all_samples", "Padding")]


def title_markdown(host: str | None = None, run_dir=None) -> str:
    """The title page's findings, computed from result files: the reader's own run first when the book
    is built from one (chapter 12's answer, headed with its host), then the reference host's answer for its
    three workloads and the two largest levers of chapters 2 and 5 (their key fact with the published
    figure), each with a link to its chapter."""
    base = "../notebooks/"
    parts = []
    mine = _load(run_dir, diagnosis.CHAPTER) if run_dir is not None else None
    if mine is not None:
        parts.append(weakest_text(mine, "Your run", base))
    ref12 = results.load_reference(diagnosis.CHAPTER, host)
    lines = []
    if ref12 is not None:
        lines.append(weakest_text(ref12, "The reference host", base))
    what = {(ch, key): w for ch, key, w in front()}
    levers = []
    for ch, key, topic in TITLE_FINDINGS:
        res = results.load_reference(ch, host)
        ref = _finding(res, ch, key)
        value, pub = _value(ref), _published(ch, ref, res)
        if value is None:
            continue
        levers.append(f"* **{topic}** (reference host): {_what(res, what[(ch, key)], define=True)}: **{value}**"
                      + (f" (published: {pub})" if pub != "—" else "") + f" ({_link(ch, base)})")
    return "\n\n".join(parts + lines + (["\n".join(levers)] if levers else []))


#: The hops of a training sample, in order, with the chapters planned to measure them.
HOPS = [
    ("Storage", "NVMe / network disk: file layout, read size, queue depth, O_DIRECT, GPUDirect", (2, 9)),
    ("Page cache", "kernel RAM cache: cold vs warm, readahead, purge and residency", (2, 3, 9)),
    ("User space", "read() vs mmap(), syscalls and page faults, one handle vs many files", (3, 10)),
    ("CPU preprocessing", "decode, tokenise, augment: worker processes vs threads and the GIL", (4, 7, 8)),
    ("Batching", "collation, padding vs packing, pinned host memory", (5, 6)),
    ("PCIe", "host-to-device copy: pinned vs pageable, overlap with compute", (6, 7, 9)),
    ("GPU memory", "forward, backward, optimizer: does the data keep up?", (7, 9)),
    ("GPU to GPU", "gradient all-reduce over NVLink / PCIe, NCCL", (11,)),
]


def hop_chapters(planned) -> str:
    """The chapters of this checkout that measure a hop ("not measured yet" when none exists)."""
    from datajourney.book import registry as chapters

    have = [n for n in planned if chapters.CHAPTERS[n - 1].available]
    return ", ".join(str(n) for n in have) if have else "not measured yet"


def chapter_link(number: int) -> str:
    """A link to chapter ``number``'s page, relative to chapter 1's page in the built book."""
    from datajourney.book import registry as chapters

    return f'<a href="{chapters.CHAPTERS[number - 1].name}.html">{number}</a>'


def pipeline_map() -> go.Figure:
    """The journey as a row of boxes; hover a hop to see what is measured and where."""
    n = len(HOPS)
    fig = go.Figure()
    where = [hop_chapters(h[2]) for h in HOPS]
    for i in range(n):
        colour = PALETTE[i % len(PALETTE)] if where[i] != "not measured yet" else "#BBBBBB"
        fig.add_shape(type="rect", x0=i - 0.42, x1=i + 0.42, y0=-0.5, y1=0.5, line=dict(color=colour, width=2),
                      fillcolor=colour, opacity=0.18, layer="below")
        if i < n - 1:
            fig.add_annotation(x=i + 0.58, y=0, ax=i + 0.42, ay=0, xref="x", yref="y", axref="x", ayref="y",
                               showarrow=True, arrowhead=3, arrowwidth=1.5, text="")
    fig.add_scatter(
        x=list(range(n)), y=[0] * n, mode="markers+text", text=[h[0].replace(" ", "<br>") for h in HOPS],
        textposition="middle center", marker=dict(size=60, opacity=0), showlegend=False,
        customdata=[[h[1], w] for h, w in zip(HOPS, where, strict=True)],
        hovertemplate="<b>%{text}</b><br>%{customdata[0]}<br>chapters: %{customdata[1]}<extra></extra>",
    )
    for i, _h in enumerate(HOPS):  # the chapters under each box, as links to their pages in the book
        if where[i] != "not measured yet":
            fig.add_annotation(x=i, y=-0.68, showarrow=False, font=dict(size=12),
                               text="ch. " + ", ".join(chapter_link(int(c)) for c in where[i].split(", ")))
    fig.update_layout(title="The journey of a training sample (hover a hop; click a chapter)", height=280,
                      xaxis=dict(visible=False, range=[-0.6, n - 0.4]), yaxis=dict(visible=False, range=[-0.9, 0.8]),
                      margin=dict(t=50, l=10, r=10, b=10))
    return fig
