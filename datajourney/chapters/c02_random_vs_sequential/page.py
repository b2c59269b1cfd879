"""Chapter 2's page: the findings, computed notes and display tables built from a result of
:mod:`datajourney.chapters.c02_random_vs_sequential.experiment` (random small-file reads vs one sequential shard).

Every sentence of the chapter that states a measured outcome is built by a function of
this module from the run's result (:func:`findings` and the ``*_note`` functions).
"""
from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from datajourney.chapters.c02_random_vs_sequential.experiment import CHAPTER, MB
from datajourney.chapters.common import (  # noqa: F401
    COLD_TARGET,
    NEAR_ONE,
    WARM_TARGET,
    cold_gap,
    cold_label,
    cold_verdict,
    compared,
    extremes,
    guest_cold,  # noqa: F401
    latency_stats,  # noqa: F401
    residency_note,
    size_text,
    spread_summary,
    table_of,
    values_of,
)
from datajourney.core import findings as fnd
from datajourney.core.findings import Action, Finding, Opening, num, pct, times
from datajourney.core.stats import mean

#: A drop in bandwidth from one read size to the next larger one smaller than this (relative)
#: is not worth a comment.
DIP_TOL = 0.10
#: Paired run-by-run ratios (fadvise ÷ drop_caches) whose mean lies within this of 1 are level.
PAIRED_TOL = 0.05


def key_metrics(res) -> dict:
    """The chapter's headline numbers as metric -> (mean, std), for the three-column table."""
    h = res.table("headline")
    c = h[h["cache"] == "cold"]
    r, s = c[c["pattern"] == "random"]["MBps"], c[c["pattern"] == "sequential"]["MBps"]
    if r.empty or s.empty:
        return {}
    return {
        "random read, cold": (r.mean(), r.std()),
        "sequential read, cold": (s.mean(), s.std()),
        "sequential ÷ random, cold": (s.mean() / r.mean(), None),
    }


#: The latency table's columns and their headers.
LATENCY_COLUMNS = {"series": "pass", "run": "run", "reads": "reads", "p10_us": "p10 (µs)", "p50_us": "median (µs)",
                   "p90_us": "p90 (µs)", "p99_us": "p99 (µs)", "max_us": "max (µs)", "error": "error"}


def latency_table(res) -> pd.DataFrame:
    """The latency check per pass and run, readable headers; columns empty in every row are left out."""
    lat = table_of(res, "latency")
    cols = [c for c in LATENCY_COLUMNS if c in lat and lat[c].notna().any()]
    return lat[cols].rename(columns=LATENCY_COLUMNS)


# --------------------------------------------------------------------------- findings
def findings(res) -> list[Finding]:
    """The chapter's key results, computed from ``res`` (3 to 6 findings)."""
    out = [cold_gap(res), _warm_gap(res)]
    for f in (_latency_finding(res), _size_finding(res), _odirect_finding(res)):
        if f is not None:
            out.append(f)
    if len(out) < 3:   # a run with most experiments switched off: say what the rest showed
        extra = [Finding("shard_length", shard_length_note(res)),
                 Finding("residency", residency_note(res.table("headline")))]
        out += [f for f in extra if f.text][: 3 - len(out)]
    return out


def _warm_gap(res) -> Finding:
    h = res.table("headline")
    rnd, seq = values_of(h, pattern="random", cache="warm"), values_of(h, pattern="sequential", cache="warm")
    if not rnd or not seq:
        return Finding("warm_gap", "No warm runs in this result (`cache_states` left out `warm`).")
    mid, lo, hi = fnd.ratio_interval(seq, rnd)
    d = fnd.direction(seq, rnd)
    phrase = compared(seq, rnd, "sequential", "random")
    collapsed = d == 0 or 1 / NEAR_ONE <= mid <= NEAR_ONE
    text = (f"**Warm** (every page in RAM), the shard ran at **{num(mean(seq), 'MB/s')}** and the small files "
            f"at **{num(mean(rnd), 'MB/s')}**: {phrase} ({extremes(lo, hi)}). The source reports that "
            f"warm the gap \u201ccollapses to near 1x\u201d; ")
    if collapsed:
        text += f"here it does (within {times(NEAR_ONE)} either way counts as near 1×)."
    elif d < 0:
        text += "here it reverses: the small files read faster than the shard."
    else:
        text += (f"here it does not: the shard stays {times(mid)} ahead. With the device out of the picture, what "
                 "still differs between the layouts is the per-file `open` and `close` (and the lookup of each "
                 "path), which the shard does not pay; this run does not time those calls on their own.")
    return Finding("warm_gap", text, mid, "×", interval=(lo, hi), values=dict(collapsed=collapsed))


