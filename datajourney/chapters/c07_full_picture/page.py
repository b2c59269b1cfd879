"""Chapter 7's page: the key results, computed notes and display tables built from what
:mod:`datajourney.chapters.c07_full_picture.experiment` measured (the profiled training loop, its ceiling, the
per-sample reader costs and the load sweep)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from datajourney.chapters.c07_full_picture import analysis
from datajourney.chapters.c07_full_picture.analysis import CHAPTER
from datajourney.chapters.c07_full_picture.analysis import analyse as _analyse
from datajourney.chapters.c07_full_picture.reading import (
    KEEP_UP,
    LABELS,
    LOADER_KEEPS_UP,
    STAGES,
    WORKER_NICE,
    best_scenario,
    ceiling_runs,
    scenario_stats,
    scenarios,
)
from datajourney.chapters.common import facts_reader, on_paper
from datajourney.core import phrasing as say
from datajourney.core.facts import Fact, Facts
from datajourney.core.findings import (
    HIGH_SPREAD,
    Action,
    Finding,
    Opening,
    choose,
    compare,
    cv,
    direction,
    num,
    pct,
    ratio_interval,
    span,
    spread_note,
    times,
)
from datajourney.core.findings import num as fx_num
from datajourney.toolkit.imagenet import MEAN, STD

#: This page's facts of a result: its chapter's own analysis (or facts as they are).
facts_of = facts_reader(_analyse)


def _md_stats(res) -> pd.DataFrame:
    """:func:`scenario_stats` with each scenario's label as Markdown text (it holds the result's strings)."""
    st = scenario_stats(res)
    return st.assign(label=st["label"].map(say.text))


def _md_scenarios(res) -> pd.DataFrame:
    """:func:`scenarios` with each run's label as Markdown text."""
    sc = scenarios(res)
    return sc.assign(label=sc["label"].map(say.text))


def _row(stats: pd.DataFrame, fmt: str, w: int, variant: str = "default"):
    m = stats[(stats["format"] == fmt) & (stats["workers"] == w) & (stats["variant"] == variant)]
    return None if m.empty else m.iloc[0]


def _runs(res, fmt: str, w: int, col: str, variant: str = "default") -> list[float]:
    sc = _md_scenarios(res)
    m = sc[(sc["format"] == fmt) & (sc["workers"] == w) & (sc["variant"] == variant)]
    return [float(v) for v in m[col].dropna()]


def _range(values, unit: str = "", scale: float = 1.0) -> str:
    v = [scale * x for x in values]
    if len(v) < 2:
        return "one run"
    return f"min–max {span(min(v), max(v), unit)} over {len(v)} runs"


def _ceiling_ips(res, kind: str = "eager") -> float:
    return float(ceiling_runs(res, kind)["images_per_s"].mean())


def _kind(row) -> str:
    """The step kind of a scenario row (an older result: eager)."""
    k = row.get("ceiling") if hasattr(row, "get") else None
    return k if isinstance(k, str) else "eager"


#: How the chapter names each ceiling, and what it is.
CEILING_NAMES = {"eager": ("the eager ceiling", ""),
                 "graphed": ("the graphed ceiling", " (the same CUDA graphs fed from GPU memory)")}


def _finding_w0(res):

    st = _md_stats(res)
    w0 = min(st[st["format"] == "imagefolder"]["workers"], default=None)
    if w0 is None:
        return None
    r = _row(st, "imagefolder", w0)
    waits = _runs(res, "imagefolder", w0, "DATALOADER_WAIT")
    share = float(r["wait_share"])
    who = "Without workers" if w0 == 0 else f"With the fewest workers tried (W={w0})"
    if share >= 0.1:
        tail = f"the data wait was **{pct(share)}** of the step and the compute share **{pct(r['au'])}**."
    else:
        tail = (f"the data wait was only {pct(share)} of the step even so "
                f"(compute share {pct(r['au'])}).")
    text = (f"{who} (ImageFolder, one file per image) each step waited **{num(r['DATALOADER_WAIT'], 'ms')}** for "
            f"data ({_range(waits, 'ms')}) against **{num(r['compute_ms'], 'ms')}** of compute: {tail}")
    return Finding("wait_w0", text, value=float(r["DATALOADER_WAIT"]), unit="ms",
                   interval=(min(waits), max(waits)) if len(waits) > 1 else None,
                   published="ImageFolder, workers=0: data wait" if w0 == 0 else None)


def _reader(res, fmt: str, stage: str, col: str = "ms"):
    if "readers" not in res.tables or res.table("readers").empty:
        return None
    t = res.table("readers")
    m = t[(t["format"] == fmt) & (t["stage"] == stage)]
    if m.empty or col not in m or pd.isna(m.iloc[0][col]):
        return None
    return float(m.iloc[0][col])


def _typical(res, fmt: str, stage: str) -> tuple[float, float | None, str] | None:
    """A reader stage's typical per-sample ms: (median, p90, "median"); an older result without
    medians gives (mean, p90, "mean")."""
    med = _reader(res, fmt, stage, "median_ms")
    if med is not None:
        return med, _reader(res, fmt, stage, "p90_ms"), "median"
    mean = _reader(res, fmt, stage)
    return None if mean is None else (mean, _reader(res, fmt, stage, "p90_ms"), "mean")


def _typ_text(t) -> str:
    value, p90, stat = t
    return f"{stat} {num(value, 'ms')}" + (f", p90 {num(p90, 'ms')}" if p90 is not None else "")


def _finding_formats_w0(res):
    a, b = _runs(res, "mds", 0, "images_per_s"), _runs(res, "imagefolder", 0, "images_per_s")
    if not a or not b:
        why = say.text(res.metadata.get("mds_note") or "MDS or W=0 was not part of this run")
        return Finding("mds_vs_imagefolder_w0", f"MDS against one file per image at W=0 was not measured here: {why}",
                       ), ""
    st = _md_stats(res)
    mid, lo, hi = ratio_interval(a, b)
    m, f = _row(st, "mds", 0), _row(st, "imagefolder", 0)
    d = direction(a, b)
    text = (f"At W=0, MDS shards ran **{compare(a, b)}** one file per image ({num(m['images_per_s'], 'images/s')} "
            f"vs {num(f['images_per_s'], 'images/s')}; images/s, MDS ÷ ImageFolder: {times(mid)}"
            + (f", {span(lo, hi, '×')} over the runs' extremes)." if len(a) > 1 else ")."))
    head, text = text, ""
    wm, wf = _runs(res, "mds", 0, "DATALOADER_WAIT"), _runs(res, "imagefolder", 0, "DATALOADER_WAIT")
    gap = float(m["DATALOADER_WAIT"] - f["DATALOADER_WAIT"])
    dw = direction(wm, wf)
    if dw == 0:
        text += (f"Their data waits were level ({num(m['DATALOADER_WAIT'], 'ms')} for shards, "
                 f"{num(f['DATALOADER_WAIT'], 'ms')} for files): at W=0 the format made no difference beyond the "
                 "runs' spread.")
        return (Finding("mds_vs_imagefolder_w0", head, value=mid, unit="×", interval=(lo, hi) if len(a) > 1 else None),
                text)
    text += (f"Each step waited {num(abs(gap), 'ms')} {'longer' if gap > 0 else 'less'} for shards "
             f"({num(m['DATALOADER_WAIT'], 'ms')} vs {num(f['DATALOADER_WAIT'], 'ms')})")
    if pd.notna(m.get("read_ms")) and pd.notna(f.get("read_ms")):
        diffs = {k: float(m[f"{k}_ms"] - f[f"{k}_ms"]) for k in STAGES}
        big = max(diffs, key=lambda k: abs(diffs[k]))
        text += f"; of that, the loop's stage timers put {_signed(diffs[big])} in the **{big}**"
    text += "."
    cold_m, cold_f = _typical(res, "mds", "read (cold)"), _typical(res, "imagefolder", "read (cold)")
    if cold_m is not None and cold_f is not None:
        faster = cold_m[0] < cold_f[0]
        kb_m = _reader(res, "mds", "read (cold)", "disk_kb")
        kb_f = _reader(res, "imagefolder", "read (cold)", "disk_kb")
        disk = (f"; the disk delivered {num(kb_m, 'KiB')} per MDS sample and {num(kb_f, 'KiB')} per file"
                if kb_m is not None and kb_f is not None else "")
        text += (f" Sample by sample, a cold read was {'faster' if faster else 'slower'} from a shard "
                 f"({_typ_text(cold_m)}) than from a file ({_typ_text(cold_f)}{disk})"
                 + (": the per-sample reads point away from the disk." if faster and gap > 0 else "."))
    warm_m, inside = _reader(res, "mds", "read (warm)"), _reader(res, "mds", "read inside the iterator")
    over = _reader(res, "mds", "iterator overhead")
    if gap > 0 and warm_m is not None and inside is not None and over is not None:
        bsz = int(res.parameters["batch_size"])
        extra = bsz * (inside - warm_m + over)
        rest = gap - extra
        share = extra / gap
        text += (f" Streaming's iterator costs {_signed(extra)} per batch of {bsz} (its read inside the iterator "
                 f"minus a direct read, plus its bookkeeping between samples; means × {bsz}): **{pct(share)} of the "
                 f"gap**. " + (f"The remaining {num(rest, 'ms')} per batch is not explained by these warm measurements."
                               if rest > 0 else "Together they account for the whole gap."))
    if gap > 0:
        text += " " + cold_iterator_sentence(res, m, f, gap)
    return (Finding("mds_vs_imagefolder_w0", head, value=mid, unit="×", interval=(lo, hi) if len(a) > 1 else None,
                    values=dict(direction=d)), text)


