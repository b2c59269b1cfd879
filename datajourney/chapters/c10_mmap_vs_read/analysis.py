"""Chapter 10's analysis: what a result of :mod:`~datajourney.chapters.c10_mmap_vs_read.experiment` found, as
facts (no prose). The page, the front page and chapter 12 word these; none recomputes them.

* loader time of mmap against read() at the largest sweep point (``loader_time``) and over the whole sweep
  (``sweep_loader``), the reader to use (advice ``tokens.loader_mode``) and the worker count
  (``tokens.num_workers``);
* per-sample bandwidth inside ``__getitem__`` (``per_sample_bandwidth``);
* what the kernel counted (``kernel_view``) and what the POSIX tracer saw (``posix_events``);
* what tracing costs (``overhead``) and the checkpoint writes (``checkpoint``);
* ``data["token_loader"]``: the best cold tokens per second of each reader, for chapter 12.
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd

from datajourney.chapters.c10_mmap_vs_read.params import CHAPTER
from datajourney.core.answers import Candidate, Question, decide, exceeds
from datajourney.core.facts import FLAGGED, Fact, Facts, compare, measured
from datajourney.core.stats import direction

EXPORTS = ("loader_time", "posix_events", "kernel_view", "overhead", "sweep_loader", "per_sample_bandwidth",
           "token_loader")
MODE_NAMES = {"mmap": "mmap", "read": "read()"}
#: How a reader reads a sequence in each mode (what the chapter's reader does).
READER_CALLS = {"mmap": "numpy.memmap(bin_path, dtype=numpy.uint8, mode='r')",
                "read": "os.preadv(fd, [buffer], offset)"}
#: mmap's POSIX events are "constant" within this share of their mean (the experiment's tolerance).
CONSTANT_TOLERANCE = 0.05


def _grid(res) -> pd.DataFrame:
    s = res.table("sweep")
    return s[s["part"] == "grid"].copy()


def largest(df: pd.DataFrame) -> tuple[int, int]:
    seq = int(df["seq"].max())
    return seq, int(df[df["seq"] == seq]["batch"].max())


def headline_cache(df: pd.DataFrame) -> str:
    return "cold" if "cold" in set(df["cache"]) else "warm"


def has_posix(res) -> bool:
    return "posix" in res.tables and len(res.table("posix")) > 0


def posix_counts(res) -> pd.DataFrame:
    """POSIX events of each grid point's data phase (W=0), by mode."""
    p = res.table("posix")
    p = p[p["part"] == "posix"]
    return p[["mode", "seq", "batch", "samples", "posix_events", "posix_reads", "posix_opens", "posix_bin_reads",
              "posix_read_bytes", "posix_mean_read_bytes", "posix_read_s", "pieces"]].copy()


def overhead_table(res) -> pd.DataFrame:
    """Loader time of each view relative to tracing off, paired by round: % (mean, min, max)."""
    o = res.table("overhead")
    rows = []
    for mode in ("mmap", "read"):
        part = o[o["mode"] == mode]
        off = part[part["view"] == "off"].set_index("round")["loader_s"]
        for view in [v for v in ("posix", "app", "both") if v in set(part["view"])]:
            v = part[part["view"] == view].set_index("round")["loader_s"]
            pct_ = ((v / off - 1) * 100).dropna()
            rows.append(dict(mode=mode, view=view, mean=pct_.mean(), min=pct_.min(), max=pct_.max(), n=len(pct_),
                             off_ms=off.mean() * 1e3, view_ms=v.mean() * 1e3))
    return pd.DataFrame(rows)


def grid_wins(res, cache: str) -> pd.DataFrame:
    """Per sweep point: which mode had the shorter loader time over the runs (+1 mmap, -1 read(),
    0 within the spread), and the MB each read from storage."""
    g = _grid(res)
    g = g[g["cache"] == cache]
    rows = []
    for (seq, batch), part in g.groupby(["seq", "batch"]):
        m, r = part[part["mode"] == "mmap"], part[part["mode"] == "read"]
        rows.append(dict(seq=seq, batch=batch, winner=direction(r["loader_s"].tolist(), m["loader_s"].tolist()),
                         mmap_storage_MB=m["read_bytes"].mean() / 1e6, read_storage_MB=r["read_bytes"].mean() / 1e6))
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- loader time
def _loader(res, f: Facts) -> None:
    g = _grid(res)
    seq, batch = largest(g)
    f.data["largest"] = dict(seq=seq, batch=batch, steps=int(g["steps"].iloc[0]))
    for cache in [c for c in ("cold", "warm") if c in set(g["cache"])]:
        part = g[(g["seq"] == seq) & (g["batch"] == batch) & (g["cache"] == cache)]
        for mode in ("mmap", "read"):
            f.add(measured(f"loader.{cache}.{mode}", (part[part["mode"] == mode]["loader_s"] * 1e3).tolist(),
                           unit="ms", quantity="time", better="lower",
                           label=f"{MODE_NAMES[mode]} at sequence {seq}, batch {batch} ({cache})",
                           setting=dict(mode=mode, cache=cache, seq=seq, batch=batch)))
        f.add(compare(f"loader_time.{cache}", f[f"loader.{cache}.mmap"], f[f"loader.{cache}.read"]))
    head = "warm" if "loader_time.warm" in f else "cold"
    c = f[f"loader_time.{head}"]
    f.add(Fact("loader_time", c.value, c.unit, c.label, c.quantity, c.better, c.n, None, dict(c.setting),
               of=c.of, basis=c.basis, level=c.level))