def _latency_finding(res) -> Finding | None:
    lat = latency_stats(res)
    if lat is None:
        err = table_of(res, "latency")
        if not err.empty and "error" in err and err["error"].notna().any():
            return Finding("cold_latency", "The latency check could not use `O_DIRECT` on this file system "
                           f"(`{err['error'].dropna().iloc[0]}`): whether 'cold' reads reach the device is unknown.")
        return None
    med, second, warm = lat["median_us"], lat["second_medians"], lat["warm_medians"]
    size = size_text(lat["request_bytes"])
    text = (f"A single {size} `O_DIRECT` read at a random offset, after a purge, took a median "
            f"**{num(med, 'µs')}** (p10 {num(lat['p10_us'], 'µs')}, p90 {num(lat['p90_us'], 'µs')}, "
            f"p99 {num(lat['p99_us'], 'µs')}; {lat['reads']:,} reads)")
    if warm:
        text += f"; a page-cache hit took {num(mean(warm), 'µs')}"
    text += ". "
    text += cold_verdict(res).sentence(head=False)
    if second:
        d = fnd.direction(lat["medians"], second, tol=0.10)
        ratio = med / mean(second)
        text += " " + fnd.choose(
            d, f"A second pass over the same blocks was {times(ratio)} faster: the first pass filled a cache below "
               "the guest's page cache.",
            f"A second pass over the same blocks was {times(1 / ratio)} slower.",
            "A second pass over the same blocks took as long: both passes were served from the same place.")
    return Finding("cold_latency", text, med, "µs", interval=(min(lat["medians"]), max(lat["medians"])),
                   values=dict(guest_cold=guest_cold(res)))


def _size_finding(res) -> Finding | None:
    sw = table_of(res, "size_sweep")
    if sw.empty:
        return None
    label = cold_label(res)
    sizes = sorted(set(sw["file_size"]))
    per = {}
    for s in sizes:
        seq = values_of(sw, file_size=s, cache="cold", pattern="sequential")
        rnd = values_of(sw, file_size=s, cache="cold", pattern="random")
        if seq and rnd:
            per[s] = (seq, rnd)
    if len(per) < 2:
        return None
    small, large = min(per), max(per)
    r_small = fnd.ratio_interval(*per[small])
    r_large = fnd.ratio_interval(*per[large])
    d_large = fnd.direction(*per[large])
    text = (f"{label.capitalize()}, by file size: the shard read sequentially was {times(r_small[0])} as fast as the "
            f"shuffled files at {size_text(small)} per file and {times(r_large[0])} "
            f"({extremes(r_large[1], r_large[2])}) at {size_text(large)}. ")
    trend = fnd.direction(r_small[0], r_large[0], tol=0.10)
    text += fnd.choose(trend, "The gap narrows as files grow", "The gap widens as files grow",
                       "The gap stays about the same across file sizes")
    text += fnd.choose(
        d_large,
        f", but at {size_text(large)} the two layouts have not converged: sequential is still faster.",
        f", and at {size_text(large)} the files read faster than the shard.",
        f", and at {size_text(large)} the two layouts are level within the runs' spread: they converge.",
    )
    return Finding("size_sweep", text, r_large[0], "×", interval=(r_large[1], r_large[2]),
                   values=dict(small_size=small, large_size=large, small_ratio=r_small[0]))