#: A per-sample timing × batch size within this (relative) of the loop's stage time matches it.
MATCH_TOL = 0.25


def cold_iterator_sentence(res, m, f, gap: float) -> str:
    """Whether streaming's iterator, timed cold as the loop's W=0 runs read, accounts for the loop's
    MDS read: its cold read per sample × batch size against the loop's read stage per batch. Which
    explanation of the W=0 gap the data support: the cold read through streaming's iterator, or not."""
    inside = _reader(res, "mds", "read inside the iterator (cold)")
    if inside is None:
        where = ("not in the reference run" if str(res.run_id).startswith("reference")
                 else "not measured in this run")
        return f"Streaming's iterator timed cold, as the loop's W=0 runs read, is {where}."
    if pd.isna(m.get("read_ms")) or not m["read_ms"] > 0:
        return ""
    bsz = int(res.parameters["batch_size"])
    per_batch = bsz * inside
    r = per_batch / float(m["read_ms"])
    direct = _reader(res, "mds", "read (cold)")
    kb = _reader(res, "mds", "read inside the iterator (cold)", "disk_kb")
    text = (f"Timed cold, as the loop's W=0 runs read, streaming's iterator read a sample in {num(inside, 'ms')} "
            f"(mean; × {bsz} = {num(per_batch, 'ms')} per batch"
            + (f", {num(kb, 'KiB')} from the disk per sample" if kb is not None else "")
            + f") against the loop's MDS read stage of {num(float(m['read_ms']), 'ms')} per batch")
    read_gap = float(m["read_ms"] - f["read_ms"]) if pd.notna(f.get("read_ms")) else None
    if 1 - MATCH_TOL <= r <= 1 + MATCH_TOL and (read_gap is None or read_gap < MATCH_TOL * gap):
        return text + (": they match, but the loop's read differs between the formats by "
                       + (f"only {num(read_gap, 'ms')} of the {num(gap, 'ms')} gap per batch" if read_gap is not None
                          else "an unknown amount") + ", so the gap does not lie in the read; this run does not "
                       "explain it.")
    if 1 - MATCH_TOL <= r <= 1 + MATCH_TOL:
        text += (f": they match. **The data support the cold read through streaming's iterator as the cause**: "
                 f"the read is {num(read_gap, 'ms')} of the {num(gap, 'ms')} gap per batch")
        if direct is not None and direct > 0:
            text += (f", and a direct cold `get_item` took {num(direct, 'ms')} per sample, so the iterator's read "
                     f"path cold costs {times(inside / direct)} a direct read of the same shards")
        others = {k: float(m[f"{k}_ms"] - f[f"{k}_ms"]) for k in STAGES if k != "read"
                  and pd.notna(m.get(f"{k}_ms")) and pd.notna(f.get(f"{k}_ms"))}
        big = max(others, key=lambda k: abs(others[k])) if others else None
        if big is not None and abs(others[big]) >= 0.05 * gap:
            text += f"; of the rest, the largest stage difference is the {big} ({_signed(others[big])})"
        return text + "."
    if r < 1 - MATCH_TOL:
        return text + (": well below it, so even cold, streaming's read does not account for the loop's; "
                       "the data support neither explanation, and the remainder stays unexplained.")
    return text + (": above it, so the cold read covers the loop's read but does not match it; this run does not "
                   "pin the remainder on it.")


def _signed(ms: float) -> str:
    return ("+" if ms >= 0 else "−") + num(abs(ms), "ms")


def _stage_text(r, *, pin: bool) -> str:
    parts = [f"{k} {num(r[f'{k}_ms'], 'ms')}" for k in ("read", "decode", "normalise", "collate")]
    return ", ".join(parts) + (f", pin {num(r['pin_ms'], 'ms')}" if pin else "")


def _finding_one_worker(res):

    st = _md_stats(res)
    r0, r1 = _row(st, "imagefolder", 0), _row(st, "imagefolder", 1)
    if r0 is None or r1 is None:
        return None
    a, b = _runs(res, "imagefolder", 1, "images_per_s"), _runs(res, "imagefolder", 0, "images_per_s")
    mid, lo, hi = ratio_interval(a, b)
    text = (
        f"One worker was **{compare(a, b)}** none (ImageFolder: {num(r1['images_per_s'], 'images/s')} vs "
        f"{num(r0['images_per_s'], 'images/s')}; images/s, W=1 ÷ W=0: {times(mid)}, {span(lo, hi, '×')} over the runs' "
        "extremes)."
    )
    head, text = text, ""
    if "read_ms" in r0 and pd.notna(r1.get("read_ms")):
        bsz = int(res.parameters["batch_size"])
        threads = int(r0.get("main_threads", res.metadata.get("main_threads", 1)) or 1)
        diffs = {k: float(r1[f"{k}_ms"] - r0[f"{k}_ms"]) for k in STAGES}
        big = max(diffs, key=lambda k: abs(diffs[k]))
        text += (f"Per batch of {bsz}, the worker spent {num(r1['worker_busy_ms'], 'ms')} "
                 f"({_stage_text(r1, pin=False)}), then pinning took {num(r1['pin_ms'], 'ms')} and the hand-over "
                 f"to the loop {num(r1['handover_ms'], 'ms')} of the loop's wait; at W=0 the main process, with "
                 f"{threads} intra-op thread{'s' if threads != 1 else ''}, spent "
                 f"{num(r0['worker_busy_ms'] + r0['pin_ms'], 'ms')} ({_stage_text(r0, pin=True)}). The largest "
                 f"difference is **{big}** ({_signed(diffs[big])} per batch).")
        t1 = _row(st, "imagefolder", 0, "1 thread")
        if t1 is not None:
            c = _runs(res, "imagefolder", 0, "images_per_s", "1 thread")
            text += (f" With one intra-op thread, W=0 normalised a batch in {num(t1['normalise_ms'], 'ms')} and ran "
                     f"{compare(c, b)} the runs with {threads} ({num(t1['images_per_s'], 'images/s')}).")
    return Finding("one_worker", head, value=mid, unit="×", interval=(lo, hi) if len(a) > 1 else None), text


def _finding_w4(res):

    st = _md_stats(res)
    f4, m4 = _row(st, "imagefolder", 4), _row(st, "mds", 4)
    if f4 is None:
        return None
    runs_f = _runs(res, "imagefolder", 4, "images_per_s")
    text = (f"With 4 workers, ImageFolder ran at **{num(f4['images_per_s'], 'images/s')}** "
            f"({_range(runs_f, 'images/s')}, data wait {num(f4['DATALOADER_WAIT'], 'ms')})")
    if m4 is not None:
        runs_m = _runs(res, "mds", 4, "images_per_s")
        text += (f" and MDS at {num(m4['images_per_s'], 'images/s')} (data wait {num(m4['DATALOADER_WAIT'], 'ms')}):"
                 f" MDS was {compare(runs_m, runs_f)} ImageFolder")
    text += f"; that is {num(f4['pct_of_ceiling'], '%')} of the ceiling for ImageFolder."
    return Finding("workers4", text, value=float(f4["images_per_s"]), unit="images/s",
                   interval=(min(runs_f), max(runs_f)) if len(runs_f) > 1 else None,
                   published="ImageFolder, workers=4: images/s")


def phase_chart(res):
    """Each scenario's step taken apart into its phases (means over runs), titled with the batch size and the
    model that ran, by its readable name (ResNet-50, never the torchvision id)."""
    from datajourney.chapters.c07_full_picture import charts
    from datajourney.chapters.c07_full_picture.params import Params
    from datajourney.chapters.c07_full_picture.reading import PHASES

    model = analysis.model_of(res)
    return charts.phase_bars(scenario_stats(res), phases=PHASES,
                             title=f"Per-step phase breakdown, batch {Params.value_of(res, 'batch_size')}, "
                                   f"{analysis.MODEL_NAMES.get(model, model)}")


def load_stats(res) -> pd.DataFrame:
    """Compute per step under load: one row per (mode, busy) with mean, min, max over repeats."""
    if "load" not in res.tables or res.table("load").empty:
        return pd.DataFrame()
    t = res.table("load")
    g = t.groupby(["mode", "busy"], sort=False)
    out = g.agg(compute_ms=("compute_ms", "mean"), compute_min=("compute_ms", "min"),
                compute_max=("compute_ms", "max"), compute_p90_ms=("compute_p90_ms", "mean"),
                main_cores=("main_cores", "mean"), cpu_busy_cores=("cpu_busy_cores", "mean"),
                n=("compute_ms", "count")).reset_index()
    return out