def _sweep(res, f: Facts) -> None:
    g = _grid(res)
    for cache in [c for c in ("cold", "warm") if c in set(g["cache"])]:
        part = g[g["cache"] == cache]
        if not {"mmap", "read"} <= set(part["mode"]):
            continue
        per = part.groupby(["mode", "run"])["loader_s"].sum() * 1e3
        for mode in ("mmap", "read"):
            f.add(measured(f"sweep.{cache}.{mode}", per[mode].tolist(), unit="ms", quantity="time", better="lower",
                           label=f"{MODE_NAMES[mode]} over the whole sweep ({cache})",
                           setting=dict(mode=mode, cache=cache)))
        f.add(compare(f"sweep_loader.{cache}", f[f"sweep.{cache}.mmap"], f[f"sweep.{cache}.read"]))
        w = grid_wins(res, cache)
        f.add(Fact(f"sweep.{cache}.points", len(w), "", "sweep points", "count", None),
              Fact(f"sweep.{cache}.mmap_wins", int((w["winner"] > 0).sum()), "", "points where mmap was faster",
                   "count", None),
              Fact(f"sweep.{cache}.read_wins", int((w["winner"] < 0).sum()), "", "points where read() was faster",
                   "count", None))
        by = part.groupby("mode")[["read_bytes", "app_bytes"]].sum(min_count=1)
        if by["read_bytes"].notna().all() and float(by.loc["read", "read_bytes"]) > 0:
            f.add(Fact(f"sweep.{cache}.storage", float(by.loc["mmap", "read_bytes"] / by.loc["read", "read_bytes"]),
                       "×", "bytes mmap pulled from storage ÷ those read() pulled", "amount", None))
            for mode in ("mmap", "read"):
                f.add(Fact(f"sweep.{cache}.amplification.{mode}",
                           float(by.loc[mode, "read_bytes"] / by.loc[mode, "app_bytes"]), "×",
                           f"bytes {MODE_NAMES[mode]} pulled from storage per byte the samples hold", "amount",
                           "lower"))
    head = headline_cache(g)
    if f"sweep_loader.{head}" not in f:
        return
    c = f[f"sweep_loader.{head}"]
    f.add(Fact("sweep_loader", c.value, c.unit, c.label, c.quantity, c.better, c.n, None, dict(c.setting),
               of=c.of, basis=c.basis, level=c.level))
    # the reader to use: declared against Megatron's default (a memory map of the whole .bin)
    q = Question("tokens.loader_mode", "mmap or read() for a token set?", "reader", "mmap", READER_CALLS["mmap"],
                 "Megatron's indexed data set", f"Megatron-style token files, one loader process, {head} page cache")
    a = decide(q, [Candidate(m, f.get(f"sweep.{head}.{m}"), call=READER_CALLS[m]) for m in ("mmap", "read")], f)
    f.advise(dataclasses.replace(a, evidence=a.evidence + ("sweep_loader", "loader_time")) if a else None)
    win = "mmap" if c.number is not None and c.number <= 1 else "read"  # the workers were swept on the faster
    _workers(res, f, head, win)


def _workers(res, f: Facts, cache: str, mode: str) -> None:
    s = res.table("sweep")
    w = s[(s["part"] == "workers") & (s["cache"] == cache) & (s["mode"] == mode)]
    if w.empty or w["workers"].nunique() < 2:
        return
    runs = {int(k): (g["loader_s"] * 1e3).tolist() for k, g in w.groupby("workers")}
    base, best = min(runs), min(runs, key=lambda k: np.mean(runs[k]))
    batch, steps = int(w["batch"].iloc[0]), int(w["steps"].iloc[0])
    for k in runs:
        f.add(measured(f"workers.{k}", runs[k], unit="ms", quantity="time", better="lower",
                       label=f"num_workers={k} ({MODE_NAMES[mode]}, {steps} batches of {batch}, {cache})",
                       setting=dict(workers=k, mode=mode, cache=cache, batch=batch, steps=steps)))
    if best != base:
        f.add(compare("workers_gain", f[f"workers.{best}"], f[f"workers.{base}"]))
    q = Question("tokens.num_workers", "How many DataLoader workers for a token set?", "num_workers", 0,
                 "num_workers=0", "PyTorch's DataLoader default",
                 f"Megatron-style token files read by {MODE_NAMES[mode]}, batches of {batch}, "
                 f"{cache} page cache, worker start included", swept=True)
    a = decide(q, [Candidate(k, f[f"workers.{k}"]) for k in sorted(runs)], f)
    if a is not None:
        f.advise(dataclasses.replace(a, evidence=a.evidence + ("sweep_loader",)))


