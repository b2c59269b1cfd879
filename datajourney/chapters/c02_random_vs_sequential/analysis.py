"""Chapter 2's analysis: what a result of :mod:`.experiment` found, as facts (no prose).

The page (:mod:`.page`), the front page and chapter 12 word these facts; nothing else computes a
number of this chapter from its tables. Keys other pages may read are listed in :data:`EXPORTS`.
"""
from __future__ import annotations

import statistics
from dataclasses import replace

import pandas as pd

from datajourney.chapters.c02_random_vs_sequential.params import CHAPTER
from datajourney.chapters.common import (
    FILES,
    SHARD,
    cold_verdict,
    guest_cold,
    latency_stats,
    residency_facts,
    table_of,
    values_of,
)
from datajourney.core import stats
from datajourney.core.answers import Candidate, Question, decide
from datajourney.core.facts import Fact, Facts, compare, measured
from datajourney.core.stats import mean
from datajourney.core.units import num, size_label

#: Facts and ``facts.data`` entries the front page, chapter 12 and the checklist read.
EXPORTS = ("cold_gap", "cold_latency", "cold_state", "cold.random", "cold.sequential", "warm_gap",
           "storage_curve", "guest_cold", "samples.layout")
#: A warm sequential ÷ random ratio within this factor of 1 counts as near 1x (the source: the gap
#: "collapses to near 1x" warm).
NEAR_ONE = 1.10
#: Paired fadvise ÷ drop_caches ratios whose mean lies within this of 1 are level.
PAIRED_TOL = 0.05
#: A drop in bandwidth from one read size to the next larger one smaller than this (relative)
#: is not worth a comment.
DIP_TOL = 0.10
#: What a reader pastes to store samples in shards.
SHARD_SNIPPET = '''import tarfile

# many samples per file: one open, then large sequential reads
with tarfile.open("train-00000.tar", "w") as shard:
    for path in sample_paths:
        shard.add(path, arcname=path.name)'''


def _direction(a: list[float], b: list[float], tol: float = 0.05) -> int:
    return stats.direction(a, b, tol=tol) if a and b else 0


def _recorded(res, name: str) -> int:
    """An integer parameter as the result recorded it (0 when it did not)."""
    value = res.parameters[name] if name in (res.parameters or {}) else None
    return int(value) if value else 0


def analyse(res) -> Facts:
    """Every number chapter 2's page states, from ``res``'s tables."""
    out = Facts(CHAPTER, exports=EXPORTS)
    verdict = cold_verdict(res)
    cold = verdict.label
    h = table_of(res, "headline")
    n = int(h["n_files"].iloc[0]) if "n_files" in h and len(h) else _recorded(res, "n_files")
    size = int(h["file_size"].iloc[0]) if "file_size" in h and len(h) else _recorded(res, "file_size")
    files = f"{n:,} shuffled files of {size_label(size)}"
    out.add(Fact("cold_state", cold if verdict.state is not None else None, label="what a cold read reached",
                 quantity="choice", better=None, n=len(verdict.medians),
                 setting=dict(state=verdict.state, hypervisor=verdict.hypervisor, source=verdict.source,
                              floor_us=verdict.floor_us, medians=list(verdict.medians),
                              share_below=verdict.share_below, label=cold)))
    out.data.update(cold_label=cold, guest_cold=guest_cold(res), n_files=n, file_size=size)

    # the headline: cold and warm, both layouts
    for cache in ("cold", "warm"):
        word = cold if cache == "cold" else "warm"
        rnd = values_of(h, pattern="random", cache=cache)
        seq = values_of(h, pattern="sequential", cache=cache)
        if not rnd or not seq:
            continue
        r = measured(f"{cache}.random", rnd, unit="MB/s", label=f"{files}, {word}", setting=dict(cache=cache))
        s = measured(f"{cache}.sequential", seq, unit="MB/s", label=f"one shard read in order, {word}",
                     setting=dict(cache=cache, chunk=size))
        gap = compare(f"{cache}_gap", s, r, published="sequential ÷ random, cold" if cache == "cold" else None)
        out.add(r, s, gap)
        if cache == "warm":
            d = _direction(seq, rnd)
            state = ("collapses" if d == 0 or 1 / NEAR_ONE <= gap.number <= NEAR_ONE else
                     "reverses" if d < 0 else "stays open")
            out.add(Fact("warm_gap.verdict", state, label="the warm gap against the near 1x of the source",
                         quantity="choice", better=None))
    _key_metrics(out, h)
    residency_facts(out, h, "read")
    _latency(out, res)
    _size_sweep(out, res, cold)
    _chunk_sweep(out, res, cold)
    _shard_length(out, res)
    _dd(out, res)
    _purge(out, res)
    _advice(out, res, n, size)
    _spreads(out, res, h)
    return out


