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

from datajourney.book import opening, registry, stability
from datajourney.book.registry import lookup
from datajourney.chapters import published
from datajourney.chapters.c12_conclusion import analysis as diagnosis_analysis
from datajourney.chapters.c12_conclusion import page as diagnosis_page
from datajourney.chapters.c12_conclusion.params import CHAPTER as DIAGNOSIS
from datajourney.core import phrasing, results
from datajourney.core.charts import PALETTE
from datajourney.core.facts import host_label


def front() -> list[tuple[str, str, str]]:
    """The chapters of the front door, found from the registry: (chapter, its package's ``HEADLINE`` key, what that
    headline measures), or its first exported key where it names none. Which fact a row shows is decided per result
    by :func:`headline_key`: the chapter's own first screen."""
    out = []
    for c in registry.CHAPTERS:
        if not c.diagnosed or c.name == DIAGNOSIS:
            continue
        if c.headline is not None:
            out.append((c.name, *c.headline))
        elif c.exports:
            out.append((c.name, c.exports[0], ""))
    return out


def _facts(res: results.Result | None):
    """The facts of ``res`` (analysed by its chapter where the file holds none), None without."""
    if res is None:
        return None
    try:
        return registry.analysed(res).facts
    except (KeyError, ValueError, IndexError, TypeError):
        return None


def first_screen(chapter: str, facts) -> list[str]:
    """The keys of the facts a chapter's first screen states, in its order: the findings of its opening that fit its
    line budget (:func:`datajourney.book.opening.shown`), those that are facts of the result."""
    if facts is None:
        return []
    page = lookup(chapter).piece("page")
    try:
        op = page.opening(facts)
    except (KeyError, ValueError, IndexError, TypeError, AttributeError):
        return []
    shown = opening.shown(op, getattr(page, "OPENING_LINES", opening.OPENING_LINES))
    return [f.key for f in shown if facts.get(f.key) is not None and facts.get(f.key).number is not None]


def headline_key(chapter: str, facts, default: str | None = None) -> str | None:
    """The fact a summary repeats for ``chapter``: the first fact its first screen states (the number the chapter
    leads with), else its package's ``HEADLINE`` (``default``), so a summary row never headlines another number than
    the chapter leads with (a question's verdict, a non-comparable ratio, another metric, another worker count)."""
    keys = first_screen(chapter, facts)
    return keys[0] if keys else default


def comparand(f, facts) -> tuple[str, str]:
    """A fact as a summary row shows it, with the chapter's own comparand: (what it measures, its value), a comparison
    as ("one shard read in order", "6.2× faster than 10,000 shuffled files of 16 KiB"), any other fact as (its
    label, its headline)."""
    of = facts.get(f.of) if f.is_comparison and f.of else None
    basis = facts.get(f.basis) if f.is_comparison and f.basis else None
    if of is not None and basis is not None and of.label and basis.label and f.number is not None:
        return of.label, phrasing.comparison(f, baseline=basis.label)
    return f.label, phrasing.headline(f)


def scope(f, facts) -> str | None:
    """The workload of the question a summary row's fact answers, as the chapter declared it (the advice whose
    evidence holds both sides of the comparison ``f``, or whose gain ``f`` is): "10,000 synthetic samples of 16 KiB
    read in plain Python (no DataLoader)", so two rows that answer two questions say so; None for a fact that answers
    no declared question."""
    if f is None or facts is None:
        return None
    sides = {f.of, f.basis} if f.of and f.basis else None
    a = next((a for a in facts.advice if a.gain == f.key or (sides and sides <= set(a.evidence))), None)
    return a.workload if a is not None and a.workload else None


def same_metric(chapter: str, f) -> str:
    """The published figure of the very metric ``f`` measures (its ``published`` names it), as a summary table shows
    it ("—" without one): never a figure of another metric beside it."""
    fig = published.figure(chapter, f.published) if f is not None and f.published else None
    return diagnosis_page.published_cell(chapter, fig, metric=False)


