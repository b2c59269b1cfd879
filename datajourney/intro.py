"""Chapter 1: the pipeline map and the reader's machine, recorded as a result."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from .book import results
from .book.fingerprint import summary
from .book.plotting import PALETTE

CHAPTER = "01_introduction"

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
    from .book import chapters

    have = [n for n in planned if chapters.CHAPTERS[n - 1].available]
    return ", ".join(str(n) for n in have) if have else "not measured yet"


def chapter_link(number: int) -> str:
    """A link to chapter ``number``'s page, relative to chapter 1's page in the built book."""
    from .book import chapters

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


def run(*, data_dir=None, run_dir=None):
    """Record this machine's fingerprint as chapter 1's result."""
    params = {"data_dir": data_dir, "run_dir": run_dir}
    res = results.start(CHAPTER, params, run_dir, data_dir)
    res.add("machine", [{"field": k, "value": v} for k, v in summary(res.fingerprint).items()])
    res.save(results.resolve_run_dir(run_dir))
    return res


def machine_table(this: results.Result, ref: results.Result | None, ref_label: str,
                  is_reference_run: bool = False) -> pd.DataFrame:
    """The machine of this run beside the reference host, field by field (one column when this
    run is the reference run)."""
    mine = summary(this.fingerprint)
    if is_reference_run or ref is None:
        label = ref_label if is_reference_run else "this machine"
        return pd.DataFrame({"": list(mine), f"{label} (run {this.run_id})": list(mine.values())})
    theirs = summary(ref.fingerprint)
    return pd.DataFrame({"": list(mine), f"this machine (run {this.run_id})": list(mine.values()),
                         f"{ref_label} (run {ref.run_id})": [theirs.get(k, "—") for k in mine]})