def _finding_load(res):

    ls = load_stats(res)
    if ls.empty:  # no load sweep: read compute against workers from the scenarios
        st = _md_stats(res)
        d = st[(st["format"] == "imagefolder") & (st["variant"] == "default")].sort_values("workers")
        if len(d) < 2:
            return None
        lo_w, hi_w = d.iloc[0], d.iloc[-1]
        a = _runs(res, "imagefolder", int(hi_w["workers"]), "compute_ms")
        b = _runs(res, "imagefolder", int(lo_w["workers"]), "compute_ms")
        word = choose(direction(a, b, tol=0.03), "grew", "fell", "did not change beyond the runs' spread")
        text = (f"Compute per step {word} as workers were added: {num(lo_w['compute_ms'], 'ms')} at "
                f"W={int(lo_w['workers'])}, {num(hi_w['compute_ms'], 'ms')} at W={int(hi_w['workers'])} (ImageFolder).")
        return Finding("compute_under_load", text, value=float(hi_w["compute_ms"]), unit="ms"), ""
    t = res.table("load")
    cores = int(t["cores"].iloc[0])
    def runs(mode, busy):
        return [float(v) for v in t[(t["mode"] == mode) & (t["busy"] == busy)]["compute_ms"]]

    base_mode = "plain" if "plain" in set(ls["mode"]) else ls["mode"].iloc[0]
    base = ls[ls["mode"] == base_mode]
    top = int(base.loc[base["compute_ms"].idxmax(), "busy"])  # the load at which it suffered most
    # unloaded: the mode's own runs with no busy process, else the interleaved runs of the ceiling
    c0 = runs(base_mode, 0) or [float(v) for v in res.table("ceiling")["compute_ms"]]
    c1 = runs(base_mode, top)
    m0, m1 = float(np.mean(c0)), float(np.mean(c1))
    tol = 0.05
    d = direction(m1, m0, tol=tol)
    every = min(c1) > max(c0)
    verb = choose(d, f"rose from {num(m0, 'ms')} to **{num(m1, 'ms')}** (+{pct(m1 / m0 - 1)}"
                     + (", in every run)" if every else ", on average: not every run was hit)"),
                  f"fell from {num(m0, 'ms')} to {num(m1, 'ms')}",
                  f"stayed within {pct(tol)} ({num(m0, 'ms')} → {num(m1, 'ms')})")
    who = "busy process" if top == 1 else "busy processes"
    where = ("On a batch kept in GPU memory" if res.metadata.get("device") == "cuda" else
             "On this CPU-only run (the model's own compute competes for the cores)")
    text = (f"{where}, compute per step {verb} with {top} {who} doing the loader's "
            f"work on {cores} cores ({base_mode}, {_range(c1, 'ms')}).")
    others = []
    for mode in [m for m in dict.fromkeys(ls["mode"]) if m != base_mode]:
        r = runs(mode, top)
        if r:
            label = _mode_label(mode)
            if "reserve" in mode and "reserved_cpus" in t:
                k = int(t[t["mode"] == mode]["reserved_cpus"].max())
                label += f" ({k} left to the training process)"
            if direction(r, c0, tol=tol) == 0:  # within the runs' spread or the tolerance: no signed difference
                others.append(f"{label}: level with the unloaded {base_mode} loop ({num(np.mean(r), 'ms')})")
            else:
                others.append(f"{label}: {num(np.mean(r), 'ms')} ({_signed(np.mean(r) - m0)} against the "
                              f"unloaded {base_mode} loop)")
    note = "At the same load: " + "; ".join(others) + "." if others else ""
    return Finding("compute_under_load", text, value=m1, unit="ms",
                   interval=(min(c1), max(c1)) if len(c1) > 1 else None), note


#: What each load-sweep mode does, as the chapter names it.
MODE_LABELS = {"plain": "busy processes at normal priority", "nice": f"busy processes at nice {WORKER_NICE}",
               "reserve": "busy processes kept off the reserved cores",
               "nice+reserve": f"busy processes at nice {WORKER_NICE} and off the reserved cores",
               "cuda_graphs": "the training step as CUDA graphs"}


def _mode_label(mode: str) -> str:
    return MODE_LABELS.get(mode, mode)


def _gap(res, row) -> tuple[float, dict]:
    """ms per step a scenario lost against the ceiling of its own step (eager or graphed), split
    into data wait, copy, compute and the rest."""
    ceil = ceiling_runs(res, _kind(row))
    if ceil.empty:
        ceil = ceiling_runs(res, "eager")
    gap = float(row["step_ms"] - ceil["step_ms"].mean())
    parts = {"data wait": float(row["DATALOADER_WAIT"] - ceil["DATALOADER_WAIT"].mean()),
             "the copy to the GPU": float(row["H2D_TRANSFER"] - ceil["H2D_TRANSFER"].mean()),
             "slower compute": float(row["compute_ms"] - ceil["compute_ms"].mean())}
    parts["the rest of the step"] = gap - sum(parts.values())
    return gap, parts


def graph_pairs(res) -> list[tuple]:
    """(tuned row, graphed row) of scenario means for each format and worker count where both the
    eager tuned step and the graphed step ran: the same loader, the step the only difference."""
    st = _md_stats(res)
    out = []
    for _, g in st[st["variant"] == "graphed"].iterrows():
        t = _row(st, g["format"], int(g["workers"]), "tuned")
        if t is not None:
            out.append((t, g))
    return out


def graph_missing(res) -> str | None:
    """Why this result has no scenario replayed from a CUDA graph (None when it has one)."""
    st = _md_stats(res)
    if (st["variant"] == "graphed").any():
        return None
    if str(res.run_id).startswith("reference"):
        return "is not in the reference run"
    note = res.metadata.get("graph_note")
    if note:
        return f"was not measured here ({say.text(note)})"
    return "was not part of this run (graphed_workers = [])"


def graph_effect(res, t, g) -> str:
    """What replaying the step from a CUDA graph changed under the same workers: compute per step
    against the eager tuned step, how much of the eager step's compute excess over its own ceiling
    the graph removed, and the share of each one's own ceiling."""
    a = _runs(res, g["format"], int(g["workers"]), "compute_ms", "graphed")
    b = _runs(res, t["format"], int(t["workers"]), "compute_ms", "tuned")
    d = direction(a, b, tol=0.02)
    word = choose(d, "grew", "fell", "did not change beyond the runs' spread")
    text = (f"Replayed from a CUDA graph under the same workers ({LABELS.get(g['format'], g['format'])}, "
            f"W={int(g['workers'])}), compute per step {word}: **{num(g['compute_ms'], 'ms')}** against the eager "
            f"tuned step's {num(t['compute_ms'], 'ms')} ({_signed(float(g['compute_ms'] - t['compute_ms']))}).")
    ge = ceiling_runs(res, "graphed")
    if not ge.empty:
        excess_e = float(t["compute_ms"]) - float(ceiling_runs(res, "eager")["compute_ms"].mean())
        excess_g = float(g["compute_ms"]) - float(ge["compute_ms"].mean())
        if excess_e <= 0:
            text += (f" The eager step's compute was not above its own ceiling's ({_signed(excess_e)}), so there was "
                     "no compute gap for the graph to remove.")
        else:
            removed = 1 - excess_g / excess_e
            share = ("all of that excess" if removed >= 1 else "none of that excess" if removed <= 0
                     else f"**{pct(removed)}** of that excess")
            text += (f" Over the compute of its own ceiling, the eager step took {_signed(excess_e)} per step and the "
                     f"graphed step {_signed(excess_g)}: the graph removed {share}.")
    text += (f" Share of its own ceiling: {num(t['pct_of_ceiling'], '%')} eager, "
             f"{num(g['pct_of_ceiling'], '%')} graphed.")
    return text


def _finding_best(res):
    sc = _md_scenarios(res)
    b = best_scenario(res).copy()
    b["label"] = say.text(b["label"])
    kind = _kind(b)
    runs = [float(v) for v in sc[sc["label"] == b["label"]]["pct_of_ceiling"]]
    keep = 100 * KEEP_UP
    if min(runs) >= keep:
        verdict = f"it keeps up: at least {num(keep, '%')} of its ceiling in " + (
            "every run" if len(runs) > 1 else "its one run")
    elif b["pct_of_ceiling"] >= keep:
        verdict = f"on average it keeps up ({num(keep, '%')} of its ceiling), but not in every run"
    else:
        verdict = f"it falls short of {num(keep, '%')} of its ceiling"
    text = (f"The best configuration (the highest share of its own ceiling), **{b['label']}**, reached "
            f"**{num(b['pct_of_ceiling'], '%')} of {CEILING_NAMES[kind][0]}**{CEILING_NAMES[kind][1]} "
            f"({_range(runs, '%')}; "
            f"{num(b['images_per_s'], 'images/s')} against {num(_ceiling_ips(res, kind), 'images/s')}, "
            f"compute share {pct(b['au'])}): {verdict}.")
    head, text = text, ""
    if kind != "eager":
        text += f" The eager ceiling took {num(_ceiling_ips(res), 'images/s')}."
    gap, parts = _gap(res, b)
    if gap > 0:
        big = max(parts, key=parts.get)
        text += (f" Of the {num(gap, 'ms')} per step it lost to its ceiling, "
                 + ", ".join(f"{k} {_signed(v)}" for k, v in parts.items()) + f"; the largest part is **{big}** "
                 + (f"({pct(parts[big] / gap)} of the gap)." if parts[big] <= gap else
                    "(more than the whole gap: the parts below zero offset the rest)."))
    pairs = graph_pairs(res)
    if pairs:
        t, g = next(((t, g) for t, g in pairs if g["label"] == b["label"]),
                    max(pairs, key=lambda p: float(p[1]["pct_of_ceiling"])))
        text += " " + graph_effect(res, t, g)
    else:
        why = graph_missing(res)
        if why:
            text += f" The step replayed from a CUDA graph {why}: the best configuration is the best eager one."
    st = _md_stats(res)
    default = st[st["variant"] == "default"]
    if b["variant"] != "default" and not default.empty:
        d = default.loc[default["pct_of_ceiling"].idxmax()]
        gap_d, parts_d = _gap(res, d)
        big_d = max(parts_d, key=parts_d.get)
        text += (f" The best of the default recipe, {d['label']}, reached {num(d['pct_of_ceiling'], '%')}; the largest "
                 f"part of its {num(gap_d, 'ms')} gap was {big_d} ({_signed(parts_d[big_d])}).")
    return Finding("best_vs_ceiling", head, value=float(b["pct_of_ceiling"]), unit="%",
                   interval=(min(runs), max(runs)) if len(runs) > 1 else None), text.strip()