def _key_metrics(out: Facts, h: pd.DataFrame) -> None:
    """The published figures' counterparts, cold: metric -> [mean, sample std (None from one run)]."""
    if h.empty or "cache" not in h:
        return
    c = h[h["cache"] == "cold"]
    r, s = c[c["pattern"] == "random"]["MBps"], c[c["pattern"] == "sequential"]["MBps"]
    if r.empty or s.empty:
        return

    def std(x):
        v = float(x.std())
        return v if v == v else None

    out.data["key_metrics"] = {"random read, cold": [float(r.mean()), std(r)],
                               "sequential read, cold": [float(s.mean()), std(s)],
                               "sequential ÷ random, cold": [float(s.mean() / r.mean()), None]}


def _latency(out: Facts, res) -> None:
    lat = latency_stats(res)
    if lat is None:
        err = table_of(res, "latency")
        if not err.empty and "error" in err and err["error"].notna().any():
            out.data["latency_error"] = str(err["error"].dropna().iloc[0])
        return
    meds = [float(m) for m in lat["medians"]]
    size = size_label(lat["request_bytes"])
    first = Fact("cold_latency", float(lat["median_us"]), "µs", f"one cold {size} O_DIRECT read at a random offset",
                 "time", "lower", len(meds), (min(meds), max(meds)) if len(meds) > 1 else None,
                 dict(reads=int(lat["reads"]), request_bytes=int(lat["request_bytes"])))
    out.add(first)
    for q in ("p10", "p90", "p99"):
        out.add(Fact(f"cold_latency.{q}", float(lat[f"{q}_us"]), "µs", f"the {q} of one cold {size} read",
                     "time", "lower", len(meds)))
    if lat["warm_medians"]:
        out.add(measured("cold_latency.warm", lat["warm_medians"], unit="µs", label="a page-cache hit",
                         quantity="time", better="lower"))
    if lat["second_medians"]:
        second = measured("cold_latency.second", lat["second_medians"], unit="µs",
                          label="a second pass over the same blocks", quantity="time", better="lower")
        base = Fact("cold_latency.first", statistics.fmean(meds), "µs", "the first pass", "time", "lower",
                    len(meds), (min(meds), max(meds)) if len(meds) > 1 else None)
        c = compare("second_pass", second, base)
        d = stats.direction(meds, lat["second_medians"], tol=0.10)
        out.add(second, base, c if d != 0 else replace(c, level=True))