def _odirect_finding(res) -> Finding | None:
    cs = table_of(res, "chunk_sweep")
    if cs.empty or "O_DIRECT" not in set(cs["mode"]) or cs[cs["mode"] == "O_DIRECT"]["MBps"].isna().all():
        return None
    label = cold_label(res)
    chunks = sorted(set(cs["chunk"]))
    smallest = chunks[0]
    buf, od = values_of(cs, mode="buffered", chunk=smallest), values_of(cs, mode="O_DIRECT", chunk=smallest)
    if not buf or not od:
        return None
    mid, lo, hi = fnd.ratio_interval(buf, od)
    d = fnd.direction(buf, od)
    text = (f"{label.capitalize()} sequential reads of one shard in {size_text(smallest)} requests: "
            f"through the page cache "
            f"**{num(mean(buf), 'MB/s')}**, with `O_DIRECT` (no readahead, one request at a time) "
            f"**{num(mean(od), 'MB/s')}**")
    text += fnd.choose(d, f": readahead is worth {times(mid)} ({extremes(lo, hi)}) at that size. ",
                       ": `O_DIRECT` was faster even at that size. ", ": level at that size. ")
    caught = next(
        (
            c
            for c in chunks
            if values_of(cs, mode="O_DIRECT", chunk=c)
            and fnd.direction(values_of(cs, mode="O_DIRECT", chunk=c), values_of(cs, mode="buffered", chunk=c)) >= 0
        ),
        None,
    )
    text += (
        f"From {size_text(caught)} per request on, `O_DIRECT` was level with or faster than buffered reads."
        if caught is not None
        else f"Up to {size_text(chunks[-1])} per request `O_DIRECT` stayed below buffered reads."
    )
    return Finding("odirect", text, mid, "×", interval=(lo, hi), values=dict(caught_up_at=caught))


# --------------------------------------------------------------------------- computed notes
def latency_note(res) -> str:
    """The latency check as a sentence (empty when it did not run)."""
    f = _latency_finding(res)
    return f.text if f is not None else ""


def size_note(res) -> str:
    """The file-size sweep's result, then a comment on every configuration with a wide spread."""
    f = _size_finding(res)
    return "\n\n".join(t for t in ((f.text if f else ""), size_sweep_notes(res)) if t)


def odirect_note(res) -> str:
    """The read-size sweep's result, then the dips and wide spreads, each judged against the runs."""
    f = _odirect_finding(res)
    return "\n\n".join(t for t in ((f.text if f else ""), chunk_sweep_notes(res)) if t)


def published_note(res) -> str:
    """This run's cold ratio against the published one, and whether the two 'cold's are comparable."""
    from datajourney.chapters import published

    fig = published.figure(CHAPTER, "sequential ÷ random, cold")
    f = cold_gap(res)
    if fig is None or f.value is None:
        return ""
    lo, hi = f.interval
    d = fnd.direction([lo, hi], fig.mean, tol=0.10) if lo <= fig.mean <= hi else (1 if lo > fig.mean else -1)
    text = (f"The published cold ratio is {fig.text}; this run's is {f.headline}, "
            + fnd.choose(d, f"{times(f.value / fig.mean)} larger", f"{times(fig.mean / f.value)} smaller",
                         "the published figure lies within this run's range") + ". ")
    g = guest_cold(res)
    if g:
        text += ("This run's cold reads were **guest-cold** (latency check below): a cache under the virtual machine "
                 "served them, while the published figures come from a physical drive, so the two 'cold's differ.")
    elif g is False:
        text += "The latency check below found this run's cold reads no faster than flash."
    return text


def headline_summary(res) -> pd.DataFrame:
    from datajourney.core.stats import summarise

    return summarise(res.table("headline"), ["cache", "pattern"], "MBps")