def _with_notes(res) -> list[tuple]:
    """Each key result with the note that carries its details (empty where the sentence says it all)."""
    short = [(_finding_w0(res), ""), (_finding_w4(res), "")]
    out = [short[0], _finding_formats_w0(res), _finding_one_worker(res), short[1], _finding_load(res),
           _finding_best(res)]
    return [x for x in out if x is not None and x[0] is not None][:6]


def finding_note(res, key: str) -> str:
    """The details of the key result ``key`` (what a section shows beside its chart), "" when none."""
    return next((note for f, note in _with_notes(res) if f.key == key), "")


# --------------------------------------------------------------------------- computed prose
def spread_notes(res) -> str:
    """A sentence for every scenario (and the ceiling) whose images/s spread by more than the
    threshold over its runs; else one sentence giving the largest spread."""
    sc = _md_scenarios(res)
    notes, worst = [], (0.0, "")
    for label, g in sc.groupby("label", sort=False):
        v = [float(x) for x in g["images_per_s"]]
        n = spread_note(label, v, "images/s")
        if n:
            notes.append(n)
        if len(v) > 1 and cv(v) > worst[0]:
            worst = (cv(v), label)
    for kind, name in (("eager", "The ceiling"), ("graphed", "The graphed ceiling")):
        c = [float(x) for x in ceiling_runs(res, kind).get("images_per_s", [])]
        n = spread_note(name, c, "images/s") if c else None
        if n:
            notes.append(n)
    if notes:
        return "\n".join(f"* {x}" for x in notes)
    if worst[1]:
        return (f"No scenario's images/s varied by more than {pct(HIGH_SPREAD)} (coefficient of variation) across "
                f"its runs; the largest spread was {pct(worst[0])}, for {worst[1]}.")
    return "Each scenario ran once: no spread to report."


def sizing(res) -> str:
    """How many workers the measured per-image cost predicts, against what the sweep shows: the
    first worker count at which the loader kept up, and what then kept the loop off the ceiling."""

    st = _md_stats(res)
    r1 = _row(st, "imagefolder", 1)
    ceil = _ceiling_ips(res)
    ceil_compute = float(res.table("ceiling")["compute_ms"].mean())
    bsz = int(res.parameters["batch_size"])
    keep = 100 * KEEP_UP
    text = []
    d = facts_of(res).get("cpu_ms_per_image")
    if d is not None:
        text.append(f"The loader's work cost **D = {say.value(d)}** of CPU per image in the best setting (read, "
                    "decode, normalise and collate: the medians of its per-batch stage timers ÷ the batch size); "
                    "chapter 12 sizes the workers with it.")
    warm = [_reader(res, "imagefolder", s) for s in ("read (warm)", "decode", "normalise")]
    if all(v is not None for v in warm):
        m = sum(warm)
        threads = int(res.metadata.get("main_threads", 1))
        text.append(f"Read warm, decoded and normalised in the main process ({threads} intra-op threads), one image "
                    f"costs {num(m, 'ms')}, which predicts {num(ceil * m / 1e3, '')} cores of such work for the "
                    f"ceiling's {num(ceil, 'images/s')}.")
    need = None
    if r1 is not None and pd.notna(r1.get("worker_busy_ms")):
        w = float(r1["worker_busy_ms"]) / bsz
        need = ceil * w / 1e3
        text.append(f"Inside the one worker of W=1 (cold cache, one thread, collation into shared memory) an image "
                    f"cost {num(w, 'ms')}, which predicts **{num(need, '')} workers**.")
        busy0 = _row(st, "imagefolder", 0)
        if busy0 is not None and pd.notna(busy0.get("worker_busy_ms")):
            w0 = float(busy0["worker_busy_ms"]) / bsz
            text.append(f"At W=0 the same stages cost {num(w0, 'ms')} per image in the main process: the worker pays "
                        f"{_pct_more(w, w0)}.")
    for fmt in ("imagefolder", "mds"):
        d = st[(st["format"] == fmt) & (st["variant"] == "default")].sort_values("workers")
        if d.empty:
            continue
        fed = d[d["wait_share"] < LOADER_KEEPS_UP]
        ok = d[d["pct_of_ceiling"] >= keep]
        if fed.empty:
            text.append(f"{LABELS[fmt]}: with none of the worker counts tried did the data wait fall below "
                        f"{pct(LOADER_KEEPS_UP)} of the step.")
            continue
        k = fed.iloc[0]
        first = int(k["workers"])
        s = f"{LABELS[fmt]}: the data wait fell below {pct(LOADER_KEEPS_UP)} of the step from **W={first}**"
        if need is not None:
            s += ", " + _against_prediction(first, need, sorted(int(w) for w in d["workers"]))
        if ok.empty:
            worst = d.loc[d["compute_ms"].idxmax()]
            more = (f" and up to {num(worst['compute_ms'], 'ms')} (W={int(worst['workers'])})"
                    if int(worst["workers"]) != first else "")
            s += (f"; yet no worker count reached {num(keep, '%')} of the ceiling: compute per step was "
                  f"{num(k['compute_ms'], 'ms')} at W={first}{more}, against the ceiling's {num(ceil_compute, 'ms')}.")
        else:
            s += f"; it first reached {num(keep, '%')} of the ceiling at W={int(ok.iloc[0]['workers'])}."
        text.append(s)
    t = st[st["variant"] == "tuned"].sort_values("workers")
    tok = t[t["pct_of_ceiling"] >= keep]
    if not t.empty:
        text.append("The tuned recipe " + (
            f"reached {num(keep, '%')} of the ceiling with {tok.iloc[0]['label']}, its compute per step "
            f"{num(tok.iloc[0]['compute_ms'], 'ms')}." if not tok.empty else
            f"reached {num(keep, '%')} of the ceiling in none of its configurations (best "
            f"{num(t['pct_of_ceiling'].max(), '%')})."))
    return " ".join(text) if text else "The per-image costs were not recorded in this run."


def _against_prediction(first: int, need: float, tried: list[int]) -> str:
    """Where the first worker count whose data wait fell below the bar stands against the predicted count, on the
    grid of counts actually tried (a count never run cannot be the first)."""
    below = [w for w in tried if need <= w < first]  # tried, at or above the prediction, the wait still above
    if first < need:
        return f"below the prediction ({num(need, '')})"
    if not below:
        return f"the first count tried at or above the prediction ({num(need, '')})"
    return (f"although W={', '.join(str(w) for w in below)}, at or above the prediction ({num(need, '')}), "
            "did not bring the wait below it")


def _pct_more(a: float, b: float) -> str:

    return f"{pct(a / b - 1)} more" if a >= b else f"{pct(1 - a / b)} less"


def cpu_note(res) -> str:
    """What the CPU columns show in this run, in numbers."""
    st = _md_stats(res)
    if "main_cores" not in st:
        return ("This older result records CPU use only as psutil's system-wide percentage, averaged over the whole "
                "scenario.")
    cores = int(res.metadata.get("cores", 0)) or None
    f = st[(st["format"] == "imagefolder") & (st["variant"] == "default")].sort_values("workers")
    if f.empty:
        return ""
    a, b = f.iloc[0], f.iloc[-1]
    return (f"At W={int(a['workers'])} the training process kept {num(a['main_cores'], '')} cores busy "
            f"({int(a['main_threads'])} intra-op threads) and the machine {num(a['cpu_busy_cores'], '')}"
            + (f" of its {cores}" if cores else "") +
            f"; at W={int(b['workers'])} the workers used {num(b['worker_cores'], '')} cores, the training process "
            f"{num(b['main_cores'], '')} and the machine {num(b['cpu_busy_cores'], '')}.")


def _kernel_share(res, label: str) -> float | None:
    """Share of the traced step in which the GPU ran kernels, for the trace of ``label``."""
    if "timeline" not in res.tables or res.table("timeline").empty:
        return None
    tl = res.table("timeline")
    g = tl[tl["label"] == label]
    if g.empty:
        return None
    step = float(g["step_ms"].iloc[0])
    busy = float(g[g["lane"] == "GPU: kernels"]["dur_ms"].sum())
    return busy / step if step > 0 and busy > 0 else None


def nvml_note(res) -> str:
    """NVML against the compute share for the best configuration, over the steady-state steps, with the share of
    the traced step in which the profiler saw kernels run (the measured check of both)."""
    b = best_scenario(res).copy()
    b["label"] = say.text(b["label"])
    if pd.isna(b.get("gpu_util")):
        return "NVML is not available here (no NVIDIA GPU or no nvidia-ml-py): no GPU utilisation was sampled."
    n = b.get("util_samples")
    nv, au = float(b["gpu_util"]) / 100, float(b["au"])
    text = (f"Over the steady-state steps of the best configuration ({b['label']}), NVML read "
            f"**{num(b['gpu_util'], '%')}** on average" + (f" ({int(round(n))} samples per run)" if pd.notna(n) else
                                                           " (an older result: averaged over the whole scenario)")
            + f" while the compute share was {pct(au)}.")
    k = _kernel_share(res, b["label"])
    if k is not None:
        near = ("closer to the compute share than to NVML's reading" if abs(k - au) < abs(k - nv)
                else "closer to NVML's reading")
        text += (f" The profiler's traced step of the same configuration shows kernels running for {pct(k)} of the "
                 f"step, {near}.")
    return text


