"""Chapter 1's front door: what the book found on the reference host, and what this run shows,
computed from result files (the title page links here; it cannot hold computed numbers)."""
from __future__ import annotations

import importlib
from pathlib import Path

import pandas as pd

from ... import diagnosis
from .. import results
from ..chapters import lookup

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
        found = {f.key: f for f in importlib.import_module(lookup(chapter).page).findings(res)}
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
    from ...intro import HOPS

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