def _bandwidth(res, f: Facts) -> None:
    g = _grid(res).copy()
    g["MBps"] = g["app_bytes"] / (g["lookup_s"] + g["read_s"] + g["construct_s"]) / 1e6
    cache = "warm" if "warm" in set(g["cache"]) else "cold"
    g = g[g["cache"] == cache]
    seq, small = int(g["seq"].max()), int(g["seq"].min())
    at = g[g["seq"] == seq]
    for mode in ("mmap", "read"):
        f.add(measured(f"bandwidth.{mode}", at[at["mode"] == mode]["MBps"].tolist(), unit="MB/s",
                       label=f"{MODE_NAMES[mode]} per sample at sequence {seq} ({cache})",
                       setting=dict(mode=mode, cache=cache, seq=seq)))
    sm = g[(g["mode"] == "mmap") & (g["seq"] == small)].groupby("batch")["MBps"].mean()
    f.add(Fact("bandwidth.mmap_small", float(sm.mean()), "MB/s", f"mmap per sample at sequence {small} ({cache})",
               "rate", setting=dict(mode="mmap", cache=cache, seq=small)))
    f.add(compare("per_sample_bandwidth", f["bandwidth.mmap"], f["bandwidth.read"],
                  published="mmap ÷ read() per-sample bandwidth, largest sequence"))


# --------------------------------------------------------------------------- what the kernel and the tracer saw
def _kernel(res, f: Facts) -> None:
    g = _grid(res)
    cache = headline_cache(g)
    seq, batch = largest(g)
    at = g[(g["seq"] == seq) & (g["batch"] == batch) & (g["cache"] == cache)]
    m, r = (at[at["mode"] == mode].mean(numeric_only=True) for mode in ("mmap", "read"))
    where = f"at sequence {seq}, batch {batch} ({cache})"
    setting = dict(seq=seq, batch=batch, cache=cache)
    f.add(Fact("kernel_view", float(m["minflt"] + m["majflt"]), "faults", f"page faults under mmap {where}", "count",
               None, setting=setting),
          Fact("kernel.read.faults", float(r["minflt"] + r["majflt"]), "faults", f"page faults under read() {where}",
               "count", None, setting=setting),
          Fact("kernel.mmap.minflt", float(m["minflt"]), "", "minor page faults under mmap", "count", None),
          Fact("kernel.mmap.majflt", float(m["majflt"]), "", "major page faults under mmap", "count", None),
          Fact("kernel.mmap.syscr", float(m["syscr"]), "", "read calls under mmap", "count", None),
          Fact("kernel.read.syscr", float(r["syscr"]), "", "read calls under read()", "count", None),
          Fact("kernel.read.pieces", float(r["pieces"]), "", "document pieces read", "count", None))
    f.add(compare("kernel.faults_vs_read", f["kernel_view"], f["kernel.read.faults"]))
    if cache == "cold" and pd.notna(m.get("read_bytes")) and m["app_bytes"]:
        for mode, row in (("mmap", m), ("read", r)):
            f.add(Fact(f"kernel.{mode}.amplification", float(row["read_bytes"] / row["app_bytes"]), "×",
                       f"bytes {MODE_NAMES[mode]} brought in from storage per byte the samples hold", "amount",
                       "lower"))


def _posix(res, f: Facts) -> None:
    if not has_posix(res):
        f.data["posix_why_not"] = res.metadata.get("posix_why_not") or "the tracer did not run"
        return
    c = posix_counts(res)
    mm, rd = c[c["mode"] == "mmap"], c[c["mode"] == "read"]
    seq, batch = largest(c)
    at = dict(seq=seq, batch=batch)
    m_big = float(mm[(mm["seq"] == seq) & (mm["batch"] == batch)]["posix_events"].iloc[0])
    r_big = float(rd[(rd["seq"] == seq) & (rd["batch"] == batch)]["posix_events"].iloc[0])
    small = rd.sort_values(["seq", "batch"]).iloc[0]
    f.add(Fact("posix.mmap_big", m_big, "events", f"mmap at sequence {seq}, batch {batch}", "count", None,
               setting=at),
          Fact("posix.read_big", r_big, "events", f"read() at sequence {seq}, batch {batch}", "count", None,
               setting=at),
          Fact("posix.read_small", float(small["posix_events"]), "events",
               f"read() at sequence {int(small['seq'])}, batch {int(small['batch'])}", "count", None,
               setting=dict(seq=int(small["seq"]), batch=int(small["batch"]))),
          Fact("posix.mmap_min", float(mm["posix_events"].min()), "events", "fewest events under mmap", "count", None),
          Fact("posix.mmap_max", float(mm["posix_events"].max()), "events", "most events under mmap", "count", None))
    lo, hi, mean = mm["posix_events"].min(), mm["posix_events"].max(), mm["posix_events"].mean()
    f.add(Fact("posix.mmap_constant", "yes" if mean > 0 and (hi - lo) <= CONSTANT_TOLERANCE * mean else
               ("none" if hi == 0 else "no"), "", "the events of mmap constant over the sweep", "choice",
               None,
               setting=dict(tolerance=CONSTANT_TOLERANCE)))
    grows = (np.corrcoef(rd["samples"] * rd["seq"], rd["posix_events"])[0, 1] > 0.9 if len(rd) > 2 else
             r_big > float(small["posix_events"]))
    f.add(Fact("posix.read_grows", "yes" if grows else "no", "", "the events of read() follow the tokens read",
               "choice", None))
    f.add(compare("posix_events", f["posix.read_big"], f["posix.mmap_big"],
                  published="POSIX events read() ÷ mmap, largest point"))