def _size_sweep(out: Facts, res, cold: str) -> None:
    sw = table_of(res, "size_sweep")
    out.data.setdefault("ran", {})["size_sweep"] = not sw.empty
    if sw.empty:
        return
    per = {}
    for s in sorted(set(sw["file_size"])):
        seq = values_of(sw, file_size=s, cache="cold", pattern="sequential")
        rnd = values_of(sw, file_size=s, cache="cold", pattern="random")
        if seq and rnd:
            a = measured(f"size.{s}.sequential", seq, unit="MB/s",
                         label=f"one shard in {size_label(s)} requests, {cold}", setting=dict(file_size=int(s)))
            b = measured(f"size.{s}.random", rnd, unit="MB/s", label=f"shuffled files of {size_label(s)}, {cold}",
                         setting=dict(file_size=int(s)))
            per[int(s)] = (seq, rnd)
            out.add(a, b, compare(f"size.{s}", a, b))
    ss = sw[sw["cache"] == "cold"]
    if not ss.empty:
        curve = ss.groupby(["pattern", "file_size"], as_index=False)["MBps"].mean()
        out.data["storage_curve"] = [dict(pattern=str(r.pattern), file_size=int(r.file_size), MBps=float(r.MBps))
                                     for r in curve.itertuples()]
    if len(per) < 2:
        return
    small, large = min(per), max(per)
    c = out[f"size.{large}"]
    out.add(replace(c, key="size_sweep"))
    trend = stats.direction(out.number(f"size.{small}"), out.number(f"size.{large}"), tol=0.10)
    out.add(Fact("size_sweep.trend", {1: "narrows", -1: "widens", 0: "stays"}[trend],
                 label="the gap as files grow", quantity="choice", better=None,
                 setting=dict(small=small, large=large)))
    out.add(Fact("size_sweep.converged", {1: "no", -1: "reversed", 0: "yes"}[_direction(*per[large])],
                 label="whether the layouts converge at the largest file size", quantity="choice", better=None,
                 setting=dict(file_size=large)))
    out.data["size_sweep_sizes"] = [small, large]


def _chunk_sweep(out: Facts, res, cold: str) -> None:
    cs = table_of(res, "chunk_sweep")
    out.data.setdefault("ran", {})["chunk_sweep"] = not cs.empty
    if cs.empty:
        return
    out.data["chunk_dips"] = _dips(cs)
    if "error" in cs:
        errs = [str(e) for e in dict.fromkeys(cs["error"].dropna())]
        if errs:
            out.data["odirect_errors"] = errs
    out.data["chunk_max"] = int(max(cs["chunk"]))
    if "O_DIRECT" not in set(cs["mode"]) or cs[cs["mode"] == "O_DIRECT"]["MBps"].isna().all():
        return
    chunks = sorted(int(c) for c in set(cs["chunk"]))
    for c in chunks:
        buf, od = values_of(cs, mode="buffered", chunk=c), values_of(cs, mode="O_DIRECT", chunk=c)
        out.add(measured(f"chunk.{c}.buffered", buf, unit="MB/s",
                         label=f"buffered reads in {size_label(c)} requests, {cold}", setting=dict(chunk=c)),
                measured(f"chunk.{c}.direct", od, unit="MB/s",
                         label=f"O_DIRECT reads in {size_label(c)} requests, {cold}", setting=dict(chunk=c)))
    smallest = chunks[0]
    buf, od = values_of(cs, mode="buffered", chunk=smallest), values_of(cs, mode="O_DIRECT", chunk=smallest)
    if not buf or not od:
        return
    out.add(compare("odirect", out[f"chunk.{smallest}.buffered"], out[f"chunk.{smallest}.direct"]))
    caught = next((c for c in chunks if values_of(cs, mode="O_DIRECT", chunk=c)
                   and stats.direction(values_of(cs, mode="O_DIRECT", chunk=c),
                                     values_of(cs, mode="buffered", chunk=c)) >= 0), None)
    out.add(Fact("odirect.caught_up_at", caught, "B",
                 "the smallest request at which O_DIRECT kept up with buffered reads", "amount", None,
                 setting=dict(largest=chunks[-1])))
    out.data["odirect_buffered_wins"] = stats.direction(buf, od) > 0


def _dips(cs: pd.DataFrame) -> list[dict]:
    """Every step from one read size to the next larger one where the mean bandwidth fell by more than
    :data:`DIP_TOL`: both sizes, their means and ranges, the runs, and whether the runs' ranges part
    (``real``) or overlap (a dip inside the run-to-run spread)."""
    cs = cs[cs["MBps"].notna()]
    out = []
    for mode, g in cs.groupby("mode", sort=False):
        chunks = sorted(set(g["chunk"]))
        for a, b in zip(chunks, chunks[1:]):
            va, vb = values_of(g, chunk=a), values_of(g, chunk=b)
            if not va or not vb or mean(vb) >= (1 - DIP_TOL) * mean(va):
                continue
            out.append(dict(mode=str(mode), small=int(a), large=int(b), small_mean=mean(va), large_mean=mean(vb),
                            small_low=min(va), small_high=max(va), large_low=min(vb), large_high=max(vb),
                            runs=len(vb), real=stats.direction(va, vb) != 0))
    return out