def reproduced(chapter: str, facts, shown) -> object | None:
    """Where the fact a row shows (``shown``) has no published figure: the chapter's first fact that reproduces one
    in the same unit, comparable (not marked by :data:`diagnosis_page.NOT_COMPARABLE`), for a row of its own, so a
    source's figure sits beside the run's value of the same metric (chapter 11's one-bucket slowdown, chapter 5's
    padding to the context); None otherwise."""
    if facts is None or shown is None or same_metric(chapter, shown) != "—":
        return None
    for g in facts.facts.values():
        fig = published.figure(chapter, g.published) if g.published else None
        if (fig is not None and g.key != shown.key and g.number is not None and g.unit == shown.unit
                and (chapter, fig.metric) not in diagnosis_page.NOT_COMPARABLE):
            return g
    return None


def _link(chapter: str, base: str = "") -> str:
    """A Markdown link to a chapter's notebook, which MyST resolves to its page; ``base`` is the path
    from the page that shows it to the notebooks (``""`` from chapter 1, ``"../notebooks/"`` from the title page)."""
    c = lookup(chapter)
    return f"[{c.number}. {c.title}]({base}{c.name}.ipynb)"


def _what(res: results.Result | None, what: str, *, define: bool = False) -> str:
    """A headline's words with its cold reads named as the chapter names them: "guest-cold" where the chapter's
    result says its cold reads were served from below the virtual machine (``data["guest_cold"]``); with ``define``,
    the first word for the cold state defined in place (:func:`phrasing.define_cold`: what "guest-cold" means, or
    that the chapter's latency check could not tell the device from a host cache)."""
    facts = _facts(res)
    data = facts.data if facts is not None else {}
    text = re.sub(r"(?<![-\w])cold\b", "guest-cold", what) if data.get("guest_cold") is True else what
    return phrasing.define_cold(text, facts.get("cold_state")) if define and facts is not None else text


def _load(run_dir, chapter: str) -> results.Result | None:
    """Chapter ``chapter``'s result file in ``run_dir``, None when it is not there or unreadable."""
    f = Path(run_dir) / f"{chapter}.json" if run_dir is not None else None
    if f is None or not f.is_file():
        return None
    try:
        return results.Result.load(f)
    except (ValueError, KeyError):
        return None


def key_rows(chapter: str, reference: results.Result | None, mine: results.Result | None = None,
             default: str | None = None) -> list[dict]:
    """Chapter 1's rows for ``chapter``: the fact its first screen leads with (:func:`headline_key`), with the
    chapter's comparand, the published figure of that same metric and the value in ``reference`` (and in ``mine``, a
    reader's run, where given); then, where that fact has no published figure, a row for the one the chapter
    reproduces in the same unit (:func:`reproduced`)."""
    ref_facts, my_facts = _facts(reference), _facts(mine)
    facts = ref_facts or my_facts
    key = headline_key(chapter, facts, default)
    f = facts.get(key) if facts is not None and key else None

    def value(fs, k):
        if fs is None:
            return None
        if fs.flagged(k):
            return "flagged: a measurement problem"
        g = fs.get(k)
        return comparand(g, fs)[1] if g is not None and g.number is not None else None

    what = comparand(f, facts)[0] if f is not None else (key or "")
    rows = [dict(key=key, what=what, metric=f.published if f is not None else None,
                 published=same_metric(chapter, f), reference=value(ref_facts, key),
                 mine=value(my_facts, key), scope=scope(f, facts),
                 cold=facts.get("cold_state") if facts is not None else None)]
    g = reproduced(chapter, facts, f)
    if g is not None:
        rows.append(dict(key=g.key, what=f"the source's own metric: {comparand(g, facts)[0]}", metric=g.published,
                         published=same_metric(chapter, g), reference=value(ref_facts, g.key),
                         mine=value(my_facts, g.key), scope=scope(g, facts), cold=rows[0]["cold"]))
    return rows


#: Where chapter 1's key-number cell says a committed repeat read the other way (what follows: the repeat's value).
FLIPPED = " (a committed repeat read "