def _overhead(res, f: Facts) -> None:
    if "overhead" not in res.tables:
        return
    o = res.table("overhead")
    view = "posix" if "posix" in set(o["view"]) else "app"
    f.data["overhead_view"] = view
    names = {"posix": "the POSIX view", "app": "the application spans"}
    for mode in ("read", "mmap"):
        part = o[o["mode"] == mode]
        if part.empty:
            continue
        for v in ("off", view, "app"):
            if v in set(part["view"]) and f"overhead.{mode}.{v}" not in f:
                f.add(measured(f"overhead.{mode}.{v}", (part[part["view"] == v]["loader_s"] * 1e3).tolist(),
                               unit="ms", quantity="time", better="lower",
                               label=f"{MODE_NAMES[mode]} with tracing off" if v == "off" else
                               f"{MODE_NAMES[mode]} traced by {names[v]}", setting=dict(mode=mode, view=v)))
        if f"overhead.{mode}.{view}" in f and f"overhead.{mode}.off" in f:
            f.add(compare("overhead" if mode == "read" else "overhead.mmap", f[f"overhead.{mode}.{view}"],
                          f[f"overhead.{mode}.off"]))
    if view == "posix" and "overhead.read.app" in f:
        f.add(compare("overhead.app", f["overhead.read.app"], f["overhead.read.off"]))
    for key in ("overhead", "overhead.mmap", "overhead.app"):  # a tracer only adds work: faster traced is flagged
        c = f.get(key)
        if c is not None and exceeds(f[c.of], f[c.basis]):
            f.add(Fact(key + FLAGGED, "flagged", "", f"{f[c.of].label} measured faster than {f[c.basis].label}",
                       "choice", None))
    c = per_call_cost(res)
    if c is not None:
        f.add(Fact("posix_us_per_call", c["us_per_call"], "µs", "the loader time one recorded call adds", "time",
                   "lower"),
              Fact("posix_calls_per_piece", c["per_piece"], "", "calls recorded per document piece", "count", None))


def per_call_cost(res) -> dict | None:
    """What one call recorded by the POSIX view costs under read() at the overhead point: calls per document
    piece, calls recorded, the extra loader time (ms) and that time per call (µs); None where not measured."""
    if "overhead" not in res.tables or not has_posix(res):
        return None
    t = overhead_table(res)
    row = t[(t["mode"] == "read") & (t["view"] == "posix")]
    o = res.table("overhead")
    if row.empty or "pieces" not in o:
        return None
    pieces = o[(o["mode"] == "read") & (o["view"] == "posix")]["pieces"].mean()
    p = posix_counts(res)
    p = p[p["mode"] == "read"]
    per_piece = (p["posix_events"] / p["pieces"]).mean()
    calls = pieces * per_piece
    extra_ms = float(row["view_ms"].iloc[0] - row["off_ms"].iloc[0])
    return dict(per_piece=per_piece, calls=calls, extra_ms=extra_ms,
                us_per_call=extra_ms * 1e3 / calls if calls else float("nan"))


#: How the page names each checkpoint method (the result stores the experiment's ids).
METHOD_LABELS = {"torch_save": "torch.save", "dcp_save": "DCP save", "dcp_async_save": "DCP async_save"}


def _checkpoint(res, f: Facts) -> None:
    if "checkpoint" not in res.tables:
        return
    c = res.table("checkpoint")
    size = int(c["state_bytes"].max())
    c = c[c["state_bytes"] == size]
    f.data["checkpoint"] = dict(bytes=size, device=str(c["device"].iloc[0]))
    for method in ("torch_save", "dcp_save", "dcp_async_save"):
        part = c[c["method"] == method]
        name = METHOD_LABELS[method]
        f.add(measured(f"checkpoint.{method}", part["GBps"].tolist(), unit="GB/s", label=name,
                       setting=dict(method=method)))
        f.add(measured(f"checkpoint.{method}.blocked", part["blocked_s"].tolist(), unit="s", quantity="time",
                       better="lower", label=f"the caller blocked by {name}"),
              measured(f"checkpoint.{method}.total", part["total_s"].tolist(), unit="s", quantity="time",
                       better="lower", label=f"{name} until its files were synced"))
    blocked, total = f.number("checkpoint.dcp_async_save.blocked"), f.number("checkpoint.dcp_async_save.total")
    f.add(Fact("checkpoint", blocked / total if blocked is not None and total else None, "",
               "the share of the async save during which the caller was blocked", "share", "lower"))
    f.add(compare("checkpoint.blocked_vs_sync", f["checkpoint.dcp_async_save.blocked"],
                  f["checkpoint.dcp_save.blocked"]),
          compare("checkpoint.total_vs_sync", f["checkpoint.dcp_async_save.total"], f["checkpoint.dcp_save.total"]))


def token_loader(res) -> dict | None:
    """The token loader, cold: tokens per second of the best configuration of each mode (mmap, read()) over
    its sweep (tokens read ÷ loader time, mean over runs), and each mode's rate at each worker count, all at one
    sequence length and batch (``by_workers``, ``by_workers_at``: chapter 12 sizes each data-parallel rank's loader
    by the fewest workers that feed its GPU, comparing counts doing the same work)."""
    if "sweep" not in res.tables:
        return None
    s = res.table("sweep")
    s = s[(s["cache"] == "cold") & (s["loader_s"] > 0)]
    if s.empty or "tokens" not in s:
        return None
    rate = (s.assign(rate=s["tokens"] / s["loader_s"])
            .groupby(["mode", "seq", "batch", "workers"])["rate"].mean().reset_index())
    modes = {}
    for mode, part in rate.groupby("mode"):
        top = part.loc[part["rate"].idxmax()]
        # worker counts compared like for like: the sequence length and batch run at the most worker counts (the
        # workers sweep), its fastest where two tie; each count's rate there
        shapes = part.groupby(["seq", "batch"]).agg(n=("workers", "nunique"), best=("rate", "max")).reset_index()
        at = shapes.sort_values(["n", "best"], ascending=False).iloc[0]
        same = part[(part["seq"] == at["seq"]) & (part["batch"] == at["batch"])]
        modes[str(mode)] = dict(tokens_per_s=float(top["rate"]), seq=int(top["seq"]), batch=int(top["batch"]),
                                workers=int(top["workers"]),
                                by_workers={int(w): float(g["rate"].max()) for w, g in same.groupby("workers")},
                                by_workers_at=dict(seq=int(at["seq"]), batch=int(at["batch"])))
    best = max(modes, key=lambda m: modes[m]["tokens_per_s"])
    return dict(best=best, modes=modes, itemsize=res.metadata.get("itemsize"),
                cores=int(res.metadata["cores"]) if res.metadata.get("cores") else None)