def compute_growth_note(res) -> str:
    """Which scenarios' compute per step grew against the ceiling, how busy the CPU was in them,
    and whether the load sweep measured that load; what the tuned recipe changes at once, and
    which runs would separate its changes."""
    st = _md_stats(res)
    sc = _md_scenarios(res)
    c0 = [float(v) for v in res.table("ceiling")["compute_ms"]]
    m0 = float(np.mean(c0))
    cores = int(res.metadata.get("cores", 0)) or None
    of = f" of {cores}" if cores else ""
    grown = []
    for _, r in st[st["variant"] == "default"].iterrows():
        runs = [float(v) for v in sc[sc["label"] == r["label"]]["compute_ms"]]
        if runs and direction(runs, c0) > 0:
            grown.append(r)
    if not grown:
        return (f"No scenario of the default recipe computed a step measurably slower than the ceiling "
                f"({num(m0, 'ms')}).")
    has_cpu = "cpu_busy_cores" in st
    items = [f"{r['label']} {num(r['compute_ms'], 'ms')}"
             + (f" at {num(r['cpu_busy_cores'], '')} busy cores{of}" if has_cpu else "") for r in grown]
    text = [f"Compute per step grew beyond the ceiling's {num(m0, 'ms')} in: " + "; ".join(items) + "."]
    ls = load_stats(res)
    if not ls.empty and has_cpu:
        base_mode = "plain" if "plain" in set(ls["mode"]) else ls["mode"].iloc[0]
        base = ls[(ls["mode"] == base_mode) & (ls["busy"] > 0)].sort_values("busy")
        if not base.empty:
            light = base.iloc[0]
            top = max(float(r["cpu_busy_cores"]) for r in grown)
            level = f"{int(light['busy'])} busy processes, {num(light['cpu_busy_cores'], '')} busy cores{of}"
            if top < 0.9 * float(light["cpu_busy_cores"]):
                text.append(f"The load sweep's lightest load ({level}; compute {num(light['compute_ms'], 'ms')}) "
                            f"kept more cores busy than any of these scenarios (at most {num(top, '')}): the "
                            "sweep did not measure their load, so it does not show that a busy CPU made their "
                            "compute grow. In this run their growth has no isolated cause.")
            else:
                text.append(f"These scenarios kept as many cores busy as the load sweep's lightest load ({level}), "
                            f"at which compute per step was {num(light['compute_ms'], 'ms')}.")
    tuned = st[st["variant"] == "tuned"]
    if not tuned.empty:
        t = tuned.loc[tuned["images_per_s"].idxmax()]
        d = _row(st, t["format"], int(t["workers"]))
        remedy = str(res.parameters["tuned_remedy"])
        changes = ["uint8 batches", f"normalisation {say.where('normalise', res.metadata.get('device') or 'cpu')}"]
        if "nice" in remedy:
            changes.append(f"workers at nice {WORKER_NICE}")
        if "reserve" in remedy:
            changes.append("workers kept off the reserved cores")
        s = f"The tuned recipe computed a step in {num(t['compute_ms'], 'ms')} ({t['label']}"
        s += f"; the default recipe {num(d['compute_ms'], 'ms')})" if d is not None else ")"
        if len(changes) > 2:
            missing = ["the default recipe with its workers treated the same way"]
            missing.append("the tuned recipe with untreated workers")
            s += (f", but it changes {len(changes)} things at once ({', '.join(changes)}), so which of them kept "
                  f"compute down is not isolated: the runs that would tell ({' and '.join(missing)}) were not part "
                  "of this run.")
        else:
            s += "; its workers were not treated, so only the batch format and where it is normalised differ."
        text.append(s)
    return " ".join(text)


def reference_runs(host: str | None = None) -> pd.DataFrame:
    """The best configuration's share of its own ceiling in every committed run of this chapter on
    the reference host (the reference run and the runs under ``repeats/``): one row per run."""
    from datajourney.core import results

    host = host or results.DEFAULT_REFERENCE_HOST
    paths = [results.REFERENCE_DIR / host / f"{CHAPTER}.json"]
    rep = results.REFERENCE_DIR / host / "repeats"
    if rep.is_dir():
        paths += sorted(rep.glob(f"{CHAPTER}*.json"))
    rows = []
    for path in paths:
        if not path.is_file():
            continue
        r = results.Result.load(path)
        b = best_scenario(r)
        runs = [float(v) for v in scenarios(r).query("label == @b.label")["pct_of_ceiling"]]
        rows.append({"run": r.run_id or path.stem, "kind": "repeat" if path.parent == rep else
                     "reference run", "best configuration": b["label"], "ceiling": _kind(b),
                     "% of ceiling (mean)": b["pct_of_ceiling"],
                     "min–max over its runs (%)": span(min(runs), max(runs)), "runs": len(runs),
                     f"every run ≥ {num(100 * KEEP_UP, '%')}": "yes" if min(runs) >= 100 * KEEP_UP else "no"})
    return pd.DataFrame(rows)


def ratio_note(res) -> str:
    """What the two format ratios of the chapter divide, so that they are never read as one."""
    st = _md_stats(res)
    m, f = _row(st, "mds", 0), _row(st, "imagefolder", 0)
    if m is None or f is None:
        return ""
    w = float(f["DATALOADER_WAIT"] / m["DATALOADER_WAIT"])
    i = float(m["images_per_s"] / f["images_per_s"])
    return (f"The row *streaming ÷ ImageFolder, workers=0* is the source's **data-wait** ratio: ImageFolder's wait "
            f"divided by MDS's ({times(w)} here; above 1 when shards waited less). Key result 2 divides "
            f"**images/s**, MDS ÷ ImageFolder ({times(i)} here; above 1 when shards ran faster).")


def load_note(res) -> str:
    """Notes on modes of the load sweep that could not run here."""
    notes = res.metadata.get("load_notes") or {}
    return " ".join(f"{say.text(_mode_label(k).capitalize())}: {say.text(v)}." for k, v in notes.items())


def timeline_note(res) -> str:
    """What the traced steps show: GPU busy time within the step, the wait, and for the forward
    pass how long the main thread took to issue it against how long the GPU took to run it."""

    if "timeline" not in res.tables or res.table("timeline").empty:
        return "No profiler trace was recorded in this run (profile = False)."
    tl = res.table("timeline")
    out = []
    key = "trace" if "trace" in tl else "label"
    for _, g in tl.groupby(key, sort=False):
        name = say.text(g["label"].iloc[0])
        step = float(g["step_ms"].iloc[0])
        busy = float(g[g["lane"] == "GPU: kernels"]["dur_ms"].sum())
        s = f"In the traced step of **{name}** ({num(step, 'ms')} under the profiler)"
        if busy > 0:
            s += f", the GPU ran kernels for {num(busy, 'ms')} ({pct(busy / step)} of the step)"
        cpu = g[(g["lane"] == "CPU: phases")].set_index("name")
        gpu = g[(g["lane"] == "GPU: phases")].set_index("name")
        if "DATALOADER_WAIT" in cpu.index:
            s += f"; the main thread waited {num(cpu.loc['DATALOADER_WAIT', 'dur_ms'], 'ms')} for the batch"
        if "FORWARD" in cpu.index and "FORWARD" in gpu.index and "busy_ms" in gpu:
            f_cpu, f_span, f_busy = (float(cpu.loc["FORWARD", "dur_ms"]), float(gpu.loc["FORWARD", "dur_ms"]),
                                     float(gpu.loc["FORWARD", "busy_ms"]))
            s += (f"; it took {num(f_cpu, 'ms')} to issue the forward pass, which kept the GPU busy for "
                  f"{num(f_busy, 'ms')} of the {num(f_span, 'ms')} it spanned there")
        out.append(s + ".")
    return " ".join(out)


def _std(r, col: str):
    """The standard deviation of ``col`` over a scenario's runs, or None below three runs (two runs give
    no standard deviation worth printing)."""
    return r.get(f"{col}_std") if int(r.get("runs", 0) or 0) >= 3 else None


def key_metrics(res) -> dict:
    """Metric name (as published) -> (mean, std) of this result (std only from three runs or more)."""
    st = scenario_stats(res)
    out = {}
    for fmt, label in (("imagefolder", "ImageFolder"), ("mds", "streaming (MDS)")):
        for w in (0, 4):
            r = _row(st, fmt, w)
            if r is not None:
                out[f"{label}, workers={w}: data wait"] = (r["DATALOADER_WAIT"], _std(r, "DATALOADER_WAIT"))
                out[f"{label}, workers={w}: images/s"] = (r["images_per_s"], _std(r, "images_per_s"))
    a, b = _row(st, "imagefolder", 0), _row(st, "mds", 0)
    if a is not None and b is not None:  # the source's ratio: MDS's data-wait speed-up over ImageFolder
        out["streaming ÷ ImageFolder, workers=0"] = (a["DATALOADER_WAIT"] / b["DATALOADER_WAIT"], None)
    r = _row(st, "imagefolder", 0)
    if r is not None:
        out["compute per step (forward+backward+optimizer)"] = (r["compute_ms"], _std(r, "compute_ms"))
        out["H2D per step"] = (r["H2D_TRANSFER"], _std(r, "H2D_TRANSFER"))
    return out


# --------------------------------------------------------------------------- tables for the notebook