def front_table(this_dir=None, host: str | None = None, is_reference_run: bool = False) -> pd.DataFrame:
    """One row per chapter the diagnosis reads (2-11 and any new one), and one more where it reproduces a published
    figure its key number has none of (:func:`key_rows`): what the key number measures, the published figure of that
    metric, the reference run's value and, where ``this_dir`` holds the chapter's result (a finished or re-rendered
    run), this run's (that column only when there is one)."""
    mine = {} if is_reference_run else {ch: r for ch, _, _ in front() if (r := _load(this_dir, ch)) is not None}
    rows, defined = [], set()
    repeats = stability.comparisons(host)   # every chapter's committed repeats, loaded once
    for ch, key, _ in front():
        reference = results.load_reference(ch, host)
        for r in key_rows(ch, reference, mine.get(ch), key):
            what = r["what"]
            state = (r["cold"].setting or {}).get("state") if r["cold"] is not None else None
            if state not in defined and (new := phrasing.define_cold(what, r["cold"])) != what:
                what = new   # what the cold state means, said once in the table: at its first row
                defined.add(state)
            what = f"for {r['scope']}: {what}" if r["scope"] else what
            cell = r["reference"] or "not in the reference run"
            flipped = (stability.flips(repeats.get(ch, []), ch, r["metric"]) if r["reference"] and r["metric"]
                       else [])
            if flipped:   # a number that changed direction in a repeat on the same host is read as such
                cell += f"{FLIPPED}{phrasing.and_list(flipped)}: see the reference runs page)"
            row = {"chapter": _link(ch), "key number": phrasing.visible(what), "published": r["published"],
                   "reference host": cell}
            if mine:
                row["this run"] = r["mine"] or ("not run" if ch not in mine else "—")
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
    rows = [(name, what, ", ".join(_link(lookup(str(n)).name) for n in chapters if lookup(str(n)).available)
             or "not measured yet") for name, what, chapters in HOPS]
    return markdown_table(pd.DataFrame(rows, columns=["hop", "what is measured", "chapters"]))


#: The chapters that measure only the data-parallel workload, whose answer chapter 12's opening leaves out (its
#: remedies' chapters).
GRADIENT_CHAPTERS = frozenset(ch for (wl, _), (ch, _) in diagnosis_analysis.REMEDY.items() if wl == "gradients")


def weakest_text(res12: results.Result, who: str, base: str = "", todo: str = "What to do", *,
                 every: bool = False) -> str:
    """Chapter 12's answer in ``res12``, headed with its host: each workload's weakest link and what to
    change (under ``todo``), worded by chapter 12's page from its facts (the same text as there): its first
    screen's workloads, or (``every``) the data-parallel step's answer too."""
    facts = registry.analysed(res12).facts
    op = (diagnosis_page.every_answer if every else diagnosis_page.opening)(facts)
    found = "\n".join(f"* {f.text}" for f in op.findings)
    actions = "\n".join(f"{i}. {a.text}" for i, a in enumerate(op.actions, 1))
    host = host_label(res12.fingerprint)
    # a chapter measured on another host (chapter 11 on a multi-GPU one) is named in the head, as its bullet names it
    others: dict[str, list[int]] = {}
    for ch, h in (facts.data.get("hosts") or {}).items():
        if h and h != host and (every or ch not in GRADIENT_CHAPTERS):
            others.setdefault(h, []).append(registry.lookup(ch).number)
    also = "".join(f", and {phrasing.text(h)} for chapter{'s' if len(n) > 1 else ''} "
                   f"{phrasing.and_list([str(x) for x in sorted(n)])}" for h, n in sorted(others.items()))
    who += "s" if others and who.endswith(" host") else ""
    head = f"**{who}, {phrasing.text(host)}{also}** (from {_link(DIAGNOSIS, base)}):"
    body = found + (f"\n\n**{todo}**\n\n{actions}" if actions else "")
    return head + "\n\n" + body.replace("](", f"]({base}" if base else "](")


def _answers(mine: results.Result | None, host: str | None, base: str = "", todo: str = "What to do", *,
             every: bool = False) -> list[str]:
    """Chapter 12's answer (:func:`weakest_text`) in the reader's result ``mine`` where there is one, then on the
    reference host."""
    ref12 = results.load_reference(DIAGNOSIS, host)
    return [weakest_text(r, who, base, todo, every=every) for r, who in ((mine, "Your run"),
                                                                         (ref12, "The reference host"))
            if r is not None]


