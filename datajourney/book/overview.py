"""The book's front door, on chapter 1's page: the pipeline map, each chapter's key number on the
reference host and in this run, and chapter 12's weakest links, computed from result files. It spans
every chapter, so it sits in the book layer and reads their findings through the registry."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from datajourney.chapters import registry
from datajourney.chapters.c12_conclusion import experiment as diagnosis
from datajourney.chapters.registry import lookup
from datajourney.core import results
from datajourney.core.charts import PALETTE

#: One key result per chapter for the front door: (chapter, finding key, what its headline measures).
FRONT = [
    ("02_random_vs_sequential", "cold_gap", "one shard read in order ÷ shuffled small files, cold"),
    ("03_dataloader", "published_w4", "the same layouts behind a DataLoader with 4 workers"),
    ("04_cpu_starvation", "workers_to_keep_up", "workers needed to keep the GPU busy"),
    ("05_padding_tax", "all_samples", "real tokens per position, packed ÷ padded"),
    ("06_pcie", "h2d_pinned", "pinned host-to-device copy of 1 GiB"),
    ("07_full_picture", "best_vs_ceiling", "the best ResNet-50 pipeline against the GPU's own ceiling"),
    ("08_threads_processes_gil", "end_to_end", "throughput gained by a thread pipeline over the DataLoader (negative: lost)"),
    ("09_reading_smarter", "to_gpu", "a cold file into GPU memory through pinned buffers"),
    ("10_mmap_vs_read", "posix_events", "events a POSIX tracer sees, read() ÷ mmap"),
    ("11_gpu_to_gpu", "scaling_direct", "per-GPU throughput lost by DDP over the direct path"),
]


def _link(chapter: str) -> str:
    """A link to a chapter's page in the built book. Computed Markdown is rendered as CommonMark, whose
    links Sphinx leaves as they are, so it names the HTML page (a sibling of chapter 1's page)."""
    c = lookup(chapter)
    return f"[{c.number}. {c.title}]({c.name}.html)"


def _headline(res: results.Result | None, chapter: str, key: str) -> str | None:
    if res is None:
        return None
    try:
        found = {f.key: f for f in registry.findings(chapter, res)}
    except (KeyError, ValueError, IndexError):
        return None
    f = found.get(key)
    return f.headline if f is not None and f.value is not None else None


def _load_dir(run_dir) -> dict:
    """Chapter -> Result for the chapters 2-11 whose result files ``run_dir`` holds."""
    out = {}
    if run_dir is None or not Path(run_dir).is_dir():
        return out
    for ch, _, _ in FRONT:
        f = Path(run_dir) / f"{ch}.json"
        if f.is_file():
            try:
                out[ch] = results.Result.load(f)
            except (ValueError, KeyError):
                continue
    return out


def reference_found(host: str | None = None) -> dict:
    """Chapter -> the committed reference result, for the chapters the diagnosis reads."""
    return {ch: r for ch in diagnosis.SOURCES if (r := results.load_reference(ch, host)) is not None}


def front_table(this_dir=None, host: str | None = None, is_reference_run: bool = False) -> pd.DataFrame:
    """One row per chapter 2-11: what its key number measures, the reference run's value and, where
    ``this_dir`` holds the chapter's result (a finished or re-rendered run), this run's (that column
    only when there is one)."""
    mine = {} if is_reference_run else _load_dir(this_dir)
    rows = []
    for ch, key, what in FRONT:
        row = {"chapter": _link(ch), "key number": what,
               "reference host": _headline(results.load_reference(ch, host), ch, key) or "not in the reference run"}
        if mine:
            row["this run"] = _headline(mine.get(ch), ch, key) or ("not run" if ch not in mine else "—")
        rows.append(row)
    return pd.DataFrame(rows)


def front_markdown(this_dir=None, host: str | None = None, is_reference_run: bool = False) -> str:
    """:func:`front_table` as a Markdown table (its chapter links stay links) with the weakest links below."""
    t = front_table(this_dir, host, is_reference_run)
    lines = ["| " + " | ".join(t.columns) + " |", "|" + " --- |" * len(t.columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in t.itertuples(index=False)]
    return "\n".join(lines) + "\n\n" + front_door(this_dir, host, is_reference_run)


def hops_markdown() -> str:
    """The pipeline map as a table: each hop, what is measured there and links to the chapters that do."""
    rows = ["| hop | what is measured | chapters |", "| --- | --- | --- |"]
    for name, what, chapters in HOPS:
        links = ", ".join(_link(lookup(str(n)).name) for n in chapters if lookup(str(n)).available)
        rows.append(f"| {name} | {what} | {links or 'not measured yet'} |")
    return "\n".join(rows)


def weakest_text(found: dict, who: str, params: dict | None = None) -> str:
    """The weakest link of each workload, computed by chapter 12's model from ``found``."""
    if not found:
        return ""
    keep = ("llm_tokens_per_s", "token_bytes", "tokens_per_batch")
    lines = diagnosis.summary_from(diagnosis.weakest_links(found, **{k: v for k, v in (params or {}).items()
                                                                     if k in keep}),
                                   [c for c in diagnosis.SOURCES if c not in found])
    return (f"**Weakest links on {who}** (chapter 12's model, {_link(diagnosis.CHAPTER)}):\n\n"
            + "\n".join(f"* {line}" for line in lines))


def front_door(this_dir=None, host: str | None = None, is_reference_run: bool = False) -> str:
    """The summary under the table: the reference host's weakest links and, when this run's other
    chapters are already there, this run's."""
    ref12 = results.load_reference(diagnosis.CHAPTER, host)
    params = ref12.parameters if ref12 is not None else None
    parts = [weakest_text(reference_found(host), "the reference host", params)]
    mine = {} if is_reference_run else {ch: r for ch in diagnosis.SOURCES
                                       if this_dir and (Path(this_dir) / f"{ch}.json").is_file()
                                       and (r := results.Result.load(Path(this_dir) / f"{ch}.json"))}
    if mine:
        parts.append(weakest_text(mine, "this run", params))
    elif not is_reference_run:
        parts.append("This run's other chapters have not run yet when this page is computed: each of them "
                     f"opens with this run's key results, and {_link(diagnosis.CHAPTER)} names this run's "
                     "weakest link (`./journey book` prints it at the end).")
    return "\n\n".join(p for p in parts if p)


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
    from datajourney.chapters import registry as chapters

    have = [n for n in planned if chapters.CHAPTERS[n - 1].available]
    return ", ".join(str(n) for n in have) if have else "not measured yet"


def chapter_link(number: int) -> str:
    """A link to chapter ``number``'s page, relative to chapter 1's page in the built book."""
    from datajourney.chapters import registry as chapters

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
    for i, h in enumerate(HOPS):  # the chapters under each box, as links to their pages in the book
        if where[i] != "not measured yet":
            fig.add_annotation(x=i, y=-0.68, showarrow=False, font=dict(size=12),
                               text="ch. " + ", ".join(chapter_link(int(c)) for c in where[i].split(", ")))
    fig.update_layout(title="The journey of a training sample (hover a hop; click a chapter)", height=280,
                      xaxis=dict(visible=False, range=[-0.6, n - 0.4]), yaxis=dict(visible=False, range=[-0.9, 0.8]),
                      margin=dict(t=50, l=10, r=10, b=10))
    return fig