def scenario_table(res, part: str = "main") -> pd.DataFrame:
    """The scenarios as the chapter shows them, means over runs. ``part="main"``: the columns the
    prose uses (data wait, compute, step, AU, images/s, share of the ceiling with its min–max, the
    machine's busy cores); ``part="details"``: the rest (runs, copy, data-wait share, min–max of
    images/s, NVML, CPU of the training process and of the workers, page cache at the start)."""
    st = scenario_stats(res)

    def rng(c):
        if f"{c}_min" not in st:
            return ["—"] * len(st)
        return [span(a, b) for a, b in zip(st[f"{c}_min"], st[f"{c}_max"], strict=True)]

    if part == "main":
        out = pd.DataFrame({
            "scenario": st["label"], "data wait (ms)": st["DATALOADER_WAIT"], "compute (ms)": st["compute_ms"],
            "step (ms)": st["step_ms"], "compute share (%)": 100 * st["au"], "images/s": st["images_per_s"],
            "% of ceiling": st["pct_of_ceiling"], "min–max (%)": rng("pct_of_ceiling"),
            "ceiling": st["ceiling"].map({"eager": "eager", "graphed": "CUDA graph"})})
        if "cpu_busy_cores" in st:
            out["busy cores"] = st["cpu_busy_cores"]
        return out
    out = pd.DataFrame({
        "scenario": st["label"], "runs": st["runs"], "copy to GPU (ms)": st["H2D_TRANSFER"],
        "data-wait share (%)": 100 * st["wait_share"], "images/s min–max": rng("images_per_s"),
        "NVML GPU util (%)": st["gpu_util"]})
    if "main_cores" in st:
        out["training process (cores)"] = st["main_cores"]
        out["workers (cores)"] = st["worker_cores"]
    else:
        out["CPU util (%)"] = st["cpu_util"]
    out["cached at start (%)"] = 100 * st["resident_at_start"]
    return out


def ceiling_caption(res) -> str:
    """The scenario table's caption: which ceiling each share is taken of, with each ceiling's numbers."""
    parts = []
    for kind, name in (("eager", "eager ceiling"), ("graphed", "graphed ceiling")):
        c = ceiling_runs(res, kind)
        if not c.empty:
            parts.append(f"{name} {num(c['images_per_s'].mean(), 'images/s')}, compute "
                         f"{num(c['compute_ms'].mean(), 'ms')} per step, mean of {len(c)} runs")
    return ("Scenarios: means over runs; each share is of the ceiling of the scenario's own step (column "
            "*ceiling*: the eager step, or the same CUDA graph fed from GPU memory), with its min–max over the runs; "
            "busy cores of the whole machine (" + "; ".join(parts) + ")")


def graph_note(res) -> str:
    """The graphed step against the eager one: the two ceilings (what launching kernels one by one
    costs with the CPU idle), and for each loader run both ways what the graph changed."""
    why = graph_missing(res)
    if why:
        return f"The training step replayed from a CUDA graph {why}."
    e, g = ceiling_runs(res, "eager"), ceiling_runs(res, "graphed")
    out = []
    if not g.empty:
        a, b = [float(v) for v in g["compute_ms"]], [float(v) for v in e["compute_ms"]]
        word = choose(direction(a, b, tol=0.01), "slower than", "faster than", "level with")
        out.append(f"Fed from GPU memory with the CPU otherwise idle, the graphed step computed in "
                   f"{num(np.mean(a), 'ms')} ({_range(a, 'ms')}), {word} the eager step's {num(np.mean(b), 'ms')}: the "
                   f"graphed ceiling is {num(g['images_per_s'].mean(), 'images/s')}, the eager one "
                   f"{num(e['images_per_s'].mean(), 'images/s')}.")
    out += [graph_effect(res, t, gr) for t, gr in graph_pairs(res)]
    if not graph_pairs(res):
        out.append("No loader ran both with the eager tuned step and with the graphed step, so the graph's effect "
                   "under the same workers is not measured here.")
    return " ".join(out)


def reader_table(res) -> pd.DataFrame:
    """Per-sample costs of each reader (one process), one row per stage: for each format the
    median and p90 per sample (an older result without medians: the mean), and the KiB the disk
    delivered per sample on the cold read."""
    if "readers" not in res.tables or res.table("readers").empty:
        return pd.DataFrame()
    t = res.table("readers")
    centre = "median_ms" if "median_ms" in t and t["median_ms"].notna().any() else "ms"
    word = "median" if centre == "median_ms" else "mean"
    out = pd.DataFrame({"stage": list(dict.fromkeys(t["stage"]))})
    for fmt in dict.fromkeys(t["format"]):
        part = t[t["format"] == fmt].set_index("stage")
        name = LABELS.get(fmt, fmt)
        # a stage with no per-sample distribution (the iterator's overhead) shows its mean
        c = part[centre].where(part[centre].notna(), part["ms"]) if centre != "ms" else part["ms"]
        out[f"{name}: {word} (ms)"] = out["stage"].map(c)
        out[f"{name}: p90 (ms)"] = out["stage"].map(part["p90_ms"])
        if "disk_kb" in part:
            out[f"{name}: disk KiB per sample"] = out["stage"].map(part["disk_kb"])
    return out


def reader_note(res) -> str:
    """How to read the per-sample table: which statistic it shows, and where a few slow samples
    pull a mean above the p90 (an older result without medians)."""
    if "readers" not in res.tables or res.table("readers").empty:
        return ""
    t = res.table("readers")
    if "median_ms" in t and t["median_ms"].notna().any():
        return ("Medians and p90 over the samples; the iterator's overhead is a mean (the iterator's wall time per "
                "sample minus its stages).")
    skew = t[t["p90_ms"].notna() & (t["ms"] > t["p90_ms"])]
    text = ("This result records the mean and the p90 of each stage, not the median; the iterator's overhead is "
            "a mean (wall time per sample minus the stages).")
    if not skew.empty:
        parts = [f"{LABELS.get(r['format'], r['format'])} {r['stage']} (mean {num(r['ms'], 'ms')}, p90 "
                 f"{num(r['p90_ms'], 'ms')})" for _, r in skew.iterrows()]
        text += (" Where the mean lies above the p90, a few samples slower than nine in ten pulled it up: "
                 + "; ".join(parts) + ". Compare those rows by their p90.")
    return text


def ipc_note(run_dir=None, reference_host: str | None = None) -> str:
    """Where one worker meets none: a pointer to chapter 8's measurement of moving a batch between
    processes, with the cost it measured (this run's chapter 8 if present, else the reference's)."""
    from datajourney.chapters.common import ipc_crossref

    return ipc_crossref(run_dir, reference_host)


def stage_rows(res) -> pd.DataFrame:
    """Scenario means of the runs whose loader stages say most about W=0 against W=1."""
    st = scenario_stats(res)
    if "read_ms" not in st:
        return pd.DataFrame()
    keep = st["workers"].isin([0, 1]) | (st["variant"] == "tuned")
    return st[keep].reset_index(drop=True)


def paper_exercise(res) -> str:
    """AU and the compute share worked out by hand for the default recipe's best scenario (the plain DataLoader):
    AU from its images/s and the ceiling's, the compute share from its compute phases and its step, and which of
    the two the bar applies to, with the direction against the bar computed; the answers folded."""
    st = scenario_stats(res)
    plain = st[st["variant"] == "default"]
    ceil = ceiling_runs(res)
    if plain.empty or ceil.empty or "images_per_s" not in ceil:
        return "The exercise on paper needs a measured ceiling and a default-recipe scenario; this run has none."
    row = plain.loc[plain["pct_of_ceiling"].idxmax()]
    c_ips = float(ceil["images_per_s"].mean())
    ips, step, comp = float(row["images_per_s"]), float(row["step_ms"]), float(row["compute_ms"])
    au, share = ips / c_ips, comp / step
    intro = (f"**Work it out.** The ceiling (the same step with its batch already in GPU memory) fed "
             f"**{num(c_ips)} images/s**. {say.text(row['label'])}, the best of the default recipe, fed "
             f"**{num(ips)} images/s**; its steps took **{num(step, 'ms')}** on average, of which the compute phases "
             f"(forward, backward, optimizer) took **{num(comp, 'ms')}**. AU is steps × G ÷ wall time, with G the "
             "ceiling's step; with the same batch in every step that is the images/s ÷ the ceiling's.")
    questions = ["What is this configuration's AU?",
                 "What is its compute share (compute ÷ the step's wall time)?",
                 f"MLPerf Storage's bar is an AU of {pct(KEEP_UP)}. Which of the two numbers is held to it, and does "
                 "this configuration reach it?"]
    answers = [f"{num(ips)} ÷ {num(c_ips)} = **{pct(au)}**.",
               f"{num(comp, 'ms')} ÷ {num(step, 'ms')} = **{pct(share)}**.",
               f"AU: {pct(au)} {'reaches' if au >= KEEP_UP else 'falls short of'} the {pct(KEEP_UP)} bar. The compute "
               f"share ({pct(share)}, {'above' if share >= KEEP_UP else 'below'} the bar) counts the fed loop's own "
               "compute, which can grow when loader processes share the CPU; AU counts the ceiling's G, so only AU "
               "is held to the bar."]
    return on_paper(intro, questions, answers)