def _shard_length(out: Facts, res) -> None:
    sl = table_of(res, "shard_length")
    if sl.empty:
        return
    reads = {"short": "headline shard", "part": "long shard, first part", "whole": "long shard, whole"}
    runs = {k: values_of(sl, read=v) for k, v in reads.items()}
    if not all(runs.values()):
        return
    chunk = int(sl["chunk"].iloc[0])
    nbytes = {k: int(sl[sl["read"] == v]["bytes"].iloc[0]) for k, v in reads.items()}
    mb = {k: num(v / 2**20, "MiB") for k, v in nbytes.items()}   # sizes in binary units, as the parameters give them
    labels = {"short": f"the headline shard ({mb['short']})", "part": f"the first {mb['part']} of the long shard",
              "whole": f"the whole long shard ({mb['whole']})"}
    for k in reads:
        out.add(measured(f"shard_length.{k}", runs[k], unit="MB/s", label=labels[k],
                         setting=dict(chunk=chunk, bytes=nbytes[k])))
    for key, a, b in (("shard_length.by_length", "whole", "part"), ("shard_length.by_file", "part", "short")):
        c = compare(key, out[f"shard_length.{a}"], out[f"shard_length.{b}"])
        level = stats.direction(runs[a], runs[b]) == 0
        out.add(replace(c, level=level))
    first = sl[sl["read"].str.endswith(": first chunk")] if "read" in sl else sl.iloc[0:0]
    if not first.empty and "first_read_ms" in first:
        for name, key in (("headline shard", "short"), ("long shard, first part", "part")):
            v = first[first["read"] == f"{name}: first chunk"]["first_read_ms"].dropna().tolist()
            if v:
                out.add(measured(f"first_read.{key}", v, unit="ms", quantity="time", better="lower",
                                 label=f"the first {size_label(chunk)} read of {labels[key]}, cold, open included"))
    cs, h = table_of(res, "chunk_sweep"), table_of(res, "headline")
    head = values_of(h, pattern="sequential", cache="cold", chunk=chunk)
    sweep = values_of(cs, mode="buffered", chunk=chunk) if not cs.empty else []
    if head and sweep:
        out.add(measured("shard_length.headline", head, unit="MB/s", label="the cold sequential runs of the headline"),
                measured("shard_length.sweep", sweep, unit="MB/s",
                         label=f"the buffered {size_label(chunk)} runs of the read-size sweep"))


def _dd(out: Facts, res) -> None:
    dd = table_of(res, "dd_fidelity")
    if dd.empty:
        return
    py = measured("dd.python", values_of(dd, tool="python"), unit="MB/s", label="the 1 MiB reader of this book")
    d = measured("dd.dd", values_of(dd, tool="dd"), unit="MB/s", label="dd with 1 MiB blocks")
    out.add(py, d, compare("dd_ratio", py, d))


def _purge(out: Facts, res) -> None:
    pm = table_of(res, "purge_methods")
    if pm.empty:
        return
    fa, dc = values_of(pm, purge_method="fadvise"), values_of(pm, purge_method="drop_caches")
    if not fa or not dc:
        return
    out.add(measured("purge.fadvise", fa, unit="MB/s", label="the small files after fadvise"),
            measured("purge.drop_caches", dc, unit="MB/s", label="the small files after drop_caches"))
    for m, v in pm.groupby("purge_method")["resident_at_start"].max().items():
        out.add(Fact(f"purge.resident.{m}", 100 * float(v), "%", f"the most resident after {m}", "share", "lower"))

    pairs = paired_ratios(pm, dict(purge_method="fadvise"), dict(purge_method="drop_caches"))
    if pairs:
        m = statistics.fmean(pairs)
        d = 1 if min(pairs) > 1 and m > 1 + PAIRED_TOL else -1 if max(pairs) < 1 and m < 1 - PAIRED_TOL else 0
        out.add(measured("purge_paired", pairs, unit="×", label="fadvise ÷ drop_caches, run by run"),
                Fact("purge_paired.direction", {1: "faster", -1: "slower", 0: "level"}[d],
                     label="fadvise against drop_caches in every run", quantity="choice", better=None,
                     setting=dict(straddles=min(pairs) < 1 < max(pairs))))


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