def analyse(res) -> Facts:
    """Every fact chapter 10's page, chapter 12 and the front page word, from ``res`` alone."""
    f = Facts(CHAPTER, exports=EXPORTS)
    _loader(res, f)
    _sweep(res, f)
    _bandwidth(res, f)
    _kernel(res, f)
    _posix(res, f)
    _overhead(res, f)
    _checkpoint(res, f)
    tl = token_loader(res)
    if tl is not None:
        f.data["token_loader"] = tl
    return analyse_notes(res, f)


# --------------------------------------------------------------------------- what the notebook's notes word
#: A candidate explains a slowdown when it accounts for at least this share of the extra time.
EXPLAINS = 0.5
CAUSE_COLS = ("workers_last_start_s", "main_cpu_s", "workers_cpu_s", "workers_minflt", "main_minflt")


def _loader_notes(res, f: Facts) -> None:
    """At the sweep points where read() was faster (cold): the MB each reader pulled from storage there."""
    if "sweep.cold.read_wins" not in f or not f.number("sweep.cold.read_wins"):
        return
    w = grid_wins(res, "cold")
    if not w["mmap_storage_MB"].notna().all():
        return
    rw = w[w["winner"] < 0]
    f.add(Fact("sweep.cold.read_won.mmap_MB", float(rw["mmap_storage_MB"].mean()), "MB",
               "what mmap read from storage per configuration where read() won", "amount", "lower"),
          Fact("sweep.cold.read_won.read_MB", float(rw["read_storage_MB"].mean()), "MB",
               "what read() read from storage per configuration where it won", "amount", "lower"))


def _data_notes(res, f: Facts) -> None:
    c = res.metadata.get("composition") or {}
    rt, st = c.get("real_tokens") or 0, c.get("synthetic_tokens") or 0
    if not rt + st:
        return
    rd, sd = c.get("real_documents") or 0, c.get("synthetic_documents") or 0
    f.add(Fact("data.tokens", rt + st, "", "tokens in the data set", "count", None),
          Fact("data.documents", rd + sd, "", "documents in the data set", "count", None),
          Fact("data.real_tokens", rt, "", "tokens of real text", "count", None),
          Fact("data.real_documents", rd, "", "documents of real text", "count", None),
          Fact("data.synthetic_tokens", st, "", "synthetic tokens", "count", None))
    f.data["composition"] = {"real_source": c.get("real_source"), "synthetic_lengths": c.get("synthetic_lengths")}


def _calls_notes(res, f: Facts) -> None:
    """The calls the tracer recorded per document piece under read() (the last data-phase row), and with workers."""
    if not has_posix(res):
        return
    import json

    p = res.table("posix")
    r = p[(p["part"] == "posix") & (p["mode"] == "read")].iloc[-1]
    calls = json.loads(r["posix_calls"])
    names = sorted(k for k, v in calls.items() if v)
    for k in names:
        f.add(Fact(f"calls.{k}", calls[k] / r["pieces"], "", k, "count", None))
    f.data["calls_recorded"] = names
    f.add(Fact("calls.stat_seen", "yes" if any("stat" in k for k in calls) else "no", "",
               "the tracer recorded a stat call", "choice", None))
    w = p[(p["part"] == "posix_workers") & (p["mode"] == "read")]
    if len(w):
        w = w.iloc[0]
        f.add(Fact("calls.workers", int(w["workers"]), "", "DataLoader workers traced", "count", None),
              Fact("calls.workers_bin_reads", float(w["posix_bin_reads"]), "", "reads of .bin with workers", "count",
                   None),
              Fact("calls.workers_pieces", float(w["pieces"]), "", "pieces read with workers", "count", None))


SPANS = {"lookup_s": "index lookup", "read_s": "reading", "construct_s": "sample construction", "collate_s": "collate"}


def _spans_notes(res, f: Facts) -> None:
    g = _grid(res)
    cache = "warm" if "warm" in set(g["cache"]) else "cold"
    seq, batch = largest(g)
    f.data["spans_at"] = dict(cache=cache, seq=seq, batch=batch)
    for mode in ("mmap", "read"):
        m = g[(g["mode"] == mode) & (g["seq"] == seq) & (g["batch"] == batch) & (g["cache"] == cache)].mean(
            numeric_only=True)
        sp = {name: float(m[col]) for col, name in SPANS.items()}
        top = max(sp, key=sp.get)
        f.add(Fact(f"spans.{mode}", sp[top] / sum(sp.values()), "", top, "share", None,
                   setting=dict(mode=mode, span=top)))