def takeaways(res) -> str:
    """The chapter's conclusions for a training job, each computed from this run."""
    st = _md_stats(res)
    keep = 100 * KEEP_UP
    out = []
    for fmt in ("imagefolder", "mds"):
        d = st[(st["format"] == fmt) & (st["variant"] == "default")].sort_values("workers")
        if d.empty:
            continue
        ok = d[d["pct_of_ceiling"] >= keep]
        top = d.loc[d["pct_of_ceiling"].idxmax()]
        out.append(f"{LABELS[fmt]}, default recipe: " + (
            f"the fewest workers that reached {num(keep, '%')} of the ceiling here: **W={int(ok.iloc[0]['workers'])}**."
            if not ok.empty else f"no worker count tried reached {num(keep, '%')} of the ceiling (best "
                                 f"{num(top['pct_of_ceiling'], '%')}, at W={int(top['workers'])})."))
    wmax = int(st["workers"].max())
    a, b = _runs(res, "mds", wmax, "images_per_s"), _runs(res, "imagefolder", wmax, "images_per_s")
    if a and b:
        out.append(f"With {wmax} workers MDS was {compare(a, b)} ImageFolder.")
    tuned = st[st["variant"] == "tuned"]
    if not tuned.empty:
        t = tuned.loc[tuned["images_per_s"].idxmax()]
        remedy = say.code(res.parameters["tuned_remedy"])
        on = say.where("normalise", res.metadata.get("device") or "cpu")
        out.append(f"The tuned recipe (uint8 batches normalised {on}, workers: {remedy})"
                   f" reached {num(t['pct_of_ceiling'], '%')} of the ceiling at best ({t['label']}), with a copy of "
                   f"{num(t['H2D_TRANSFER'], 'ms')} per step.")
    g = st[st["variant"] == "graphed"]
    if not g.empty:
        gb = g.loc[g["pct_of_ceiling"].idxmax()]
        every = float(gb.get("pct_of_ceiling_min", gb["pct_of_ceiling"])) >= keep
        out.append(
            f"With its step replayed from a CUDA graph, the same loader reached {num(gb['pct_of_ceiling'], '%')} "
            f"of the graphed ceiling at best ({gb['label']}): "
            + (f"at least {num(keep, '%')} in every run." if every else f"below {num(keep, '%')} in at least one run.")
        )
    elif not tuned.empty and graph_missing(res):
        out.append(f"The step replayed from a CUDA graph {graph_missing(res)}.")
    return "\n".join(f"* {x}" for x in out)


# --------------------------------------------------------------------------- the opening


loader_snippet = analysis.loader_snippet



# --------------------------------------------------------------------------- facts, worded


def _setting_label(f: Fact) -> str:
    """The scenario a fact belongs to, in words, its format escaped (it comes from the result)."""
    s = f.setting
    fmt = str(s.get("format"))
    name = LABELS[fmt] if fmt in LABELS else say.text(fmt)
    variant = str(s.get("variant", "default"))
    return f"{name}, W={int(s['workers'])}" + ("" if variant == "default" else f", {say.text(variant)}")


def _rates(a: Fact, b: Fact) -> str:
    return f"{say.value(a, runs=False)} against {say.value(b, runs=False)}"


def finding_wait_w0(facts: Facts) -> Finding | None:
    f = facts.get("wait_w0")
    if f is None:
        return None
    w0 = int(f.setting["workers"])
    who = "Without workers" if w0 == 0 else f"With the fewest workers tried (W={w0})"
    text = (f"{who} (ImageFolder, one file per image), each step waited **{say.value(f)}** for data, "
            f"{say.comparison(facts['wait_vs_compute_w0'], facts)} ({say.value(facts['compute_w0'], runs=False)}).")
    return Finding("wait_w0", text, f.number, "ms", published=f.published, interval=f.spread)


def finding_mds_vs_imagefolder_w0(facts: Facts) -> Finding | None:
    c = facts.get("mds_vs_imagefolder_w0")
    if c is None:
        return None
    text = (f"At W=0, MDS shards ran **{say.comparison(c, facts)}** "
            f"({_rates(facts[c.of], facts[c.basis])}).")
    return Finding("mds_vs_imagefolder_w0", text, c.number, "×")


def finding_one_worker(facts: Facts) -> Finding | None:
    c = facts.get("one_worker")
    if c is None:
        return None
    text = f"One ImageFolder worker ran **{say.comparison(c, facts)}** ({_rates(facts[c.of], facts[c.basis])})."
    return Finding("one_worker", text, c.number, "×")


def finding_workers4(facts: Facts) -> Finding | None:
    f = facts.get("workers4")
    if f is None:
        return None
    c = facts.get("workers4_vs_w0")
    text = (f"With 4 workers, ImageFolder fed **{say.value(f)}**"
            + (f", {say.comparison(c, facts)}" if c is not None else "") + ".")
    return Finding("workers4", text, f.number, "images/s", published=f.published, interval=f.spread)


def finding_compute_under_load(facts: Facts) -> Finding | None:
    f = facts.get("compute_under_load")
    if f is None:
        return None
    s = f.setting
    if not s.get("sweep"):
        text = (f"Compute per step at W={s['workers']} took {say.value(f)}, "
                f"{say.comparison(facts['compute_growth'], facts)} (ImageFolder).")
        return Finding("compute_under_load", text, f.number, "ms", interval=f.spread)
    step = ("the GPU step" if facts.data.get("device") == "cuda"
            else "the step (on a CPU, the model competes for the cores)")
    text = (f"With {s['busy']} busy processes doing the loader's work on {s['cores']} cores, {step} took "
            f"**{say.value(f)}**, {say.comparison(facts['contention'], facts)}.")
    return Finding("compute_under_load", text, f.number, "ms", interval=f.spread)


def finding_best_vs_ceiling(facts: Facts) -> Finding:
    f = facts["best_vs_ceiling"]
    kind = str(f.setting.get("ceiling", "eager"))
    name = CEILING_NAMES.get(kind, CEILING_NAMES["eager"])[0]
    v = facts.get("best_keeps_up")
    keep = fx_num(v.setting["keep_up"], "%") if v is not None else ""
    verdict = {"every run": f"it keeps up: at least {keep} of its ceiling in "
                            + ("every run" if v is not None and v.setting.get("runs", 1) > 1 else "its one run"),
               "on average": f"on average it keeps up ({keep} of its ceiling), but not in every run",
               "short": f"it stays below {keep} of its ceiling"}.get(str(v.value) if v is not None else "", "")
    if "best_vs_ceiling.flagged" in facts:
        return Finding("best_vs_ceiling", over_ceiling(facts), f.number, "%", interval=f.spread)
    text = (f"The best setting (the highest share of its own ceiling), **{_setting_label(f)}**, fed "
            f"**{say.value(f)}** of {name}'s images/s, {say.comparison(facts['best_vs_ceiling_rate'], facts)}"
            + (f": {verdict}." if verdict else "."))
    return Finding("best_vs_ceiling", text, f.number, "%", interval=f.spread)


def over_ceiling(facts: Facts) -> str:
    """The words for a best setting that fed more than its own ceiling: a measurement problem, not an outcome."""
    f = facts["best_vs_ceiling"]
    return (f"**Flagged: a measurement problem.** The best setting, {_setting_label(f)}, fed {say.value(f)} of its "
            f"own ceiling's images/s. A ceiling that is exceeded is not a ceiling: the ceiling step (data already in "
            f"memory) measured slower than the whole pipeline, so this run's share of the ceiling, and whether the "
            f"loader keeps up, are not findings. Run the chapter again (more `runs`) before reading them.")


def findings(facts) -> list[Finding]:
    """The chapter's key results (3-6), worded from its facts (a result is analysed first)."""
    facts = facts_of(facts)
    out = [fn(facts) for fn in (finding_wait_w0, finding_mds_vs_imagefolder_w0, finding_one_worker,
                                finding_workers4, finding_compute_under_load, finding_best_vs_ceiling)]
    return [f for f in out if f is not None][:6]


# --------------------------------------------------------------------------- the opening
def _uint8_snippet(nice: bool, device: str, workers: int, batch_size: int | None) -> str:
    """Batches as uint8, normalised on ``device`` with the loader's mean and std (and nice workers), with the
    workers and batch size the run measured the recipe at."""
    lines = ["import os", "import torch", "from torch.utils.data import DataLoader", "",
             "# the Dataset returns each decoded image as uint8 (C, H, W):", "# a quarter of float32's bytes"]
    args = ", ".join([f"batch_size={batch_size}"] * (batch_size is not None) + [f"num_workers={workers}"])
    if nice:
        lines += ["loader = DataLoader(", f"    dataset, {args},",
                  f"    worker_init_fn=lambda _: os.nice({WORKER_NICE}),  # workers yield the CPU", ")"]
    else:
        lines += [f"loader = DataLoader(dataset, {args})"]
    to = f'x.to("{device}", non_blocking=True)' if device == "cuda" else "x"
    mean = ", ".join(f"{v:g}" for v in MEAN)
    std = ", ".join(f"{v:g}" for v in STD)
    lines += [f'mean = torch.tensor([{mean}], device="{device}")', "mean = mean.view(1, 3, 1, 1) * 255",
              f'std = torch.tensor([{std}], device="{device}")', "std = std.view(1, 3, 1, 1) * 255",
              "for x, y in loader:", f"    x = ({to}.float() - mean) / std"]
    return "\n".join(lines)


GRAPH_SNIPPET = '''import torch

# the whole step captured once as a CUDA graph (PyTorch's recipe)
static_x = torch.empty(64, 3, 224, 224, device="cuda")
static_y = torch.empty(64, dtype=torch.long, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):  # warm up before the capture
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        loss_fn(model(static_x), static_y).backward()
        opt.step()
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
opt.zero_grad(set_to_none=True)
with torch.cuda.graph(graph):
    loss = loss_fn(model(static_x), static_y)
    loss.backward()
    opt.step()
for x, y in loader:  # each step: copy the batch in, replay
    static_x.copy_(x, non_blocking=True)
    static_y.copy_(y, non_blocking=True)
    graph.replay()'''