def front_door(this_dir=None, host: str | None = None, is_reference_run: bool = False) -> str:
    """Chapter 12's answer on the reference host and, when this run's chapter 12 result is already
    there (a re-rendered run), on this run."""
    mine = None if is_reference_run else _load(this_dir, DIAGNOSIS)
    # inside chapter 1 this is chapter 12's advice, not the chapter's own "What to do"
    parts = _answers(mine, host, todo="What chapter 12 advises", every=True)   # all three workloads, as promised
    if mine is None and not is_reference_run:
        parts.append("This run's other chapters have not run yet when this page is computed: each of them "
                     f"opens with this run's key results, and {_link(DIAGNOSIS)} gives this run's "
                     "answer (`./journey book` prints it at the end).")
    return "\n\n".join(parts)


#: The two chapter findings the title page states beside chapter 12's three answers: (chapter, topic); each is the
#: number its chapter leads with (:func:`headline_key`), as chapter 1's table shows it.
TITLE_FINDINGS = [("02_random_vs_sequential", "Storage layout"), ("05_padding_tax", "Padding")]


def lever_line(chapter: str, topic: str, res: results.Result | None, base: str = "") -> str | None:
    """One of the title page's two levers: the chapter's key number as chapter 1's table shows it (the same fact,
    comparand and published figure, :func:`key_rows`), the source's own metric after it where the key number has no
    published figure; None when the result has none."""
    rows = [r for r in key_rows(chapter, res) if r["reference"] is not None]
    if not rows:
        return None
    head, *more = rows
    where = f" on the reference host, for {phrasing.text(head['scope'])}" if head["scope"] else " (reference host)"
    line = f"* **{topic}**{where}: {_what(res, head['what'], define=True)}: **{head['reference']}**"
    line += f" (published: {head['published']})" if head["published"] != "—" else ""
    for r in more:
        line += f"; {r['what']}: {r['reference']} (published: {r['published']})"
    return line + f" ({_link(chapter, base)})"


def title_markdown(host: str | None = None, run_dir=None) -> str:
    """The title page's findings, computed from result files: the reader's own run first when the book
    is built from one (chapter 12's answer, headed with its host), then the reference host's answer for its
    three workloads and the two largest levers of chapters 2 and 5 (their key fact with the published
    figure of the same metric), each with a link to its chapter."""
    base = "../notebooks/"
    parts = _answers(_load(run_dir, DIAGNOSIS), host, base, every=True)
    levers = [line for ch, topic in TITLE_FINDINGS
              if (line := lever_line(ch, topic, results.load_reference(ch, host), base)) is not None]
    return "\n\n".join(parts + (["\n".join(levers)] if levers else []))


#: The hops of a training sample, in order, with the chapters that measure them: for the hops chapter 1's figure and
#: its prose name, the same chapters as there.
HOPS = [
    ("Storage", "NVMe / network disk: file layout, read size, queue depth, O_DIRECT, GPUDirect", (2, 3, 9)),
    ("Page cache", "kernel RAM cache: cold vs warm, readahead, purge and residency", (2, 10)),
    ("User space", "read() vs mmap(), syscalls and page faults, one handle vs many files", (3, 10)),
    ("CPU preprocessing", "decode, tokenise, augment: worker processes vs threads and the GIL", (3, 4, 7, 8)),
    ("Batching", "collation, padding vs packing, pinned host memory", (5, 6)),
    ("PCIe", "host-to-device copy: pinned vs pageable, overlap with compute", (6, 9)),
    ("GPU memory", "forward, backward, optimizer: does the data keep up?", (7, 9)),
    ("GPU to GPU", "gradient all-reduce over NVLink / PCIe, NCCL", (11,)),
]


def hop_chapters(planned) -> str:
    """The chapters of this checkout that measure a hop ("not measured yet" when none exists)."""
    have = [n for n in planned if registry.CHAPTERS[n - 1].available]
    return ", ".join(str(n) for n in have) if have else "not measured yet"


def chapter_link(number: int) -> str:
    """A link to chapter ``number``'s page, relative to chapter 1's page in the built book."""
    return f'<a href="{registry.CHAPTERS[number - 1].name}.html">{number}</a>'


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