def _exercise(at: pd.DataFrame, m: pd.Series, r: pd.Series, itemsize: int) -> dict:
    """The page's exercise on paper at the largest cold point: its samples, the bytes they hold, and what each mode
    brought in from storage with how many read calls or major page faults (means over the runs)."""
    def plain(v) -> float | None:
        return None if v is None or pd.isna(v) else float(v)

    return dict(seq=int(at["seq"].iloc[0]), batch=int(at["batch"].iloc[0]), itemsize=int(itemsize),
                samples=plain(at["samples"].mean()), sample_bytes=plain(at["app_bytes"].mean()),
                mmap=dict(bytes=plain(m.get("read_bytes")), faults=plain(m.get("majflt"))),
                read=dict(bytes=plain(r.get("read_bytes")), calls=plain(r.get("syscr"))))


def _theory_notes(res, f: Facts) -> None:
    """Sample data needed against bytes moved from storage at the largest point, cold, and the gap measured."""
    g = _grid(res)
    if "cold" not in set(g["cache"]):
        f.add(Fact("theory", "no cold runs", "", "the theoretical check", "choice", None))
        return
    g = g[g["cache"] == "cold"]
    if g["read_bytes"].isna().all():
        f.add(Fact("theory", "no counters", "", "the theoretical check", "choice", None))
        return
    f.add(Fact("theory", "ran", "", "the theoretical check", "choice", None))
    seq, batch = largest(g)
    at = g[(g["seq"] == seq) & (g["batch"] == batch)]
    itemsize = res.metadata.get("itemsize", 2)
    # the largest point of each mode (sorted by sequence, then batch), as the table shows it
    for mode in ("mmap", "read"):
        gm = g[g["mode"] == mode]
        if gm.empty:
            continue
        s2 = int(gm["seq"].max())
        b2 = int(gm[gm["seq"] == s2]["batch"].max())
        p = gm[(gm["seq"] == s2) & (gm["batch"] == b2)]
        needed = ((s2 + 1) * itemsize * p["samples"] / p["loader_s"] / 1e6).mean()
        moved = (p["read_bytes"] / p["loader_s"] / 1e6).mean()
        amp = (p["read_bytes"] / p["app_bytes"]).mean()
        f.add(Fact(f"theory.{mode}.needed", float(needed), "MB/s", f"sample data {MODE_NAMES[mode]} needed", "rate",
                   None),
              Fact(f"theory.{mode}.moved", float(moved), "MB/s", f"what {MODE_NAMES[mode]} moved from storage", "rate",
                   None),
              Fact(f"theory.{mode}.amplification", float(amp), "×", "the sample bytes", "amount", "lower"))
    m, r = at[at["mode"] == "mmap"].mean(numeric_only=True), at[at["mode"] == "read"].mean(numeric_only=True)
    f.data["exercise"] = _exercise(at, m, r, itemsize)
    if m.get("majflt") and pd.notna(m.get("read_bytes")):
        f.add(Fact("theory.mmap.per_fault", float(m["read_bytes"] / m["majflt"] / 1024), "KiB",
                   "brought in per major page fault under mmap", "amount", None))
    if r.get("syscr") and pd.notna(r.get("read_bytes")):
        f.add(Fact("theory.read.call_bytes", float(r["app_bytes"] / r["syscr"]), "bytes",
                   "asked per read call under read()", "amount", None),
              Fact("theory.read.per_call", float(r["read_bytes"] / r["syscr"] / 1024), "KiB",
                   "brought in per read call under read()", "amount", None))
    size = res.metadata.get("dataset", {}).get("params", {}).get("bytes")
    if size and pd.notna(m.get("read_bytes")) and m["read_bytes"] >= 0.95 * size:
        f.add(Fact("theory.mmap.whole_file", float(m["read_bytes"] / size), "",
                   "of the whole .bin delivered for one configuration under mmap", "share", None))
    ra = res.metadata.get("read_ahead_kb")
    if ra is not None:
        f.add(Fact("read_ahead_kb", float(ra), "KiB", "the device's readahead setting", "amount", None))


def _overhead_notes(res, f: Facts) -> None:
    c = per_call_cost(res)
    if c is not None:
        f.add(Fact("posix_calls", float(c["calls"]), "", "calls recorded at the overhead point", "count", None),
              Fact("posix_extra_ms", float(c["extra_ms"]), "ms", "the extra loader time of the POSIX view", "time",
                   "lower"))
    if "overhead" not in res.tables:
        return
    t = overhead_table(res)
    m = t[(t["mode"] == "mmap") & (t["view"] == "posix")]
    if m.empty:
        return
    m = m.iloc[0]
    f.add(Fact("overhead.mmap.paired", float(m["mean"]) / 100, "", "the POSIX view's overhead under mmap, paired by "
               "round", "share", "lower", int(m["n"]), (float(m["min"]) / 100, float(m["max"]) / 100)),
          Fact("overhead.mmap.inside", "yes" if m["min"] <= 0 <= m["max"] else "no", "",
               "the overhead under mmap within the spread of the rounds", "choice", None))