def _opening_findings(facts: Facts) -> list[Finding]:
    out = []
    f = facts.get("wait_w0")
    if f is not None:
        w0 = int(f.setting["workers"])
        who = "Without workers" if w0 == 0 else f"With {w0} worker{'s' if w0 != 1 else ''}"
        out.append(Finding("wait_w0", f"{who}, each step waited **{say.value(f, runs=False)}** for data, "
                                      f"{say.comparison(facts['wait_vs_compute_w0'], facts)}.",
                           f.number, "ms", published=f.published, interval=f.spread))
    f4 = facts.get("workers4")
    if f4 is not None and "workers4_vs_w0" in facts:
        out.append(Finding("workers4", f"With 4 workers, ImageFolder fed **{say.value(f4, runs=False)}**, "
                                       f"{say.comparison(facts['workers4_vs_w0'], facts)}.", f4.number, "images/s",
                           published=f4.published, interval=f4.spread))
    b = facts["best_vs_ceiling"]
    out.append(Finding("best_vs_ceiling", over_ceiling(facts) if "best_vs_ceiling.flagged" in facts else
                       f"The best setting, {_setting_label(b)}, fed **{say.value(b, runs=False)}**"
                       f" of its own ceiling's images/s, "
                       f"{say.comparison(facts['best_vs_ceiling_rate'], facts)}.", b.number, "%"))
    return out[:3]


def _action_workers(facts: Facts) -> Action | None:
    a = facts.advice_for("image.num_workers")
    if a is None:
        return None
    d = facts.get("cpu_ms_per_image")
    w = d.setting.get("workers") if d is not None else None
    tail = (f" The loader's work cost {say.value(d)} of CPU per image in a worker at "
            f"{say.setting('num_workers', w)} (D in chapter 4's model)." if w is not None else "")
    return Action(say.advice(a, facts) + tail, a.snippet)


def _action_uint8(facts: Facts) -> Action | None:
    c = facts.get("uint8_gain")
    if c is None or c.number is None:
        return None
    remedy = str(facts.data.get("tuned_remedy") or "")
    how = f", workers at nice {WORKER_NICE}" if "nice" in remedy else ""
    device = facts.data.get("device") or "cpu"
    on = say.where("normalise", device)
    if c.number > 1 and not c.level:
        batch = (facts.data.get("image_workload") or {}).get("batch_size")
        return Action(f"Send uint8 batches and normalise them {on}{how}: {say.comparison(c, facts)}.",
                      _uint8_snippet("nice" in remedy, device, int(facts[c.of].setting["workers"]), batch))
    return Action(f"Keep normalising in the workers: uint8 batches normalised {on}{how} ran "
                  f"{say.comparison(c, facts)}.")


def _action_graphs(facts: Facts) -> Action | None:
    c = facts.get("graph_gain")
    if c is None or c.number is None:
        return None
    if c.number > 1 and not c.level:
        return Action(f"Replay the training step from CUDA graphs: under the same loader it ran "
                      f"{say.comparison(c, facts)}.", GRAPH_SNIPPET)
    return Action(f"Keep the eager step: replayed from CUDA graphs under the same loader it ran "
                  f"{say.comparison(c, facts)}.")


def opening(facts) -> Opening:
    """What the chapter opens with: the data wait without workers, what 4 workers fed and how close the best
    setting came to its ceiling, one sentence each; then the worker count, the uint8 recipe and CUDA graphs,
    each worded from the comparison this run measured."""
    facts = facts_of(facts)
    actions = [_action_workers(facts), _action_uint8(facts), _action_graphs(facts)]
    return Opening(_opening_findings(facts), [a for a in actions if a is not None][:3])


def device_note(res) -> str:
    """Where this run ran and with which model, and what did not run here."""
    facts = facts_of(res)
    m = res.metadata
    text = (f"What ran: {say.text(facts.data['workload'])} (model {say.code(facts.data['model'])}), "
            f"{int(m.get('cores') or 0)} logical cores.")
    if m.get("device") != "cuda":
        text += (" Without a GPU these are CPU timings of the model that ran: they exercise the same code; the GPU "
                 "numbers are the reference run's, in the comparison table below.")
    if m.get("mds_note"):
        text += f"\n\n{say.skipped('The MDS half', m['mds_note'])}"
    return text


# --------------------------------------------------------------------------- storage formats
#: How each shuffle scope reads in the table.
SHUFFLE_WORDS = {"global": "the whole set", "buffer": "shards in random order, samples within a buffer",
                 "shard": "shards in random order, samples within their shard"}


def _formats_data(facts: Facts) -> dict | None:
    return facts.data.get("formats") if "formats" in facts.data else None


def format_table(res) -> pd.DataFrame:
    """One row per format measured: its conversion, its size on disk, its best images/s cold and warm (and the
    share of the ceiling), the first batch, the CPU per image, its shuffle and its access by index."""
    facts = facts_of(res)
    data = _formats_data(facts)
    if not data:
        return pd.DataFrame()
    rows = []
    for r in data["rows"]:
        fmt = r["format"]
        row = {"format": LABELS.get(fmt, fmt), "library": r["library"],
               "conversion (s)": r["convert_s"] if fmt != "imagefolder" else "none",
               "on disk (MB)": r["bytes"] / 1e6, "× the images": r["bytes"] / r["source_bytes"]}
        for cache in ("cold", "warm"):
            f = facts.get(analysis.format_key(fmt, cache))
            c = facts.get(f"{analysis.format_key(fmt, cache)}.vs_ceiling")
            row[f"images/s, {cache} (W)"] = (f"{fx_num(f.number, 'images/s', with_unit=False)} ({f.setting['workers']})"
                                             if f is not None and f.number is not None else "–")
            if cache == "cold":
                row["% of ceiling, cold"] = 100 * c.number if c is not None and c.number is not None else np.nan
                row["first batch, cold (ms)"] = r.get("cold_first_batch_ms", np.nan)
        row["CPU per image (ms)"] = r["cpu_ms_per_image"]
        scope = SHUFFLE_WORDS.get(r["shuffle"], r["shuffle"])
        if r["buffer"]:
            scope += f" of {r['buffer']:,}"
        elif r["shuffle"] == "shard":
            scope += f" ({r['per_shard']:,} each)"
        row["shuffle"] = scope
        row["neighbours together (× global)"] = r["cobatch"]
        row["by index, cold / warm (ms)"] = (f"{fx_num(r['access_cold_ms'], 'ms', with_unit=False)} / "
                                             f"{fx_num(r['access_warm_ms'], 'ms', with_unit=False)}"
                                             if r["random_access"] else "not supported")
        rows.append(row)
    return pd.DataFrame(rows)


def format_rates(res) -> pd.DataFrame:
    """The chart's data: each format's best images/s cold and warm, with its runs' range."""
    facts = facts_of(res)
    data = _formats_data(facts)
    rows = []
    for r in data["rows"] if data else []:
        for cache in ("cold", "warm"):
            f = facts.get(analysis.format_key(r["format"], cache))
            if f is None or f.number is None:
                continue
            lo, hi = f.spread or (f.number, f.number)
            rows.append(dict(format=LABELS.get(r["format"], r["format"]), cache=cache, workers=f.setting["workers"],
                             images_per_s=f.number, low=lo, high=hi))
    return pd.DataFrame(rows)


def format_note(res) -> str:
    """The format comparison in words: "not measured in this run" where the result has none; else what was not
    measured and why, the flagged measurements with their cause, and the advice of the declared question."""
    facts = facts_of(res)
    data = _formats_data(facts)
    if not data:
        return ("The storage formats were not measured in this run (its result has no format comparison: "
                "`storage_formats` was empty, or the run predates it).")
    out = []
    for fmt, why in data["notes"].items():
        out.append(f"* **{say.text(LABELS.get(fmt, fmt))}**: {say.text(why)}.")
    for r in data["rows"]:
        fmt = r["format"]
        name = say.text(LABELS.get(fmt, fmt))
        flag = facts.get(f"format.{fmt}.cold_vs_warm.flagged")
        if flag is not None:
            c = facts[f"format.{fmt}.cold_vs_warm"]
            cause = (f"its cold runs started with {pct(flag.setting['resident'])} of its files in the page cache"
                     if flag.value == "not cold" else
                     f"cold {say.comparison(c, facts)}, with {pct(flag.setting['resident'])} of its files cached "
                     "as the cold runs started: the difference is noise or a machine that drifted, not the cache")
            out.append(f"* **Flagged: a measurement problem.** {name} read cold is not a finding: {cause}. "
                       "Run the chapter again (more `format_repeats`, `format_steps`) before reading it.")
        for cache in ("cold", "warm"):
            if f"{analysis.format_key(fmt, cache)}.flagged" in facts:
                f = facts[analysis.format_key(fmt, cache)]
                out.append(f"* **Flagged: a measurement problem.** {name} ({cache}) fed {say.value(f, runs=False)}, "
                           f"more than the ceiling ({say.value(facts['format.ceiling'], runs=False)}): a ceiling "
                           "that is exceeded is not one, so this rate is not a finding.")
    a = facts.advice_for("image.storage_format")
    if a is not None:
        out.append(say.advice(a, facts))
        if a.verdict == "change" and a.snippet:
            out.append(f"\n```python\n{a.snippet}\n```")
    else:
        out.append("The format question has no answer in this run: the baseline (one file per image, read cold) "
                   "or every other format was not measured, or was flagged above.")
    return "\n".join(out)