def spread_notes(df: pd.DataFrame, by: list[str], label) -> list[str]:
    """A :func:`findings.spread_note` for each group of ``by`` whose runs spread by more than
    :data:`findings.HIGH_SPREAD` (coefficient of variation)."""
    out = []
    if df.empty:
        return out
    for key, g in df.groupby(by, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        note = fnd.spread_note(label(*key), g["MBps"].dropna().tolist(), "MB/s")
        if note:
            slowest = g.loc[g["MBps"].idxmin(), "run"] if "run" in g else None
            if slowest == g["run"].min() and len(g) > 2:
                note += " The first run was the slowest."
            out.append(note)
    return out


def headline_notes(res) -> str:
    """Spread comments on the headline (coefficient of variation above :data:`findings.HIGH_SPREAD`)."""
    h = res.table("headline")
    notes = spread_notes(h, ["cache", "pattern"], lambda c, p: f"The {c} {p} read")
    return "\n".join(f"* {n}" for n in notes) if notes else "Every headline configuration varied by less than " \
        f"{pct(fnd.HIGH_SPREAD)} (coefficient of variation) over its runs."


#: Readable headers of the residency table's grouping columns.
RESIDENCY_HEADERS = {"cache": "cache", "pattern": "access pattern", "kind": "layout", "purge_method": "purge"}


def residency_table(df: pd.DataFrame, by: Sequence[str], *, cold: str = "cold", names: dict | None = None,
                    count: str = "runs") -> pd.DataFrame:
    """Per group of ``by``: how many timed reads, and the most and least of the data resident in the
    page cache when they started (percent). Cache states read ``cold`` (e.g. 'guest-cold') and
    'warm'; ``names`` maps raw values of the other columns (e.g. ``kind``) to readable ones.
    Used by chapters 2 and 3."""
    g = df.groupby(list(by), as_index=False, sort=False).agg(
        n=("resident_at_start", "size"), most=("resident_at_start", "max"), least=("resident_at_start", "min"))
    if "cache" in g:
        g["cache"] = g["cache"].map(lambda c: cold if c == "cold" else c)
    for c in by:
        if c != "cache" and names:
            g[c] = g[c].map(lambda v: names.get(v, v))
    g["most"], g["least"] = 100 * g["most"], 100 * g["least"]
    return g.rename(columns={**{c: RESIDENCY_HEADERS.get(c, c) for c in by}, "n": count,
                             "most": "resident at start, most (%)", "least": "resident at start, least (%)"})


def size_sweep_notes(res) -> str:
    sw = table_of(res, "size_sweep")
    if sw.empty:
        return ""
    return spread_summary(sw, ["cache", "pattern", "file_size"], lambda c, p, s: f"{c} {p}, {size_text(s)} files")


def chunk_sweep_notes(res) -> str:
    """Where bandwidth drops from one read size to the next larger one: inside the spread or not."""
    cs = table_of(res, "chunk_sweep")
    if cs.empty:
        return ""
    cs = cs[cs["MBps"].notna()]
    lines = []
    for mode, g in cs.groupby("mode", sort=False):
        chunks = sorted(set(g["chunk"]))
        for a, b in zip(chunks, chunks[1:]):
            va, vb = values_of(g, chunk=a), values_of(g, chunk=b)
            if not va or not vb or mean(vb) >= (1 - DIP_TOL) * mean(va):
                continue
            d = fnd.direction(va, vb)
            if d == 0:
                lines.append(
                    f"* {mode}: {size_text(b)} requests averaged {num(mean(vb), 'MB/s')}, below "
                    f"{size_text(a)} ({num(mean(va), 'MB/s')}), but the runs overlap "
                    f"({fnd.span(min(vb), max(vb), 'MB/s')}"
                    f" vs {fnd.span(min(va), max(va), 'MB/s')}, "
                    f"{len(vb)} runs each): the dip is inside the run-to-run spread, not a property of the "
                    f"read size."
                )
            else:
                lines.append(f"* {mode}: {size_text(b)} requests were slower than {size_text(a)} in every run "
                             f"({num(mean(vb), 'MB/s')} vs {num(mean(va), 'MB/s')}; ranges "
                             f"{fnd.span(min(vb), max(vb), 'MB/s')} and {fnd.span(min(va), max(va), 'MB/s')}): "
                             "a real dip on this machine.")
    if not lines:
        lines.append("* Bandwidth never fell by more than "
                     f"{pct(DIP_TOL)} from one read size to the next larger one.")
    lines.append("* " + spread_summary(cs, ["mode", "chunk"], lambda m, c: f"{m} at {size_text(c)}"))
    return "\n".join(lines)


def shard_length_note(res) -> str:
    """Why the headline's sequential read and the sweep's differ: same settings, two shard lengths."""
    sl = table_of(res, "shard_length")
    cs, h = table_of(res, "chunk_sweep"), res.table("headline")
    if sl.empty:
        return ""
    short = values_of(sl, read="headline shard")
    part = values_of(sl, read="long shard, first part")
    whole = values_of(sl, read="long shard, whole")
    if not (short and part and whole):
        return ""
    chunk = int(sl["chunk"].iloc[0])
    nbytes = int(sl[sl["read"] == "headline shard"]["bytes"].iloc[0])
    long_bytes = int(sl[sl["read"] == "long shard, whole"]["bytes"].iloc[0])
    text = (
        f"Read cold with the same {size_text(chunk)} requests, in shuffled order within each run: the headline shard "
        f"({num(nbytes / MB, 'MB')}) ran at **{num(mean(short), 'MB/s')}**, the first "
        f"{num(min(nbytes, long_bytes) / MB, 'MB')} of the long shard at **{num(mean(part), 'MB/s')}** and the whole "
        f"long shard ({num(long_bytes / MB, 'MB')}) at **{num(mean(whole), 'MB/s')}**. "
    )
    d_len = fnd.direction(whole, part)     # same file, longer read
    d_file = fnd.direction(part, short)    # same length, other file
    text += fnd.choose(d_len, f"Same file, longer read: the whole long shard was {fnd.compare(whole, part)} its first "
                              "part. ",
                       f"Same file, longer read: the whole long shard was {fnd.compare(whole, part)} its first part. ",
                       "Same file, longer read: the whole long shard and its first part were level. ")
    text += fnd.choose(d_file, f"Same length, other file: the long shard's first part was {fnd.compare(part, short)} "
                               "the headline shard. ",
                       f"Same length, other file: the long shard's first part was {fnd.compare(part, short)} the "
                       "headline shard. ",
                       "Same length, other file: the long shard's first part and the headline shard were level. ")
    if d_len > 0 and d_file == 0:
        text += ("So the difference between the headline and the sweep comes from the length of the read: what is "
                 "paid once per read (opening the file, the first requests while the readahead window grows) weighs "
                 "more over fewer bytes.")
    elif d_len == 0 and d_file != 0:
        text += ("So the difference comes from the file (where its blocks lie, or whether a cache below the guest "
                 "holds them), not from the length of the read.")
    elif d_len != 0 and d_file != 0:
        text += "Both the length of the read and the file make a difference on this run."
    else:
        text += ("Neither makes a difference beyond the runs' spread: a gap between the headline and the sweep on "
                 "this run is run-to-run variation.")
    first = sl[sl["read"].str.endswith(": first chunk")]
    if not first.empty and "first_read_ms" in first:
        fr = first.groupby("read")["first_read_ms"].mean()
        text += (f" The first {size_text(chunk)} read of a cold file, `open` included, took "
                 + " and ".join(f"{num(v, 'ms')} ({k.split(':')[0]})" for k, v in fr.items()) + ".")
    seq_head = values_of(h, pattern="sequential", cache="cold", chunk=chunk)
    seq_sweep = values_of(cs, mode="buffered", chunk=chunk) if not cs.empty else []
    if seq_head and seq_sweep:
        text += (
            f" For comparison, the headline's cold sequential runs averaged {num(mean(seq_head), 'MB/s')} and the "
            f"read-size sweep's buffered {size_text(chunk)} runs {num(mean(seq_sweep), 'MB/s')}."
        )
    return text


def dd_note(res) -> str:
    dd = table_of(res, "dd_fidelity")
    if dd.empty:
        return "The `dd` check was switched off (`dd_check = False`)."
    py, d = values_of(dd, tool="python"), values_of(dd, tool="dd")
    r = mean(py) / mean(d)
    return (f"The Python reader reached **{pct(r)}** of `dd` ({num(mean(py), 'MB/s')} vs {num(mean(d), 'MB/s')}); "
            f"the target is at least {pct(0.9)}: **{'met' if r >= 0.9 else 'not met'}**.")


def _at_most(fraction: float, what: str = "of the data pages") -> str:
    """'none of the data pages' when nothing was resident, else 'at most 0.4% of the data pages'."""
    return f"none {what}" if fraction <= 0 else f"at most {pct(fraction)} {what}"


def paired_ratios(df: pd.DataFrame, a: dict, b: dict, col: str = "MBps") -> list[float]:
    """``col`` of the rows matching ``a`` ÷ that of the rows matching ``b``, run by run (runs in both)."""
    def by_run(where):
        m = pd.Series(True, index=df.index)
        for k, v in where.items():
            m &= df[k] == v
        return df[m].groupby("run")[col].mean()

    x, y = by_run(a), by_run(b)
    both = x.index.intersection(y.index)
    return [float(x[r] / y[r]) for r in both if y[r]]


def purge_note(pm_res) -> str:
    """drop_caches vs fadvise: the residency each purge left, and fadvise ÷ drop_caches run by run
    (the two purges of a run read the same files back to back, so machine-wide swings cancel)."""
    pm = pm_res.table("purge_methods")
    fa, dc = values_of(pm, purge_method="fadvise"), values_of(pm, purge_method="drop_caches")
    if not fa or not dc:
        return ""
    res_max = pm.groupby("purge_method")["resident_at_start"].max()
    text = (f"After `fadvise` the 'cold' small files read at **{num(mean(fa), 'MB/s')}** "
            f"({fnd.span(min(fa), max(fa), 'MB/s')}), after `drop_caches` at "
            f"**{num(mean(dc), 'MB/s')}** ({fnd.span(min(dc), max(dc), 'MB/s')}). ")
    clean = [m for m, v in res_max.items() if v <= COLD_TARGET]
    dirty = [m for m, v in res_max.items() if v > COLD_TARGET]
    if not dirty:
        text += f"Both purges left {_at_most(res_max.max())} resident when the timed read started. "
    else:
        text += ("`" + "`, `".join(dirty) + f"` left up to {pct(res_max[dirty].max())} of the data pages resident "
                 f"(target at most {pct(COLD_TARGET)}), so its runs were not fully cold. ")
        if clean:
            text += "`" + "`, `".join(clean) + f"` left {_at_most(res_max[clean].max())}. "
    pairs = paired_ratios(pm, dict(purge_method="fadvise"), dict(purge_method="drop_caches"))
    if pairs:
        m = mean(pairs)
        if min(pairs) > 1 and m > 1 + PAIRED_TOL:
            d = 1
        elif max(pairs) < 1 and m < 1 - PAIRED_TOL:
            d = -1
        else:
            d = 0
        every = f"in all {len(pairs)} runs" if len(pairs) > 1 else "in the one run"
        text += (f"Run by run (each run reads the same files after both purges), `fadvise` ÷ `drop_caches` was "
                 f"**{times(m)}** ({fnd.span(min(pairs), max(pairs), '×')} over {len(pairs)} runs). ")
        text += fnd.choose(
            d, f"`fadvise` was faster {every}: the difference is the directory entries and inodes that only "
               "`drop_caches` evicts, so a rootless cold run of many small files overstates what a truly cold start "
               "delivers.",
            f"`fadvise` was slower {every}, the opposite of what the cached metadata would predict: read it as "
            "run-to-run variation.",
            "The run-by-run ratio " + ("fell on both sides of 1×" if min(pairs) < 1 < max(pairs) else
                                       f"stayed within {pct(PAIRED_TOL)} of 1×") + ": on this "
            "machine re-reading directory entries and inodes costs little next to the data reads. A rootless cold "
            "run is still an upper bound; on another file system or device the gap can be large.")
    wide = spread_summary(pm, ["purge_method"], lambda m: f"`{m}`")
    if not wide.startswith("No configuration"):
        text += " " + wide
    return text


# --------------------------------------------------------------------------- the opening
SHARD_SNIPPET = '''import tarfile

# many samples per file: one open, then large sequential reads
with tarfile.open("train-00000.tar", "w") as shard:
    for path in sample_paths:
        shard.add(path, arcname=path.name)'''


def opening(res) -> Opening:
    """What the chapter opens with: the cold and warm gaps and what "cold" was here, in one sentence
    each, and what to do about the layout and the request size, chosen from this run's numbers."""
    h = res.table("headline")
    label = cold_label(res)
    out, actions = [], []
    rnd, seq = values_of(h, pattern="random", cache="cold"), values_of(h, pattern="sequential", cache="cold")
    d_cold = fnd.direction(seq, rnd) if rnd and seq else 0
    if rnd and seq:
        mid, lo, hi = fnd.ratio_interval(seq, rnd)
        verdict = fnd.choose(d_cold, f"**{times(mid)} faster than**", f"**{times(1 / mid)} slower than**",
                             "**level with**")
        out.append(Finding("cold_gap", f"{label.capitalize()}, one shard read in order ran {verdict} the same bytes "
                           f"as {int(h['n_files'].iloc[0]):,} shuffled files ({num(mean(seq), 'MB/s')} against "
                           f"{num(mean(rnd), 'MB/s')}).", mid, "×", published="sequential ÷ random, cold",
                           interval=(lo, hi)))
    wr, ws = values_of(h, pattern="random", cache="warm"), values_of(h, pattern="sequential", cache="warm")
    if wr and ws:
        mid, lo, hi = fnd.ratio_interval(ws, wr)
        d_warm = fnd.direction(ws, wr)
        text = fnd.choose(
            0 if mid <= NEAR_ONE and d_warm >= 0 else d_warm,
            f"still **{times(mid)} faster**: opening and closing each file costs time even without the disk.",
            f"**{times(1 / mid)} slower** than the small files: reading from RAM, the layout no longer decides.",
            f"**{times(mid)}** the small files' speed: the gap is the disk's, and closes once data are cached.")
        out.append(Finding("warm_gap", f"Warm, with every page in RAM, the shard was {text}", mid, "×",
                           interval=(lo, hi)))
    lat = latency_stats(res)
    if lat is not None:
        served = cold_verdict(res).served
        out.append(Finding("cold_latency", f"A cold 4 KiB read took **{num(lat['median_us'], 'µs')}**, {served}.",
                           lat["median_us"], "µs"))
    if d_cold > 0:
        actions.append(Action(f"Store samples in shards read sequentially (tar, WebDataset, MDS, an indexed `.bin`): "
                              f"here that read {times(fnd.ratio_interval(seq, rnd)[0])} the throughput of one file per "
                              "sample, cold.", SHARD_SNIPPET))
    elif rnd and seq:
        actions.append(Action("Keep the layout you have: on this storage one file per sample read as fast as a "
                              f"shard ({compared(seq, rnd, 'the shard', 'the files')})."))
    od = _odirect_finding(res)
    if od is not None:
        caught = od.values.get("caught_up_at")
        actions.append(Action(
            f"Read with `O_DIRECT` only in requests of {size_text(caught)} or more: below that, buffered reads with "
            "readahead were faster here." if caught is not None else
            "Keep buffered reads: `O_DIRECT` stayed below the page cache's readahead at every request size "
            f"measured (up to {size_text(int(max(table_of(res, 'chunk_sweep')['chunk'])))})."))
    return Opening(out[:3], actions[:3])