def _workers_notes(res, f: Facts) -> None:
    """Per cache state and reader: the fastest worker count against the fewest workers swept."""
    s = res.table("sweep")
    w = s[s["part"] == "workers"]
    groups = []
    for (cache, mode), g in w.groupby(["cache", "mode"]):
        runs = {int(k): (x["loader_s"] * 1e3).tolist() for k, x in g.groupby("workers")}
        base, best = min(runs), min(runs, key=lambda k: np.mean(runs[k]))
        key = f"workers_note.{cache}.{mode}"
        groups.append(key)
        for name, k in (("base", base), ("best", best)):
            f.add(measured(f"{key}.{name}", runs[k], unit="ms", quantity="time", better="lower",
                           label=f"{k} workers", setting=dict(workers=k, cache=str(cache), mode=str(mode))))
        if best != base:
            f.add(compare(f"{key}.gain", f[f"{key}.best"], f[f"{key}.base"]))
    f.data["workers_note"] = groups


def _cause(res, cache: str, mode: str) -> dict | None:
    s = res.table("sweep")
    w = s[(s["part"] == "workers") & (s["cache"] == cache) & (s["mode"] == mode)]
    if w.empty or any(c not in w for c in CAUSE_COLS) or w["workers"].nunique() < 2:
        return None
    m = w.groupby("workers")[["loader_s", "steps", *CAUSE_COLS]].mean()
    k = int(m.index.max())
    b = int(m[m.index < k]["loader_s"].idxmin())
    hi, lo = m.loc[k], m.loc[b]
    if hi[list(CAUSE_COLS[1:])].isna().any() or lo[["main_cpu_s"]].isna().any():
        return None

    def per_worker(r, n):
        return float(r["workers_cpu_s"]) / n if n else 0.0

    start_k = float(hi["workers_last_start_s"]) if pd.notna(hi["workers_last_start_s"]) else 0.0
    start_b = float(lo["workers_last_start_s"]) if b and pd.notna(lo["workers_last_start_s"]) else 0.0
    return dict(k=k, b=b, steps=float(hi["steps"]), hi=hi, lo=lo, start_k=start_k, start_b=start_b,
                work_k=per_worker(hi, k), work_b=per_worker(lo, b),
                runs_k=(w[w["workers"] == k]["loader_s"] * 1e3).tolist(),
                runs_b=(w[w["workers"] == b]["loader_s"] * 1e3).tolist())


def _workers_cause(res, f: Facts, cache: str = "warm") -> None:
    """For each reader: is the largest worker count slower than the fastest smaller one, and which measured
    candidate (the later start of more workers, the main process's work, each worker's own work) accounts for
    the extra loader time."""
    s = res.table("sweep")
    if (s["part"] == "workers").any() and not all(col in s for col in CAUSE_COLS):
        f.add(Fact("cause", "no counters", "", "why more workers can be slower", "choice", None))
        return
    modes = []
    for mode in ("mmap", "read"):
        c = _cause(res, cache, mode)
        if c is None:
            continue
        modes.append(mode)
        key, k, b, steps, hi, lo = f"cause.{mode}", c["k"], c["b"], c["steps"], c["hi"], c["lo"]
        f.add(measured(f"{key}.loader_k", c["runs_k"], unit="ms", quantity="time", better="lower",
                       label=f"{k} worker{'s' if k != 1 else ''}", setting=dict(workers=k, steps=int(steps))),
              measured(f"{key}.loader_b", c["runs_b"], unit="ms", quantity="time", better="lower",
                       label=f"{b} worker{'s' if b != 1 else ''}", setting=dict(workers=b)))
        f.add(compare(f"{key}.vs", f[f"{key}.loader_k"], f[f"{key}.loader_b"]))
        loader_k, loader_b = float(hi["loader_s"]), float(lo["loader_s"])
        slower = direction(loader_k, loader_b, tol=0.05) > 0
        f.add(Fact(f"{key}.slower", "yes" if slower else "no", "", "the largest worker count slower", "choice", None))
        if not slower:
            continue
        ms = dict(quantity="time", better="lower")
        f.add(Fact(f"{key}.start_k", 1e3 * c["start_k"], "ms", "the last worker's start", **ms),
              Fact(f"{key}.start_b", 1e3 * c["start_b"], "ms", "the last worker's start", **ms),
              Fact(f"{key}.main_k", 1e3 * float(hi["main_cpu_s"]) / steps, "ms", "main CPU per batch", **ms),
              Fact(f"{key}.main_b", 1e3 * float(lo["main_cpu_s"]) / steps, "ms", "main CPU per batch", **ms),
              Fact(f"{key}.work_k", 1e3 * c["work_k"], "ms", "CPU per worker", **ms),
              Fact(f"{key}.work_b", 1e3 * c["work_b"], "ms", "CPU per worker", **ms),
              Fact(f"{key}.faults_k", float(hi["workers_minflt"]) / steps, "", "page faults per batch", "count", None),
              Fact(f"{key}.faults_b", float(lo["workers_minflt"]) / steps if b else 0.0, "", "page faults per batch",
                   "count", None))
        extra = loader_k - loader_b
        cand = {"start": c["start_k"] - c["start_b"], "main": float(hi["main_cpu_s"] - lo["main_cpu_s"]),
                "work": c["work_k"] - c["work_b"]}
        top = max(cand, key=cand.get)
        share = cand[top] / extra if extra > 0 else 0.0
        f.add(Fact(f"{key}.extra", 1e3 * extra, "ms", "the extra loader time", **ms),
              Fact(f"{key}.cause", top if share >= EXPLAINS else "none", "", "what accounts for the extra time",
                   "choice", None, setting=dict(largest=top)),
              Fact(f"{key}.cause_share", min(max(share, 0.0), 1.0), "", "its share of the extra time", "share", None))
    f.data["cause_modes"] = modes
    f.data["cause_cache"] = cache