def _advice(out: Facts, res, n: int, size: int) -> None:
    """What to set, for the workload this chapter measured: plain-Python reads of its synthetic samples."""
    workload = f"{n:,} synthetic samples of {size_label(size)} read in plain Python (no DataLoader)"
    if "cold.sequential" in out and "cold.random" in out:
        q = Question("samples.layout", "One file per sample, or one shard read in order?", "layout", FILES,
                     FILES, "an ImageFolder-style layout", workload,
                     published="sequential ÷ random, cold")
        out.advise(decide(q, [Candidate(FILES, out["cold.random"], call=FILES),
                              Candidate(SHARD, out["cold.sequential"], call=SHARD, snippet=SHARD_SNIPPET)], out))
    buffered, direct = _fastest(out, "buffered"), _fastest(out, "direct")
    if buffered is not None and direct is not None:
        shard = _recorded(res, "shard_size")
        wl = (f"sequential reads of one {size_label(shard)} shard" if shard else "sequential reads of one shard") \
            + ", each way at its fastest request size"
        q = Question("shard.odirect", "Buffered reads or O_DIRECT?", "O_DIRECT", False, "buffered reads",
                     "the operating system's default", wl,
                     cost="O_DIRECT needs buffers, offsets and sizes aligned to the device's block size")
        out.advise(decide(q, [Candidate(False, buffered, call="buffered reads"),
                              Candidate(True, direct, call="os.O_DIRECT", costly=True,
                                        at=f"{size_label(direct.setting['chunk'])} requests")], out))


def _fastest(out: Facts, mode: str):
    """The read-size sweep's fastest request size for ``mode`` ("buffered" or "direct"), as its fact: the question
    sets each way of reading at its best, so the default is never credited with a gain over the other's worst."""
    fs = [f for k, f in out.facts.items() if k.startswith("chunk.") and k.endswith(f".{mode}") and f.number is not None]
    return max(fs, key=lambda f: f.number, default=None)


def _wide(df: pd.DataFrame, by: list[str], label) -> list[dict]:
    """Every group of ``by`` whose runs of MB/s spread by more than findings.HIGH_SPREAD (coefficient of
    variation; as printed, above the rule): its label, lowest, highest, runs, coefficient of variation, and
    whether the first run was the slowest."""
    out = []
    if df.empty or "MBps" not in df:
        return out
    for key, g in df.groupby(by, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        v = g["MBps"].dropna().tolist()
        cv = stats.cv(v)
        if round(100 * cv, 1) > round(100 * stats.HIGH_SPREAD, 1):  # above the rule as the tables print it
            first = bool("run" in g and len(g) > 2 and g.loc[g["MBps"].idxmin(), "run"] == g["run"].min())
            out.append(dict(label=label(*key), low=min(v), high=max(v), n=len(v), cv=cv, first_slowest=first))
    return out


def _spreads(out: Facts, res, h: pd.DataFrame) -> None:
    """The configurations whose runs spread widely: the headline, the size sweep, the read-size sweep."""
    cold = out.data.get("cold_label") or "cold"
    out.data["spread"] = dict(
        headline=_wide(h, ["cache", "pattern"], lambda c, p: f"the {cold if c == 'cold' else c} {p} read"),
        size_sweep=_wide(table_of(res, "size_sweep"), ["cache", "pattern", "file_size"],
                         lambda c, p, s: f"{cold if c == 'cold' else c} {p}, {size_label(s)} files"),
        chunk_sweep=_wide(table_of(res, "chunk_sweep"), ["mode", "chunk"], lambda m, c: f"{m} at {size_label(c)}"))