def _checkpoint_notes(f: Facts) -> None:
    b, t = f.number("checkpoint.dcp_async_save.blocked"), f.number("checkpoint.dcp_async_save.total")
    if b is not None and t is not None:
        f.add(Fact("checkpoint.async_background", t - b, "s", "the writing async_save did after it returned", "time",
                   None))


def _checkpoint_posix_notes(res, f: Facts) -> None:
    """The checkpoint writes as the POSIX view recorded them: per method (``data["checkpoint_posix"]``: its id,
    the writes, bytes and fsyncs recorded, the bytes the kernel counted, the calls recorded, and whether the
    tracer missed most of the bytes); and the checkpoint written after every sweep point
    (``checkpoint_sweep.*``: the range of its write calls and bytes, and whether they were identical)."""
    if "posix_checkpoint" in res.tables:
        f.data["checkpoint_posix"] = [
            dict(method=str(r["method"]), writes=float(r["posix_writes"]), write_bytes=float(r["posix_write_bytes"]),
                 fsyncs=float(r["posix_fsyncs"]), kernel_write_bytes=float(r["kernel_write_bytes"]),
                 blind=bool(r["posix_write_bytes"] < 0.5 * r["kernel_write_bytes"]),
                 calls=json.loads(r["posix_calls"]))
            for _, r in res.table("posix_checkpoint").iterrows()]
    if not has_posix(res) or "ckpt_posix_writes" not in res.table("posix"):
        return
    p = res.table("posix")
    w, b = p["ckpt_posix_writes"], p["ckpt_posix_write_bytes"]
    f.add(Fact("checkpoint_sweep.writes_min", float(w.min()), "", "the fewest write calls of one checkpoint",
               "count", None),
          Fact("checkpoint_sweep.writes_max", float(w.max()), "", "the most write calls of one checkpoint", "count",
               None),
          Fact("checkpoint_sweep.bytes_min", float(b.min()), "B", "the fewest bytes written for one checkpoint",
               "amount", None),
          Fact("checkpoint_sweep.bytes_max", float(b.max()), "B", "the most bytes written for one checkpoint",
               "amount", None),
          Fact("checkpoint_sweep.identical", "yes" if w.nunique() == 1 and b.nunique() == 1 else "no", "",
               "whether every sweep point's checkpoint made the same writes", "choice", None))


#: DFTracer's application spans at the largest point: (name of the fact, column of the POSIX table, its unit:
#: "ms" from seconds, "" a count, what it counts).
DFT_APP = (("samples", "app_sample_n", "", "sample fetches"), ("read_ms", "app_read_s", "ms", "time in reads"),
           ("bin_reads", "posix_bin_reads", "", "read calls on the .bin file in the POSIX view"),
           ("lookup_ms", "app_index_lookup_s", "ms", "time in index lookups"))


def _dft_app_notes(res, f: Facts) -> None:
    """What DFTracer's Python API recorded in the same trace as the POSIX calls, at the largest grid point:
    ``data["dft_app"]["state"]`` says whether it ran (``predates``: a result from before the spans, ``none``: no
    span recorded, ``recorded``), ``dft_app.<mode>.*`` the spans and the POSIX view's reads of ``.bin``, and
    ``dft_app.seen`` whether the spans saw reads under mmap that the POSIX view did not."""
    if not has_posix(res):
        return
    p = res.table("posix")
    if "app_sample_n" not in p:
        f.data["dft_app"] = {"state": "predates"}
        return
    g = p[p["part"] == "posix"] if "part" in p else p
    seq, batch = int(g["seq"].max()), int(g["batch"].max())
    at = g[(g["seq"] == seq) & (g["batch"] == batch)].set_index("mode")
    if not {"mmap", "read"} <= set(at.index) or float(at["app_sample_n"].sum()) == 0:
        f.data["dft_app"] = {"state": "none"}
        return
    workers = p[p["part"] == "posix_workers"] if "part" in p else p.iloc[0:0]
    f.data["dft_app"] = {"state": "recorded", "seq": seq, "batch": batch, "workers": bool(len(workers))}
    for mode in ("mmap", "read"):
        r = at.loc[mode]
        f.add(*(Fact(f"dft_app.{mode}.{name}", float(r[col]) * (1e3 if unit == "ms" else 1), unit,
                     f"{what} under {MODE_NAMES[mode]}", "time" if unit else "count", None)
                for name, col, unit, what in DFT_APP))
    mm = at.loc["mmap"]
    seen = float(mm["app_read_s"]) > 0 and float(mm["posix_bin_reads"]) < 0.01 * float(mm["app_sample_n"])
    f.add(Fact("dft_app.seen", "yes" if seen else "no", "", "whether only the application spans saw mmap's reads",
               "choice", None))


def analyse_notes(res, f: Facts) -> Facts:
    """The facts the notebook's notes word (beside the key results)."""
    _loader_notes(res, f)
    _data_notes(res, f)
    _calls_notes(res, f)
    _spans_notes(res, f)
    _theory_notes(res, f)
    _overhead_notes(res, f)
    _workers_notes(res, f)
    _workers_cause(res, f)
    _checkpoint_notes(f)
    _checkpoint_posix_notes(res, f)
    _dft_app_notes(res, f)
    return f
